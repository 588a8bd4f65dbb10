"""Default parameters against fixed ones on a feature set: do the defaults fail silently?

Trains each classifier with its default parameters and with the former fixed values on
the stored split of a feature set (e.g. 15-Scenes ``bof-spm``: l1-normalised histograms)
and prints the mean per-class accuracy on its test rows, side by side in one run::

    python benchmarks/bench_defaults.py feature-sets/scene15-bof-spm

Results: docs/benchmarks/defaults.md, "Scale-aware defaults".
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from _bench_utils import announce_machine

from classify_images.classifiers import HIKnSVM, PmSVM, QuadraticHingeSVC
from classify_images.classifiers.base import warm_up
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import mean_per_class_accuracy


def candidates(X: np.ndarray) -> dict[str, object]:
    """The estimators compared (name -> unfitted estimator)."""
    l1 = float(np.abs(X).sum(axis=1).mean())
    median = float(np.median(X[X != 0]))
    return {
        "linear C=1 (former default)": QuadraticHingeSVC(C=1.0),
        "linear C='auto' (default)": QuadraticHingeSVC(),
        "pmsvm C=0.01 (former default, papers)": PmSVM(C=0.01, random_state=0),
        "pmsvm C='auto' (default)": PmSVM(random_state=0),
        "nsvm margin=0.02 (former default)": HIKnSVM(margin=0.02, random_state=0),
        "nsvm margin=0.02 l1, r=med/10": HIKnSVM(margin=0.02 * l1, learning_rate=median / 10, random_state=0),
        "nsvm margin=0.05 l1, r=med/40": HIKnSVM(margin=0.05 * l1, learning_rate=median / 40, random_state=0),
        "nsvm default": HIKnSVM(random_state=0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("featureset")
    parser.add_argument("--only", nargs="*", help="substrings of the candidate names to run")
    args = parser.parse_args(argv)
    announce_machine()
    fs = load_feature_set(args.featureset)
    X_train, X_test = np.asarray(fs.X_train), np.asarray(fs.X_test)
    print(f"{args.featureset}: {X_train.shape[0]} train, {X_test.shape[0]} test, {X_train.shape[1]} dims", flush=True)
    for name, estimator in candidates(X_train).items():
        if args.only and not any(part in name for part in args.only):
            continue
        warm_up(estimator, X_train, fs.y_train)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            estimator.fit(X_train, fs.y_train)
        seconds = time.perf_counter() - start
        accuracy = mean_per_class_accuracy(fs.y_test, estimator.predict(X_test))
        used = {
            k: round(float(getattr(estimator, k)), 6)
            for k in ("C_", "margin_", "learning_rate_")
            if hasattr(estimator, k)
        }
        note = f"  ({len(caught)} warnings: {str(caught[0].message)[:80]})" if caught else ""
        print(f"{name:40s} {100 * accuracy:6.2f} %  fit {seconds:6.2f} s  {used}{note}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
