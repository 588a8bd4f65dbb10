"""Linear one-vs-all SVM with the squared ("quadratic") hinge, trained by L-BFGS.

This is the classifier of ScSPM [1]_ (section 4.2).
For each class ``c`` the paper solves (its Eq. 13, with the differentiable loss
below it)

.. math::

    \\min_{w_c} \\; \\|w_c\\|^2 + C_{paper} \\sum_{i=1}^n
        \\max(0,\\, 1 - y_i^c\\, w_c^\\top z_i)^2 ,

with the bias folded into ``w_c`` (footnote 2), and predicts the class of the
largest ``w_c^T z`` (Eq. 12).  The released reference code
(``li2nsvm_multiclass_lbfgs``) writes the same problem as
``lambda * w'w + sum_i max(0, 1 - y_i (w'z_i + b))^2`` with ``lambda = 0.1`` and an
*unregularised* bias ``b``.

Here the regularisation follows scikit-learn's convention (``LinearSVC``):

.. math::

    f(W, b) = \\tfrac12 \\|W\\|_F^2
        + C \\sum_{c=1}^{P} \\sum_{i=1}^{n} s_{ic}\\,
          \\max\\bigl(0,\\, 1 - y_{ic} (x_i^\\top w_c + b_c)\\bigr)^2
        \\;[\\, + \\tfrac{1}{2 s^2} \\|b\\|^2 \\text{ if the intercept is penalised} ] ,

which is, per class, the reference objective divided by ``2 lambda`` (and the
paper's Eq. 13 divided by 2 with ``C_paper = 2 C``): the minimisers agree when
``C = 1 / (2 lambda)``, so the reference ``lambda = 0.1`` is ``C = 5``
(:func:`paper_lambda_to_C`).  ``s_ic`` are class weights (LIBLINEAR's
one-vs-rest semantics: the positive samples of problem ``c`` cost
``C * class_weight[c]``, the negatives ``C`` [2]_).  The bias is unregularised by
default, as in the reference code; ``penalize_intercept=True`` gives
LIBLINEAR's (``LinearSVC``'s) objective instead.

All ``P`` one-vs-rest problems are separable sums, so they are optimised
*together*: one vector ``theta = [vec(W), b]`` (``W`` is ``d x P``), one call of
:func:`scipy.optimize.minimize` (``method="L-BFGS-B"``, ``jac=True``).  Writing
``Z = X W + 1 b^T`` and ``M = max(0, 1 - Y * Z)`` (element-wise), the gradient is

.. math::

    G = -2 C\\, s * Y * M, \\qquad
    \\nabla_W f = W + X^\\top G, \\qquad
    \\nabla_b f = G^\\top 1 \\;[ + b / s^2 ] ,

so one evaluation costs the two products ``X W`` and ``X^T G`` (only rows with
an active margin enter the second): ``solver="features"``.  ``solver="span"``
(the default whenever its ``min(n, d)`` square matrices fit in memory) solves the
same problem in an orthonormal basis of the span of the training vectors (the
representer theorem), from the pivoted Cholesky factor of the Gram matrix, where
these products are ``n x r`` (``r <= min(n, d)``, so ``d / n`` times cheaper when
``n < d``) and a triangular preconditioner makes L-BFGS converge in far fewer
iterations (:mod:`~classify_images.classifiers.span`; ``solver="eigen"``, the same
in an eigenbasis, :mod:`~classify_images.classifiers.eigenbasis`).  Training costs
about one Gram matrix ``X X^T`` when ``n << d`` (docs/linear-svm-scaling.md).  The objective, its
gradient, the preconditioner and the L-BFGS driver are in
:mod:`~classify_images.classifiers._quadratic_hinge_objective`.  Timings against
``LinearSVC``: see docs/benchmarks/linear.md.

References
----------
.. [1] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear Spatial Pyramid Matching Using
   Sparse Coding for Image Classification", CVPR 2009.
.. [2] R.-E. Fan, K.-W. Chang, C.-J. Hsieh, X.-R. Wang and C.-J. Lin, "LIBLINEAR: A
   Library for Large Linear Classification", JMLR 9, 2008.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from ._compat import Interval, StrOptions
from ._half import remembered_squared_norms
from ._quadratic_hinge_objective import (
    BlockwiseQuadraticHingeObjective,
    QuadraticHingeObjective,
    column_squared_norms,
    jacobi_scale,
    minimize_lbfgs,
)
from .base import OneVsRestClassifierBase, auto_scale_mean, loss_weights, ovr_targets
from .column_blocks import is_column_blocks
from .eigenbasis import EigenBasis, derived_from_gram, known_gram
from .span import SpanBasis, SpanObjective, span_bytes

_log = logging.getLogger(__name__)

__all__ = ["QuadraticHingeSVC", "paper_lambda_to_C"]

#: Fraction of the machine's physical memory the ``min(n, d)`` square matrices of ``solver="span"``
#: (:func:`~classify_images.classifiers.span.span_bytes`) may take under ``solver="auto"``; past it,
#: ``"features"``.
SPAN_MEMORY_FRACTION = 0.5


def span_memory_budget() -> int:
    """Bytes ``solver="auto"`` lets the span solver's matrices take: :data:`SPAN_MEMORY_FRACTION` of the physical memory."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf: assume 8 GiB
        physical = 8 << 30
    return int(SPAN_MEMORY_FRACTION * physical)


