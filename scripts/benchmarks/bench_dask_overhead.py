"""Dask scheduler overhead per task, against the cost of one image in each per-image stage.

Measures, in one run on this machine:

1. tasks/s of a no-op task on a ``LocalCluster`` of ``--workers`` processes (one thread each),
   submitted through :func:`classify_images.pipeline.execution.cluster.iter_tasks` (one call per task,
   and ``--batch`` calls per task), beside joblib's loky pool with the same number of
   workers and one call per dispatch (the peer: today's single-machine path);
2. the seconds per image of the three per-image stages (check, descriptor sample, encode +
   pool) in this process, on ``--images`` images of ``--dataset`` with ``--config``;

and the weight of a shard of their vectors, dense and CSR; and prints, per stage, the share of the work lost to the scheduler at each batch size
measured (its cost per call in worker-seconds over the stage's seconds per image), and the
smallest batch size whose share is at most ``--max-overhead``.  The no-op is the builtin
``abs``: pickled by reference, as the pipeline's module-level stage functions are (a function
defined in ``__main__`` would be pickled by value with every call and measure that instead).

Usage::

    python benchmarks/bench_dask_overhead.py --dataset ../shared/datasets/scene15 --config bof-spm \\
        [--workers 2] [--tasks 2000] [--images 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import _bench_utils as U
import numpy as np
from joblib import Parallel, delayed

#: The no-op call of a task.
_noop = abs


def _dask_seconds(client, n_calls: int, batch_size: int) -> float:
    """Wall seconds of ``n_calls`` no-op calls in tasks of ``batch_size`` calls."""
    from classify_images.pipeline.execution.cluster import iter_tasks

    calls = [delayed(_noop)(k) for k in range(n_calls)]
    start = time.perf_counter()
    results = dict(iter_tasks(client, calls, "noop", batch_size=batch_size))
    seconds = time.perf_counter() - start
    assert [results[k] for k in range(n_calls)] == list(range(n_calls))
    return seconds


def _loky_seconds(n_jobs: int, n_calls: int) -> float:
    """Wall seconds of ``n_calls`` no-op calls through joblib's loky pool, one call per dispatch."""
    start = time.perf_counter()
    Parallel(n_jobs=n_jobs, batch_size=1)(delayed(_noop)(k) for k in range(n_calls))
    return time.perf_counter() - start


