"""PmSVM and PmSVM-LUT: power mean kernel SVM by dual coordinate descent.

Following [1]_ (cited below as "CVPR") and [2]_ (cited as "LUT").

The power mean kernel (CVPR Eq. 2) of two non-negative vectors is

.. math::  M_p(x, y) = \\sum_{j=1}^d \\Bigl(\\frac{x_j^p + y_j^p}{2}\\Bigr)^{1/p},

``p = -1`` is the chi-square kernel ``2xy/(x+y)``, ``p -> -inf`` the histogram
intersection ``min(x, y)`` (``p = -8`` in practice), ``p -> 0`` Hellinger's
``sqrt(xy)``.  Zeros are replaced by ``eps`` (CVPR Sec. 3.1: ``0^p := eps^p``,
``eps = 0.001``); here every value below ``eps`` is raised to ``eps``, which
keeps the kernel monotone in each argument.

Each one-vs-rest problem is the bias-free SVM dual (CVPR Eq. 3), solved by dual
coordinate descent (CVPR Algorithm 3).  Its gradient needs
``g(x) = sum_t alpha_t y_t M_p(x, x_t) = sum_j g_j(x_j)`` (Eqs. 4-5); each
``g_j`` is replaced by the polynomial of degree ``m`` in ``t = ln(x + 0.05)``
interpolating it at ``m + 1`` nodes ``c`` (Eqs. 6-7, Algorithm 2):
``g_j(x) ~ a_j . (1, t, ..., t^m)`` with ``a_j = X^-1 g_j(c)``, ``X`` the
Vandermonde matrix ``X_kt = ln(c_k + 0.05)^t``.  A change ``Delta alpha_i``
changes ``a_j`` by ``Delta alpha_i y_i X^-1 M_p(c, x_ij)`` (Eq. 11), and a test
vector is scored by ``sum_j a_j . (1, t_j, ..., t_j^m)`` (Eq. 10): the
training set is not kept, the model is the ``d x (m+1)`` coefficients per class.

PmSVM pre-computes ``ln(x_ij + 0.05)`` and ``X^-1 M_p(c, x_ij)`` for every
stored training value (CVPR Sec. 4.4).  PmSVM-LUT (``lut_bins=b``, LUT
Algorithm 3) reads both from two tables over ``[0, 1]`` indexed by
``floor(b x)`` (LUT Eqs. 18-19), so it stores per training value only its
bin (2 bytes), computed once per fit rather than at every visit.

Implementation choices (see :class:`PmSVM` for the parameters):

* Features are scaled by the training maximum of each dimension; test values
  are scaled alike and clipped to ``[0, 1]``.
* The zero entries of a vector all share the increment ``X^-1 M_p(c, eps)`` and
  the basis value ``phi(eps)``: training keeps ``a_j`` as ``b_j + S v0`` and
  prediction adds the precomputed score of the all-zero vector, so both cost
  O(m) per stored non-zero (details in :mod:`._pmsvm_kernels`).
* The solver keeps only the coefficients of ``t^1 .. t^m`` (those of ``t^0``
  never enter a gradient, ``phi(x)_0 - phi(eps)_0 = 0``), in float32; those of
  ``t^0`` are computed afterwards from the dual variables, in float64:
  ``a_j0 = sum_i alpha_i y_i u(x_ij)_0`` (CVPR Eqs. 8 and 11).
* ``M_p(c_k, x)`` is computed exactly; the CVPR code's shortcut
  ``M_p(c_0, x) ~ c_0`` is not used.
* The LUT tables sample each bin at its centre ``(h + 1/2)/b`` (the last entry,
  ``h = b``, at ``x = 1``) rather than at its left edge ``h/b`` (LUT Eq. 18),
  which halves the table error at no cost.
* ``nodes="chebyshev"`` places the Chebyshev nodes of degree ``m + 1``
  (LUT Eq. 16) on the interval of the polynomial's variable,
  ``t in [ln 0.05, ln 1.05]`` (the image of ``x in [0, 1]``), where the
  interpolation-error bound of LUT Eqs. 11-15 applies.  For ``m = 2`` they are
  ``x = 0.0114, 0.179, 0.806`` -- close to the CVPR's ad hoc ``0.01, 0.06, 0.75``.

References
----------
.. [1] J. Wu, "Power Mean SVM for Large Scale Visual Classification", CVPR 2012.
.. [2] H. Yang and J. Wu, "Practical Large Scale Classification with Additive
   Kernels", JMLR W&CP 25 (ACML), 2012.
.. [3] T. Joachims, "Making Large-Scale SVM Learning Practical", in Advances in
   Kernel Methods, MIT Press, 1999 (SVMlight's default ``C = 1 / mean K(x, x)``; ``C="auto"``
   is 4 times it).
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_array, check_non_negative

from . import _pmsvm_kernels as _k
from ._compat import N_JOBS_CONSTRAINT, Interval, InvalidParameterError, Options, StrOptions
from ._parallel import even_bounds, log_problem_groups, map_tasks, n_threads, padded_width, problem_groups
from ._random import kernel_seed
from ._rows import RowArrays, matrix_arrays
from .base import OneVsRestClassifierBase, auto_scale_mean, require_memory

__all__ = [
    "ADHOC_NODES",
    "PolynomialApproximation",
    "PmSVM",
    "interpolation_nodes",
    "lut_bin_values",
    "power_mean_kernel",
]

_GROUP_PROBLEMS = 16
"""Most problems solved together.  One visit of an example serves the whole group and the
inner loops run over the group's contiguous coefficients ``b[j, q, :]``, which the compiler
vectorises; groups much smaller (sized for a core's cache) or much larger train slower
(see docs/benchmarks/pmsvm.md)."""

_SOLVER_DTYPE = np.float32
"""Type of the solver's working coefficients (:func:`._pmsvm_kernels.dcd_solve`); the model
is float64 whatever it is."""

_BLOCKS_PER_THREAD = 4
"""Prediction splits the rows into this many blocks per thread."""

_AUTO_C_FACTOR = 4.0
"""``C="auto"``: ``C = this / mean_i M_p(x_i, x_i)``, a multiple of SVMlight's default chosen in
docs/benchmarks/defaults.md, "Classifier defaults by cross-validation": the smallest multiple tied
with the most accurate one (a larger C costs solver iterations)."""

ADHOC_NODES = (0.01, 0.06, 0.75)
"""The CVPR paper's interpolation nodes for ``m = 2`` (Algorithm 2, line 1)."""


# ------------------------------------------------------------------ kernel
def power_mean_kernel(X: Any, Y: Any = None, p: float = -1.0, eps: float = 1e-3) -> np.ndarray:
    """Power mean kernel matrix ``K[a, b] = sum_j M_p(x~_aj, y~_bj)`` (CVPR Eq. 2).

    ``x~ = max(x, eps)`` replaces zeros (CVPR Sec. 3.1); ``eps = 0`` gives the
    kernels of the limit ``M_p(x, 0) = 0`` (the textbook chi-square and
    intersection kernels).  No feature scaling is applied.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n_x, d), non-negative
    Y : {array-like, sparse matrix} of shape (n_y, d), default=None (``Y = X``)
    p : float, default=-1.0
        ``p <= 0``; ``-1`` chi-square, ``-inf`` intersection (``min``), ``0``
        Hellinger (``sqrt(xy)``).
    eps : float, default=1e-3
        Floor replacing zero entries.

    Returns
    -------
    K : ndarray of float64, shape (n_x, n_y)
    """
    if not p <= 0:
        raise ValueError(f"power_mean_kernel: p must be <= 0 (a positive definite kernel); got {p}")
    if not eps >= 0:
        raise ValueError(f"power_mean_kernel: eps must be >= 0; got {eps}")
    X = check_array(X, accept_sparse="csr", dtype=np.float64)
    Y = X if Y is None else check_array(Y, accept_sparse="csr", dtype=np.float64)
    check_non_negative(X, "power_mean_kernel (X)")
    check_non_negative(Y, "power_mean_kernel (Y)")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"power_mean_kernel: X has {X.shape[1]} features but Y has {Y.shape[1]}")
    if sp.issparse(X) or sp.issparse(Y):
        X, Y = sp.csr_matrix(X), sp.csr_matrix(Y)
        X.sort_indices()
        Y.sort_indices()
        return _k.power_mean_gram_csr(matrix_arrays(X), matrix_arrays(Y), X.shape[1], float(p), float(eps))
    return _k.power_mean_gram_dense(X, Y, float(p), float(eps))


