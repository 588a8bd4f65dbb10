"""Benchmark of MBKL (Roig, Boix & Van Gool) against the linear SVM and PmSVM.

Two parts, each printing a Markdown table and writing JSON (``--out``):

``attributes``
    The paper's claim that MBKL adapts to attribute-like descriptors where
    additive kernels fail (their Table 4, UCI Liver and Sonar), on
    scikit-learn's bundled classification sets (breast cancer, wine, iris,
    digits).  Stratified 5-fold cross-validation, the same folds for every
    method; every method sees the same min-max scaled input (``MinMaxScaler``
    fitted on the training fold, clipped into ``[0, 1]``, which PmSVM needs)
    inside a ``Pipeline``; ``C`` (and MBKL's ``C_kernel``) chosen by an inner
    stratified 3-fold grid search on the training fold (the paper picks ``C``
    in {0.01, ..., 1000} by cross-validation).  Accuracy, mean +- std over the
    folds.
``scenes``
    15-Scenes BoF-SPM features (``--features``), the stored train/test split:
    mean per-class accuracy, training time (MBKL: the share of each step),
    testing time, selected stumps and peak memory (each final fit runs in a
    fresh process: its peak resident set during ``fit``, reset through
    ``/proc/self/clear_refs``, minus its resident set before), hyper-parameters
    chosen by 3-fold cross-validation on the training rows (or fixed, for the
    ablations, whose single fit costs too much to cross-validate).

Everything runs single-threaded (BLAS limited to one thread).

Usage::

    python scripts/bench_mbkl.py attributes --out /tmp/mbkl_attr.json
    python scripts/bench_mbkl.py scenes --features feature-sets/scene15-bof-spm --out /tmp/mbkl_scenes.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench_utils as U  # noqa: E402

from sklearn import datasets
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler

from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC
from classify_images.classifiers.mbkl import MBKL

try:  # a colleague's classifier: included when importable
    from classify_images.classifiers.pmsvm import PmSVM
except ImportError:  # pragma: no cover
    PmSVM = None

C_GRID = [0.01, 0.1, 1.0, 10.0, 100.0, 1000.0]


# ============================================================================ memory
def reset_peak_memory() -> int:
    """Reset the kernel's peak-RSS counter of this process; returns the current RSS in bytes."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return _status_kib("VmRSS") * 1024


def peak_memory() -> int:
    """Peak resident set size (bytes) since the last :func:`reset_peak_memory`."""
    return _status_kib("VmHWM") * 1024


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


# ============================================================================ part 1
def attribute_datasets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    loaders = {
        "breast_cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
        "iris": datasets.load_iris,
        "digits": datasets.load_digits,
    }
    return {name: load(return_X_y=True) for name, load in loaders.items()}


def attribute_methods(n_features: int) -> dict[str, tuple[object, dict]]:
    """name -> (estimator, parameter grid); every estimator sees min-max scaled input."""
    methods = {
        "linear": (QuadraticHingeSVC(), {"C": C_GRID}),
        "mbkl 10x": (MBKL(random_state=0), {"C": C_GRID[1:5], "C_kernel": [0.1, 1.0, 10.0]}),
        "mbkl 100x": (MBKL(n_stumps=100 * n_features, random_state=0), {"C": C_GRID[1:5], "C_kernel": [0.1, 1.0, 10.0]}),
        "mbkl theta=1 100x": (MBKL(n_stumps=100 * n_features, learn_theta=False, random_state=0), {"C": C_GRID[1:5]}),
    }
    if PmSVM is not None:
        methods["pmsvm chi2 (p=-1)"] = (PmSVM(p=-1.0, random_state=0), {"C": C_GRID})
        methods["pmsvm hik (p=-8)"] = (PmSVM(p=-8.0, random_state=0), {"C": C_GRID})
    return methods


