"""Does the successive-relaxation start of Sharma & Jurie (§2.2) help the HIK nSVM?

The relaxation levels ``t`` (1 = the convex linear SVM, 0 = Eq. 7b exactly) are run by the
research kernel ``relaxed_sgd`` of ``benchmarks/_hik_research.py`` (see its docstring for the
relaxed term); Algorithm 1 by the classifier's own kernel.  For each configuration this script trains the 15 one-vs-rest problems on the
training rows of split 0 and reports

* the mean 3-fold cross-validated mean per-class accuracy (training rows only), and
* the mean over classes of the final objective (Eq. 7a) when trained on all training rows.

Configurations: Algorithm 1 alone (``--epochs`` epochs); relaxation levels of
``--epochs-per-level`` epochs each, warm-starting every level from the previous solution
(the paper's description), then Algorithm 1; the same with the weights rescaled by
``t_next / t`` between levels (and by ``xbar / t_last`` before Algorithm 1), which keeps
``f_t`` unchanged on the linear part of the relaxed term; and both again with a total epoch
budget equal to Algorithm 1's (convergence speed).

Usage::

    python studies/study_hik_nsvm_relaxation.py --features feature-sets/scene15-bof-spm
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' helpers
import _bench_utils as U
from _hik_research import relaxed_sgd
from bench_hik_nsvm import cv_folds, load_rows, mpca, to_csr

from classify_images.classifiers import _hik_nsvm_kernels as K
from classify_images.classifiers._rows import matrix_arrays
from classify_images.classifiers.base import ovr_targets
from classify_images.classifiers.hik_nsvm import hik_decision, hik_nsvm_objective
from classify_images.pipeline.settings.dataset import split_indices

ALPHA, MARGIN = 1e-4, 0.02


def fit_ovr(
    A,
    y,
    n_classes: int,
    lr: float,
    levels: list[float],
    rescale: bool,
    epochs_per_level: int,
    n_epochs: int,
    seed: int = 0,
) -> np.ndarray:
    """One-vs-rest weights: relaxation levels (optional), then Algorithm 1 (``n_epochs``)."""
    Y = ovr_targets(y, n_classes).astype(np.float64)
    xbar = float(A.data.mean(dtype=np.float64))
    W = np.zeros((Y.shape[1], A.shape[1]))
    ones, no_curve = np.ones((A.shape[0], 1)), np.zeros((0, 1))
    half = n_epochs // 2
    final_rates = np.array([lr] * half + [lr / 10.0] * (n_epochs - half))
    rows = matrix_arrays(A)
    for k in range(Y.shape[1]):
        w, previous = W[k].reshape(-1, 1), None  # (D, 1) view: one problem
        problem, b = K.HingeProblems(np.ascontiguousarray(Y[:, k : k + 1]), ones, ALPHA, MARGIN, False), np.zeros(1)
        for t in levels:
            if rescale and previous is not None:
                w *= t / previous
            # step of level t: coordinates move at the linear-SGD pace r x_d / xbar
            rates = np.full(epochs_per_level, lr * max(t, xbar) / xbar)
            relaxed_sgd(rows, problem, K.Epochs(rates, seed), np.full(epochs_per_level, t), w, b)
            previous = t
        if rescale and previous is not None:
            w *= xbar / previous
        K.sgd(rows, problem, K.Epochs(final_rates, seed + 1), w, b, no_curve)
    return W


def main(argv: list[str] | None = None) -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", required=True, type=Path)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--levels", type=float, nargs="+", default=[1.0, 0.1, 0.01, 0.001])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--epochs-per-level", type=int, default=10)
    args = parser.parse_args(argv)
    threadpool_limits(1)

    X, y, _ = load_rows(args.features)
    A = to_csr(X)
    tr, _ = split_indices(y, 100, None, 0)
    Atr, ytr = A[tr], y[tr]
    n_classes = int(y.max()) + 1
    E, L, n_levels = args.epochs, args.epochs_per_level, len(args.levels)
    budget_level = max(1, E // (2 * n_levels))  # half the budget on the levels, half on Alg. 1
    configs = {
        "Algorithm 1": dict(levels=[], rescale=False, epochs_per_level=L, n_epochs=E),
        "relaxation, warm start": dict(levels=args.levels, rescale=False, epochs_per_level=L, n_epochs=E),
        "relaxation, rescaled warm start": dict(levels=args.levels, rescale=True, epochs_per_level=L, n_epochs=E),
        "relaxation, warm start, same budget": dict(
            levels=args.levels, rescale=False, epochs_per_level=budget_level, n_epochs=E - budget_level * n_levels
        ),
        "relaxation, rescaled, same budget": dict(
            levels=args.levels, rescale=True, epochs_per_level=budget_level, n_epochs=E - budget_level * n_levels
        ),
        "Algorithm 1 alone, only the previous row's exact-stage epochs": dict(
            levels=[], rescale=False, epochs_per_level=L, n_epochs=E - budget_level * n_levels
        ),
    }
    Y = ovr_targets(ytr, n_classes).astype(np.float64)
    rows = []
    for name, cfg in configs.items():
        start = time.perf_counter()
        accs = []
        for a, b in cv_folds(ytr):
            W = fit_ovr(Atr[a], ytr[a], n_classes, args.learning_rate, **cfg)
            accs.append(mpca(ytr[b], hik_decision(Atr[b], W, np.zeros(len(W))).argmax(1)))
        W = fit_ovr(Atr, ytr, n_classes, args.learning_rate, **cfg)
        objective = np.mean([hik_nsvm_objective(Atr, Y[:, k], W[k], 0.0, ALPHA, MARGIN) for k in range(len(W))])
        total = cfg["n_epochs"] + cfg["epochs_per_level"] * len(cfg["levels"])
        row = {
            "config": name,
            "epochs": total,
            "cv_acc": float(np.mean(accs)),
            "cv_folds": accs,
            "objective": float(objective),
            "seconds": time.perf_counter() - start,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| start | epochs | 3-fold CV accuracy (%) | objective Eq. 7a (mean over classes) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['epochs']} | {r['cv_acc']:.2f} | {r['objective']:.3e} |")


if __name__ == "__main__":
    main()
