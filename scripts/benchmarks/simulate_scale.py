#!/usr/bin/env python
"""Simulate a large dataset: synthetic images, a measured build, per-image costs, a projection.

Sub-commands (run from the repository root)::

    # N small synthetic textures (64-128 px, class-dependent statistics), deterministic:
    python benchmarks/simulate_scale.py generate --out cache/scale-sim/synth-1k --n 1000

    # build features on them and record per-stage wall / CPU time per image, stage-cache and
    # feature-store bytes per image, peak memory per process (and Dask counters on a cluster):
    python benchmarks/simulate_scale.py build --images cache/scale-sim/synth-1k \
        --out cache/scale-sim/fs-1k --cache-dir cache/scale-sim/cold-1k \
        --config bof-spm --codebook-size 256 --n-samples 20000 --train-per-class 50 \
        [--n-jobs 2 | --cluster local:2 | --scheduler tcp://HOST:PORT] [--store sharded] \
        [--no-cache] --json sim-1k.json

    # per-image CPU cost of each stage on real images (decode, dense SIFT, encode, pool), and
    # the bytes a stage caches per image, for the paper configs:
    python benchmarks/simulate_scale.py stage-costs --dataset ../shared/datasets/scene15 \
        --configs bof-spm scspm vlad --n-images 30 --json stage-costs.json

    # single-threaded training time per one-vs-rest problem on a feature set:
    python benchmarks/simulate_scale.py train-costs --features FEATURE_SET --json train-costs.json

    # the projection of docs/scaling.md from those measurements (bench-cluster.json from
    # benchmarks/bench_cluster.py), and the check of a small simulated run against a large one:
    python benchmarks/simulate_scale.py project --build bench-cluster.json --build-mode local:2:sharded \
        --codebook-mode loky:2 --stage-costs stage-costs.json --train-costs train-costs.json \
        --check-small sim-1k.json --check-large sim-50k.json --json projection.json

Fisher vectors and compressed rows (issue 24; docs/scaling.md sections 6 and 7)::

    # build with rows stored compressed, then train the linear SVM per class on a cluster:
    python benchmarks/simulate_scale.py build ... --config fisher --codebook-size 16 --rows pq8 \
        --cluster local:2 --store sharded --json sim-2k.json
    python benchmarks/simulate_scale.py train --features FS --cluster local:2 --param solver=features \
        --param max_iter=40 --param tol=1e-12 --out model.npz --json train-2k.json
    # per-row costs of the row codecs and of the linear SVM's solvers on real FV rows (one thread):
    python benchmarks/simulate_scale.py codec-costs --features fv-scene15 --json codec-costs.json
    python benchmarks/simulate_scale.py linear-costs --features fv-scene15 --json linear-costs.json
    # the ImageNet-1k FV projection, and a large run projected from two small ones:
    python benchmarks/simulate_scale.py project --config fisher --stage-costs stage-costs-fisher.json \
        --fisher-codec codec-costs.json --fisher-linear linear-costs.json --json projection-fv.json
    python benchmarks/simulate_scale.py project --runs sim-200.json sim-2k.json sim-2k-t20.json \
        --trains train-200.json train-2k.json train-2k-i400.json --large sim-50k.json --large-train train-50k.json

The synthetic images are oriented sinusoidal gratings under smoothed noise: class ``c``
sets the orientation, the spatial frequency and the noise's smoothing, each image draws
its size, phase and contrast from ``numpy.random.default_rng([seed, index])``, so the
same arguments give the same files byte for byte.  They are small (64-128 px, no
resizing by ``image.max_side``): a simulated run measures the per-image *overheads*
(scheduling, cache entries, rows in the store) at a count of images this machine can
hold, not the cost of dense SIFT on full-size photographs, which ``stage-costs``
measures on real images.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from bench_build_features import _cache_sizes, _du

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_STAMP = "synthetic.json"


# ------------------------------------------------------------------ synthetic images


def synthetic_image(index: int, n_classes: int, seed: int, min_side: int, max_side: int) -> tuple[int, np.ndarray]:
    """Class and uint8 grayscale pixels of synthetic image ``index`` (deterministic)."""
    import cv2

    label = index % n_classes
    rng = np.random.default_rng([seed, index])
    height, width = (int(v) for v in rng.integers(min_side, max_side + 1, size=2))
    theta = np.pi * label / n_classes + rng.normal(0.0, 0.08)
    frequency = 0.05 + 0.15 * ((label * 7) % n_classes) / n_classes  # cycles per pixel
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    grating = np.sin(2 * np.pi * frequency * (xx * np.cos(theta) + yy * np.sin(theta)) + rng.uniform(0, 2 * np.pi))
    noise = cv2.GaussianBlur(rng.standard_normal((height, width)).astype(np.float32), (0, 0), 0.5 + label % 4)
    noise /= noise.std() + 1e-6
    pixels = 128 + rng.uniform(30, 70) * grating + 35 * noise
    return label, np.clip(pixels, 0, 255).astype(np.uint8)


def generate(out: Path, n: int, n_classes: int, seed: int, min_side: int, max_side: int, quality: int) -> dict:
    """Write ``n`` synthetic JPEGs as ``out/class_CC/img_NNNNNNN.jpg`` (skipped when already there)."""
    import cv2

    params = {
        "n": n,
        "n_classes": n_classes,
        "seed": seed,
        "min_side": min_side,
        "max_side": max_side,
        "quality": quality,
    }
    stamp = out / _STAMP
    if stamp.exists() and json.loads(stamp.read_text())["params"] == params:
        print(f"{out}: {n} synthetic images already there")
        return json.loads(stamp.read_text())
    start, total_bytes = time.perf_counter(), 0
    for c in range(n_classes):
        (out / f"class_{c:02d}").mkdir(parents=True, exist_ok=True)
    for index in range(n):
        label, pixels = synthetic_image(index, n_classes, seed, min_side, max_side)
        ok, encoded = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, quality])
        assert ok
        (out / f"class_{label:02d}" / f"img_{index:07d}.jpg").write_bytes(encoded.tobytes())
        total_bytes += encoded.size
    record = {"params": params, "bytes": total_bytes, "seconds": round(time.perf_counter() - start, 1)}
    stamp.write_text(json.dumps(record, indent=2) + "\n")  # written last: the folder is complete
    print(f"{out}: {n} images, {total_bytes / n / 1024:.1f} KiB each, {record['seconds']} s")
    return record


# ------------------------------------------------------------------ process-tree monitor


def _proc_stat(pid: int) -> tuple[int, float, int] | None:
    """``(parent pid, CPU seconds, resident bytes)`` of a process, from ``/proc/PID/stat``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # after the command: state ppid ... utime(12) stime(13) ... rss(22), counted from "state" = 0
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS, int(fields[21]) * _PAGE