# ------------------------------------------------------- approximation
def interpolation_nodes(nodes: str, m: int) -> np.ndarray:
    """The ``m + 1`` interpolation nodes ``c`` (feature values in ``(0, 1)``).

    ``"adhoc"``: CVPR Algorithm 2's ``0.01, 0.06, 0.75`` (``m = 2`` only).
    ``"chebyshev"``: the roots of ``T_{m+1}`` (LUT Eq. 13) mapped affinely
    (LUT Eq. 16) onto ``t in [ln 0.05, ln 1.05]``, returned as ``x = e^t - 0.05``.
    """
    if nodes == "adhoc":
        if m != 2:
            raise ValueError(f"nodes='adhoc' are the CVPR paper's 3 nodes, for m=2 only; got m={m} (use 'chebyshev')")
        return np.array(ADHOC_NODES, dtype=np.float64)
    if nodes == "chebyshev":
        lo, hi = np.log(_k.LOG_SHIFT), np.log(1.0 + _k.LOG_SHIFT)
        i = np.arange(1, m + 2, dtype=np.float64)
        t = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos((2.0 * i - 1.0) / (2.0 * (m + 1)) * np.pi)
        return np.sort(np.exp(t) - _k.LOG_SHIFT)
    raise ValueError(f"nodes must be 'adhoc' or 'chebyshev'; got {nodes!r}")


