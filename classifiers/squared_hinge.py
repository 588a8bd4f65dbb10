"""All-classes squared-hinge objective, the row-space reduction and the L-BFGS driver.

Used by :class:`~classify_images.classifiers.linear.QuadraticHingeSVC`.  With
``W`` the ``d x P`` weight matrix (one column per one-vs-rest problem), ``b``
the ``P`` biases, ``Y`` the ``n x P`` targets in ``{-1, +1}`` and ``S`` the loss
weights (``C`` times the class weights), the objective is

.. math::

    f(W, b) = \\tfrac12 \\|W\\|_F^2
        + \\sum_{i,c} S_{ic} \\max\\bigl(0,\\, 1 - Y_{ic} (x_i^\\top w_c + b_c)\\bigr)^2
        + \\tfrac{\\rho}{2} \\|b\\|^2                                     \\qquad (1)

(ScSPM, Yang et al. 2009, Eq. 13 with the quadratic hinge, summed over the
classes; ``rho = 0`` leaves the bias unregularised).  With
``Z = X W + 1 b^T`` and ``M = max(0, 1 - Y * Z)`` (element-wise)

.. math::

    G = -2\\, S * Y * M, \\qquad
    \\nabla_W f = W + X^\\top G, \\qquad
    \\nabla_b f = G^\\top 1 + \\rho\\, b .                                \\qquad (2)

One evaluation costs the products ``X W`` and ``X^T G``, done block of rows
by block of rows (each block of a dense ``X`` is read from memory once); only
rows with an active margin (a non-zero row of ``G``) enter the second one.

**Row-space reduction.**  Started at ``W = 0``, every L-BFGS iterate is a
linear combination of gradients (2), all of which lie in the span of the
training vectors (the rows of ``X``), and so does the minimiser.  Any ``Z``
(``n x r``, full column rank) with ``Z Z^T = K = X X^T`` defines an orthonormal
basis ``V`` (``d x r``, ``X V = Z``) of that span (:class:`RowSpaceBasis`
builds one by pivoted Cholesky), and ``W = V B`` is an isometry: (1) in ``W``
equals (1) in ``B`` with ``X`` replaced by ``Z``.  L-BFGS is invariant under
orthogonal changes of variables (its updates use inner products only), so
running it on ``(B, b)`` produces the same iterates as on ``(W, b)`` while each
evaluation costs ``O(n r P)`` instead of ``O(n d P)``; the price is one Gram
matrix (``n^2 d``) and one ``O(n^3)`` factorisation, worthwhile when ``d`` is
several times ``n`` (e.g. 1 500 images x 21 504 ScSPM dimensions).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
from scipy.optimize import OptimizeResult, minimize
from threadpoolctl import ThreadpoolController

__all__ = ["SquaredHingeObjective", "RowSpaceBasis", "gram_matrix", "minimize_lbfgs"]

#: Within a block of rows, multiply only the rows with an active margin when
#: they are fewer than this fraction (copying rows costs about as much as
#: reading them again).
ACTIVE_ROWS_FRACTION = 0.5

#: Bytes of dense ``X`` per row block: both products of an evaluation are done
#: block by block, so each block is read from memory once while in cache.
_BLOCK_BYTES = 1 << 22

#: Columns of a float32 ``X`` converted to float64 at a time for the Gram matrix.
_GRAM_BLOCK = 2048


class SquaredHingeObjective:
    """Objective (1) and gradient (2) of all one-vs-rest problems at once.

    Parameters
    ----------
    X : ndarray of shape (n, d), float32 or float64, or CSR matrix
        Training vectors.  Dense float32 ``X`` is multiplied in float32 (``W``
        and ``G`` rounded to float32: half the memory traffic) until
        :attr:`exact` is set, after which each row block is converted to
        float64 before its products.  Sparse ``X`` is converted to float64
        once.  Margins, loss, gradient and regulariser are always accumulated
        in float64.
    Y : ndarray of shape (n, P) in {-1, +1}
        One-vs-rest targets.
    cost : float or ndarray broadcastable to (n, P)
        Loss weights ``S`` (``C`` times the class weights).
    fit_intercept : bool
        Whether the flat parameter vector carries the ``P`` biases after ``vec(W)``.
    intercept_penalty : float
        ``rho`` of (1); 0 leaves the bias unregularised.

    Attributes
    ----------
    exact : bool
        Whether the products run in float64 (always true unless ``X`` is
        dense float32; :func:`minimize_lbfgs` sets it when float32 rounding
        stops the line search).
    n_evaluations : int
        Number of objective/gradient evaluations so far.
    """

    def __init__(
        self,
        X: np.ndarray | sp.csr_matrix,
        Y: np.ndarray,
        cost: float | np.ndarray,
        *,
        fit_intercept: bool = True,
        intercept_penalty: float = 0.0,
    ) -> None:
        if sp.issparse(X):
            X = sp.csr_matrix(X, dtype=np.float64)
        self.X = X
        self.Y = np.asarray(Y, dtype=np.float64)
        self.cost = cost if np.ndim(cost) == 0 else np.asarray(cost, dtype=np.float64)
        self.fit_intercept = bool(fit_intercept)
        self.intercept_penalty = float(intercept_penalty)
        self.n_samples, self.n_features = X.shape
        self.n_problems = self.Y.shape[1]
        self.exact = X.dtype != np.float32
        self.n_evaluations = 0

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector ``[vec(W), b]``."""
        return self.n_features * self.n_problems + (self.n_problems if self.fit_intercept else 0)

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``W`` (d, P) (a view) and ``b`` (P,) of a flat parameter vector."""
        size = self.n_features * self.n_problems
        W = theta[:size].reshape(self.n_features, self.n_problems)
        b = theta[size:] if self.fit_intercept else np.zeros(self.n_problems)
        return W, b

    def _row_blocks(self):
        """``(rows, X[rows])`` in the product precision; one block if ``X`` is sparse."""
        if sp.issparse(self.X):
            yield slice(None), self.X
            return
        step = max(1, _BLOCK_BYTES // max(1, self.n_features * self.X.itemsize))
        for start in range(0, self.n_samples, step):
            rows = slice(start, min(start + step, self.n_samples))
            block = self.X[rows]
            yield rows, (block.astype(np.float64) if self.exact else block)

    def _evaluate(self, W: np.ndarray, b: np.ndarray, gradient: bool):
        dtype = np.float64 if self.exact else np.float32
        W_product = W.astype(dtype, copy=False)
        loss = 0.0
        grad_W = W.copy() if gradient else None
        grad_b = self.intercept_penalty * b
        for rows, block in self._row_blocks():
            Z = np.asarray(block @ W_product, dtype=np.float64)
            if self.fit_intercept:
                Z += b
            Y = self.Y[rows]
            M = 1.0 - Y * Z
            np.maximum(M, 0.0, out=M)
            SM = M * (self.cost if np.ndim(self.cost) == 0 else self.cost[rows])
            loss += float(np.vdot(SM, M))
            if not gradient:
                continue
            G = -2.0 * Y * SM  # zero where the margin is inactive
            grad_b = grad_b + G.sum(axis=0)
            active = np.flatnonzero(M.any(axis=1))
            if active.size == 0:
                continue
            if active.size < ACTIVE_ROWS_FRACTION * Z.shape[0]:
                block, G = block[active], G[active]
            grad_W += np.asarray(block.T @ G.astype(dtype), dtype=np.float64)
        value = 0.5 * float(np.vdot(W, W)) + 0.5 * self.intercept_penalty * float(np.dot(b, b)) + loss
        return value, grad_W, grad_b

    def value(self, W: np.ndarray, b: np.ndarray) -> float:
        """Objective (1) at ``(W, b)``."""
        return self._evaluate(W, b, gradient=False)[0]

    def value_and_grad(self, W: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """Objective (1) and its gradients (2): ``(f, df/dW, df/db)``."""
        self.n_evaluations += 1
        return self._evaluate(W, b, gradient=True)

    def flat(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """``(f, grad)`` on the flat vector ``[vec(W), b]`` (for scipy)."""
        W, b = self.unpack(theta)
        value, grad_W, grad_b = self.value_and_grad(W, b)
        if not self.fit_intercept:
            return value, grad_W.ravel()
        return value, np.concatenate([grad_W.ravel(), grad_b])


def gram_matrix(X: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """``K = X X^T`` accumulated in float64 (float32 ``X`` converted by column blocks)."""
    if sp.issparse(X):
        X64 = X.astype(np.float64)
        return np.asarray((X64 @ X64.T).toarray())
    if X.dtype == np.float64:
        return X @ X.T
    n, d = X.shape
    K = np.zeros((n, n))
    for start in range(0, d, _GRAM_BLOCK):
        block = X[:, start : start + _GRAM_BLOCK].astype(np.float64)
        K += block @ block.T  # numpy dispatches A @ A.T to syrk
    return K


class RowSpaceBasis:
    """Orthonormal basis ``V`` of the span of the training vectors (rows of ``X``).

    With the pivoted Cholesky factorisation ``K[p][:, p] = L L^T`` of the Gram
    matrix ``K = X X^T`` (LAPACK ``dpstrf``, ``L`` of shape ``n x r``, stopped
    when the largest remaining pivot falls below ``n * eps * max_i K_ii``, i.e.
    the dropped directions carry a squared norm below that), the coordinates
    of the training vectors are ``Z[p] = L`` (``Z Z^T = K``) and

    ``V = X[p_{1..r}]^T L_1^{-T}``  (``L_1 = L[:r, :r]``),

    which satisfies ``X V = Z`` and ``V^T V = L_1^{-1} K[p_r][:, p_r] L_1^{-T} = I``:
    ``W = V B`` maps the reduced problem onto the original one isometrically.

    Attributes
    ----------
    Z : ndarray of shape (n, r), float64
        The training vectors in the basis.
    rank : int
        ``r``.
    """

    def __init__(self, X: np.ndarray | sp.csr_matrix) -> None:
        K = gram_matrix(X)
        n = K.shape[0]
        top = float(np.max(np.diag(K))) if n else 0.0
        if top <= 0.0:  # X = 0: one zero coordinate keeps the shapes valid
            self.Z, self.rank = np.zeros((n, 1)), 1
            self._pivots, self._L1 = np.zeros(1, dtype=np.intp), np.ones((1, 1))
            return
        factor, piv, rank, info = la.lapack.dpstrf(K, tol=n * np.finfo(np.float64).eps * top, lower=1)
        if info < 0:  # pragma: no cover - LAPACK argument error
            raise RuntimeError(f"dpstrf failed with info={info}")
        L = np.tril(factor[:, :rank])
        self._pivots = piv[:rank].astype(np.intp) - 1  # LAPACK pivots are 1-based
        self._L1 = np.ascontiguousarray(L[:rank])
        self.Z = np.empty((n, rank))
        self.Z[piv.astype(np.intp) - 1] = L
        self.rank = int(rank)

    def weights(self, X: np.ndarray | sp.csr_matrix, B: np.ndarray) -> np.ndarray:
        """``W = V B = X[p_r]^T (L_1^{-T} B)``, shape (d, P), float64.

        ``X`` must be the matrix the basis was built from.
        """
        A = la.solve_triangular(self._L1, B, trans="T", lower=True, check_finite=False)
        rows = X[self._pivots]
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        return np.asarray(rows.T @ A.astype(dtype), dtype=np.float64)


class _Stop:
    """Relative gradient-norm stopping rule, checked after every L-BFGS iteration.

    Stops when ``||grad f(theta_k)||_2 <= tol * ||grad f(0)||_2``; the 2-norm is
    invariant under the row-space change of variables, so both parameterisations
    stop at the same iterate.
    """

    def __init__(self, problem: SquaredHingeObjective, tol: float, verbose: int) -> None:
        self.problem = problem
        self.tol = tol
        self.verbose = verbose
        self.last: tuple[float, float] = (np.nan, np.inf)  # (f, ||grad||) of the last evaluation
        self.initial_norm: float | None = None
        self.converged = False
        self.iteration = 0
        self.start = time.perf_counter()

    def fun(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = self.problem.flat(theta)
        norm = float(np.linalg.norm(grad))
        if self.initial_norm is None:
            self.initial_norm = norm
        self.last = (value, norm)
        return value, grad

    def relative_norm(self) -> float:
        return self.last[1] / max(self.initial_norm or 0.0, np.finfo(np.float64).tiny)

    def callback(self, intermediate_result: OptimizeResult) -> None:
        self.iteration += 1
        if self.last[0] != intermediate_result.fun:  # not the accepted point: re-evaluate
            self.fun(intermediate_result.x)
        relative = self.relative_norm()
        if self.verbose >= 2 or (self.verbose and self.iteration % 10 == 0):
            precision = "float64" if self.problem.exact else "float32"
            print(
                f"[QuadraticHingeSVC] iter {self.iteration:5d}  objective {self.last[0]:.10g}  "
                f"|grad|/|grad0| {relative:.3e}  ({precision} products, "
                f"{time.perf_counter() - self.start:.2f} s)"
            )
        if relative <= self.tol:
            self.converged = True
            raise StopIteration


def minimize_lbfgs(
    problem: SquaredHingeObjective, *, tol: float, max_iter: int, verbose: int = 0
) -> tuple[OptimizeResult, bool]:
    """Minimise (1) from ``W = 0, b = 0`` with ``scipy.optimize.minimize(method="L-BFGS-B")``.

    With dense float32 ``X`` the products start in float32; if L-BFGS-B stops
    before ``tol`` for another reason than ``max_iter`` (its line search cannot
    make progress against float32 rounding), it is restarted from where it
    stopped with float64 products (``problem.exact = True``).

    Returns
    -------
    result : OptimizeResult
        scipy's result of the last run (``x`` the flat ``[vec(W), b]``, ``fun``;
        ``nit`` counts the iterations of all runs).
    converged : bool
        Whether the relative gradient norm reached ``tol`` (see :class:`_Stop`)
        or L-BFGS-B stopped at a stationary point on its own.
    """
    stop = _Stop(problem, tol, verbose)
    theta = np.zeros(problem.n_params)
    # L-BFGS-B's own vector bookkeeping runs with one BLAS thread (waking
    # threads for O(m n) vector work only costs time, a lot on a loaded
    # machine); the evaluations keep the caller's BLAS threads.
    blas = ThreadpoolController().select(user_api="blas")
    caller_threads = {lib["prefix"]: lib["num_threads"] for lib in blas.info()}

    def fun(theta: np.ndarray) -> tuple[float, np.ndarray]:
        with blas.limit(limits=caller_threads):
            return stop.fun(theta)

    with blas.limit(limits=1):
        while True:
            result = minimize(
                fun, theta, jac=True, method="L-BFGS-B", callback=stop.callback,
                options={
                    "maxiter": max_iter - stop.iteration,
                    "gtol": 0.0,  # the stopping rule is _Stop's
                    "ftol": 64 * np.finfo(np.float64).eps,
                    "maxls": 50,
                },
            )
            converged = stop.converged or stop.last[1] == 0.0 or (result.status == 0 and problem.exact)
            if converged or problem.exact or stop.iteration >= max_iter:
                break
            problem.exact = True
            theta = result.x
            stop.last = (np.nan, np.inf)
    result.nit = stop.iteration
    return result, converged
