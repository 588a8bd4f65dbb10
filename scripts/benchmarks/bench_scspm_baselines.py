"""The ScSPM paper's 15-Scenes table (Yang et al. 2009, Table 3) on our features.

Methods (mean per-class accuracy, mean +- std over ``--repeats`` random
re-splits of the stored rows ``X_train + X_test``: 100 training images per
class, all the rest for testing; split ``r`` uses seed ``r``):

* **ScSPM**: max-pooled sparse codes + :class:`QuadraticHingeSVC` (linear,
  squared hinge, L-BFGS);
* **LSPM**: k-means-512 spatial-pyramid histograms + the same linear SVM;
* **KSPM**: k-means spatial-pyramid histograms + an exact additive chi^2 kernel
  SVM, ``k(x, y) = sum_d 2 x_d y_d / (x_d + y_d)`` (``sklearn.svm.SVC`` with a
  precomputed kernel, one-vs-one).

In every split ``C`` is chosen by 3-fold cross-validation on that split's
training rows only; the test rows are used once, for the score.  Grids: the
linear SVM tries ``LINEAR_C_GRID / mean ||x||^2`` (the loss scales with
``C ||x||^2``: identity for L2-normalised ScSPM vectors, ~1000x for
L1-normalised histograms), the kernel SVM ``KERNEL_GRID`` (``k(x, x) = 1``
for L1-normalised histograms).  Std is the sample standard deviation (ddof=1).

Usage::

    python benchmarks/bench_scspm_baselines.py --scspm feature-sets/scene15-scspm \\
        --bof feature-sets/scene15-bof-spm --lspm feature-sets/scene15-lspm --repeats 3 --out table.json
"""

from __future__ import annotations

import argparse
import time

import _bench_utils as U
import numpy as np
import scipy.sparse as sp
from numba import njit
from sklearn.svm import SVC

from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC

KERNEL_GRID = [0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0]
PAPER = {  # Yang et al. 2009, Table 3 (15-Scenes), mean +- std in %
    "ScSPM": (80.28, 0.93),
    "KSPM": (76.73, 0.65),
    "LSPM": (65.32, 1.02),
}


@njit(cache=True, nogil=True)
def _chi2_symmetric(data, indices, indptr, dense, block):
    """``K[i, j] = sum_d 2 x_id x_jd / (x_id + x_jd)`` for all rows (CSR ``x_i``, dense ``x_j``).

    Loops over blocks of ``block`` dense rows ``j`` (kept in cache) and, for
    each, over the non-zeros of every row ``i >= j``; fills both triangles.
    """
    n = indptr.shape[0] - 1
    K = np.zeros((n, n))
    for j0 in range(0, n, block):
        j1 = min(j0 + block, n)
        for i in range(j0, n):
            for j in range(j0, min(j1, i + 1)):
                total = 0.0
                for p in range(indptr[i], indptr[i + 1]):
                    x = data[p]
                    y = dense[j, indices[p]]
                    total += 2.0 * x * y / (x + y)
                K[i, j] = total
                K[j, i] = total
    return K


