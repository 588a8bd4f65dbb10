"""Calibrated class probabilities for every classifier: Platt scaling on held-out decision values.

A one-vs-rest classifier gives decision values ``f_c(x)``, not probabilities.  Platt [1]_
maps each problem's value through a sigmoid fitted by maximum likelihood,

.. math::  P(y = c \\mid f_c) = \\frac{1}{1 + \\exp(A_c f_c + B_c)},   \\qquad (1)

with Platt's smoothed targets (end of section 2.2 of [1]_) instead of 0/1,

.. math::  t_+ = \\frac{N_+ + 1}{N_+ + 2}, \\qquad t_- = \\frac{1}{N_- + 2},   \\qquad (2)

minimising the cross-entropy :math:`-\\sum_i t_i \\log p_i + (1 - t_i) \\log (1 - p_i)` by
L-BFGS from :math:`(A, B) = (0, \\log\\frac{N_- + 1}{N_+ + 1})`, as LIBSVM's ``-b 1`` [2]_ and
scikit-learn's ``CalibratedClassifierCV(method="sigmoid")`` do.  The decision values the
sigmoids are fitted on are *held out*: those of :func:`sklearn.model_selection.cross_val_predict`
over a stratified K-fold split of the training rows (each row scored by a classifier that did not
see it; the classifier kept is the one fitted on all rows) — ``CalibratedClassifierCV(...,
ensemble=False)``.  With more than two classes the per-class probabilities (1) are divided by
their sum (the uniform distribution when every one is 0) [3]_; with two classes the single
problem gives ``P(classes_[1])`` and its complement.

The fitted pairs ``(A_c, B_c)`` are the estimator's ``platt_`` attribute (shape
``(n_problems, 2)``), saved in model files with the other fitted arrays; an estimator holding it
has ``predict_proba`` (:class:`~classify_images.classifiers.base.OneVsRestClassifierBase`).
Cost: K extra fits of the classifier on (K-1)/K of the rows (``docs/benchmarks/probabilities.md``).

References
----------
.. [1] J. Platt, "Probabilistic outputs for support vector machines and comparisons to
   regularized likelihood methods", Advances in Large Margin Classifiers, 1999.
.. [2] H.-T. Lin, C.-J. Lin and R. C. Weng, "A note on Platt's probabilistic outputs for
   support vector machines", Machine Learning 68, 2007.
.. [3] B. Zadrozny and C. Elkan, "Transforming classifier scores into accurate multiclass
   probability estimates", KDD 2002.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from .._log import fits_summarised
from ..errors import ClassifyImagesError

__all__ = ["CalibrationError", "DEFAULT_FOLDS", "fit_platt", "platt_probabilities", "calibrate"]

#: Folds of the held-out decision values by default (LIBSVM's ``-b 1`` and scikit-learn use 5).
DEFAULT_FOLDS = 5
#: Decision values are divided by their largest magnitude when it exceeds this, for the
#: conditioning of L-BFGS (the fit is invariant to the scale; ``A`` is scaled back).
_RESCALE_ABOVE = 30.0


class CalibrationError(ClassifyImagesError, ValueError):
    """Probabilities cannot be calibrated on these training rows (too few per class for the folds)."""


def fit_platt(decision: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """Platt's sigmoid (1) for one binary problem: ``(A, B)`` by L-BFGS on the targets (2).

    Parameters
    ----------
    decision : ndarray of float (n,)
        Held-out decision values of the problem.
    positive : ndarray of bool (n,)
        Whether each row is of the problem's positive class.

    Returns
    -------
    A, B : float
        ``P(positive | f) = 1 / (1 + exp(A f + B))``.
    """
    f = np.asarray(decision, dtype=np.float64)
    positive = np.asarray(positive, dtype=bool)
    scale = float(np.max(np.abs(f))) if f.size else 0.0
    scale = scale if scale >= _RESCALE_ABOVE else 1.0
    f = f / scale
    n_pos = float(positive.sum())
    n_neg = float(positive.size) - n_pos
    target = np.where(positive, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))

    def loss_and_gradient(ab: np.ndarray) -> tuple[float, np.ndarray]:
        raw = -(ab[0] * f + ab[1])  # log-odds of the positive class
        loss = -float(np.sum(target * log_expit(raw) + (1.0 - target) * log_expit(-raw)))
        residual = expit(raw) - target  # d loss / d raw
        return loss, np.array([-residual @ f, -residual.sum()])

    start = np.array([0.0, math.log((n_neg + 1.0) / (n_pos + 1.0))])
    result = minimize(
        loss_and_gradient, start, method="L-BFGS-B", jac=True, options={"gtol": 1e-6, "ftol": 64 * np.finfo(float).eps}
    )
    return float(result.x[0] / scale), float(result.x[1])


def platt_probabilities(scores: np.ndarray, platt: np.ndarray) -> np.ndarray:
    """Class probabilities from decision values and the fitted sigmoids.

    Parameters
    ----------
    scores : ndarray (n, n_problems), or (n,) for two classes
        Decision values (:meth:`decision_function`).
    platt : ndarray (n_problems, 2)
        ``(A_c, B_c)`` of each problem.

    Returns
    -------
    proba : ndarray of float64 (n, n_classes)
        Rows summing to 1, columns in the order of ``classes_``.
    """
    scores = np.asarray(scores, dtype=np.float64)
    platt = np.asarray(platt, dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.shape[1] != platt.shape[0]:
        raise ValueError(f"{scores.shape[1]} decision values per row for {platt.shape[0]} calibrated problems")
    proba = expit(-(scores * platt[:, 0] + platt[:, 1]))
    if proba.shape[1] == 1:
        return np.hstack([1.0 - proba, proba])
    total = proba.sum(axis=1, keepdims=True)
    uniform = np.full_like(proba, 1.0 / proba.shape[1])
    return np.divide(proba, total, out=uniform, where=total != 0)


def calibrate(estimator: Any, X: Any, y: np.ndarray, *, folds: int = DEFAULT_FOLDS) -> Any:
    """Fit Platt's sigmoids of a fitted one-vs-rest ``estimator`` on held-out decision values.

    The rows are split by :class:`sklearn.model_selection.StratifiedKFold` (``folds`` folds, no
    shuffle: the split scikit-learn's ``CalibratedClassifierCV(cv=folds)`` uses); each fold's
    decision values come from a clone of ``estimator`` (same parameters, ``random_state``
    included) fitted on the other folds (:func:`sklearn.model_selection.cross_val_predict`).

    Parameters
    ----------
    estimator : fitted classifier of :mod:`classify_images.classifiers`
        Fitted on ``X, y``; it is kept, and given ``platt_`` (``(n_problems, 2)``).
    X : array-like or sparse matrix (n, d)
    y : ndarray (n,)
        The labels ``estimator`` was fitted on.
    folds : int
        At least 2; every class needs at least ``folds`` rows.

    Returns
    -------
    estimator
        The same object, with ``platt_`` and ``platt_folds_``.

    Raises
    ------
    CalibrationError
        ``folds`` below 2, or a class with fewer than ``folds`` rows.
    """
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    if folds < 2:
        raise CalibrationError(f"calibration needs at least 2 folds, not {folds}")
    y = np.asarray(y)
    classes, counts = np.unique(y, return_counts=True)
    if counts.min() < folds:
        smallest = classes[int(np.argmin(counts))]
        raise CalibrationError(
            f"calibrating probabilities on {folds} folds needs at least {folds} training images per class; "
            f"class {smallest} has {int(counts.min())}: use fewer folds (at least 2) or more training images"
        )
    with fits_summarised("calibration: Platt scaling on the decision values of %d held-out folds", folds):
        held_out = cross_val_predict(clone(estimator), X, y, cv=StratifiedKFold(folds), method="decision_function")
    if held_out.ndim == 1:
        problems = [(held_out, y == estimator.classes_[1])]
    else:
        problems = [(held_out[:, c], y == label) for c, label in enumerate(estimator.classes_)]
    estimator.platt_ = np.array([fit_platt(f, positive) for f, positive in problems], dtype=np.float64)
    estimator.platt_folds_ = int(folds)
    return estimator
