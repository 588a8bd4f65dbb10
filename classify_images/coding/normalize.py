"""Normalisation of pooled feature vectors, as a fitted object.

``l2``     :math:`z / \\lVert z\\rVert_2` (ScSPM's final step [1]_).
``l1``     :math:`z / \\lVert z\\rVert_1` (histograms summing to one).
``power``  signed square root then ℓ2: :math:`\\operatorname{sign}(z)\\sqrt{|z|}`, then
           ``l2`` (the Hellinger map [2]_).
``minmax`` per dimension to [0, 1] with the *training* minima :math:`m_d` and maxima
           :math:`M_d`, values outside that range clipped: :math:`(z_d - m_d)/(M_d - m_d)`.
``none``   unchanged.

Zero vectors stay zero.  ``minmax`` is the only method that learns statistics, from the
training rows (:meth:`Normalizer.fit`); the others treat each vector on its own and need
no fitting.  Arithmetic is float32 for the vectors; the ℓ1 and ℓ2 norms are summed in
float64.

References
----------
.. [1] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear spatial pyramid matching using
   sparse coding for image classification", CVPR 2009.
.. [2] F. Perronnin, J. Sánchez and T. Mensink, "Improving the Fisher kernel for
   large-scale image classification", ECCV 2010.
"""

from __future__ import annotations

import numpy as np

__all__ = ["IMPLEMENTATION_VERSION", "NORMALIZATIONS", "Normalizer", "l2_normalize_rows", "signed_sqrt"]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 1

#: The normalisation methods, in the order error messages list them.
NORMALIZATIONS = ("l2", "l1", "power", "minmax", "none")

#: Methods that learn per-dimension statistics from the training rows.
_FITTED_METHODS = ("minmax",)


def signed_sqrt(values: np.ndarray) -> np.ndarray:
    """:math:`\\operatorname{sign}(v)\\sqrt{|v|}` entry by entry (the power law, exponent 1/2)."""
    return np.sign(values) * np.sqrt(np.abs(values))


def l2_normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (all-zero rows stay zero)."""
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def _divide_rows(X: np.ndarray, norms: np.ndarray) -> np.ndarray:
    norms = np.where(norms > 0, norms, 1.0)
    return (X / norms[:, None]).astype(np.float32)


def _normalize_rows(X: np.ndarray, method: str) -> np.ndarray:
    """The per-vector methods on the rows of a float32 matrix."""
    if method == "l2":
        return _divide_rows(X, np.linalg.norm(X.astype(np.float64), axis=1))
    if method == "l1":
        return _divide_rows(X, np.abs(X.astype(np.float64)).sum(axis=1))
    if method == "power":
        return _normalize_rows(np.sign(X) * np.sqrt(np.abs(X)), "l2")
    return X


class Normalizer:
    """Normalisation of feature vectors, fitted on the training rows.

    Parameters
    ----------
    method : {"l2", "l1", "power", "minmax", "none"}
        See the module docstring for the formulas.

    Attributes
    ----------
    minima_, maxima_ : ndarray of float32, shape (d,)
        Per-dimension training minima and maxima (``minmax`` only, after :meth:`fit`).

    Examples
    --------
    >>> normalizer = Normalizer("minmax").fit(X_train)       # doctest: +SKIP
    >>> X_test_scaled = normalizer.transform(X_test)         # doctest: +SKIP
    """

    def __init__(self, method: str = "l1") -> None:
        if method not in NORMALIZATIONS:
            raise ValueError(f"normalisation {method!r} is not one of {NORMALIZATIONS}")
        self.method = method
        self.minima_: np.ndarray | None = None
        self.maxima_: np.ndarray | None = None

    @property
    def per_vector(self) -> bool:
        """True when each vector is normalised on its own (no training statistics)."""
        return self.method not in _FITTED_METHODS

    @property
    def is_fitted(self) -> bool:
        """True when :meth:`transform` can be called (always, for per-vector methods)."""
        return self.per_vector or self.minima_ is not None

    def fit(self, X_train: np.ndarray) -> Normalizer:
        """Learn the statistics of the training rows (``minmax``; a no-op otherwise).

        Parameters
        ----------
        X_train : array-like, shape (n_train, d)
            Pooled, not yet normalised, training vectors.

        Returns
        -------
        self : Normalizer
        """
        if not self.per_vector:
            X_train = np.asarray(X_train, dtype=np.float32)
            self.minima_, self.maxima_ = X_train.min(axis=0), X_train.max(axis=0)
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Normalise the rows of ``X``.

        Parameters
        ----------
        X : array-like, shape (n, d) or (d,)
            Pooled vectors (a single vector is read as one row).

        Returns
        -------
        X_normalized : ndarray of float32, shape (n, d)
            For ``minmax``, values in [0, 1]; a dimension constant on the training rows
            maps to 0.
        """
        X = np.atleast_2d(np.asarray(X, dtype=np.float32))
        if self.per_vector:
            return _normalize_rows(X, self.method)
        if not self.is_fitted:
            raise ValueError(f"the {self.method!r} normaliser must be fitted on the training rows first")
        span = (self.maxima_ - self.minima_).astype(np.float32)
        scale = np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), 0.0).astype(np.float32)
        return np.clip((X - self.minima_) * scale, 0.0, 1.0)

    def fit_transform(self, X_train: np.ndarray) -> np.ndarray:
        """:meth:`fit` on ``X_train``, then :meth:`transform` it."""
        return self.fit(X_train).transform(X_train)

    def statistics(self) -> np.ndarray | None:
        """The fitted statistics as one float32 array ``[minima; maxima]`` (2, d), or None."""
        return None if self.minima_ is None else np.stack([self.minima_, self.maxima_])

    @classmethod
    def from_statistics(cls, method: str, statistics: np.ndarray | None) -> Normalizer:
        """A normaliser restored from :meth:`statistics` (None for per-vector methods)."""
        normalizer = cls(method)
        if statistics is not None:
            normalizer.minima_, normalizer.maxima_ = (np.asarray(row, dtype=np.float32) for row in statistics)
        return normalizer

    def __repr__(self) -> str:
        return f"Normalizer({self.method!r})"
