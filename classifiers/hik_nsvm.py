"""HIK nSVM: the histogram-intersection SVM learnt directly in input space (Sharma & Jurie [1]_).

For a non-negative feature vector ``x`` (an l1-normalised histogram in the paper) the
classifier scores (Eq. 7b, plus an optional unregularised bias ``b``)

.. math::  f(w, x) = b + \\sum_d \\operatorname{sign}(w_d) \\min(x_d, |w_d|),

which is the histogram intersection kernel ``K(w, x)`` of Eq. 5 with a signed "pre-image"
``w`` of the feature-space weight vector.  Training minimises Eq. 7a,

.. math::  L(w) = \\lambda \\|w\\|_1 + \\frac1n \\sum_i c_i \\max(0, m - y_i f(w, x_i)),

(``c_i`` the product of the sample weight and the class weight, 1 by default) with the stochastic sub-gradient method of
Algorithm 1: ``n_epochs`` shuffled passes; for each example with ``y_i f(w, x_i) < m``,
``w_d <- w_d + r c_i y_i`` on the coordinates with ``|w_d| < x_id`` (Eq. 9); then the l1
shrink ``w_d <- sign(w_d) max(0, |w_d| - r lambda)`` on all coordinates; ``r`` is divided
by 10 after half of the epochs.  Prediction needs ``w`` alone: O(d) per example, O(nnz)
for a CSR row since a zero feature adds ``min(0, |w_d|) = 0``.

References
----------
.. [1] G. Sharma and F. Jurie, "Learning discriminative spatial representation for image
   classification", BMVC 2011.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import _hik_nsvm_kernels as K
from ._compat import N_JOBS_CONSTRAINT, Interval, StrOptions
from ._parallel import map_tasks, n_threads, problem_groups
from ._random import kernel_seed
from ._rows import matrix_arrays
from .base import OneVsRestClassifierBase, auto_scale_mean

__all__ = ["HIKnSVM", "hik_nsvm_objective", "hik_decision"]

#: Dense training data with fewer non-zeros than this fraction is trained from a CSR copy
#: (no larger than the dense array: 8 bytes per non-zero against 4 per entry).
_CSR_DENSITY = 0.5

#: ``margin="auto"``: m = this times the mean l1 norm of the training rows.
_AUTO_MARGIN = 0.05

#: ``learning_rate="auto"``: r = median non-zero training value / this.
_AUTO_RATE_DIVISOR = 40.0


def hik_decision(X, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """Eq. 7b for several problems: ``F[i, p] = b_p + sum_d sign(W_pd) min(X_id, |W_pd|)``.

    Parameters
    ----------
    X : ndarray (n, d) or CSR matrix with sorted indices, non-negative.
    coef : ndarray (P, d)
    intercept : ndarray (P,)

    Returns
    -------
    F : ndarray of float64, shape (n, P)
    """
    Wt = np.ascontiguousarray(np.asarray(coef, dtype=np.float64).T)
    b = np.asarray(intercept, dtype=np.float64).reshape(-1)
    out = np.empty((X.shape[0], Wt.shape[1]), dtype=np.float64)
    K.decision(matrix_arrays(X), Wt, b, out)
    return out


def hik_nsvm_objective(
    X, y: np.ndarray, w: np.ndarray, b: float, alpha: float, margin: float,
    sample_weight: np.ndarray | None = None,
) -> float:
    """Objective of Eq. 7a for one binary problem.

    ``alpha ||w||_1 + (1/n) sum_i c_i max(0, margin - y_i f(w, x_i))`` with ``f`` of Eq. 7b
    plus the bias ``b``; ``c_i = sample_weight[i]`` (default 1).
    """
    y = np.asarray(y, dtype=np.float64)
    sw = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    return float(K.objective(matrix_arrays(X), y, sw, w, float(b), float(alpha), float(margin)))


class HIKnSVM(OneVsRestClassifierBase):
    """Histogram-intersection SVM learnt in input space (nSVM, Sharma & Jurie [1]_, Alg. 1).

    One-vs-rest: one weight vector ``w`` (and bias) per class; the class of largest
    ``f(w, x)`` (Eq. 7b) is predicted.

    Parameters
    ----------
    alpha : float, default=1e-4
        lambda of Eq. 7a, weight of ``||w||_1`` (named as in ``SGDClassifier``).
    margin : float or "auto", default="auto"
        m of Eq. 7a, the hinge-loss margin, in the units of ``x``.  ``"auto"``:
        ``m = 0.05 * mean_i ||x_i||_1``, i.e. 0.05 on the paper's l1-normalised
        histograms (``sum_d x_d = 1``), and on the same relative scale for other
        features: a margin fixed in absolute units is reached by tiny weights on
        features of large values, whose intersection score ``min(x_d, |w_d|)`` then
        no longer depends on ``x`` (BENCHMARKS.md, section "Scale-aware defaults",
        for the factor).  The value used is ``margin_``.
    learning_rate : float or "auto", default="auto"
        Initial step ``r`` of Algorithm 1, in the units of ``x`` (a coordinate moves by ``r``
        per update); divided by 10 after ``n_epochs // 2`` epochs.  The paper does not give
        its value.  ``"auto"``: ``r = median of the non-zero training values / 40``, which
        follows the scale of the features (a fixed rate right for one feature set is far off
        on another); see BENCHMARKS.md, section HIK nSVM, for the grid it was chosen on.
    n_epochs : int, default=100
        Shuffled passes of Algorithm 1.
    fit_intercept : bool, default=False
        Add an unregularised bias ``b`` to Eq. 7b, learnt with the same steps
        (``b <- b + r c_i y_i`` when the margin is violated).  The paper has none.
    class_weight : dict, "balanced" or None, default=None
        Per-class multiplier ``c_i`` of the hinge loss of the positive rows of each
        one-vs-rest problem (LIBLINEAR's rule, the same for every classifier of the
        package: :func:`~classify_images.classifiers.base.loss_weights`).  The weight
        scales the step of Algorithm 1: ``w_d <- w_d + r c_i y_i``.
    random_state : int, RandomState instance or None, default=None
        Seeds the shuffles (same seed, same model, whatever ``n_jobs``).
    n_jobs : int or None, default=None
        Threads: the one-vs-rest problems are split into ``n_jobs`` groups trained in
        parallel (the numba kernels release the GIL).  The model does not depend on it.
    record_objective : bool, default=False
        Store ``objective_curve_``, Eq. 7a after every epoch (one extra scoring pass each).

    Attributes
    ----------
    learning_rate_ : float
        The initial step ``r`` used.
    margin_ : float
        The margin ``m`` used.
    coef_ : ndarray of float64, shape (n_problems, n_features)
        ``w`` of each problem (``n_problems = 1`` with two classes).
    intercept_ : ndarray of float64, shape (n_problems,)
        The biases (zeros when ``fit_intercept=False``).
    objective_curve_ : ndarray of float64, shape (n_epochs, n_problems)
        Only with ``record_objective=True``.
    classes_, n_features_in_ : see :class:`OneVsRestClassifierBase`.

    Notes
    -----
    The l1 shrink of Algorithm 1 (line 6) touches every coordinate after every example; it
    is applied lazily (k shrinks clipped at zero equal one shrink by their sum), so an
    epoch costs O(nnz(X)), and gives the same weights as the literal algorithm.  Dense
    training data with under 50 % non-zeros is trained from a CSR copy (same numbers).
    All problems visit the examples in the same shuffled order (one seed), so one pass
    over an example serves a whole group of problems, whose weights are stored feature by
    feature: faster than one problem at a time, with the same weights bit for bit.

    The successive-relaxation start of [1]_ §2.2 is not offered: in our study
    (``scripts/study_hik_nsvm_relaxation.py``, with its kernels in
    ``scripts/_hik_research.py``) it did not improve accuracy, and for the same number of
    epochs Algorithm 1 alone reached a lower objective.  Class weights (formerly
    ``balanced=True``: positives and negatives of each problem weighing the same; now
    ``class_weight``, LIBLINEAR's rule) and ``fit_intercept`` are off by default, as in the paper: neither changed the accuracy
    beyond the split-to-split spread.  Accuracy, test time and model size against the
    explicit feature map + linear SVM and the exact HIK kernel SVM: see BENCHMARKS.md,
    section HIK nSVM.

    ``fit(X, y, sample_weight)``: ``c_i`` is multiplied by ``sample_weight[i]``, which
    scales row ``i``'s step.  This is the stochastic sub-gradient of the weighted loss, but
    not the same run as repeating the row (a repeated row is visited, and tested against
    the margin, twice per epoch): integer weights approximate repetition, they do not
    reproduce it.  Rows of weight 0 are left out (exactly as dropping them).

    Negative values are refused in ``fit``; at prediction they are clipped to 0 (a zero
    feature adds nothing to Eq. 7b).

    References
    ----------
    .. [1] G. Sharma and F. Jurie, "Learning discriminative spatial representation for image
       classification", BMVC 2011.

    Examples
    --------
    >>> import numpy as np
    >>> from classify_images.classifiers import HIKnSVM
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((40, 8)); y = (X[:, 0] > X[:, 1]).astype(int)
    >>> X /= X.sum(axis=1, keepdims=True)              # l1-normalised histograms
    >>> clf = HIKnSVM(learning_rate=1e-3, random_state=0).fit(X, y)
    >>> clf.coef_.shape
    (1, 8)
    """

    _requires_non_negative = True
    _accept_sparse = True
    _fitted_arrays = ("coef_", "intercept_")

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "margin": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
        "fit_intercept": ["boolean"],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "random_state": ["random_state"],
        "n_jobs": N_JOBS_CONSTRAINT,
        "record_objective": ["boolean"],
    }

    def __init__(
        self,
        alpha: float = 1e-4,
        margin: float | str = "auto",
        learning_rate: float | str = "auto",
        n_epochs: int = 100,
        fit_intercept: bool = False,
        class_weight: dict | str | None = None,
        random_state: Any = None,
        n_jobs: int | None = None,
        record_objective: bool = False,
    ) -> None:
        self.alpha = alpha
        self.margin = margin
        self.learning_rate = learning_rate
        self.n_epochs = n_epochs
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.record_objective = record_objective

    # ------------------------------------------------------------ schedule
    def _initial_rate(self, X) -> float:
        """``r``: ``learning_rate``, or for ``"auto"`` the median non-zero value of ``X`` / 40."""
        if self.learning_rate != "auto":
            return float(self.learning_rate)
        values = X.data if sp.issparse(X) else X[X != 0]
        return float(np.median(values)) / _AUTO_RATE_DIVISOR if values.size else 1.0

    def _margin(self, X, sample_weight: np.ndarray | None) -> float:
        """``margin``, or for ``"auto"`` ``0.05 * mean_i ||x_i||_1`` (rows counted ``sample_weight`` times)."""
        if self.margin != "auto":
            return float(self.margin)
        l1 = np.asarray(abs(X).sum(axis=1), dtype=np.float64).ravel()
        value = _AUTO_MARGIN * auto_scale_mean(l1, sample_weight)
        return value if value > 0 else _AUTO_MARGIN

    def _schedule(self, r: float) -> np.ndarray:
        """Learning rate of every epoch: ``r``, then ``r / 10`` from epoch ``n_epochs // 2``."""
        half = self.n_epochs // 2
        return np.array([r if e < half else r / 10.0 for e in range(self.n_epochs)], dtype=np.float64)

    def _shuffle_seed(self) -> int:
        """Seed of the epoch shuffles, drawn from ``random_state`` (shared by all problems)."""
        return kernel_seed(self.random_state)

    # ------------------------------------------------------------ fitting
    def _fit_ovr(self, X, Y: np.ndarray, weights: np.ndarray | None, sample_weight: np.ndarray | None) -> None:
        self.learning_rate_ = self._initial_rate(X)
        self.margin_ = self._margin(X, sample_weight)
        epochs = K.Epochs(self._schedule(self.learning_rate_), self._shuffle_seed())
        if not sp.issparse(X) and np.count_nonzero(X) < _CSR_DENSITY * X.size:
            # Same numbers (the kernels visit the same non-zeros in the same order), but the
            # epochs no longer scan the zeros of every row.
            X = sp.csr_matrix(X)
        rows = matrix_arrays(X)
        d = X.shape[1]
        n_problems = Y.shape[1]
        targets = Y.astype(np.float64)
        weights = np.ones_like(targets) if weights is None else weights
        # The problems share the examples' order, so one pass serves a group of them
        # (same weights as one by one); threads get one group each.
        threads = n_threads(self.n_jobs)
        bounds = problem_groups(n_problems, threads)
        coef = np.zeros((n_problems, d), dtype=np.float64)
        intercept = np.zeros(n_problems, dtype=np.float64)
        curve = np.zeros((self.n_epochs if self.record_objective else 0, n_problems), dtype=np.float64)

        def solve(group: int) -> None:
            lo, hi = bounds[group], bounds[group + 1]
            problems = K.HingeProblems(
                np.ascontiguousarray(targets[:, lo:hi]), np.ascontiguousarray(weights[:, lo:hi]),
                float(self.alpha), self.margin_, bool(self.fit_intercept),
            )
            W = np.zeros((d, hi - lo), dtype=np.float64)  # (D, P): a feature's P weights contiguous
            b = np.zeros(hi - lo, dtype=np.float64)
            part = np.zeros((curve.shape[0], hi - lo), dtype=np.float64)
            K.sgd(rows, problems, epochs, W, b, part)
            coef[lo:hi] = W.T
            intercept[lo:hi] = b
            curve[:, lo:hi] = part

        map_tasks(solve, len(bounds) - 1, threads)
        self.coef_ = coef
        self.intercept_ = intercept
        if self.record_objective:
            self.objective_curve_ = curve

    def _decision_ovr(self, X) -> np.ndarray:
        return hik_decision(X, self.coef_, self.intercept_)