#: Float16 rows converted to float32 at a time for the decision values.
_HALF_ROWS = 1024
#: Rows per step of the streaming solver (:meth:`QuadraticHingeSVC.partial_fit`).
SGD_BATCH_ROWS = 32


def _squared_norms(X) -> np.ndarray:
    """``||x_i||^2`` of every row, float64 (dense or CSR ``X``)."""
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    if is_column_blocks(X):  # the diagonal of the Gram matrix when it is at hand, else one pass
        K = known_gram(X)
        return X.squared_norms() if K is None else np.diagonal(K).copy()
    return remembered_squared_norms(X)


def penalty_of(model) -> float:
    """The intercept's penalty ``1 / intercept_scaling^2`` relative to the loss weight (0: unpenalised)."""
    return float(model.intercept_scaling) ** -2 if model.penalize_intercept else 0.0


def _batch_curvature(X, n_batches: int = 8) -> float:
    """The largest eigenvalue of ``X_B^T X_B / |B|`` over the first ``n_batches`` steps' rows ``B``
    (from the ``|B| x |B|`` Gram matrix): the loss's curvature along a step, ``||x||^2`` for
    identical rows, ``||x||^2 / |B|`` for orthogonal ones."""
    largest = 0.0
    for start in range(0, min(X.shape[0], n_batches * SGD_BATCH_ROWS), SGD_BATCH_ROWS):
        rows = X[start : start + SGD_BATCH_ROWS]
        gram = rows @ rows.T
        gram = np.asarray(gram.todense() if sp.issparse(gram) else gram, dtype=np.float64)
        largest = max(largest, float(np.linalg.eigvalsh(gram)[-1]) / rows.shape[0])
    return largest


def paper_lambda_to_C(lam: float) -> float:
    """``C`` of this module equivalent to the ScSPM reference code's ``lambda``.

    The reference minimises ``lambda ||w||^2 + sum_i sq-hinge_i``; dividing by
    ``2 lambda`` gives ``1/2 ||w||^2 + 1/(2 lambda) sum_i sq-hinge_i``, hence
    ``C = 1 / (2 lambda)`` (``lambda = 0.1`` -> ``C = 5``).
    """
    if lam <= 0:
        raise ValueError(f"lambda must be > 0, got {lam}")
    return 1.0 / (2.0 * lam)


