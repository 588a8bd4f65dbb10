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

``holdout``
    A cheap screen of MBKL settings (``HOLDOUT_VARIANTS``) on one feature set: each
    fitted once on 2/3 of split 0's training rows (pooled rows re-split as in
    ``bench_config_table.py``) and scored on the remaining third; no test row is used.
``gap``
    Issue 11's target "MBKL within 3 points of PmSVM": each ``GAP_VARIANTS`` setting
    and PmSVM-HI on the same ``--repeats`` splits of each ``--feature-sets`` entry
    (pooled rows re-split with seeds 0, 1, ...; 100 training images per class), the
    grid of each variant chosen by 3-fold CV on the split's training rows only (PmSVM:
    ``bench_config_table.py``'s code path); mean per-class accuracy, mean +- std.

Everything runs single-threaded (BLAS limited to one thread).

Usage::

    python benchmarks/bench_mbkl.py attributes --out /tmp/mbkl_attr.json
    python benchmarks/bench_mbkl.py scenes --features feature-sets/scene15-bof-spm --out /tmp/mbkl_scenes.json
    python benchmarks/bench_mbkl.py holdout --features feature-sets/scene15-bof-spm
    python benchmarks/bench_mbkl.py gap --feature-sets bof-spm=feature-sets/scene15-bof-spm \\
        scspm=feature-sets/scene15-scspm --variants distinct+balanced+select pmsvm-hi --out gap.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import _bench_utils as U
import numpy as np
from sklearn import datasets
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler
from threadpoolctl import threadpool_limits

from classify_images.classifiers.mbkl import MBKL, PAPER_SETTING
from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC

try:  # a colleague's classifier: included when importable
    from classify_images.classifiers.pmsvm import PmSVM
except ImportError:  # pragma: no cover
    PmSVM = None

C_GRID = [0.01, 0.1, 1.0, 10.0, 100.0, 1000.0]
#: The paper's rules (Algorithm 1), which parts 1-2 measured; the estimator's defaults differ.
PAPER_RULES = {k: PAPER_SETTING[k] for k in ("threshold_rule", "init_rule", "theta_exponent")}