class PolynomialApproximation(NamedTuple):
    """Everything of the gradient approximation that depends on (p, m, nodes, eps) only.

    A named tuple, so that the numba kernels take it as one argument.

    Attributes
    ----------
    p : float
        Power of the kernel.
    m : int
        Degree of the polynomial.
    eps : float
        Floor replacing zero entries.
    node_values : ndarray (m+1,)
        Nodes ``c_k`` (feature values).
    vinv : ndarray (m+1, m+1)
        ``X^-1``, ``X_kt = ln(c_k + 0.05)^t`` (CVPR Algorithm 2, line 3).
    phi0 : ndarray (m+1,)
        ``phi(eps) = (1, t0, ..., t0^m)``, ``t0 = ln(eps + 0.05)``: the basis at a zero entry.
    m_zero : ndarray (m+1,)
        ``M_p(c_k, eps)``.
    v0 : ndarray (m+1,)
        ``X^-1 M_p(c, eps)``: the coefficient increment of a zero entry (Eq. 11).
    """

    p: float
    m: int
    eps: float
    node_values: np.ndarray
    vinv: np.ndarray
    phi0: np.ndarray
    m_zero: np.ndarray
    v0: np.ndarray

    @classmethod
    def build(cls, p: float, m: int, nodes: str, eps: float) -> PolynomialApproximation:
        c = interpolation_nodes(nodes, m)
        t = np.log(c + _k.LOG_SHIFT)
        vinv = np.linalg.inv(np.vander(t, m + 1, increasing=True))
        phi0 = np.log(eps + _k.LOG_SHIFT) ** np.arange(m + 1, dtype=np.float64)
        m_zero = np.array([_k.power_mean(ck, eps, float(p)) for ck in c])
        return cls(float(p), int(m), float(eps), c, vinv, phi0, m_zero, vinv @ m_zero)

    def delta_rows(self, x_hat: np.ndarray) -> np.ndarray:
        """Rows ``[phi(x)[1:] - phi0[1:], X^-1 (M_p(c, x~) - M_p(c, eps))]`` of scaled values."""
        return _k.delta_rows_values(np.asarray(x_hat, dtype=np.float64), self)

    def polynomial(self, coef: np.ndarray, x_hat: np.ndarray) -> np.ndarray:
        """Evaluate ``coef . phi(x)`` (CVPR Eq. 9 for one dimension) at scaled values ``x_hat``."""
        t = np.log(np.maximum(np.minimum(np.asarray(x_hat, dtype=np.float64), 1.0), self.eps) + _k.LOG_SHIFT)
        return np.polynomial.polynomial.polyval(t, np.asarray(coef, dtype=np.float64))

    def interpolate(self, g_at_nodes: np.ndarray) -> np.ndarray:
        """Coefficients ``a = X^-1 g(c)`` (CVPR Eq. 7) of the interpolant of ``g``."""
        return self.vinv @ np.asarray(g_at_nodes, dtype=np.float64)


