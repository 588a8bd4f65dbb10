#!/usr/bin/env python
"""The final fit after ``--search``: the search's Gram matrix reused, against recomputed.

``train_classifier("linear", ..., search={"C": grid}, mirrored=...)`` (what ``train``,
``experiment`` and ``run`` call) on the same rows twice per repeat, alternating: once as it is
(the final fit's eigenbasis takes the search's Gram matrix, ``eigenbasis.reused_gram``), once with
the reuse switched off (the fit computes the Gram matrix again, as before); CPU seconds of the
whole call and wall seconds of the final fit, best of ``--repeats``, and whether the two models
are identical bit for bit::

    python benchmarks/bench_gram_reuse.py --images 1500 --dims 65536 --classes 15 --mirrored

Synthetic rows: unit-norm Gaussian rows with a class offset (float32), mirrors a noisy permutation.
Results: docs/benchmarks/augmentation.md ("The final fit reuses the search's Gram matrix").
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
from _bench_utils import announce_machine, write_json

from classify_images.pipeline.training import evaluation


def _synthetic(images: int, dims: int, classes: int, mirrored: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(images) % classes
    X = rng.normal(size=(images, dims)).astype(np.float32)
    X[np.arange(images), y] += 30.0
    if mirrored:
        X = np.concatenate([X, X[:, rng.permutation(dims)] + rng.normal(0, 0.3, X.shape).astype(np.float32)])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def _train(X, y, grid, mirrored: bool, reuse: bool):
    original = evaluation.reused_gram
    if not reuse:
        evaluation.reused_gram = lambda X, K, **options: contextlib.nullcontext()
    try:
        cpu = time.process_time()
        result = evaluation.train_classifier("linear", {}, X, y, seed=0, search=grid, mirrored=mirrored)
        return result, time.process_time() - cpu
    finally:
        evaluation.reused_gram = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--dims", type=int, default=65536)
    parser.add_argument("--classes", type=int, default=15)
    parser.add_argument("--mirrored", action="store_true")
    parser.add_argument("--grid", default="1,3,10,30,100")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    machine = announce_machine()
    X, y = _synthetic(args.images, args.dims, args.classes, args.mirrored)
    grid = {"C": [float(v) for v in args.grid.split(",")]}
    best = {True: None, False: None}
    models = {}
    for _ in range(args.repeats):
        for reuse in (True, False):
            result, cpu = _train(X, y, grid, args.mirrored, reuse)
            models[reuse] = result.estimator
            run = {"cpu_s": cpu, "fit_wall_s": result.train_seconds, "search_wall_s": result.search["seconds"]}
            best[reuse] = run if best[reuse] is None else {k: min(v, best[reuse][k]) for k, v in run.items()}
    same = bool(
        np.array_equal(models[True].coef_, models[False].coef_)
        and np.array_equal(models[True].intercept_, models[False].intercept_)
    )
    for reuse in (True, False):
        b = best[reuse]
        print(
            f"{'reused' if reuse else 'recomputed'} Gram matrix: {X.shape[0]} rows x {X.shape[1]} dims, "
            f"whole train {b['cpu_s']:.1f} CPU-s, final fit {b['fit_wall_s']:.1f} s wall, search {b['search_wall_s']:.1f} s wall"
        )
    ratio = best[True]["cpu_s"] / best[False]["cpu_s"]
    print(f"CPU ratio reused / recomputed: {ratio:.3f}; same model bit for bit: {same}")
    write_json(
        args.json,
        {
            "machine": machine,
            "rows": list(X.shape),
            "grid": grid,
            "mirrored": args.mirrored,
            "reused": best[True],
            "recomputed": best[False],
            "cpu_ratio": round(ratio, 4),
            "same_model": same,
        },
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
