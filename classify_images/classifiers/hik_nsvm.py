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

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_array

from . import _hik_nsvm_kernels as K
from ._compat import N_JOBS_CONSTRAINT, Interval, StrOptions, _fit_context
from ._parallel import log_problem_groups, map_tasks, n_threads, problem_groups
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
    X,
    y: np.ndarray,
    w: np.ndarray,
    b: float,
    alpha: float,
    margin: float,
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


@dataclass
class _EpochState:
    """Where :meth:`HIKnSVM.partial_fit` is in Algorithm 1 between two calls.

    ``W`` holds the weights without the l1 shrinks still pending in the epoch (the lazy
    shrink of :func:`._hik_nsvm_kernels.sgd_pass`: ``cum`` in total, ``last[d]`` of it
    applied to feature ``d``); ``coef_`` is ``W`` with them applied.
    """

    W: np.ndarray  #: (D, P) float64
    b: np.ndarray  #: (P,) float64
    last: np.ndarray  #: (D,) float64
    cum: float  #: total shrink of the current epoch so far
    epoch: int  #: epochs completed
    block: int  #: calls made in the current epoch
    seed: int  #: seed of the block shuffles


def _nonzero_values(X) -> np.ndarray:
    """The values whose median sets ``learning_rate="auto"``: stored entries of CSR, non-zeros of dense."""
    return X.data if sp.issparse(X) else X[X != 0]


def _row_l1_norms(X) -> np.ndarray:
    """``||x_i||_1`` of every row, float64 (each row's sum is its own: the same in a block of rows)."""
    return np.asarray(abs(X).sum(axis=1), dtype=np.float64).ravel()


def _auto_rate(median: float | None) -> float:
    """``learning_rate="auto"``: the median non-zero training value / 40 (1 without any)."""
    return median / _AUTO_RATE_DIVISOR if median is not None else 1.0


def _auto_margin(l1_norms: np.ndarray, sample_weight: np.ndarray | None) -> float:
    """``margin="auto"``: ``0.05 * mean_i ||x_i||_1`` (rows counted ``sample_weight`` times; 0.05 if that is 0)."""
    value = _AUTO_MARGIN * auto_scale_mean(l1_norms, sample_weight)
    return value if value > 0 else _AUTO_MARGIN


def _kth_smallest(blocks: Callable[[], Iterable[np.ndarray]], k: int, dtype: np.dtype) -> np.ndarray:
    """The ``k``-th smallest (0-based) of the non-negative values of ``dtype`` that ``blocks()`` yields.

    Radix selection on the bit patterns (for non-negative IEEE floats their order is the
    order of the unsigned integers of the same bits): 16 bits per pass over the blocks, two
    passes for float32, four for float64, with a histogram of 2^16 counts.  Exact, in memory
    independent of the number of values.
    """
    unsigned = np.dtype(f"u{dtype.itemsize}")
    bits = 8 * dtype.itemsize
    prefix = 0
    for shift in range(bits - 16, -1, -16):
        counts = np.zeros(1 << 16, dtype=np.int64)
        for values in blocks():
            pattern = np.ascontiguousarray(values, dtype=dtype).view(unsigned)
            if shift + 16 < bits:
                pattern = pattern[(pattern >> unsigned.type(shift + 16)) == prefix]
            counts += np.bincount(((pattern >> unsigned.type(shift)) & 0xFFFF).astype(np.intp), minlength=1 << 16)
        cumulative = np.cumsum(counts)
        digit = int(np.searchsorted(cumulative, k, side="right"))
        k -= int(cumulative[digit - 1]) if digit else 0
        prefix = (prefix << 16) | digit
    return np.array([prefix], dtype=unsigned).view(dtype)


