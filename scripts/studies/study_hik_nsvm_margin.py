"""Study: HIK nSVM's hinge margin m (Sharma & Jurie, Eq. 7a) on stored feature sets.

The margin is studied on the scale ``margin="auto"`` uses: ``m = f * mean_i ||x_i||_1`` over
the rows the model is trained on (``f = 0.05`` is today's ``"auto"``; on l1-normalised
histograms ``f = 0.02`` is the paper's fixed m = 0.02, the default until commit ``bfb9066``).
Fixed margins in the units of ``x`` (``--margins 0.02 auto``) can be added to the grid.

Protocol of ``bench_config_table.py`` (:func:`grid_study`): split ``r`` uses seed ``r``
(100 training images per class, the rest for testing), mean per-class accuracy on the test
rows.  Every grid value is trained on every split (one column each); with ``--cv`` the value
3-fold CV prefers on each split's training rows is reported too (the "CV" column: its test
accuracy is that value's column on the split).  docs/benchmarks/merged-code-checks.md, "The nSVM drift since
2026-11-21" and "Classifier defaults by cross-validation".

Usage::

    OMP_NUM_THREADS=1 python studies/study_hik_nsvm_margin.py NAME=FOLDER [NAME=FOLDER ...] \\
        [--factors 0.01 0.02 0.03 0.05 0.1] [--margins 0.02 auto] [--cv] [--out study.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' helpers

import _bench_utils as U
import numpy as np

from classify_images.classifiers.hik_nsvm import HIKnSVM

#: Default grid of ``f`` in ``m = f * mean ||x||_1``.
FACTORS = [0.01, 0.02, 0.03, 0.05, 0.1]


def feature_sets(parser: argparse.ArgumentParser, specs: Sequence[str]) -> dict[str, Path]:
    """``NAME=FOLDER`` (or a bare ``FOLDER``, named after it) of each feature set, checked.

    A folder without ``manifest.json`` ends the program with a one-line ``parser.error``.
    """
    folders = {}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        path = Path(folder if sep else spec)
        if not (path / "manifest.json").is_file():
            parser.error(f"{path}: not a feature set (no manifest.json); give a build-features output folder")
        folders[name if sep else path.name] = path
    return folders


def grid_study(
    prepare: Callable[[np.ndarray, np.ndarray], Any],
    make: Callable[[Any, Any], Any],
    grid: Sequence[Any],
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    repeats: int = 3,
    train_per_class: int = 100,
    cv: bool = False,
    log: Callable[[str], None] = print,
) -> dict:
    """Every value of ``grid`` on the splits of ``bench_config_table.run_cell`` (and 3-fold CV over it).

    ``prepare(X_fit, y_fit)`` computes, once per training set (a split's training rows, or a
    CV fold's), what the estimators need of it (e.g. the mean l1 norm of the rows);
    ``make(value, prepared)`` returns the unfitted estimator of one grid value.  The training
    rows of a split are never seen by its test rows' values: CV (``cv=True``, folds seeded by
    the split's seed, :func:`_bench_utils.select_by_cv`) runs on the training rows only.

    Returns ``{"values": {str(value): {"runs": [accuracy %...], "mean", "std", "fit_seconds"}},
    "prepared": [prepare's value on each split's training rows],
    "cv": {"runs": [...], "chosen": [value...], "cv_scores": [...], "mean", "std"}}``.
    """
    per_value: dict[str, dict] = {str(v): {"runs": [], "fit_seconds": []} for v in grid}
    chosen, cv_scores, prepared_values = [], [], []
    for seed in range(repeats):
        train, test = U.resplit(y, train_per_class, seed)
        Xtr, ytr = X[train], y[train]
        prepared = prepare(Xtr, ytr)
        prepared_values.append(prepared)
        for value in grid:
            start = time.process_time()
            model = make(value, prepared).fit(Xtr, ytr)
            seconds = time.process_time() - start
            accuracy = 100 * U.mean_per_class_accuracy(y[test], model.predict(X[test]), n_classes)
            per_value[str(value)]["runs"].append(accuracy)
            per_value[str(value)]["fit_seconds"].append(round(seconds, 1))
            log(f"    split {seed}  {value}: {accuracy:.2f} %  ({seconds:.1f} CPU-s)")
        if cv:
            fold_prepared: dict[bytes, Any] = {}

            def fit_score(value, tr, va):
                key = tr.tobytes()
                if key not in fold_prepared:
                    fold_prepared[key] = prepare(Xtr[tr], ytr[tr])
                model = make(value, fold_prepared[key]).fit(Xtr[tr], ytr[tr])
                return U.mean_per_class_accuracy(ytr[va], model.predict(Xtr[va]), n_classes)

            best, scores = U.select_by_cv(fit_score, list(grid), ytr, seed=seed)
            chosen.append(best)
            cv_scores.append({str(k): round(100 * v, 2) for k, v in scores.items()})
            log(f"    split {seed}  CV chose {best}: {per_value[str(best)]['runs'][-1]:.2f} %")
    result = {"values": {k: dict(v, **_mean_std(v["runs"])) for k, v in per_value.items()}, "prepared": prepared_values}
    if cv:
        runs = [per_value[str(best)]["runs"][seed] for seed, best in enumerate(chosen)]
        result["cv"] = {
            "runs": runs,
            "chosen": [str(best) for best in chosen],
            "cv_scores": cv_scores,
            **_mean_std(runs),
        }
    return result


def _mean_std(runs: list[float]) -> dict:
    scores = np.asarray(runs, dtype=np.float64)
    return {"mean": float(scores.mean()), "std": float(scores.std(ddof=1)) if scores.size > 1 else 0.0}


def markdown(results: dict[str, dict], value_label: Callable[[str], str] = str) -> str:
    """One row per feature set, one column per grid value (mean ± std over the splits), then CV."""
    values = list(next(iter(results.values()))["values"])
    has_cv = any("cv" in r for r in results.values())
    head = (
        "| features | " + " | ".join(value_label(v) for v in values) + (" | 3-fold CV (chosen) |" if has_cv else " |")
    )
    lines = [head, "|---|" + "---:|" * (len(values) + has_cv)]
    for name, result in results.items():
        cells = [f"{result['values'][v]['mean']:.2f} ± {result['values'][v]['std']:.2f}" for v in values]
        if has_cv:
            cv = result.get("cv")
            cells.append(
                f"{cv['mean']:.2f} ± {cv['std']:.2f} ({', '.join(map(str, cv['chosen']))})" if cv else "not run"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_study(
    args: argparse.Namespace,
    folders: dict[str, Path],
    prepare: Callable,
    make: Callable,
    grid: Sequence[Any],
    value_label: Callable[[str], str] = str,
) -> dict:
    """:func:`grid_study` on each feature set in turn; the JSON (``args.out``) is rewritten after each."""
    out: dict = {
        "machine": U.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "repeats": args.repeats,
        "grid": [str(v) for v in grid],
        "feature_sets": {},
    }
    results = {}
    for name, folder in folders.items():
        feats = U.load_features(folder)
        X, y = feats.pooled()
        print(f"{name}: {folder} {X.shape}", flush=True)
        cpu = time.process_time()
        results[name] = grid_study(
            prepare,
            make,
            grid,
            X,
            y,
            feats.n_classes,
            repeats=args.repeats,
            cv=args.cv,
            log=lambda line: print(line, flush=True),
        )
        results[name].update(
            folder=str(folder), config_hash=feats.config_hash, cpu_seconds=round(time.process_time() - cpu, 1)
        )
        out["feature_sets"] = results
        out["markdown"] = markdown(results, value_label)
        U.write_json(args.out, out)
        del X
    print("\n" + out["markdown"])
    return out


def _grid_value(text: str) -> float | str:
    return text if text == "auto" else float(text)


class _MarginValue(tuple):
    """A grid value: ``("f", factor)`` (relative margin) or ``("m", margin)`` (fixed, or "auto")."""

    def __str__(self) -> str:
        kind, value = self
        return f"f={value:g}" if kind == "f" else f"m={value}"


def _mean_l1(X: np.ndarray, y: np.ndarray) -> float:
    """``mean_i ||x_i||_1`` as ``margin="auto"`` computes it (row sums in the dtype of ``X``)."""
    return float(np.mean(np.asarray(np.abs(X).sum(axis=1), dtype=np.float64)))


def _nsvm(value: _MarginValue, mean_l1: float) -> HIKnSVM:
    kind, number = value
    return HIKnSVM(random_state=0, margin=number * mean_l1 if kind == "f" else number)


def main(argv: list[str] | None = None) -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("features", nargs="+", help="NAME=FOLDER (or FOLDER) of each feature set")
    parser.add_argument(
        "--factors", type=float, nargs="*", default=FACTORS, help="f of m = f * mean ||x||_1 (0.05 = margin='auto')"
    )
    parser.add_argument(
        "--margins", type=_grid_value, nargs="*", default=[], help="fixed margins (or 'auto') added to the grid"
    )
    parser.add_argument("--cv", action="store_true", help="also choose the grid value by 3-fold CV on each split")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="JSON results (rewritten after each feature set)")
    args = parser.parse_args(argv)
    folders = feature_sets(parser, args.features)
    grid = [_MarginValue(("f", f)) for f in args.factors] + [_MarginValue(("m", m)) for m in args.margins]
    if not grid:
        parser.error("--factors/--margins: give at least one value")
    run_study(args, folders, _mean_l1, _nsvm, grid)


if __name__ == "__main__":
    main()