class ProcessTreeMonitor:
    """CPU seconds per stage and peak resident memory per process, of this process and its
    descendants (joblib / loky workers, a ``LocalCluster``'s nannies and workers), sampled
    every ``interval`` seconds from ``/proc``.

    The stage is set by :meth:`progress` (the build's progress callback): a stage runs from
    its progress bar's start to the next one's; the step after a progress bar is finished
    (``split`` after ``check``, ``codebook`` after ``sample``, ``normalise+write`` after
    ``encode + pool``) is named by :data:`AFTER`.  CPU of processes that exited is kept at
    their last sample (work done in less than one interval before exiting is missed).
    """

    AFTER = {"check images": "split", "sample descriptors": "codebook", "encode + pool": "normalise+write"}

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.stage = "discover"
        self.cpu: dict[int, float] = {}  # last CPU seconds seen per pid
        self.peak_rss: dict[int, int] = {}  # peak resident bytes per pid
        self.role: dict[int, str] = {}
        self.stage_cpu: dict[str, float] = {}
        self.stage_main_cpu: dict[str, float] = {}  # of this process alone (client; LocalCluster's scheduler)
        self.stage_wall: dict[str, float] = {}  # wall seconds per stage, as the CPU is split
        self._stage_start_wall = time.perf_counter()
        self.peak_tree_rss = 0
        self._stage_start_cpu = 0.0
        self._stage_start_main_cpu = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _descendants(self) -> dict[int, tuple[float, int]]:
        stats, children = {}, {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = _proc_stat(int(entry))
                if stat is not None:
                    children.setdefault(stat[0], []).append(int(entry))
                    stats[int(entry)] = stat[1:]
        tree, stack = {}, [os.getpid()]
        while stack:
            pid = stack.pop()
            if pid in stats:
                tree[pid] = stats[pid]
            stack.extend(children.get(pid, []))
        return tree

    def sample(self) -> None:
        tree = self._descendants()
        with self._lock:
            for pid, (cpu, rss) in tree.items():
                self.cpu[pid] = cpu
                self.peak_rss[pid] = max(self.peak_rss.get(pid, 0), rss)
                self.role.setdefault(pid, "main" if pid == os.getpid() else "worker")
            self.peak_tree_rss = max(self.peak_tree_rss, sum(rss for _, rss in tree.values()))

    def total_cpu(self) -> float:
        return sum(self.cpu.values())

    def mark(self, stage: str) -> None:
        self.sample()
        with self._lock:
            total, main = self.total_cpu(), self.cpu.get(os.getpid(), 0.0)
            self.stage_cpu[self.stage] = self.stage_cpu.get(self.stage, 0.0) + total - self._stage_start_cpu
            self.stage_main_cpu[self.stage] = (
                self.stage_main_cpu.get(self.stage, 0.0) + main - self._stage_start_main_cpu
            )
            now = time.perf_counter()
            self.stage_wall[self.stage] = self.stage_wall.get(self.stage, 0.0) + now - self._stage_start_wall
            self.stage, self._stage_start_cpu, self._stage_start_main_cpu = stage, total, main
            self._stage_start_wall = now

    def progress(self, iterable, description: str, total: int | None = None):
        self.mark(description)
        after = self.AFTER.get(description, f"after {description}")
        for count, item in enumerate(iterable, start=1):
            if count == total:  # the caller may stop pulling at the last item (zip)
                self.mark(after)
            yield item
        if total is None or total == 0:
            self.mark(after)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> ProcessTreeMonitor:
        self.sample()
        self._stage_start_cpu, self._stage_start_main_cpu = self.total_cpu(), self.cpu.get(os.getpid(), 0.0)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.mark("done")

    def memory(self) -> dict:
        workers = [rss for pid, rss in self.peak_rss.items() if self.role[pid] == "worker"]
        return {
            "main_peak_mib": round(self.peak_rss.get(os.getpid(), 0) / 2**20, 1),
            "worker_peak_mib": round(max(workers, default=0) / 2**20, 1),
            "worker_processes_seen": len(workers),
            "tree_peak_mib": round(self.peak_tree_rss / 2**20, 1),
        }


# ------------------------------------------------------------------ build


def _cluster_options(args) -> dict:
    """The build's cluster keywords that were given (none: the single-machine build)."""
    options = {
        "scheduler": args.scheduler,
        "cluster": args.cluster,
        "store": args.store,
        "batch_size": getattr(args, "batch_size", None),
        "rows": getattr(args, "rows", None),
    }
    return {key: value for key, value in options.items() if value is not None}


def run_build(args) -> dict:
    """One build with the stage cache in ``args.cache_dir`` (emptied first: a cold build)."""
    import shutil

    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.settings.config import load_config

    overrides = {
        "codebook": {"size": args.codebook_size, "n_samples": args.n_samples},
        "dataset": {"train_per_class": args.train_per_class},
    }
    config = load_config(args.config, overrides)
    out, cache = Path(args.out), Path(args.cache_dir)
    if not args.keep_cache:
        shutil.rmtree(cache, ignore_errors=True)
    cache_dir = None if getattr(args, "no_cache", False) else cache
    shutil.rmtree(out, ignore_errors=True)
    options = _cluster_options(args)
    metrics_module = None
    if "cluster" in options or "scheduler" in options:
        import dask

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import _cluster_metrics as metrics_module

        dask.config.set({"distributed.scheduler.preload": ["_cluster_metrics"]})
    with ProcessTreeMonitor() as monitor:
        start = time.perf_counter()
        result = build_feature_set(
            args.images, out, config, n_jobs=args.n_jobs, cache_dir=cache_dir, progress=monitor.progress, **options
        )
        wall = time.perf_counter() - start
    manifest = json.loads((out / "manifest.json").read_text())
    n_images, rows = result.n_images, result.n_train + result.n_test
    cache_bytes = _cache_sizes(cache)
    stage_wall = manifest["timings"]
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "images": str(args.images),
        "config": args.config,
        "overrides": overrides,
        "options": options,
        "n_jobs": args.n_jobs,
        "n_images": n_images,
        "rows": rows,
        "n_train": result.n_train,
        "n_features": result.n_features,
        "wall_seconds": round(wall, 2),
        "stage_wall_seconds": stage_wall,
        "stage_cpu_seconds": {k: round(v, 2) for k, v in monitor.stage_cpu.items()},
        "stage_main_process_cpu_seconds": {k: round(v, 2) for k, v in monitor.stage_main_cpu.items()},
        "monitor_stage_wall_seconds": {k: round(v, 2) for k, v in monitor.stage_wall.items()},
        "cpu_seconds": round(sum(monitor.stage_cpu.values()), 2),
        "per_image_ms": {
            "wall": round(1000 * wall / n_images, 3),
            "cpu": round(1000 * sum(monitor.stage_cpu.values()) / n_images, 3),
            "check_wall": round(1000 * stage_wall.get("check", 0) / n_images, 3),
            "check_cpu": round(1000 * monitor.stage_cpu.get("check images", 0) / n_images, 3),
            "sample_wall_per_train_image": round(1000 * stage_wall.get("sample", 0) / max(result.n_train, 1), 3),
            "encode_pool_wall": round(1000 * stage_wall.get("encode+pool", 0) / rows, 3),
            "encode_pool_cpu": round(1000 * monitor.stage_cpu.get("encode + pool", 0) / rows, 3),
        },
        "cache_bytes_per_image": {k: round(v / n_images) for k, v in cache_bytes.items()},
        "cache_bytes_total": sum(cache_bytes.values()),
        "store_bytes_per_row": round(_du(out) / rows),
        "store_bytes_total": _du(out),
        "memory": monitor.memory(),
    }
    if metrics_module is not None:
        metrics = metrics_module.snapshot()
        sent = metrics["graph_bytes"] + metrics["scheduler_to_worker_bytes"] + metrics["result_bytes"]
        metrics["bytes_sent_per_image"] = round(sent / n_images)
        metrics["scheduler_overhead_ms_per_task"] = _overhead_per_task(metrics, stage_wall, monitor, report)
        report["dask"] = metrics
    return report


def _overhead_per_task(metrics: dict, stage_wall: dict, monitor, report: dict) -> float | None:
    """Worker-seconds of the per-image stages not spent computing a task, per task:
    ``(workers × wall of the per-image stages − Σ task compute seconds) / tasks``."""
    if not metrics["tasks"] or not metrics["workers"]:
        return None
    per_image_wall = sum(stage_wall.get(k, 0.0) for k in ("check", "sample", "encode+pool"))
    idle = metrics["workers"] * per_image_wall - metrics["compute_seconds"]
    return round(1000 * idle / metrics["tasks"], 3)


def run_train(args) -> dict:
    """Train the linear SVM on a feature set's training rows (``--cluster local:N``: its
    one-vs-rest problems in groups on the workers, each worker reading the rows itself) and
    record wall and CPU seconds of the process tree, the L-BFGS iterations and peak memory.

    ``--param`` fixes the solver's parameters; the simulation fixes ``solver=features`` (the
    eigenbasis exists only for small ``n``) and ``max_iter`` with a tiny ``tol`` so that
    every run makes the same number of passes: its cost is then per row, per class, per
    pass (:func:`project_training_check`)."""
    from classify_images.pipeline.extraction.runner import Execution
    from classify_images.pipeline.interfaces.workflows import train_model
    from classify_images.pipeline.storage.feature_store import load_feature_set

    params = {}
    for item in args.param or []:
        key, value = item.split("=", 1)
        params[key] = value if key == "solver" else float(value) if "." in value or "e" in value else int(value)
    fs = load_feature_set(args.features)
    counts_folder = None
    if getattr(args, "count_evaluations", False):  # objective evaluations counted in every process
        import tempfile

        import _lbfgs_counts
        import dask

        counts_folder = tempfile.mkdtemp(prefix="simulate-scale-evaluations-")
        os.environ[_lbfgs_counts.FOLDER_VARIABLE] = counts_folder
        here = str(Path(__file__).resolve().parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
        dask.config.set({"distributed.worker.preload": ["_lbfgs_counts"]})
        _lbfgs_counts.install()  # the training on this process, without a cluster
    execution = Execution.from_options(cluster=args.cluster) if args.cluster else None
    out = Path(args.out)
    with ProcessTreeMonitor() as monitor:
        monitor.mark("train")
        start = time.perf_counter()
        training, _ = train_model(fs, "linear", params, out=out, execution=execution)
        wall = time.perf_counter() - start
    estimator = training.estimator
    n_classes = len(fs.class_names)
    cpu = monitor.stage_cpu.get("train", 0.0)
    passes = int(getattr(estimator, "n_iter_", 0))
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "features": str(args.features),
        "rows_format": fs.manifest.get("store", {}).get("format", "dense"),
        "cluster": args.cluster,
        "params": params,
        "n_train": len(fs.y_train),
        "n_features": fs.n_features,
        "classes": n_classes,
        "n_iter": passes,
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "main_process_cpu_seconds": round(
            monitor.stage_main_cpu.get("train", 0.0), 2
        ),  # client + LocalCluster scheduler
        "cpu_ns_per_row_class_iteration": round(1e9 * cpu / max(len(fs.y_train) * n_classes * max(passes, 1), 1), 3),
        "memory": monitor.memory(),
        **({"evaluations": _read_evaluation_counts(counts_folder)} if counts_folder else {}),
    }


def _read_evaluation_counts(folder: str) -> dict:
    """The workers' evaluation counters (:mod:`_lbfgs_counts`), the folder removed."""
    import shutil

    import _lbfgs_counts

    counts = _lbfgs_counts.read_counts(folder)
    shutil.rmtree(folder, ignore_errors=True)
    return counts


def cluster_startup(args) -> dict:
    """The fixed part of a training on ``--cluster local:N``, measured apart from any training run:
    ``--repeats`` times, a LocalCluster started and the linear SVM's one-vs-rest problems of a tiny
    problem (``--classes`` classes, 4 rows each, 16 dimensions: nothing per row to speak of) trained
    on it by ``fit_distributed`` — the cluster's start and stop, the workers' imports, the scatter of
    the labels, one task per group of classes and the merge — with the CPU of the process tree and
    the wall time of each run (docs/scaling.md section 7.1: less than a training's fixed part, which
    :func:`project_from_runs` solves from a training on a few rows through the same path instead)."""
    from classify_images.classifiers import QuadraticHingeSVC
    from classify_images.pipeline.execution.cluster import ClusterSpec, open_client
    from classify_images.pipeline.training.distributed_training import fit_distributed

    n_workers = int(args.cluster.split(":", 1)[1])
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(args.classes), 4)
    X = rng.normal(size=(y.size, 16)).astype(np.float32)
    runs = []
    for _ in range(args.repeats):
        with ProcessTreeMonitor() as monitor:
            monitor.mark("start")
            start = time.perf_counter()
            with open_client(ClusterSpec(n_workers=n_workers)) as client:
                fit_distributed(client, QuadraticHingeSVC(solver="features", max_iter=40, tol=1e-12), X, y)
            wall = time.perf_counter() - start
        runs.append({"wall_seconds": round(wall, 2), "cpu_seconds": round(monitor.stage_cpu.get("start", 0.0), 2)})
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cluster": args.cluster,
        "classes": args.classes,
        "runs": runs,
        "cpu_seconds": float(np.median([r["cpu_seconds"] for r in runs])),
        "wall_seconds": float(np.median([r["wall_seconds"] for r in runs])),
    }


