"""Benchmark of the HIK nSVM (Sharma & Jurie) on a 15-Scenes feature set.

Compares, on the same features and the same random splits (the stored train and test rows
are pooled and re-split, ``n_train`` images per class for training, the rest for testing):

* ``nsvm``      : :class:`HIKnSVM` with the paper's settings (Algorithm 1, lambda = 1e-4, m = 0.02);
* ``hik-svc``   : the exact histogram-intersection kernel SVM, ``SVC(kernel="precomputed")``
  on the min kernel (Eq. 5), libsvm's one-vs-one multi-class scheme; its fit and test
  times exclude the Gram matrix (computed once for all rows, reported separately);
* ``hik-svc one-vs-rest``: the same kernel SVM trained one-vs-rest, as the other methods;
* ``pmsvm-hi``  : PmSVM with p = -8 (the power-mean approximation of HIK);
* ``map+linear``: Vedaldi & Zisserman's explicit homogeneous kernel map of the *intersection*
  kernel (order 3: 7 dimensions per input dimension, VLFeat's default rectangular window
  and period, our implementation) followed by liblinear's L2-regularised L1-loss
  (hinge) linear SVM, the paper's comparison.

It also measures test-time speed and model size of nSVM against map+linear (single-threaded,
side by side in one run), and, with ``--ablations``, nSVM's options (class balancing, bias).
nSVM runs with its defaults (the paper's lambda and m; our default learning rate);
``--lr-grid`` reports the 3-fold cross-validated accuracy and the training objective of
other learning rates.  The baselines' C is chosen by 3-fold cross-validation.  All choices
use the training rows of the first split only, never test rows.

Usage::

    python benchmarks/bench_hik_nsvm.py --features feature-sets/scene15-bof-spm --repeats 3
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import _bench_utils as U
import numpy as np
import scipy.sparse as sp
from _hik_research import intersection_gram
from threadpoolctl import threadpool_limits

from classify_images.classifiers.hik_nsvm import HIKnSVM, hik_decision
from classify_images.pipeline.settings.dataset import split_indices
from classify_images.pipeline.training.evaluation import mean_per_class_accuracy


# ============================================================================ data
def load_rows(folder: Path, wait_minutes: float = 0.0) -> tuple[np.ndarray, np.ndarray, dict]:
    """All stored rows (train then test) as float32 and their class indices."""
    fs = U.load_features(folder, wait_minutes)
    X, y = fs.pooled()
    return np.ascontiguousarray(X, dtype=np.float32), y.astype(np.int64), fs.manifest


def to_csr(X: np.ndarray) -> sp.csr_matrix:
    A = sp.csr_matrix(X, dtype=np.float32)
    A.sort_indices()
    return A


def cv_folds(y: np.ndarray, n_folds: int = 3, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import StratifiedKFold

    return list(StratifiedKFold(n_folds, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


# ============================================================================ baselines
def intersection_gram_full(X: np.ndarray, block: int = 512) -> np.ndarray:
    """Min kernel (Eq. 5) between all rows (float64), computed by upper-triangular blocks."""
    A = to_csr(X)
    n = X.shape[0]
    G = np.empty((n, n), dtype=np.float64)
    for i0 in range(0, n, block):
        i1 = min(i0 + block, n)
        Ai = A[i0:i1]
        out = np.empty((i1 - i0, n - i0), dtype=np.float64)
        intersection_gram(Ai.indptr, Ai.indices, Ai.data, X[i0:], out)
        G[i0:i1, i0:] = out
        G[i0:, i0:i1] = out.T
    return G


class IntersectionKernelMap:
    """Vedaldi & Zisserman's homogeneous kernel map of the intersection kernel (gamma = 1).

    ``min(x, y) = sqrt(xy) k(log y - log x)`` with signature ``k(l) = exp(-|l|/2)`` whose
    spectrum is ``kappa(w) = (2/pi) / (1 + 4 w^2)``.  The map of ``x > 0`` is
    ``sqrt(x) [sqrt(L kappa_0), sqrt(2 L kappa_j) cos(f_j L log x), sqrt(2 L kappa_j) sin(f_j L log x)]``,
    j = 1..order (2 order + 1 dimensions); zero maps to zero.  The sampling step
    ``L = 2 pi / period`` and the smoothed spectrum ``kappa_j`` follow VLFeat's
    ``vl_homogeneouskernelmap_new`` with the default rectangular window (period
    ``2 log(order + 0.99) + 3.52``, spectrum convolved with the window's sinc and clipped
    at 0); values are computed exactly rather than read from VLFeat's interpolation table.
    """

    def __init__(self, order: int = 3) -> None:
        self.order = order
        period = max(2.00 * math.log(order + 0.99) + 3.52, 1.0)
        L = 2.0 * math.pi / period

        def spectrum(w: np.ndarray) -> np.ndarray:
            return (2.0 / math.pi) / (1.0 + 4.0 * w * w)

        w_range = 2.0 / (period * 1e-2)
        d_w = 2.0 * w_range / (2 * 1024.0 + 1)
        grid = np.arange(-w_range, w_range + 0.5 * d_w, d_w)
        window = np.sinc(period / 2.0 * grid / math.pi) * period / (2.0 * math.pi)  # sin(u)/u

        def smooth(w: float) -> float:
            return max(float(d_w * np.sum(window * spectrum(grid + w))), 0.0)

        kappa, freq, i, j = [], [], 0, 0
        while i <= order:
            value = smooth(j * L)
            kappa.append(value)
            freq.append(j)
            j += 1
            if value > 0 or j >= 3 * i:
                i += 1
            else:
                kappa.pop()
                freq.pop()
        self.coef0 = math.sqrt(L * kappa[0])
        self.coef = np.sqrt(2.0 * L * np.asarray(kappa[1:]))
        self.freq = L * np.asarray(freq[1:], dtype=np.float64)
        self.n_out = 2 * order + 1

    def _map_values(self, x: np.ndarray) -> np.ndarray:
        """(m,) positive values -> (m, 2 order + 1) float32."""
        x = x.astype(np.float64)
        sx = np.sqrt(x)[:, None]
        phase = np.log(x)[:, None] * self.freq[None]
        out = np.empty((x.shape[0], self.n_out), dtype=np.float32)
        out[:, 0] = self.coef0 * sx[:, 0]
        out[:, 1::2] = sx * self.coef * np.cos(phase)
        out[:, 2::2] = sx * self.coef * np.sin(phase)
        return out

    def transform_csr(self, X: sp.csr_matrix) -> sp.csr_matrix:
        """Map a CSR matrix: feature ``d`` becomes columns ``d*(2 order+1) .. +2 order``."""
        k = self.n_out
        data = self._map_values(X.data).ravel()
        indices = (X.indices.astype(np.int64)[:, None] * k + np.arange(k)).ravel()
        return sp.csr_matrix((data, indices, X.indptr.astype(np.int64) * k), shape=(X.shape[0], X.shape[1] * k))

    def transform_dense(self, X: np.ndarray) -> np.ndarray:
        """Map a dense block (every entry, zeros included): (n, d) -> (n, d (2 order+1))."""
        flat = X.ravel()
        out = np.zeros((flat.shape[0], self.n_out), dtype=np.float32)
        positive = flat > 0
        out[positive] = self._map_values(flat[positive])
        return out.reshape(X.shape[0], -1)


def map_linear_decision_dense(
    fmap: IntersectionKernelMap, X: np.ndarray, coef: np.ndarray, intercept: np.ndarray, chunk: int = 128
) -> np.ndarray:
    """Scores of the linear SVM on mapped dense rows, mapping ``chunk`` rows at a time."""
    Wt = np.ascontiguousarray(coef.T, dtype=np.float32)
    out = np.empty((X.shape[0], coef.shape[0]), dtype=np.float64)
    for i in range(0, X.shape[0], chunk):
        out[i : i + chunk] = fmap.transform_dense(X[i : i + chunk]) @ Wt + intercept
    return out


# ============================================================================ methods
def mpca(y_true, y_pred) -> float:
    return 100.0 * mean_per_class_accuracy(np.asarray(y_true), np.asarray(y_pred))


def timed(fn, *args):
    start = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - start


def run_nsvm(params: dict, Xtr, ytr, Xte, yte) -> dict:
    clf, fit_s = timed(HIKnSVM(**params).fit, Xtr, ytr)
    pred, test_s = timed(clf.predict, Xte)
    return {"acc": mpca(yte, pred), "fit_s": fit_s, "test_s": test_s, "model": clf, "rate": clf.learning_rate_}


def run_svc(C: float, G: np.ndarray, tr, te, y, one_vs_rest: bool = False) -> dict:
    """libsvm on the precomputed min kernel: one-vs-one (its multi-class scheme), or
    one-vs-rest as nSVM and PmSVM (``one_vs_rest=True``)."""
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import SVC

    svc = SVC(kernel="precomputed", C=C)
    clf, fit_s = timed((OneVsRestClassifier(svc) if one_vs_rest else svc).fit, G[np.ix_(tr, tr)], y[tr])
    pred, test_s = timed(clf.predict, G[np.ix_(te, tr)])
    n_support = sum(int(e.n_support_.sum()) for e in clf.estimators_) if one_vs_rest else int(clf.n_support_.sum())
    return {"acc": mpca(y[te], pred), "fit_s": fit_s, "test_s_given_gram": test_s, "n_support": n_support}


def linear_svm(C: float):
    """liblinear's L2-regularised L1-loss (hinge) SVM, dual solver, with liblinear's own
    default stopping tolerance (eps = 0.1; scikit-learn's default 1e-4 takes > 10 min a fit
    on the mapped dense-SIFT features without converging); seeded, as its dual solver visits
    the examples in random order."""
    from sklearn.svm import LinearSVC

    return LinearSVC(C=C, loss="hinge", dual=True, tol=0.1, max_iter=1000, random_state=0)


def run_map_linear(C: float, fmap, Atr, ytr, Ate, yte) -> dict:
    Mtr, map_s = timed(fmap.transform_csr, Atr)
    clf, fit_s = timed(linear_svm(C).fit, Mtr, ytr)

    def predict(A):
        return clf.predict(fmap.transform_csr(A))

    pred, test_s = timed(predict, Ate)
    return {"acc": mpca(yte, pred), "fit_s": fit_s + map_s, "test_s": test_s, "model": clf}


def run_pmsvm(params: dict, Xtr, ytr, Xte, yte) -> dict:
    from classify_images.classifiers.pmsvm import PmSVM

    clf, fit_s = timed(PmSVM(**params).fit, Xtr, ytr)
    pred, test_s = timed(clf.predict, Xte)
    return {"acc": mpca(yte, pred), "fit_s": fit_s, "test_s": test_s}


# ============================================================================ selection
def select_svc_C(G, tr, y, grid) -> tuple[float, dict]:
    from sklearn.svm import SVC

    scores = {}
    for C in grid:
        accs = []
        for a, b in cv_folds(y[tr]):
            clf = SVC(kernel="precomputed", C=C).fit(G[np.ix_(tr[a], tr[a])], y[tr[a]])
            accs.append(mpca(y[tr[b]], clf.predict(G[np.ix_(tr[b], tr[a])])))
        scores[C] = float(np.mean(accs))
    return max(scores, key=scores.get), scores


def select_linear_C(fmap, Atr, ytr, grid) -> tuple[float, dict]:
    M = fmap.transform_csr(Atr)
    scores = {}
    for C in grid:
        accs = [mpca(ytr[b], linear_svm(C).fit(M[a], ytr[a]).predict(M[b])) for a, b in cv_folds(ytr)]
        scores[C] = float(np.mean(accs))
    return max(scores, key=scores.get), scores


def learning_rate_study(Atr, ytr, grid) -> dict:
    """3-fold CV accuracy, and objective (Eq. 7a, mean over classes) on all ``Atr``, per rate."""
    from classify_images.classifiers.base import ovr_targets
    from classify_images.classifiers.hik_nsvm import hik_nsvm_objective

    Y = ovr_targets(ytr, int(ytr.max()) + 1).astype(np.float64)
    study = {}
    for lr in grid:
        accs = [
            mpca(ytr[b], HIKnSVM(learning_rate=lr, random_state=0).fit(Atr[a], ytr[a]).predict(Atr[b]))
            for a, b in cv_folds(ytr)
        ]
        clf = HIKnSVM(learning_rate=lr, random_state=0).fit(Atr, ytr)
        objective = np.mean(
            [hik_nsvm_objective(Atr, Y[:, k], clf.coef_[k], 0.0, clf.alpha, clf.margin_) for k in range(Y.shape[1])]
        )
        study[lr] = {
            "cv_acc": float(np.mean(accs)),
            "objective": float(objective),
            "rate": clf.learning_rate_,
            "nonzero_weights": float(np.count_nonzero(clf.coef_) / clf.coef_.size),
        }
        print(f"  nsvm learning_rate={lr}: {json.dumps(study[lr])}", flush=True)
    return study


# ============================================================================ speed


def speed_and_size(nsvm: HIKnSVM, lin, fmap, X_dense: np.ndarray, A: sp.csr_matrix) -> dict:
    """Test-time seconds (best of 5) and model bytes, nSVM against map+linear, same rows.

    All classes (one-vs-rest scores of every class), and one class as in the paper's
    Table 1 (the map of the test rows is then paid for a single dot product).
    """
    coef, intercept = lin.coef_, lin.intercept_
    Wt = np.ascontiguousarray(coef.T)
    same = np.array_equal(nsvm.decision_function(A).argmax(1), nsvm.decision_function(X_dense).argmax(1))
    lin_csr = lambda: fmap.transform_csr(A) @ Wt + intercept  # noqa: E731
    ref = lin.decision_function(fmap.transform_csr(A))
    assert np.allclose(lin_csr(), ref, atol=1e-5 * np.abs(ref).max()), "map+linear timing path differs"
    result = {
        "n_rows": int(A.shape[0]),
        "nsvm_csr_s": U.best_time(lambda: nsvm.decision_function(A)),
        "map_linear_csr_s": U.best_time(lin_csr),
        "nsvm_dense_s": U.best_time(lambda: nsvm.decision_function(X_dense)),
        "map_linear_dense_s": U.best_time(lambda: map_linear_decision_dense(fmap, X_dense, coef, intercept), 2),
        "nsvm_one_class_csr_s": U.best_time(lambda: hik_decision(A, nsvm.coef_[:1], nsvm.intercept_[:1])),
        "map_linear_one_class_csr_s": U.best_time(lambda: fmap.transform_csr(A) @ Wt[:, :1] + intercept[:1]),
        "nsvm_one_class_model_bytes": int(nsvm.coef_[0].nbytes + 8),
        "map_linear_one_class_model_bytes": int(coef[0].nbytes + 8),
        "nsvm_model_bytes": int(nsvm.coef_.nbytes + nsvm.intercept_.nbytes),
        "nsvm_nonzero_weights": float(np.count_nonzero(nsvm.coef_) / nsvm.coef_.size),
        "map_linear_model_bytes": int(coef.nbytes + intercept.nbytes),
        "dense_csr_predictions_equal": bool(same),
    }
    result["speedup_csr"] = result["map_linear_csr_s"] / result["nsvm_csr_s"]
    result["speedup_dense"] = result["map_linear_dense_s"] / result["nsvm_dense_s"]
    result["speedup_one_class_csr"] = result["map_linear_one_class_csr_s"] / result["nsvm_one_class_csr_s"]
    result["size_ratio"] = result["map_linear_model_bytes"] / result["nsvm_model_bytes"]
    return result


# ============================================================================ main
def _rate(text: str) -> float | str:
    return text if text == "auto" else float(text)


def summarise(values: list[float]) -> str:
    return f"{np.mean(values):.1f} ± {np.std(values):.1f}"


def main(argv: list[str] | None = None) -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=3, help="random splits (seeds 0..repeats-1)")
    parser.add_argument("--n-train", type=int, default=100)
    parser.add_argument("--wait-minutes", type=float, default=60.0)
    parser.add_argument(
        "--lr-grid",
        type=_rate,
        nargs="*",
        default=[],
        help="report nSVM's CV accuracy and objective for these learning rates (split 0 training rows)",
    )
    parser.add_argument("--ablations", action="store_true", help="also run nSVM's options on every split")
    parser.add_argument("--skip", nargs="*", default=[], choices=["hik-svc", "pmsvm-hi", "map+linear"])
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)

    threadpool_limits(1)  # single-threaded BLAS: ratios measured side by side
    machine = U.announce_machine()
    X, y, manifest = load_rows(args.features, args.wait_minutes)
    A = to_csr(X)
    info = {
        "features": str(args.features),
        "config_hash": manifest.get("config_hash"),
        "rows": int(X.shape[0]),
        "dims": int(X.shape[1]),
        "density": A.nnz / X.size,
        "row_l1_mean": float(np.mean(A.sum(axis=1))),
        "nonzero_mean": float(A.data.mean()),
    }
    print(json.dumps(info), flush=True)

    splits = [split_indices(y, args.n_train, None, seed) for seed in range(args.repeats)]
    tr0 = splits[0][0]
    nsvm_params = dict(random_state=0)
    selection: dict = {}
    if args.lr_grid:
        selection["nsvm_learning_rate"] = learning_rate_study(A[tr0], y[tr0], args.lr_grid)
    print("nsvm params", HIKnSVM(**nsvm_params).get_params(), flush=True)

    fmap = IntersectionKernelMap(order=3)
    G = None
    if "hik-svc" not in args.skip:
        G, gram_s = timed(intersection_gram_full, X)
        info["gram_seconds_all_rows"] = gram_s
        selection["svc_C"], selection["svc_cv"] = select_svc_C(G, tr0, y, [1.0, 10.0, 100.0, 1000.0])
    if "map+linear" not in args.skip:
        selection["linear_C"], selection["linear_cv"] = select_linear_C(fmap, A[tr0], y[tr0], [0.1, 1.0, 10.0, 100.0])
    print("selection", json.dumps(selection), flush=True)

    variants = {"nsvm": nsvm_params}
    if args.ablations:
        variants |= {
            "nsvm balanced": {**nsvm_params, "class_weight": "balanced"},
            "nsvm +bias": {**nsvm_params, "fit_intercept": True},
            "nsvm balanced +bias": {**nsvm_params, "class_weight": "balanced", "fit_intercept": True},
        }
    results: dict[str, list[dict]] = {}
    speed = None
    for seed, (tr, te) in enumerate(splits):
        for name, params in variants.items():
            r = run_nsvm(params, A[tr], y[tr], A[te], y[te])
            if name == "nsvm" and seed == 0:
                nsvm0 = r["model"]
            results.setdefault(name, []).append({k: v for k, v in r.items() if k != "model"})
            print(seed, name, f"{r['acc']:.2f}", f"fit {r['fit_s']:.1f}s", f"r {r['rate']:.3g}", flush=True)
        if G is not None:
            for name, ovr in (("hik-svc", False), ("hik-svc one-vs-rest", True)):
                r = run_svc(selection["svc_C"], G, tr, te, y, one_vs_rest=ovr)
                results.setdefault(name, []).append(r)
                print(seed, name, f"{r['acc']:.2f}", flush=True)
        if "pmsvm-hi" not in args.skip:
            r = run_pmsvm({"p": -8.0, "random_state": 0}, A[tr], y[tr], A[te], y[te])
            results.setdefault("pmsvm-hi", []).append(r)
            print(seed, "pmsvm-hi", f"{r['acc']:.2f}", flush=True)
        if "map+linear" not in args.skip:
            r = run_map_linear(selection["linear_C"], fmap, A[tr], y[tr], A[te], y[te])
            if seed == 0:
                speed = speed_and_size(nsvm0, r["model"], fmap, np.ascontiguousarray(X[te]), A[te])
                print("speed", json.dumps(speed), flush=True)
            results.setdefault("map+linear", []).append({k: v for k, v in r.items() if k != "model"})
            print(seed, "map+linear", f"{r['acc']:.2f}", flush=True)

    print("\n| method | mean per-class accuracy (%) | fit s (mean) |")
    print("|---|---|---|")
    for name, runs in results.items():
        print(f"| {name} | {summarise([r['acc'] for r in runs])} | {np.mean([r['fit_s'] for r in runs]):.1f} |")
    if args.out:
        payload = {
            "machine": machine,
            "info": info,
            "nsvm_params": nsvm_params,
            "selection": selection,
            "results": results,
            "speed": speed,
        }
        args.out.write_text(json.dumps(payload, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
