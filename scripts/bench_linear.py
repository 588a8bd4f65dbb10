"""Benchmark QuadraticHingeSVC against scikit-learn's LinearSVC (squared hinge, one-vs-rest).

Part 1 trains both on the same objective (LIBLINEAR's: the intercept is the
weight of a constant feature 1, penalised) and the same ``C``, single-threaded,
side by side: training time, iterations, objective value (both evaluated by
the same float64 code), mean per-class accuracy on the test rows.  It also
trains QuadraticHingeSVC with the ScSPM reference formulation (unpenalised
bias) and with ``solver="features"`` (no row-space reduction).

Part 2 chooses ``C`` by 3-fold cross-validation on the training rows only
(held-out thirds of the training set; the test rows are never looked at),
refits on all training rows and reports the test accuracy.

Usage::

    python scripts/bench_linear.py --features /work/features/scene15-scspm --out bench_linear.json
"""

from __future__ import annotations

import argparse
import time
import warnings

import _linear_bench_utils as U  # first: pins BLAS threads before NumPy loads

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from classify_images.classifiers.linear import QuadraticHingeSVC, paper_lambda_to_C

def _timed_fit(model, X, y) -> tuple[object, float, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        start = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - start
    return model, seconds, [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]


def compare_solvers(feats: U.Features, C: float, tol: float) -> list[dict]:
    """Part 1: side-by-side training on the same objective."""
    X, y = feats.X_train, feats.y_train
    # evaluates any (coef_, intercept_) with LIBLINEAR's objective, float64 products
    judge = QuadraticHingeSVC(C=C, penalize_intercept=True, intercept_scaling=1.0)
    judge.classes_, judge.n_features_in_ = np.unique(y), X.shape[1]
    runs = [
        ("QuadraticHingeSVC (span, tol=%g)" % tol,
         QuadraticHingeSVC(C=C, penalize_intercept=True, tol=tol), True),
        ("QuadraticHingeSVC (span, tol=%g)" % (tol / 10),
         QuadraticHingeSVC(C=C, penalize_intercept=True, tol=tol / 10), True),
        ("QuadraticHingeSVC (features, tol=%g)" % tol,
         QuadraticHingeSVC(C=C, penalize_intercept=True, tol=tol, solver="features"), True),
        ("LinearSVC (dual=True, tol=1e-4)",
         LinearSVC(C=C, loss="squared_hinge", penalty="l2", dual=True, tol=1e-4, max_iter=1000), True),
        ("LinearSVC (dual=False, tol=1e-4)",
         LinearSVC(C=C, loss="squared_hinge", penalty="l2", dual=False, tol=1e-4, max_iter=1000), True),
        ("QuadraticHingeSVC, unpenalised bias (ScSPM reference), tol=%g" % tol,
         QuadraticHingeSVC(C=C, tol=tol), False),
    ]
    rows = []
    for name, model, same_objective in runs:
        model, seconds, warns = _timed_fit(model, X, y)
        judge.coef_, judge.intercept_ = np.asarray(model.coef_, float), np.asarray(model.intercept_, float)
        objective = judge.objective(X, y) if same_objective else float(model.objective_)
        accuracy = U.mean_per_class_accuracy(feats.y_test, model.predict(feats.X_test), feats.n_classes)
        n_iter = int(np.max(model.n_iter_))
        rows.append({"solver": name, "seconds": seconds, "n_iter": n_iter, "objective": objective,
                     "same_objective": same_objective, "test_mean_per_class_accuracy": accuracy,
                     "convergence_warnings": warns})
        print(f"{name:62s} {seconds:8.2f} s  iter {n_iter:5d}  objective {objective:.8g}  "
              f"test acc {100 * accuracy:.2f} %" + ("  [ConvergenceWarning]" if warns else ""), flush=True)
    best = min(r["objective"] for r in rows if r["same_objective"])
    for r in rows:
        r["objective_rel_gap"] = (r["objective"] - best) / best if r["same_objective"] else None
    return rows


def tune_C(feats: U.Features, grid: list[float], tol: float, folds: int, seed: int) -> dict:
    """Part 2: C by cross-validation on the training rows, then test accuracy."""
    X, y = feats.X_train, feats.y_train

    def fit_score(C, train, valid):
        model = QuadraticHingeSVC(C=C, tol=tol).fit(X[train], y[train])
        return U.mean_per_class_accuracy(y[valid], model.predict(X[valid]), feats.n_classes)

    start = time.perf_counter()
    best, scores = U.select_by_cv(fit_score, grid, y, folds=folds, seed=seed)
    for C, score in scores.items():
        print(f"  C={C:<8g} {folds}-fold held-out mean per-class accuracy {100 * score:.2f} %"
              + ("   <- chosen" if C == best else ""), flush=True)
    model = QuadraticHingeSVC(C=best, tol=tol).fit(X, y)
    accuracy = U.mean_per_class_accuracy(feats.y_test, model.predict(feats.X_test), feats.n_classes)
    reference = QuadraticHingeSVC(C=paper_lambda_to_C(0.1), tol=tol).fit(X, y)
    ref_accuracy = U.mean_per_class_accuracy(feats.y_test, reference.predict(feats.X_test), feats.n_classes)
    print(f"chosen C={best:g}: test mean per-class accuracy {100 * accuracy:.2f} % "
          f"(reference code's lambda=0.1, i.e. C=5: {100 * ref_accuracy:.2f} %; "
          f"tuning took {time.perf_counter() - start:.1f} s)", flush=True)
    return {"grid": grid, "folds": folds, "seed": seed, "cv_scores": {str(k): v for k, v in scores.items()},
            "chosen_C": best, "test_mean_per_class_accuracy": accuracy,
            "test_mean_per_class_accuracy_C5": ref_accuracy}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", default="/work/features/scene15-scspm", help="feature set folder")
    parser.add_argument("--C", type=float, default=paper_lambda_to_C(0.1),
                        help="C of the side-by-side timing (default 5 = reference lambda 0.1)")
    parser.add_argument("--tol", type=float, default=1e-4, help="QuadraticHingeSVC tol")
    parser.add_argument("--grid", help="C values to tune over (default: %s divided by the mean squared "
                        "norm of the training rows)" % ",".join(f"{c:g}" for c in U.LINEAR_C_GRID))
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-tune", action="store_true")
    parser.add_argument("--wait-minutes", type=float, default=60.0, help="poll for the feature set this long")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    feats = U.load_features(args.features, args.wait_minutes)
    print(f"{feats.path}: train {feats.X_train.shape} test {feats.X_test.shape} {feats.X_train.dtype}, "
          f"{feats.n_classes} classes; C={args.C:g}; single-threaded", flush=True)
    result = {"features": str(feats.path), "config_hash": feats.config_hash, "C": args.C, "tol": args.tol,
              "n_train": int(feats.X_train.shape[0]), "n_test": int(feats.X_test.shape[0]),
              "n_features": int(feats.X_train.shape[1]), "machine": U.machine(),
              "date": time.strftime("%Y-%m-%d")}
    result["comparison"] = compare_solvers(feats, args.C, args.tol)
    if not args.skip_tune:
        grid = [float(v) for v in args.grid.split(",")] if args.grid else U.scaled_C_grid(feats.X_train)
        result["tuning"] = tune_C(feats, grid, args.tol, args.folds, args.seed)
    U.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
