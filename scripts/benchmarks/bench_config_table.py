#!/usr/bin/env python
"""Issue 11's table: feature configuration × classifier on 15-Scenes, side by side.

Every cell uses the protocol of ``bench_scspm_baselines.py``: the stored rows
``X_train + X_test`` of a feature set are pooled and re-split ``--repeats`` times
(split ``r`` uses seed ``r``: 100 training images per class, all the rest for
testing); the score is the mean per-class accuracy on the test rows, reported as
mean ± sample std over the splits.  Hyper-parameters are chosen on each split's
training rows only:

* ``linear`` — :class:`QuadraticHingeSVC`, ``C`` by 3-fold CV over
  ``LINEAR_C_GRID / mean ||x||^2`` (exactly ``bench_scspm_baselines``' ScSPM method);
* ``pmsvm-chi2`` / ``pmsvm-hi`` — :class:`PmSVM` with ``p = -1`` (χ²) / ``p = -8``
  (histogram intersection), ``C`` by 3-fold CV over ``PMSVM_C_GRID`` (``--pmsvm-grid``; a
  single value is used as it is, without CV);
* ``nsvm`` — :class:`HIKnSVM` with its defaults (no CV: one fit per split);
* ``mbkl`` — :class:`MBKL` with ``threshold_rule="quantile"``, the paper's Steps 0-1 and the
  C's that 3-fold CV chose on BoF-SPM (``MBKL_PARAMS``; no CV per split, its fits are slow):
  the setting of the table's recorded MBKL column;
* ``mbkl-default`` — :class:`MBKL` with its current defaults (one fit per split).

The additive-kernel cells also record the overall accuracy (correct test images / test
images; 15-Scenes' test sets are unbalanced, so it differs from the mean per-class accuracy).
The additive-kernel classifiers need non-negative features: on a signed feature set
those cells are reported "n/a (signed)".  "train s" is the wall time of the final fit
of each split (single-threaded BLAS), mean over the splits.  ``--build NAME=JSON``
attaches the cold-build record written by ``bench_build_features.py --json``
(build time, ``--n-jobs``, peak memory, sizes) to a feature set's row.

The JSON (``--out``) is rewritten after every cell, so an interrupted run keeps what
it finished.  Example::

    python benchmarks/bench_config_table.py --features scspm=feature-sets/scene15-scspm \\
        bof-spm=feature-sets/scene15-bof-spm --cells scspm:linear,pmsvm-hi bof-spm:nsvm \\
        --build scspm=build-scspm.json --out table.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import _bench_utils as U
import numpy as np
from bench_scspm_baselines import _linear_method
from sklearn.base import clone

from classify_images.classifiers.hik_nsvm import HIKnSVM
from classify_images.classifiers.mbkl import MBKL
from classify_images.classifiers.pmsvm import PmSVM

#: C values tried for PmSVM (it scales every dimension by its training maximum).
PMSVM_C_GRID = [0.001, 0.01, 0.1, 1.0]
#: The ``mbkl`` cell: the paper's Steps 0-1 with quantile thresholds, C's chosen by 3-fold CV on
#: 15-Scenes BoF-SPM (docs/benchmarks/mbkl.md) -- the setting of the table's recorded MBKL
#: column, pinned here because MBKL's defaults changed after it (section "MBKL: where the gap to
#: PmSVM comes from"); ``mbkl-default`` is MBKL with its current defaults.
MBKL_PARAMS = {"C": 1.0, "C_kernel": 10.0, "threshold_rule": "quantile", "init_rule": "table1", "theta_exponent": 1.0}
CLASSIFIERS = ("linear", "pmsvm-chi2", "pmsvm-hi", "nsvm", "mbkl", "mbkl-default")
ADDITIVE = ("pmsvm-chi2", "pmsvm-hi", "nsvm", "mbkl", "mbkl-default")


def _estimator(name: str):
    return {
        "pmsvm-chi2": PmSVM(p=-1.0, random_state=0),
        "pmsvm-hi": PmSVM(p=-8.0, random_state=0),
        "nsvm": HIKnSVM(random_state=0),
        "mbkl": MBKL(random_state=0, **MBKL_PARAMS),
        "mbkl-default": MBKL(random_state=0),
    }[name]


@contextmanager
def nsvm_margin(margin: float | str) -> Iterator[None]:
    """Inside the block, the ``nsvm`` cell fits HIK nSVM with this hinge margin (the other
    cells are unchanged)."""
    global _estimator
    default_estimator = _estimator
    _estimator = lambda name: HIKnSVM(random_state=0, margin=margin) if name == "nsvm" else default_estimator(name)  # noqa: E731
    try:
        yield
    finally:
        _estimator = default_estimator


def _additive_method(
    name: str,
    X: np.ndarray,
    y: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    n_classes: int,
    seed: int,
    pmsvm_grid: list[float] = PMSVM_C_GRID,
) -> dict:
    """One split of an additive-kernel classifier (PmSVM's C by 3-fold CV on the training rows)."""
    Xtr, ytr = X[train], y[train]
    params, scores = {}, {}
    if name.startswith("pmsvm") and len(pmsvm_grid) == 1:
        params["C"] = pmsvm_grid[0]
    elif name.startswith("pmsvm"):

        def fit_score(C, tr, va):
            model = clone(_estimator(name)).set_params(C=C).fit(Xtr[tr], ytr[tr])
            return U.mean_per_class_accuracy(ytr[va], model.predict(Xtr[va]), n_classes)

        params["C"], scores = U.select_by_cv(fit_score, pmsvm_grid, ytr, seed=seed)
    model = clone(_estimator(name)).set_params(**params)
    start = time.perf_counter()
    model.fit(Xtr, ytr)
    seconds = time.perf_counter() - start
    predicted = model.predict(X[test])
    accuracy = U.mean_per_class_accuracy(y[test], predicted, n_classes)
    if name == "mbkl":
        params = dict(MBKL_PARAMS)
    elif name == "mbkl-default":
        params = {key: value for key, value in model.get_params().items() if key in MBKL_PARAMS}
    return {
        "accuracy": accuracy,
        "overall_accuracy": float(np.mean(predicted == y[test])),
        "params": params or "defaults",
        "cv_scores": {str(k): v for k, v in scores.items()},
        "train_seconds": seconds,
    }


def run_cell(
    name: str,
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    repeats: int,
    train_per_class: int,
    tol: float,
    pmsvm_grid: list[float] = PMSVM_C_GRID,
) -> dict:
    """All splits of one classifier on one feature set."""
    runs = []
    cpu_start = time.process_time()
    for seed in range(repeats):
        train, test = U.resplit(y, train_per_class, seed)
        if name == "linear":
            run = _linear_method(X, y, train, test, n_classes, tol, seed)
            run["params"] = {"C": run.pop("C")}
        else:
            run = _additive_method(name, X, y, train, test, n_classes, seed, pmsvm_grid)
        run["seed"] = seed
        runs.append(run)
        print(
            f"    split {seed}: {run['params']}  {100 * run['accuracy']:.2f} %  (final fit {run['train_seconds']:.1f} s)",
            flush=True,
        )
    scores = 100 * np.array([r["accuracy"] for r in runs])
    cell = {
        "runs": runs,
        "mean": float(scores.mean()),
        "std": float(scores.std(ddof=1)) if scores.size > 1 else 0.0,
        "train_seconds": float(np.mean([r["train_seconds"] for r in runs])),
        "cell_cpu_seconds": round(time.process_time() - cpu_start, 1),
    }
    if all("overall_accuracy" in r for r in runs):
        overall = 100 * np.array([r["overall_accuracy"] for r in runs])
        cell.update(
            overall_mean=float(overall.mean()), overall_std=float(overall.std(ddof=1)) if overall.size > 1 else 0.0
        )
    return cell


def markdown_table(result: dict) -> str:
    """One row per feature set, one column per classifier (mean ± std), then dims and costs."""
    lines = [
        "| features | dims | " + " | ".join(CLASSIFIERS) + " | cold build | train s (linear) |",
        "|---|---:|" + "---|" * len(CLASSIFIERS) + "---|---|",
    ]
    for fname, entry in result["feature_sets"].items():
        cells = []
        for clf in CLASSIFIERS:
            cell = entry["cells"].get(clf)
            if cell is None:
                cells.append("n/a (signed)" if entry["signed"] and clf in ADDITIVE else "not run")
            else:
                mark = " †" if "imported_from" in cell else ""
                cells.append(f"{cell['mean']:.2f} ± {cell['std']:.2f} ({cell['train_seconds']:.1f} s){mark}")
        build = entry.get("build")
        cold = f"{build['cold_seconds']:.0f} s (--n-jobs {build['n_jobs']})" if build else "–"
        linear = entry["cells"].get("linear")
        lines.append(
            f"| {fname} | {entry['dims']} | "
            + " | ".join(cells)
            + f" | {cold} | "
            + (f"{linear['train_seconds']:.1f}" if linear else "–")
            + " |"
        )
    return "\n".join(lines)


def _from_baselines(result: dict) -> dict:
    """The linear cell of a ``bench_scspm_baselines.py --methods ScSPM`` result (same protocol
    and code path as ``linear`` here), keyed by the feature folder's name."""
    method = result["methods"]["ScSPM"]
    runs = [dict(run, params={"C": run["C"]}) for run in method["runs"]]
    cell = {
        "runs": runs,
        "mean": method["mean"],
        "std": method["std"],
        "train_seconds": float(np.mean([r["train_seconds"] for r in runs])),
        "imported_from": "bench_scspm_baselines.py",
    }
    name = Path(method["features"]).name.removeprefix("scene15-")
    X = np.load(Path(method["features"]) / "X_train.npy", mmap_mode="r")
    signed = any(bool((X[i : i + 100] < 0).any()) for i in range(0, X.shape[0], 100))
    return {
        "feature_sets": {
            name: {
                "cells": {"linear": cell},
                "folder": method["features"],
                "dims": int(X.shape[1]),
                "signed": signed,
                "config_hash": method["config_hash"],
            }
        }
    }


def _pairs(values: list[str], what: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, rest = value.partition("=") if what != "cells" else value.partition(":")
        if not sep or not key or not rest:
            raise SystemExit(f"error: {what} {value!r}: expected NAME{'=' if what != 'cells' else ':'}VALUE")
        out[key] = rest
    return out


def main(argv: list[str] | None = None) -> int:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", nargs="+", default=[], help="NAME=FOLDER of each feature set")
    parser.add_argument(
        "--cells", nargs="+", default=[], help="NAME:CLF[,CLF...] in the order to run; CLF in " + ", ".join(CLASSIFIERS)
    )
    parser.add_argument("--build", nargs="*", default=[], help="NAME=JSON from bench_build_features.py --json")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-per-class", type=int, default=100)
    parser.add_argument("--tol", type=float, default=1e-4, help="QuadraticHingeSVC tol")
    parser.add_argument(
        "--pmsvm-grid",
        type=float,
        nargs="+",
        default=PMSVM_C_GRID,
        help="PmSVM's C values for 3-fold CV (one value: used without CV)",
    )
    parser.add_argument("--out", required=True, help="JSON results (merged into when it exists)")
    parser.add_argument(
        "--merge",
        nargs="*",
        default=[],
        help="only print the table of these result files merged (later files win) into --out; "
        "a bench_scspm_baselines.py result contributes its linear cell",
    )
    args = parser.parse_args(argv)
    if args.merge:
        merged = {"feature_sets": {}}
        for path in args.merge:
            part = json.loads(Path(path).read_text())
            if "methods" in part:  # a bench_scspm_baselines.py result: its linear cell
                part = _from_baselines(part)
            for name, entry in part.pop("feature_sets").items():
                merged["feature_sets"].setdefault(name, {"cells": {}})["cells"].update(entry.pop("cells"))
                merged["feature_sets"][name].update(entry)
            merged.update(part)
        for name, path in _pairs(args.build, "--build").items():
            merged["feature_sets"][name]["build"] = json.loads(Path(path).read_text())
        merged["markdown"] = markdown_table(merged)
        U.write_json(args.out, merged)
        print(merged["markdown"])
        return 0

    machine = U.announce_machine()
    folders, builds = _pairs(args.features, "--features"), _pairs(args.build, "--build")
    plan = [
        (name, [c.strip() for c in clfs.split(",") if c.strip()]) for name, clfs in _pairs(args.cells, "cells").items()
    ]
    for name, clfs in plan:
        if name not in folders:
            raise SystemExit(f"error: --cells {name!r}: no --features {name}=FOLDER")
        unknown = set(clfs) - set(CLASSIFIERS)
        if unknown:
            raise SystemExit(
                f"error: --cells {name}: unknown classifier(s) {sorted(unknown)}; choose from {CLASSIFIERS}"
            )
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {"feature_sets": {}}
    result.update(
        repeats=args.repeats,
        train_per_class=args.train_per_class,
        machine=machine,
        date=time.strftime("%Y-%m-%d"),
        linear_grid_before_scaling=U.LINEAR_C_GRID,
        pmsvm_grid=args.pmsvm_grid,
        mbkl_params=MBKL_PARAMS,
    )
    for name, clfs in plan:
        feats = U.load_features(folders[name])
        X, y = feats.pooled()
        signed = bool((X < 0).any())
        entry = result["feature_sets"].setdefault(name, {"cells": {}})
        entry.update(
            folder=str(feats.path),
            config_hash=feats.config_hash,
            dims=int(X.shape[1]),
            signed=signed,
            feature_set_mib=round(sum(f.stat().st_size for f in feats.path.iterdir()) / 2**20, 1),
        )
        if name in builds:
            entry["build"] = json.loads(Path(builds[name]).read_text())
        print(f"{name}: {feats.path} {X.shape} {'signed' if signed else 'non-negative'}", flush=True)
        for clf in clfs:
            if signed and clf in ADDITIVE:
                print(f"  {clf}: skipped (signed features)", flush=True)
                continue
            print(f"  {clf}:", flush=True)
            entry["cells"][clf] = run_cell(
                clf, X, y, feats.n_classes, args.repeats, args.train_per_class, args.tol, args.pmsvm_grid
            )
            print(f"  {clf}: {entry['cells'][clf]['mean']:.2f} ± {entry['cells'][clf]['std']:.2f}", flush=True)
            result["markdown"] = markdown_table(result)
            U.write_json(out, result)
        del X
    result["markdown"] = markdown_table(result)
    U.write_json(out, result)
    print("\n" + result["markdown"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
