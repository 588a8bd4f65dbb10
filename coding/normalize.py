"""Normalisation of pooled feature vectors.

``l2``     :math:`z / \\lVert z\\rVert_2` (ScSPM's final step).
``l1``     :math:`z / \\lVert z\\rVert_1` (histograms summing to one).
``power``  signed square root then ℓ2: :math:`\\operatorname{sign}(z)\\sqrt{|z|}`, then
           ``l2`` (the Hellinger map; Perronnin et al. 2010).
``minmax`` per dimension to [0, 1] with the *training* minima and maxima,
           test values clipped: :math:`(z - m_d)/(M_d - m_d)`.
``none``   unchanged.

Zero vectors stay zero.  ``minmax`` is the only one that needs statistics from
the training rows (:func:`fit_minmax`); the others are per vector.
"""

from __future__ import annotations

import numpy as np

__all__ = ["IMPLEMENTATION_VERSION", "NORMALIZATIONS", "normalize_rows", "fit_minmax", "apply_minmax"]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 1


NORMALIZATIONS = ("l2", "l1", "power", "minmax", "none")


def _divide_rows(X: np.ndarray, norms: np.ndarray) -> np.ndarray:
    norms = np.where(norms > 0, norms, 1.0)
    return (X / norms[:, None]).astype(np.float32)


def normalize_rows(X: np.ndarray, method: str) -> np.ndarray:
    """Per-vector normalisation (``l2``, ``l1``, ``power``, ``none``) of the rows of ``X``.

    ``minmax`` is not per vector: use :func:`fit_minmax` and :func:`apply_minmax`
    (here it returns ``X`` unchanged as float32).
    """
    if method not in NORMALIZATIONS:
        raise ValueError(f"normalisation {method!r} is not one of {NORMALIZATIONS}")
    X = np.atleast_2d(np.asarray(X, dtype=np.float32))
    if method == "l2":
        return _divide_rows(X, np.linalg.norm(X.astype(np.float64), axis=1))
    if method == "l1":
        return _divide_rows(X, np.abs(X.astype(np.float64)).sum(axis=1))
    if method == "power":
        return normalize_rows(np.sign(X) * np.sqrt(np.abs(X)), "l2")
    return X


def fit_minmax(X_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension minima and maxima of the training rows (float32)."""
    X_train = np.asarray(X_train, dtype=np.float32)
    return X_train.min(axis=0), X_train.max(axis=0)


def apply_minmax(X: np.ndarray, minima: np.ndarray, maxima: np.ndarray) -> np.ndarray:
    """Scale into [0, 1] by training statistics, clipping values outside their range.

    A dimension constant on the training set maps to 0.
    """
    span = (maxima - minima).astype(np.float32)
    scale = np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), 0.0).astype(np.float32)
    return np.clip((np.asarray(X, dtype=np.float32) - minima) * scale, 0.0, 1.0)