def chi2_kernel(X: np.ndarray, block: int = 32) -> np.ndarray:
    """Additive chi^2 Gram matrix of the non-negative rows of ``X`` (float64, exact)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    if np.any(X < 0):
        raise ValueError("the chi^2 kernel needs non-negative features")
    csr = sp.csr_matrix(X)
    return _chi2_symmetric(csr.data, csr.indices.astype(np.int64), csr.indptr.astype(np.int64), X, block)


def _check_chi2_kernel() -> None:
    """The numba kernel against the formula written with NumPy broadcasting (small data)."""
    rng = np.random.default_rng(0)
    X = rng.random((7, 40)) * (rng.random((7, 40)) < 0.3)
    num, den = 2.0 * X[:, None, :] * X[None, :, :], X[:, None, :] + X[None, :, :]
    expected = np.sum(np.divide(num, den, out=np.zeros_like(num), where=den > 0), axis=2)
    np.testing.assert_allclose(chi2_kernel(X, block=3), expected, rtol=1e-12, atol=1e-15)


def _linear_method(
    X: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, n_classes: int, tol: float, seed: int
) -> dict:
    Xtr, ytr = X[train], y[train]

    def fit_score(C, tr, va):
        model = QuadraticHingeSVC(C=C, tol=tol).fit(Xtr[tr], ytr[tr])
        return U.mean_per_class_accuracy(ytr[va], model.predict(Xtr[va]), n_classes)

    best, scores = U.select_by_cv(fit_score, U.scaled_C_grid(Xtr), ytr, seed=seed)
    start = time.perf_counter()
    model = QuadraticHingeSVC(C=best, tol=tol).fit(Xtr, ytr)
    seconds = time.perf_counter() - start
    accuracy = U.mean_per_class_accuracy(y[test], model.predict(X[test]), n_classes)
    return {
        "accuracy": accuracy,
        "C": best,
        "cv_scores": {str(k): v for k, v in scores.items()},
        "train_seconds": seconds,
    }


def _kernel_method(
    K: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, n_classes: int, seed: int
) -> dict:
    Ktr, ytr = K[np.ix_(train, train)], y[train]

    def fit_score(C, tr, va):
        model = SVC(kernel="precomputed", C=C).fit(Ktr[np.ix_(tr, tr)], ytr[tr])
        return U.mean_per_class_accuracy(ytr[va], model.predict(Ktr[np.ix_(va, tr)]), n_classes)

    best, scores = U.select_by_cv(fit_score, KERNEL_GRID, ytr, seed=seed)
    start = time.perf_counter()
    model = SVC(kernel="precomputed", C=best).fit(Ktr, ytr)
    seconds = time.perf_counter() - start
    accuracy = U.mean_per_class_accuracy(y[test], model.predict(K[np.ix_(test, train)]), n_classes)
    return {
        "accuracy": accuracy,
        "C": best,
        "cv_scores": {str(k): v for k, v in scores.items()},
        "train_seconds": seconds,
    }


def markdown_table(summary: dict, repeats: int) -> str:
    lines = [
        f"| Method | Ours: mean ± std over {repeats} splits (%) | Chosen C per split | Paper (Table 3) |",
        "|---|---|---|---|",
    ]
    for method, entry in summary.items():
        paper = PAPER[method]
        lines.append(
            f"| {entry['label']} | {entry['mean']:.2f} ± {entry['std']:.2f} | "
            f"{', '.join(f'{c:g}' for c in entry['C'])} | {paper[0]:.2f} ± {paper[1]:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scspm", required=True, help="ScSPM feature set (configs/scspm.toml)")
    parser.add_argument("--bof", required=True, help="k-means SPM histograms for KSPM")
    parser.add_argument("--lspm", required=True, help="k-means-512 SPM histograms for LSPM")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-per-class", type=int, default=100)
    parser.add_argument("--tol", type=float, default=1e-4, help="QuadraticHingeSVC tol")
    parser.add_argument("--methods", default="ScSPM,LSPM,KSPM")
    parser.add_argument("--wait-minutes", type=float, default=60.0, help="poll for each feature set this long")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(PAPER)
    if unknown:
        parser.error(f"unknown method(s) {sorted(unknown)}; choose from {sorted(PAPER)}")
    _check_chi2_kernel()

    folders = {"ScSPM": args.scspm, "LSPM": args.lspm, "KSPM": args.bof}
    labels = {
        "ScSPM": "ScSPM (sparse codes, max pooling) + QuadraticHingeSVC",
        "LSPM": "LSPM (k-means-512 SPM histograms) + QuadraticHingeSVC",
        "KSPM": "KSPM (k-means SPM histograms) + χ² kernel SVC",
    }
    result = {
        "repeats": args.repeats,
        "train_per_class": args.train_per_class,
        "machine": U.announce_machine(),
        "date": time.strftime("%Y-%m-%d"),
        "linear_grid_before_scaling": U.LINEAR_C_GRID,
        "kernel_grid": KERNEL_GRID,
        "methods": {},
    }
    for method in methods:
        feats = U.load_features(folders[method], args.wait_minutes)
        X, y = feats.pooled()
        print(f"{method}: {feats.path} pooled {X.shape} {X.dtype}", flush=True)
        K = None
        if method == "KSPM":
            start = time.perf_counter()
            K = chi2_kernel(X)
            print(f"  chi^2 kernel over all {X.shape[0]} rows: {time.perf_counter() - start:.1f} s", flush=True)
        runs = []
        for seed in range(args.repeats):
            train, test = U.resplit(y, args.train_per_class, seed)
            if K is None:
                run = _linear_method(X, y, train, test, feats.n_classes, args.tol, seed)
            else:
                run = _kernel_method(K, y, train, test, feats.n_classes, seed)
            run["seed"] = seed
            runs.append(run)
            print(
                f"  split {seed}: C={run['C']:g}  test mean per-class accuracy {100 * run['accuracy']:.2f} %",
                flush=True,
            )
        scores = 100 * np.array([r["accuracy"] for r in runs])
        result["methods"][method] = {
            "label": labels[method],
            "features": str(feats.path),
            "config_hash": feats.config_hash,
            "runs": runs,
            "mean": float(scores.mean()),
            "std": float(scores.std(ddof=1)) if scores.size > 1 else 0.0,
            "C": [r["C"] for r in runs],
            "paper": PAPER[method],
        }
        del X, K
    table = markdown_table(result["methods"], args.repeats)
    print("\n" + table)
    result["markdown"] = table
    U.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
