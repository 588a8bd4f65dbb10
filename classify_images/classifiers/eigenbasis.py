"""Orthonormal eigenbasis of the span of the training vectors, for the quadratic-hinge solver.

Used by ``QuadraticHingeSVC(solver="eigen")``.  Let ``X`` be ``n x d``.

**Basis.**  With the eigendecomposition of the smaller of the two second-moment
matrices, ``K = X X^T = U diag(lambda) U^T`` when ``n <= d`` or
``X^T X = V diag(lambda) V^T`` when ``n > d``, keeping the ``r`` eigenpairs
with ``lambda_k > max(n, d) * eps * lambda_max`` (the ``pinv`` rule),

* ``V = X^T U diag(lambda)^{-1/2}`` (first case) is an orthonormal basis
  (``d x r``) of the span of the training vectors,
* ``Z = X V = U diag(lambda)^{1/2}`` (``n x r``) are the training vectors in
  that basis, and ``Z^T Z = diag(lambda)``.

The objective (1) of :mod:`~classify_images.classifiers._quadratic_hinge_objective` only
sees ``W`` through ``||W||^2`` and ``X W``; the component of ``W`` orthogonal
to the span adds to ``||W||^2`` and nothing else, so the minimiser lies in the
span, and ``W = V B`` turns (1) in ``W`` into (1) in ``B`` with ``X`` replaced
by ``Z``: the same problem, with ``n x r`` instead of ``n x d`` products when
``n < d``.

**Preconditioning.**  If every margin were active, the Hessian of (1) in ``B``
for class ``c`` would be ``I + 2 Z^T diag(S_c) Z``, i.e. ``I + 2 s_c diag(lambda)``
when the loss weights of class ``c`` equal their mean ``s_c``: diagonal in this
basis, so the diagonal scaling of
:func:`~classify_images.classifiers._quadratic_hinge_objective.jacobi_scale` (with
``diag(Z^T Z) = lambda``) turns it into the identity.  With ``d > n`` the
classes are separable and most training vectors sit on the margin (active),
so the approximation is close, and L-BFGS needs far fewer iterations than in
the feature space (see docs/benchmarks/linear.md).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.linalg import blas

from .column_blocks import ColumnBlockRows, float32_columns

__all__ = [
    "EigenBasis",
    "gram_matrix",
    "gram_of",
    "known_gram",
    "derived_from_gram",
    "gram_may_be_overwritten",
    "second_moment_matrix",
    "reused_gram",
]

#: Rows (second-moment matrix, coordinates) of a float32 ``X`` converted to float64 at a time.
_BLOCK = 2048
#: Columns of float32 (or float16) rows per float32 ``ssyrk`` of :func:`gram_matrix` ...
_GRAM_COLUMNS = 4096
#: ... and columns summed in float32 before their sum is added into the float64 Gram matrix.
_GRAM_CHUNK = 16384


def gram_matrix(X: np.ndarray | sp.csr_matrix | ColumnBlockRows, *, float64_products: bool = False) -> np.ndarray:
    """``K = X X^T`` (n x n, float64, symmetric).

    Float64 rows: one float64 product.  Float32 or float16 rows: the product the machine's
    BLAS does fastest, ``ssyrk`` on float32 blocks of :data:`_GRAM_COLUMNS` columns (float16
    rows, or the rows of a :class:`~classify_images.classifiers.column_blocks.ColumnBlockRows`,
    are converted block by block; ``X`` is never copied whole), its sums added into the
    float64 ``K`` every :data:`_GRAM_CHUNK` columns: the rounding of a float32 sum of at most
    that many products, far below that of float16 or float32 features.  ``float64_products``:
    float64 products on blocks of columns converted to float64 (twice the time; the eigenbasis
    solver's Gram matrix, whose eigenvectors it uses as they are).
    """
    if sp.issparse(X):
        X64 = X.astype(np.float64)
        return np.asarray((X64 @ X64.T).toarray())
    if X.dtype == np.float64:
        return X @ X.T
    n, d = X.shape
    if float64_products:  # blocks of columns converted to float64 (the eigenbasis solver's matrix)
        K = np.zeros((n, n))
        for start in range(0, d, _BLOCK):
            block = X[:, start : start + _BLOCK].astype(np.float64)
            K += block @ block.T  # numpy dispatches A @ A.T to syrk
        return K
    K = np.zeros((n, n), order="F")
    partial = np.zeros((n, n), dtype=np.float32, order="F")
    buffer = np.empty((n, min(d, _GRAM_COLUMNS)), dtype=np.float32)  # reused: no page faults per block
    pending = 0
    for start in range(0, d, _GRAM_COLUMNS):
        block = float32_columns(X, start, min(start + _GRAM_COLUMNS, d), buffer)
        # block (n x w, C order) is block.T (w x n) in Fortran order: ssyrk(trans=1) gives block block^T
        partial = blas.ssyrk(1.0, block.T, beta=1.0, c=partial, trans=1, lower=1, overwrite_c=1)
        pending += block.shape[1]
        if pending >= _GRAM_CHUNK or start + _GRAM_COLUMNS >= d:
            K += partial
            partial[...] = 0.0
            pending = 0
    del partial
    _symmetrise_lower(K)
    return K


def _symmetrise_lower(K: np.ndarray, step: int = 1024) -> None:
    """Copy the lower triangle of ``K`` onto its upper one in place, block by block (no ``n x n`` temporary)."""
    n = K.shape[0]
    for start in range(0, n, step):
        end = min(start + step, n)
        diagonal = K[start:end, start:end]
        diagonal[...] = np.tril(diagonal) + np.tril(diagonal, -1).T
        K[start:end, end:] = K[end:, start:end].T


#: ``(layout of X, K, derived)`` inside :func:`reused_gram` (``derived``: what solvers built from ``K``).
_KNOWN_GRAM: contextvars.ContextVar = contextvars.ContextVar("known_gram", default=None)


def _layout(X) -> tuple | None:
    """Buffer address, shape, strides and dtype of a dense array, the identity of a
    :class:`~classify_images.classifiers.column_blocks.ColumnBlockRows` (None otherwise): equal
    layouts inside one :func:`reused_gram` block are the same rows."""
    if isinstance(X, ColumnBlockRows):
        return X.identity
    if not isinstance(X, np.ndarray):
        return None
    return X.__array_interface__["data"][0], X.shape, X.strides, X.dtype.str


@contextlib.contextmanager
def reused_gram(X: np.ndarray, K: np.ndarray, *, last_fit: bool = False) -> Iterator[None]:
    """Within the block, :class:`EigenBasis` and :class:`~classify_images.classifiers.span.SpanBasis`
    of the rows ``X`` (the same buffer, shape, strides and dtype) take ``K``, which must be
    ``gram_matrix(X)``, instead of computing it again (a grid search's Gram matrix reused by the
    final fit: the same bits, so the same model; several fits of one estimator with different ``C``
    also share the factorisation of ``K``).  ``X`` must not change inside the block.

    ``last_fit``: the block holds the one fit left on these rows (a search's final fit) and the
    caller does not read ``K`` afterwards, so a solver may factorise ``K`` in place
    (:func:`gram_may_be_overwritten`) and keeps nothing for a next fit (:func:`derived_from_gram`
    is None): an ``n x n`` matrix less in memory while it factorises, two or three less while it
    forms the weights."""
    if _layout(X) is None or K.shape != (X.shape[0], X.shape[0]):
        raise ValueError(f"reused_gram: a dense X and its ({X.shape[0]}, {X.shape[0]}) Gram matrix, got {K.shape}")
    token = _KNOWN_GRAM.set((_layout(X), K, None if last_fit else {}))
    try:
        yield
    finally:
        _KNOWN_GRAM.reset(token)


def _known(X) -> tuple | None:
    known = _KNOWN_GRAM.get()
    if known is not None and _layout(X) is not None and known[0] == _layout(X):
        return known
    return None


def gram_of(X, *, float64_products: bool = False) -> np.ndarray:
    """``gram_matrix(X)``, or the one :func:`reused_gram` holds for these rows (not to be modified)."""
    known = _known(X)
    return gram_matrix(X, float64_products=float64_products) if known is None else known[1]


def known_gram(X) -> np.ndarray | None:
    """The Gram matrix :func:`reused_gram` holds for these rows, or None."""
    known = _known(X)
    return None if known is None else known[1]


def gram_may_be_overwritten(X) -> bool:
    """Whether the Gram matrix :func:`reused_gram` holds for these rows was given up by its caller
    (``last_fit``): a solver may then write into it."""
    known = _known(X)
    return known is not None and known[2] is None


def derived_from_gram(X) -> dict | None:
    """A dict kept with the Gram matrix :func:`reused_gram` holds for these rows (None outside such a
    block, or for its ``last_fit``): where a solver keeps what it computed from ``K`` for the next
    fit on the same rows."""
    known = _known(X)
    return None if known is None else known[2]


def second_moment_matrix(X: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """``X^T X`` (d x d) accumulated in float64."""
    if sp.issparse(X):
        X64 = X.astype(np.float64)
        return np.asarray((X64.T @ X64).toarray())
    if X.dtype == np.float64:
        return X.T @ X
    n, d = X.shape
    S = np.zeros((d, d))
    for start in range(0, n, _BLOCK):
        block = X[start : start + _BLOCK].astype(np.float64)
        S += block.T @ block
    return S


def _times(X: np.ndarray | sp.csr_matrix, V: np.ndarray) -> np.ndarray:
    """``X V`` in float64 (float32 ``X`` converted by blocks of rows)."""
    if sp.issparse(X) or X.dtype == np.float64:
        return np.asarray(X.astype(np.float64) @ V)
    return np.concatenate([X[s : s + _BLOCK].astype(np.float64) @ V for s in range(0, X.shape[0], _BLOCK)])


class EigenBasis:
    """Orthonormal eigenbasis ``V`` of the span of the rows of ``X`` (module docstring).

    Parameters
    ----------
    X : ndarray of shape (n, d) or CSR matrix
        Training vectors.

    Attributes
    ----------
    Z : ndarray of shape (n, r), float64
        Training vectors in the basis (``Z^T Z = diag(eigenvalues)``).
    eigenvalues : ndarray of shape (r,), float64
        The kept eigenvalues ``lambda_k > 0``.
    rank : int
        ``r``.
    """

    def __init__(self, X: np.ndarray | sp.csr_matrix) -> None:
        n, d = X.shape
        from_gram = n <= d
        lam, vectors = la.eigh(
            gram_of(X, float64_products=True) if from_gram else second_moment_matrix(X), check_finite=False
        )
        keep = lam > max(n, d) * np.finfo(np.float64).eps * max(float(lam[-1]), 0.0)
        if not np.any(keep):  # X = 0: W = 0 is the only direction; keep one null coordinate
            self.eigenvalues, self.rank = np.zeros(1), 1
            self.Z, self._V = np.zeros((n, 1)), np.eye(d, 1)
            return
        self.eigenvalues = lam[keep]
        self.rank = int(self.eigenvalues.size)
        root = np.sqrt(self.eigenvalues)
        if from_gram:
            U = vectors[:, keep]
            self.Z = U * root
            self._row_coefficients, self._V = U / root, None  # V = X^T U diag(lambda)^{-1/2}
        else:
            self._V = np.ascontiguousarray(vectors[:, keep])
            self.Z = _times(X, self._V)

    def weights(self, X: np.ndarray | sp.csr_matrix, B: np.ndarray) -> np.ndarray:
        """``W = V B`` of shape (d, P), float64 (``X``: the matrix the basis was built from)."""
        if self._V is not None:
            return self._V @ B
        A = self._row_coefficients @ B
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        return np.asarray(X.T @ A.astype(dtype), dtype=np.float64)
