"""MBKL: Multiple Binary Kernel Learning with random decision stumps [1]_.

The kernel is a learnt non-negative combination of
binary kernels, one per random decision stump (Eq. 3 and the sentence after it):

.. math::

    K(x, y) = \\sum_k \\theta_k\\, [\\sigma_k(x) = \\sigma_k(y)], \\qquad
    \\sigma_k(x) = [x_{f_k} > t_k], \\qquad \\theta_k \\ge 0,

with the explicit map (Eq. 4) and weights (Eq. 5)

.. math::

    \\phi(x) = [\\sqrt{\\theta_k}\\,\\sigma_k(x),\\ \\sqrt{\\theta_k}\\,\\bar\\sigma_k(x)]_k,
    \\qquad w = [c^1_k,\\ c^0_k]_k, \\qquad
    f(x) = w^\\top \\phi(x) + b .

Learning follows the paper's Algorithm 1:

Stumps
    ``f_k`` uniform over the dimensions, ``t_k`` uniform over the training range
    ``[min_i x_{i f_k}, max_i x_{i f_k}]`` of that dimension; no labels are used
    (section 4).  Optional rule ``threshold_rule="quantile"`` (not in the paper):
    ``t_k = Q_{f_k}(u_k)``, ``u_k`` uniform on [0, 1], the empirical quantile
    (linear interpolation between order statistics) of the training values of
    dimension ``f_k``: on sparse, heavy-tailed histogram bins the uniform rule puts
    most thresholds above most values, this one spreads them like the data.
    Optional rule ``threshold_rule="distinct_quantile"`` (not in the paper): the
    same quantile of the *distinct* training values of ``f_k`` (each value counted
    once).  On a bin that is zero in most images the plain quantile is 0 for most
    ``u`` and repeats the stump ``[x_f > 0]``; counting the zeros once draws that
    stump with probability ``1 / n_distinct`` and spreads the others over the
    non-zero values.  Stumps depend on a dimension only through the order of its
    values, so with either quantile rule a monotone per-dimension rescaling or
    power transform of the input changes nothing.
Step 0 (Table 1)
    per class ``y`` and stump ``k``, ``(c^1, c^0) = (a, -a)`` with
    ``a in {-1, 0, +1}`` from the fraction of positives ``p / t_p`` and of
    negatives ``n / t_n`` that fire the stump (:func:`initial_signs`).  Stumps
    with ``a = 0`` for every class are dropped.
Step 1 (Eq. 10)
    ``theta`` from one two-class l1-regularised SVM on
    ``s_k(x) = c^1_{k,y} sigma_k(x) + c^0_{k,y} bar sigma_k(x) = a_{k,y} (2 sigma_k(x) - 1)``
    over a class-balanced subsample (positives: a sample with its own class's
    ``s``; negatives: a sample with another class's ``s``); negative ``theta``
    are set to 0 and stumps with ``theta_k = 0`` are discarded.
Step 2
    a one-vs-all linear SVM on ``phi(x)`` over the selected stumps.  Optional
    ``theta_exponent = gamma`` (not in the paper, default 1): the kernel weights
    used are ``theta_k ** gamma``; ``gamma = 0`` keeps Step 1's *selection*
    (``theta_k > 0``) with equal weights, i.e. the paper's ``theta = 1`` baseline
    on the stumps Step 1 selected.  The l1 solution of Eq. 10 concentrates its
    mass on few stumps, and with ``phi`` scaled by ``sqrt(theta)`` Step 2
    penalises the others ``1 / theta_k`` times more (docs/benchmarks/mbkl.md, "MBKL: where
    the gap to PmSVM comes from").

The kernel is additive over input dimensions: ``f`` is a sum of one step
function per dimension, like the decision function of an additive-kernel SVM
(HIK, chi2), but the shape of each step function is learnt rather than fixed
by the kernel.  Problems whose per-dimension marginals carry no information
(XOR) are out of its reach, and Step 0 keeps only stumps whose threshold lies
between the class "medians" (Table 1).

Prediction evaluates each selected stump once per example, with no ``phi``:
``f_c(x) = b_c + sum_k sqrt(theta_k) c^0_{k,c} + sum_{k: sigma_k(x)=1}
sqrt(theta_k) (c^1_{k,c} - c^0_{k,c})``.

Defaults, and the paper's setting
---------------------------------
The defaults are not the paper's: ``threshold_rule="distinct_quantile"``,
``init_rule="balanced"``, ``theta_exponent=0`` (Step 1 selects the stumps, Step 2
weighs them equally), ``C = C_kernel = 100``, chosen by the measurements in
docs/benchmarks/mbkl.md, "MBKL: where the gap to PmSVM comes from" (15-Scenes BoF-SPM
histograms and ScSPM codes, 3 splits, each setting against the paper's and against
PmSVM on the same splits).  The paper's Algorithm 1 is ``MBKL(**PAPER_SETTING)``:
``threshold_rule="range"``, ``init_rule="table1"``, ``theta_exponent=1``, with
``C`` and ``C_kernel`` chosen by cross-validation as the paper does.

Deviations and choices, each for a stated reason
------------------------------------------------
* **Table 1's sign cells.**  Our text copy of the paper prints ``sign(a) = -1``
  for (``p/t_p >= 0.5``, ``n/t_n < 0.5``) and ``+1`` for the opposite cell.  With
  Eq. 8 (``w^T phi = +a`` when the stump fires, ``-a`` when not) that would make
  a stump firing on most positives and few negatives vote *against* its class,
  every informative ``s_k`` would be anti-correlated with the labels, and
  Step 1 would return negative ``theta`` that are then clipped to 0.  We use the
  reading consistent with Eq. 8 and the max-margin argument the paper gives:
  ``a = +1`` when the stump fires on at least half of the positives and on less
  than half of the negatives, ``a = -1`` in the converse case, ``a = 0`` when
  both fractions are on the same side of 0.5 (the two ``a = 0`` cells are as
  printed).  ``tests/test_mbkl.py`` shows that the printed signs leave no
  ``theta > 0`` on a 3-class problem where ours keep at least 10.
* **Step 1's loss.**  Eq. 10 has the l1 (hinge) loss.  LIBLINEAR, which the
  paper uses, has no l1-regularised hinge-loss solver (its l1-regularised
  solvers are the squared hinge, ``-s 5``, and logistic regression, ``-s 6``),
  so we minimise LIBLINEAR's ``-s 5 -B 1`` objective
  ``||w||_1 + C_kernel sum_r max(0, 1 - y_r (theta^T s_r + b))^2`` (the bias is
  the weight of a constant feature, penalised like the others), which is
  what ``LinearSVC(penalty="l1", loss="squared_hinge", dual=False)`` solves.
  We run our own numba port of LIBLINEAR's solver [2]_
  (:func:`~classify_images.classifiers._mbkl_kernels.l1r_l2svc_stumps`) rather
  than ``LinearSVC`` because it reads ``s`` on the fly from one byte per
  (stump, sample): ``LinearSVC`` needs the matrix as float64 plus LIBLINEAR's
  row and column copies (about 40 bytes per non-zero, i.e. 40 times more
  memory; see docs/benchmarks/mbkl.md).  The rows are grouped by
  problem, so a column skips the problems for which its Step-0 sign is 0.
  The test-suite checks that both solvers reach the same objective.
* **Step 2 on half the columns.**  Because ``sigma + bar sigma = 1``, a linear
  SVM on ``phi`` with a free bias has its optimum at ``c^0_k = -c^1_k`` (any
  ``c^1 + c^0`` only adds a constant, which the bias absorbs at no norm cost),
  so it is exactly the SVM on ``psi_k(x) = sqrt(theta_k / 2) (2 sigma_k(x) - 1)``
  with ``c^1_k = -c^0_k = w_k / sqrt 2``.  We train on ``psi`` (one float32
  column per selected stump instead of two) with our
  :class:`~classify_images.classifiers.quadratic_hinge.QuadraticHingeSVC` (squared
  hinge, free bias, L-BFGS), and store ``c^1, c^0`` in the coordinates of
  Eq. 5.  ``psi`` is scaled to unit norm (``sum_k theta_k`` is divided out), so
  that ``C`` keeps its meaning whatever the number of stumps and the scale of
  ``theta``; the stored ``c`` are in the unscaled Eq. 4 map.
* **Step-0 rule** ``init_rule="balanced"`` (not in the paper; the default):
  ``a = sign(p/t_p - n/t_n)``.  On sparse histograms few stumps fire for half
  of any class (a bin is zero in most images), and Table 1 drops nearly all of
  them (see docs/benchmarks/mbkl.md, sections "MBKL" and "MBKL: where the gap to PmSVM
  comes from").
* The paper's Step-2 paragraph writes ``theta_k sigma_k(x)``; Eq. 4 (and the
  kernel ``K``) need ``sqrt(theta_k)``, which we use.

Memory: the stump outputs of the training set take ``n_stumps x n_samples``
bytes, Step 1 adds O(rows) floats, Step 2 the ``n_samples x n_selected``
float32 matrix ``psi``.

References
----------
.. [1] G. Roig, X. Boix and L. Van Gool, "Random Decision Stumps for Kernel
   Learning and Efficient SVM", ACCV 2012.
.. [2] G.-X. Yuan, K.-W. Chang, C.-J. Hsieh and C.-J. Lin, "A Comparison of
   Optimization Methods and Software for Large-scale L1-regularized Linear
   Classification", JMLR 11, 2010.
"""

