#!/usr/bin/env python
"""Profile of a cold ``build-features`` per stage: kernels against everything else.

Runs the build in a fresh Python process (an empty stage cache every time) twice: with an
empty numba cache (what the first build after ``pip install`` pays) and again with the numba
cache the first run filled (every later build).  Prints one table per run: for each stage
(check, sample, codebook, encode + pool) the wall seconds, the CPU seconds of the parent and
of its joblib workers, the CPU seconds of the *kernels* alone and the rest ("overhead"), then
the numba compilations (how many kernels were compiled and written to the numba cache, how
many entries were loaded from it), the bytes the stage cache holds and the ``fsync`` calls
of the whole process tree (``strace -f``, when installed).

Kernel CPU is measured in the same child process after the build, on ``--kernel-images``
training images, one thread, numba warm, no cache: per image the decode (``check``), the
decode + dense SIFT (``sample``), the decode + dense SIFT + encoder + pooling
(``encode + pool``); times the number of images of the stage.  The codebook's stage is a
kernel itself (spams / EM in the parent): its CPU is all kernel.

Processor: the model and the instruction set (AVX-512 / AVX2) of this machine, and the
processor numba compiled for (``--cpu haswell`` emulates an AVX2-only processor:
``NUMBA_CPU_NAME=haswell``, ``OPENBLAS_CORETYPE=Haswell``, and a numba cache of its own).

Examples::

    python benchmarks/profile_build.py --dataset ../shared/datasets/scene15 --config scspm
    python benchmarks/profile_build.py --dataset ../shared/datasets/scene15 --config fisher \
        --per-class 20 --train-per-class 10 --cpu haswell --json fisher-haswell.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

STAGES = ("discover", "check", "sample", "codebook", "encode+pool", "write")
#: The monitor's stages (the build's progress bars, and what runs after each) → stage names.
_BAR_TO_STAGE = {
    "discover+check": "discover",
    "check images": "check",
    "after check images": "split",
    "sample descriptors": "sample",
    "after sample descriptors": "codebook",
    "encode + pool": "encode+pool",
    "after encode + pool": "write",
}


# ----------------------------------------------------------------------------- dataset
def subset(dataset: Path, per_class: int, into: Path) -> Path:
    """A folder of symbolic links to the first ``per_class`` images (sorted) of every class."""
    for folder in sorted(p for p in dataset.iterdir() if p.is_dir()):
        (into / folder.name).mkdir(parents=True, exist_ok=True)
        for image in sorted(p for p in folder.iterdir() if p.is_file())[:per_class]:
            (into / folder.name / image.name).symlink_to(image.resolve())
    return into


# ----------------------------------------------------------------------------- child
def kernel_cpu(feature_set_dir: Path, images: list[str], n_images: int) -> dict[str, float]:
    """CPU seconds per image of the kernels of each stage (one thread, numba warm, no cache)."""
    from threadpoolctl import threadpool_limits

    from classify_images.features.descriptors import make_descriptor
    from classify_images.features.dsift import dequantize_descriptors, quantize_descriptors
    from classify_images.features.preprocess import load_grayscale_checked
    from classify_images.pipeline.extraction.extractor import FeatureExtractor
    from classify_images.pipeline.storage.feature_store import load_feature_set

    extractor = FeatureExtractor.from_feature_set(load_feature_set(feature_set_dir))
    config, encoder = extractor.config, extractor.encoder
    descriptor = make_descriptor(config.sift_params())
    coder = encoder.prepared(extractor.codebook, extractor.codebook_digest)
    dependencies = encoder.cache_dependencies(extractor.pyramid)
    totals = {"decode": 0.0, "dsift": 0.0, "encode": 0.0, "pool": 0.0}

    def one(path: str, count: bool) -> None:
        marks = [time.process_time()]
        image, _ = load_grayscale_checked(path, max_side=config.image.max_side)
        marks.append(time.process_time())
        result = descriptor.compute(image)
        descriptors = dequantize_descriptors(quantize_descriptors(result.descriptors))
        marks.append(time.process_time())
        item = encoder.cached_item(coder, descriptors, result.x, result.y, image.shape, **dependencies)
        marks.append(time.process_time())
        encoder.pool(coder, item, extractor.pyramid)
        marks.append(time.process_time())
        if count:
            for key, a, b in zip(totals, marks, marks[1:]):
                totals[key] += b - a

    with threadpool_limits(1):
        one(images[0], count=False)  # numba and the coder warm
        chosen = images[:: max(1, len(images) // n_images)][:n_images]
        for path in chosen:
            one(path, count=True)
    return {key: value / len(chosen) for key, value in totals.items()}


def child(args) -> dict:
    """One cold build (empty stage cache) in this fresh process; the report as a dict."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _bench_utils import machine
    from bench_build_features import StageMonitor, _cache_sizes, _du

    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.settings.config import load_config
    from classify_images.pipeline.storage.feature_store import load_feature_set

    class Monitor(StageMonitor):
        """Also a stage after each progress bar (the codebook runs after the sample's bar); the
        process compiling the encoder aside (classify_images/pipeline/execution/warm_up.py) counted apart from the workers."""

        def __init__(self):
            self._compiler: set[int] = set()
            self._descriptors: set[int] = set()
            self._seen: set[int] = set()
            self.compile_cpu: dict[str, float] = {}
            self.descriptors_cpu: dict[str, float] = {}
            super().__init__()

        def _snapshot(self):
            wall, parent, _ = super()._snapshot()
            for pid in set(self._worker_cpu) - self._seen:
                self._seen.add(pid)
                with contextlib.suppress(OSError):
                    command = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if b"pipeline.execution.warm_up" in command:
                        self._compiler.add(pid)
                    elif b"pipeline.extraction.descriptors_aside" in command:
                        self._descriptors.add(pid)
            aside = sum(cpu for pid, cpu in self._worker_cpu.items() if pid in self._compiler)
            descriptors = sum(cpu for pid, cpu in self._worker_cpu.items() if pid in self._descriptors)
            return wall, parent, sum(self._worker_cpu.values()) - aside - descriptors, aside, descriptors

        def _close_stage(self):
            now = self._snapshot()
            wall, parent, workers, aside, descriptors = (a - b for a, b in zip(now, self._mark))
            entry = self.cpu.setdefault(self.stage, {"wall_s": 0.0, "parent_cpu_s": 0.0, "workers_cpu_s": 0.0})
            entry["wall_s"] += wall
            entry["parent_cpu_s"] += parent
            entry["workers_cpu_s"] += workers
            self.compile_cpu[self.stage] = self.compile_cpu.get(self.stage, 0.0) + aside
            self.descriptors_cpu[self.stage] = self.descriptors_cpu.get(self.stage, 0.0) + descriptors
            self._mark = now

        def progress(self, iterable, desc, total=None):
            def run():
                yield from StageMonitor.progress(self, iterable, desc, total)
                self._close_stage()
                self.stage = f"after {desc}"

            return run()

    work = Path(args.work)
    config = load_config(args.config, {"dataset": {"train_per_class": args.train_per_class}})
    out, cache = work / "features", work / "stage-cache"
    start_cpu = time.process_time()
    with Monitor() as monitor:
        start = time.perf_counter()
        result = build_feature_set(
            args.dataset, out, config, n_jobs=args.n_jobs, cache_dir=cache, progress=monitor.progress
        )
        wall = time.perf_counter() - start
    fs = load_feature_set(out)
    cpu = monitor.cpu_report()
    timings = fs.manifest["timings"]
    train = [str(Path(args.dataset) / p) for p in fs.manifest["split"]["train"]]
    per_image = kernel_cpu(out, train, args.kernel_images)
    n_rows, n_train = result.n_train + result.n_test, result.n_train
    n_checked = result.n_images
    kernels = {
        "check": per_image["decode"] * n_checked,
        "sample": (per_image["decode"] + per_image["dsift"]) * n_train,
        "encode+pool": (per_image["decode"] + per_image["dsift"] + per_image["encode"] + per_image["pool"]) * n_rows,
    }
    stages = {}
    for bar, entry in cpu.items():
        name = _BAR_TO_STAGE.get(bar, bar)
        aside = round(monitor.compile_cpu.get(bar, 0.0), 1)
        stages[name] = {
            **entry,
            "compile_aside_cpu_s": aside,
            "descriptors_aside_cpu_s": round(monitor.descriptors_cpu.get(bar, 0.0), 1),
            "cpu_s": round(entry["parent_cpu_s"] + entry["workers_cpu_s"], 1),
        }
    for name, entry in stages.items():
        if name in kernels:
            entry["kernel_cpu_s"] = round(kernels[name], 1)
            entry["overhead_cpu_s"] = round(entry["cpu_s"] - kernels[name], 1)
            entry["overhead_percent"] = round(100 * (entry["cpu_s"] - kernels[name]) / max(entry["cpu_s"], 1e-9))
        elif name == "codebook":  # learnt in the parent
            entry["kernel_cpu_s"], entry["overhead_cpu_s"] = entry["parent_cpu_s"], entry["workers_cpu_s"]
            entry["overhead_percent"] = round(100 * entry["workers_cpu_s"] / max(entry["cpu_s"], 1e-9))
    return {
        "wall_s": round(wall, 1),
        "manifest_timings": timings,
        "stages": stages,
        "kernel_cpu_ms_per_image": {k: round(1000 * v, 2) for k, v in per_image.items()},
        "images": n_checked,
        "rows": n_rows,
        "train": n_train,
        "dimensions": result.n_features,
        "cache_bytes": _cache_sizes(cache),
        "feature_set_bytes": _du(out),
        "parent_cpu_s_incl_kernel_timing": round(time.process_time() - start_cpu, 1),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "machine": machine(),
    }


