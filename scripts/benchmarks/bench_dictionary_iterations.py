#!/usr/bin/env python
"""ScSPM accuracy as a function of the dictionary's mini-batches (``spams.trainDL`` iterations).

For each ``--iterations`` value, builds the ScSPM feature set of a dataset with
``[codebook] n_iter`` set to it (everything else from ``configs/scspm.toml``; one
shared stage cache, so the descriptors and the descriptor sample are computed once
and only the dictionary and the codes are redone), records the dictionary's time
from the manifest, then runs the 3-split linear-SVM protocol of
``benchmarks/bench_scspm_baselines.py`` (C by 3-fold CV on each split's training rows)
on it.  Writes one JSON with a row per iteration count.

Example (issue 15, item 2)::

    python benchmarks/bench_dictionary_iterations.py --dataset ../shared/datasets/scene15 \
        --iterations 100 250 500 1000 --work dl-curve --json dl-curve.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=str(HERE.parents[2] / "shared/datasets/scene15"))
    parser.add_argument("--iterations", type=int, nargs="+", default=[100, 250, 500, 1000])
    parser.add_argument("--work", required=True, help="folder for the feature sets and the shared stage cache")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    from _bench_utils import announce_machine

    machine = announce_machine()

    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.settings.config import load_config

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n_iter in args.iterations:
        config = load_config("scspm", overrides={"codebook": {"n_iter": n_iter}})
        out = work / f"scspm-iter{n_iter}"
        start = time.perf_counter()
        result = build_feature_set(args.dataset, out, config, n_jobs=args.n_jobs, cache_dir=work / "cache")
        build_seconds = time.perf_counter() - start
        timings = json.loads((out / "manifest.json").read_text())["timings"]
        accuracy_json = work / f"linear-iter{n_iter}.json"
        subprocess.run(
            [
                sys.executable,
                str(HERE / "bench_scspm_baselines.py"),
                "--methods",
                "ScSPM",
                "--scspm",
                str(out),
                "--bof",
                "unused",
                "--lspm",
                "unused",
                "--repeats",
                str(args.repeats),
                "--out",
                str(accuracy_json),
            ],
            check=True,
        )
        rows.append(
            {
                "n_iter": n_iter,
                "mini_batches_of": 512,
                "build_seconds": round(build_seconds, 1),
                "reused": result.reused,
                "dictionary_seconds": timings.get("codebook"),
                "encode_seconds": timings.get("encode+pool"),
                "linear": json.loads(accuracy_json.read_text()),
                "load_average_after": os.getloadavg(),
            }
        )
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
        print(json.dumps(rows[-1], indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