from __future__ import annotations

import logging
import time
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state
from sklearn.utils.sparsefuncs import min_max_axis
from sklearn.utils.validation import check_is_fitted

from . import _mbkl_kernels as kern
from ._compat import Interval, StrOptions
from ._random import kernel_seed
from ._rows import matrix_arrays
from .base import OneVsRestClassifierBase, require_memory
from .quadratic_hinge import QuadraticHingeSVC

_logger = logging.getLogger(__name__)

__all__ = [
    "MBKL",
    "DEFAULT_STUMPS_PER_FEATURE",
    "DEFAULT_MAX_STUMPS",
    "PAPER_SETTING",
    "initial_signs",
    "kernel_rows",
]

#: Default number of stumps per input dimension (Table 3: 10x to 100x the
#: descriptor length; 10x is the paper's lower end).
DEFAULT_STUMPS_PER_FEATURE = 10
#: Cap on the *default* number of stumps (an explicit ``n_stumps`` is not
#: capped).  2**18 keeps 10x the 21 504 dimensions of a 1024-word 3-level
#: spatial pyramid, and bounds the training stump outputs at 256 KiB per sample.
DEFAULT_MAX_STUMPS = 2**18
#: The paper's Algorithm 1 (section 4, Table 1, Eq. 10 with its ``theta`` in Step 2):
#: ``MBKL(**PAPER_SETTING)``; choose ``C`` and ``C_kernel`` by cross-validation.
PAPER_SETTING = {"threshold_rule": "range", "init_rule": "table1", "theta_exponent": 1.0, "C": 1.0, "C_kernel": 1.0}


