"""Dask scheduler overhead per task, against the cost of one image in each per-image stage.

Measures, in one run on this machine:

1. tasks/s of a no-op task on a ``LocalCluster`` of ``--workers`` processes (one thread each),
   submitted through :func:`classify_images.pipeline.cluster.iter_tasks` (one call per task,
   and ``--batch`` calls per task), beside joblib's loky pool with the same number of
   workers and one call per dispatch (the peer: today's single-machine path);
2. the seconds per image of the three per-image stages (check, descriptor sample, encode +
   pool) in this process, on ``--images`` images of ``--dataset`` with ``--config``;

and prints, per stage, the smallest batch size (a power of two) for which the scheduler's
cost per task is at most ``--max-overhead`` of the task's work.  The no-op is the builtin
``abs``: pickled by reference, as the pipeline's module-level stage functions are (a function
defined in ``__main__`` would be pickled by value with every call and measure that instead).

Usage::

    python scripts/bench_dask_overhead.py --dataset ../shared/datasets/scene15 --config bof-spm \\
        [--workers 2] [--tasks 2000] [--images 40] [--json out.json]
"""

from __future__ import annotations

import _bench_utils as U  # noqa: F401  (pins BLAS threads to one, first)

import argparse
import json
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed


#: The no-op call of a task.
_noop = abs


def _tasks_per_second(client, n_tasks: int, batch_size: int) -> float:
    from classify_images.pipeline.cluster import iter_tasks

    calls = [delayed(_noop)(k) for k in range(n_tasks)]
    list(iter_tasks(client, calls[: 4 * batch_size], "warm-up", batch_size=batch_size))
    start = time.perf_counter()
    results = dict(iter_tasks(client, calls, "noop", batch_size=batch_size))
    seconds = time.perf_counter() - start
    assert [results[k] for k in range(n_tasks)] == list(range(n_tasks))
    return (n_tasks / batch_size) / seconds


def _loky_calls_per_second(n_jobs: int, n_calls: int) -> float:
    Parallel(n_jobs=n_jobs, batch_size=1)(delayed(_noop)(k) for k in range(50))  # start the workers
    start = time.perf_counter()
    Parallel(n_jobs=n_jobs, batch_size=1)(delayed(_noop)(k) for k in range(n_calls))
    return n_calls / (time.perf_counter() - start)


def _stage_seconds(dataset: Path, config_name: str, n_images: int) -> dict[str, float]:
    """Seconds per image of check, descriptor sample and encode + pool (no cache, one process)."""
    from classify_images.pipeline.build import _learn_codebook
    from classify_images.pipeline.config import load_config
    from classify_images.pipeline.dataset import discover_dataset, file_fingerprint
    from classify_images.pipeline.extractor import FeatureExtractor
    from classify_images.pipeline.stages import StageCache

    config = load_config(config_name)
    found = discover_dataset(dataset)
    rng = np.random.default_rng(0)
    picked = sorted(rng.choice(len(found.paths), n_images, replace=False))
    paths = [str(found.absolute(found.paths[k])) for k in picked]
    fingerprints = [file_fingerprint(p) for p in paths]
    cache = StageCache(None, cache_descriptors=False)
    sift, max_side = config.sift_params(), config.image.max_side
    seconds = {}
    start = time.perf_counter()
    for path, fingerprint in zip(paths, fingerprints):
        cache.check_image(path, fingerprint, max_side, max(config.sift.patch_sizes))
    seconds["check"] = (time.perf_counter() - start) / n_images
    start = time.perf_counter()
    samples = [cache.descriptor_sample(p, f, max_side, sift, 200, 0) for p, f in zip(paths, fingerprints)]
    seconds["sample"] = (time.perf_counter() - start) / n_images
    sample = np.concatenate(samples)
    size = min(config.codebook.size, sample.shape[0] // 4)
    small = type(config).from_dict({**config.to_dict(), "codebook": {**config.to_dict()["codebook"], "size": size,
                                                                      "n_iter": 5}})
    extractor = FeatureExtractor(small, _learn_codebook(sample, small, cache, lambda message: None), cache=cache)
    extractor.pooled(paths[0], fingerprints[0])  # compile the numba kernels outside the timing
    start = time.perf_counter()
    for path, fingerprint in zip(paths, fingerprints):
        extractor.pooled(path, fingerprint)
    seconds["encode+pool"] = (time.perf_counter() - start) / n_images
    seconds["codebook_size"] = size
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--config", default="bof-spm")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--batches", default="8,32,256", help="calls per task to measure besides 1")
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--max-overhead", type=float, default=0.05)
    parser.add_argument("--json")
    args = parser.parse_args()

    from classify_images.pipeline.cluster import ClusterSpec, open_client

    result = {"machine": U.machine(), "workers": args.workers, "tasks": args.tasks}
    with open_client(ClusterSpec(n_workers=args.workers)) as client:
        result["dask_tasks_per_s"] = round(_tasks_per_second(client, args.tasks, 1), 1)
        for batch in (int(b) for b in args.batches.split(",")):
            result[f"dask_calls_per_s_batch_{batch}"] = round(
                batch * _tasks_per_second(client, args.tasks * batch // 4, batch), 1)
    result["loky_calls_per_s"] = round(_loky_calls_per_second(args.workers, args.tasks), 1)
    # the client's cost per task, in worker-seconds: what a task must outweigh
    overhead = args.workers / result["dask_tasks_per_s"]
    result["overhead_s_per_task"] = round(overhead, 5)
    stages = _stage_seconds(Path(args.dataset), args.config, args.images)
    result["seconds_per_image"] = {k: round(v, 5) for k, v in stages.items() if k != "codebook_size"}
    result["codebook_size_for_encode_timing"] = stages["codebook_size"]
    result["batch_size_for_max_overhead"], result["overhead_share_at_32"] = {}, {}
    for stage in ("check", "sample", "encode+pool"):
        batch = 1
        while overhead / (batch * stages[stage]) > args.max_overhead:
            batch *= 2
        result["batch_size_for_max_overhead"][stage] = batch
        result["overhead_share_at_32"][stage] = round(overhead / (32 * stages[stage]), 4)
    print(json.dumps(result, indent=2))
    if args.json:
        U.write_json(args.json, result)


if __name__ == "__main__":
    main()