def run_attributes(n_folds: int) -> dict:
    results = {}
    for name, (X, y) in attribute_datasets().items():
        X = X.astype(np.float64)
        outer = list(StratifiedKFold(n_folds, shuffle=True, random_state=0).split(X, y))
        inner = StratifiedKFold(3, shuffle=True, random_state=1)
        results[name] = {"shape": list(X.shape), "n_classes": int(np.unique(y).size), "methods": {}}
        for method, (estimator, grid) in attribute_methods(X.shape[1]).items():
            pipe = Pipeline([("scale", MinMaxScaler(clip=True)), ("clf", estimator)])
            search = GridSearchCV(pipe, {f"clf__{k}": v for k, v in grid.items()}, cv=inner, scoring="accuracy")
            scores, chosen, start = [], [], time.perf_counter()
            for train, test in outer:
                fitted = clone(search).fit(X[train], y[train])
                scores.append(100.0 * fitted.score(X[test], y[test]))
                chosen.append({k.removeprefix("clf__"): v for k, v in fitted.best_params_.items()})
            entry = {
                "mean": float(np.mean(scores)),
                "std": float(np.std(scores)),
                "folds": scores,
                "chosen": chosen,
                "seconds": time.perf_counter() - start,
            }
            results[name]["methods"][method] = entry
            print(f"{name:14s} {method:20s} {entry['mean']:6.2f} +- {entry['std']:5.2f}  ({entry['seconds']:.0f} s)", flush=True)
    return results