def initial_signs(
    fired_pos: np.ndarray, n_pos: np.ndarray, fired_neg: np.ndarray, n_neg: np.ndarray, rule: str = "table1"
) -> np.ndarray:
    """Step 0: the sign ``a`` of ``(c^1, c^0) = (a, -a)`` for each stump and problem (Table 1).

    Parameters
    ----------
    fired_pos, fired_neg : ndarray of int, shape (n_stumps, n_problems)
        ``p`` and ``n``: how many positive / negative training samples of each
        one-vs-rest problem fire each stump (``sigma_k(x) = 1``).
    n_pos, n_neg : ndarray of int, shape (n_problems,)
        ``t_p`` and ``t_n``: the numbers of positive / negative samples.
    rule : {"table1", "balanced"}, default="table1"
        ``"table1"``: the paper's rule (below).  ``"balanced"`` (not in the
        paper): ``a = sign(p/t_p - n/t_n)``, the sign that decreases the
        class-balanced hinge loss of the single-stump SVM of Eq. 7 at
        ``a = 0``; it keeps every stump whose firing rates differ, which
        Table 1 does not when both rates are on the same side of 1/2.

    Returns
    -------
    a : ndarray of int8, shape (n_stumps, n_problems)
        Table 1: ``+1`` if ``p/t_p >= 0.5`` and ``n/t_n < 0.5`` (the stump
        fires for the class), ``-1`` if ``p/t_p < 0.5`` and ``n/t_n >= 0.5``,
        else ``0``.  See the module docstring for why the sign cells differ
        from our text copy of Table 1.  Fractions are compared in exact
        integer arithmetic.
    """
    if rule == "balanced":
        diff = np.asarray(fired_pos) * np.asarray(n_neg) - np.asarray(fired_neg) * np.asarray(n_pos)
        return np.sign(diff).astype(np.int8)
    if rule != "table1":
        raise ValueError(f"rule must be 'table1' or 'balanced', got {rule!r}")
    pos_high = 2 * np.asarray(fired_pos) >= np.asarray(n_pos)
    neg_high = 2 * np.asarray(fired_neg) >= np.asarray(n_neg)
    a = np.zeros(pos_high.shape, dtype=np.int8)
    a[pos_high & ~neg_high] = 1
    a[~pos_high & neg_high] = -1
    return a


