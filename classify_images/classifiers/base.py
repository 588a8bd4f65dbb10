"""Shared one-vs-rest machinery for every classifier of the package.

Each classifier of :mod:`classify_images.classifiers` learns ``C`` binary
problems, one per class ("one-vs-all"), and predicts the class whose binary
decision value is the largest.  With two classes a single binary problem is
learnt, whose positive side is ``classes_[1]``; its decision function then has
shape ``(n_samples,)``, as scikit-learn's linear models do.

:meth:`OneVsRestClassifierBase.fit` does what every classifier needs, once:
it validates the parameters against the subclass's ``_parameter_constraints``
(scikit-learn's ``_fit_context``), then calls the hook ``_check_params()``
for rules that tie parameters together, validates the data and encodes the
labels.  A subclass implements

``_fit_ovr(X, Y, weights, sample_weight)``
    ``X`` is the validated input (``np.ndarray`` float32/float64 or
    ``scipy.sparse.csr_matrix`` with sorted indices), ``Y`` an ``int8`` array
    of shape ``(n_samples, n_problems)`` with entries in ``{-1, +1}``,
    ``weights`` ``None`` (every loss term weighs 1) or a float64 array of
    ``Y``'s shape: ``weights[i, c] = s_i w_ic``, the sample weight of row ``i``
    times the class weight it carries in problem ``c`` (:func:`loss_weights`).
    Rows of zero sample weight are removed before, so every weight is positive;
    ``sample_weight`` is ``None`` or the (positive) sample weights alone, for
    statistics of the data that must weigh rows as repeated rows would (``C="auto"``).
    It stores its fitted attributes (names ending in ``_``).
``_decision_ovr(X)``
    returns the decision values, shape ``(n_samples, n_problems)``.

and lists in ``_fitted_arrays`` the fitted attributes that make up the model
(:meth:`~OneVsRestClassifierBase._model_arrays`), which a model file saves as
plain arrays and restores without pickle.  An estimator whose probabilities were
calibrated (:func:`~classify_images.classifiers.calibration.calibrate`: Platt's sigmoids
in ``platt_``) also has ``predict_proba``, and its model arrays include the calibration;
a new ``fit`` drops it.

A subclass whose problems are solved independently of each other, sharing their random
draws (PmSVM, HIK nSVM), lists in ``_problem_axes`` its per-problem fitted arrays and the
axis of the problems in each: :meth:`~OneVsRestClassifierBase.fit_problem_group` then fits
any group of the problems (on another machine, say) and :func:`merge_problem_groups`
assembles the groups into the model ``fit`` learns, bit for bit.  The others (one joint
solve) say why in ``_joint_reason``.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _check_sample_weight,
    check_consistent_length,
    check_is_fitted,
    check_non_negative,
    column_or_1d,
    validate_data,
)

from .._log import fits_are_summarised, verbose_output
from ..errors import ClassifyImagesError
from ._compat import _check_partial_fit_first_call, _fit_context
from ._half import remember_squared_norms, row_squared_norms
from .column_blocks import ColumnBlockRows, is_column_blocks

__all__ = [
    "NegativeFeaturesError",
    "OneVsRestClassifierBase",
    "auto_scale_mean",
    "loss_weights",
    "merge_problem_groups",
    "n_problems",
    "ovr_targets",
    "warm_up",
]

_log = logging.getLogger(__name__)


class NegativeFeaturesError(ClassifyImagesError, ValueError):
    """Negative values given to a classifier that needs non-negative features (additive kernels)."""


class MemoryBoundError(ClassifyImagesError, ValueError):
    """A size parameter asks for more memory than the machine has (refused before allocating)."""


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None


def require_memory(parameter: str, n_bytes: float, what: str) -> None:
    """Refuse a size parameter whose arrays (``n_bytes``) exceed the machine's memory, with one line
    naming the parameter, before anything is allocated (``lut_bins=10**15`` would end in NumPy's
    ``_ArrayMemoryError`` for 7 PiB)."""
    memory = physical_memory()
    if memory is not None and n_bytes > memory:
        raise MemoryBoundError(
            f"{parameter} needs {n_bytes / 2**30:.3g} GiB for {what}, more than this machine's "
            f"{memory / 2**30:.3g} GiB of memory: lower it"
        )


def ovr_targets(y_index: np.ndarray, n_classes: int) -> np.ndarray:
    """One-vs-rest targets in ``{-1, +1}``.

    Parameters
    ----------
    y_index : ndarray of int, shape (n_samples,)
        Class index of each sample, in ``[0, n_classes)``.
    n_classes : int
        Number of classes, at least 2.

    Returns
    -------
    Y : ndarray of int8, shape (n_samples, n_problems)
        ``Y[i, c] = +1`` if sample ``i`` belongs to class ``c`` else ``-1``.
        With two classes there is a single problem (``n_problems = 1``) whose
        positive class is class 1.
    """
    y_index = np.asarray(y_index)
    if n_classes == 2:
        return np.where(y_index == 1, 1, -1).astype(np.int8)[:, None]
    Y = -np.ones((y_index.shape[0], n_classes), dtype=np.int8)
    Y[np.arange(y_index.shape[0]), y_index] = 1
    return Y


def n_problems(n_classes: int) -> int:
    """Number of one-vs-rest problems of ``n_classes`` classes: one per class, a single one for two."""
    return 1 if n_classes == 2 else int(n_classes)


def loss_weights(
    Y: np.ndarray, classes: np.ndarray, class_weight: dict | str | None, sample_weight: np.ndarray | None
) -> np.ndarray | None:
    """Weight of every loss term ``(i, c)``: ``s_i`` times the class weight (LIBLINEAR's one-vs-rest rule).

    In problem ``c`` the positive rows (class ``c``) weigh ``s_i w_c`` and the negative
    rows ``s_i``, as LIBLINEAR (and so ``LinearSVC``) do for one-vs-rest; with two
    classes (one problem) each row weighs ``s_i w_{y_i}``, its own class's weight.
    ``class_weight="balanced"`` is ``w_k = n / (K n_k)`` (:func:`sklearn.utils.class_weight.compute_class_weight`).

    Parameters
    ----------
    Y : ndarray of int8, shape (n_samples, n_problems)
        One-vs-rest targets (:func:`ovr_targets`).
    classes : ndarray of shape (n_classes,)
        The labels, in the order of ``Y``'s problems.
    class_weight : dict, "balanced" or None
        A dict maps labels (as given to ``fit``) to weights; labels it omits weigh 1.
    sample_weight : ndarray of float64, shape (n_samples,), or None

    Returns
    -------
    weights : ndarray of float64, shape (n_samples, n_problems), or None when every term weighs 1.

    Raises
    ------
    ValueError
        If ``class_weight`` names a label that is not among ``classes``.
    """
    if class_weight is None and sample_weight is None:
        return None
    n, n_problems = Y.shape
    s = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if class_weight is None:
        return np.repeat(s[:, None], n_problems, axis=1)
    if isinstance(class_weight, dict):
        unknown = [label for label in class_weight if label not in set(classes.tolist())]
        if unknown:
            raise ValueError(
                f"class_weight names {unknown[:5]!r}, which are not among the training labels "
                f"{classes[:10].tolist()!r}{' …' if classes.size > 10 else ''}"
            )
    y_index = (Y[:, 0] > 0).astype(np.intp) if n_problems == 1 else np.argmax(Y, axis=1)
    w = compute_class_weight(class_weight, classes=classes, y=classes[y_index])
    if n_problems == 1:
        return (s * w[y_index])[:, None]
    return np.where(Y > 0, s[:, None] * w[None, :], s[:, None])


def auto_scale_mean(values: np.ndarray, sample_weight: np.ndarray | None) -> float:
    """Mean of a per-row statistic for the ``"auto"`` scale rules, each row counted ``sample_weight`` times.

    Weighting the mean (rather than taking it over the distinct rows) keeps a weighted fit
    the fit of the repeated rows.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return 0.0
    if sample_weight is None:
        return float(np.mean(values))
    return float(np.average(values, weights=sample_weight))


def _clip_negative(X):
    """``max(X, 0)``, copying only when ``X`` has a negative value."""
    values = X.data if sp.issparse(X) else X
    if values.size == 0 or values.min() >= 0:
        return X
    X = X.copy()
    if sp.issparse(X):
        np.maximum(X.data, 0, out=X.data)
    else:
        np.maximum(X, 0, out=X)
    return X


def warm_up(estimator: Any, X: Any, y: Any) -> None:
    """Compile the numba kernels ``estimator.fit`` and ``predict`` will use, on a tiny problem.

    Fits a clone of ``estimator`` on at most two rows per class of ``(X, y)`` (same dtype
    and format as the real data, so the same kernel signatures) and predicts them.  Call it
    before timing ``fit``: numba compiles a kernel on its first call in a process (or loads
    it from its on-disk cache, ``cache=True``), and that time is not training.
    """
    from sklearn.base import clone

    y = np.asarray(y)
    labels = np.unique(y)
    rows = np.concatenate([np.flatnonzero(y == label)[:2] for label in labels])
    small = clone(estimator)
    params = small.get_params()
    for name, value in (("max_iter", 5), ("n_epochs", 2), ("n_stumps", 8), ("max_iter_kernel", 5), ("verbose", 0)):
        if name in params and params[name] is not None:
            small.set_params(**{name: value})
    classifiers_log = logging.getLogger(__package__)  # the tiny fit is not a step to report
    level = classifiers_log.level
    classifiers_log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            small.fit(X[rows], y[rows])
            small.predict(X[rows])
    finally:
        classifiers_log.setLevel(level)


class OneVsRestClassifierBase(ClassifierMixin, BaseEstimator):
    """Base class: label encoding, validation, one-vs-rest prediction.

    Subclasses declare their constructor parameters explicitly (scikit-learn
    convention), their allowed values in ``_parameter_constraints`` and set the
    class attributes below; they do not override :meth:`fit`.

    Attributes (class level)
    ------------------------
    _requires_non_negative : bool
        The classifier is defined on non-negative features only (additive
        kernels on histograms); negative input is rejected with scikit-learn's
        ``"Negative values in data"`` error and the ``positive_only`` input tag
        is declared.
    _accept_sparse : bool
        Whether CSR input is supported (other sparse formats are converted).
    _input_dtypes : tuple of dtypes
        Dense dtypes taken as they are (others are converted to the first).
    _fitted_shapes : dict of str to tuple of str
        The fitted attributes saved in model files (besides ``classes_`` and
        ``n_features_in_``), each with its shape in the symbols ``d`` (feature
        dimension), ``P`` (one-vs-rest problems: 1 for two classes, else the class
        count), ``S`` (MBKL's selected stumps), ``2S`` and ``m+1`` (PmSVM's polynomial
        coefficients); ``()`` for a scalar.  Loading a model file checks every array
        against it (:mod:`classify_images.pipeline.training.model_file`), with the values of the
        classifier's own symbols from :meth:`_shape_symbols` and its value rules from
        :meth:`_check_fitted_values`.
    _fitted_arrays : tuple of str
        The names of ``_fitted_shapes``, in order (derived, never set by hand).
    _problem_axes : dict of str to int, or None
        The fitted attributes that hold one entry per one-vs-rest problem, each with the
        axis of the problems (the other fitted attributes are shared by all problems),
        when every problem is solved independently of the others with shared random
        draws; then :meth:`fit_problem_group` fits any group of them.  ``None`` (the
        default): the problems are solved jointly, and ``_joint_reason`` says how.
    _group_reductions : dict of str to callable
        Scalar fitted attributes that differ between groups of problems (an iteration
        count, an objective summed over the problems) and how :func:`merge_problem_groups`
        combines them (``max``, ``sum``); a classifier that lists any gives the model of
        :meth:`fit` within solver tolerance, not bit for bit (QuadraticHingeSVC: each
        group's L-BFGS stops by its own gradient norm).
    _parameter_constraints : dict
        scikit-learn's description of the allowed value of every constructor
        parameter, checked by :meth:`fit` before anything else.
    homogeneous_additive_kernel : bool
        The kernel is additive and homogeneous of degree 1 (PmSVM's power means, nSVM's
        histogram intersection): the ``average`` channel-combination rule gives it L1-normalised
        blocks and refuses signed channels (:mod:`classify_images.classifiers.combination`).
    learns_channel_weights : bool
        The classifier learns each channel's weight itself (MBKL's stumps): the ``mbkl``
        combination rule applies to it, and only to it.
    """

    _parameter_constraints: dict = {}
    _requires_non_negative: bool = False
    _accept_sparse: bool = True
    _input_dtypes: tuple = (np.float64, np.float32)
    #: ``fit`` reads a :class:`~classify_images.classifiers.column_blocks.ColumnBlockRows` a block
    #: of columns at a time (else it is read whole first)
    _reads_column_blocks: bool = False
    _fitted_shapes: dict[str, tuple[str, ...]] = {}
    _fitted_arrays: tuple[str, ...] = ()
    _problem_axes: dict[str, int] | None = None
    _group_reductions: dict[str, Any] = {}
    _joint_reason: str = "learns its one-vs-rest problems jointly, so they cannot be fitted in groups"
    homogeneous_additive_kernel: bool = False
    learns_channel_weights: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fitted_arrays = tuple(cls._fitted_shapes)

    @classmethod
    def _shape_symbols(cls, arrays: dict[str, np.ndarray], params: dict[str, Any]) -> dict[str, int]:
        """Values of this classifier's own symbols of :attr:`_fitted_shapes` (beyond ``d`` and
        ``P``), from the saved ``arrays`` and parameters ``params`` of a model file."""
        return {}

    @classmethod
    def _check_fitted_values(cls, arrays: dict[str, np.ndarray], n_features: int) -> None:
        """Value rules of the saved arrays beyond shapes and finiteness; raises ``ValueError``."""

    # ------------------------------------------------------------------ tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accept_sparse
        tags.input_tags.positive_only = self._requires_non_negative
        return tags

    # ------------------------------------------------------------ validation
    def _validate_X(self, X: Any, *, reset: bool, y: Any = None, training: bool | None = None):
        """scikit-learn's validation (finite values, dtype, format, number of features).

        For a classifier of non-negative features, negative training values raise
        :class:`NegativeFeaturesError`; at prediction they are
        clipped to 0, as values above the training range are clipped to it, so that
        a test row scaled with the training statistics (``MinMaxScaler``) whose
        values fall slightly below the training minimum is still scored.  ``training``
        (default: ``reset``) says which of the two ``X`` is for: a ``partial_fit`` after
        the first trains with ``reset=False``.
        """
        if is_column_blocks(X):
            if reset and training is None and self._reads_column_blocks and not self._requires_non_negative:
                return self._validate_column_blocks(X, y)
            X = np.asarray(X)  # prediction, or a solver that reads the rows whole
        kwargs = dict(
            accept_sparse=["csr"] if self._accept_sparse else False,
            dtype=list(self._input_dtypes),
            reset=reset,
        )
        # float16 rows (a memory-mapped feature set): finiteness checked through their squared norms,
        # not by scikit-learn's element-wise check (a boolean copy of X for this dtype)
        half = isinstance(X, np.ndarray) and X.dtype == np.float16 and np.float16 in self._input_dtypes
        if half:
            kwargs["ensure_all_finite"] = False
        if y is None:
            X = validate_data(self, X, **kwargs)
        else:
            X, y = validate_data(self, X, y, **kwargs)
        if half and X.ndim == 2:
            norms = row_squared_norms(X)
            if not np.all(np.isfinite(norms)):
                raise ValueError("Input X contains NaN or infinity.")
            remember_squared_norms(X, norms)
        if sp.issparse(X):
            X = sp.csr_matrix(X)
            X.sort_indices()
        if self._requires_non_negative:
            if reset if training is None else training:
                try:
                    check_non_negative(X, f"{type(self).__name__} (X)")
                except ValueError as exc:
                    raise NegativeFeaturesError(str(exc)) from None
            else:
                X = _clip_negative(X)
        return X if y is None else (X, y)

    def _validate_column_blocks(self, X: ColumnBlockRows, y: Any):
        """:meth:`_validate_X` of rows read a block of columns at a time (``fit``), kept so: the
        number of features set from their shape (a zero row stands for them: none is read here),
        finiteness through the rows' squared norms (one pass over the blocks) unless the rows were
        checked when loaded (``checked_finite``)."""
        if X.shape[0] == 0:  # scikit-learn's one-line error for no rows
            validate_data(self, np.zeros((0, X.shape[1]), dtype=np.float32), reset=True)
        validate_data(self, np.zeros((1, X.shape[1]), dtype=np.float32), accept_sparse=False, reset=True)
        if not X.checked_finite and not np.all(np.isfinite(X.squared_norms())):
            raise ValueError("Input X contains NaN or infinity.")
        if y is None:
            return X
        y = column_or_1d(y, warn=True)
        check_consistent_length(X, y)
        return X, y

    # ------------------------------------------------------------------ API
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> OneVsRestClassifierBase:
        """Fit one binary classifier per class (one-vs-rest).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training vectors (finite values).
        y : array-like of shape (n_samples,)
            Class labels (any hashable, sortable values).
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row's loss term (``None``: all 1), multiplied
            by the class weight (:func:`loss_weights`).  Rows of weight 0 are removed
            before anything else, so they change nothing; each classifier's docstring
            says how the weights enter its solver.

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        InvalidParameterError
            If a parameter is outside ``_parameter_constraints`` or breaks a
            rule of :meth:`_check_params`.
        NegativeFeaturesError
            If the classifier needs non-negative features and ``X`` has a
            negative value.
        """
        with verbose_output(getattr(self, "verbose", 0)):
            X, Y, weights, sample_weight = self._training_problems(X, y, sample_weight)
            self._logged_fit(X, Y, weights, sample_weight)
        self.__dict__.pop("fitted_problems_", None)  # every problem, now
        return self

    def _logged_fit(self, X, Y: np.ndarray, weights: np.ndarray | None, sample_weight: np.ndarray | None) -> None:
        """:meth:`_fit_ovr`, logged: the problems (INFO) and the time they took (DEBUG)."""
        name = type(self).__name__
        _log.log(
            logging.DEBUG if fits_are_summarised() else logging.INFO,
            "%s: training %d one-vs-rest problem%s on %d rows of %d features",
            name,
            Y.shape[1],
            "s" if Y.shape[1] > 1 else "",
            X.shape[0],
            X.shape[1],
        )
        start = time.perf_counter()
        self._fit_ovr(X, Y, weights, sample_weight)
        _log.debug("%s: trained in %.2f s", name, time.perf_counter() - start)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_problem_group(
        self, X: Any, y: Any, start: int, stop: int, sample_weight: Any = None
    ) -> OneVsRestClassifierBase:
        """Fit one-vs-rest problems ``start:stop`` of the model :meth:`fit` learns on the same data.

        The fitted attributes listed in ``_problem_axes`` then hold those problems only
        (the others, shared by all problems, are those of :meth:`fit`), and
        ``fitted_problems_`` is ``(start, stop)``.  :func:`merge_problem_groups` assembles
        groups that cover every problem into the model :meth:`fit` learns, bit for bit:
        each problem's arithmetic is its own, and every random draw is shared by all the
        problems (one seed from ``random_state``), so it does not matter which process fits
        which group.  A distributed trainer fits the groups on different machines.

        Parameters
        ----------
        X, y, sample_weight
            As for :meth:`fit`: the whole training set (every problem needs every row).
        start, stop : int
            The problems, ``0 <= start < stop <= n_problems`` (:func:`n_problems`: one per
            class, a single one with two classes).

        Raises
        ------
        NotImplementedError
            The classifier learns its problems jointly (``_problem_axes`` is None).
        ValueError
            ``start:stop`` is not a non-empty range of the problems.
        """
        if self._problem_axes is None:
            raise NotImplementedError(f"{type(self).__name__} {self._joint_reason}")
        X, Y, weights, sample_weight = self._training_problems(X, y, sample_weight)
        total = Y.shape[1]
        if not 0 <= start < stop <= total:
            raise ValueError(f"problems {start}:{stop} are not a non-empty range of the {total} one-vs-rest problems")
        self._fit_ovr(X, Y[:, start:stop], None if weights is None else weights[:, start:stop], sample_weight)
        self.fitted_problems_ = (int(start), int(stop))
        return self

    def _training_problems(
        self, X: Any, y: Any, sample_weight: Any
    ) -> tuple[Any, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """What :meth:`fit` checks and prepares before solving: validated ``X``, the targets
        ``Y``, the loss weights and the positive sample weights (rows of weight 0 dropped);
        sets ``classes_`` (and ``n_features_in_``); a calibration of an earlier fit is dropped."""
        self._check_params()
        for name in _CALIBRATION_ARRAYS:
            self.__dict__.pop(name, None)
        if y is None:  # sklearn's check_requires_y_none expects this message
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        X, y = self._validate_X(X, reset=True, y=y)
        check_classification_targets(y)
        X, y, sample_weight = self._drop_unweighted_rows(X, y, sample_weight)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        if self.classes_.shape[0] < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes; got 1 class ({self.classes_[0]!r})."
            )
        Y = ovr_targets(y_index, self.classes_.shape[0])
        weights = loss_weights(Y, self.classes_, getattr(self, "class_weight", None), sample_weight)
        return X, Y, weights, sample_weight

    def _partial_fit_problems(
        self, X: Any, y: Any, classes: Any, sample_weight: Any, *, first: bool
    ) -> tuple[Any, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """What ``partial_fit`` checks and prepares for one block, as :meth:`_training_problems`
        for ``fit``: ``classes_`` set on the ``first`` call (required then), labels among them,
        ``class_weight="balanced"`` refused (it needs the class counts of all the data)."""
        if first and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        if getattr(self, "class_weight", None) == "balanced":
            raise ValueError(
                "class_weight='balanced' is not supported by partial_fit: it needs the class counts of all "
                "the data; give class_weight as a dict of weights"
            )
        X, y = self._validate_X(X, reset=first, y=y, training=True)
        self.__dict__.pop("platt_", None)  # a calibration of the weights before this block no longer holds
        self.__dict__.pop("platt_folds_", None)
        check_classification_targets(y)
        _check_partial_fit_first_call(self, classes)
        if len(self.classes_) < 2:
            given = self.classes_.tolist()
            del self.classes_
            raise ValueError(f"{type(self).__name__} needs at least 2 classes; got classes={given!r}")
        unknown = np.setdiff1d(y, self.classes_)
        if unknown.size:
            raise ValueError(
                f"y has labels {unknown[:5].tolist()!r} that are not in classes {self.classes_[:10].tolist()!r}"
            )
        X, y, sample_weight = self._drop_unweighted_rows(X, y, sample_weight)
        Y = ovr_targets(np.searchsorted(self.classes_, y), len(self.classes_))
        weights = loss_weights(Y, self.classes_, getattr(self, "class_weight", None), sample_weight)
        return X, Y, weights, sample_weight

    @staticmethod
    def _drop_unweighted_rows(X, y: np.ndarray, sample_weight: Any) -> tuple[Any, np.ndarray, np.ndarray | None]:
        """``(X, y, sample_weight)`` checked (float64, non-negative) without the rows of weight 0."""
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
            kept = np.flatnonzero(sample_weight > 0)
            if kept.size < sample_weight.size:
                X, y, sample_weight = X[kept], y[kept], sample_weight[kept]
        return X, y, sample_weight

    def decision_function(self, X: Any) -> np.ndarray:
        """Decision values of the one-vs-rest problems.

        Returns
        -------
        scores : ndarray of shape (n_samples, n_classes), or (n_samples,) with
            two classes (positive values favour ``classes_[1]``).
        """
        check_is_fitted(self, "classes_")
        X = self._validate_X(X, reset=False)
        scores = np.asarray(self._decision_ovr(X), dtype=np.float64)
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict(self, X: Any) -> np.ndarray:
        """Class of largest decision value for each sample."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            index = (scores > 0).astype(np.intp)
        else:
            index = np.argmax(scores, axis=1)
        return self.classes_[index]

    def _is_calibrated(self) -> bool:
        return hasattr(self, "platt_")

    @available_if(_is_calibrated)
    def predict_proba(self, X: Any) -> np.ndarray:
        """Calibrated class probabilities (Platt scaling), present once :func:`~.calibration.calibrate`
        fitted the sigmoids (``classify-images train --probability``).

        Returns
        -------
        proba : ndarray of float64, shape (n_samples, n_classes), columns in the order of ``classes_``.
        """
        from .calibration import platt_probabilities

        return platt_probabilities(self.decision_function(X), self.platt_)

    # ------------------------------------------------------------- hooks
    def _check_params(self) -> None:
        """Rules between parameters that ``_parameter_constraints`` cannot state (none by default).

        Called by :meth:`fit` after the constraints are checked and before the
        data is looked at; raises ``InvalidParameterError``.
        """

    def _fit_ovr(
        self, X, Y: np.ndarray, weights: np.ndarray | None, sample_weight: np.ndarray | None
    ) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _decision_ovr(self, X) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # --------------------------------------------------------- persistence
    def _model_arrays(self) -> dict[str, np.ndarray]:
        """The fitted state as a dict of plain (non-object) NumPy arrays."""
        check_is_fitted(self, "classes_")
        arrays = {"n_features_in_": np.asarray(self.n_features_in_)}
        for name in self._fitted_arrays + (_CALIBRATION_ARRAYS if self._is_calibrated() else ()):
            arrays[name] = np.asarray(getattr(self, name))
        return arrays

    def _restore_model_arrays(self, arrays: dict[str, np.ndarray], classes: Sequence) -> None:
        """Inverse of :meth:`_model_arrays` (used when loading a model file)."""
        self.classes_ = np.asarray(classes)
        self.n_features_in_ = int(arrays["n_features_in_"])
        calibrated = _CALIBRATION_ARRAYS if all(name in arrays for name in _CALIBRATION_ARRAYS) else ()
        for name in self._fitted_arrays + calibrated:
            value = arrays[name]
            setattr(self, name, value.item() if value.ndim == 0 else value)


#: The fitted attributes of calibrated probabilities (:mod:`.calibration`), saved with the model
#: when present: ``platt_`` (n_problems × 2: Platt's ``A``, ``B``) and ``platt_folds_``.
_CALIBRATION_ARRAYS = ("platt_", "platt_folds_")


def _same_value(a: Any, b: Any) -> bool:
    """Whether two fitted attributes are equal (arrays element-wise, bit for bit on floats)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.asarray(a).shape == np.asarray(b).shape and np.array_equal(a, b)
    return bool(a == b) and type(a) is type(b)


def merge_problem_groups(groups: Sequence[OneVsRestClassifierBase]) -> OneVsRestClassifierBase:
    """One model from estimators fitted on groups of its one-vs-rest problems.

    ``groups`` are fitted by :meth:`~OneVsRestClassifierBase.fit_problem_group` with the same
    parameters on the same data, and together cover every problem once (in any order).  The
    per-problem attributes (``_problem_axes``) are concatenated in the order of the problems,
    those of ``_group_reductions`` combined by their function;
    every other fitted attribute must be identical in all groups (it is computed from the
    data alone) and is kept.  The result is an unfitted clone of the first group holding
    them: the model :meth:`~OneVsRestClassifierBase.fit` learns.

    Raises
    ------
    ValueError
        No group, groups of different classifiers, parameters or data (a shared attribute
        differs), or groups that overlap or leave a problem out.
    """
    from sklearn.base import clone

    if not groups:
        raise ValueError("merge_problem_groups needs at least one fitted group")
    first = groups[0]
    axes = type(first)._problem_axes
    if axes is None:
        raise ValueError(f"{type(first).__name__} {type(first)._joint_reason}")

    def settings(estimator) -> str:  # the parameters, a RandomState by its state (its repr is its address)
        params = estimator.get_params(deep=False)
        return repr(
            {
                key: (value.get_state()[1].tobytes(), value.get_state()[2])
                if isinstance(value, np.random.RandomState)
                else value
                for key, value in params.items()
            }
        )

    for group in groups:
        check_is_fitted(group, "fitted_problems_")
        if type(group) is not type(first) or settings(group) != settings(first):
            raise ValueError("the groups were fitted by different classifiers or with different parameters")
    groups = sorted(groups, key=lambda group: group.fitted_problems_)
    total = n_problems(len(first.classes_))
    bounds = [group.fitted_problems_ for group in groups]
    if bounds[0][0] != 0 or bounds[-1][1] != total or any(a[1] != b[0] for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"the groups cover problems {bounds}, not each of the {total} problems once")
    names = [
        name for name in vars(first) if name.endswith("_") and not name.startswith("_") and name != "fitted_problems_"
    ]
    merged = clone(first)
    for name in names:
        values = [vars(group).get(name) for group in groups]
        if name in axes:
            setattr(merged, name, np.concatenate(values, axis=axes[name]))
        elif name in type(first)._group_reductions:
            setattr(merged, name, type(first)._group_reductions[name](values))
        elif all(_same_value(values[0], value) for value in values[1:]):
            setattr(merged, name, values[0])
        else:
            raise ValueError(f"{name} differs between the groups: they were not fitted on the same data")
    return merged