# ----------------------------------------------------------------------------- parent
_SAVED = re.compile(r"\[cache\] data saved to")
_LOADED = re.compile(r"\[cache\] data loaded from")


def run_child(args, numba_cache: Path, label: str, work: Path) -> dict:
    """One child build; its report with the numba cache events and fsync counts added."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(numba_cache), NUMBA_DEBUG_CACHE="1", PYTHONUNBUFFERED="1")
    if args.cpu == "haswell":
        env.update(NUMBA_CPU_NAME="haswell", OPENBLAS_CORETYPE="Haswell")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    command = [
        sys.executable,
        __file__,
        "--child",
        "--work",
        str(work),
        "--dataset",
        str(args.dataset),
        "--config",
        args.config,
        "--n-jobs",
        str(args.n_jobs),
        "--kernel-images",
        str(args.kernel_images),
    ]
    if args.train_per_class is not None:
        command += ["--train-per-class", str(args.train_per_class)]
    trace = work / "strace.txt"
    use_strace = args.strace and shutil.which("strace")
    if use_strace:
        command = [
            "strace",
            "-f",
            "-c",
            "-o",
            str(trace),
            "-e",
            "trace=fsync,fdatasync,sync_file_range,msync",
            *command,
        ]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        sys.stderr.write(output[-4000:])
        raise SystemExit(f"the {label} build failed (exit {done.returncode})")
    (work / "child.log").write_text(output)
    marker = "\n@@REPORT@@"
    report = json.loads(output[output.rindex(marker) + len(marker) :].splitlines()[0])
    report["label"] = label
    # Saves and loads printed by the build's processes (the compile-aside process prints nothing:
    # the cache's entries count its compilations too).
    report["numba"] = {
        "compiled_and_saved": len(_SAVED.findall(output)),
        "loaded": len(_LOADED.findall(output)),
        "cache_entries": len(list(numba_cache.rglob("*.nbc"))),
    }
    if use_strace:
        report["sync_calls"] = sync_calls(trace.read_text())
    return report


def sync_calls(summary: str) -> dict[str, int]:
    """Calls per system call of ``strace -c``'s summary table (``% time, seconds, usecs/call, calls,
    [errors,] syscall``)."""
    calls = {}
    for line in summary.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[-1] in ("fsync", "fdatasync", "sync_file_range", "msync"):
            calls[fields[-1]] = int(fields[3])
    return calls


def table(report: dict) -> str:
    """The report of one run as a plain-text table."""
    rows = [
        f"== {report['label']}: {report['images']} images ({report['train']} train), "
        f"{report['dimensions']} dims, wall {report['wall_s']} s, load average {report['load_average']}",
        f"{'stage':<13}{'wall s':>8}{'CPU s':>8}{'parent':>8}{'workers':>9}{'kernel':>8}{'other':>8}{'other %':>9}"
        f"{'compile aside':>15}{'SIFT aside':>12}",
    ]
    for stage in STAGES:
        e = report["stages"].get(stage)
        if e is None:
            continue
        rows.append(
            f"{stage:<13}{e['wall_s']:>8}{e['cpu_s']:>8}{e['parent_cpu_s']:>8}{e['workers_cpu_s']:>9}"
            f"{e.get('kernel_cpu_s', ''):>8}{e.get('overhead_cpu_s', ''):>8}{e.get('overhead_percent', ''):>9}"
            f"{e.get('compile_aside_cpu_s', ''):>15}{e.get('descriptors_aside_cpu_s', ''):>12}"
        )
    rows.append(f"kernel CPU ms/image: {report['kernel_cpu_ms_per_image']}")
    numba = report["numba"]
    rows.append(
        f"numba: {numba['compiled_and_saved']} compiled+saved by the build and its workers, {numba['loaded']} "
        f"loaded from the cache; the cache holds {numba.get('cache_entries', '?')} compiled kernels"
    )
    cache = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in report["cache_bytes"].items())
    rows.append(
        f"stage cache: {cache}; feature set {report['feature_set_bytes'] / 2**20:.1f} MiB; "
        f"sync calls: {report.get('sync_calls', 'not traced')}"
    )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--config", default="scspm")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--per-class", type=int, help="use the first N images of each class (default: all)")
    parser.add_argument("--train-per-class", type=int, help="override [dataset] train_per_class")
    parser.add_argument(
        "--cpu",
        choices=("native", "haswell"),
        default="native",
        help="haswell: emulate an AVX2-only processor (numba and OpenBLAS)",
    )
    parser.add_argument(
        "--numba",
        choices=("both", "cold", "warm"),
        default="both",
        help="cold: empty numba cache; warm: the cache a first (cold) run filled; both (default)",
    )
    parser.add_argument("--kernel-images", type=int, default=20)
    parser.add_argument("--no-strace", dest="strace", action="store_false")
    parser.add_argument("--json", help="write the reports here")
    parser.add_argument(
        "--scratch", help="keep the runs' folders (child.log, caches) here instead of a temporary folder"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("\n@@REPORT@@" + json.dumps(child(args)), flush=True)
        return 0

    from _bench_utils import announce_machine

    info = announce_machine()
    print(
        f"the builds emulate: {args.cpu}"
        + ("  (NUMBA_CPU_NAME=haswell OPENBLAS_CORETYPE=Haswell)" if args.cpu == "haswell" else "")
    )
    with tempfile.TemporaryDirectory(prefix="profile-build-") as temporary:
        scratch = Path(args.scratch or temporary)
        if args.per_class:
            args.dataset = subset(args.dataset, args.per_class, scratch / "dataset")
        numba_cache = scratch / "numba-cache"
        runs = {"both": ("cold", "warm"), "cold": ("cold",), "warm": ("cold", "warm")}[args.numba]
        reports = []
        for label in runs:
            report = run_child(
                args, numba_cache, f"{args.config}, numba cache {label}, {args.cpu}", scratch / f"run-{label}"
            )
            if label == "warm" or args.numba != "warm":
                reports.append(report)
                print(table(report), flush=True)
    payload = {
        "machine": info,
        "date": datetime.now(UTC).isoformat(timespec="minutes"),
        "config": args.config,
        "n_jobs": args.n_jobs,
        "dataset": str(args.dataset),
        "per_class": args.per_class,
        "train_per_class": args.train_per_class,
        "cpu": args.cpu,
        "runs": reports,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