def _balanced_allocation(total: int, capacities: np.ndarray) -> np.ndarray:
    """Split ``total`` items over groups as evenly as their ``capacities`` allow (water filling)."""
    capacities = np.asarray(capacities, dtype=np.int64)
    alloc = np.zeros_like(capacities)
    remaining = min(int(total), int(capacities.sum()))
    open_groups = np.flatnonzero(capacities > 0)
    while remaining > 0 and open_groups.size:
        share = remaining // open_groups.size
        if share == 0:  # fewer items than groups: one each to the first ones
            alloc[open_groups[:remaining]] += 1
            break
        room = capacities[open_groups] - alloc[open_groups]
        take = np.minimum(room, share)
        alloc[open_groups] += take
        remaining -= int(take.sum())
        open_groups = open_groups[alloc[open_groups] < capacities[open_groups]]
    return alloc


def kernel_rows(
    y_index: np.ndarray, n_problems: int, neg_pos_ratio: float, n_kernel_samples: int | None, rng: np.random.RandomState
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1's class-balanced training rows (section 5, "Step 1").

    For each one-vs-rest problem ``c`` (with two classes, one problem whose
    positive class is 1): its positive samples, and ``neg_pos_ratio`` times as
    many negatives drawn without replacement from the other classes, spread as
    evenly over those classes as their sizes allow.  When the total exceeds
    ``n_kernel_samples`` the positives of every problem are subsampled by the
    same factor (at least one each) and the negatives follow the ratio.

    Returns
    -------
    row_sample : ndarray of int64
        Training sample of each row.
    row_label : ndarray of int8
        ``+1`` (the sample belongs to the problem's class) or ``-1``.
    problem_ptr : ndarray of int64, shape (n_problems + 1,)
        Rows ``problem_ptr[c]:problem_ptr[c + 1]`` use problem ``c``'s ``s``.
    """
    n_classes = int(y_index.max()) + 1 if y_index.size else 0
    members = [np.flatnonzero(y_index == c) for c in range(max(n_classes, 2))]
    positives = [members[1]] if n_problems == 1 else members[:n_problems]
    n_pos = np.array([p.size for p in positives], dtype=np.int64)
    total = int(np.sum(n_pos + np.ceil(neg_pos_ratio * n_pos)))
    factor = 1.0 if n_kernel_samples is None or total <= n_kernel_samples else n_kernel_samples / total
    samples, labels, sizes = [], [], []
    for c in range(n_problems):
        pos_class = 1 if n_problems == 1 else c
        keep = min(n_pos[c], max(1, int(np.floor(n_pos[c] * factor))))
        pos = np.sort(rng.choice(positives[c], size=keep, replace=False))
        others = [g for g in range(len(members)) if g != pos_class]
        caps = np.array([members[g].size for g in others], dtype=np.int64)
        alloc = _balanced_allocation(int(np.ceil(neg_pos_ratio * keep)), caps)
        neg = [np.sort(rng.choice(members[g], size=m, replace=False)) for g, m in zip(others, alloc) if m]
        neg = np.concatenate(neg) if neg else np.empty(0, dtype=np.int64)
        samples += [pos, neg]
        labels += [np.ones(pos.size, dtype=np.int8), -np.ones(neg.size, dtype=np.int8)]
        sizes.append(pos.size + neg.size)
    problem_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return np.concatenate(samples).astype(np.int64), np.concatenate(labels), problem_ptr


def _quantile_thresholds(X, features: np.ndarray, levels: np.ndarray, distinct: bool = False) -> np.ndarray:
    """``Q_f(u)`` for each (feature ``f``, level ``u``): the empirical quantile of column ``f``
    of ``X`` (implicit zeros of a sparse ``X`` included), linear interpolation; with
    ``distinct``, of the column's distinct values (each value counted once)."""
    thresholds = np.empty(features.size, dtype=np.float64)
    columns = sp.csc_matrix(X) if sp.issparse(X) else None
    by_feature = np.argsort(features, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(features[by_feature]) != 0])
    for group in np.split(by_feature, starts[1:]):
        f = features[group[0]]
        if columns is None:
            values = np.asarray(X[:, f], dtype=np.float64)
        else:
            stored = columns.data[columns.indptr[f] : columns.indptr[f + 1]]
            values = np.concatenate([stored, np.zeros(X.shape[0] - stored.size)]).astype(np.float64)
        if distinct:
            values = np.unique(values)
        thresholds[group] = np.quantile(values, levels[group])
    return thresholds


class MBKL(OneVsRestClassifierBase):
    """Multiple Binary Kernel Learning with random decision stumps ([1]_, Algorithm 1).

    See the module docstring for the maths, the paper's equation numbers and
    the deviations.

    Parameters
    ----------
    n_stumps : int or None, default=None
        Number of random stumps generated.  None: ``10 * n_features`` capped at
        :data:`DEFAULT_MAX_STUMPS` (2**18 = 262 144); Table 3 of the paper uses
        10x to 100x the descriptor length.  Training keeps one byte per
        (stump, training sample).
    C : float, default=100.0
        Loss weight of the Step-2 SVM (``1/2 ||w||^2 + C sum sq-hinge``) on the
        unit-norm map ``psi`` (module docstring).
    class_weight : dict, "balanced" or None, default=None
        Per-class multiplier of ``C`` for the positive rows of each one-vs-rest
        problem of the Step-2 SVM (LIBLINEAR's rule, the same for every classifier
        of the package: :func:`~classify_images.classifiers.base.loss_weights`).
        Steps 0-1 do not use it: ``neg_pos_ratio`` already balances Step 1's rows.
    C_kernel : float, default=100.0
        Loss weight of the Step-1 l1-regularised SVM (Eq. 10, squared hinge):
        larger keeps more stumps.
    learn_theta : bool, default=True
        False: ``theta = 1`` for every stump, Steps 0-1 skipped and all stumps
        kept (the paper's "BMs as features of a linear SVM" baseline).
    theta_exponent : float, default=0.0
        ``gamma >= 0``: Step 2 uses the kernel weights ``theta_k ** gamma`` of the
        stumps Step 1 selected (``theta_k > 0``).  1 is the paper; 0 keeps the
        selection with equal weights (module docstring).  Ignored with
        ``learn_theta=False``.
    threshold_rule : {"range", "quantile", "distinct_quantile"}, default="distinct_quantile"
        How stump thresholds are drawn: uniform on each dimension's training range
        (the paper's rule), at a uniform random quantile of its training values, or
        of its distinct training values (module docstring).
    init_rule : {"table1", "balanced"}, default="balanced"
        Step 0's rule (:func:`initial_signs`): the paper's Table 1, or
        ``"balanced"``, ``a = sign(p/t_p - n/t_n)`` (our addition: Table 1
        drops a stump whenever the class and the rest fire it both on less, or
        both on more, than half of their samples -- on sparse histograms,
        where most thresholds lie above most values, that is nearly all stumps).
    neg_pos_ratio : float, default=2.0
        Negatives per positive in the subsample of Step 1 (paper: 2, Table 3): a
        sampling ratio, not a loss weight (see ``class_weight`` for those).
    n_kernel_samples : int or None, default=5000
        Cap on the number of Step-1 rows (None: no cap).
    tol, max_iter : float, int, default=1e-4, 1000
        Stopping rule of the Step-2 L-BFGS (:class:`QuadraticHingeSVC`).
    tol_kernel, max_iter_kernel : float, int, default=0.01, 1000
        Stopping rule of the Step-1 solver (LIBLINEAR's ``-s 5`` default eps
        0.01 on the relative sub-gradient norm).
    random_state : int, RandomState instance or None, default=None
        Seeds the stumps, the Step-1 subsample and the Step-1 coordinate order.
    verbose : int, default=0
        Show the stages and their times on stderr while ``fit`` runs (they are logged to
        ``classify_images.classifiers.mbkl`` as DEBUG records otherwise).

    Attributes
    ----------
    stump_features_ : ndarray of int32, shape (n_selected,)
        Input dimension ``f_k`` of each selected stump.
    stump_thresholds_ : ndarray of float64, shape (n_selected,)
        Thresholds ``t_k``.
    theta_ : ndarray of float64, shape (n_selected,)
        Kernel weights ``theta_k ** theta_exponent > 0`` (Step 1) or ones.
    coef_ : ndarray of float64, shape (n_problems, 2 * n_selected)
        ``[c^1_1, c^0_1, c^1_2, c^0_2, ...]`` per problem (Eq. 5 without the
        ``sqrt(theta)``, which is in the map of Eq. 4).
    intercept_ : ndarray of float64, shape (n_problems,)
    n_stumps_ : int
        Stumps generated.
    n_stumps_step0_ : int
        Stumps left after Step 0 (``a != 0`` for some class).
    n_iter_kernel_ : int
        Step-1 solver iterations (0 with ``learn_theta=False``).
    n_iter_ : int
        Step-2 L-BFGS iterations.
    timings_ : dict
        Seconds spent in each stage of the last ``fit`` (not saved in model files).

    Notes
    -----
    ``fit(X, y, sample_weight)``: the weights multiply the loss terms of the Step-2
    SVM (exactly, as :class:`QuadraticHingeSVC`); rows of weight 0 are left out of
    every step.  The stumps' ranges, Step 0's counts and Step 1's subsample do not
    use the weights (they count rows), so integer weights do not give the model of
    the repeated rows.

    References
    ----------
    .. [1] G. Roig, X. Boix and L. Van Gool, "Random Decision Stumps for Kernel
       Learning and Efficient SVM", ACCV 2012.
    """

    _requires_non_negative = False
    learns_channel_weights = True
    _accept_sparse = True
    _fitted_shapes = {
        "stump_features_": ("S",),
        "stump_thresholds_": ("S",),
        "theta_": ("S",),
        "coef_": ("P", "2S"),
        "intercept_": ("P",),
        "n_stumps_": (),
        "n_stumps_step0_": (),
        "n_iter_kernel_": (),
        "n_iter_": (),
    }

    @classmethod
    def _shape_symbols(cls, arrays, params):
        stumps = arrays.get("stump_features_")
        if stumps is None or stumps.ndim != 1:
            return {}
        return {"S": stumps.shape[0], "2S": 2 * stumps.shape[0]}

    @classmethod
    def _check_fitted_values(cls, arrays, n_features):
        features = arrays["stump_features_"]
        if features.size and not (
            features.dtype.kind in "iu" and 0 <= int(features.min()) and int(features.max()) < n_features
        ):
            raise ValueError("stump_features_ index dimensions outside the features")

    _joint_reason = (
        "learns its stumps and their weights theta from all classes at once (Steps 0-1), and its Step 2 "
        "trains all classes in one L-BFGS run: it cannot be trained in groups of classes and give the same "
        "model; train it on one machine"
    )

    _parameter_constraints: dict = {
        "n_stumps": [Interval(Integral, 1, None, closed="left"), None],
        "C": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "C_kernel": [Interval(Real, 0, None, closed="neither")],
        "learn_theta": ["boolean"],
        "theta_exponent": [Interval(Real, 0, None, closed="left")],
        "threshold_rule": [StrOptions({"range", "quantile", "distinct_quantile"})],
        "init_rule": [StrOptions({"table1", "balanced"})],
        "neg_pos_ratio": [Interval(Real, 0, None, closed="neither")],
        "n_kernel_samples": [Interval(Integral, 2, None, closed="left"), None],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol_kernel": [Interval(Real, 0, None, closed="left")],
        "max_iter_kernel": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_stumps: int | None = None,
        *,
        C: float = 100.0,
        class_weight: dict | str | None = None,
        C_kernel: float = 100.0,
        learn_theta: bool = True,
        theta_exponent: float = 0.0,
        threshold_rule: str = "distinct_quantile",
        init_rule: str = "balanced",
        neg_pos_ratio: float = 2.0,
        n_kernel_samples: int | None = 5000,
        tol: float = 1e-4,
        max_iter: int = 1000,
        tol_kernel: float = 0.01,
        max_iter_kernel: int = 1000,
        random_state: int | np.random.RandomState | None = None,
        verbose: int = 0,
    ) -> None:
        self.n_stumps = n_stumps
        self.C = C
        self.class_weight = class_weight
        self.C_kernel = C_kernel
        self.learn_theta = learn_theta
        self.theta_exponent = theta_exponent
        self.threshold_rule = threshold_rule
        self.init_rule = init_rule
        self.neg_pos_ratio = neg_pos_ratio
        self.n_kernel_samples = n_kernel_samples
        self.tol = tol
        self.max_iter = max_iter
        self.tol_kernel = tol_kernel
        self.max_iter_kernel = max_iter_kernel
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ fit
    def _log(self, message: str) -> None:
        """A step of the fit: INFO with ``verbose`` (shown on stderr by :meth:`fit`), else DEBUG."""
        _logger.log(logging.INFO if self.verbose else logging.DEBUG, "MBKL: %s", message)

    def _fit_ovr(self, X, Y: np.ndarray, weights: np.ndarray | None, sample_weight: np.ndarray | None) -> None:
        rng = check_random_state(self.random_state)
        n_samples, n_features = X.shape
        n_problems = Y.shape[1]
        y_index = (Y[:, 0] > 0).astype(np.int64) if n_problems == 1 else np.argmax(Y, axis=1).astype(np.int64)
        n_stumps = self.n_stumps or min(DEFAULT_STUMPS_PER_FEATURE * n_features, DEFAULT_MAX_STUMPS)
        # per stump: feature index and threshold (16 bytes) and one output bit per sample
        require_memory(f"n_stumps={n_stumps}", float(n_stumps) * (16.0 + n_samples / 8.0), "its stumps")
        timings: dict[str, float] = {}

        start = time.perf_counter()
        features, thresholds = self._random_stumps(X, n_stumps, rng, self.threshold_rule)
        Xc = sp.csc_matrix(X)
        bits = kern.stump_bits_csc(
            Xc.indptr.astype(np.int64), Xc.indices.astype(np.int64), Xc.data, n_samples, features, thresholds
        )
        del Xc
        timings["stumps"] = time.perf_counter() - start
        self._log(f"{n_stumps} stumps evaluated on {n_samples} samples in {timings['stumps']:.2f} s")

        self.n_iter_kernel_ = 0
        if self.learn_theta:
            selected, theta = self._learn_theta(bits, y_index, n_problems, rng, timings)
        else:
            selected, theta = np.arange(n_stumps), np.ones(n_stumps)
            self.n_stumps_step0_ = n_stumps

        start = time.perf_counter()
        psi = self._signed_map(bits, selected, theta)
        del bits  # the SVM needs only psi
        self._fit_step2(psi, float(theta.sum()), selected.size, Y, weights)
        timings["step2"] = time.perf_counter() - start
        self._log(f"Step 2: linear SVM on {selected.size} stumps in {timings['step2']:.2f} s")

        self.stump_features_ = features[selected].astype(np.int32)
        self.stump_thresholds_ = thresholds[selected]
        self.theta_ = np.asarray(theta, dtype=np.float64)
        self.n_stumps_ = int(n_stumps)
        self.timings_ = timings

    @staticmethod
    def _random_stumps(
        X, n_stumps: int, rng: np.random.RandomState, threshold_rule: str = "range"
    ) -> tuple[np.ndarray, np.ndarray]:
        """Stumps sorted by feature: ``f`` uniform; ``t`` uniform on the training range of ``f``
        (section 4), or at a uniform random quantile of its training values."""
        features = rng.randint(0, X.shape[1], size=n_stumps).astype(np.int64)
        if threshold_rule in ("quantile", "distinct_quantile"):
            levels = rng.uniform(0.0, 1.0, size=n_stumps)
            thresholds = _quantile_thresholds(X, features, levels, distinct=threshold_rule == "distinct_quantile")
        else:
            if sp.issparse(X):
                low, high = (np.asarray(v, dtype=np.float64) for v in min_max_axis(X, axis=0))
            else:
                low = np.asarray(X.min(axis=0), dtype=np.float64)
                high = np.asarray(X.max(axis=0), dtype=np.float64)
            thresholds = rng.uniform(low[features], high[features]).astype(np.float64)
        order = np.lexsort((thresholds, features))
        return features[order], thresholds[order]

    def _learn_theta(self, bits, y_index, n_problems, rng, timings) -> tuple[np.ndarray, np.ndarray]:
        """Steps 0 and 1: the selected stumps and their ``theta > 0``."""
        start = time.perf_counter()
        n_classes = max(int(y_index.max()) + 1, 2)
        counts = kern.fired_counts(bits, y_index, n_classes)
        class_sizes = np.bincount(y_index, minlength=n_classes)
        if n_problems == 1:
            fired_pos, n_pos = counts[:, 1:2], class_sizes[1:2]
            fired_neg, n_neg = counts[:, 0:1], class_sizes[0:1]
        else:
            fired_pos, n_pos = counts, class_sizes
            fired_neg, n_neg = counts.sum(axis=1, keepdims=True) - counts, class_sizes.sum() - class_sizes
        signs = initial_signs(fired_pos, n_pos, fired_neg, n_neg, rule=self.init_rule)
        active = np.flatnonzero(np.any(signs != 0, axis=1))
        self.n_stumps_step0_ = int(active.size)
        timings["step0"] = time.perf_counter() - start
        self._log(f"Step 0: {active.size} of {bits.shape[0]} stumps with a != 0 ({timings['step0']:.2f} s)")

        start = time.perf_counter()
        row_sample, row_label, problem_ptr = kernel_rows(
            y_index, n_problems, float(self.neg_pos_ratio), self.n_kernel_samples, rng
        )
        columns = kern.StumpColumns(bits, signs, active, row_sample, row_label, problem_ptr)
        w, self.n_iter_kernel_ = kern.l1r_l2svc_stumps(
            columns, float(self.C_kernel), float(self.tol_kernel), int(self.max_iter_kernel), kernel_seed(rng)
        )
        theta = np.maximum(w[: active.size], 0.0)  # negative theta set to 0 (section 5)
        keep = theta > 0.0
        timings["step1"] = time.perf_counter() - start
        self._log(
            f"Step 1: {row_sample.size} rows, {self.n_iter_kernel_} iterations, {int(keep.sum())} stumps "
            f"with theta > 0 ({timings['step1']:.2f} s)"
        )
        return active[keep], theta[keep] ** float(self.theta_exponent)

    @staticmethod
    def _signed_map(bits: np.ndarray, selected: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """``psi = sqrt(theta / sum theta) (2 sigma - 1)`` on the training samples, float32 (n, n_selected)."""
        if not selected.size:  # no stump survived: a bias-only classifier (one zero column)
            return np.zeros((bits.shape[1], 1), dtype=np.float32)
        return kern.signed_stump_matrix(bits, selected.astype(np.int64), np.sqrt(theta / theta.sum()))

    def _fit_step2(self, psi: np.ndarray, total: float, n_selected: int, Y: np.ndarray, weights) -> None:
        """Step 2: linear SVM on ``psi``; stores ``coef_`` in Eq. 5's coordinates (module docstring)."""
        # the eigenbasis solver, as before the span solver became the linear SVM's default: the
        # same optimum within tol, and the recorded MBKL models unchanged (its step 2 stops at tol,
        # where another solver's iterates stop at another point within it)
        svm = QuadraticHingeSVC(C=self.C, tol=self.tol, max_iter=self.max_iter, fit_intercept=True, solver="eigen")
        svm._fit_ovr(psi, Y, weights, None)  # the same one-vs-rest targets and loss weights as this estimator
        c1 = svm.coef_[:, :n_selected] / np.sqrt(total) if n_selected else svm.coef_[:, :0]
        coef = np.empty((c1.shape[0], 2 * n_selected), dtype=np.float64)
        coef[:, 0::2] = c1
        coef[:, 1::2] = -c1
        self.coef_ = coef
        self.intercept_ = np.asarray(svm.intercept_, dtype=np.float64)
        self.n_iter_ = int(svm.n_iter_)

    # ------------------------------------------------------------- explicit map
    def explicit_map(self, X: Any) -> np.ndarray:
        """The explicit map of Eq. 4, dense: ``[sqrt(theta_k) sigma_k(x), sqrt(theta_k) bar sigma_k(x)]_k``.

        ``explicit_map(X) @ explicit_map(Y).T`` is the learnt kernel
        ``sum_k theta_k [sigma_k(x) = sigma_k(y)]`` and
        ``explicit_map(X) @ coef_.T + intercept_`` the decision function.  For
        analysis and tests: it builds an ``(n_samples, 2 n_selected)`` float64
        array, which prediction never does.
        """
        check_is_fitted(self, "theta_")
        X = self._validate_X(X, reset=False)
        columns = X[:, self.stump_features_]
        columns = columns.toarray() if sp.issparse(columns) else np.asarray(columns)
        fired = (columns.astype(np.float64) > self.stump_thresholds_).astype(np.float64)
        root = np.sqrt(self.theta_)
        phi = np.empty((X.shape[0], 2 * root.size), dtype=np.float64)
        phi[:, 0::2] = root * fired
        phi[:, 1::2] = root * (1.0 - fired)
        return phi

    # ------------------------------------------------------------- predict
    def _stump_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """``(v, base)``: ``f(x) = base + sum_{k: sigma_k(x)=1} v_k`` (module docstring)."""
        root = np.sqrt(self.theta_)[:, None]
        c1 = self.coef_[:, 0::2].T
        c0 = self.coef_[:, 1::2].T
        weights = np.ascontiguousarray(root * (c1 - c0))
        base = self.intercept_ + (root * c0).sum(axis=0)
        return weights, base

    def _decision_ovr(self, X) -> np.ndarray:
        weights, base = self._stump_weights()
        features = np.asarray(self.stump_features_, dtype=np.int64)
        thresholds = np.asarray(self.stump_thresholds_, dtype=np.float64)
        return kern.decision(matrix_arrays(X), X.shape[1], features, thresholds, weights, base)
