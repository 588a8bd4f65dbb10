#!/usr/bin/env python
"""Benchmark of ``build-features``: time, peak memory and cache size per stage.

Builds a feature set from images with an empty cache (cold run), then again
(warm run: must take seconds), recording for each stage its wall time, the peak
resident memory of this process and its joblib workers together (sampled from
/proc every 0.2 s), the CPU seconds of the parent and of the workers per stage
(where the parent serialises the work) and the size of each cache folder.  Optionally fits
scikit-learn's LinearSVC on the result as a sanity check of the features.

Example (the issue's numbers)::

    python benchmarks/bench_build_features.py --dataset ../shared/datasets/scene15 \
        --config scspm --out feature-sets/scene15-scspm --n-jobs 2 --linear-svc
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _process_tree(root_pid: int) -> list[tuple[int, int, float]]:
    """(pid, resident bytes, CPU seconds used so far) of a process and all its descendants (Linux /proc)."""
    try:
        out = subprocess.run(["ps", "-eo", "pid,ppid,rss"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for line in out.splitlines()[1:]:
        pid, ppid, kb = (int(v) for v in line.split())
        children.setdefault(ppid, []).append(pid)
        rss[pid] = kb * 1024
    tree = []
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        tree.append((pid, rss.get(pid, 0), _cpu_seconds(pid)))
        stack.extend(children.get(pid, []))
    return tree


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (fields 14 and 15 of /proc/PID/stat); 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


class StageMonitor:
    """Peak memory and CPU use of the process tree per stage (stage named by the progress callback).

    Every 0.2 s it reads the resident memory and the CPU seconds of this
    process (the parent: it schedules tasks, receives results, writes rows)
    and of every descendant (the workers).  A worker's CPU seconds are taken
    as the largest value seen for its pid, so one that exits is still counted.
    Per stage it reports the wall seconds, the CPU seconds of the parent and
    of the workers, and the CPU use in percent of one core (200 % = both
    cores of a 2-core machine busy).  A stage runs from one progress bar to
    the next, so the codebook (learnt in the parent, between the sample and
    the encoding bars) counts in "sample descriptors"; the manifest's
    ``timings`` split the two.
    """

    def __init__(self) -> None:
        self.stage = "discover+check"
        self.peaks: dict[str, int] = {}
        self.cpu: dict[str, dict[str, float]] = {}
        self._worker_cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._mark = self._snapshot()

    def _snapshot(self) -> tuple[float, float, float]:
        """(wall time, parent CPU seconds, workers' CPU seconds so far)."""
        me = os.getpid()
        parent = 0.0
        for pid, _, cpu in _process_tree(me):
            if pid == me:
                parent = cpu
            else:
                self._worker_cpu[pid] = max(self._worker_cpu.get(pid, 0.0), cpu)
        return time.perf_counter(), parent, sum(self._worker_cpu.values())

    def _close_stage(self) -> None:
        now = self._snapshot()
        wall, parent, workers = (a - b for a, b in zip(now, self._mark))
        entry = self.cpu.setdefault(self.stage, {"wall_s": 0.0, "parent_cpu_s": 0.0, "workers_cpu_s": 0.0})
        entry["wall_s"] += wall
        entry["parent_cpu_s"] += parent
        entry["workers_cpu_s"] += workers
        self._mark = now

    def cpu_report(self) -> dict[str, dict[str, float]]:
        """Per stage: wall, parent and workers' CPU seconds, CPU use in % of one core."""
        report = {}
        for stage, e in self.cpu.items():
            wall = max(e["wall_s"], 1e-9)
            report[stage] = {
                "wall_s": round(e["wall_s"], 1),
                "parent_cpu_s": round(e["parent_cpu_s"], 1),
                "workers_cpu_s": round(e["workers_cpu_s"], 1),
                "cpu_percent": round(100 * (e["parent_cpu_s"] + e["workers_cpu_s"]) / wall),
                "parent_percent": round(100 * e["parent_cpu_s"] / wall),
            }
        return report

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = sum(r for _, r, _ in _process_tree(os.getpid()))
            self.peaks[self.stage] = max(self.peaks.get(self.stage, 0), rss)
            self._snapshot()
            self._stop.wait(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._close_stage()

    def progress(self, iterable, desc, total=None):
        self._close_stage()
        self.stage = desc
        from tqdm import tqdm

        return tqdm(iterable, desc=desc, total=total, leave=False, mininterval=5)


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def _cache_sizes(cache: Path) -> dict[str, int]:
    root = cache / "joblib" / "classify_images" / "pipeline" / "extraction" / "stages"
    return {p.name: _du(p) for p in sorted(root.iterdir())} if root.exists() else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dataset", default=str(Path(__file__).resolve().parents[2].parent / "shared/datasets/scene15")
    )
    parser.add_argument("--config", default="scspm")
    parser.add_argument("--out", required=True)
    parser.add_argument("--cache-dir", help="default: <out>.cache (emptied first unless --keep-cache)")
    parser.add_argument("--keep-cache", action="store_true")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--linear-svc", action="store_true", help="fit LinearSVC on the features (sanity check)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    from _bench_utils import announce_machine

    machine = announce_machine()

    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.settings.config import load_config
    from classify_images.pipeline.storage.feature_store import load_feature_set

    config = load_config(args.config)
    out = Path(args.out)
    cache = Path(args.cache_dir) if args.cache_dir else out.with_name(out.name + ".cache")
    if not args.keep_cache:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)

    with StageMonitor() as monitor:
        start = time.perf_counter()
        result = build_feature_set(
            args.dataset, out, config, n_jobs=args.n_jobs, cache_dir=cache, progress=monitor.progress
        )
        cold = time.perf_counter() - start
    start = time.perf_counter()
    again = build_feature_set(args.dataset, out, config, n_jobs=args.n_jobs, cache_dir=cache)
    warm = time.perf_counter() - start

    fs = load_feature_set(out)
    report = {
        "date": date.today().isoformat(),
        "machine": machine,
        "dataset": args.dataset,
        "config": args.config,
        "n_jobs": args.n_jobs,
        "images": result.n_images,
        "rows": result.n_train + result.n_test,
        "skipped": result.n_skipped,
        "dimensions": result.n_features,
        "cold_seconds": round(cold, 1),
        "warm_seconds": round(warm, 2),
        "warm_reused": again.reused,
        "stage_seconds": fs.manifest["timings"],
        "stage_peak_rss_mib": {k: round(v / 2**20) for k, v in monitor.peaks.items()},
        "stage_cpu": monitor.cpu_report(),
        "cpu_percent_overall": round(
            100 * sum(e["parent_cpu_s"] + e["workers_cpu_s"] for e in monitor.cpu.values()) / max(cold, 1e-9)
        ),
        "load_average_after": os.getloadavg(),
        "cache_mib": {k: round(v / 2**20, 1) for k, v in _cache_sizes(cache).items()},
        "feature_set_mib": round(_du(out) / 2**20, 1),
    }
    if args.linear_svc:
        import numpy as np
        from sklearn.svm import LinearSVC

        from classify_images.pipeline.training.evaluation import mean_per_class_accuracy

        start = time.perf_counter()
        clf = LinearSVC(C=1.0, random_state=0).fit(np.asarray(fs.X_train), fs.y_train)
        report["linear_svc"] = {
            "C": 1.0,
            "train_seconds": round(time.perf_counter() - start, 1),
            "mean_per_class_accuracy": round(
                100 * mean_per_class_accuracy(fs.y_test, clf.predict(np.asarray(fs.X_test))), 2
            ),
        }
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
