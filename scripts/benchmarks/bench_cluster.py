#!/usr/bin/env python
"""``build-features`` on one machine (joblib's loky pool) against a Dask ``LocalCluster``, side by side.

Each mode builds the same feature set in one run of this script, in turn, with its own
empty stage cache (a cold build), and is measured by
:func:`simulate_scale.run_build`: wall and CPU seconds per stage, peak memory per process,
and on a cluster the scheduler's counters (:mod:`_cluster_metrics`: tasks, tasks/s, task
compute seconds, bytes sent).  The feature sets of every mode are compared with the first
one's, array by array.

The codebook is learnt in the client process whatever the mode (one k-means on a sample,
not a per-image task); with ``--share-codebook`` the later modes start from a cache that
holds only the first mode's codebook entry, so that every per-image stage is cold in every
mode and the codebook's minutes are spent once.

Example (docs/benchmarks/cluster-and-scale.md, "Dask cluster vs loky, and a 50 000-image simulated build")::

    python benchmarks/bench_cluster.py --dataset ../shared/datasets/scene15 --config bof-spm \
        --work cache/scale-sim/bench --modes loky:2 local:1 local:2 --share-codebook \
        --json bench-cluster.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from simulate_scale import run_build

_STAGES = Path("joblib") / "classify_images" / "pipeline" / "extraction" / "stages"


def _namespace(args, mode: str, out: Path, cache: Path) -> argparse.Namespace:
    kind, n, store = (mode.split(":") + [None])[:3]
    return argparse.Namespace(
        images=args.dataset,
        out=str(out),
        cache_dir=str(cache),
        keep_cache=args.share_codebook and cache.exists(),
        config=args.config,
        codebook_size=args.codebook_size,
        n_samples=args.n_samples,
        train_per_class=args.train_per_class,
        n_jobs=int(n) if kind == "loky" else 1,
        scheduler=None,
        cluster=f"local:{n}" if kind == "local" else None,
        store=(store or args.store) if kind == "local" else None,
        batch_size=args.batch_size if kind == "local" else None,
    )


def _count_images(batch: list) -> int:
    """A task that does nothing with its batch (the scheduler's cost per task, alone)."""
    return len(batch)


def task_overhead(n_workers: int, n_tasks: int, batch_size: int) -> dict:
    """Wall and CPU per task of ``n_tasks`` no-op tasks on a ``LocalCluster`` of ``n_workers``
    (one thread each), each carrying ``batch_size`` (path, SHA-1) pairs as a build's task does:
    the scheduler's floor per task, with the client and the scheduler in this process."""
    import logging
    import time

    from distributed import Client, LocalCluster
    from simulate_scale import ProcessTreeMonitor

    batches = [
        [(f"/data/imagenet/train/n{t:08d}/img_{i:03d}.JPEG", f"{t * batch_size + i:040x}") for i in range(batch_size)]
        for t in range(n_tasks)
    ]
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(n_workers)
        client.gather(client.map(_count_images, batches[:50], pure=False))  # warm: function shipped, workers ready
        with ProcessTreeMonitor(interval=0.2) as monitor:
            monitor.mark("tasks")
            start = time.perf_counter()
            assert sum(client.gather(client.map(_count_images, batches, pure=False))) == n_tasks * batch_size
            wall = time.perf_counter() - start
            monitor.mark("done")
    main = monitor.stage_main_cpu.get("tasks", 0.0)
    return {
        "workers": n_workers,
        "tasks": n_tasks,
        "batch_size": batch_size,
        "wall_s": round(wall, 3),
        "tasks_per_second": round(n_tasks / wall, 1),
        "wall_ms_per_task": round(1000 * wall / n_tasks, 3),
        "client_and_scheduler_cpu_ms_per_task": round(1000 * main / n_tasks, 3),
        "worker_cpu_ms_per_task": round(1000 * (monitor.stage_cpu.get("tasks", 0.0) - main) / n_tasks, 3),
    }


def _same_features(first: Path, other: Path) -> bool:
    from classify_images.pipeline.storage.feature_store import load_feature_set

    a, b = load_feature_set(first), load_feature_set(other)
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in ((a.X_train, b.X_train), (a.X_test, b.X_test), (a.y_train, b.y_train), (a.y_test, b.y_test))
    )


