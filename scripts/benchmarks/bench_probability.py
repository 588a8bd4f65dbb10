"""Cost of calibrated probabilities (``train --probability``, issue 25 point 6).

For each classifier, CPU seconds of: the fit alone; the fit plus
:func:`classify_images.classifiers.calibration.calibrate` (K held-out fits, Platt's sigmoids);
and scikit-learn's ``CalibratedClassifierCV(method="sigmoid", ensemble=False, cv=K)`` on the
same rows (the peer: it also fits K clones and the final model), side by side in the same run,
with the largest difference between the two probability matrices on the test rows and the
test log-loss.  Data: a feature set (``--featureset``; its train / test rows) or, by default,
synthetic non-negative L1-normalised histograms (15 classes, ``--train-per-class`` rows each).
One thread (BLAS, numba), each classifier warmed up (numba compiled) before timing.

    python benchmarks/bench_probability.py [--featureset DIR] [--folds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def synthetic(n_classes: int, n_train: int, n_test: int, n_features: int, seed: int = 0):
    """Non-negative L1-normalised histograms whose classes differ in a few bins each."""
    rng = np.random.default_rng(seed)
    centres = rng.gamma(0.3, size=(n_classes, n_features))

    def draw(per_class):
        y = np.repeat(np.arange(n_classes), per_class)
        X = rng.poisson(0.25 * centres[y] + rng.gamma(0.3, size=(len(y), n_features))).astype(np.float64)
        X /= np.maximum(X.sum(axis=1, keepdims=True), 1.0)
        return X, y

    return (*draw(n_train), *draw(n_test))


def cpu(function):
    start = time.process_time()
    result = function()
    return result, time.process_time() - start


def main(argv=None) -> dict:
    from _bench_utils import announce_machine, load_features, pin_threads, write_json
    from bench_startup import revision
    from sklearn.base import clone
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.metrics import log_loss

    from classify_images.classifiers import make_classifier
    from classify_images.classifiers.base import warm_up
    from classify_images.classifiers.calibration import calibrate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--featureset")
    parser.add_argument("--train-per-class", type=int, default=100)
    parser.add_argument("--test-per-class", type=int, default=50)
    parser.add_argument("--n-features", type=int, default=1024)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--classifiers", default="linear,pmsvm,nsvm,mbkl")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    pin_threads()
    machine = announce_machine()
    if args.featureset:
        fs = load_features(args.featureset)
        X, y, X_test, y_test = np.asarray(fs.X_train), fs.y_train, np.asarray(fs.X_test), fs.y_test
        data = f"feature set {args.featureset}"
    else:
        X, y, X_test, y_test = synthetic(15, args.train_per_class, args.test_per_class, args.n_features)
        data = f"synthetic histograms, 15 classes, {args.train_per_class} train / {args.test_per_class} test per class"
    print(
        f"revision {revision(REPO)}; {data}; {X.shape[0]} x {X.shape[1]}; {args.folds} folds; CPU seconds, one thread"
    )
    results = {}
    for name in args.classifiers.split(","):
        estimator = make_classifier(name, {"random_state": 0} if name != "linear" else {})
        warm_up(estimator, X, y)
        fitted, fit_seconds = cpu(lambda: clone(estimator).fit(X, y))
        ours, calibrate_seconds = cpu(lambda: calibrate(fitted, X, y, folds=args.folds))
        peer, peer_seconds = cpu(
            lambda: CalibratedClassifierCV(clone(estimator), method="sigmoid", ensemble=False, cv=args.folds).fit(X, y)
        )
        proba, reference = ours.predict_proba(X_test), peer.predict_proba(X_test)
        row = {
            "fit_seconds": fit_seconds,
            "fit_and_calibrate_seconds": fit_seconds + calibrate_seconds,
            "ratio_to_fit": (fit_seconds + calibrate_seconds) / fit_seconds,
            "calibrated_classifier_cv_seconds": peer_seconds,
            "max_abs_difference": float(np.abs(proba - reference).max()),
            "test_log_loss": float(log_loss(y_test, proba, labels=np.unique(y))),
            "test_accuracy": float(np.mean(ours.classes_[proba.argmax(axis=1)] == y_test)),
        }
        results[name] = row
        print(
            f"{name:>6}: fit {fit_seconds:7.2f} s; fit + calibrate {row['fit_and_calibrate_seconds']:7.2f} s "
            f"({row['ratio_to_fit']:.1f} x); CalibratedClassifierCV {peer_seconds:7.2f} s; "
            f"max |difference| {row['max_abs_difference']:.1e}; test log-loss {row['test_log_loss']:.3f}, "
            f"accuracy {100 * row['test_accuracy']:.1f} %"
        )
    payload = {"machine": machine, "data": data, "folds": args.folds, "results": results}
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