def attributes_table(results: dict) -> str:
    methods = list(next(iter(results.values()))["methods"])
    lines = ["| data set (n x d, classes) | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for name, entry in results.items():
        n, d = entry["shape"]
        cells = []
        best = max(m["mean"] for m in entry["methods"].values())
        for method in methods:
            m = entry["methods"][method]
            text = f"{m['mean']:.1f} ± {m['std']:.1f}"
            cells.append(f"**{text}**" if m["mean"] == best else text)
        lines.append(f"| {name} ({n} x {d}, {entry['n_classes']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ============================================================================ part 2
def load_scenes(folder: Path, wait_minutes: float):
    fs = U.load_features(folder, wait_minutes)
    Xtr = np.ascontiguousarray(fs.X_train, dtype=np.float32)
    Xte = np.ascontiguousarray(fs.X_test, dtype=np.float32)
    return Xtr, fs.y_train, Xte, fs.y_test, fs


def scene_methods() -> dict[str, tuple[object, dict]]:
    """name -> (estimator, grid).  A grid with a single candidate is used as is (no CV)."""
    methods = {
        "linear": (QuadraticHingeSVC(), {"C": [0.1, 1.0, 10.0, 100.0]}),
        "mbkl": (MBKL(random_state=0), {"C": [1.0, 10.0, 100.0], "C_kernel": [1.0, 10.0]}),
        "mbkl theta=1 (1x stumps)": (MBKL(n_stumps=21504, learn_theta=False, random_state=0), {"C": [1.0, 10.0, 100.0]}),
        # ablations, fixed parameters (one fit each; C from the cross-validated runs above)
        "mbkl theta=1 (3x stumps)": (MBKL(n_stumps=3 * 21504, learn_theta=False, random_state=0), {"C": [100.0]}),
        "mbkl theta=1 (10x stumps)": (MBKL(learn_theta=False, random_state=0), {"C": [100.0]}),
        "mbkl init_rule=balanced": (MBKL(init_rule="balanced", random_state=0), {"C": [10.0], "C_kernel": [1.0]}),
        # sensitivity (run with --methods; not part of the default run)
        "mbkl C_kernel=100": (MBKL(random_state=0), {"C": [10.0], "C_kernel": [100.0]}),
        "mbkl init_rule=balanced C_kernel=10": (
            MBKL(init_rule="balanced", random_state=0), {"C": [10.0, 100.0], "C_kernel": [10.0]}
        ),
        "mbkl threshold_rule=quantile": (
            MBKL(threshold_rule="quantile", random_state=0), {"C": [1.0, 10.0, 100.0], "C_kernel": [1.0, 10.0]}
        ),
        "mbkl threshold_rule=quantile init_rule=balanced": (
            MBKL(threshold_rule="quantile", init_rule="balanced", random_state=0), {"C": [10.0], "C_kernel": [1.0]}
        ),
    }
    if PmSVM is not None:
        methods["pmsvm chi2 (p=-1)"] = (PmSVM(p=-1.0, random_state=0), {"C": [0.001, 0.01, 0.1, 1.0]})
        methods["pmsvm hik (p=-8)"] = (PmSVM(p=-8.0, random_state=0), {"C": [0.001, 0.01, 0.1, 1.0]})
    return methods


SENSITIVITY = (
    "mbkl C_kernel=100",
    "mbkl init_rule=balanced C_kernel=10",
    "mbkl threshold_rule=quantile",
    "mbkl threshold_rule=quantile init_rule=balanced",
)


def final_fit(features: str, method: str, params: dict) -> dict:
    """Fit ``method`` with ``params`` on the stored training rows and test it (run in a fresh process).

    Peak memory is the peak resident set of this process during ``fit`` minus its resident
    set just before (the data are already loaded); times are wall-clock, single-threaded.
    """
    from classify_images.pipeline.evaluation import mean_per_class_accuracy

    with threadpool_limits(1):
        Xtr, ytr, Xte, yte, _ = load_scenes(Path(features), 0.0)
        model = clone(scene_methods()[method][0]).set_params(**params)
        before = reset_peak_memory()
        start = time.perf_counter()
        model.fit(Xtr, ytr)
        fit_s = time.perf_counter() - start
        peak = peak_memory()
        start = time.perf_counter()
        pred = model.predict(Xte)
        test_s = time.perf_counter() - start
    entry = {
        "acc": 100.0 * mean_per_class_accuracy(yte, pred),
        "fit_s": fit_s,
        "test_s": test_s,
        "fit_peak_extra_mb": (peak - before) / 2**20,
        "rss_before_fit_mb": before / 2**20,
    }
    if isinstance(model, MBKL):
        entry.update(
            timings=model.timings_,
            step1_share=model.timings_.get("step1", 0.0) / fit_s,
            n_stumps=model.n_stumps_,
            n_stumps_step0=model.n_stumps_step0_,
            n_selected=int(model.theta_.size),
        )
    return entry


def run_scenes(args) -> dict:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    Xtr, ytr, _, _, fs = load_scenes(Path(args.features), args.wait_minutes)
    print(f"15-Scenes: train {Xtr.shape}, non-zeros {np.mean(Xtr > 0):.4f}", flush=True)
    previous = json.loads(Path(args.reuse).read_text())["methods"] if args.reuse else {}
    results = {"features": str(args.features), "config_hash": fs.config_hash, "methods": {}}
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(Xtr, ytr))
    for name, (estimator, grid) in scene_methods().items():
        if (args.methods and name not in args.methods) or (not args.methods and name in SENSITIVITY):
            continue
        entry: dict = {}
        if name in previous and "cv_score" in previous[name]:
            entry.update({k: previous[name][k] for k in ("params", "cv_score", "cv_seconds")})
            entry["params_from"] = args.reuse
        elif all(len(v) == 1 for v in grid.values()):
            entry["params"] = {k: v[0] for k, v in grid.items()}
            entry["params_from"] = "fixed (not cross-validated)"
        else:
            start = time.perf_counter()
            with threadpool_limits(1):
                search = GridSearchCV(estimator, grid, cv=folds, scoring="balanced_accuracy").fit(Xtr, ytr)
            entry.update(params=search.best_params_, cv_score=100.0 * search.best_score_,
                         cv_seconds=time.perf_counter() - start, params_from="3-fold CV on the training rows")
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            entry.update(pool.submit(final_fit, str(args.features), name, entry["params"]).result())
        results["methods"][name] = entry
        print(json.dumps({name: entry}, default=float), flush=True)
    return results


def scenes_table(results: dict) -> str:
    lines = [
        "| method | params | mean per-class acc. % | train s | Step 1 share | test s (2985 images) "
        "| stumps generated / after Step 0 / selected | peak memory of fit (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in results["methods"].items():
        stumps = f"{m['n_stumps']} / {m['n_stumps_step0']} / {m['n_selected']}" if "n_selected" in m else "-"
        share = f"{100 * m['step1_share']:.0f} %" if "step1_share" in m else "-"
        lines.append(
            f"| {name} | {m['params']}{' (fixed)' if m['params_from'].startswith('fixed') else ' (CV)'} | {m['acc']:.2f} | {m['fit_s']:.1f} | {share} | {m['test_s']:.2f} | {stumps} "
            f"| {m['fit_peak_extra_mb']:.0f} |"
        )
    return "\n".join(lines)


# ============================================================================ main
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["attributes", "scenes"])
    parser.add_argument("--features", required=True, help="feature set folder (e.g. a 15-Scenes bof-spm build)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--wait-minutes", type=float, default=60.0)
    parser.add_argument("--methods", nargs="*", help="scenes: run only these methods (names as printed)")
    parser.add_argument("--reuse", help="scenes: take the cross-validated parameters from this earlier --out JSON")
    parser.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args(argv)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, python {platform.python_version()}")
    with threadpool_limits(1):
        if args.part == "attributes":
            results = run_attributes(args.folds)
            table = attributes_table(results)
        else:
            results = run_scenes(args)
            table = scenes_table(results)
    print(table)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
