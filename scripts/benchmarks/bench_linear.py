"""Benchmark QuadraticHingeSVC against scikit-learn's LinearSVC (squared hinge, one-vs-rest).

Part 1 trains both on the same objective (LIBLINEAR's: the intercept is the
weight of a constant feature 1, penalised) and the same ``C``, single-threaded,
side by side, ``--timing-repeats`` rounds in round-robin order (the machine is
shared: the minimum over rounds is the figure to compare): training time,
iterations, objective value (all evaluated by the same float64 code), mean
per-class accuracy on the test rows.  Besides the default ``solver="eigen"``
(at ``tol`` and ``tol / 10``) it trains ``solver="features"`` (L-BFGS on the
``d x P`` weights themselves) and the ScSPM reference formulation
(unpenalised bias, a different objective: not in the gap column).

Part 2 chooses ``C`` by 3-fold cross-validation on the training rows only
(held-out thirds of the training set; the test rows are never looked at),
refits on all training rows and reports the test accuracy.

Usage::

    python benchmarks/bench_linear.py --features feature-sets/scene15-scspm --out bench_linear.json
"""

from __future__ import annotations

import argparse
import time
import warnings

import _bench_utils as U
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC, paper_lambda_to_C


def _timed_fit(model, X, y) -> tuple[object, float, list[str]]:
    """Fit ``model``; returns it, the wall time and the ConvergenceWarning messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        start = time.perf_counter()
        model.fit(X, y)
        seconds = time.perf_counter() - start
    return model, seconds, [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]


def compare_solvers(feats: U.Features, C: float, tol: float, repeats: int) -> list[dict]:
    """Part 1: side-by-side training on the same objective, ``repeats`` rounds (round robin)."""
    X, y = feats.X_train, feats.y_train
    # evaluates any (coef_, intercept_) with LIBLINEAR's objective, float64 products
    judge = QuadraticHingeSVC(C=C, penalize_intercept=True, intercept_scaling=1.0)
    judge.classes_, judge.n_features_in_ = np.unique(y), X.shape[1]
    runs = [
        (
            f"QuadraticHingeSVC (eigen, tol={tol:g})",
            lambda: QuadraticHingeSVC(C=C, penalize_intercept=True, tol=tol),
            True,
        ),
        (
            "QuadraticHingeSVC (eigen, tol=%g)" % (tol / 10),
            lambda: QuadraticHingeSVC(C=C, penalize_intercept=True, tol=tol / 10),
            True,
        ),
        (
            f"QuadraticHingeSVC (features, tol={tol:g})",
            lambda: QuadraticHingeSVC(C=C, penalize_intercept=True, tol=tol, solver="features"),
            True,
        ),
        (
            "LinearSVC (dual=True, tol=1e-4)",
            lambda: LinearSVC(
                C=C, loss="squared_hinge", penalty="l2", dual=True, tol=1e-4, max_iter=1000, random_state=0
            ),
            True,
        ),
        (
            "LinearSVC (dual=False, tol=1e-4)",
            lambda: LinearSVC(
                C=C, loss="squared_hinge", penalty="l2", dual=False, tol=1e-4, max_iter=1000, random_state=0
            ),
            True,
        ),
        (
            f"QuadraticHingeSVC (eigen, tol={tol:g}), unpenalised bias (ScSPM reference)",
            lambda: QuadraticHingeSVC(C=C, tol=tol),
            False,
        ),
    ]
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    models: dict[str, tuple[object, list[str]]] = {}
    for round_ in range(repeats):
        for name, make, _ in runs:
            model, elapsed, warns = _timed_fit(make(), X, y)
            seconds[name].append(elapsed)
            models[name] = (model, warns)
            print(f"  round {round_ + 1}/{repeats}  {name:70s} {elapsed:8.2f} s", flush=True)
    rows = []
    for name, _, same_objective in runs:
        model, warns = models[name]
        judge.coef_, judge.intercept_ = np.asarray(model.coef_, float), np.asarray(model.intercept_, float)
        objective = judge.objective(X, y) if same_objective else float(model.objective_)
        accuracy = U.mean_per_class_accuracy(feats.y_test, model.predict(feats.X_test), feats.n_classes)
        rows.append(
            {
                "solver": name,
                "seconds": seconds[name],
                "seconds_min": min(seconds[name]),
                "seconds_median": float(np.median(seconds[name])),
                "n_iter": int(np.max(model.n_iter_)),
                "objective": objective,
                "same_objective": same_objective,
                "test_mean_per_class_accuracy": accuracy,
                "convergence_warnings": sorted(set(warns)),
            }
        )
    best = min(r["objective"] for r in rows if r["same_objective"])
    reference = rows[0]["seconds_min"]
    print(
        f"\n{'solver':70s} {'min s':>8s} {'median s':>9s} {'x ours':>7s} {'iter':>5s} {'objective':>14s} "
        f"{'rel. gap':>9s} {'test acc':>8s}"
    )
    for r in rows:
        r["objective_rel_gap"] = (r["objective"] - best) / best if r["same_objective"] else None
        gap = f"{r['objective_rel_gap']:.1e}" if r["same_objective"] else "(other)"
        print(
            f"{r['solver']:70s} {r['seconds_min']:8.2f} {r['seconds_median']:9.2f} "
            f"{r['seconds_min'] / reference:7.1f} {r['n_iter']:5d} {r['objective']:14.8g} {gap:>9s} "
            f"{100 * r['test_mean_per_class_accuracy']:7.2f}%"
            + ("  [ConvergenceWarning]" if r["convergence_warnings"] else "")
        )
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
        print(
            f"  C={C:<8g} {folds}-fold held-out mean per-class accuracy {100 * score:.2f} %"
            + ("   <- chosen" if C == best else ""),
            flush=True,
        )
    model = QuadraticHingeSVC(C=best, tol=tol).fit(X, y)
    accuracy = U.mean_per_class_accuracy(feats.y_test, model.predict(feats.X_test), feats.n_classes)
    reference = QuadraticHingeSVC(C=paper_lambda_to_C(0.1), tol=tol).fit(X, y)
    ref_accuracy = U.mean_per_class_accuracy(feats.y_test, reference.predict(feats.X_test), feats.n_classes)
    print(
        f"chosen C={best:g}: test mean per-class accuracy {100 * accuracy:.2f} % "
        f"(reference code's lambda=0.1, i.e. C=5: {100 * ref_accuracy:.2f} %; "
        f"tuning took {time.perf_counter() - start:.1f} s)",
        flush=True,
    )
    return {
        "grid": grid,
        "folds": folds,
        "seed": seed,
        "cv_scores": {str(k): v for k, v in scores.items()},
        "chosen_C": best,
        "test_mean_per_class_accuracy": accuracy,
        "test_mean_per_class_accuracy_C5": ref_accuracy,
    }


def main(argv: list[str] | None = None) -> int:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", required=True, help="feature set folder (e.g. a 15-Scenes scspm build)")
    parser.add_argument(
        "--C",
        type=float,
        default=paper_lambda_to_C(0.1),
        help="C of the side-by-side timing (default 5 = reference lambda 0.1)",
    )
    parser.add_argument("--tol", type=float, default=1e-4, help="QuadraticHingeSVC tol")
    parser.add_argument(
        "--grid",
        help="C values to tune over (default: {} divided by the mean squared norm of the training rows)".format(
            ",".join(f"{c:g}" for c in U.LINEAR_C_GRID)
        ),
    )
    parser.add_argument("--timing-repeats", type=int, default=3, help="rounds of the side-by-side timing")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-tune", action="store_true")
    parser.add_argument("--wait-minutes", type=float, default=60.0, help="poll for the feature set this long")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    machine = U.announce_machine()

    feats = U.load_features(args.features, args.wait_minutes)
    print(
        f"{feats.path}: train {feats.X_train.shape} test {feats.X_test.shape} {feats.X_train.dtype}, "
        f"{feats.n_classes} classes; C={args.C:g}; single-threaded",
        flush=True,
    )
    result = {
        "features": str(feats.path),
        "config_hash": feats.config_hash,
        "C": args.C,
        "tol": args.tol,
        "n_train": int(feats.X_train.shape[0]),
        "n_test": int(feats.X_test.shape[0]),
        "n_features": int(feats.X_train.shape[1]),
        "machine": machine,
        "date": time.strftime("%Y-%m-%d"),
    }
    result["comparison"] = compare_solvers(feats, args.C, args.tol, args.timing_repeats)
    if not args.skip_tune:
        grid = [float(v) for v in args.grid.split(",")] if args.grid else U.scaled_C_grid(feats.X_train)
        result["tuning"] = tune_C(feats, grid, args.tol, args.folds, args.seed)
    U.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