def _stage_seconds(dataset: Path, config_name: str, n_images: int) -> dict[str, float]:
    """Seconds per image of check, descriptor sample and encode + pool (no cache, one process)."""
    from classify_images.pipeline.extraction.extractor import FeatureExtractor
    from classify_images.pipeline.extraction.fitting import learn_codebook
    from classify_images.pipeline.extraction.stages import StageCache
    from classify_images.pipeline.settings.config import load_config
    from classify_images.pipeline.settings.dataset import discover_dataset, file_fingerprint

    config = load_config(config_name)
    found = discover_dataset(dataset)
    rng = np.random.default_rng(0)
    picked = sorted(rng.choice(len(found.paths), n_images, replace=False))
    paths = [str(found.absolute(found.paths[k])) for k in picked]
    fingerprints = [file_fingerprint(p) for p in paths]
    cache = StageCache(None, cache_descriptors=False)
    sift, max_side = config.sift_params(), config.image.max_side
    seconds = {}
    seconds["check"] = (
        U.best_time(
            lambda: [
                cache.check_image(p, f, max_side, max(config.sift.patch_sizes)) for p, f in zip(paths, fingerprints)
            ],
            repeats=3,
        )
        / n_images
    )
    samples = [cache.descriptor_sample(p, f, max_side, sift, 200, 0) for p, f in zip(paths, fingerprints)]
    seconds["sample"] = (
        U.best_time(
            lambda: [cache.descriptor_sample(p, f, max_side, sift, 200, 0) for p, f in zip(paths, fingerprints)],
            repeats=3,
        )
        / n_images
    )
    sample = np.concatenate(samples)
    size = min(config.codebook.size, sample.shape[0] // 4)
    small = type(config).from_dict(
        {**config.to_dict(), "codebook": {**config.to_dict()["codebook"], "size": size, "n_iter": 5}}
    )
    extractor = FeatureExtractor(small, learn_codebook(sample, small, cache), cache=cache)
    extractor.pooled(paths[0], fingerprints[0])  # compile the numba kernels outside the timing
    seconds["encode+pool"] = (
        U.best_time(lambda: [extractor.pooled(p, f) for p, f in zip(paths, fingerprints)], repeats=3) / n_images
    )
    seconds["codebook_size"] = size
    # What a shard of these rows weighs, dense and CSR (the store's two formats).
    rows = np.stack([extractor.vector(p, f) for p, f in zip(paths, fingerprints)])
    dense = len(write_shard_bytes(rows, "dense"))
    seconds["shard"] = {
        "density": float(np.count_nonzero(rows) / rows.size),
        "dense_bytes_per_row": dense / n_images,
        "csr_bytes_per_row": len(write_shard_bytes(rows, "csr")) / n_images,
    }
    return seconds


def write_shard_bytes(rows: np.ndarray, fmt: str) -> bytes:
    """The bytes of a shard of ``rows`` in format ``fmt`` (written to a temporary folder)."""
    import tempfile

    from classify_images.pipeline.storage.shard_store import write_shard

    with tempfile.TemporaryDirectory() as folder:
        entry = write_shard(folder, "X_train", 0, rows, fmt)
        return (Path(folder) / entry["file"]).read_bytes()


def main() -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--config", default="bof-spm")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--batches", default="8,32,256", help="calls per task to measure besides 1")
    parser.add_argument("--images", type=int, default=40)
    parser.add_argument("--max-overhead", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()

    from classify_images.pipeline.execution.cluster import ClusterSpec, open_client

    result = {"machine": U.announce_machine(), "workers": args.workers, "tasks": args.tasks, "repeats": args.repeats}
    batches = [1] + [int(b) for b in args.batches.split(",")]
    best: dict[str, float] = {}
    with open_client(ClusterSpec(n_workers=args.workers)) as client:
        Parallel(n_jobs=args.workers, batch_size=1)(delayed(_noop)(k) for k in range(50))  # start loky's workers
        _dask_seconds(client, 64, 1)  # warm-up
        for _ in range(args.repeats):  # interleaved, the best of each: the machine is shared
            for batch in batches:
                n_calls = args.tasks * max(1, batch // 4)
                key = f"dask_batch_{batch}"
                best[key] = min(best.get(key, np.inf), _dask_seconds(client, n_calls, batch) / n_calls)
            best["loky"] = min(best.get("loky", np.inf), _loky_seconds(args.workers, args.tasks) / args.tasks)
    result["dask_tasks_per_s"] = round(1 / best["dask_batch_1"], 1)
    for batch in batches[1:]:
        result[f"dask_calls_per_s_batch_{batch}"] = round(1 / best[f"dask_batch_{batch}"], 1)
        result[f"dask_tasks_per_s_batch_{batch}"] = round(1 / best[f"dask_batch_{batch}"] / batch, 1)
    result["loky_calls_per_s"] = round(1 / best["loky"], 1)
    # What the scheduler costs per call, in worker-seconds (the workers wait for it): the share
    # of an image's work lost to it is that over the stage's seconds per image.
    per_call = {batch: args.workers * best[f"dask_batch_{batch}"] for batch in batches}
    result["overhead_worker_s_per_call"] = {str(batch): round(value, 6) for batch, value in per_call.items()}
    stages = _stage_seconds(Path(args.dataset), args.config, args.images)
    result["seconds_per_image"] = {k: round(v, 5) for k, v in stages.items() if k not in ("codebook_size", "shard")}
    result["shard_of_these_rows"] = {k: round(v, 4) for k, v in stages["shard"].items()}
    result["codebook_size_for_encode_timing"] = stages["codebook_size"]
    result["overhead_share"], result["smallest_batch_within_max_overhead"] = {}, {}
    for stage in ("check", "sample", "encode+pool"):
        shares = {batch: per_call[batch] / stages[stage] for batch in batches}
        result["overhead_share"][stage] = {str(batch): round(share, 4) for batch, share in shares.items()}
        within = [batch for batch in batches if shares[batch] <= args.max_overhead]
        result["smallest_batch_within_max_overhead"][stage] = min(within) if within else None
    print(json.dumps(result, indent=2))
    if args.json:
        U.write_json(args.json, result)


if __name__ == "__main__":
    main()