# ------------------------------------------------------------------ per-image stage costs


def _codebook_for(config, descriptors: np.ndarray, seed: int = 0):
    """A codebook of the config's kind and size, learnt quickly from ``descriptors`` (float32).

    The encode cost depends on the codebook's size and kind, not on how long it was trained:
    a short training stands in for the build's (``n_iter`` kept small)."""
    from classify_images.coding.encoders import make_encoder

    n_iter = 100 if config.codebook.kind == "sparse" else 20
    return make_encoder({**config.codebook_params(), "n_iter": n_iter, "seed": seed}).learn(descriptors)


def _imagenet_like_decode(paths: list[str], work: Path) -> dict:
    """CPU milliseconds to fingerprint, decode and shrink (``max_side`` 300) a colour JPEG of
    ImageNet's typical size (500 × 375, quality 90), made by enlarging each image of ``paths``
    and copying its grey levels into three slightly different channels."""
    import cv2

    from classify_images.features.preprocess import load_grayscale
    from classify_images.pipeline.settings.dataset import file_fingerprint

    work.mkdir(parents=True, exist_ok=True)
    files, sizes = [], []
    for index, path in enumerate(paths):
        grey = cv2.resize(cv2.imread(path, cv2.IMREAD_GRAYSCALE), (500, 375), interpolation=cv2.INTER_CUBIC)
        colour = np.dstack([grey, cv2.GaussianBlur(grey, (0, 0), 1.0), 255 - grey])
        file = work / f"imagenet_like_{index:03d}.jpg"
        cv2.imwrite(str(file), colour, [cv2.IMWRITE_JPEG_QUALITY, 90])
        files.append(str(file))
        sizes.append(file.stat().st_size)
    times = []
    for repeat in range(2):
        for file in files:
            start = time.process_time()
            file_fingerprint(file)
            load_grayscale(file, max_side=300)
            if repeat:
                times.append(time.process_time() - start)
    return {"cpu_ms_per_image": round(1000 * float(np.mean(times)), 2), "file_bytes": round(float(np.mean(sizes)))}


def stage_costs(args) -> dict:
    """CPU milliseconds per image of decode, dense SIFT, encode, pool (one thread), and the
    bytes each stage would cache per image, for each config, on ``n_images`` real images."""
    import io

    from classify_images.coding.codebook import codebook_digest
    from classify_images.coding.encoders import Pyramid, make_encoder
    from classify_images.features.dsift import dequantize_descriptors
    from classify_images.features.preprocess import load_grayscale
    from classify_images.pipeline.extraction.stages import compute_descriptors
    from classify_images.pipeline.settings.config import load_config
    from classify_images.pipeline.settings.dataset import discover_dataset, file_fingerprint
    from classify_images.pipeline.storage.cache_store import encode_result

    dataset = discover_dataset(args.dataset)
    rng = np.random.default_rng(args.seed)
    pick = np.sort(rng.choice(len(dataset.paths), size=min(args.n_images, len(dataset.paths)), replace=False))
    paths = [str(dataset.absolute(dataset.paths[i])) for i in pick]

    def npz_bytes(result) -> int:
        buffer = io.BytesIO()
        np.savez(buffer, **encode_result(result))
        return buffer.getbuffer().nbytes

    def cpu(fn):
        start = time.process_time()
        value = fn()
        return value, time.process_time() - start

    report = {
        "dataset": args.dataset,
        "n_images": len(paths),
        "seed": args.seed,
        "configs": {},
        "imagenet_like_decode": _imagenet_like_decode(paths, args.work),
    }
    print("imagenet_like_decode", json.dumps(report["imagenet_like_decode"]), flush=True)
    for name in args.configs:
        config = load_config(name)
        sift, max_side = config.sift_params(), config.image.max_side
        # a codebook from the descriptors of the sampled images themselves (20 000 at most)
        sample = np.concatenate([compute_descriptors(p, max_side, sift)["descriptors"] for p in paths[:10]])
        sample = sample[rng.permutation(sample.shape[0])[:20000]]
        codebook = _codebook_for(config, dequantize_descriptors(sample), seed=args.seed)
        encoder = make_encoder(config.codebook_params())
        pyramid = Pyramid(tuple(config.pooling.levels), config.pooling.method)
        coder = encoder.prepared(codebook, codebook_digest(codebook))
        rows = {
            k: []
            for k in (
                "fingerprint",
                "decode",
                "dsift",
                "encode",
                "pool",
                "descriptors",
                "cached_descriptors",
                "cached_codes",
                "vector_nnz",
            )
        }
        for repeat in range(2):  # the first pass compiles numba and warms the page cache
            for path in paths:
                fingerprint, t_hash = cpu(lambda: file_fingerprint(path))
                image, t_decode = cpu(lambda: load_grayscale(path, max_side=max_side))
                data, t_total = cpu(lambda: compute_descriptors(path, max_side, sift))
                descriptors = dequantize_descriptors(data["descriptors"])
                shape = tuple(int(v) for v in data["shape"])
                cached, t_encode = cpu(
                    lambda: encoder.cached_item(
                        coder, descriptors, data["x"], data["y"], shape, **encoder.cache_dependencies(pyramid)
                    )
                )
                vector, t_pool = cpu(lambda: encoder.pool(coder, cached, pyramid))
                if repeat == 0:
                    continue
                rows["fingerprint"].append(t_hash)
                rows["decode"].append(t_decode)
                rows["dsift"].append(max(t_total - t_decode, 0.0))
                rows["encode"].append(t_encode)
                rows["pool"].append(t_pool)
                rows["descriptors"].append(data["descriptors"].shape[0])
                rows["cached_descriptors"].append(npz_bytes(data) if config.sift.cache_descriptors else 0)
                rows["cached_codes"].append(npz_bytes(cached))
                rows["vector_nnz"].append(int(np.count_nonzero(vector)))
        n_features = int(np.asarray(vector).size)
        summary = {
            "n_features": n_features,
            "descriptors_per_image": round(float(np.mean(rows["descriptors"])), 1),
            "cpu_ms_per_image": {
                k: round(1000 * float(np.mean(rows[k])), 2)
                for k in ("fingerprint", "decode", "dsift", "encode", "pool")
            },
            "cache_bytes_per_image": {
                "descriptors": round(float(np.mean(rows["cached_descriptors"]))),
                "codes_or_vector": round(float(np.mean(rows["cached_codes"]))),
            },
            "row_bytes_dense": 4 * n_features,
            "row_nonzero_fraction": round(float(np.mean(rows["vector_nnz"])) / n_features, 4),
        }
        summary["cpu_ms_per_image"]["total"] = round(sum(summary["cpu_ms_per_image"].values()), 2)
        report["configs"][name] = summary
        print(name, json.dumps(summary), flush=True)
    return report


# ------------------------------------------------------------------ training cost per class


