#!/usr/bin/env python
"""Fisher-vector encode speed: this checkout's encoder against another commit's, side by side.

Data: dense SIFT of the ``fisher`` config (16/24/32/40-px patches every 4 px, longer
side <= 300, uint8 round trip as the pipeline stores them) of ``--n-images`` random
15-Scenes images; the PCA 64 + GMM 256 model is learnt from ``--n-train-images``
*other* images (``--em-iter`` EM iterations: the model's quality does not matter for
speed).  Both encoders get the same descriptors and pyramid (1×1 + 2×2 + 3×1), image
by image, as the pipeline calls them; they run alternately ``--repeats`` times and the
fastest pass is reported in thread CPU time (one BLAS thread).  The reference encoder
is ``coding/fisher.py`` as of ``--reference`` (default ``main``), read with ``git show``
and imported on its own.  Also reported: the largest entry difference between the two
encoders' vectors and its relative L2 size.

Example::

    python benchmarks/bench_fisher_encoder.py --n-images 8 --reference main --out fisher-encoder.json
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, pin_threads, write_json
from bench_encoders import DEFAULT_DATA, REPO

LEVELS = (1, 2, "3x1")


def _reference_module(commit: str):
    """``coding/fisher.py`` of ``commit``, imported as a module of the installed package."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:coding/fisher.py"], capture_output=True, text=True, check=True
    ).stdout
    folder = Path(tempfile.mkdtemp())
    path = folder / "fisher_reference.py"
    path.write_text(source.replace("from .vlad import", "from classify_images.coding.vlad import"))
    spec = importlib.util.spec_from_file_location("fisher_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _images(paths):
    from classify_images.features.dsift import dense_sift, dequantize_descriptors, quantize_descriptors
    from classify_images.features.preprocess import load_grayscale

    out = []
    for path in paths:
        image = load_grayscale(path, max_side=300)
        result = dense_sift(image, (16, 24, 32, 40), 4)
        out.append((dequantize_descriptors(quantize_descriptors(result.descriptors)), result.x, result.y, image.shape))
    return out


def main(argv=None) -> dict:
    pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--n-images", type=int, default=8)
    p.add_argument("--n-train-images", type=int, default=8)
    p.add_argument("--em-iter", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--reference", default="main", help="git commit of the reference encoder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vlfeat", action="store_true", help="also time VLFeat's vl_fisher (cyvlfeat)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    from classify_images.coding import FisherEncoder, learn_fisher_model
    from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells

    paths = sorted(args.data.glob("*/*.jpg"))
    if not paths:
        sys.exit(f"error: no images in {args.data} (pass --data or set CLASSIFY_IMAGES_DATASETS)")
    random.Random(args.seed).shuffle(paths)
    images = _images(paths[: args.n_images])
    train = np.concatenate([d for d, *_ in _images(paths[args.n_images : args.n_images + args.n_train_images])])
    n_descriptors = sum(d.shape[0] for d, *_ in images)
    machine = announce_machine()
    print("one thread", flush=True)
    print(f"{n_descriptors} descriptors in {len(images)} images; {train.shape[0]} training descriptors", flush=True)
    model = learn_fisher_model(train, 256, pca_dims=64, max_iter=args.em_iter, random_state=args.seed)
    encoders = {
        f"reference ({args.reference})": _reference_module(args.reference).FisherEncoder(model),
        "this checkout": FisherEncoder(model),
    }
    layouts = [pyramid_cells(x, y, shape, LEVELS) for _, x, y, shape in images]
    best, vectors = {name: np.inf for name in encoders}, {}
    for _ in range(args.repeats):
        for name, encoder in encoders.items():
            start = time.thread_time()
            vectors[name] = [
                encoder.encode(d, cells, n_pyramid_cells(LEVELS)) for (d, *_), cells in zip(images, layouts)
            ]
            best[name] = min(best[name], time.thread_time() - start)
    reference, current = (np.concatenate(vectors[name]) for name in encoders)
    rows = {
        name: {"cpu_seconds": round(s, 3), "descriptors_per_cpu_second": round(n_descriptors / s)}
        for name, s in best.items()
    }
    names = list(encoders)
    speedup = best[names[0]] / best[names[1]]
    for name, row in rows.items():
        print(
            f"{name:24s} {row['cpu_seconds']:8.3f} CPU-s  {row['descriptors_per_cpu_second']:>9d} descriptors/CPU-s",
            flush=True,
        )
    difference = {
        "max_abs": float(np.abs(current - reference).max()),
        "max_abs_entry": float(np.abs(reference).max()),
        "relative_l2": float(np.linalg.norm(current - reference) / np.linalg.norm(reference)),
    }
    print(f"this checkout is {speedup:.2f}x the reference; difference {difference}", flush=True)
    result = {
        "machine": machine,
        "args": {k: str(v) for k, v in vars(args).items()},
        "n_descriptors": n_descriptors,
        "encoders": rows,
        "speedup": round(speedup, 2),
        "difference": difference,
    }
    if args.vlfeat:
        result["vlfeat"] = _against_vlfeat(encoders["this checkout"], model, images, layouts, args.repeats)
    if args.out:
        write_json(args.out, result)
    return result


def _against_vlfeat(encoder, model, images, layouts, repeats: int) -> dict:
    """CPU seconds per image of our encoder and of ``vl_fisher``, one cell and the pyramid, fastest of
    ``repeats`` alternating passes, and the largest entry difference of the one-cell vectors."""
    from cyvlfeat.fisher import fisher

    from classify_images.coding.pooling import n_pyramid_cells

    gmm = [np.ascontiguousarray(model[key], dtype=np.float32) for key in ("means", "variances", "weights")]
    n_cells = n_pyramid_cells(LEVELS)

    def ours_one_cell():
        return [encoder.encode(d, np.zeros((1, d.shape[0]), dtype=np.int64), 1) for d, *_ in images]

    def vlfeat_one_cell():
        return [np.ravel(fisher(np.ascontiguousarray(encoder.project(d)), *gmm, improved=True)) for d, *_ in images]

    def ours_pyramid():
        return [encoder.encode(d, cells, n_cells) for (d, *_), cells in zip(images, layouts)]

    def vlfeat_pyramid():
        out = []
        for (d, *_), cells in zip(images, layouts):
            x = encoder.project(d)
            out.append(
                [
                    np.ravel(fisher(np.ascontiguousarray(x[(cells == c).any(axis=0)]), *gmm, improved=True))
                    for c in range(n_cells)
                ]
            )
        return out

    runs = {
        "ours, one cell": ours_one_cell,
        "vl_fisher, one cell": vlfeat_one_cell,
        "ours, pyramid (8 cells)": ours_pyramid,
        "vl_fisher, pyramid (one call per cell)": vlfeat_pyramid,
    }
    best, outputs = {name: np.inf for name in runs}, {}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.process_time()
            outputs[name] = run()
            best[name] = min(best[name], time.process_time() - start)
    ms = {name: round(1000 * seconds / len(images), 2) for name, seconds in best.items()}
    ours, theirs = np.stack(outputs["ours, one cell"]), np.stack(outputs["vl_fisher, one cell"])
    result = {
        "ms_per_image": ms,
        "ratio_one_cell": round(best["ours, one cell"] / best["vl_fisher, one cell"], 3),
        "ratio_pyramid": round(best["ours, pyramid (8 cells)"] / best["vl_fisher, pyramid (one call per cell)"], 3),
        "one_cell_max_abs_difference": float(np.abs(ours - theirs).max()),
    }
    for name, value in ms.items():
        print(f"{name:40s} {value:8.2f} ms/image (CPU, one thread)", flush=True)
    print(
        f"ours / vl_fisher: one cell {result['ratio_one_cell']}, pyramid {result['ratio_pyramid']}; "
        f"one-cell max |difference| {result['one_cell_max_abs_difference']:.2e}",
        flush=True,
    )
    return result


if __name__ == "__main__":
    main()