class QuadraticHingeSVC(OneVsRestClassifierBase):
    """Linear one-vs-rest SVM, squared hinge, all classes trained together by L-BFGS.

    Minimises, over the ``d x P`` weight matrix and the ``P`` biases at once,

    ``1/2 ||W||_F^2 + C sum_{i,c} s_ic max(0, 1 - y_ic (x_i^T w_c + b_c))^2``

    (ScSPM [1]_, Eq. 13 with the quadratic hinge; predictions by
    Eq. 12, the largest ``w_c^T x + b_c``).  The reference code's
    ``lambda ||w||^2 + sum sq-hinge`` is the same problem with
    ``C = 1 / (2 lambda)``; its ``lambda = 0.1`` is ``C = 5``
    (:func:`paper_lambda_to_C`).

    Parameters
    ----------
    C : float or "auto", default="auto"
        Loss weight (scikit-learn convention, as ``LinearSVC(C=...)``).
        ``"auto"``: SVMlight's default ``C = 1 / mean_i ||x_i||^2`` [3]_, which
        follows the scale of the features: ``1`` for l2-normalised vectors, and
        large for l1-normalised histograms (``||x||_2^2 << 1``), on which a fixed
        ``C = 1`` regularises so strongly that most classes are never predicted
        (docs/benchmarks/defaults.md, "Scale-aware defaults").  The value used is ``C_``.
    class_weight : dict, "balanced" or None, default=None
        Multiply ``C`` for the positive samples of each one-vs-rest problem by
        the weight of its class (LIBLINEAR's semantics, the negatives keep
        ``C``; with two classes each sample's ``C`` is scaled by the weight of
        its own class), the same rule for every classifier of the package
        (:func:`~classify_images.classifiers.base.loss_weights`).  A dict key
        that is not a training label raises ``ValueError``.
    fit_intercept : bool, default=True
        Learn one bias per class.
    penalize_intercept : bool, default=False
        False (default): the bias is not regularised, as in the ScSPM reference
        code.  True: LIBLINEAR's convention, the bias is the weight of a
        constant feature of value ``intercept_scaling``, regularised like the
        other weights: the objective gains ``||b||^2 / (2 intercept_scaling^2)``
        (exactly ``LinearSVC``'s objective).
    intercept_scaling : float, default=1.0
        Used only with ``penalize_intercept=True`` (see above).
    solver : {"auto", "span", "features", "eigen"}, default="auto"
        Where L-BFGS runs (same objective, same stopping rule).
        ``"span"``: on coordinates of ``W`` in an orthonormal basis of the span of
        the training vectors, from the pivoted Cholesky factor of the Gram matrix
        ``X X^T`` (float32 products for float32 or float16 rows), preconditioned by
        the Cholesky factor of the Hessian's all-active approximation; ``X^T X``
        and ``W`` itself when ``n > d`` (:mod:`~classify_images.classifiers.span`).
        Its cost is about one ``X X^T`` product when ``n << d``.
        ``"features"``: on ``(W, b)`` themselves (Jacobi-preconditioned), two
        products with ``X`` per evaluation, memory ``O(d P)`` besides ``X``.
        ``"eigen"``: as ``"span"``, in the eigenbasis of ``X X^T`` or ``X^T X``
        (an eigendecomposition, several times the work of ``"span"``'s factorisation;
        :mod:`~classify_images.classifiers.eigenbasis`).  ``"auto"``: ``"span"``
        whenever its ``min(n, d)`` square matrices
        (:func:`~classify_images.classifiers.span.span_bytes`) fit in half the
        physical memory (:func:`span_memory_budget`), else ``"features"``: no number
        of rows switches to a slower solver while the memory holds.  Float16 rows are
        read as they are by ``"span"``, converted to float32 by the others.
    tol : float, default=1e-4
        Stop when ``||grad f||_2 <= tol * ||grad f(0)||_2`` (relative gradient
        norm of the objective in ``(W, b)``, the same rule for both solvers).
        How close to the optimum each ``tol`` ends: see docs/benchmarks/linear.md, section
        QuadraticHingeSVC.
    max_iter : int, default=1000
        Maximum number of L-BFGS iterations; a :class:`ConvergenceWarning` is
        raised when ``tol`` is not reached.
    verbose : int, default=0
        Show the objective on stderr while ``fit`` runs, every 10 iterations (1) or every
        iteration (>= 2); without it, logged (``classify_images.classifiers``) every 10
        iterations as DEBUG and every 10 s as INFO.
    n_epochs : int, default=10
        Passes over the row blocks of the averaged-SGD streaming solver (``streaming="sgd"``:
        :meth:`partial_fit` driven by :func:`~classify_images.pipeline.training.streaming_training.fit_streaming`);
        not used by :meth:`fit`.
    streaming : {"lbfgs", "sgd"}, default="lbfgs"
        How :func:`~classify_images.pipeline.training.streaming_training.fit_streaming` (``train
        --streaming``) learns from row blocks.  ``"lbfgs"``: :meth:`fit_blocks`, the L-BFGS of
        :meth:`fit` on objective (1) summed block by block — the model of :meth:`fit` within
        ``tol``, at one pass over the blocks per evaluation.  ``"sgd"``: ``n_epochs`` passes of
        averaged SGD (:meth:`partial_fit`) — fewer passes, a model near the optimum, not at it
        (docs/benchmarks/compressed-rows.md).  Not used by :meth:`fit`.

    Attributes
    ----------
    coef_ : ndarray of shape (n_problems, n_features), float64
        Weights ``w_c``, one row per class (a single row with two classes).
    intercept_ : ndarray of shape (n_problems,), float64
        Biases ``b_c`` (zeros when ``fit_intercept=False``).
    C_ : float
        The loss weight used (``C``, or its value for ``C="auto"``).
    n_iter_ : int
        L-BFGS iterations run.
    objective_ : float
        Final value of the objective above (scikit-learn's scale).
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int

    Notes
    -----
    ``solver="features"`` multiplies dense float32 input in float32 (reading
    ``X`` dominates the cost) and finishes with float64 products if float32
    rounding stalls the line search; objective and gradient are accumulated in
    float64.  ``solver="eigen"`` builds its matrices and coordinates in float64.
    Sparse input must be CSR (other formats are converted).

    ``fit(X, y, sample_weight)``: the loss term of row ``i`` is multiplied by
    ``sample_weight[i]`` (times its class weight), exactly: integer weights give
    the model of the repeated rows.

    References
    ----------
    .. [1] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear Spatial Pyramid Matching Using
       Sparse Coding for Image Classification", CVPR 2009.
    .. [3] T. Joachims, "Making Large-Scale SVM Learning Practical", in Advances in
       Kernel Methods, MIT Press, 1999 (SVMlight's default ``C = 1 / mean x.x``).
    """

    _requires_non_negative = False
    _accept_sparse = True
    _input_dtypes = (np.float64, np.float32, np.float16)
    _reads_column_blocks = True
    _fitted_shapes = {"coef_": ("P", "d"), "intercept_": ("P",), "n_iter_": (), "objective_": (), "C_": ()}
    # The one-vs-rest problems are separable sums: per class, L-BFGS on (w_c, b_c) alone
    # reaches the same minimiser (within the solver's tolerance); on one machine ``fit``
    # solves them jointly, a cluster solves groups of classes (fit_problem_group).
    _problem_axes = {"coef_": 0, "intercept_": 0}
    _group_reductions = {"n_iter_": max, "objective_": sum}

    _parameter_constraints: dict = {
        "C": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "fit_intercept": ["boolean"],
        "penalize_intercept": ["boolean"],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "solver": [StrOptions({"auto", "span", "features", "eigen"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "verbose": ["verbose"],
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
        "streaming": [StrOptions({"lbfgs", "sgd"})],
    }

    def __init__(
        self,
        C: float | str = "auto",
        *,
        class_weight: dict | str | None = None,
        fit_intercept: bool = True,
        penalize_intercept: bool = False,
        intercept_scaling: float = 1.0,
        solver: str = "auto",
        tol: float = 1e-4,
        max_iter: int = 1000,
        verbose: int = 0,
        n_epochs: int = 10,
        streaming: str = "lbfgs",
    ) -> None:
        self.C = C
        self.class_weight = class_weight
        self.fit_intercept = fit_intercept
        self.penalize_intercept = penalize_intercept
        self.intercept_scaling = intercept_scaling
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.verbose = verbose
        self.n_epochs = n_epochs
        self.streaming = streaming

    # ------------------------------------------------------------------ fit
    def _resolve_C(self, X, sample_weight: np.ndarray | None = None) -> float:
        """``C``, or for ``C="auto"`` SVMlight's default ``1 / mean_i ||x_i||^2`` [3]_ (weighted by ``sample_weight``)."""
        if self.C != "auto":
            return float(self.C)
        mean = auto_scale_mean(_squared_norms(X), sample_weight)
        return 1.0 / mean if mean > 0 else 1.0

    def _problem(
        self, X, Y: np.ndarray, C: float, weights: np.ndarray | None, basis: EigenBasis | None = None
    ) -> QuadraticHingeObjective:
        """Objective (1) with loss weights ``C * weights`` on ``X``, or on the coordinates ``basis.Z``, preconditioned by (3)."""
        penalty = float(self.intercept_scaling) ** -2 if self.penalize_intercept else 0.0
        cost = C if weights is None else C * weights
        if basis is not None:
            X, diagonal = basis.Z, basis.eigenvalues
        else:
            diagonal = column_squared_norms(X)
        scale = jacobi_scale(
            diagonal,
            cost,
            n_samples=Y.shape[0],
            n_problems=Y.shape[1],
            fit_intercept=self.fit_intercept,
            intercept_penalty=penalty,
        )
        return QuadraticHingeObjective(
            X, Y, cost, fit_intercept=self.fit_intercept, intercept_penalty=penalty, scale=scale
        )

    def solver_for(self, X: Any) -> str:
        """The solver ``fit`` uses on ``X``: ``solver``, or for ``"auto"`` ``"span"`` when its two
        ``min(n, d)`` square float64 matrices fit in :func:`span_memory_budget`, else ``"features"``."""
        if self.solver != "auto":
            return self.solver
        return "span" if span_bytes(*X.shape) <= span_memory_budget() else "features"

    def _fit_ovr(self, X, Y: np.ndarray, weights: np.ndarray | None, sample_weight: np.ndarray | None) -> None:
        start = time.perf_counter()
        self.__dict__.pop("_sgd_state", None)  # a partial_fit after fit continues from its weights
        self.C_ = self._resolve_C(X, sample_weight)
        solver = self.solver_for(X)
        if solver == "span":
            self._fit_span(X, Y, weights, start)
            return
        if is_column_blocks(X):  # these solvers read the rows whole
            X = np.asarray(X)
        if not sp.issparse(X) and X.dtype == np.float16:
            X = X.astype(np.float32)
        basis = EigenBasis(X) if solver == "eigen" else None
        problem = self._problem(X, Y, self.C_, weights, basis)
        result, converged = minimize_lbfgs(
            problem, tol=float(self.tol), max_iter=int(self.max_iter), verbose=int(self.verbose)
        )
        W, b = problem.unpack(result.x)
        if basis is not None:
            W = basis.weights(X, W)
        space = f"preconditioned eigenbasis (rank {basis.rank})" if basis else "feature space"
        self._keep_solution(W, b, problem, result, converged, space, start)

    def _fit_span(self, X, Y: np.ndarray, weights: np.ndarray | None, start: float) -> None:
        """L-BFGS on (1) in the Cholesky coordinates of the span of the rows, preconditioned by (5)
        (:mod:`~classify_images.classifiers.span`).  Inside
        :func:`~classify_images.classifiers.eigenbasis.reused_gram`, the basis of these rows is kept
        for the next fit (another ``C``: only the preconditioner and L-BFGS again)."""
        derived = derived_from_gram(X)
        basis = None if derived is None else derived.get("span")
        if basis is None:
            basis = SpanBasis(X)
            if derived is not None:
                derived["span"] = basis
        n, P = Y.shape
        cost = self.C_ if weights is None else self.C_ * weights
        totals = np.broadcast_to(np.asarray(cost, dtype=np.float64), (n, P)).sum(axis=0)
        R = basis.preconditioner(float(np.mean(totals)) / n, keep=derived is not None)
        penalty = penalty_of(self)
        intercept_scale = 1.0 / np.sqrt(np.maximum(penalty + 2.0 * totals, np.finfo(np.float64).tiny))
        problem = SpanObjective(
            basis.Z,
            basis.rows(Y),
            basis.rows(cost),
            R,
            fit_intercept=self.fit_intercept,
            intercept_penalty=penalty,
            intercept_scale=intercept_scale if self.fit_intercept else None,
            lower_trapezoidal=basis.lower_trapezoidal,
        )
        del R  # (the objective holds R^{-T}, in R's memory)
        result, converged = minimize_lbfgs(
            problem, tol=float(self.tol), max_iter=int(self.max_iter), verbose=int(self.verbose)
        )
        B, b = problem.unpack(result.x)
        if derived is None:  # kept for no other fit: the weights need only B and L_11
            problem.release()
            basis.release_coordinates()
        W = basis.weights(X, B)
        self._keep_solution(W, b, problem, result, converged, f"span of the rows (rank {basis.rank})", start)

    def _keep_solution(self, W, b, problem, result, converged: bool, space: str, start: float) -> None:
        """``coef_``, ``intercept_``, ``n_iter_``, ``objective_`` of an L-BFGS result, logged;
        a :class:`ConvergenceWarning` when ``tol`` was not reached."""
        self.coef_ = np.ascontiguousarray(W.T, dtype=np.float64)
        self.intercept_ = np.array(b, dtype=np.float64)
        self.n_iter_ = int(result.nit)
        self.objective_ = float(result.fun)
        level = logging.INFO if self.verbose else logging.DEBUG
        if _log.isEnabledFor(level):
            read = problem.n_gradient_rows / max(problem.n_samples * problem.n_evaluations, 1)
            _log.log(
                level,
                "QuadraticHingeSVC: L-BFGS in the %s: %d iterations, %d evaluations (gradients read "
                "%.0f %% of the rows), objective %.10g, %.2f s",
                space,
                result.nit,
                problem.n_evaluations,
                100 * read,
                self.objective_,
                time.perf_counter() - start,
            )
        if not converged:
            warnings.warn(
                f"QuadraticHingeSVC did not reach tol={self.tol} in {result.nit} L-BFGS "
                f"iterations ({result.message}); increase max_iter or tol",
                ConvergenceWarning,
                stacklevel=4,
            )

    def fit_blocks(self, blocks, classes: Any = None) -> QuadraticHingeSVC:
        """Fit on a re-iterable of ``(X_block, y_block)`` without assembling the rows.

        L-BFGS runs on objective (1) summed block by block
        (:class:`~classify_images.classifiers._quadratic_hinge_objective.BlockwiseQuadraticHingeObjective`),
        in the feature space with the Jacobi preconditioner (3), and stops by the rule of
        :meth:`fit`: the model is the one :meth:`fit` learns on the concatenated rows, within
        ``tol`` (:meth:`fit` may run in the eigenbasis: the same optimum, another path to it).
        Memory: one block, its margins and ``W``; ``"auto"`` ``C``, ``class_weight="balanced"``,
        the preconditioner and the labels come from one first pass over the blocks.

        Parameters
        ----------
        blocks : re-iterable of ``(X_block, y_block)``
            The same blocks in the same order at every pass
            (:class:`~classify_images.pipeline.training.streaming_training.RowBlocks`, a feature set's
            shards).  Passes: one survey, then one per L-BFGS evaluation.
        classes : array-like, default=None
            Every label; default the labels the blocks hold.

        Returns
        -------
        self : object
        """
        start = time.perf_counter()
        self._check_params()
        for name in ("platt_", "platt_folds_", "_sgd_state"):
            self.__dict__.pop(name, None)
        counts: dict = {}
        n_rows, squared_norms, diagonal, float32 = 0, 0.0, None, True
        for index, (X_block, y_block) in enumerate(blocks):
            X_block, y_block = self._validate_X(X_block, reset=index == 0, y=y_block, training=True)
            labels, n = np.unique(y_block, return_counts=True)
            for label, count in zip(labels.tolist(), n.tolist()):
                counts[label] = counts.get(label, 0) + count
            norms = column_squared_norms(X_block)
            diagonal = norms if diagonal is None else diagonal + norms
            squared_norms += float(norms.sum())
            n_rows += X_block.shape[0]
            float32 &= not sp.issparse(X_block) and X_block.dtype == np.float32
        if n_rows == 0:
            raise ValueError("fit_blocks: the blocks hold no training row")
        self.classes_ = np.unique(np.asarray(list(counts) if classes is None else classes))
        unknown = sorted(set(counts) - set(self.classes_.tolist()))
        if unknown:
            raise ValueError(
                f"the blocks hold labels {unknown[:5]!r} that are not in classes {self.classes_[:10].tolist()!r}"
            )
        if len(self.classes_) < 2:
            raise ValueError(f"QuadraticHingeSVC needs at least 2 classes; got classes={self.classes_.tolist()!r}")
        class_weight = self.class_weight
        if class_weight == "balanced":  # w_k = n / (K n_k) from the counts of all the blocks
            class_weight = {label: n_rows / (len(self.classes_) * counts[label]) for label in counts}
        mean = squared_norms / n_rows
        self.C_ = float(self.C) if self.C != "auto" else (1.0 / mean if mean > 0 else 1.0)
        n_classes = len(self.classes_)

        def prepare(X_block, y_block):
            X_block = self._validate_X(X_block, reset=False, training=True)
            Y = ovr_targets(np.searchsorted(self.classes_, np.asarray(y_block)), n_classes)
            weights = loss_weights(Y, self.classes_, class_weight, None)
            return X_block, Y, self.C_ if weights is None else self.C_ * weights

        # Sum of each problem's loss weights over all rows (the preconditioner's s_c):
        # one row per class, weighted by its count.
        per_class = ovr_targets(np.arange(n_classes), n_classes)
        weights = loss_weights(per_class, self.classes_, class_weight, None)
        n_per_class = np.array([counts.get(label, 0) for label in self.classes_.tolist()], dtype=np.float64)
        totals = self.C_ * (n_per_class @ (np.ones(per_class.shape) if weights is None else weights))
        penalty = float(self.intercept_scaling) ** -2 if self.penalize_intercept else 0.0
        scale = jacobi_scale(
            diagonal,
            (totals / n_rows)[None, :],
            n_samples=n_rows,
            n_problems=per_class.shape[1],
            fit_intercept=self.fit_intercept,
            intercept_penalty=penalty,
        )
        problem = BlockwiseQuadraticHingeObjective(
            blocks,
            prepare,
            n_samples=n_rows,
            n_features=diagonal.shape[0],
            n_problems=per_class.shape[1],
            float32=float32,
            fit_intercept=self.fit_intercept,
            intercept_penalty=penalty,
            scale=scale,
        )
        _log.info(
            "QuadraticHingeSVC: training %d one-vs-rest problem%s on %d rows of %d features, block by block",
            problem.n_problems,
            "s" if problem.n_problems > 1 else "",
            n_rows,
            problem.n_features,
        )
        result, converged = minimize_lbfgs(
            problem, tol=float(self.tol), max_iter=int(self.max_iter), verbose=int(self.verbose)
        )
        W, b = problem.unpack(result.x)
        self._keep_solution(W, b, problem, result, converged, "feature space, block by block", start)
        return self

    # ------------------------------------------------------------ streaming
    def auto_parameters(self, blocks) -> dict[str, float]:
        """``C`` as :meth:`fit` resolves it on the concatenated blocks (one pass for ``"auto"``).

        Give the result to :meth:`set_params` before streaming the blocks through
        :meth:`partial_fit` (:func:`~classify_images.pipeline.training.streaming_training.fit_streaming` does).
        """
        if self.C != "auto":
            return {"C": float(self.C)}
        total, count = 0.0, 0
        for X_block, _ in blocks:
            total += float(np.sum(_squared_norms(self._validate_X(X_block, reset=True))))
            count += X_block.shape[0]
        mean = total / max(count, 1)
        return {"C": 1.0 / mean if mean > 0 else 1.0}

    def partial_fit(
        self, X: Any, y: Any, classes: Any = None, sample_weight: Any = None, *, n_samples: int | None = None
    ) -> QuadraticHingeSVC:
        """Averaged stochastic gradient steps over a block of rows (the streaming solver).

        The objective of :meth:`fit`, divided by ``C n`` (``n`` rows per epoch), is
        ``f(W, b) = lambda/2 ||W||^2 + 1/n sum_i l_i(W, b)`` with ``lambda = 1 / (C n)``
        and ``l_i = sum_c s_ic max(0, 1 - y_ic (x_i^T w_c + b_c))^2``.  Each step takes
        :data:`SGD_BATCH_ROWS` rows ``B`` of the block, in order:

        .. math::

            W \\leftarrow (1 - \\eta_t \\lambda) W - \\frac{\\eta_t}{|B|} X_B^\\top G_B, \\qquad
            b \\leftarrow b - \\frac{\\eta_t}{|B|} G_B^\\top 1, \\qquad
            G = -2\\, s * Y * \\max(0, 1 - Y * (X W + 1 b^\\top)),

        with ``eta_t = eta_0 / (1 + lambda eta_0 t)^{3/4}`` (``t`` rows seen;
        ``eta_0 = 1 / (4 max s L)``: ``L`` the largest eigenvalue of ``X_B^T X_B / |B|`` over
        the first block's first 8 steps, the curvature of a step's loss in ``W`` up to the
        factor ``2 s``) [4]_; the bias, whose curvature is that of a constant feature
        (``L = 1``), takes steps ``eta_t L`` (a block-diagonal preconditioner), and the averaged iterate
        ``W_bar <- W_bar + (W - W_bar) / (t - n + 1)`` from the second epoch on
        (Polyak-Ruppert averaging, the model ``coef_`` / ``intercept_``) [4]_ [5]_.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_block, n_features)
        y : array-like of shape (n_block,), labels among ``classes``
        classes : array-like, default=None
            Every label; required on the first call.
        sample_weight : array-like of shape (n_block,), default=None
            Multiplies each row's loss term (``class_weight="balanced"`` is refused: it
            needs the class counts of all the data; give a dict).
        n_samples : int, optional
            Rows per epoch ``n`` (sets ``lambda``), read on the first call; default the
            rows of that first block (scikit-learn's convention: one call, one pass over the
            data given).

        Returns
        -------
        self : object

        Notes
        -----
        ``C="auto"`` is resolved from the first block alone; :meth:`auto_parameters`
        resolves it on all the blocks.  ``objective_`` is the mean of the mini-batch
        objectives ``f`` of the last epoch (an estimate), ``n_iter_`` the steps taken.
        After :meth:`fit`, ``partial_fit`` continues from its weights (``classes`` may then be
        left out), as HIK nSVM's does.

        References
        ----------
        .. [4] W. Xu, "Towards optimal one pass large scale learning with averaged
           stochastic gradient descent", arXiv:1107.2490, 2011; L. Bottou, "Stochastic
           gradient descent tricks", Neural Networks: Tricks of the Trade, 2012.
        .. [5] Y. Lin, F. Lv, S. Zhu, M. Yang, T. Cour, K. Yu, L. Cao and T. Huang,
           "Large-scale image classification: fast feature extraction and SVM training", CVPR 2011.
        """
        first = getattr(self, "_sgd_state", None) is None
        if first and n_samples is not None and n_samples < 1:
            raise ValueError(
                f"n_samples (rows per epoch, which sets the regularisation 1 / (C n)) must be at least 1, "
                f"not {n_samples}"
            )
        if first:
            self._check_params()
        X, Y, weights, sample_weight = self._partial_fit_problems(
            X, y, classes, sample_weight, first=first and getattr(self, "classes_", None) is None
        )
        cost = np.ones_like(Y, dtype=np.float64) if weights is None else weights
        if first:
            if getattr(self, "C_", None) is None:  # (after fit: fit's C_)
                self.C_ = self._resolve_C(X, sample_weight)
            # one step size per block of unknowns (W, then b), each half the inverse of its
            # curvature, so that together they stay below the step's inverse smoothness
            largest_cost = float(cost.max(initial=1.0))
            step = 1.0 / (4.0 * largest_cost * max(_batch_curvature(X), 1e-12))
            step_b = 1.0 / (4.0 * largest_cost * (1.0 + penalty_of(self)))
            P = Y.shape[1]
            fitted = getattr(self, "coef_", None) is not None and self.coef_.shape == (P, X.shape[1])
            W = np.ascontiguousarray(self.coef_.T, dtype=np.float64) if fitted else np.zeros((X.shape[1], P))
            b = np.array(self.intercept_, dtype=np.float64) if fitted else np.zeros(P)
            self._sgd_state = {
                "W": W,
                "b": b,
                "W_bar": W.copy(),
                "b_bar": b.copy(),
                "t": 0,
                "n": int(n_samples or X.shape[0] or 1),
                "eta0": step,
                "eta0_b": step_b,
                "steps": 0,
                "losses": [],
            }
        state = self._sgd_state
        lam = 1.0 / (self.C_ * state["n"])
        penalty = float(self.intercept_scaling) ** -2 * lam if self.penalize_intercept else 0.0
        W, b, W_bar, b_bar = state["W"], state["b"], state["W_bar"], state["b_bar"]
        for start in range(0, X.shape[0], SGD_BATCH_ROWS):
            rows = X[start : start + SGD_BATCH_ROWS]
            rows = rows.astype(np.float64) if sp.issparse(rows) else np.asarray(rows, dtype=np.float64)
            targets, costs = Y[start : start + SGD_BATCH_ROWS], cost[start : start + SGD_BATCH_ROWS]
            margins = np.maximum(0.0, 1.0 - targets * (np.asarray(rows @ W) + (b if self.fit_intercept else 0.0)))
            epoch_t = state["t"] % state["n"]
            if epoch_t < rows.shape[0]:
                state["losses"] = []
            state["losses"].append(lam / 2 * float(np.sum(W * W)) + float(np.sum(costs * margins**2)) / rows.shape[0])
            G = -2.0 * costs * targets * margins
            eta = state["eta0"] / (1.0 + lam * state["eta0"] * state["t"]) ** 0.75
            W *= 1.0 - eta * lam
            W -= (eta / rows.shape[0]) * np.asarray(rows.T @ G)
            if self.fit_intercept:
                b -= eta * state["eta0_b"] / state["eta0"] * (G.sum(axis=0) / rows.shape[0] + penalty * b)
            state["t"] += rows.shape[0]
            state["steps"] += 1
            averaged = state["t"] - state["n"]
            if averaged <= 0:
                W_bar[...], b_bar[...] = W, b
            else:
                mu = rows.shape[0] / (averaged + rows.shape[0])
                W_bar += mu * (W - W_bar)
                b_bar += mu * (b - b_bar)
        self.coef_ = np.ascontiguousarray(W_bar.T)
        self.intercept_ = b_bar.copy()
        self.n_iter_ = int(state["steps"])
        self.objective_ = float(np.mean(state["losses"])) * self.C_ * state["n"] if state["losses"] else 0.0
        return self

    def objective(self, X: Any, y: Any) -> float:
        """Value of the training objective of the fitted model on ``(X, y)``.

        Useful to compare solvers: any ``coef_``/``intercept_`` (e.g. copied
        from ``LinearSVC``) is evaluated with this estimator's ``C_`` (or ``C``
        resolved on ``X`` when it has none),
        ``class_weight`` and intercept penalty, with float64 products.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), labels among ``classes_``

        Returns
        -------
        value : float
        """
        X, y = self._validate_X(X, reset=False, y=y)
        unknown = np.setdiff1d(y, self.classes_)
        if unknown.size:
            raise ValueError(f"labels {unknown[:5].tolist()} are not among the fitted classes_")
        Y = ovr_targets(np.searchsorted(self.classes_, y), self.classes_.shape[0])
        C = getattr(self, "C_", None) or self._resolve_C(X)
        problem = self._problem(X, Y, C, loss_weights(Y, self.classes_, self.class_weight, None))
        problem.exact = True  # float64 products, whatever the dtype of X
        return problem.value(self.coef_.T, self.intercept_)

    # ------------------------------------------------------------- predict
    def _decision_ovr(self, X) -> np.ndarray:
        if not sp.issparse(X) and X.dtype == np.float16:  # float32 products, block by block
            coef = self.coef_.T.astype(np.float32)
            step = _HALF_ROWS
            blocks = [X[s : s + step].astype(np.float32) @ coef for s in range(0, X.shape[0], step)]
            return np.asarray(np.concatenate(blocks) if blocks else np.zeros((0, coef.shape[1])), np.float64) + (
                self.intercept_
            )
        coef = self.coef_.T.astype(X.dtype, copy=False)
        return np.asarray(X @ coef, dtype=np.float64) + self.intercept_
