"""The all-classes quadratic-hinge objective of the linear SVM and its L-BFGS driver.

Used by :class:`~classify_images.classifiers.quadratic_hinge.QuadraticHingeSVC`.  With
``W`` the ``d x P`` weight matrix (one column per one-vs-rest problem), ``b``
the ``P`` biases, ``Y`` the ``n x P`` targets in ``{-1, +1}`` and ``S`` the loss
weights (``C`` times the class weights), the objective is

.. math::

    f(W, b) = \\tfrac12 \\|W\\|_F^2
        + \\sum_{i,c} S_{ic} \\max\\bigl(0,\\, 1 - Y_{ic} (x_i^\\top w_c + b_c)\\bigr)^2
        + \\tfrac{\\rho}{2} \\|b\\|^2                                     \\qquad (1)

(ScSPM [1]_, Eq. 13 with the quadratic hinge, summed over the
classes; ``rho = 0`` leaves the bias unregularised).  With
``Z = X W + 1 b^T`` and ``M = max(0, 1 - Y * Z)`` (element-wise)

.. math::

    G = -2\\, S * Y * M, \\qquad
    \\nabla_W f = W + X^\\top G, \\qquad
    \\nabla_b f = G^\\top 1 + \\rho\\, b .                                \\qquad (2)

One evaluation costs the products ``X W`` and ``X^T G``, done block of rows
by block of rows (each block of a dense ``X`` is read from memory once); only
rows with an active margin (a non-zero row of ``G``) enter the second one.

**Preconditioning.**  L-BFGS runs on scaled parameters ``(W, b) = scale * theta``
(:func:`jacobi_scale`): if every margin were active, the Hessian of (1) for
class ``c`` would be ``I + 2 X^T diag(S_c) X`` in ``w_c`` and ``rho + 2 sum_i S_ic``
in ``b_c``; the scaling divides each coordinate by the square root of its
diagonal entry (with the loss weights of class ``c`` replaced by their mean
``s_c``),

.. math::

    W_{jc} = \\frac{\\Theta_{jc}}{\\sqrt{1 + 2 s_c \\textstyle\\sum_i x_{ij}^2}}, \\qquad
    b_c = \\frac{g_c}{\\sqrt{\\rho + 2 \\sum_i S_{ic}}} .                      \\qquad (3)

In the feature space this is Jacobi preconditioning; in the eigenbasis of
:mod:`~classify_images.classifiers.eigenbasis`, where ``X^T X`` is diagonal,
it makes that approximate Hessian exactly the identity.

References
----------
.. [1] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear Spatial Pyramid Matching Using
   Sparse Coding for Image Classification", CVPR 2009.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse as sp
from scipy.optimize import OptimizeResult, minimize
from threadpoolctl import ThreadpoolController

from .._log import HEARTBEAT_SECONDS

__all__ = [
    "QuadraticHingeObjective",
    "BlockwiseQuadraticHingeObjective",
    "column_squared_norms",
    "jacobi_scale",
    "minimize_lbfgs",
]

_log = logging.getLogger(__name__)

#: Within a block of rows, multiply only the rows with an active margin when
#: they are fewer than this fraction (copying rows costs about as much as
#: reading them again).
ACTIVE_ROWS_FRACTION = 0.5

#: Bytes of dense ``X`` per row block: both products of an evaluation are done
#: block by block, so each block is read from memory once while in cache.
_BLOCK_BYTES = 1 << 22
#: Row blocks of a lower trapezoidal ``X``, at least: ``(k + 1) / 2k`` of the full products' work.
_TRAPEZOID_BLOCKS = 8


class QuadraticHingeObjective:
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
    scale : ndarray of shape (n_params,), optional
        The optimiser's flat vector ``theta`` maps to ``[vec(W), b] = scale * theta``
        (a diagonal preconditioner); default: no scaling.

    Attributes
    ----------
    gradient_norm : float
        ``||(df/dW, df/db)||_2`` at the last :meth:`flat` evaluation (unscaled).
    exact : bool
        Whether the products run in float64 (always true unless ``X`` is
        dense float32; :func:`minimize_lbfgs` sets it when float32 rounding
        stops the line search).
    n_evaluations : int
        Number of objective/gradient evaluations so far.
    n_gradient_rows : int
        Rows the gradient products ``X^T G`` have read so far, summed over the
        evaluations: per row block, its rows with an active margin when they are fewer
        than :data:`ACTIVE_ROWS_FRACTION` of the block, else the whole block.  With
        ``n_samples * n_evaluations`` (the rows the margins ``X W`` read), it says what
        an evaluation costs: the share of active rows falls as the rows per class grow.
    """

    #: Bytes of dense ``X`` per row block (:data:`_BLOCK_BYTES`; a subclass whose rows are
    #: short, and read whole anyway, takes larger blocks: fewer, more efficient products).
    block_bytes = _BLOCK_BYTES
    #: Whether row ``i`` of ``X`` is zero beyond column ``i`` (the span's Cholesky coordinates):
    #: each block of rows is then multiplied by its first columns only, about half the products'
    #: work in :data:`_TRAPEZOID_BLOCKS` blocks.
    lower_trapezoidal = False
    #: BLAS threads of an evaluation's products at most (None: the caller's).
    evaluation_threads: int | None = None

    def __init__(
        self,
        X: np.ndarray | sp.csr_matrix,
        Y: np.ndarray,
        cost: float | np.ndarray,
        *,
        fit_intercept: bool = True,
        intercept_penalty: float = 0.0,
        scale: np.ndarray | None = None,
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
        self.n_gradient_rows = 0
        self.gradient_norm = np.nan
        self.scale = None if scale is None else np.asarray(scale, dtype=np.float64)
        if self.scale is not None and self.scale.shape != (self.n_params,):
            raise ValueError(f"scale must have shape ({self.n_params},), got {self.scale.shape}")

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector ``[vec(W), b]``."""
        return self.n_features * self.n_problems + (self.n_problems if self.fit_intercept else 0)

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``W`` (d, P) and ``b`` (P,) of the optimiser's flat vector ``theta``."""
        if self.scale is not None:
            theta = self.scale * theta
        size = self.n_features * self.n_problems
        W = theta[:size].reshape(self.n_features, self.n_problems)
        b = theta[size:] if self.fit_intercept else np.zeros(self.n_problems)
        return W, b

    def _row_blocks(self):
        """``(X[rows], Y[rows], S[rows])`` in the product precision; one block if ``X`` is sparse.

        Rows of a :attr:`lower_trapezoidal` ``X`` come with their first ``min(stop, d)`` columns
        only (the others are zero), in at least :data:`_TRAPEZOID_BLOCKS` blocks."""
        if sp.issparse(self.X):
            yield self.X, self.Y, self.cost
            return
        step = max(1, self.block_bytes // max(1, self.n_features * self.X.itemsize))
        if self.lower_trapezoidal:
            step = min(step, max(1, -(-self.n_samples // _TRAPEZOID_BLOCKS)))
        for start in range(0, self.n_samples, step):
            rows = slice(start, min(start + step, self.n_samples))
            width = min(rows.stop, self.n_features) if self.lower_trapezoidal else self.n_features
            block = self.X[rows, :width]
            cost = self.cost if np.ndim(self.cost) == 0 else self.cost[rows]
            if self.exact and block.dtype != np.float64:  # converted into one reused buffer
                converted = self._buffer("float64_block", (step * self.n_features,), np.float64)
                converted = converted[: block.size].reshape(block.shape)
                np.copyto(converted, block)
                block = converted
            yield block, self.Y[rows], cost

    def _buffer(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        """A work array kept between evaluations (allocated once, at least ``shape``).

        The products of every row block write into such arrays instead of new ones: a
        process whose allocator returns freed memory to the system at once (Dask's workers
        set ``MALLOC_TRIM_THRESHOLD_``) would otherwise map, zero and unmap megabytes per
        block, which doubled the cost of an evaluation there (docs/scaling.md, section 7.4).
        """
        buffers = self.__dict__.setdefault("_buffers", {})
        held = buffers.get(name)
        if held is None or held.dtype != dtype or held.shape[0] < shape[0] or held.shape[1:] != shape[1:]:
            held = buffers[name] = np.empty(shape, dtype=dtype)
        return held

    def _evaluate(self, W: np.ndarray, b: np.ndarray, gradient: bool):
        dtype = np.float64 if self.exact else np.float32
        W_product = W.astype(dtype, copy=False)
        loss = 0.0
        grad_W = W.copy() if gradient else None
        grad_b = self.intercept_penalty * b
        for block, Y, cost in self._row_blocks():
            width = block.shape[1]  # (fewer than d: the first columns of lower trapezoidal rows)
            Z = np.asarray(block @ W_product[:width], dtype=np.float64)
            if self.fit_intercept:
                Z += b
            M = 1.0 - Y * Z
            np.maximum(M, 0.0, out=M)
            SM = M * cost
            loss += float(np.vdot(SM, M))
            if not gradient:
                continue
            G = -2.0 * Y * SM  # zero where the margin is inactive
            grad_b = grad_b + G.sum(axis=0)
            active = np.flatnonzero(M.any(axis=1))
            if active.size == 0:
                continue
            if active.size < ACTIVE_ROWS_FRACTION * Z.shape[0]:
                if sp.issparse(block):
                    block = block[active]
                else:  # gathered into a reused buffer (mode="clip": not buffered again by numpy)
                    gathered = self._buffer("gathered", (block.size,), block.dtype)
                    gathered = gathered[: active.size * width].reshape(active.size, width)
                    block = np.take(block, active, axis=0, out=gathered, mode="clip")
                G = G[active]
            self.n_gradient_rows += block.shape[0]
            if sp.issparse(block):
                grad_W += np.asarray(block.T @ G.astype(dtype), dtype=np.float64)
            else:
                product = self._buffer("product", (self.n_features, self.n_problems), block.dtype)[:width]
                grad_W[:width] += np.matmul(block.T, G.astype(block.dtype), out=product)
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
        """``(f, df/dtheta)`` at the optimiser's flat vector ``theta`` (for scipy)."""
        W, b = self.unpack(theta)
        value, grad_W, grad_b = self.value_and_grad(W, b)
        grad = np.concatenate([grad_W.ravel(), grad_b]) if self.fit_intercept else grad_W.ravel()
        self.gradient_norm = float(np.linalg.norm(grad))
        if self.scale is not None:
            grad *= self.scale
        return value, grad


class BlockwiseQuadraticHingeObjective(QuadraticHingeObjective):
    """Objective (1) and gradient (2) summed over a re-iterable of row blocks.

    The sums over the rows in (1) and (2) split over any partition of the rows, so each
    evaluation is one pass over the blocks, holding one block and its ``n_block x P``
    margins at a time: the training rows are never assembled (a feature set larger than
    memory, or stored compressed and decoded block by block).  L-BFGS on it reaches the
    optimum of :class:`QuadraticHingeObjective` on the concatenated rows, at the price of
    one pass over the blocks per evaluation.

    Parameters
    ----------
    blocks : re-iterable of ``(X_block, y_block)``
        The same blocks, in the same order, at every pass.
    prepare : callable
        ``prepare(X_block, y_block) -> (X_block, Y_block, S_block)``: the validated block, its
        one-vs-rest targets in ``{-1, +1}`` and its loss weights (a float or an array of shape
        ``(n_block, P)``).
    n_samples, n_features, n_problems : int
        Rows of all the blocks, columns, one-vs-rest problems.
    float32 : bool
        Whether the blocks are dense float32: products in float32 until :attr:`exact` is set
        (as :class:`QuadraticHingeObjective`).
    fit_intercept, intercept_penalty, scale
        As :class:`QuadraticHingeObjective`.
    """

    def __init__(
        self,
        blocks,
        prepare,
        *,
        n_samples: int,
        n_features: int,
        n_problems: int,
        float32: bool,
        fit_intercept: bool = True,
        intercept_penalty: float = 0.0,
        scale: np.ndarray | None = None,
    ) -> None:
        self.X = self.Y = self.cost = None
        self.blocks, self.prepare = blocks, prepare
        self.fit_intercept = bool(fit_intercept)
        self.intercept_penalty = float(intercept_penalty)
        self.n_samples, self.n_features, self.n_problems = int(n_samples), int(n_features), int(n_problems)
        self.exact = not float32
        self.n_evaluations = 0
        self.n_gradient_rows = 0
        self.gradient_norm = np.nan
        self.scale = None if scale is None else np.asarray(scale, dtype=np.float64)
        if self.scale is not None and self.scale.shape != (self.n_params,):
            raise ValueError(f"scale must have shape ({self.n_params},), got {self.scale.shape}")

    def _row_blocks(self):
        for X_block, y_block in self.blocks:
            block, Y, cost = self.prepare(X_block, y_block)
            if sp.issparse(block):
                block = sp.csr_matrix(block, dtype=np.float64)
            elif self.exact or block.dtype != np.float32:
                block = np.asarray(block, dtype=np.float64)
            yield block, np.asarray(Y, dtype=np.float64), cost


def column_squared_norms(X: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """``diag(X^T X)``: ``sum_i x_ij^2`` for every column ``j``, float64."""
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=0), dtype=np.float64).ravel()
    step = max(1, _BLOCK_BYTES // max(1, X.shape[1] * X.itemsize))
    total = np.zeros(X.shape[1])
    for start in range(0, X.shape[0], step):
        block = X[start : start + step]
        total += np.einsum("ij,ij->j", block, block, dtype=np.float64)
    return total


def jacobi_scale(
    diagonal: np.ndarray,
    cost: float | np.ndarray,
    *,
    n_samples: int,
    n_problems: int,
    fit_intercept: bool,
    intercept_penalty: float,
) -> np.ndarray:
    """Diagonal preconditioner (3) of the flat parameters ``[vec(W), b]``.

    Parameters
    ----------
    diagonal : ndarray of shape (d,)
        ``diag(X^T X)`` of the matrix the objective multiplies.
    cost : float or ndarray broadcastable to (n_samples, n_problems)
        Loss weights ``S``.

    Returns
    -------
    scale : ndarray of shape (d * P [+ P],)
        ``[vec(W), b] = scale * theta`` element-wise.
    """
    totals = np.broadcast_to(np.asarray(cost, dtype=np.float64), (n_samples, n_problems)).sum(axis=0)
    scale_W = 1.0 / np.sqrt(1.0 + 2.0 * np.outer(diagonal, totals / max(n_samples, 1)))
    if not fit_intercept:
        return scale_W.ravel()
    scale_b = 1.0 / np.sqrt(np.maximum(intercept_penalty + 2.0 * totals, np.finfo(np.float64).tiny))
    return np.concatenate([scale_W.ravel(), scale_b])


class _Stop:
    """Relative gradient-norm stopping rule, checked after every L-BFGS iteration.

    Stops when ``||grad f(W_k, b_k)||_2 <= tol * ||grad f(0, 0)||_2``, the
    gradient in the model's parameters (not the preconditioned ones): the
    2-norm is the same in the feature space and in an orthonormal eigenbasis,
    so every solver stops by the same rule.
    """

    def __init__(self, problem: QuadraticHingeObjective, tol: float, verbose: int) -> None:
        self.problem = problem
        self.tol = tol
        self.verbose = verbose
        self.last: tuple[float, float] = (np.nan, np.inf)  # (f, ||grad||) of the last evaluation
        self.initial_norm: float | None = None
        self.converged = False
        self.iteration = 0
        self.start = time.perf_counter()
        self.next_report = self.start + HEARTBEAT_SECONDS

    def fun(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = self.problem.flat(theta)
        norm = self.problem.gradient_norm
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
        self._report(relative)
        if relative <= self.tol:
            self.converged = True
            raise StopIteration

    def _report(self, relative: float) -> None:
        """Progress: every iteration with ``verbose >= 2``, every 10th with ``verbose`` (INFO);
        otherwise every 10th as DEBUG, and as INFO at most every :data:`HEARTBEAT_SECONDS`."""
        now = time.perf_counter()
        if self.verbose >= 2 or (self.verbose and self.iteration % 10 == 0):
            level = logging.INFO
        elif now >= self.next_report:
            level, self.next_report = logging.INFO, now + HEARTBEAT_SECONDS
        elif self.iteration % 10 == 0:
            level = logging.DEBUG
        else:
            return
        if _log.isEnabledFor(level):
            precision = "float64" if self.problem.exact else "float32"
            _log.log(
                level,
                "QuadraticHingeSVC: L-BFGS iteration %d, objective %.10g, |grad|/|grad0| %.3e (%s products, %.2f s)",
                self.iteration,
                self.last[0],
                relative,
                precision,
                now - self.start,
            )


def minimize_lbfgs(
    problem: QuadraticHingeObjective, *, tol: float, max_iter: int, verbose: int = 0
) -> tuple[OptimizeResult, bool]:
    """Minimise (1) from ``W = 0, b = 0`` with ``scipy.optimize.minimize(method="L-BFGS-B")``.

    The model's parameters at the end are ``problem.unpack(result.x)``.

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
    # machine); the evaluations keep the caller's BLAS threads unless the
    # problem's products are too small for them (``evaluation_threads``).
    blas = ThreadpoolController().select(user_api="blas")
    caller_threads = {lib["prefix"]: lib["num_threads"] for lib in blas.info()}
    if problem.evaluation_threads is not None:
        caller_threads = {prefix: min(count, problem.evaluation_threads) for prefix, count in caller_threads.items()}

    def fun(theta: np.ndarray) -> tuple[float, np.ndarray]:
        with blas.limit(limits=caller_threads):
            return stop.fun(theta)

    with blas.limit(limits=1):
        while True:
            result = minimize(
                fun,
                theta,
                jac=True,
                method="L-BFGS-B",
                callback=stop.callback,
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
