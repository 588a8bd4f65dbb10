"""CPU time of ``fit`` and ``decision_function`` of every classifier on one feature set.

Run with two installations of the package (e.g. before and after a refactoring) on the same
feature set to compare them side by side; only the registry's ``make_classifier`` is used, so
the script runs against older versions too.  One thread (BLAS and numba), seeded estimators,
one warm-up fit per classifier (numba compilation or cache loading is not counted), then the
minimum CPU time of ``--repeats`` fits and predictions.

Usage::

    python benchmarks/bench_fit_predict.py --features FEATURE_SET [--tile 8] [--repeats 3] [--label new]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, best_time, pin_threads

from classify_images.classifiers.registry import make_classifier

RUNS = {
    "linear": ("linear", {}),
    "pmsvm": ("pmsvm", {"random_state": 0}),
    "pmsvm-lut": ("pmsvm", {"random_state": 0, "lut_bins": 100, "p": -8}),
    "mbkl": ("mbkl", {"random_state": 0}),
    "nsvm": ("nsvm", {"random_state": 0}),
}


def main() -> None:
    pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", required=True, help="feature-set folder (X_train.npy, y_train.npy, X_test.npy)")
    parser.add_argument("--tile", type=int, default=1, help="repeat the rows this many times (a larger problem)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", default="", help="name of this installation in the output")
    args = parser.parse_args()
    machine = announce_machine()
    folder = Path(args.features)
    X = np.tile(np.load(folder / "X_train.npy"), (args.tile, 1))
    y = np.tile(np.load(folder / "y_train.npy"), args.tile)
    X_test = np.tile(np.load(folder / "X_test.npy"), (args.tile, 1))
    result = {}
    for run, (name, params) in RUNS.items():
        make_classifier(name, params).fit(X[: len(X) // args.tile], y[: len(y) // args.tile])  # warm-up
        fitted = []
        fit_s = best_time(
            lambda: fitted.append(make_classifier(name, params).fit(X, y)), args.repeats, time.process_time
        )
        predict_s = best_time(lambda: fitted[-1].decision_function(X_test), args.repeats, time.process_time)
        result[run] = {"fit_cpu_s": round(fit_s, 4), "predict_cpu_s": round(predict_s, 4)}
    print(json.dumps({"machine": machine, "label": args.label, "shape": list(X.shape), "results": result}))


if __name__ == "__main__":
    main()