def train_costs(args) -> dict:
    """Single-threaded training time of each classifier on a feature set's training rows
    (CSR float32), with all the rows and with half of them (does the cost grow with the
    rows as the projection assumes?), per one-vs-rest problem and per stored non-zero."""
    import scipy.sparse as sp

    from classify_images import HIKnSVM, PmSVM, QuadraticHingeSVC
    from classify_images.classifiers.base import warm_up
    from classify_images.pipeline.storage.feature_store import load_feature_set

    fs = load_feature_set(args.features)
    X_all, y_all = sp.csr_matrix(np.asarray(fs.X_train, dtype=np.float32)), np.asarray(fs.y_train)
    estimators = {
        "nsvm": lambda: HIKnSVM(random_state=0, n_jobs=1),
        "linear": lambda: QuadraticHingeSVC(),
        "pmsvm": lambda: PmSVM(random_state=0),
    }
    report = {"features": str(args.features), "n_features": fs.n_features, "classifiers": {}}
    half = np.sort(np.concatenate([np.flatnonzero(y_all == c)[: (y_all == c).sum() // 2] for c in np.unique(y_all)]))
    for name in args.classifiers:
        runs = {}
        for label, rows in (("all", np.arange(y_all.size)), ("half", half)):
            X, y = X_all[rows], y_all[rows]
            estimator = estimators[name]()
            warm_up(estimator, X, y)
            wall, cpu = time.perf_counter(), time.process_time()
            estimator.fit(X, y)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            n_classes = len(np.unique(y))
            runs[label] = {
                "rows": int(y.size),
                "nnz": int(X.nnz),
                "classes": n_classes,
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "cpu_s_per_class": round(cpu / n_classes, 4),
                "cpu_ns_per_class_per_nnz": round(1e9 * cpu / n_classes / X.nnz, 3),
            }
        report["classifiers"][name] = runs
        print(name, json.dumps(runs), flush=True)
    return report


class _CountedBlocks:
    """The training row blocks of a feature set, re-iterable, counting the passes over them."""

    def __init__(self, feature_set, block_rows: int) -> None:
        self.feature_set, self.block_rows, self.passes = feature_set, block_rows, 0

    def __iter__(self):
        self.passes += 1
        yield from self.feature_set.iter_row_blocks("train", self.block_rows)


def linear_costs(args) -> dict:
    """One-threaded CPU of the linear SVM on a feature set's dense training rows, per row, per
    class and per pass over the rows, for the three ways it trains at scale:

    * ``blocks``: :meth:`QuadraticHingeSVC.fit_blocks` (``train --streaming``), L-BFGS on
      all the classes jointly, one pass over the row blocks per objective evaluation;
    * ``sgd``: ``n_epochs`` passes of averaged SGD (:meth:`partial_fit`), all classes at once;
    * ``per_class``: one one-vs-rest problem in memory (:meth:`fit_problem_group`, the task a
      cluster worker runs; ``solver="features"``, as at ImageNet's size), passes = L-BFGS
      iterations (its evaluations are not counted by the estimator).
    """
    from classify_images import QuadraticHingeSVC
    from classify_images.pipeline.storage.feature_store import load_feature_set

    fs = load_feature_set(args.features)
    y = np.asarray(fs.y_train)
    n, d, n_classes = y.size, fs.n_features, len(np.unique(y))
    report = {
        "features": str(args.features),
        "n_train": int(n),
        "n_features": int(d),
        "classes": n_classes,
        "block_rows": args.block_rows,
        "C": args.C,
        "solvers": {},
    }

    def record(name, cpu, passes, problems, **extra):
        per = 1e9 * cpu / max(n * problems * max(passes, 1), 1)
        report["solvers"][name] = {
            "cpu_s": round(cpu, 2),
            "passes": int(passes),
            "problems": problems,
            "cpu_ns_per_row_class_pass": round(per, 3),
            **extra,
        }
        print(name, json.dumps(report["solvers"][name]), flush=True)

    if "blocks" in args.solvers:
        blocks = _CountedBlocks(fs, args.block_rows)
        model = QuadraticHingeSVC(C=args.C, max_iter=args.max_iter)
        cpu = time.process_time()
        model.fit_blocks(blocks)
        record("blocks", time.process_time() - cpu, blocks.passes, n_classes, n_iter=int(model.n_iter_))
    if "sgd" in args.solvers:
        model = QuadraticHingeSVC(C=args.C, n_epochs=args.epochs, streaming="sgd")
        classes = np.unique(y)
        cpu = time.process_time()
        for _ in range(args.epochs):
            for X_block, y_block in fs.iter_row_blocks("train", args.block_rows):
                model.partial_fit(X_block, y_block, classes=classes, n_samples=n)
        record("sgd", time.process_time() - cpu, args.epochs, n_classes)
    if "per_class" in args.solvers:
        X = np.asarray(fs.X_train)  # in memory, as on a worker
        model = QuadraticHingeSVC(C=args.C, solver="features", max_iter=args.max_iter)
        cpu = time.process_time()
        model.fit_problem_group(X, y, 0, 1)
        record("per_class", time.process_time() - cpu, model.n_iter_, 1)
    return report


def codec_costs(args) -> dict:
    """One-threaded CPU per row of storing dense rows compressed (float16, pq8, pq16): encoding,
    decoding, and learning the PQ codebooks (per training row and Lloyd iteration), on the
    first rows of a feature set (Fisher vectors: 262 144 dims), with ``K = 256`` centroids.
    The encode and decode costs depend on the shapes only, not on how well the codebooks fit,
    so the codebooks are learnt with ``--fit-iter`` iterations (the build uses 10)."""
    from classify_images.coding.product_quantizer import N_CENTROIDS, ProductQuantizer, pq_sub_dim, to_float16
    from classify_images.pipeline.storage.feature_store import load_feature_set

    fs = load_feature_set(args.features)
    wanted, blocks = max(args.rows, N_CENTROIDS), []
    for block, _ in fs.iter_row_blocks("train"):
        blocks.append(np.asarray(block, dtype=np.float32)[: wanted - sum(b.shape[0] for b in blocks)])
        if sum(b.shape[0] for b in blocks) >= wanted:
            break
    rows = np.concatenate(blocks)
    n = rows.shape[0]
    d = rows.shape[1]

    def cpu(fn):
        start = time.process_time()
        value = fn()
        return value, time.process_time() - start

    report = {"features": str(args.features), "rows": n, "n_features": d, "fit_iter": args.fit_iter, "codecs": {}}
    half, t_encode = cpu(lambda: to_float16(rows))
    _, t_decode = cpu(lambda: half.astype(np.float32))
    report["codecs"]["float16"] = {
        "bytes_per_row": 2 * d,
        "encode_ms_per_row": round(1000 * t_encode / n, 3),
        "decode_ms_per_row": round(1000 * t_decode / n, 3),
    }
    for encoding in ("pq8", "pq16"):
        quantizer, t_fit = cpu(lambda: ProductQuantizer(pq_sub_dim(encoding), n_iter=args.fit_iter).fit(rows))
        codes, t_encode = cpu(lambda: quantizer.encode(rows))
        decoded, t_decode = cpu(lambda: quantizer.decode(codes))
        error = float(np.mean(np.sum((decoded - rows) ** 2, axis=1) / np.maximum(np.sum(rows**2, axis=1), 1e-30)))
        report["codecs"][encoding] = {
            "bytes_per_row": int(codes.shape[1]),
            "codebook_bytes": int(quantizer.codebooks_.nbytes),
            "fit_ms_per_row_iteration": round(1000 * t_fit / (n * args.fit_iter), 3),
            "encode_ms_per_row": round(1000 * t_encode / n, 3),
            "decode_ms_per_row": round(1000 * t_decode / n, 3),
            "relative_squared_error": round(error, 4),
        }
        print(encoding, json.dumps(report["codecs"][encoding]), flush=True)
    return report


# ------------------------------------------------------------------ projection

#: The per-image stages of a build: (name in the manifest's timings, progress-bar name, what it counts).
_PER_IMAGE_STAGES = (
    ("check", "check images", "n_images"),
    ("sample", "sample descriptors", "n_train"),
    ("encode+pool", "encode + pool", "rows"),
)
#: Stage-cache folders and what their entries count (the codebook is one entry).
_CACHE_COUNTS = {
    "check_image": "n_images",
    "image_descriptors": "n_images",
    "image_encoding": "n_images",
    "descriptor_sample": "n_train",
    "learn_codebook": None,
}


def per_image_costs(report: dict) -> dict:
    """Milliseconds per counted image of each per-image stage of a :func:`run_build` report:
    wall, CPU of the workers (process tree minus this process) and of this process (the
    client, and a ``LocalCluster``'s scheduler)."""
    costs = {}
    for wall_key, cpu_key, count_key in _PER_IMAGE_STAGES:
        n = max(report[count_key], 1)
        tree = report["stage_cpu_seconds"].get(cpu_key, 0.0)
        main = report.get("stage_main_process_cpu_seconds", {}).get(cpu_key, 0.0)
        costs[wall_key] = {
            "count": report[count_key],
            "wall_ms": 1000 * report["stage_wall_seconds"].get(wall_key, 0.0) / n,
            "worker_cpu_ms": 1000 * max(tree - main, 0.0) / n,
            "main_cpu_ms": 1000 * main / n,
        }
    return costs


def _scaled(report: dict, count_key: str | None, target: dict) -> float:
    return 1.0 if count_key is None else target[count_key] / max(report[count_key], 1)


def _encode_split(sample: float, encode: float, train_share: float) -> tuple[float, float]:
    """Encode cost of a training image (descriptors read from the cache) and of a test image
    (descriptors computed and cached, as the sample step does: ``+ sample``), from the mean
    ``encode`` cost over a set whose ``train_share`` are training images."""
    cached = max(encode - (1.0 - train_share) * sample, 0.0)
    return cached, cached + sample


def check_projection(small: dict, large: dict) -> dict:
    """``large`` projected from ``small`` (each stage's wall, the cache and the store grow with
    what they count; the codebook is fixed) against what ``large`` measured."""
    counts = {
        "check": "n_images",
        "sample": "n_train",
        "encode+pool": "rows",
        "discover": "n_images",
        "split": "n_images",
        "codebook": None,
        "normalise+write": "rows",
    }
    cpu_names = {"check": "check images", "sample": "sample descriptors", "encode+pool": "encode + pool"}
    rows = {}
    for stage, count_key in counts.items():
        projected = small["stage_wall_seconds"].get(stage, 0.0) * _scaled(small, count_key, large)
        cpu = cpu_names.get(stage, stage)
        rows[stage] = {
            "projected_s": round(projected, 2),
            "measured_s": large["stage_wall_seconds"].get(stage, 0.0),
            "projected_cpu_s": round(small["stage_cpu_seconds"].get(cpu, 0.0) * _scaled(small, count_key, large), 2),
            "measured_cpu_s": large["stage_cpu_seconds"].get(cpu, 0.0),
        }
    projected_total = sum(row["projected_s"] for row in rows.values())
    # with cached descriptors, encoding a training image reads the descriptors the sample step
    # cached, a test image computes them: split the small run's encode time into the two
    aware = {}
    for clock, key in (("stage_wall_seconds", "s"), ("stage_cpu_seconds", "cpu_s")):
        sample = small[clock].get("sample" if key == "s" else "sample descriptors", 0.0)
        encode = small[clock].get("encode+pool" if key == "s" else "encode + pool", 0.0)
        cached, fresh = _encode_split(
            sample / max(small["n_train"], 1), encode / max(small["rows"], 1), small["n_train"] / max(small["rows"], 1)
        )
        aware[f"projected_{key}"] = round(cached * large["n_train"] + fresh * (large["rows"] - large["n_train"]), 2)
        aware[f"measured_{key}"] = rows["encode+pool"][f"measured_{key}"]
    rows["encode+pool, train/test aware"] = aware
    cache_small = {k: v * small["n_images"] for k, v in small["cache_bytes_per_image"].items()}
    cache_projected = sum(v * _scaled(small, _CACHE_COUNTS.get(k, "n_images"), large) for k, v in cache_small.items())
    return {
        "images": [small["n_images"], large["n_images"]],
        "stages": rows,
        "stages_total": {
            "projected_s": round(projected_total, 1),
            "measured_s": round(sum(large["stage_wall_seconds"].values()), 1),
        },
        "wall": {
            "projected_s": round(
                projected_total + small["wall_seconds"] - sum(small["stage_wall_seconds"].values()), 1
            ),
            "measured_s": large["wall_seconds"],
        },
        "cache_bytes": {"projected": round(cache_projected), "measured": large["cache_bytes_total"]},
        "store_bytes": {
            "projected": round(small["store_bytes_total"] * large["rows"] / small["rows"]),
            "measured": large["store_bytes_total"],
        },
        "peak_worker_mib": {"small": small["memory"]["worker_peak_mib"], "large": large["memory"]["worker_peak_mib"]},
    }


def project_imagenet(
    build: dict,
    stage_costs: dict | None,
    *,
    n_train: int,
    n_test: int,
    cores: list[int],
    image_bytes: int,
    config: str,
    codebook_seconds: float,
    task_seconds: float,
    batch_size: int,
    fs_bandwidth: list[float],
) -> dict:
    """Time, disk and network of a cold build of ``n_train + n_test`` images on ``cores``
    single-threaded workers, from a measured cluster build (docs/scaling.md, "The model").

    * worker CPU: the measured worker CPU per image of each per-image step (fingerprint,
      check, descriptor sample, encode + pool + shard write), times the images it visits
      at that scale (the sample step visits every training image), plus the extra decode
      time of larger colour JPEGs (``stage_costs``' probe);
    * scheduler: ``task_seconds`` of client + scheduler CPU per task (measured with no-op
      tasks), ``batch_size`` images per task; the scheduler is one process, so
      ``tasks × task_seconds`` bounds the build from below whatever the cores;
    * the codebook (``codebook_seconds``, one thread on the client) does not grow with the
      images (a fixed sample of descriptors);
    * bytes over the network: every image read once by a worker, the stage cache written
      (and the training images' descriptors read back by encode), the shards written, the
      scheduler's messages and results; at ``fs_bandwidth`` GB/s of shared file system the
      build cannot be faster than those bytes take.
    """
    n_all = n_train + n_test
    costs = per_image_costs(build)
    discover_worker_ms = (
        1000
        * (
            build["stage_cpu_seconds"].get("discover", 0.0)
            - build["stage_main_process_cpu_seconds"].get("discover", 0.0)
        )
        / build["n_images"]
    )
    sample_ms = costs["sample"]["worker_cpu_ms"]
    encode_cached_ms, encode_fresh_ms = costs["encode+pool"]["worker_cpu_ms"], costs["encode+pool"]["worker_cpu_ms"]
    if build["cache_bytes_per_image"].get("image_descriptors"):  # descriptors cached by the sample step
        encode_cached_ms, encode_fresh_ms = _encode_split(
            sample_ms, costs["encode+pool"]["worker_cpu_ms"], build["n_train"] / build["rows"]
        )
    worker_cpu = (
        (discover_worker_ms + costs["check"]["worker_cpu_ms"]) * n_all
        + (sample_ms + encode_cached_ms) * n_train
        + encode_fresh_ms * n_test
    ) / 1000
    extra_decode_ms = 0.0
    if stage_costs is not None and "imagenet_like_decode" in stage_costs:
        scene = stage_costs["configs"][config]["cpu_ms_per_image"]
        # the probe's JPEGs are smoother (fewer bytes) than photographs of that size: its decode
        # time is scaled by image_bytes / its bytes (Huffman decoding grows with the bytes)
        probe = stage_costs["imagenet_like_decode"]
        decode_ms = probe["cpu_ms_per_image"] * max(1.0, image_bytes / probe["file_bytes"])
        # an image is decoded twice on the workers (check, descriptors)
        extra_decode_ms = 2 * max(decode_ms - scene["fingerprint"] - scene["decode"], 0.0)
    worker_cpu += extra_decode_ms * n_all / 1000
    # encode and sample: batch_size images per task; fingerprint and check: 8 × batch_size
    n_tasks = math.ceil(n_all / batch_size) + math.ceil(n_train / batch_size) + 2 * math.ceil(n_all / (8 * batch_size))
    scheduler = n_tasks * task_seconds
    per_image = dict(build["cache_bytes_per_image"])
    # the descriptor sample of a training image holds ceil(n_samples / n_train) descriptors
    # (128 bytes each) in an entry whose overhead is about a check entry's size
    n_samples = build["overrides"]["codebook"]["n_samples"] or 200_000
    sample_entry = per_image.get("check_image", 0) + 128 * math.ceil(n_samples / n_train)
    per_image["descriptor_sample"] = sample_entry * n_train / n_all
    cache_written = sum(v for v in per_image.values()) * n_all
    cache_read = per_image.get("image_descriptors", 0) * n_train
    store = build["store_bytes_per_row"] * n_all
    messages = (build.get("dask") or {}).get("bytes_sent_per_image", 0) * n_all
    network = image_bytes * n_all + cache_written + cache_read + store + messages
    table = []
    for p in cores:
        cpu_seconds = codebook_seconds + max(worker_cpu / p, scheduler)
        row = {
            "cores": p,
            "cpu_bound_hours": round(cpu_seconds / 3600, 3),
            "bound": "workers" if worker_cpu / p >= scheduler else "scheduler",
            "network_GB_per_s_needed": round(network / max(cpu_seconds - codebook_seconds, 1e-9) / 1e9, 2),
        }
        for bandwidth in fs_bandwidth:
            row[f"hours_at_{bandwidth:g}_GB_per_s"] = round(
                max(cpu_seconds, codebook_seconds + network / (bandwidth * 1e9)) / 3600, 3
            )
        table.append(row)
    return {
        "images": n_all,
        "train_images": n_train,
        "tasks": n_tasks,
        "batch_size": batch_size,
        "per_image_ms": costs,
        "discover_worker_ms": round(discover_worker_ms, 3),
        "encode_ms": {"training_image": round(encode_cached_ms, 2), "test_image": round(encode_fresh_ms, 2)},
        "extra_decode_ms_per_image": round(extra_decode_ms, 2),
        "worker_cpu_ms_per_image": round(1000 * worker_cpu / n_all, 2),
        "worker_cpu_hours": round(worker_cpu / 3600, 1),
        "scheduler_hours": round(scheduler / 3600, 3),
        "codebook_hours": round(codebook_seconds / 3600, 3),
        "disk_GB": {
            "images": round(image_bytes * n_all / 1e9),
            "stage_cache": round(cache_written / 1e9),
            "feature_store": round(store / 1e9),
        },
        "network_GB": {
            "images": round(image_bytes * n_all / 1e9),
            "cache_written": round(cache_written / 1e9),
            "cache_read": round(cache_read / 1e9),
            "store": round(store / 1e9),
            "scheduler_and_results": round(messages / 1e9, 1),
            "total": round(network / 1e9),
        },
        "table": table,
    }


def train_projection(train_costs: dict, *, n_train: int, nnz_per_row: float, n_classes: int, cores: list[int]) -> dict:
    """CPU hours of one-vs-rest training over ``n_classes`` on ``n_train`` rows, from the
    measured cost per class per stored non-zero (valid when a classifier's work grows with
    the rows: fixed epochs of SGD for nSVM), spread over ``cores``."""
    out = {}
    nnz = n_train * nnz_per_row
    for name, runs in train_costs["classifiers"].items():
        per_nnz = runs["all"]["cpu_ns_per_class_per_nnz"] * 1e-9
        growth = runs["all"]["cpu_ns_per_class_per_nnz"] / runs["half"]["cpu_ns_per_class_per_nnz"]
        cpu = per_nnz * nnz * n_classes
        out[name] = {
            "cpu_s_per_class": round(per_nnz * nnz),
            "cpu_hours": round(cpu / 3600, 1),
            "per_nnz_growth_when_rows_double": round(growth, 2),
            "hours": {p: round(cpu / min(p, n_classes) / 3600, 2) for p in cores},
        }
    return out


#: What each monitored stage of a compressed (PQ) build grows with: images, training images, rows,
#: the images the PQ sample pass encodes (every image of its training shards,
#: :func:`pq_sample_images`), the PQ codebook sample's rows (``min(n_train, PQ_SAMPLE_ROWS)``), or
#: nothing (the GMM).  The encode step computes the rows the sample pass did not ("fresh rows")
#: and reads the others' vectors from the stage cache: two counts, each with its own cost.
_PQ_STAGE_COUNTS = {
    "discover": ("n_images",),
    "check images": ("n_images",),
    "split": ("n_images",),
    "sample descriptors": ("n_train",),
    "codebook": (),
    "pool (codebook sample)": ("pq_sample_images",),
    "after pool (codebook sample)": ("pq_sample",),
    "encode + pool": ("fresh_rows", "pq_sample_images"),
    "normalise+write": ("rows",),
}


def pq_sample_images(n_train: int, shard_size: int) -> int:
    """Images the PQ sample pass encodes: all images of the training shards
    :func:`~classify_images.pipeline.extraction.build.pq_sample_shards` picks (shards of ``shard_size``
    training images, the last one shorter)."""
    from classify_images.pipeline.extraction.build_steps import pq_sample_shards

    if n_train <= 0:
        return 0
    picked = pq_sample_shards(-(-n_train // shard_size))
    return int(sum(min(shard_size, n_train - k * shard_size) for k in picked))


def _counts(report: dict) -> dict:
    """What a build report (or a target ``{n_images, n_train, rows[, options]}``) counts: the
    shard size is the build's ``--batch-size``, else the default; a stage cache is assumed."""
    from classify_images.pipeline.extraction.build_steps import PQ_SAMPLE_ROWS
    from classify_images.pipeline.settings.defaults import DEFAULT_BATCH_SIZE

    shard_size = (report.get("options") or {}).get("batch_size") or DEFAULT_BATCH_SIZE
    sampled = pq_sample_images(report["n_train"], shard_size)
    return {
        "n_images": report["n_images"],
        "n_train": report["n_train"],
        "rows": report["rows"],
        "pq_sample": min(report["n_train"], PQ_SAMPLE_ROWS),
        "pq_sample_images": sampled,
        "fresh_rows": report["rows"] - sampled,
    }


def _fit_linear(counts: list[list[float]], seconds: list[float]) -> tuple[float, list[float]]:
    """``(fixed, [cost per item of each count])``: non-negative least squares of
    ``seconds ≈ fixed + Σ cost_k × count_k`` over the runs (no counts: the mean)."""
    from scipy.optimize import nnls

    if not counts or not counts[0]:
        return float(np.mean(seconds)), []
    design = np.column_stack([np.ones(len(counts)), np.asarray(counts, dtype=np.float64)])
    solution, _ = nnls(design, np.asarray(seconds, dtype=np.float64))
    return float(solution[0]), [float(v) for v in solution[1:]]


def pq_codebook_bytes(n_features: int, n_train: int) -> int:
    """Bytes of the PQ codebooks (float32): ``min(n_train, 256)`` centroids of every sub-vector,
    i.e. that many rows of ``n_features`` (:mod:`~classify_images.coding.product_quantizer`)."""
    from classify_images.coding.product_quantizer import N_CENTROIDS

    return 4 * n_features * min(n_train, N_CENTROIDS)


def _train_terms(run: dict, iterations: int | None = None) -> list[float]:
    """A training's counts: its rows, and rows × L-BFGS iterations."""
    passes = iterations if iterations is not None else (run.get("n_iter") or run["params"]["max_iter"])
    return [run["n_train"], run["n_train"] * passes]


def project_from_runs(
    builds: list[dict], target: dict, trains: list[dict] | None = None, target_iterations: int = 40
) -> dict:
    """A large build (and training) projected from small ones of the same configuration.

    Build: each monitored stage's CPU and wall seconds is a fixed part plus a cost per item of
    what it counts (:data:`_PQ_STAGE_COUNTS`), solved by non-negative least squares over the
    runs (the encode step's two costs need runs of different training shares).  The store is
    the PQ codebooks (:func:`pq_codebook_bytes`) plus the largest run's bytes per row beyond them.

    Training (the same classes, every run reaching its ``max_iter``): a fixed part (cluster start,
    worker imports, loading the feature set, each worker opening the shards and codebooks, the
    model written) plus a cost per row (decoding the compressed rows) plus a cost per row and
    L-BFGS iteration, solved from at least three trainings: a few rows (mostly fixed), and runs
    whose rows × iterations dominate; or, when every training made the target's iterations, a
    fixed part plus a cost per row at that iteration count (:func:`_project_training`).

    ``target`` gives ``n_images``, ``n_train`` and ``rows`` of the large run."""
    counts = [_counts(run) for run in builds]
    target_counts = _counts(target)
    stages, cpu_total, wall_total = {}, 0.0, 0.0
    for stage, keys in _PQ_STAGE_COUNTS.items():
        row = {"counts": list(keys)}
        for clock, field in (("cpu", "stage_cpu_seconds"), ("wall", "monitor_stage_wall_seconds")):
            fixed, per = _fit_linear(
                [[c[k] for k in keys] for c in counts], [run[field].get(stage, 0.0) for run in builds]
            )
            value = fixed + sum(p * target_counts[k] for p, k in zip(per, keys))
            row[f"{clock}_fixed_s"], row[f"projected_{clock}_s"] = round(fixed, 2), round(value, 1)
            row[f"{clock}_per_item_ms"] = {k: round(1000 * p, 4) for k, p in zip(keys, per)}
        stages[stage] = row
        cpu_total += row["projected_cpu_s"]
        wall_total += row["projected_wall_s"]
    # the cluster's start and stop, outside the monitored stages
    outside = float(
        np.median([run["wall_seconds"] - sum(run["monitor_stage_wall_seconds"].values()) for run in builds])
    )
    largest = max(builds, key=lambda run: run["rows"])
    report = {
        "from": [run["n_images"] for run in builds],
        "to": target["n_images"],
        "target_counts": target_counts,
        "build": {
            "stages": stages,
            "projected_cpu_s": round(cpu_total, 1),
            "projected_wall_s": round(wall_total + max(outside, 0.0), 1),
        },
    }
    cache = 0.0
    for folder, per_image in largest["cache_bytes_per_image"].items():  # a folder's bytes grow with what it counts
        count, total = _CACHE_COUNTS.get(folder, "n_images"), per_image * largest["n_images"]
        cache += total if count is None else total * target_counts[count] / _counts(largest)[count]
    report["build"]["projected_cache_bytes"] = round(cache)
    n_features = largest["n_features"]
    per_row = (largest["store_bytes_total"] - pq_codebook_bytes(n_features, largest["n_train"])) / largest["rows"]
    report["build"]["projected_store_bytes"] = round(
        pq_codebook_bytes(n_features, target["n_train"]) + per_row * target["rows"]
    )
    if trains:
        report["train"] = _project_training(trains, target, target_iterations)
    return report


def _evaluation_totals(run: dict) -> tuple[float, float, float]:
    """A counted training's ``(row evaluations, gradient rows, CPU seconds in evaluations)``,
    summed over processes and precisions (``train --count-evaluations``)."""
    totals = run["evaluations"]["total"].values()
    return (
        float(sum(entry["row_evaluations"] for entry in totals)),
        float(sum(entry.get("gradient_rows", entry["row_evaluations"]) for entry in totals)),
        float(sum(entry["cpu_seconds"] for entry in totals)),
    )


def _project_counted_training(trains: list[dict], target_rows: int) -> dict:
    """The training projected from trainings whose evaluations were counted: the *active-margin model*.

    An evaluation of objective (1) multiplies every row by ``W`` (the margins) and, per block of
    rows, only the rows with an active margin by ``G`` (the gradient; the whole block when at
    least half of it is active), so with ``R`` the rows the margins read and ``A`` the rows the
    gradients read, summed over the evaluations,

    .. math::  \\text{CPU} = F + a\\,n + m\\,R + g\\,A, \\qquad R = r_0 + e\\,n, \\qquad
               A = R\\,s(n), \\quad s(n) = \\min\\bigl(1,\\; s_2 (n / n_2)^{k}\\bigr)

    ``F + a n`` (cluster start, reading and decoding the rows, the model written) is fitted to the
    CPU outside the evaluations of the trainings in the target's regime (evaluations within 10 % of
    the largest training's: a few-row training whose line searches run long is another regime);
    ``e`` (evaluations per row), ``m`` and ``g`` (CPU per row read by each product) and the power
    law of the active share ``s`` are taken through the two largest trainings (``n_1 < n_2``,
    ``k = ln(s_2 / s_1) / ln(n_2 / n_1)``): the share of rows inside the margin falls as the rows
    per class grow, and extrapolating it is this model's assumption (docs/scaling.md, section 7.4).
    Wall: the CPU times the largest training's wall / CPU."""

    def evaluations(run: dict) -> int:
        return sum(entry["evaluations"] for entry in run["evaluations"]["total"].values())

    runs = sorted(trains, key=lambda run: run["n_train"])
    largest = runs[-1]
    regime = [run for run in runs if abs(evaluations(run) - evaluations(largest)) <= 0.1 * evaluations(largest)]
    if len(regime) < 2:
        raise ValueError("the active-margin model needs two counted trainings of the target's number of evaluations")
    totals = [_evaluation_totals(run) for run in regime]
    (n1, (R1, A1, E1)), (n2, (R2, A2, E2)) = ((run["n_train"], total) for run, total in zip(regime[-2:], totals[-2:]))
    per_row_evaluations = (R2 - R1) / (n2 - n1)
    R_target = R2 + per_row_evaluations * (target_rows - n2)
    s1, s2 = A1 / R1, A2 / R2
    exponent = float(np.log(s2 / s1) / np.log(n2 / n1))
    share = min(1.0, s2 * (target_rows / n2) ** exponent)
    A_target = share * R_target
    from scipy.optimize import nnls  # the exact solution of the two when it is non-negative

    (m, g), _ = nnls(np.array([[R1, A1], [R2, A2]]), np.array([E1, E2]))
    other = [run["cpu_seconds"] - inside for run, (_, _, inside) in zip(regime, totals)]
    fixed, (per_row,) = _fit_linear([[run["n_train"]] for run in regime], other)
    evaluation_cpu = m * R_target + g * A_target
    outside_cpu = fixed + per_row * target_rows
    cpu = evaluation_cpu + outside_cpu
    return {
        "model": "active-margin: fixed + per_row x rows + m x margin rows + g x gradient rows (counted)",
        "from_rows": [run["n_train"] for run in runs],
        "fitted_on_rows": [run["n_train"] for run in regime],
        "row_evaluations_per_row": round(per_row_evaluations, 3),
        "active_share_from": [round(s1, 4), round(s2, 4)],
        "active_share_exponent": round(exponent, 4),
        "projected_active_share": round(share, 4),
        "projected_row_evaluations": round(R_target),
        "projected_gradient_rows": round(A_target),
        "margin_us_per_row": round(1e6 * float(m), 3),
        "gradient_us_per_row": round(1e6 * float(g), 3),
        "cpu_fixed_s": round(fixed, 2),
        "cpu_per_row_ms": round(1000 * per_row, 4),
        "projected_evaluation_cpu_s": round(evaluation_cpu, 1),
        "projected_outside_cpu_s": round(outside_cpu, 1),
        "projected_cpu_s": round(cpu, 1),
        "projected_wall_s": round(cpu * largest["wall_seconds"] / largest["cpu_seconds"], 1),
    }


def _project_training(trains: list[dict], target: dict, target_iterations: int) -> dict:
    """The training part of :func:`project_from_runs`.

    Trainings that all made the target's number of L-BFGS iterations cannot tell a cost per row
    from a cost per row and iteration (the two counts are proportional): then the model is
    ``fixed + per_row × rows`` at that iteration count, the regime of the target, and needs no
    training of another regime (a long one, whose late iterations take more evaluations and may
    restart with float64 products: docs/scaling.md section 7.2, point 3).  When every training
    counted its evaluations (``train --count-evaluations``), the active-margin model of
    :func:`_project_counted_training`."""
    iterations = {_train_terms(run)[1] / max(run["n_train"], 1) for run in trains}
    same = iterations == {float(target_iterations)}
    if same and all("evaluations" in run for run in trains):
        return {"target_iterations": target_iterations, **_project_counted_training(trains, target["n_train"])}
    model = {
        "model": f"fixed + per_row x rows (every training at {target_iterations} iterations)"
        if same
        else "fixed + per_row x rows + per_row_iteration x rows x iterations",
        "target_iterations": target_iterations,
        "from_rows": [run["n_train"] for run in trains],
        "from_iterations": [_train_terms(run)[1] / max(run["n_train"], 1) for run in trains],
    }
    terms = _train_terms(target, target_iterations)
    for clock, field in (("cpu", "cpu_seconds"), ("wall", "wall_seconds")):
        seconds = [run[field] for run in trains]
        if same:
            fixed, (per_row,) = _fit_linear([[run["n_train"]] for run in trains], seconds)
            model[f"{clock}_fixed_s"] = round(fixed, 2)
            model[f"{clock}_per_row_ms"] = round(1000 * per_row, 4)
            model[f"projected_{clock}_s"] = round(fixed + per_row * terms[0], 1)
            continue
        fixed, (per_row, per_row_iteration) = _fit_linear([_train_terms(run) for run in trains], seconds)
        model[f"{clock}_fixed_s"] = round(fixed, 2)
        model[f"{clock}_per_row_ms"] = round(1000 * per_row, 4)
        model[f"{clock}_per_row_iteration_us"] = round(1e6 * per_row_iteration, 4)
        model[f"projected_{clock}_s"] = round(fixed + per_row * terms[0] + per_row_iteration * terms[1], 1)
    return model


def compare_with_large(projection: dict, large: dict, large_train: dict | None) -> dict:
    """The projection of :func:`project_from_runs` against the large run's measurements."""

    def pair(projected, measured):
        return {
            "projected": projected,
            "measured": measured,
            "error_percent": round(100 * (projected - measured) / measured, 1) if measured else None,
        }

    build = projection["build"]
    out = {
        "build_cpu_s": pair(build["projected_cpu_s"], large["cpu_seconds"]),
        "build_wall_s": pair(build["projected_wall_s"], large["wall_seconds"]),
        "cache_bytes": pair(build["projected_cache_bytes"], large["cache_bytes_total"]),
        "store_bytes": pair(build["projected_store_bytes"], large["store_bytes_total"]),
        "stages": {
            stage: {
                "cpu": pair(row["projected_cpu_s"], large["stage_cpu_seconds"].get(stage, 0.0)),
                "wall": pair(row["projected_wall_s"], large["monitor_stage_wall_seconds"].get(stage, 0.0)),
            }
            for stage, row in build["stages"].items()
        },
    }
    if large_train is not None and "train" in projection:
        out["train_cpu_s"] = pair(projection["train"]["projected_cpu_s"], large_train["cpu_seconds"])
        out["train_wall_s"] = pair(projection["train"]["projected_wall_s"], large_train["wall_seconds"])
        out["total_cpu_s"] = pair(
            round(build["projected_cpu_s"] + projection["train"]["projected_cpu_s"], 1),
            round(large["cpu_seconds"] + large_train["cpu_seconds"], 1),
        )
        out["total_wall_s"] = pair(
            round(build["projected_wall_s"] + projection["train"]["projected_wall_s"], 1),
            round(large["wall_seconds"] + large_train["wall_seconds"], 1),
        )
    return out


def project_fisher_imagenet(
    stage: dict,
    codec: dict,
    linear: dict,
    *,
    n_train: int,
    n_test: int,
    cores: list[int],
    image_bytes: int,
    overhead_ms: float,
    gmm_seconds: float,
    task_seconds: float,
    batch_size: int,
    fs_gb_per_s: float,
    classes: int,
    pq_sample_rows: int,
    pq_iterations: int,
) -> dict:
    """A cold Fisher-vector build of ImageNet-1k and its linear training, per row format, from
    measured per-image and per-row costs (docs/scaling.md, section 5; every input is a measurement
    named in the report, or an assumption stated there):

    * worker CPU per image: ``stage`` (stage-costs, one thread: fingerprint, decode, dense SIFT,
      Fisher encoding), the larger JPEGs' extra decoding, ``overhead_ms`` of pipeline per image
      (task handling, the stage-cache entry, the shard write), and the row's compression
      (``codec``: float16 conversion or PQ encoding);
    * fixed: the GMM (``gmm_seconds``) and, for PQ, the codebooks (``pq_sample_rows`` rows,
      ``pq_iterations`` Lloyd iterations, ``codec``'s cost per row and iteration);
    * time on ``p`` cores: fixed + max(worker CPU / p, tasks × ``task_seconds``), and no less
      than the bytes over the shared file system at ``fs_gb_per_s``;
    * training, one-vs-rest linear SVM streamed from the store (``linear``: CPU per row, class
      and pass of each solver; passes as measured on 15-Scenes): ``p`` workers each own
      ``classes / p`` classes and read every row at every pass, decoding it once per pass for
      all its classes.
    """
    fisher = stage["configs"]["fisher"]
    d = fisher["n_features"]
    n_all = n_train + n_test
    probe = stage["imagenet_like_decode"]
    decode_ms = probe["cpu_ms_per_image"] * max(1.0, image_bytes / probe["file_bytes"])
    extra_decode = 2 * max(
        decode_ms - fisher["cpu_ms_per_image"]["fingerprint"] - fisher["cpu_ms_per_image"]["decode"], 0.0
    )
    compute = fisher["cpu_ms_per_image"]["total"]
    cached = fisher["cache_bytes_per_image"]["codes_or_vector"]
    n_tasks = math.ceil(n_all / batch_size) * 2 + 2 * math.ceil(n_all / (8 * batch_size))  # sample + encode, check
    formats = {
        "float32": {"bytes_per_row": 4 * d, "encode_ms": 0.0, "decode_ms": 0.0, "codebook_bytes": 0, "fit_s": 0.0}
    }
    formats["float16"] = {
        "bytes_per_row": codec["codecs"]["float16"]["bytes_per_row"],
        "encode_ms": codec["codecs"]["float16"]["encode_ms_per_row"],
        "decode_ms": codec["codecs"]["float16"]["decode_ms_per_row"],
        "codebook_bytes": 0,
        "fit_s": 0.0,
    }
    for name in ("pq8", "pq16"):
        c = codec["codecs"][name]
        formats[name] = {
            "bytes_per_row": c["bytes_per_row"],
            "encode_ms": c["encode_ms_per_row"],
            "decode_ms": c["decode_ms_per_row"],
            "codebook_bytes": c["codebook_bytes"],
            "fit_s": c["fit_ms_per_row_iteration"] * pq_sample_rows * pq_iterations / 1000,
        }
    solvers = linear["solvers"]
    report = {
        "images": n_all,
        "n_features": d,
        "tasks": n_tasks,
        "per_image_ms": {
            "compute_one_thread": compute,
            "extra_decode": round(extra_decode, 2),
            "pipeline_overhead": overhead_ms,
        },
        "gmm_s": gmm_seconds,
        "formats": {},
    }
    for name, f in formats.items():
        worker_ms = compute + extra_decode + overhead_ms + f["encode_ms"]
        worker_cpu = worker_ms * n_all / 1000
        fixed = gmm_seconds + f["fit_s"]
        store = f["bytes_per_row"] * n_all
        disk = {
            "store_GB": round(store / 1e9, 1),
            "stage_cache_GB": round(cached * n_all / 1e9, 1),
            "images_GB": round(image_bytes * n_all / 1e9, 1),
        }
        build = []
        for p in cores:
            network = image_bytes * n_all + cached * n_all + store + f["codebook_bytes"] * p
            cpu_bound = fixed + max(worker_cpu / p, n_tasks * task_seconds)
            build.append(
                {
                    "cores": p,
                    "hours": round(max(cpu_bound, fixed + network / (fs_gb_per_s * 1e9)) / 3600, 2),
                    "cpu_bound_hours": round(cpu_bound / 3600, 2),
                    "network_GB": round(network / 1e9),
                }
            )
        training = {}
        for solver in ("blocks", "sgd"):
            if solver not in solvers:
                continue
            per = solvers[solver]["cpu_ns_per_row_class_pass"] * 1e-9
            passes = solvers[solver]["passes"]
            rows = []
            for p in cores:
                owned = math.ceil(classes / min(p, classes))
                seconds = passes * n_train * (f["decode_ms"] / 1000 + owned * per)
                rows.append(
                    {
                        "cores": p,
                        "hours": round(seconds / 3600, 1),
                        "core_hours": round(seconds * min(p, classes) / 3600),
                        "decode_share": round(f["decode_ms"] / 1000 / (f["decode_ms"] / 1000 + owned * per), 3),
                        "read_TB": round(passes * min(p, classes) * store / 1e12, 1),
                    }
                )
            training[solver] = {
                "passes": passes,
                "cpu_ns_per_row_class_pass": solvers[solver]["cpu_ns_per_row_class_pass"],
                "on": rows,
            }
        report["formats"][name] = {
            "bytes_per_image_stored": f["bytes_per_row"],
            "bytes_per_image_cached": cached,
            "codebook_bytes": f["codebook_bytes"],
            "pq_fit_s": round(f["fit_s"], 1),
            "worker_ms_per_image": round(worker_ms, 2),
            "worker_core_hours": round(worker_cpu / 3600, 1),
            "disk": disk,
            "build": build,
            "training": training,
        }
    return report


def project(args) -> dict:
    load = lambda path: json.loads(Path(path).read_text()) if path else None  # noqa: E731
    report = {}
    if args.build:
        runs = load(args.build)
        build = runs[args.build_mode] if args.build_mode else runs
        codebook = runs[args.codebook_mode] if args.codebook_mode else build
        noop = {run["workers"]: run for run in runs.get("noop", [])} if args.build_mode else {}
        if args.batch_size is None:
            from classify_images.pipeline.extraction.build import DEFAULT_BATCH_SIZE

            args.batch_size = DEFAULT_BATCH_SIZE
        task_seconds = (
            args.task_ms if args.task_ms is not None else noop[max(noop)]["client_and_scheduler_cpu_ms_per_task"]
        ) / 1000
        report["imagenet_build"] = project_imagenet(
            build,
            load(args.stage_costs),
            n_train=args.n_train,
            n_test=args.n_test,
            cores=args.cores,
            image_bytes=args.image_bytes,
            config=args.config,
            codebook_seconds=codebook["stage_cpu_seconds"]["codebook"],
            task_seconds=task_seconds,
            batch_size=args.batch_size,
            fs_bandwidth=args.fs_gb_per_s,
        )
    if args.train_costs:
        report["imagenet_training"] = train_projection(
            load(args.train_costs),
            n_train=args.n_train,
            nnz_per_row=args.nnz_per_row,
            n_classes=args.classes,
            cores=args.cores,
        )
    if args.check_small and args.check_large:
        report["check"] = check_projection(load(args.check_small), load(args.check_large))
    if args.fisher_codec and args.fisher_linear and args.stage_costs:
        from classify_images.pipeline.extraction.build_steps import DEFAULT_BATCH_SIZE, PQ_SAMPLE_ROWS

        report["imagenet_fisher"] = project_fisher_imagenet(
            load(args.stage_costs),
            load(args.fisher_codec),
            load(args.fisher_linear),
            n_train=args.n_train,
            n_test=args.n_test,
            cores=args.cores,
            image_bytes=args.image_bytes,
            overhead_ms=args.overhead_ms,
            gmm_seconds=args.gmm_seconds,
            task_seconds=(args.task_ms or 0.93) / 1000,
            batch_size=args.batch_size or DEFAULT_BATCH_SIZE,
            fs_gb_per_s=args.fs_gb_per_s[0],
            classes=args.classes,
            pq_sample_rows=PQ_SAMPLE_ROWS,
            pq_iterations=10,
        )
    if args.runs:
        trains = [load(path) for path in args.trains] if args.trains else None
        target = {"n_images": args.target_images, "n_train": args.target_train, "rows": args.target_images}
        report["runs"] = {"builds": args.runs, "trains": args.trains}
        report["run_projection"] = project_from_runs(
            [load(path) for path in args.runs], target, trains, args.target_iterations
        )
        if args.large:
            report["run_check"] = compare_with_large(
                report["run_projection"], load(args.large), load(args.large_train) if args.large_train else None
            )
    return report


# ------------------------------------------------------------------ command line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="write N synthetic images")
    gen.add_argument("--out", required=True, type=Path)
    gen.add_argument("--n", type=int, default=1000)
    gen.add_argument("--classes", type=int, default=10)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--min-side", type=int, default=64)
    gen.add_argument("--max-side", type=int, default=128)
    gen.add_argument("--quality", type=int, default=90, help="JPEG quality")

    build = commands.add_parser("build", help="build features on a folder and measure")
    build.add_argument("--images", required=True)
    build.add_argument("--out", required=True)
    build.add_argument("--cache-dir", required=True, help="emptied first (a cold build) unless --keep-cache")
    build.add_argument("--keep-cache", action="store_true")
    build.add_argument("--no-cache", action="store_true", help="build without a stage cache (what the cache costs)")
    build.add_argument("--config", default="bof-spm")
    build.add_argument("--codebook-size", type=int)
    build.add_argument("--n-samples", type=int)
    build.add_argument("--train-per-class", type=int)
    build.add_argument("--n-jobs", type=int, default=1)
    build.add_argument("--scheduler")
    build.add_argument("--cluster")
    build.add_argument("--store")
    build.add_argument("--batch-size", type=int, help="images per Dask task (default: the build's)")
    build.add_argument(
        "--rows",
        choices=("float32", "float16", "pq8", "pq16"),
        help="how the feature set stores its rows (build-features --rows)",
    )
    build.add_argument("--json")

    costs = commands.add_parser("stage-costs", help="per-image CPU cost of each stage on real images")
    costs.add_argument("--dataset", required=True)
    costs.add_argument("--configs", nargs="+", default=["bof-spm", "scspm", "vlad"])
    costs.add_argument("--n-images", type=int, default=30)
    costs.add_argument("--seed", type=int, default=0)
    costs.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/classify-images-stage-costs"),
        help="where the ImageNet-sized JPEGs are written",
    )
    costs.add_argument("--json")

    sim_train = commands.add_parser("train", help="train the linear SVM on a (simulated) feature set and measure")
    sim_train.add_argument("--features", required=True)
    sim_train.add_argument("--cluster", help="local:N: the one-vs-rest problems on a local Dask cluster")
    sim_train.add_argument("--param", action="append", metavar="KEY=VALUE")
    sim_train.add_argument("--out", required=True, help="model file")
    sim_train.add_argument(
        "--count-evaluations",
        action="store_true",
        help="count the objective's evaluations (and float64 restarts) on every worker",
    )
    sim_train.add_argument("--json")

    startup = commands.add_parser("cluster-startup", help="the fixed part of a cluster training, measured apart")
    startup.add_argument("--cluster", default="local:2", help="local:N")
    startup.add_argument("--classes", type=int, default=10)
    startup.add_argument("--repeats", type=int, default=3)
    startup.add_argument("--json")

    train = commands.add_parser("train-costs", help="training time per one-vs-rest problem on a feature set")
    train.add_argument("--features", required=True)
    train.add_argument("--classifiers", nargs="+", default=["nsvm", "linear", "pmsvm"])
    train.add_argument("--json")

    lin = commands.add_parser("linear-costs", help="CPU per row, class and pass of the linear SVM's solvers")
    lin.add_argument("--features", required=True)
    lin.add_argument("--solvers", nargs="+", default=["blocks", "sgd", "per_class"])
    lin.add_argument("--block-rows", type=int, default=256)
    lin.add_argument("--C", type=float, default=1.0)
    lin.add_argument("--max-iter", type=int, default=1000)
    lin.add_argument("--epochs", type=int, default=10)
    lin.add_argument("--json")

    codec = commands.add_parser("codec-costs", help="CPU per row of float16 / PQ encoding, decoding, codebook learning")
    codec.add_argument("--features", required=True)
    codec.add_argument("--rows", type=int, default=256)
    codec.add_argument("--fit-iter", type=int, default=2)
    codec.add_argument("--json")

    proj = commands.add_parser("project", help="the projection of docs/scaling.md from the measurements")
    proj.add_argument("--build", help="a build report (build --json), or bench_cluster.py's JSON with --build-mode")
    proj.add_argument("--build-mode", help="the mode of bench_cluster.py's JSON to project from (e.g. local:2:sharded)")
    proj.add_argument("--codebook-mode", help="the mode whose codebook CPU seconds to use (the one that learnt it)")
    proj.add_argument(
        "--task-ms",
        type=float,
        help="client + scheduler CPU ms per task (default: the no-op measurement in bench_cluster.py's JSON)",
    )
    proj.add_argument("--batch-size", type=int, help="images per encode task (default: the build's)")
    proj.add_argument(
        "--fs-gb-per-s",
        type=float,
        nargs="+",
        default=[1.0, 10.0],
        help="shared file system bandwidths to bound the build by",
    )
    proj.add_argument("--stage-costs", help="stage-costs --json (adds the larger images' extra decode time)")
    proj.add_argument("--train-costs", help="train-costs --json")
    proj.add_argument("--config", default="bof-spm")
    proj.add_argument("--n-train", type=int, default=1_281_167, help="ImageNet-1k training images")
    proj.add_argument("--n-test", type=int, default=50_000, help="ImageNet-1k validation images")
    proj.add_argument("--classes", type=int, default=1000)
    proj.add_argument("--cores", type=int, nargs="+", default=[10, 100, 1000])
    proj.add_argument("--image-bytes", type=int, default=110_000, help="mean JPEG size (ImageNet-1k: ~110 KB)")
    proj.add_argument("--nnz-per-row", type=float, default=1367.0, help="stored non-zeros per feature row")
    proj.add_argument("--check-small", help="build report of the small simulated run")
    proj.add_argument("--check-large", help="build report of the large simulated run")
    proj.add_argument("--fisher-codec", help="codec-costs --json on Fisher-vector rows (the ImageNet FV projection)")
    proj.add_argument("--fisher-linear", help="linear-costs --json on Fisher-vector rows")
    proj.add_argument(
        "--overhead-ms",
        type=float,
        default=12.4,
        help="pipeline CPU per image around the computation (bof-spm cluster build: 16.7 - 4.25 ms)",
    )
    proj.add_argument(
        "--gmm-seconds", type=float, default=106.4, help="the GMM's time (the 15-Scenes fisher build's codebook step)"
    )
    proj.add_argument(
        "--runs",
        nargs="+",
        metavar="BUILD_JSON",
        help="small builds of one configuration (build --json): project a large one from them "
        "(three, two of them with different training shares, separate the encode step's costs)",
    )
    proj.add_argument(
        "--trains",
        nargs="+",
        metavar="TRAIN_JSON",
        help="trainings (train --json) on their feature sets: one on a few rows and others whose "
        "rows x iterations differ, or all at --target-iterations (then fixed + per row)",
    )
    proj.add_argument("--target-iterations", type=int, default=40, help="L-BFGS iterations of the large training")
    proj.add_argument("--target-images", type=int, default=50_000)
    proj.add_argument("--target-train", type=int, default=25_000)
    proj.add_argument("--large", help="the large build's report, to compare with the projection")
    proj.add_argument("--large-train", help="the large training's report")
    proj.add_argument("--json")

    args = parser.parse_args()
    if args.command == "generate":
        generate(args.out, args.n, args.classes, args.seed, args.min_side, args.max_side, args.quality)
        return 0
    if args.command in (
        "stage-costs",
        "train-costs",
        "linear-costs",
        "codec-costs",
    ):  # one thread: CPU seconds of one core
        os.environ["NUMBA_NUM_THREADS"] = "1"
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    from _bench_utils import announce_machine, write_json

    machine = announce_machine()
    commands_run = {
        "build": run_build,
        "train": run_train,
        "cluster-startup": cluster_startup,
        "linear-costs": linear_costs,
        "codec-costs": codec_costs,
        "stage-costs": stage_costs,
        "train-costs": train_costs,
        "project": project,
    }
    report = commands_run[args.command](args)
    report["machine"] = machine
    print(json.dumps(report, indent=2))
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