def _paper_mbkl(**params) -> MBKL:
    """MBKL with the paper's rules (``params`` may override them, and set ``C`` etc.)."""
    return MBKL(**{**PAPER_SETTING, **params})


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
        "mbkl 10x": (_paper_mbkl(random_state=0), {"C": C_GRID[1:5], "C_kernel": [0.1, 1.0, 10.0]}),
        "mbkl 100x": (
            _paper_mbkl(n_stumps=100 * n_features, random_state=0),
            {"C": C_GRID[1:5], "C_kernel": [0.1, 1.0, 10.0]},
        ),
        "mbkl theta=1 100x": (
            _paper_mbkl(n_stumps=100 * n_features, learn_theta=False, random_state=0),
            {"C": C_GRID[1:5]},
        ),
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
            print(
                f"{name:14s} {method:20s} {entry['mean']:6.2f} +- {entry['std']:5.2f}  ({entry['seconds']:.0f} s)",
                flush=True,
            )
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
        "mbkl": (_paper_mbkl(random_state=0), {"C": [1.0, 10.0, 100.0], "C_kernel": [1.0, 10.0]}),
        "mbkl theta=1 (1x stumps)": (
            _paper_mbkl(n_stumps=21504, learn_theta=False, random_state=0),
            {"C": [1.0, 10.0, 100.0]},
        ),
        # ablations, fixed parameters (one fit each; C from the cross-validated runs above)
        "mbkl theta=1 (3x stumps)": (
            _paper_mbkl(n_stumps=3 * 21504, learn_theta=False, random_state=0),
            {"C": [100.0]},
        ),
        "mbkl theta=1 (10x stumps)": (_paper_mbkl(learn_theta=False, random_state=0), {"C": [100.0]}),
        "mbkl init_rule=balanced": (
            _paper_mbkl(init_rule="balanced", random_state=0),
            {"C": [10.0], "C_kernel": [1.0]},
        ),
        # sensitivity (run with --methods; not part of the default run)
        "mbkl C_kernel=100": (_paper_mbkl(random_state=0), {"C": [10.0], "C_kernel": [100.0]}),
        "mbkl init_rule=balanced C_kernel=10": (
            _paper_mbkl(init_rule="balanced", random_state=0),
            {"C": [10.0, 100.0], "C_kernel": [10.0]},
        ),
        "mbkl threshold_rule=quantile": (
            _paper_mbkl(threshold_rule="quantile", random_state=0),
            {"C": [1.0, 10.0, 100.0], "C_kernel": [1.0, 10.0]},
        ),
        "mbkl threshold_rule=quantile init_rule=balanced": (
            _paper_mbkl(threshold_rule="quantile", init_rule="balanced", random_state=0),
            {"C": [10.0], "C_kernel": [1.0]},
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
    from classify_images.pipeline.training.evaluation import mean_per_class_accuracy

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
            entry.update(
                params=search.best_params_,
                cv_score=100.0 * search.best_score_,
                cv_seconds=time.perf_counter() - start,
                params_from="3-fold CV on the training rows",
            )
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


# ============================================================================ part 3
#: The variants of ``gap``: name -> (fixed MBKL parameters, grid chosen by 3-fold CV per split).
GAP_VARIANTS: dict[str, tuple[dict, dict]] = {
    "paper": (PAPER_RULES, {"C": [1.0, 10.0], "C_kernel": [1.0, 10.0]}),
    "quantile": ({**PAPER_RULES, "threshold_rule": "quantile"}, {"C": [1.0, 10.0], "C_kernel": [1.0, 10.0]}),
    "distinct+balanced": (
        {**PAPER_RULES, "threshold_rule": "distinct_quantile", "init_rule": "balanced"},
        {"C": [10.0], "C_kernel": [10.0, 100.0]},
    ),
    "distinct+balanced+select": (  # the defaults since this study
        {"threshold_rule": "distinct_quantile", "init_rule": "balanced", "theta_exponent": 0.0},
        {"C": [10.0, 100.0], "C_kernel": [10.0, 100.0]},
    ),
    "theta=1 distinct": (
        {**PAPER_RULES, "threshold_rule": "distinct_quantile", "learn_theta": False},
        {"C": [10.0, 100.0]},
    ),
}


#: The design exploration of ``holdout``: name -> MBKL parameters (``"pmsvm-hi"``: the peer).
_DB = {"threshold_rule": "distinct_quantile", "init_rule": "balanced"}
HOLDOUT_VARIANTS: dict[str, dict] = {
    "pmsvm-hi C=0.1": {},
    "quantile C=1 Ck=10": {**PAPER_RULES, "threshold_rule": "quantile", "C": 1.0, "C_kernel": 10.0},
    "distinct C=1 Ck=10": {**PAPER_RULES, "threshold_rule": "distinct_quantile", "C": 1.0, "C_kernel": 10.0},
    "quantile theta=1 C=100": {**PAPER_RULES, "threshold_rule": "quantile", "learn_theta": False, "C": 100.0},
    "distinct theta=1 C=100": {**PAPER_RULES, "threshold_rule": "distinct_quantile", "learn_theta": False, "C": 100.0},
    "quantile C=1 Ck=10, Step 1 on all rows": {
        **PAPER_RULES,
        "threshold_rule": "quantile",
        "C": 1.0,
        "C_kernel": 10.0,
        "neg_pos_ratio": 14.0,
        "n_kernel_samples": None,
    },
    "quantile balanced C=10 Ck=10": {
        **PAPER_RULES,
        "threshold_rule": "quantile",
        "init_rule": "balanced",
        "C": 10.0,
        "C_kernel": 10.0,
    },
    "distinct balanced C=10 Ck=1": {**PAPER_RULES, **_DB, "C": 10.0, "C_kernel": 1.0},
    "distinct balanced C=10 Ck=10": {**PAPER_RULES, **_DB, "C": 10.0, "C_kernel": 10.0},
    "distinct balanced C=10 Ck=100": {**PAPER_RULES, **_DB, "C": 10.0, "C_kernel": 100.0},
    "distinct balanced C=100 Ck=100": {**PAPER_RULES, **_DB, "C": 100.0, "C_kernel": 100.0},
    "distinct balanced C=10 Ck=100 gamma=0.5": {**_DB, "C": 10.0, "C_kernel": 100.0, "theta_exponent": 0.5},
    "distinct balanced C=10 Ck=100 gamma=0": {**_DB, "C": 10.0, "C_kernel": 100.0, "theta_exponent": 0.0},
    "distinct balanced C=100 Ck=100 gamma=0": {**_DB, "C": 100.0, "C_kernel": 100.0, "theta_exponent": 0.0},
    "distinct balanced C=100 Ck=10 gamma=0": {**_DB, "C": 100.0, "C_kernel": 10.0, "theta_exponent": 0.0},
    "quantile table1 C=10 Ck=10 gamma=0": {
        **PAPER_RULES,
        "threshold_rule": "quantile",
        "C": 10.0,
        "C_kernel": 10.0,
        "theta_exponent": 0.0,
    },
}


def run_holdout(args) -> dict:
    """Each ``HOLDOUT_VARIANTS`` entry fitted once on 2/3 of split 0's training rows and scored on the
    other third (the split's test rows are not used): a cheap screen before the 3-split protocol."""
    fs = U.load_features(args.features)
    X, y = fs.pooled()
    train, _ = U.resplit(y, args.train_per_class, 0)
    Xtr, ytr = np.ascontiguousarray(X[train]), y[train]
    del X
    fit_rows, valid_rows = next(StratifiedKFold(3, shuffle=True, random_state=0).split(Xtr, ytr))
    results = {}
    for name, params in HOLDOUT_VARIANTS.items():
        if args.methods and name not in args.methods:
            continue
        model = PmSVM(p=-8.0, C=0.1, random_state=0) if name.startswith("pmsvm") else MBKL(random_state=0, **params)
        cpu = time.process_time()
        model.fit(Xtr[fit_rows], ytr[fit_rows])
        entry = {
            "accuracy": 100 * U.mean_per_class_accuracy(ytr[valid_rows], model.predict(Xtr[valid_rows]), fs.n_classes),
            "fit_cpu_s": time.process_time() - cpu,
        }
        if isinstance(model, MBKL):
            entry.update(
                n_stumps=model.n_stumps_, n_stumps_step0=model.n_stumps_step0_, n_selected=int(model.theta_.size)
            )
        results[name] = entry
        print(
            f"| {name} | {entry['accuracy']:.2f} | {entry['fit_cpu_s']:.1f} | "
            f"{entry.get('n_stumps_step0', '–')} / {entry.get('n_selected', '–')} |",
            flush=True,
        )
    return results


class _Step1Memo(MBKL):
    """MBKL whose Steps 0-1 are memoised across fits that differ only in Step 2's ``C``.

    Steps 0-1 depend on the stump outputs, the labels and every parameter but ``C``
    (``class_weight``, ``tol`` and ``max_iter`` act in Step 2 only), and Step 2 draws no
    random numbers, so a fit that reuses them is the fit it replaces (same stumps, same
    ``theta``): the cross-validation of ``C`` pays Step 1 once per (fold, ``C_kernel``).
    """

    _memo: dict = {}

    def _learn_theta(self, bits, y_index, n_problems, rng, timings):
        import hashlib

        params = {
            k: v for k, v in self.get_params().items() if k not in ("C", "class_weight", "tol", "max_iter", "verbose")
        }
        digest = hashlib.blake2b(bits, digest_size=16)
        digest.update(y_index.tobytes())
        key = (digest.hexdigest(), bits.shape, n_problems, json.dumps(params, sort_keys=True, default=str))
        if key not in self._memo:
            selected, theta = super()._learn_theta(bits, y_index, n_problems, rng, timings)
            self._memo[key] = (selected, theta, self.n_stumps_step0_, self.n_iter_kernel_)
        selected, theta, self.n_stumps_step0_, self.n_iter_kernel_ = self._memo[key]
        return selected, theta


def _gap_split(
    variant: str, X: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, n_classes: int, seed: int
) -> dict:
    """One split of one MBKL variant: grid by 3-fold CV on the training rows, then the final fit."""
    fixed, grid = GAP_VARIANTS[variant]
    Xtr, ytr = np.ascontiguousarray(X[train]), y[train]
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    _Step1Memo._memo.clear()
    cv_cpu = time.process_time()

    def fit_score(index, tr, va):
        model = _Step1Memo(random_state=0, **fixed, **combos[index]).fit(Xtr[tr], ytr[tr])
        return U.mean_per_class_accuracy(ytr[va], model.predict(Xtr[va]), n_classes)

    if len(combos) > 1:
        best, scores = U.select_by_cv(fit_score, list(range(len(combos))), ytr, seed=seed)
    else:
        best, scores = 0, {}
    cv_cpu = time.process_time() - cv_cpu
    _Step1Memo._memo.clear()
    params = combos[best]
    model = MBKL(random_state=0, **fixed, **params)
    cpu, wall = time.process_time(), time.perf_counter()
    model.fit(Xtr, ytr)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    start = time.perf_counter()
    pred = model.predict(X[test])
    return {
        "seed": seed,
        "params": params,
        "cv_scores": {json.dumps(combos[k]): v for k, v in scores.items()},
        "accuracy": U.mean_per_class_accuracy(y[test], pred, n_classes),
        "train_cpu_s": cpu,
        "train_wall_s": wall,
        "test_wall_s": time.perf_counter() - start,
        "cv_cpu_s": cv_cpu,
        "n_stumps": model.n_stumps_,
        "n_stumps_step0": model.n_stumps_step0_,
        "n_selected": int(model.theta_.size),
        "timings": model.timings_,
    }


def _pmsvm_split(X, y, train, test, n_classes, seed) -> dict:
    """PmSVM-HI on the same split with the config table's protocol (``bench_config_table``)."""
    from bench_config_table import _additive_method

    cpu = time.process_time()
    run = _additive_method("pmsvm-hi", X, y, train, test, n_classes, seed)
    run["cell_cpu_s"] = time.process_time() - cpu
    return run


def run_gap(args) -> dict:
    """Every requested variant (and PmSVM-HI) on every feature set, the same ``--repeats`` splits."""
    out = Path(args.out) if args.out else None
    results = json.loads(out.read_text()) if out and out.exists() else {"feature_sets": {}}
    results.update(
        machine=args.machine,
        date=time.strftime("%Y-%m-%d"),
        repeats=args.repeats,
        variants={k: {"fixed": f, "grid": g} for k, (f, g) in GAP_VARIANTS.items()},
    )
    for pair in args.feature_sets:
        name, _, folder = pair.partition("=")
        fs = U.load_features(folder)
        X, y = fs.pooled()
        entry = results["feature_sets"].setdefault(name, {"folder": folder, "config_hash": fs.config_hash, "cells": {}})
        print(f"{name}: {X.shape}", flush=True)
        for variant in args.variants:
            runs, cell_cpu = [], time.process_time()
            for seed in range(args.repeats):
                train, test = U.resplit(y, args.train_per_class, seed)
                if variant == "pmsvm-hi":
                    run = _pmsvm_split(X, y, train, test, fs.n_classes, seed)
                else:
                    run = _gap_split(variant, X, y, train, test, fs.n_classes, seed)
                runs.append(run)
                print(f"  {variant} split {seed}: {run['params']} {100 * run['accuracy']:.2f} %", flush=True)
            acc = 100 * np.array([r["accuracy"] for r in runs])
            entry["cells"][variant] = {
                "runs": runs,
                "mean": float(acc.mean()),
                "std": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
                "cell_cpu_s": time.process_time() - cell_cpu,
            }
            print(f"  {variant}: {acc.mean():.2f} ± {entry['cells'][variant]['std']:.2f}", flush=True)
            if out:
                U.write_json(out, results)
        del X
    return results


def gap_table(results: dict) -> str:
    lines = [
        "| features | variant | mean ± std (3 splits) | PmSVM-HI − variant | chosen (split 0, 1, 2) "
        "| final fit CPU s (wall s) | stumps after Step 0 / selected | cell CPU s (CV included) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in results["feature_sets"].items():
        peer = entry["cells"].get("pmsvm-hi")
        for variant, cell in entry["cells"].items():
            runs = cell["runs"]
            gap = f"{peer['mean'] - cell['mean']:+.2f}" if peer and variant != "pmsvm-hi" else "–"
            chosen = "; ".join(str(r["params"]) for r in runs)
            fit_cpu = np.mean([r.get("train_cpu_s", np.nan) for r in runs])
            fit_wall = np.mean([r.get("train_wall_s", r.get("train_seconds", np.nan)) for r in runs])
            stumps = (
                f"{np.mean([r['n_stumps_step0'] for r in runs]):.0f} / {np.mean([r['n_selected'] for r in runs]):.0f}"
                if "n_selected" in runs[0]
                else "–"
            )
            lines.append(
                f"| {name} | {variant} | {cell['mean']:.2f} ± {cell['std']:.2f} | {gap} | {chosen} | "
                f"{'–' if np.isnan(fit_cpu) else f'{fit_cpu:.1f}'} ({fit_wall:.1f}) | {stumps} | "
                f"{cell['cell_cpu_s']:.0f} |"
            )
    return "\n".join(lines)


# ============================================================================ main
def main(argv: list[str] | None = None) -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["attributes", "scenes", "holdout", "gap"])
    parser.add_argument("--features", help="attributes/scenes: feature set folder (e.g. a 15-Scenes bof-spm build)")
    parser.add_argument("--feature-sets", nargs="+", default=[], help="gap: NAME=FOLDER of each feature set")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[*GAP_VARIANTS, "pmsvm-hi"],
        help="gap: variants to run (" + ", ".join([*GAP_VARIANTS, "pmsvm-hi"]) + ")",
    )
    parser.add_argument("--repeats", type=int, default=3, help="gap: splits (seeds 0 .. repeats-1)")
    parser.add_argument("--train-per-class", type=int, default=100)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--wait-minutes", type=float, default=60.0)
    parser.add_argument("--methods", nargs="*", help="scenes, holdout: run only these methods (names as printed)")
    parser.add_argument("--reuse", help="scenes: take the cross-validated parameters from this earlier --out JSON")
    parser.add_argument("--out", help="write the results as JSON")
    args = parser.parse_args(argv)
    args.machine = U.announce_machine()
    if args.part == "gap":
        unknown = set(args.variants) - {*GAP_VARIANTS, "pmsvm-hi"}
        if unknown or not args.feature_sets or any("=" not in p for p in args.feature_sets):
            parser.error(f"gap needs --feature-sets NAME=FOLDER ... and --variants from {[*GAP_VARIANTS, 'pmsvm-hi']}")
    elif not args.features:
        parser.error(f"{args.part} needs --features FOLDER")
    with threadpool_limits(1):
        if args.part == "gap":
            results = run_gap(args)
            table = gap_table(results)
            print(table)
            return
        if args.part == "holdout":
            results = run_holdout(args)
            table = ""
        elif args.part == "attributes":
            results = run_attributes(args.folds)
            table = attributes_table(results)
        else:
            results = run_scenes(args)
            table = scenes_table(results)
    print(table)
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": args.machine, **results}, indent=1, default=float))


if __name__ == "__main__":
    main()
