"""Left-right flips on a built feature set: training augmentation and test-time averaging.

Computes the rows of the mirrored training and test images of a feature set (its own
extractor: same codebook and normaliser; each mirrored image its own stage-cache entry,
timed), chooses C of the linear squared-hinge SVM by 3-fold CV on the unflipped training rows,
and compares, side by side on the same split (Chatfield et al., BMVC 2014):

* ``plain``        — trained on the training rows, tested on the test rows;
* ``flip-train``   — trained on the training rows and their mirrors (2n rows, same C);
* ``flip-test``    — plain, decision values averaged over each test image and its mirror;
* ``flip-both``    — both.

::

    python benchmarks/bench_flip.py bench-colour/s15/fs-gray --json docs/benchmarks/flip-subset.json

Results: docs/benchmarks/colour.md.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from _bench_utils import LINEAR_C_GRID, announce_machine, scaled_C_grid, select_by_cv, write_json

from classify_images.classifiers import QuadraticHingeSVC
from classify_images.pipeline.extraction.extractor import FeatureExtractor, readable_fingerprint
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import _image_paths, mean_per_class_accuracy


def mirrored_rows(extractor: FeatureExtractor, paths: list[str]) -> np.ndarray:
    """The feature vectors of the mirrored images (float32, one row per path)."""
    rows = []
    for path in paths:
        fingerprint, reason = readable_fingerprint(path)
        if not fingerprint:
            raise SystemExit(f"{path}: {reason}")
        rows.append(extractor.vector(path, fingerprint, flip=True))
    return np.asarray(rows, dtype=np.float32)


def compare(X_train, y_train, X_test, y_test, F_train, F_test, seed: int = 0) -> dict:
    """The four variants' accuracies with one C (3-fold CV on the unflipped training rows)."""
    grid = scaled_C_grid(X_train, LINEAR_C_GRID)

    def fit_score(C, train, valid):
        model = QuadraticHingeSVC(C=C).fit(X_train[train], y_train[train])
        return mean_per_class_accuracy(y_train[valid], model.predict(X_train[valid]))

    C, _ = select_by_cv(fit_score, grid, y_train, folds=3, seed=seed)
    results = {"C": C}
    for trained, (X, y) in {
        "plain": (X_train, y_train),
        "flip-train": (np.concatenate([X_train, F_train]), np.concatenate([y_train, y_train])),
    }.items():
        start = time.perf_counter()
        model = QuadraticHingeSVC(C=C).fit(X, y)
        seconds = time.perf_counter() - start
        single = model.decision_function(X_test)
        averaged = (single + model.decision_function(F_test)) / 2
        for name, scores in ((trained, single), ("flip-test" if trained == "plain" else "flip-both", averaged)):
            predicted = model.classes_[scores.argmax(axis=1)]
            results[name] = {"accuracy": float(mean_per_class_accuracy(y_test, predicted)), "train_seconds": seconds}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("featureset")
    parser.add_argument("--cache-dir", help="stage cache for the mirrored images (default: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    machine = announce_machine()
    fs = load_feature_set(args.featureset)
    extractor = FeatureExtractor.from_feature_set(fs, cache_dir=args.cache_dir)
    wall, cpu = time.perf_counter(), time.process_time()
    F_train = mirrored_rows(extractor, _image_paths(fs, fs.train_paths))
    F_test = mirrored_rows(extractor, _image_paths(fs, fs.test_paths))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    X_train, X_test = np.asarray(fs.X_train), np.asarray(fs.X_test)
    y_train, y_test = np.asarray(fs.y_train), np.asarray(fs.y_test)
    results = compare(X_train, y_train, X_test, y_test, F_train, F_test, args.seed)
    n_images = len(fs.train_paths) + len(fs.test_paths)
    print(f"mirrored rows of {n_images} images: {wall:.0f} s wall, {cpu:.0f} s CPU; C = {results['C']:.3g}")
    for name in ("plain", "flip-train", "flip-test", "flip-both"):
        r = results[name]
        gain = 100 * (r["accuracy"] - results["plain"]["accuracy"])
        print(f"  {name:>10}: {100 * r['accuracy']:.2f} % ({gain:+.2f} points), training {r['train_seconds']:.2f} s")
    write_json(
        args.json,
        {
            "command": sys.argv,
            "machine": machine,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "featureset": args.featureset,
            "mirror_seconds": {"wall": wall, "cpu": cpu, "images": n_images},
            "results": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