def _row(mode: str, report: dict, base: dict) -> str:
    stage = report["stage_wall_seconds"]
    per_image = sum(stage.get(k, 0.0) for k in ("check", "sample", "encode+pool"))
    base_stage = base["stage_wall_seconds"]
    base_per_image = sum(base_stage.get(k, 0.0) for k in ("check", "sample", "encode+pool"))
    dask = report.get("dask") or {}
    encode = (dask.get("task_prefixes") or {}).get("encode-pool", {})
    cells = [
        mode,
        f"{report['wall_seconds']:.1f}",
        f"{per_image:.1f}",
        f"{stage.get('encode+pool', 0):.1f}",
        f"{per_image / base_per_image:.2f}",
        f"{report['cpu_seconds']:.0f}",
        str(dask.get("tasks", "—")),
        str(encode.get("tasks_per_second", "—")),
        str(dask.get("bytes_sent_per_image", "—")),
        str(dask.get("scheduler_overhead_ms_per_task", "—")),
        f"{report['memory']['main_peak_mib']:.0f} / {report['memory']['worker_peak_mib']:.0f}",
        str(report.get("identical_to_first", "—")),
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset")
    parser.add_argument("--config", default="bof-spm")
    parser.add_argument("--codebook-size", type=int, help="override codebook.size")
    parser.add_argument("--n-samples", type=int, help="override codebook.n_samples")
    parser.add_argument("--train-per-class", type=int, help="override dataset.train_per_class")
    parser.add_argument("--work", required=True, type=Path, help="feature sets and caches go here (replaced)")
    parser.add_argument(
        "--modes",
        nargs="*",
        default=["loky:2", "local:1", "local:2"],
        help="loky:N (joblib, N processes) or local:N[:STORE] (LocalCluster of N workers, --store STORE)",
    )
    parser.add_argument("--store", help="--store of the cluster modes (default: the build's default)")
    parser.add_argument("--batch-size", type=int, help="images per Dask task of the cluster modes")
    parser.add_argument(
        "--share-codebook",
        action="store_true",
        help="later modes reuse the first mode's codebook cache entry (per-image stages stay cold)",
    )
    parser.add_argument(
        "--noop-tasks",
        type=int,
        default=0,
        help="first measure the scheduler's cost per task with this many no-op tasks "
        "(batches of --batch-size or 32 pairs) on 1 and 2 workers",
    )
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.modes and not args.dataset:
        parser.error("--dataset is needed to build (or give --modes with no value to measure --noop-tasks only)")
    from _bench_utils import announce_machine, write_json

    reports: dict = {"machine": announce_machine()}
    if args.noop_tasks:
        reports["noop"] = [task_overhead(n, args.noop_tasks, args.batch_size or 32) for n in (1, 2)]
        print(json.dumps(reports["noop"], indent=2), flush=True)

    first_out, first_cache = None, None
    for mode in args.modes:
        name = mode.replace(":", "-")
        out, cache = args.work / f"fs-{name}", args.work / f"cache-{name}"
        shutil.rmtree(cache, ignore_errors=True)
        if args.share_codebook and first_cache is not None:
            shutil.copytree(first_cache / _STAGES / "learn_codebook", cache / _STAGES / "learn_codebook")
            cache.chmod(0o700)
        print(f"== {mode}", flush=True)
        report = run_build(_namespace(args, mode, out, cache))
        if first_out is None:
            first_out, first_cache = out, cache
        else:
            report["identical_to_first"] = _same_features(first_out, out)
        reports[mode] = report
        print(json.dumps(report, indent=2), flush=True)

    if not args.modes:
        return 0
    base = reports[args.modes[0]]
    print(
        "| mode | wall s | per-image stages s | encode+pool s | ratio to "
        f"{args.modes[0]} | CPU s | tasks | encode tasks/s | bytes sent / image | overhead ms / task | "
        "peak MiB main / worker | identical |"
    )
    print("|---|" + "---:|" * 11)
    for mode in args.modes:
        print(_row(mode, reports[mode], base))
    write_json(args.json, reports)
    return 0


if __name__ == "__main__":
    sys.exit(main())
