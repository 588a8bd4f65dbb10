#!/usr/bin/env python
"""Benchmark classify_images' dense SIFT against OpenCV's SIFT.compute, one core.

On the same randomly chosen images (loaded with ``load_grayscale``, longer
side <= 300 px, loading not timed) it times

(a) ``dense_sift`` for the HIK nSVM / vl_phow setting (patch sizes 16, 24, 32,
    40, step 3) and for 16-px patches with step 8, smoothing included;
(b) ``cv2.SIFT_create().compute`` on the same 16-px / step-8 grid, keypoint
    size ``opencv_keypoint_size(16) = 16/6`` so that OpenCV's descriptor
    window covers the same 16-px patch, angle 0 (keypoints built untimed).

Everything runs on one thread (``cv2.setNumThreads(1)``, BLAS / numba / OpenMP
thread counts set to 1 before importing numpy).  Each setting is timed
``--repeats`` times over all images; the fastest pass is reported (the
machine is shared, the minimum is the least disturbed measurement), together
with the median and the thread CPU time.

Example::

    python benchmarks/bench_dsift.py --n-images 40 --seed 0 --out bench_dsift.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import cv2
import numba
import numpy as np
from _bench_utils import announce_machine, pin_threads

from classify_images.features import dense_sift, load_grayscale, opencv_keypoint_size
from classify_images.features.dsift import grid_frames

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATASET = REPO.parent / "shared" / "datasets" / "scene15"
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".pgm", ".tif", ".tiff"}


def run_line() -> str:
    """When, under which load and with which library versions (the processor: ``announce_machine``)."""
    load = "n/a"
    if hasattr(os, "getloadavg"):
        load = f"{os.getloadavg()[0]:.2f}"
    return (
        f"{datetime.datetime.now().astimezone().isoformat(timespec='seconds')} | "
        f"{os.cpu_count()} logical cores (1 used) | load avg {load} | "
        f"Python {platform.python_version()}, numpy {np.__version__}, "
        f"OpenCV {cv2.__version__}, numba {numba.__version__}"
    )


def list_images(dataset: Path) -> list[Path]:
    return sorted(p for p in dataset.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)


def time_passes(fn, repeats: int) -> dict:
    """Run ``fn()`` ``repeats`` times; wall and thread-CPU seconds per pass."""
    walls, cpus = [], []
    for _ in range(repeats):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.thread_time() - c0)
    return {"wall_min": min(walls), "wall_median": statistics.median(walls), "cpu_min": min(cpus)}


def bench(args: argparse.Namespace) -> dict:
    cv2.setNumThreads(1)
    paths = list_images(args.dataset)
    if not paths:
        raise SystemExit(f"no images under {args.dataset}")
    rng = random.Random(args.seed)
    paths = rng.sample(paths, min(args.n_images, len(paths)))
    images = [load_grayscale(p, max_side=args.max_side) for p in paths]
    images_u8 = [np.rint(im * 255.0).astype(np.uint8) for im in images]
    n_img = len(images)

    results: dict = {
        "run": run_line(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "dataset": str(args.dataset),
        "n_images": n_img,
        "seed": args.seed,
        "max_side": args.max_side,
        "mean_image_shape": [
            float(np.mean([im.shape[0] for im in images])),
            float(np.mean([im.shape[1] for im in images])),
        ],
        "repeats": args.repeats,
        "settings": {},
    }

    # warm-up (numba cache load / compile, OpenCV init)
    dense_sift(images[0], (16, 24, 32, 40), 3)
    cv2.SIFT_create().compute(images_u8[0], [cv2.KeyPoint(20.0, 20.0, 2.0, 0)])

    settings = {
        "dsift_4sizes_step3": ((16, 24, 32, 40), 3),
        "dsift_16_step8": ((16,), 8),
    }
    for name, (sizes, step) in settings.items():
        out: list = []

        def run(sizes=sizes, step=step, out=out):
            out.clear()
            for im in images:
                out.append(dense_sift(im, sizes, step))

        t = time_passes(run, args.repeats)
        n_desc = sum(len(r) for r in out)
        low = sum(int((r.raw_norm <= 1.0).sum()) for r in out)
        results["settings"][name] = {
            "patch_sizes": list(sizes),
            "step": step,
            "descriptors": n_desc,
            "descriptors_per_image": n_desc / n_img,
            "low_contrast_fraction": low / max(n_desc, 1),
            **t,
            "descriptors_per_s": n_desc / t["wall_min"],
            "images_per_s": n_img / t["wall_min"],
            "ms_per_image": 1e3 * t["wall_min"] / n_img,
        }

    # OpenCV on the 16-px / step-8 grid, keypoint size covering the same patch
    size = opencv_keypoint_size(16)
    keypoints = []
    for im in images:
        fx, fy, _ = grid_frames(im.shape, (16,), 8)
        keypoints.append([cv2.KeyPoint(float(x), float(y), size, 0) for x, y in zip(fx, fy)])
    sift = cv2.SIFT_create()
    counts: list[int] = []

    def run_cv():
        counts.clear()
        for im, kps in zip(images_u8, keypoints):
            _, d = sift.compute(im, kps)
            counts.append(0 if d is None else d.shape[0])

    t = time_passes(run_cv, args.repeats)
    n_desc = sum(counts)
    results["settings"]["opencv_sift_16_step8"] = {
        "patch_sizes": [16],
        "step": 8,
        "keypoint_size": size,
        "descriptors": n_desc,
        "descriptors_per_image": n_desc / n_img,
        **t,
        "descriptors_per_s": n_desc / t["wall_min"],
        "images_per_s": n_img / t["wall_min"],
        "ms_per_image": 1e3 * t["wall_min"] / n_img,
    }
    ours = results["settings"]["dsift_16_step8"]
    theirs = results["settings"]["opencv_sift_16_step8"]
    results["speedup_vs_opencv_per_descriptor"] = ours["descriptors_per_s"] / theirs["descriptors_per_s"]
    results["speedup_vs_opencv_per_descriptor_cpu"] = (theirs["cpu_min"] / theirs["descriptors"]) / (
        ours["cpu_min"] / ours["descriptors"]
    )
    results["targets"] = {
        "4sizes_step3_descriptors_per_s>=2e5": results["settings"]["dsift_4sizes_step3"]["descriptors_per_s"] >= 2e5,
        "speedup_vs_opencv>=40": results["speedup_vs_opencv_per_descriptor"] >= 40,
    }
    results["run_end"] = run_line()
    return results


def report(res: dict) -> None:
    print(res["run"])
    print(f"command: {res['command']}")
    print(
        f"dataset: {res['dataset']}  images: {res['n_images']} (seed {res['seed']}, max side {res['max_side']}, "
        f"mean shape {res['mean_image_shape'][0]:.0f}x{res['mean_image_shape'][1]:.0f})  repeats: {res['repeats']}"
    )
    print(
        f"{'setting':<24}{'desc/img':>10}{'desc/s':>13}{'img/s':>9}{'ms/img':>9}{'ms/img med':>11}{'cpu ms/img':>11}{'low-c':>7}"
    )
    for name, s in res["settings"].items():
        n = res["n_images"]
        low = s.get("low_contrast_fraction")
        print(
            f"{name:<24}{s['descriptors_per_image']:>10.0f}{s['descriptors_per_s']:>13.3e}{s['images_per_s']:>9.1f}"
            f"{s['ms_per_image']:>9.3f}{1e3 * s['wall_median'] / n:>11.3f}{1e3 * s['cpu_min'] / n:>11.3f}"
            f"{'' if low is None else format(low, '.3f'):>7}"
        )
    print(
        f"speed-up vs OpenCV SIFT.compute per descriptor (16 px, step 8): "
        f"{res['speedup_vs_opencv_per_descriptor']:.1f}x wall, {res['speedup_vs_opencv_per_descriptor_cpu']:.1f}x CPU time"
    )
    for k, v in res["targets"].items():
        print(f"target {k}: {'met' if v else 'MISSED'}")
    print(res["run_end"])


def main(argv: list[str] | None = None) -> int:
    pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--dataset", type=Path, default=DEFAULT_DATASET, help="folder of class folders (default: %(default)s)"
    )
    ap.add_argument("--n-images", type=int, default=40, help="number of random images (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="random seed for the image choice (default: %(default)s)")
    ap.add_argument("--max-side", type=int, default=300, help="longer side after resizing (default: %(default)s)")
    ap.add_argument(
        "--repeats", type=int, default=3, help="timed passes per setting, fastest reported (default: %(default)s)"
    )
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    machine = announce_machine()
    res = {"machine": machine, **bench(args)}
    report(res)
    if args.out is not None:
        args.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
