"""Slow, obvious references for the PmSVM tests.

:func:`exact_power_mean_svm` solves the same bias-free SVM dual as PmSVM (CVPR
2012, Eq. 3) with the *exact* power mean kernel matrix instead of the
polynomial gradient approximation: plain dual coordinate descent (Hsieh et
al. 2008, Algorithm 1) to a tight tolerance, no shrinking.
"""

from __future__ import annotations

import numpy as np

from classify_images.classifiers.pmsvm import power_mean_kernel


def scale_features(X_train: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``min(x / max_j, 1)`` with the training maxima (1 for an all-zero column)."""
    fmax = X_train.max(axis=0).astype(np.float64)
    fmax[fmax == 0] = 1.0
    return np.minimum(np.asarray(X, dtype=np.float64) / fmax, 1.0)


def dual_coordinate_descent(
    K: np.ndarray, y: np.ndarray, C: float, loss: str, tol: float = 1e-8, max_epochs: int = 20000
) -> np.ndarray:
    """Minimise ``1/2 a^T (Q + D) a - sum(a)``, ``Q = (y y^T) * K``, ``0 <= a <= U``.

    ``loss="l1"``: ``D = 0``, ``U = C``; ``loss="l2"``: ``D = I / (2C)``, ``U = inf``.
    Cyclic exact coordinate minimisation until the largest projected gradient
    is below ``tol``.
    """
    n = K.shape[0]
    y = y.astype(np.float64)
    diag, upper = (0.5 / C, np.inf) if loss == "l2" else (0.0, C)
    alpha = np.zeros(n)
    Qa = np.zeros(n)  # (Q alpha)_i
    for _ in range(max_epochs):
        pg_max = 0.0
        for i in range(n):
            G = Qa[i] - 1.0 + diag * alpha[i]
            PG = min(G, 0.0) if alpha[i] == 0 else (max(G, 0.0) if alpha[i] == upper else G)
            pg_max = max(pg_max, abs(PG))
            if PG != 0.0:
                new = min(max(alpha[i] - G / (K[i, i] + diag), 0.0), upper)
                Qa += (new - alpha[i]) * y[i] * y * K[:, i]
                alpha[i] = new
        if pg_max < tol:
            return alpha
    raise RuntimeError("reference dual coordinate descent did not converge")


def exact_power_mean_svm(
    X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, *, p: float, C: float, loss: str, eps: float = 1e-3
) -> np.ndarray:
    """One-vs-rest decision values (n_test, n_classes) of the exact-kernel bias-free SVM."""
    A = scale_features(X_train, X_train)
    B = scale_features(X_train, X_test)
    K = power_mean_kernel(A, A, p=p, eps=eps)
    K_test = power_mean_kernel(B, A, p=p, eps=eps)
    classes = np.unique(y_train)
    scores = np.empty((X_test.shape[0], classes.shape[0]))
    for c, label in enumerate(classes):
        yc = np.where(y_train == label, 1.0, -1.0)
        alpha = dual_coordinate_descent(K, yc, C, loss)
        scores[:, c] = K_test @ (alpha * yc)
    return scores