def lut_bin_values(n_bins: int) -> np.ndarray:
    """The feature value each LUT entry ``h = 0..b`` stands for: ``(h + 1/2)/b``, and ``1`` for ``h = b``."""
    values = (np.arange(n_bins + 1, dtype=np.float64) + 0.5) / n_bins
    values[-1] = 1.0
    return values


# -------------------------------------------------------------- estimator
class PmSVM(OneVsRestClassifierBase):
    """Power mean kernel SVM (PmSVM, and PmSVM-LUT with ``lut_bins``), one-vs-rest.

    Per class, dual coordinate descent on the bias-free SVM dual with the power
    mean kernel ``M_p`` (CVPR Eq. 3, Algorithm 3), the gradient approximated by
    a degree-``m`` polynomial in ``ln(x + 0.05)`` per dimension (Eqs. 6-11);
    see the module docstring for the maths.

    Parameters
    ----------
    p : float, default=-1.0
        Power of the kernel, ``p <= 0``: ``-1`` chi-square (fastest), ``-8``
        approximates histogram intersection (most accurate, CVPR Sec. 5.5),
        ``-inf`` (``float("-inf")``, ``-np.inf``) is intersection exactly
        (``M_p(x, y) = min(x, y)``), ``0`` Hellinger.
    C : float or "auto", default="auto"
        Loss weight (``C_i`` of row ``i`` is ``C`` times its sample and class
        weights: the upper bound of ``alpha_i`` for ``loss="l1"``, ``1/(2 C_i)``
        added to ``Q_ii`` for ``loss="l2"``).  ``"auto"``: 4 times SVMlight's
        default, ``C = 4 / mean_i M_p(x_i, x_i)`` [3]_ on the scaled features (the
        kernel's diagonal, ``~ ||x_i||_1``), so that ``C Q_ii`` is the same whatever
        the number of non-zero dimensions.  The papers' ``C = 0.01`` (CVPR Sec. 5.1,
        LUT Sec. 6) is right for histograms of thousands of dimensions but fits
        nothing on a few dimensions (docs/benchmarks/defaults.md, "Scale-aware defaults").
        The factor is the smallest multiple of SVMlight's ``1 / mean K(x, x)`` that
        was at least as accurate as SVMlight's value on every feature set and kernel
        studied and tied (within the noise of the study) with the best on average,
        larger multiples costing solver time for no accuracy (section "Classifier
        defaults by cross-validation"); SVMlight's value itself underfits these
        histograms.  The value used is ``C_``.
    class_weight : dict, "balanced" or None, default=None
        Per-class multiplier of ``C`` for the positive rows of each one-vs-rest
        problem (LIBLINEAR's rule, the same for every classifier of the package:
        :func:`~classify_images.classifiers.base.loss_weights`).
    loss : {"l2", "l1"}, default="l2"
        ``"l1"``: hinge loss, box ``0 <= alpha_i <= C`` (the papers' Eq. 3 /
        Eq. 5).  ``"l2"``: squared hinge, ``alpha_i >= 0`` and ``1/(2C)``
        added to ``Q_ii`` (LIBLINEAR's L2-loss dual).  The default follows the
        authors' released PmSVM code, which solves the L2-loss dual by default.
    m : int, default=2
        Degree of the polynomial approximating each ``g_j`` (``m + 1`` nodes).
    nodes : {"chebyshev", "adhoc"}, default="chebyshev"
        Interpolation nodes: the LUT paper's Chebyshev nodes (Sec. 4.2) or the
        CVPR paper's ``0.01, 0.06, 0.75`` (``m = 2`` only).
    lut_bins : int or None, default=None
        ``None``: PmSVM (per-value pre-computation, CVPR Sec. 4.4).  An integer
        ``b`` (the LUT paper uses 1000): PmSVM-LUT, tables of ``b + 1`` entries.
    eps : float, default=1e-3
        Zero entries (and values below ``eps``) count as ``eps`` in ``M_p``.
    tol : float, default=0.1
        Stop when the projected gradient's spread ``max PG - min PG <= tol``
        (LIBLINEAR's dual stopping rule and default ``eps``).
    max_iter : int, default=1000
        Maximum outer iterations (passes over the active examples) per class.
    n_jobs : int or None, default=None
        Threads: the one-vs-rest problems are split into ``n_jobs`` groups
        trained in parallel (prediction splits the rows).  The model does not
        depend on ``n_jobs``.
    random_state : int, RandomState or None, default=None
        Seeds the random permutation of every outer iteration (shared by all
        problems).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features, m + 1, n_problems)
        Polynomial coefficients: ``coef_[j, k, c]`` is ``a_{j,k}`` of problem ``c``
        (CVPR Algorithm 3's output), laid out as the solver and prediction use it.
    feature_max_ : ndarray of shape (n_features,)
        Training maximum of each dimension (the scale into ``[0, 1]``).
    C_ : float
        The loss weight used (``C``, or its value for ``C="auto"``).
    n_iter_ : ndarray of int of shape (n_problems,)
        Outer iterations run for each class.
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int

    Notes
    -----
    Features are scaled by the training maximum of each dimension; at prediction
    the scaled values are clipped to ``[0, 1]``: values above the training
    maximum count as the maximum, and negative values (a test row of a
    ``MinMaxScaler`` fitted on the training rows can fall slightly below 0)
    count as 0.  Negative *training* values are refused
    (:class:`~classify_images.classifiers.base.NegativeFeaturesError`).

    ``fit(X, y, sample_weight)``: ``C_i = C s_i`` per row (exact: integer weights
    give the dual of the repeated rows); rows of weight 0 are left out.

    Memory during training, per stored training value: the input (value and
    column index; dense input is converted to CSR of its non-zeros) plus,
    without LUT, ``2m + 1`` float32 pre-computed numbers; with LUT its bin
    (2 bytes).  Per
    group of problems: ``d m`` float32 working coefficients per (padded)
    problem; per class: ``d (m+1)`` float64 coefficients, ``n`` dual variables
    and ``n`` shrinking flags.

    Problems are solved in groups of up to 16 (one pass over an example
    serves the whole group,
    :func:`._pmsvm_kernels.dcd_solve`); each problem's iterations, shrinking
    and stopping are its own, and the model does not depend on the grouping
    or on ``n_jobs``.  Training and prediction cost O(m) per stored
    non-zero and problem, independent of ``d``; the solver reads the training
    rows' non-zeros only, whatever the input format (dense input is converted
    to CSR in one pass, and with LUT its values to bins), and prediction scans
    dense rows entry by entry (zeros skipped).
    """

    _requires_non_negative = True
    homogeneous_additive_kernel = True
    _accept_sparse = True
    _fitted_shapes = {"coef_": ("d", "m+1", "P"), "feature_max_": ("d",), "n_iter_": ("P",), "C_": ()}

    @classmethod
    def _shape_symbols(cls, arrays, params):
        return {"m+1": int(params.get("m", 0)) + 1}

    _problem_axes = {"coef_": 2, "n_iter_": 0}  # each problem its own dual CD, one shared seed

    _parameter_constraints: dict = {
        "p": [Interval(Real, None, 0, closed="right"), Options(Real, {-np.inf})],
        "C": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "loss": [StrOptions({"l1", "l2"})],
        "m": [Interval(Integral, 1, 12, closed="both")],
        "nodes": [StrOptions({"chebyshev", "adhoc"})],
        "lut_bins": [Interval(Integral, 1, None, closed="left"), None],
        "eps": [Interval(Real, 0, 1, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": N_JOBS_CONSTRAINT,
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        p: float = -1.0,
        C: float | str = "auto",
        *,
        class_weight: dict | str | None = None,
        loss: str = "l2",
        m: int = 2,
        nodes: str = "chebyshev",
        lut_bins: int | None = None,
        eps: float = 1e-3,
        tol: float = 0.1,
        max_iter: int = 1000,
        n_jobs: int | None = None,
        random_state: Any = None,
    ) -> None:
        self.p = p
        self.C = C
        self.class_weight = class_weight
        self.loss = loss
        self.m = m
        self.nodes = nodes
        self.lut_bins = lut_bins
        self.eps = eps
        self.tol = tol
        self.max_iter = max_iter
        self.n_jobs = n_jobs
        self.random_state = random_state

    # ------------------------------------------------------------- helpers
    def _check_params(self) -> None:
        """``nodes="adhoc"`` exists for ``m = 2`` only (checked before any work)."""
        if self.nodes == "adhoc" and self.m != 2:
            raise InvalidParameterError(
                f"nodes='adhoc' are the CVPR paper's 3 nodes, for m=2 only; got m={self.m} (use 'chebyshev')"
            )

    def approximation(self) -> PolynomialApproximation:
        """The :class:`PolynomialApproximation` of the current parameters."""
        return PolynomialApproximation.build(float(self.p), int(self.m), self.nodes, float(self.eps))

    def lut_table(self, approx: PolynomialApproximation | None = None) -> np.ndarray:
        """Tables T1 and T2 of the LUT paper (Eqs. 18-19) side by side, in delta form.

        Row ``h`` (``h = 0..b``) is ``[T1_h^q - t0^q (q=1..m), T2_h - v0]``: the
        powers of ``T1_h = ln(x_h + 0.05)`` and ``T2_h = X^-1 M_p(c, x_h)`` at the
        bin value ``x_h`` (:func:`lut_bin_values`), relative to a zero entry.
        """
        approx = approx or self.approximation()
        return approx.delta_rows(lut_bin_values(int(self.lut_bins)))

    def _scales(self) -> tuple[np.ndarray, np.ndarray]:
        """``1 / max_j`` (1 for an all-zero training column) and ``b / max_j`` for the LUT bins."""
        fmax = np.asarray(self.feature_max_, dtype=np.float64)
        inv_max = np.divide(1.0, fmax, out=np.ones_like(fmax), where=fmax > 0)
        bin_scale = inv_max * float(self.lut_bins) if self.lut_bins is not None else np.empty(0)
        return inv_max, bin_scale

    # ------------------------------------------------------------------ fit
    def _fit_ovr(self, X, Y: np.ndarray, weights: np.ndarray | None, sample_weight: np.ndarray | None) -> None:
        approx = self.approximation()
        d = X.shape[1]
        # the solver and the pre-computation (CVPR Sec. 4.4) read the stored non-zeros only
        rows, self.feature_max_ = _k.nonzero_rows_and_max(matrix_arrays(X), d)
        inv_max, _ = self._scales()
        table = self._delta_table(approx, rows, inv_max)
        q_kernel, r, z = _k.row_constants(rows, table, inv_max, approx, d)
        constants = _k.RowConstants(q_kernel, r, z, d * float(approx.v0 @ approx.phi0))
        entries = _k.solver_entries(rows, table)
        del rows, table  # the solver reads ``entries`` only
        n_problems = Y.shape[1]
        self.C_ = (
            float(self.C)
            if self.C != "auto"
            else _AUTO_C_FACTOR / max(auto_scale_mean(q_kernel, sample_weight), np.finfo(float).tiny)
        )
        cost = np.full(Y.shape, self.C_) if weights is None else self.C_ * weights
        problem = _k.DualProblem(
            self.loss == "l2", cost, float(self.tol), int(self.max_iter), kernel_seed(self.random_state)
        )
        threads = n_threads(self.n_jobs)
        bounds = problem_groups(n_problems, threads, _GROUP_PROBLEMS)
        n_iter = np.empty(n_problems, dtype=np.int64)

        def solve(group: int) -> np.ndarray:
            lo, hi = bounds[group], bounds[group + 1]
            width = padded_width(hi - lo, _k.LANES)
            Y_group = np.ascontiguousarray(Y[:, lo:hi])
            alpha = np.empty((Y.shape[0], width))
            b = np.empty((d, approx.m, width), dtype=_SOLVER_DTYPE)
            group_problem = problem._replace(cost=np.ascontiguousarray(problem.cost[:, lo:hi]))
            _k.dcd_solve(entries, Y_group, constants, group_problem, b, alpha, n_iter[lo:hi])
            alpha[:, : hi - lo] *= Y_group
            coef = _k.dual_coefficients(entries, alpha, b, approx.v0, d)
            return _k.drop_padding(coef, hi - lo)  # in place: no second copy of the coefficients

        groups = map_tasks(solve, len(bounds) - 1, threads, log_problem_groups("PmSVM", bounds))
        self.coef_ = groups[0] if len(groups) == 1 else np.concatenate(groups, axis=2)
        self.n_iter_ = n_iter
        if np.any(self.n_iter_ >= self.max_iter):
            warnings.warn(
                f"PmSVM reached max_iter={self.max_iter} before tol={self.tol} for "
                f"{int(np.sum(self.n_iter_ >= self.max_iter))} of {n_problems} problems; increase max_iter",
                ConvergenceWarning,
                stacklevel=3,
            )

    def _delta_table(self, approx: PolynomialApproximation, rows: RowArrays | None, inv_max) -> _k.DeltaTable:
        """The LUT (``lut_bins`` set), else the delta rows of the stored entries of CSR ``rows``.

        With ``rows=None`` and no LUT (prediction), an empty table: test values are
        computed on the fly.
        """
        _, bin_scale = self._scales()
        if self.lut_bins is not None:  # b + 1 rows of at most 2m + 2 float64 values (fit, and a model file's lut_bins)
            require_memory(
                f"lut_bins={self.lut_bins}", (float(self.lut_bins) + 1) * (2 * approx.m + 2) * 8.0, "its look-up table"
            )
            return _k.DeltaTable(True, bin_scale, int(self.lut_bins), self.lut_table(approx))
        if rows is None:
            values = np.empty((0, 2 * approx.m + 1), dtype=np.float32)
        else:
            values = _k.delta_rows_csr(rows, inv_max, approx)
        return _k.DeltaTable(False, bin_scale, 0, values)

    # ------------------------------------------------------------- predict
    def _decision_ovr(self, X) -> np.ndarray:
        approx = self.approximation()
        inv_max, _ = self._scales()
        table = self._delta_table(approx, None, inv_max)
        coef = np.ascontiguousarray(self.coef_, dtype=np.float64)
        zero_scores = np.einsum("jqc,q->c", coef, approx.phi0)
        indptr, indices, data, dense = matrix_arrays(X)
        n = X.shape[0]
        threads = n_threads(self.n_jobs)
        bounds = even_bounds(n, max(min(n, _BLOCKS_PER_THREAD * threads), 1) if threads > 1 else 1)

        def block(k: int) -> np.ndarray:
            lo, hi = bounds[k], bounds[k + 1]
            base = indptr[lo]
            rows = RowArrays(
                indptr[lo : hi + 1] - base,
                indices if dense else indices[base : indptr[hi]],
                data[base : indptr[hi]],
                dense,
            )
            return _k.decision_values(rows, table, inv_max, approx, coef, zero_scores)

        return np.concatenate(map_tasks(block, len(bounds) - 1, threads), axis=0)