def blockwise_median(blocks: Callable[[], Iterable[np.ndarray]], count: int, dtype: Any) -> float:
    """``np.median`` of the ``count`` non-negative values (of ``dtype``) that ``blocks()`` yields, exactly.

    The middle value, or for an even count ``np.median`` of the two middle values (the
    rounding ``np.median`` of them all gives), selected in passes over the blocks
    (:func:`_kth_smallest`) instead of sorting them all in memory.
    """
    dtype = np.dtype(dtype)
    middle = [_kth_smallest(blocks, count // 2, dtype)]
    if count % 2 == 0:
        middle.insert(0, _kth_smallest(blocks, count // 2 - 1, dtype))
    return float(np.median(np.concatenate(middle)))


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
        no longer depends on ``x`` (docs/benchmarks/defaults.md, sections "Scale-aware defaults"
        and "Classifier defaults by cross-validation", for the factor: the best factor
        differs between feature sets; no other factor studied was as good on all of
        them).  The value used is ``margin_``.
    learning_rate : float or "auto", default="auto"
        Initial step ``r`` of Algorithm 1, in the units of ``x`` (a coordinate moves by ``r``
        per update); divided by 10 after ``n_epochs // 2`` epochs.  The paper does not give
        its value.  ``"auto"``: ``r = median of the non-zero training values / 40``, which
        follows the scale of the features (a fixed rate right for one feature set is far off
        on another); see docs/benchmarks/hik-nsvm.md for the grid it was chosen on.
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
    shuffle : bool, default=True
        Visit the examples in a new random order every epoch (Algorithm 1).  ``False``: in
        their order, every epoch (the order :meth:`partial_fit` over row blocks reproduces
        exactly; see there).

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
        Only with ``record_objective=True`` (``fit`` only).
    n_iter_ : int
        Epochs completed (``n_epochs`` after ``fit``; counted on by ``partial_fit``).
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
    (``studies/study_hik_nsvm_relaxation.py``, with its kernels in
    ``benchmarks/_hik_research.py``) it did not improve accuracy, and for the same number of
    epochs Algorithm 1 alone reached a lower objective.  Class weights (formerly
    ``balanced=True``: positives and negatives of each problem weighing the same; now
    ``class_weight``, LIBLINEAR's rule) and ``fit_intercept`` are off by default, as in the paper: neither changed the accuracy
    beyond the split-to-split spread.  Accuracy, test time and model size against the
    explicit feature map + linear SVM and the exact HIK kernel SVM: see docs/benchmarks/hik-nsvm.md,
    section HIK nSVM.

    ``fit(X, y, sample_weight)``: ``c_i`` is multiplied by ``sample_weight[i]``, which
    scales row ``i``'s step.  This is the stochastic sub-gradient of the weighted loss, but
    not the same run as repeating the row (a repeated row is visited, and tested against
    the margin, twice per epoch): integer weights approximate repetition, they do not
    reproduce it.  Rows of weight 0 are left out (exactly as dropping them).

    Negative values are refused in ``fit``; at prediction they are clipped to 0 (a zero
    feature adds nothing to Eq. 7b).

    :meth:`partial_fit` runs the same steps over one block of rows at a time, carrying the
    lazy shrink and the epoch's learning rate from call to call: epochs of ``partial_fit``
    over blocks in order are ``fit`` on their concatenation with ``shuffle=False``, bit for
    bit (the rule and the maths are in its docstring; :meth:`auto_parameters` resolves the
    ``"auto"`` values from blocks).  This is what lets a training set larger than memory be
    learnt (``classify_images.pipeline.training.streaming_training.fit_streaming``).

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
    homogeneous_additive_kernel = True
    _accept_sparse = True
    _fitted_shapes = {"coef_": ("P", "d"), "intercept_": ("P",)}
    _problem_axes = {"coef_": 0, "intercept_": 0, "objective_curve_": 1}  # one shared shuffle seed

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
        "shuffle": ["boolean"],
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
        shuffle: bool = True,
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
        self.shuffle = shuffle

    # ------------------------------------------------------------ schedule
    def _initial_rate(self, X) -> float:
        """``r``: ``learning_rate``, or for ``"auto"`` the median non-zero value of ``X`` / 40."""
        if self.learning_rate != "auto":
            return float(self.learning_rate)
        values = _nonzero_values(X)
        return _auto_rate(float(np.median(values)) if values.size else None)

    def _margin(self, X, sample_weight: np.ndarray | None) -> float:
        """``margin``, or for ``"auto"`` ``0.05 * mean_i ||x_i||_1`` (rows counted ``sample_weight`` times)."""
        if self.margin != "auto":
            return float(self.margin)
        return _auto_margin(_row_l1_norms(X), sample_weight)

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
        n_problems = Y.shape[1]
        W = np.zeros((X.shape[1], n_problems), dtype=np.float64)  # (D, P): a feature's P weights contiguous
        b = np.zeros(n_problems, dtype=np.float64)
        curve = np.zeros((self.n_epochs if self.record_objective else 0, n_problems), dtype=np.float64)

        def run(rows, problems, W_group, b_group, lo, hi):
            part = np.zeros((curve.shape[0], hi - lo), dtype=np.float64)
            K.sgd(rows, problems, epochs, W_group, b_group, part, bool(self.shuffle))
            curve[:, lo:hi] = part

        self._run_problem_groups(X, Y, weights, W, b, run)
        self.coef_ = np.ascontiguousarray(W.T)
        self.intercept_ = b
        self.n_iter_ = int(self.n_epochs)
        self._epoch_state = None  # a later partial_fit continues from coef_
        if self.record_objective:
            self.objective_curve_ = curve

    def _run_problem_groups(
        self,
        X,
        Y: np.ndarray,
        weights: np.ndarray | None,
        W: np.ndarray,
        b: np.ndarray,
        run: Callable,
        *,
        sparsify: bool = True,
    ) -> list:
        """Train the problems (columns of ``Y``) on ``X`` in groups, one per thread.

        ``run(rows, problems, W_group, b_group, lo, hi)`` trains problems ``lo:hi`` in place on
        contiguous copies of ``W[:, lo:hi]`` and ``b[lo:hi]``, written back after; what it
        returns is returned, in the order of the groups.  The problems share the examples'
        order, so one pass serves a group (same weights as one by one).  ``sparsify``: train
        sparse enough dense ``X`` from a CSR copy (worth it for many passes, not for one).
        """
        if sparsify and not sp.issparse(X) and np.count_nonzero(X) < _CSR_DENSITY * X.size:
            # Same numbers (the kernels visit the same non-zeros in the same order), but the
            # epochs no longer scan the zeros of every row.
            X = sp.csr_matrix(X)
        rows = matrix_arrays(X)
        targets = Y.astype(np.float64)
        weights = np.ones_like(targets) if weights is None else weights
        threads = n_threads(self.n_jobs)
        bounds = problem_groups(Y.shape[1], threads)

        def solve(group: int):
            lo, hi = bounds[group], bounds[group + 1]
            problems = K.HingeProblems(
                np.ascontiguousarray(targets[:, lo:hi]),
                np.ascontiguousarray(weights[:, lo:hi]),
                float(self.alpha),
                self.margin_,
                bool(self.fit_intercept),
            )
            W_group, b_group = np.ascontiguousarray(W[:, lo:hi]), b[lo:hi].copy()
            result = run(rows, problems, W_group, b_group, lo, hi)
            W[:, lo:hi] = W_group
            b[lo:hi] = b_group
            return result

        return map_tasks(solve, len(bounds) - 1, threads, log_problem_groups(type(self).__name__, bounds))

    # -------------------------------------------------------- partial fit
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(
        self, X: Any, y: Any, classes: Any = None, sample_weight: Any = None, *, end_epoch: bool = True
    ) -> HIKnSVM:
        """Run the SGD steps of Algorithm 1 over a block of examples, continuing the current epoch.

        One call visits the rows of ``X`` once, at the learning rate of the current epoch
        (``r`` for the first ``n_epochs // 2`` epochs, ``r / 10`` after, and after
        ``n_epochs`` epochs too), in their order (``shuffle=False``) or in a random order of
        the block (``shuffle=True``: ``RandomState(s).permutation(len(X))`` with ``s`` from
        ``SeedSequence([seed, epoch, call of the epoch])``, ``seed`` drawn once from
        ``random_state``).  ``end_epoch=True`` (the default: one call is one pass over the
        data given, scikit-learn's convention) then ends the epoch: the l1 shrinks of
        Algorithm 1's line 6 still pending are applied and the epoch count ``n_iter_``
        advances.  With ``end_epoch=False`` the epoch continues with the next call.

        So for blocks ``X_1 … X_K`` in order, ``n_epochs`` epochs of
        ``partial_fit(X_k, y_k, end_epoch=(k == K))`` learn, bit for bit, the model of
        ``fit(vstack(X_1 … X_K), hstack(y_1 … y_K))`` with ``shuffle=False``: the same steps
        in the same order with the same lazy-shrink arithmetic, provided ``learning_rate`` and
        ``margin`` are the values ``fit`` resolves (:meth:`auto_parameters` computes them from
        the blocks; left at ``"auto"``, the first call resolves them from its own block).
        With ``shuffle=True`` the examples are shuffled within blocks, not across them.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), non-negative
        y : array-like of shape (n_samples,), labels among ``classes``
        classes : array-like of shape (n_classes,), default=None
            Every label of the data; required on the first call (later, ``None`` or the
            same labels).
        sample_weight : array-like of shape (n_samples,), default=None
            As for :meth:`fit`.  ``class_weight="balanced"`` is refused: it needs the class
            counts of all the data (give a dict).
        end_epoch : bool, default=True
            Whether this call ends an epoch.

        Returns
        -------
        self : object

        Notes
        -----
        After a call with ``end_epoch=False``, ``coef_`` has the epoch's shrinks so far
        applied (it predicts as the literal Algorithm 1 would at that point), while the
        weights the next call continues from keep them pending.  ``objective_curve_`` is
        not recorded.  After ``fit``, ``partial_fit`` continues from its weights at epoch
        ``n_epochs``.
        """
        first = getattr(self, "classes_", None) is None
        X, Y, weights, sample_weight = self._partial_fit_problems(X, y, classes, sample_weight, first=first)
        state = self._start_epoch_state(X, Y.shape[1], sample_weight)
        self.__dict__.pop("objective_curve_", None)
        if X.shape[0]:
            order = np.arange(X.shape[0])
            if self.shuffle:
                block_seed = np.random.SeedSequence([state.seed, state.epoch, state.block]).generate_state(1)[0]
                order = np.random.RandomState(block_seed).permutation(X.shape[0])
            rate = self._schedule(self.learning_rate_)[min(state.epoch, self.n_epochs - 1)]

            def run(rows, problems, W_group, b_group, lo, hi):
                last = state.last.copy()  # every group applies the same shrinks (same rows, same order)
                return K.sgd_pass(rows, order, problems, rate, W_group, b_group, last, state.cum), last

            # One pass: gathering a dense row's non-zeros costs less than converting the block to CSR.
            state.cum, state.last = self._run_problem_groups(X, Y, weights, state.W, state.b, run, sparsify=False)[0]
        if end_epoch:
            K.flush(state.W, state.last, state.cum)
            state.cum, state.epoch, state.block = 0.0, state.epoch + 1, 0
            current = state.W
        else:
            state.block += 1
            current = state.W.copy()
            K.flush(current, state.last.copy(), state.cum)
        self.coef_ = np.ascontiguousarray(current.T)
        self.intercept_ = state.b.copy()
        self.n_iter_ = state.epoch
        return self

    def _start_epoch_state(self, X, n_problems: int, sample_weight: np.ndarray | None) -> _EpochState:
        """The state :meth:`partial_fit` continues: its own, else ``fit``'s model (at epoch ``n_iter_``), else zeros."""
        state = getattr(self, "_epoch_state", None)
        if state is not None:
            return state
        if not hasattr(self, "learning_rate_"):  # a first call, or a model loaded from a file
            self.learning_rate_ = self._initial_rate(X)
            self.margin_ = self._margin(X, sample_weight)
        d = X.shape[1]
        if hasattr(self, "coef_"):
            W = np.ascontiguousarray(np.asarray(self.coef_, dtype=np.float64).T)
            b = np.array(self.intercept_, dtype=np.float64)
            epoch = int(getattr(self, "n_iter_", self.n_epochs))
        else:
            W, b, epoch = np.zeros((d, n_problems)), np.zeros(n_problems), 0
        self._epoch_state = _EpochState(W, b, np.zeros(d), 0.0, epoch, 0, self._shuffle_seed())
        return self._epoch_state

    def auto_parameters(self, blocks: Iterable[tuple[Any, Any]]) -> dict[str, float]:
        """``learning_rate`` and ``margin`` as :meth:`fit` on the concatenated blocks resolves them.

        For ``"auto"``, the values ``fit`` computes on the rows of all the blocks:
        ``margin_``, 0.05 times the mean l1 norm of the rows, from the rows' norms (8 bytes
        per row), and ``learning_rate_``, the median of the non-zero values / 40, selected
        exactly (:func:`blockwise_median`).  One pass over the blocks, then for the median
        2 (float32) or 4 (float64) passes per middle value, two middle values for an even
        count.  A number is
        returned as given.  Bit-identical to ``fit``'s when the blocks have the format
        (dense or CSR) and dtype ``fit`` is given.  Give the result to :meth:`set_params`
        before streaming the blocks through :meth:`partial_fit`.

        Parameters
        ----------
        blocks : re-iterable of ``(X_block, y_block)``
            Iterated several times, in the same order each time.

        Returns
        -------
        params : dict with keys ``"learning_rate"`` and ``"margin"``
        """

        def matrices():
            for X_block, _ in blocks:
                yield check_array(X_block, accept_sparse="csr", dtype=[np.float64, np.float32])

        result = {"learning_rate": self.learning_rate, "margin": self.margin}
        if "auto" not in result.values():
            return result
        norms, count, dtype = [], 0, np.dtype(np.float64)
        for X in matrices():  # one pass: the rows' l1 norms, the number of non-zero values
            norms.append(_row_l1_norms(X))
            count += _nonzero_values(X).size
            dtype = X.dtype
        if self.margin == "auto":
            result["margin"] = _auto_margin(np.concatenate(norms), None)
        if self.learning_rate == "auto":
            median = blockwise_median(lambda: (_nonzero_values(X) for X in matrices()), count, dtype) if count else None
            result["learning_rate"] = _auto_rate(median)
        return result

    def _decision_ovr(self, X) -> np.ndarray:
        return hik_decision(X, self.coef_, self.intercept_)
