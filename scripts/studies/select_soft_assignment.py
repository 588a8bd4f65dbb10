"""Choose soft assignment's ``k`` and β_rel on TRAINING images only (issue 11).

Procedure (stated in every result):

* **Images**: the training images of a built feature set's split (``--features``, e.g. the
  ``hik-nsvm`` build: split 0, 100 per class) — never its test images, never test accuracy.
* **Codebook**: that feature set's own (learnt from those training images' descriptors).
* **Grid**: ``--step`` (6 by default: a proxy for the paper's 3, a quarter of the
  descriptors), the other ``[sift]`` settings of the feature set.
* **Score**: for every (k, β_rel) of the grid and for hard VQ (k = 1), the pooled vectors
  of those images (``--pooling``: "faithful" = average, per-level L1; then L1), then the
  mean per-class accuracy of PmSVM-HI (p = -8, C = 0.01) over ``--folds`` stratified folds
  of the training images (seed 0).  The best mean wins.

The ``k_max`` nearest codewords of every descriptor are found once
(:func:`~classify_images.coding.soft_assignment.nearest_sq_distances`); every grid point
re-weights their prefixes (:func:`~classify_images.coding.soft_assignment.cell_statistics_of_neighbors`).

Usage::

    nice -n 10 python studies/select_soft_assignment.py --features FEATURE_SET --out select-soft.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' helpers

import argparse
import json
import time

import _bench_utils as U
import numpy as np

from classify_images.classifiers.pmsvm import PmSVM
from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells, weight_pyramid_levels
from classify_images.coding.soft_assignment import (
    cell_statistics_of_neighbors,
    codebook_scale,
    nearest_sq_distances,
    pool_cell_statistics,
)
from classify_images.features.dsift import dequantize_descriptors
from classify_images.pipeline.extraction.stages import compute_descriptors
from classify_images.pipeline.storage.feature_store import load_feature_set

POOLINGS = {"faithful": ("average", "l1"), "improved": ("sqrt", "l1"), "hik-nsvm": ("average", "none")}


def _rows(neighbor_data, n_words, levels, k, beta, method, level_normalization):
    rows = []
    for neighbors, sq_distances, cells in neighbor_data:
        stats = cell_statistics_of_neighbors(
            neighbors[:, :k], sq_distances[:, :k], cells, n_pyramid_cells(levels), n_words, beta
        )
        pooled = weight_pyramid_levels(pool_cell_statistics(stats, method), n_words, levels, level_normalization)
        rows.append(pooled / max(float(np.abs(pooled).sum()), 1e-30))
    return np.asarray(rows, dtype=np.float32)


def main() -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--features", required=True, type=Path, help="a built feature set (its training images and codebook)"
    )
    ap.add_argument("--out", default="select-soft.json")
    ap.add_argument("--step", type=int, default=6)
    ap.add_argument("--per-class", type=int, default=100, help="training images per class used (seeded subset)")
    ap.add_argument("--neighbors", type=int, nargs="+", default=[3, 5, 10])
    ap.add_argument("--betas", type=float, nargs="+", default=[1.0, 3.0, 10.0, 30.0])
    ap.add_argument("--pooling", choices=sorted(POOLINGS), default="faithful")
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()

    fs = load_feature_set(args.features)
    config = fs.config
    codebook = np.asarray(fs.codebook(), dtype=np.float32)
    n_words, levels = codebook.shape[0], list(config.pooling.levels)
    root = Path(fs.manifest["dataset"]["root"])
    train = fs.manifest["split"]["train"]
    classes = fs.class_names
    labels_all = np.array([classes.index(p.split("/")[0]) for p in train])
    rng = np.random.default_rng(0)
    chosen = np.sort(
        np.concatenate(
            [rng.permutation(np.flatnonzero(labels_all == c))[: args.per_class] for c in range(len(classes))]
        )
    )
    labels = labels_all[chosen]
    sift = dict(config.sift_params(), step=args.step)
    scale = codebook_scale(codebook)
    k_max = max(args.neighbors)

    cpu = time.process_time()
    neighbor_data, gaps = [], []
    for index in chosen:
        data = compute_descriptors(str(root / train[index]), config.image.max_side, sift)
        cells = pyramid_cells(data["x"], data["y"], tuple(int(v) for v in data["shape"]), levels)
        blocks = list(nearest_sq_distances(dequantize_descriptors(data["descriptors"]), codebook, k_max))
        neighbors = np.concatenate([b[1] for b in blocks]).astype(np.int16)  # compact: K ≤ 32767
        sq_distances = np.concatenate([b[2] for b in blocks]).astype(np.float32)
        gaps.append((sq_distances[:, 1].astype(np.float64) - sq_distances[:, 0]) / scale)
        neighbor_data.append((neighbors, sq_distances, cells))
    gaps = np.concatenate(gaps)
    encode_cpu = time.process_time() - cpu
    print(
        f"{len(chosen)} training images, step {args.step}: {encode_cpu:.0f} s CPU; (d2² - d1²)/s² quartiles "
        f"{np.percentile(gaps, [25, 50, 75]).round(3).tolist()}",
        flush=True,
    )

    method, level_normalization = POOLINGS[args.pooling]
    grid = [(1, 1.0)] + [(k, beta) for k in args.neighbors for beta in args.betas]
    features = {}

    def fit_score(value, tr, va):
        X = features[value]
        model = PmSVM(p=-8.0, C=0.01, random_state=0).fit(X[tr], labels[tr])
        return U.mean_per_class_accuracy(labels[va], model.predict(X[va]), len(classes))

    results = {}
    for value in grid:
        k, beta_rel = value
        features[value] = _rows(neighbor_data, n_words, levels, k, beta_rel / scale, method, level_normalization)
        _, scores = U.select_by_cv(fit_score, [value], labels, folds=args.folds, seed=0)
        score = 100 * scores[value]
        results[f"k={k} beta_rel={beta_rel:g}" if k > 1 else "hard (k=1)"] = score
        del features[value]
        print(f"  k = {k:3d}  beta_rel = {beta_rel:6g}: CV {score:.2f}", flush=True)
    best = max((name for name in results if name != "hard (k=1)"), key=results.get)
    out = {
        "protocol": {
            "features": str(args.features),
            "images": f"{len(chosen)} training images of split {config.dataset.seed}",
            "step": args.step,
            "pooling": args.pooling,
            "classifier": "PmSVM p=-8 C=0.01",
            "folds": args.folds,
            "codebook_scale": scale,
            "gap_quartiles": np.percentile(gaps, [25, 50, 75]).tolist(),
        },
        "cv_accuracy": results,
        "best": best,
        "cpu_seconds": round(time.process_time() - cpu, 1),
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"best: {best} ({results[best]:.2f}); hard: {results['hard (k=1)']:.2f}", flush=True)


if __name__ == "__main__":
    main()
