"""Cholesky coordinates of the span of the training vectors, for the quadratic-hinge solver.

Used by ``QuadraticHingeSVC(solver="span")`` (the default when its matrices fit in memory).
Let ``X`` be ``n x d`` and ``r = rank(X)``.

**Coordinates (n <= d).**  The objective (1) of
:mod:`~classify_images.classifiers._quadratic_hinge_objective` sees ``W`` only through
``||W||^2`` and ``X W``, so its minimiser lies in the span of the training vectors (the
representer theorem [1]_): ``W = X^T A``.  The pivoted Cholesky factorisation of the Gram
matrix [2]_,

.. math::

    \\Pi^\\top K \\Pi = \\Pi^\\top X X^\\top \\Pi = L L^\\top, \\qquad
    L = \\begin{bmatrix} L_{11} \\\\ L_{21} \\end{bmatrix} \\;(n \\times r), \\qquad (4)

(``L_11`` ``r x r`` lower triangular, the pivoting stops at the numerical rank ``r``) gives
the orthonormal basis ``V = X_1^T L_11^{-T}`` (``d x r``; ``X_1`` the ``r`` pivot rows:
``V^T V = L_11^{-1} K_11 L_11^{-T} = I``) in which the training vectors are the rows of
``Z = X V = \\Pi L``.  So, with ``W = V B``, (1) in ``W`` is (1) in ``B`` with ``X`` replaced by
``Z``, exactly as in the eigenbasis of :mod:`~classify_images.classifiers.eigenbasis`, but
for ``r^3 / 3`` operations instead of an eigendecomposition (about 25 times more work, and
much less of it in matrix-matrix products).  The weights are ``W = X_1^T (L_11^{-T} B)``.

**Coordinates (n > d).**  ``Z = X`` and ``B = W`` (the feature space is the span).

**Preconditioner.**  If every margin were active and the loss weights of every class equal
their mean ``s``, the Hessian of (1) in ``B`` would be ``H = I + 2 s Z^T Z`` for every class.
L-BFGS runs on ``Theta = R B`` with the Cholesky factor ``H = R^T R`` (upper triangular),
in which that Hessian is the identity:

.. math::

    B = R^{-1} \\Theta, \\qquad \\nabla_\\Theta f = R^{-\\top} \\nabla_B f .  \\qquad (5)

In the eigenbasis, ``Z^T Z`` is diagonal and (5) is the diagonal scaling (3) of
:func:`~classify_images.classifiers._quadratic_hinge_objective.jacobi_scale`; here it is the same
preconditioned Hessian in a rotated basis, and L-BFGS, whose iterates do not depend on an
orthogonal change of variables, takes the same iterations.  An evaluation costs four
``r x r`` by ``r x P`` products, all four triangular: ``B = R^{-1} Theta`` and
``R^{-T} grad_B`` by ``?trmm``, ``Z B`` and ``Z^T G`` by blocks of rows of the lower trapezoidal
``Z``, each block times its first columns only
(:attr:`~classify_images.classifiers._quadratic_hinge_objective.QuadraticHingeObjective.lower_trapezoidal`):
a little over half the ``4 r^2 P`` multiply-adds of dense products (the eigenbasis's ``Z`` is
dense).  With ``s`` different per class (class weights), ``s`` is their mean: the
preconditioner is approximate, the optimum is unchanged.

**Cost.**  ``n <= d``: one Gram matrix ``X X^T`` (``n^2 d`` multiply-adds, float32 products
for float32 or float16 rows, :func:`~classify_images.classifiers.eigenbasis.gram_matrix`),
``2 r^3 / 3`` for (4) and ``R``, then L-BFGS.  ``n > d``: ``X^T X`` (``n d^2``), ``d^3 / 3``,
then L-BFGS with products by ``X``.  Both grow smoothly with ``n``, and meet at ``n = d``.
One Gram matrix serves any ``C``: :class:`SpanBasis` is built once, :meth:`SpanBasis.preconditioner`
costs ``r^3 / 3`` per loss weight.  The Gram matrix and the weights' pass over the rows use the
caller's BLAS threads; the factorisations and L-BFGS's evaluations one
(:attr:`SpanObjective.evaluation_threads`): their products are small, and a second thread spins
between them more than it works.

References
----------
.. [1] B. Schoelkopf, R. Herbrich and A. J. Smola, "A Generalized Representer Theorem",
   COLT 2001.
.. [2] N. J. Higham, "Cholesky factorization", WIREs Computational Statistics 1, 2009
   (pivoted Cholesky of a semidefinite matrix, LAPACK ``dpstrf``); O. Chapelle, "Training a
   Support Vector Machine in the Primal", Neural Computation 19, 2007 (the squared hinge
   solved in the span of the training vectors).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.linalg import blas, lapack
from threadpoolctl import threadpool_limits

from . import eigenbasis
from ._quadratic_hinge_objective import QuadraticHingeObjective
from .column_blocks import ColumnBlockRows, float32_columns
from .eigenbasis import gram_may_be_overwritten, known_gram, second_moment_matrix

__all__ = ["SpanBasis", "SpanObjective", "span_bytes"]

_log = logging.getLogger(__name__)

#: Columns of ``X`` per product of the weights ``X^T A`` (float16 rows: converted to float32 a block at a time).
_COLUMNS = 4096


def span_bytes(n_samples: int, n_features: int) -> int:
    """Peak memory of :class:`SpanBasis` and :class:`SpanObjective` on float32 or float16 rows (what
    feature sets hold), ``m = min(n, d)``: the float64 Gram matrix and its float32 partial sums
    (12 m^2 bytes), then the factor ``L_11`` (float64, in the Gram matrix's memory) and the float32
    coordinates ``Z``, ``Z^T Z`` and ``R^{-T}``: 20 m^2, 24 m^2 with a given Gram matrix copied.
    (Float64 rows take float64 coordinates: up to 32 m^2.)"""
    m = min(n_samples, n_features)
    return 24 * m * m


class SpanBasis:
    """Coordinates ``Z`` of the training vectors in an orthonormal basis of their span (module docstring).

    Parameters
    ----------
    X : ndarray of shape (n, d) (float64, float32 or float16), CSR matrix or ColumnBlockRows
        Training vectors (a :class:`~classify_images.classifiers.column_blocks.ColumnBlockRows`
        is read a block of columns at a time, here and by :meth:`weights`).
    gram : ndarray of shape (n, n), optional
        ``X X^T`` when already known (it is then copied, not overwritten); default: computed
        (or the one :func:`~classify_images.classifiers.eigenbasis.reused_gram` holds for ``X``).

    Attributes
    ----------
    Z : ndarray of shape (n, r)
        The training vectors in the basis, rows in the order of :attr:`order` (``n <= d``:
        float64, lower trapezoidal; ``n > d``: ``X`` itself).
    order : ndarray of shape (n,) or None
        Row ``i`` of ``Z`` is training row ``order[i]`` (None: the rows' own order).
    rank : int
        ``r``.
    """

    def __init__(self, X, gram: np.ndarray | None = None) -> None:
        n, d = X.shape
        self.n_samples = n
        self.order = None
        if n > d:
            if isinstance(X, ColumnBlockRows):  # the coordinates are the rows themselves
                X = np.asarray(X)
            self.Z = X.astype(np.float64) if sp.issparse(X) else X
            self.rank = d
            self._second_moment = second_moment_matrix(X)
            self._pivots = None
            return
        given_up = False
        if gram is None:
            gram = known_gram(X)
            given_up = gram is not None and gram_may_be_overwritten(X)  # a search's final fit
        owned = gram is None
        K = eigenbasis.gram_matrix(X) if owned else gram  # (the module's: counted by tests)
        if not (owned or given_up) or K.dtype != np.float64 or not K.flags.f_contiguous:
            K = np.array(K, dtype=np.float64, order="F")  # dpstrf writes its factor into it
        diagonal_max = float(np.max(np.diag(K), initial=0.0))
        if diagonal_max <= 0.0:  # X = 0: W = 0 is the only direction; keep one null coordinate
            self.Z, self.rank, self._second_moment = np.zeros((n, 1)), 1, np.zeros((1, 1))
            self._pivots, self._L11 = np.zeros(1, dtype=np.intp), np.ones((1, 1))
            return
        tolerance = max(n, d) * np.finfo(np.float64).eps * diagonal_max
        begin = time.process_time()
        # one BLAS thread: on a shared machine the factorisations' threads spin more than they work,
        # and their r^3 / 3 is small beside the Gram matrix's n^2 d
        with threadpool_limits(1, user_api="blas"):
            factor, pivots, rank, info = lapack.dpstrf(K, tol=tolerance, lower=1, overwrite_a=1)
            if info < 0:
                raise RuntimeError(f"dpstrf: argument {-info} is invalid")
            rank = max(int(rank), 1)
            del K
            L = factor[:, :rank]  # n x r, F-ordered view: its strict upper triangle still holds K's entries
            for start in range(0, rank, 1024):  # zeroed block by block (no index arrays of r^2 / 2 entries)
                block = L[start : start + 1024, start:]
                block[np.triu_indices(block.shape[0], 1, block.shape[1])] = 0.0
            # L_11 a view of the factor (no r x r copy; its leading dimension is n), unless the
            # rank is far below n, where the copy frees the factor's other rows
            self._L11 = L[:rank] if 2 * rank >= n else np.array(L[:rank], order="F")
            # C order (the objective multiplies blocks of rows, which BLAS takes only in C order),
            # float32 for float32 or float16 rows: products in the rows' own precision
            precision = np.float64 if X.dtype == np.float64 or sp.issparse(X) else np.float32
            self.Z = np.ascontiguousarray(L, dtype=precision)
            del L, factor  # before Z^T Z: 12 n^2 bytes here (L_11, Z), 20 n^2 with R^{-1} in float32 later
            # Z^T Z = L11^T L11 + L21^T L21 (r^3 / 3 + (n - r) r^2 multiply-adds, lower triangle; the
            # second term from Z's own rows: only the preconditioner uses it)
            if precision == np.float32:  # the preconditioner in float32 too: it needs to be close, not exact
                moment = lapack.slauum(np.asfortranarray(self.Z[:rank]), lower=1, overwrite_c=1)[0]
            else:
                moment = lapack.dlauum(self._L11, lower=1)[0]
            if rank < n:
                rest = self.Z[rank:].T  # (r x (n - r)), Fortran order
                syrk = blas.dsyrk if precision == np.float64 else blas.ssyrk
                moment += syrk(1.0, rest, trans=0, lower=1)
        self.rank = rank
        self._second_moment = moment
        _log.debug(
            "SpanBasis: pivoted Cholesky of the %d x %d Gram matrix, rank %d, %.2f CPU s",
            n,
            n,
            rank,
            time.process_time() - begin,
        )
        self.order = np.asarray(pivots, dtype=np.intp) - 1
        self._pivots = self.order[:rank]

    @property
    def lower_trapezoidal(self) -> bool:
        """Whether row ``i`` of :attr:`Z` is zero beyond column ``i`` (``n <= d``: ``Z = Pi L``)."""
        return self._pivots is not None

    def second_moment(self) -> np.ndarray:
        """``Z^T Z`` (``r x r``, float64; only its lower triangle is meaningful when ``n <= d``)."""
        if self._second_moment is None:
            self._second_moment = blas.dsyrk(1.0, self.Z.T, trans=0, lower=1)  # Z^T Z from C-ordered Z
        return self._second_moment

    def preconditioner(self, s: float, *, keep: bool = True) -> np.ndarray:
        """Upper triangular ``R`` with ``R^T R = I + 2 s Z^T Z`` (5).

        ``keep=False``: ``Z^T Z`` is overwritten (one ``r x r`` matrix less in memory; the
        basis then serves no other ``s``).
        """
        moment = self.second_moment()
        for precision in dict.fromkeys((moment.dtype, np.dtype(np.float64))):
            if keep or precision != moment.dtype:
                H = np.asfortranarray(moment * (2.0 * s), dtype=precision)
            else:
                H = np.asfortranarray(moment)
                H *= 2.0 * s
                self._second_moment = None
            H[np.diag_indices_from(H)] += 1.0
            potrf = lapack.spotrf if precision == np.float32 else lapack.dpotrf
            with threadpool_limits(1, user_api="blas"):  # r^3 / 3: threads cost more than they save here
                R, info = potrf(H, lower=1, overwrite_a=1, clean=1)
            if info == 0:
                return R.T  # the upper factor: (L L^T)^T = L L^T, R = L^T
            moment = self._float64_moment()  # float32 rounding made H indefinite: again in float64
        raise np.linalg.LinAlgError(f"dpotrf: I + 2 s Z^T Z is not positive definite (info {info})")

    def _float64_moment(self) -> np.ndarray:
        """``Z^T Z`` in float64 (lower triangle), from ``L_11`` and the rows of ``Z`` below it."""
        if self._pivots is None:
            return np.asarray(self.second_moment(), dtype=np.float64)
        moment = lapack.dlauum(self._L11, lower=1)[0]
        if self.rank < self.Z.shape[0]:
            moment += blas.dsyrk(1.0, np.asarray(self.Z[self.rank :], dtype=np.float64).T, trans=0, lower=1)
        return moment

    def release_coordinates(self) -> None:
        """Drop ``Z`` and ``Z^T Z`` (``8 r^2`` bytes for float32 rows): the basis then serves
        :meth:`weights` only (once the solution's ``B`` is known, for a basis kept for no other fit)."""
        self.Z = self._second_moment = None

    def rows(self, A: np.ndarray) -> np.ndarray:
        """``A`` (one row per training row, original order) in the order of :attr:`Z`."""
        return A if self.order is None or np.ndim(A) == 0 else A[self.order]

    def weights(self, X, B: np.ndarray) -> np.ndarray:
        """``W = V B`` of shape (d, P), float64 (``X``: the matrix the basis was built from)."""
        if self._pivots is None:
            return np.asarray(B, dtype=np.float64)
        coefficients = la.solve_triangular(self._L11, B, trans="T", lower=True, check_finite=False)
        exact = sp.issparse(X) or X.dtype == np.float64
        A = np.zeros((X.shape[0], B.shape[1]), dtype=np.float64 if exact else np.float32)
        A[self._pivots] = coefficients  # W = X^T A: the pivot rows' coefficients, zero elsewhere
        if sp.issparse(X):
            return np.asarray(X.T @ A, dtype=np.float64)
        n, d = X.shape
        # W^T (P x d) filled, W returned as its transpose: ``coef_ = W^T`` is then no further copy
        W_T = np.empty((B.shape[1], d))
        buffer = None
        converted = X.dtype == np.float16 or isinstance(X, ColumnBlockRows)
        for start in range(0, d, _COLUMNS):  # blocks of columns: no copy of the rows (converted: one block)
            stop = min(start + _COLUMNS, d)
            if converted:
                buffer = columns = float32_columns(X, start, stop, buffer)
            else:
                columns = X[:, start:stop]
            W_T[:, start:stop] = A.T @ columns
        return W_T.T


class SpanObjective(QuadraticHingeObjective):
    """Objective (1) on the coordinates ``Z`` of a :class:`SpanBasis`, preconditioned by (5).

    The optimiser's flat vector is ``[vec(Theta), g]``: ``B = R^{-1} Theta`` and ``b = scale_b * g``
    (the bias's scaling (3)).  Rows, targets and loss weights in the order of ``Z``.  ``R^{-1}`` is
    formed once (``r^3 / 3``; ``R`` is well conditioned, ``cond(R)^2 = 1 + 2 s lambda_max``), so that
    ``B`` and ``R^{-T} grad_B`` are matrix products, in float32 while ``Z``'s products are (the
    same matrix both ways: the gradient is exactly that of the function evaluated).
    """

    #: Rows of ``Z`` are short (``r`` entries): 64 MiB blocks, a few large products per evaluation.
    block_bytes = 1 << 26
    #: One BLAS thread per product: an evaluation is a few products of ``n x r`` by ``r x P``
    #: (tens of milliseconds each) with NumPy work between them, during which a second
    #: OpenBLAS thread only spins; on two cores it doubled the evaluation's CPU and did not
    #: shorten its wall time (docs/linear-svm-scaling.md, "One BLAS thread in the span's L-BFGS").
    evaluation_threads = 1

    def __init__(
        self,
        Z,
        Y: np.ndarray,
        cost,
        R: np.ndarray,
        *,
        fit_intercept: bool,
        intercept_penalty: float,
        intercept_scale: np.ndarray | None,
        lower_trapezoidal: bool = False,
    ) -> None:
        super().__init__(Z, Y, cost, fit_intercept=fit_intercept, intercept_penalty=intercept_penalty)
        self.lower_trapezoidal = bool(lower_trapezoidal)
        trtri = lapack.strtri if R.dtype == np.float32 else lapack.dtrtri
        with threadpool_limits(1, user_api="blas"):  # R^{-T} = (R^T)^{-1}, lower, in R's own memory
            inverse, info = trtri(R.T, lower=1, overwrite_c=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"trtri: R is singular (info {info})")
        self._inverse = {inverse.dtype: inverse}  # R^{-T}: triangular products by ?trmm (half a ?gemm's work)
        self.intercept_scale = intercept_scale

    def release(self) -> None:
        """Drop ``R^{-T}`` and the coordinates (after :meth:`unpack` of the solution: what the
        weights need is ``B``); the counters stay."""
        self._inverse.clear()
        self.X = None
        self.__dict__.pop("_buffers", None)

    def _R_inverse_T(self) -> np.ndarray:
        """``R^{-T}`` (lower triangular, Fortran order) in the products' precision."""
        dtype = np.dtype(np.float64 if self.exact else np.float32)
        if dtype not in self._inverse:  # (a float32 R^{-T} made float64 is the same change of variables)
            self._inverse[dtype] = next(iter(self._inverse.values())).astype(dtype)
        return self._inverse[dtype]

    def _times_inverse(self, M: np.ndarray, *, transpose: bool) -> np.ndarray:
        """``R^{-1} M`` (``transpose=False``) or ``R^{-T} M``, float64, by ``?trmm`` on ``R^{-T}``."""
        lower = self._R_inverse_T()
        trmm = blas.strmm if lower.dtype == np.float32 else blas.dtrmm
        M = np.asfortranarray(M, dtype=lower.dtype)
        return np.asarray(trmm(1.0, lower, M, lower=1, trans_a=0 if transpose else 1, overwrite_b=1), dtype=np.float64)

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        size = self.n_features * self.n_problems
        B = self._times_inverse(theta[:size].reshape(self.n_features, self.n_problems), transpose=False)
        if not self.fit_intercept:
            return B, np.zeros(self.n_problems)
        return B, theta[size:] * self.intercept_scale

    def flat(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        B, b = self.unpack(theta)
        value, grad_B, grad_b = self.value_and_grad(B, b)
        self.gradient_norm = float(np.sqrt(np.vdot(grad_B, grad_B) + np.dot(grad_b, grad_b)))
        grad_Theta = self._times_inverse(grad_B, transpose=True)
        if not self.fit_intercept:
            return value, grad_Theta.ravel()
        return value, np.concatenate([grad_Theta.ravel(), grad_b * self.intercept_scale])
