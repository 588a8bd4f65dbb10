#!/usr/bin/env python
"""A Dask worker's memory through a cluster build, with its statistical profiler on or off.

One ``LocalCluster`` worker process builds ``bof-spm`` features (codebook 256 words, 20 000
samples, 50 training images per class, as ``simulate_scale.py build``) from a folder of images,
cold cache; after each stage the worker reports its resident memory (``VmRSS``), its peak
(``VmHWM``) and the number of profile cycles it keeps.  Run it on two image counts
(``simulate_scale.py generate``) with ``--profile on`` and ``off``: what grows with the images
and what grows with the build's duration.  ``--tracemalloc`` also lists the worker's largest
Python allocations at the end (slow: the build runs several times longer)::

    python benchmarks/simulate_scale.py generate --out /tmp/synth-1k --n 1000
    python studies/probe_worker_memory.py --images /tmp/synth-1k --work /tmp/probe --profile on --json on-1k.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

_TRACEMALLOC_PRELOAD = "import tracemalloc\ntracemalloc.start(6)\n"


def _probe(top: int = 0, dask_worker=None) -> dict:
    """The worker's memory (run in the worker by ``client.run``)."""
    import gc
    import tracemalloc

    gc.collect()
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    report = {
        "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
        "peak_rss_mib": int(status["VmHWM"].split()[0]) / 1024,
        "profile_cycles": len(dask_worker.profile_history),
    }
    if tracemalloc.is_tracing():
        report["traced_mib"] = tracemalloc.get_traced_memory()[0] / 2**20
    if top and tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        report["largest"] = [
            {
                "mib": round(stat.size / 2**20, 2),
                "blocks": stat.count,
                "where": [f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}" for frame in stat.traceback][
                    -4:
                ],
            }
            for stat in snapshot.statistics("traceback")[:top]
        ]
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", required=True, type=Path, help="folder of class folders")
    parser.add_argument("--work", required=True, type=Path, help="scratch folder (cache and feature set; emptied)")
    parser.add_argument("--profile", choices=("on", "off"), default="on", help="the workers' statistical profiler")
    parser.add_argument("--tracemalloc", action="store_true", help="trace the worker's Python allocations")
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()

    import dask
    import distributed

    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.settings.config import load_config

    config = load_config("bof-spm", {"codebook": {"size": 256, "n_samples": 20000}, "dataset": {"train_per_class": 50}})
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    preload = []
    if args.tracemalloc:
        (args.work / "trace_preload.py").write_text(_TRACEMALLOC_PRELOAD)
        preload = [str(args.work / "trace_preload.py")]
    stages = []
    with (
        dask.config.set({"distributed.worker.profile.enabled": args.profile == "on"}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0", preload=preload
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):

        def progress(iterable, description, total):
            yield from iterable
            stages.append({"after": description, **next(iter(client.run(_probe).values()))})

        start = time.perf_counter()
        result = build_feature_set(
            args.images,
            args.work / "fs",
            config,
            cache_dir=args.work / "cache",
            scheduler=cluster.scheduler_address,
            progress=progress,
        )
        wall = time.perf_counter() - start
        stages.append({"after": "build", **next(iter(client.run(_probe, 25 if args.tracemalloc else 0).values()))})
    report = {
        "images": str(args.images),
        "n_images": result.n_images,
        "profile": args.profile,
        "tracemalloc": args.tracemalloc,
        "wall_seconds": round(wall, 1),
        "stages": stages,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
