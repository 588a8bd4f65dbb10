#!/usr/bin/env python
"""Encode speed of LLC against sparse coding (LARS-lasso), and of VLAD and Fisher vectors.

Data: dense SIFT (16-px patches, step 6: the ScSPM / ``llc`` setting) of ``--n-images``
random 15-Scenes images (longer side <= 300).  The codebooks are learnt from the
descriptors of ``--n-train-images`` *other* images: k-means 1024 (LLC, ``n_iter`` 30),
a sparse-coding dictionary of 1024 atoms (λ = 0.15, 200 mini-batches), k-means 256
(VLAD) and PCA 64 + GMM 256 (Fisher vectors, 30 EM iterations).

Every encoder gets the same descriptors, image by image, as the pipeline calls it
(LLC and sparse codes: ``encode(descriptors)``; VLAD and Fisher: ``encode(descriptors,
cells, n_cells)`` over the configs' pyramids), one thread.  The encoders run alternately
``--repeats`` times; the fastest pass is reported as thread CPU time and descriptors per
CPU-second (the machine is shared: compare the ratios of the same run).

``--linear-n`` > 0 adds a check that the linear SVM (``QuadraticHingeSVC``, eigenbasis
solver) trains on Fisher-vector-sized rows: ``--linear-n`` synthetic unit-norm signed
rows of 262 144 dims in 15 classes; wall time and peak memory (ru_maxrss) are reported.

Example::

    python benchmarks/bench_encoders.py --n-images 20 --repeats 3 --linear-n 1500
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import time
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, pin_threads, write_json

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = Path(os.environ.get("CLASSIFY_IMAGES_DATASETS", REPO.parent / "shared" / "datasets")) / "scene15"


def _images(paths):
    from classify_images.features.dsift import dense_sift
    from classify_images.features.preprocess import load_grayscale

    out = []
    for path in paths:
        image = load_grayscale(path, max_side=300)
        result = dense_sift(image, 16, 6)
        out.append((result.descriptors, result.x, result.y, image.shape))
    return out


def _codebooks(train: np.ndarray, seed: int) -> dict:
    from classify_images.coding import learn_fisher_model, learn_kmeans_codebook, learn_sparse_dictionary

    start = time.perf_counter()
    books = {
        "kmeans1024": learn_kmeans_codebook(train, 1024, max_iter=30, random_state=seed),
        "dictionary1024": learn_sparse_dictionary(train, 1024, n_iter=200, random_state=seed),
        "kmeans256": learn_kmeans_codebook(train, 256, max_iter=30, random_state=seed),
        "fisher256": learn_fisher_model(train, 256, pca_dims=64, max_iter=30, random_state=seed),
    }
    print(f"codebooks learnt in {time.perf_counter() - start:.0f} s", flush=True)
    return books


def _encoders(books: dict) -> dict:
    from classify_images.coding import FisherEncoder, LlcCoder, SparseCoder, VladEncoder
    from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells

    llc, sparse = LlcCoder(books["kmeans1024"]), SparseCoder(books["dictionary1024"], 0.15)
    vlad, fisher = VladEncoder(books["kmeans256"]), FisherEncoder(books["fisher256"])

    def aggregate(encoder, levels):
        return lambda d, x, y, shape: encoder.encode(d, pyramid_cells(x, y, shape, levels), n_pyramid_cells(levels))

    return {
        "LLC (k=5, K=1024)": lambda d, x, y, shape: llc.encode(d),
        "sparse coding, LARS (λ=0.15, K=1024)": lambda d, x, y, shape: sparse.encode(d),
        "VLAD (K=256, 1x1+2x2)": aggregate(vlad, (1, 2)),
        "Fisher (PCA 64, K=256, 1x1+2x2+3x1)": aggregate(fisher, (1, 2, "3x1")),
    }


def _linear_check(n: int, seed: int) -> dict:
    from classify_images.classifiers import QuadraticHingeSVC

    rng = np.random.default_rng(seed)
    d, n_classes = 262_144, 15
    y = np.arange(n) % n_classes
    X = np.empty((n, d), dtype=np.float32)
    centres = rng.standard_normal((n_classes, d), dtype=np.float32) * 0.5
    for start in range(0, n, 100):
        block = rng.standard_normal((min(100, n - start), d), dtype=np.float32) + centres[y[start : start + 100]]
        X[start : start + block.shape[0]] = block / np.linalg.norm(block, axis=1, keepdims=True)
    del centres
    start = time.perf_counter()
    model = QuadraticHingeSVC(C=10.0).fit(X, y)
    seconds = time.perf_counter() - start
    accuracy = float((model.predict(X) == y).mean())
    return {
        "n": n,
        "d": d,
        "classes": n_classes,
        "fit_seconds": round(seconds, 1),
        "train_accuracy": accuracy,
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }


def main(argv=None) -> dict:
    pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--n-images", type=int, default=20)
    p.add_argument("--n-train-images", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--linear-n", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    machine = announce_machine()

    paths = sorted(args.data.glob("*/*.jpg"))
    if not paths:
        raise SystemExit(f"no images in {args.data} (pass --data or set CLASSIFY_IMAGES_DATASETS)")
    random.Random(args.seed).shuffle(paths)
    images = _images(paths[: args.n_images])
    train = np.concatenate([d for d, *_ in _images(paths[args.n_images : args.n_images + args.n_train_images])])
    n_descriptors = sum(d.shape[0] for d, *_ in images)
    print(f"{n_descriptors} descriptors in {len(images)} images; {train.shape[0]} training descriptors", flush=True)
    encoders = _encoders(_codebooks(train, args.seed))

    best = {name: np.inf for name in encoders}
    for _ in range(args.repeats):
        for name, encode in encoders.items():
            start = time.thread_time()
            for descriptors, x, y, shape in images:
                encode(descriptors, x, y, shape)
            best[name] = min(best[name], time.thread_time() - start)
    rows = {
        name: {"cpu_seconds": round(s, 3), "descriptors_per_cpu_second": round(n_descriptors / s)}
        for name, s in best.items()
    }
    for name, row in rows.items():
        print(
            f"{name:40s} {row['cpu_seconds']:8.3f} CPU-s  {row['descriptors_per_cpu_second']:>10d} descriptors/CPU-s",
            flush=True,
        )
    llc, lars = best["LLC (k=5, K=1024)"], best["sparse coding, LARS (λ=0.15, K=1024)"]
    print(f"LLC is {lars / llc:.1f}x faster than sparse coding (same descriptors, same run)", flush=True)
    result = {
        "machine": machine,
        "args": {k: str(v) for k, v in vars(args).items()},
        "n_descriptors": n_descriptors,
        "encoders": rows,
        "llc_speedup_over_lars": round(lars / llc, 2),
    }
    if args.linear_n:
        result["linear_on_fisher_sized_rows"] = _linear_check(args.linear_n, args.seed)
        print(result["linear_on_fisher_sized_rows"], flush=True)
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
