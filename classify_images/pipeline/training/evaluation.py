"""Training, evaluation and repeated experiments, measured by the mean per-class accuracy.

The metric is the mean per-class accuracy, the usual measure on Caltech-101 and
15-Scenes [1]_: with the confusion matrix :math:`C` (:math:`C_{ij}` test images of
class :math:`i` predicted as :math:`j`) and :math:`\\mathcal{K}` the classes that
have at least one test image,

.. math::

    \\text{accuracy} = \\frac{1}{|\\mathcal{K}|} \\sum_{i \\in \\mathcal{K}}
        \\frac{C_{ii}}{\\sum_j C_{ij}},

so that every class counts equally whatever its number of test images.  This is
scikit-learn's balanced accuracy [2]_; a class that is never predicted counts as 0,
a class with no test image does not count.  Feature sets always have at least one
test image per class (:func:`~classify_images.pipeline.settings.dataset.split_indices`
refuses smaller classes).

The results are dataclasses (:class:`TrainingResult`, :class:`Evaluation`,
:class:`Experiment`) with a ``to_dict()`` that gives their JSON form;
:mod:`~classify_images.pipeline.interfaces.report` renders them.

References
----------
.. [1] S. Lazebnik, C. Schmid and J. Ponce, "Beyond Bags of Features: Spatial
   Pyramid Matching for Recognizing Natural Scene Categories", CVPR 2006.
.. [2] K. H. Brodersen, C. S. Ong, K. E. Stephan and J. M. Buhmann, "The balanced
   accuracy and its posterior distribution", ICPR 2010.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import balanced_accuracy_score, confusion_matrix, top_k_accuracy_score

from ...classifiers.base import warm_up
from ...classifiers.column_blocks import is_column_blocks
from ...classifiers.combination import check_combination, combine_rows
from ...classifiers.eigenbasis import reused_gram
from ...classifiers.registry import ClassifierParameterError, classifier_class, make_classifier
from ..extraction.augment import augment_settings, averaged_decision_function, rows_and_mirrors
from ..settings.dataset import split_indices
from ..storage.feature_store import FeatureSet
from ..storage.pooled_columns import StoredColumns, stored_columns
from ..storage.provenance import library_versions
from ..storage.row_codecs import row_codec
from .model_file import check_model_matches

__all__ = [
    "TrainingResult",
    "Predictions",
    "Evaluation",
    "ExperimentRun",
    "Experiment",
    "per_class_accuracy",
    "mean_per_class_accuracy",
    "top_k_accuracy",
    "TOP_K",
    "train_classifier",
    "rows_by_columns",
    "named_class_weight",
    "evaluate_model",
    "run_experiment",
    "combination_record",
]

_log = logging.getLogger(__name__)

#: The per-image predictions next to ``report.json`` (its ``"predictions"`` entry names it).
PREDICTIONS_FILE = "predictions.csv"

#: The k of the top-k accuracies reported (top-1 and those below the number of classes).
TOP_K = (1, 3, 5)

#: What :func:`run_experiment` re-uses from the first split, stated in its JSON form.
EXPERIMENT_NOTE = (
    "re-splits of the stored rows (seed S re-draws the build's split when the build used seed S and kept all "
    "the rest for testing); the codebook was learnt from the build's training images only"
)


def _seconds(value: float | None) -> float | None:
    """Seconds as stored in JSON files: rounded to 0.1 ms."""
    return None if value is None else round(value, 4)


def _json_form(result: Any, keys: str, **converted: Any) -> dict[str, Any]:
    """``{key: result.<key>}`` for the space-separated ``keys``, in order; ``converted`` replaces some values."""
    return {key: converted[key] if key in converted else getattr(result, key) for key in keys.split()}


def _combine_entry(combine: dict | None) -> dict[str, Any]:
    """``{"combine": …}`` of a result whose channels were combined (``--combine``), else nothing."""
    return {} if combine is None else {"combine": combine}


def per_class_accuracy(confusion: np.ndarray) -> np.ndarray:
    """Diagonal of the row-normalised confusion matrix, :math:`C_{ii} / \\sum_j C_{ij}`.

    Returns
    -------
    rates : ndarray of float64, shape (n_classes,)
        NaN for a class with no test image.
    """
    totals = confusion.sum(axis=1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.diag(confusion) / totals


def mean_per_class_accuracy(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int | None = None) -> float:
    """Mean, over the classes that have test images, of the per-class recognition rate.

    :func:`sklearn.metrics.balanced_accuracy_score`, whose warning about predicted
    classes without test images is silenced: such classes simply do not count.

    Parameters
    ----------
    y_true, y_pred : array-like of int, shape (n_samples,)
        True and predicted class of each test image.
    n_classes : int, optional
        Ignored: classes without test images do not count, so the value does not
        depend on the number of classes (kept for the benchmark scripts that pass it).

    Notes
    -----
    The value is the NaN-mean of :func:`per_class_accuracy`, bit for bit when every
    class has a test image.  With a class without test images (never the case in a
    feature set) it may differ in the last bits: the NaN-mean sums a zero in that
    class's place, which regroups NumPy's pairwise summation.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")
        return balanced_accuracy_score(y_true, y_pred)


def top_k_accuracy(y_true: np.ndarray, scores: np.ndarray, ks: Sequence[int] = TOP_K) -> dict[int, float]:
    """Fraction of the images whose true class is among the ``k`` largest decision values, per ``k``.

    :func:`sklearn.metrics.top_k_accuracy_score` on the decision values, for each ``k`` of
    ``ks`` below the number of classes (columns of ``scores``; top-1 always: with ``k``
    classes the top-``k`` accuracy is 1 whatever the classifier).  Every image counts
    equally (top-1 is the overall accuracy, not the mean per-class accuracy).  A class the
    classifier never saw (score ``-inf``) ranks last.

    Parameters
    ----------
    y_true : array-like of int, shape (n_samples,)
        Class index of each image.
    scores : ndarray, shape (n_samples, n_classes)
        Decision values, columns in class order.
    """
    y_true = np.asarray(y_true, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    n_classes = scores.shape[1] if scores.ndim == 2 else 0
    if y_true.size == 0 or n_classes < 2:
        return {}
    finite = np.isfinite(scores)
    low = scores[finite].min() - 1.0 if finite.any() else 0.0
    scores = np.where(finite, scores, low)
    # scikit-learn takes a single column for two classes: the score of the second one
    y_score = scores[:, 1] - scores[:, 0] if n_classes == 2 else scores
    return {
        k: float(top_k_accuracy_score(y_true, y_score, k=k, labels=np.arange(n_classes)))
        for k in ks
        if k == 1 or k < n_classes
    }


def _class_indices(labels: np.ndarray, class_names: Sequence[str]) -> np.ndarray:
    """Class indices of ``labels``, which are indices already or class names."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu":
        return labels.astype(np.int64)
    index = {name: k for k, name in enumerate(class_names)}
    return np.array([index[str(label)] for label in labels], dtype=np.int64)


@dataclass(frozen=True)
class PooledRows:
    """Rows ``indices`` of a feature set's pooled rows (training, then test), or of their stored
    mirrors (``mirrored``), read block by block when scored
    (:meth:`~classify_images.pipeline.storage.feature_store.FeatureSet.iter_pooled_rows`): an
    experiment's test rows are never held all at once."""

    feature_set: FeatureSet
    indices: np.ndarray
    mirrored: bool = False
    #: applied to each block as read (e.g. the rows of a multi-channel set combined, ``--combine``)
    transform: Callable[[np.ndarray], np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.indices)


def training_dtype(feature_set: FeatureSet, classifier: str, combine: str | None = None) -> Any:
    """The dtype of the training rows an experiment gathers: float16 when the rows are stored
    float16 or as 8- or 4-bit codes (:attr:`~classify_images.pipeline.storage.row_codecs.RowCodec.float16_holds_rows`)
    and the classifier reads float16 rows as they are (the linear SVM: its Gram matrix and
    weights convert them block by block), so that its one copy of the training rows takes at
    most 2 bytes a value; float32 otherwise (and for a combination of channels, computed in
    place in float32)."""
    accepted = getattr(classifier_class(classifier), "_input_dtypes", ())
    if combine is None and row_codec(feature_set.row_encoding).float16_holds_rows and np.float16 in accepted:
        return np.float16
    return np.float32


def rows_by_columns(
    feature_set: FeatureSet, indices: np.ndarray, name: str, params: dict[str, Any], search: Any, *, mirrored: bool
) -> StoredColumns | None:
    """The training rows ``indices`` (and with ``mirrored`` their mirrors) left in the store and read
    a block of columns at a time (:class:`~classify_images.pipeline.storage.pooled_columns.StoredColumns`),
    when the classifier trains so: the linear SVM's span solver (its default for fewer rows than
    dimensions), whose Gram matrix and weights are the only passes over the rows; else None (the
    rows are gathered)."""
    if not getattr(classifier_class(name), "_reads_column_blocks", False):
        return None
    if isinstance(search, dict) and "solver" in search:
        return None
    rows = stored_columns(feature_set, indices, mirrored=mirrored)
    if rows is None or rows.shape[0] > rows.shape[1] or make_classifier(name, params).solver_for(rows) != "span":
        return None  # (more rows than dimensions: the solver reads them whole)
    return rows


def _in_place(transform: Callable[..., np.ndarray] | None, rows: np.ndarray) -> np.ndarray:
    """``rows`` transformed in place by ``transform`` (``out=rows``), or as they are without one."""
    return rows if transform is None else transform(rows, out=rows)


def _blockwise_decisions(estimator: Any, rows: PooledRows) -> tuple[np.ndarray, float]:
    """Decision values of every row of ``rows``, one stored block at a time, and the seconds
    spent in ``decision_function`` (reading the blocks is not counted)."""
    raw, seconds, compiled = None, 0.0, False
    for positions, block in rows.feature_set.iter_pooled_rows(
        rows.indices, mirrored=rows.mirrored, needed_by='[augment] flip_test = "average"'
    ):
        if rows.transform is not None:
            block = rows.transform(block, out=block)
        if not compiled:  # compile (or load) the numba kernels outside the timed calls
            estimator.decision_function(block[:1])
            compiled = True
        start = time.perf_counter()
        values = np.asarray(estimator.decision_function(block), dtype=np.float64)
        seconds += time.perf_counter() - start
        if raw is None:
            raw = np.empty((len(rows),) + values.shape[1:])
        raw[positions] = values
    if raw is None:  # no row: the shape of one decision
        raw = np.empty(
            (0,)
            + np.shape(estimator.decision_function(np.zeros((1, rows.feature_set.n_features), dtype=np.float32)))[1:]
        )
    return raw, seconds


def _timed_decisions(
    estimator: Any,
    X: np.ndarray | PooledRows,
    class_names: Sequence[str],
    X_mirror: np.ndarray | PooledRows | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Predicted class index and the decision values of every class, timed as ``predict``
    (with ``X_mirror``, the mirrored rows of ``X``: the decision values of each image and its
    mirror averaged, :func:`~classify_images.pipeline.extraction.augment.averaged_decision_function`).

    ``predict`` is the class of the largest decision value (with two classes: the sign of
    the single value, read here as the scores ``(-s, s)``), so the two come from one pass.

    Returns
    -------
    predicted : ndarray of int64, shape (n,)
    scores : ndarray of float64, shape (n, n_classes), columns in the order of ``class_names``
    seconds : float
        Of ``decision_function`` on all of ``X``, after one call on its first row: numba
        compiles a kernel on its first call in a process, and that time is not testing.
    """
    if isinstance(X, PooledRows):
        raw, seconds = _blockwise_decisions(estimator, X)
        if X_mirror is not None:
            mirrored, mirror_seconds = _blockwise_decisions(estimator, X_mirror)
            raw, seconds = 0.5 * (raw + mirrored), seconds + mirror_seconds
    else:
        if len(X):
            estimator.decision_function(X[:1])  # compile (or load) the numba kernels outside the timed call
        start = time.perf_counter()
        raw = averaged_decision_function(estimator, X, X_mirror)
        seconds = time.perf_counter() - start
    if raw.ndim == 1:
        raw = np.stack([-raw, raw], axis=1)
    columns = _class_indices(estimator.classes_, class_names)
    scores = np.full((raw.shape[0], len(class_names)), -np.inf)
    scores[:, columns] = raw
    predicted = columns[np.argmax(raw, axis=1)] if raw.shape[0] else np.zeros(0, dtype=np.int64)
    return predicted, scores, seconds


@dataclass(frozen=True)
class Predictions:
    """What the classifier said about every test image (``predictions.csv``)."""

    paths: list[str]  #: image files (absolute when the dataset root is known)
    y_true: np.ndarray  #: int64 class index of each image
    y_pred: np.ndarray  #: int64 predicted class index
    scores: np.ndarray  #: float64 (n, n_classes) decision values, columns in class order

    @classmethod
    def from_scores(
        cls, paths: Sequence[str], y_true: np.ndarray, y_pred: np.ndarray, scores: np.ndarray
    ) -> Predictions:
        return cls(
            list(paths),
            np.asarray(y_true, dtype=np.int64),
            np.asarray(y_pred, dtype=np.int64),
            np.asarray(scores, dtype=np.float64),
        )

    @property
    def predicted_score(self) -> np.ndarray:
        """Decision value of the predicted class of each image."""
        return self.scores[np.arange(self.y_pred.size), self.y_pred]

    @property
    def true_score(self) -> np.ndarray:
        """Decision value of the true class of each image."""
        return self.scores[np.arange(self.y_true.size), self.y_true]

    def rows(self, class_names: Sequence[str]) -> list[dict[str, Any]]:
        """One dict per image: path, true, predicted, correct, both decision values."""
        return [
            {
                "path": path,
                "true": class_names[t],
                "predicted": class_names[p],
                "correct": bool(t == p),
                "score_predicted": round(float(sp), 6),
                "score_true": round(float(st), 6),
            }
            for path, t, p, sp, st in zip(self.paths, self.y_true, self.y_pred, self.predicted_score, self.true_score)
        ]


def _now() -> str:
    """The date and time of a report: ISO 8601, UTC, to the second."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _image_paths(feature_set: FeatureSet, relative: Sequence[str]) -> list[str]:
    """Paths of a feature set's images, made absolute with the dataset root it records."""
    dataset = feature_set.manifest.get("dataset")
    root = dataset.get("root") if isinstance(dataset, dict) else None
    return [str(Path(root) / path) if isinstance(root, str) and root else str(path) for path in relative]


@dataclass(frozen=True)
class TrainingResult:
    """A fitted classifier and what its training cost."""

    classifier: str  #: registered name (:data:`~classify_images.classifiers.registry.CLASSIFIERS`)
    params: dict[str, Any]  #: parameters given on top of the estimator's defaults
    estimator: Any  #: the fitted estimator
    train_seconds: float  #: wall-clock time of ``fit``
    n_samples: int  #: training rows
    n_features: int  #: dimension of the rows
    #: the cross-validated choice of parameters (:func:`~classify_images.classifiers.model_selection.search_parameters`), if any
    search: dict[str, Any] | None = None
    #: of the training rows, those of mirrored images (``[augment] flip_train``)
    n_mirrors: int = 0

    def flip_test(self, configured: str) -> str:
        """How test images are scored: the search's choice (``choose_flips``), else ``configured``."""
        flips = (self.search or {}).get("flips")
        return configured if flips is None else flips["flip_test"]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without the estimator: see :func:`~classify_images.pipeline.training.model_file.save_model`)."""
        return _json_form(
            self,
            "classifier params n_samples n_mirrors n_features train_seconds search",
            train_seconds=_seconds(self.train_seconds),
        )


def seeded_params(name: str, params: dict[str, Any], seed: int | None) -> dict[str, Any]:
    """``params`` with ``random_state=seed`` for a classifier that has one and was given none.

    The commands pass their seed here, so that the same command on the same data trains the
    same model (PmSVM's example order, MBKL's stumps and HIK nSVM's epochs are random).
    """
    if seed is None or "random_state" in params or "random_state" not in classifier_class(name)().get_params():
        return dict(params)
    return {**params, "random_state": int(seed)}


def named_class_weight(params: dict[str, Any], class_names: list[str]) -> dict[str, Any]:
    """``params`` with a ``class_weight`` dict keyed by class names.

    A user names a class by its name or by its index in ``class_names``; the estimator is
    trained on names, so both become names.

    Raises
    ------
    ClassifierParameterError
        A key that is neither a class name nor an index ``0 … n_classes - 1`` (one line).
    """
    weights = params.get("class_weight")
    if not isinstance(weights, dict):
        return dict(params)
    named = {}
    for key, value in weights.items():
        if isinstance(key, str) and key in class_names:
            name = key
        elif isinstance(key, (int, np.integer)) and not isinstance(key, bool) and 0 <= key < len(class_names):
            name = class_names[int(key)]
        else:
            shown = ", ".join(class_names[:10]) + (" …" if len(class_names) > 10 else "")
            raise ClassifierParameterError(
                f"class_weight: {key!r} is not a class; use a class name ({shown}) "
                f"or an index 0 … {len(class_names) - 1}"
            )
        if name in named:
            raise ClassifierParameterError(f"class_weight: class {name!r} is given twice")
        named[name] = value
    return {**params, "class_weight": named}


def train_classifier(
    name: str,
    params: dict[str, Any],
    X: np.ndarray,
    y: np.ndarray,
    *,
    seed: int | None = None,
    class_names: list[str] | None = None,
    wrapper: Callable[[Any], Any] | None = None,
    search: dict[str, list] | str | None = None,
    mirrored: bool = False,
    choose_flips: bool = False,
    flip_train: bool = True,
) -> TrainingResult:
    """Fit the registered classifier ``name`` with ``params`` on rows ``X``, labels ``y``.

    ``seed`` becomes ``random_state`` unless ``params`` set it (:func:`seeded_params`).
    With ``class_names``, ``y`` holds indices into it and the estimator is trained on the
    names (its ``classes_`` are names, a ``class_weight`` may name classes:
    :func:`named_class_weight`); the one-vs-rest problems keep the order of the indices when
    the names are sorted, as a dataset's class folders are. The numba kernels are compiled on
    a tiny problem first (:func:`~classify_images.classifiers.base.warm_up`), so that
    ``train_seconds`` is the training alone, not numba's compilation.  ``wrapper(estimator)``,
    if given, is a wrapper estimator that trains it another way, its fitted ``estimator_`` kept
    (on a cluster: :class:`~classify_images.pipeline.training.distributed_training.ParallelProblems`;
    from row blocks: :class:`~classify_images.pipeline.training.streaming_training.Incremental`).
    ``search`` (``{"C": [0.1, 1, 10, 100]}``) first chooses those parameters by stratified k-fold
    cross-validation on these rows (:func:`~classify_images.classifiers.model_selection.search_parameters`,
    folds seeded by ``seed``); the chosen values join ``params`` and the search is recorded in
    the result (``search``), its time outside ``train_seconds``.  With ``mirrored``
    (``[augment] flip_train``), ``X`` holds the ``n`` training images' rows followed by their
    mirrors' (``2n`` rows, :func:`~classify_images.pipeline.extraction.augment.rows_and_mirrors`; ``y``: the
    ``n`` labels of the images): the fit sees all ``2n`` rows, each mirror with its image's label,
    and a search folds each image with its mirror and scores held-out images averaged with their
    mirrors, as the test is scored (``search_parameters(..., mirrored=True)``).

    ``search="default"`` is what the commands pass when the user gives neither ``C`` nor a grid:
    :func:`default_search` decides (``C`` by cross-validation where it is cheap, else the
    estimator's default).  With ``choose_flips`` (and ``mirrored``), the search also chooses whether
    to train on the mirrors and whether the test averages with them
    (:data:`~classify_images.classifiers.model_selection.FLIP_VARIANTS`); without the mirrors it
    trains on the first ``n`` rows only, and :meth:`TrainingResult.flip_test` gives the test's rule;
    when no search runs after all, ``flip_train`` (the config's) says whether the mirrors are trained on.
    """
    params = seeded_params(name, params, seed)
    estimator = make_classifier(name, params)
    if class_names is not None:
        estimator.set_params(**named_class_weight(params, list(class_names)))
        y = np.asarray(class_names, dtype=str)[np.asarray(y)]
    n_images = len(y)
    if mirrored and X.shape[0] != 2 * n_images:
        raise ValueError(f"{X.shape[0]} rows for {n_images} training images and their mirrors")
    warm_up(estimator, X[:n_images] if mirrored else X, y)
    found, gram = None, None
    if search == "default":
        search, gram = default_search(estimator, params, X, n_images, in_memory=wrapper is None)
    if search:
        from ...classifiers.model_selection import search_parameters

        started = time.perf_counter()
        result = search_parameters(
            estimator,
            X,
            y,
            search,
            seed=0 if seed is None else seed,
            mirrored=mirrored,
            choose_flips=choose_flips and mirrored,
            gram=gram,
        )
        found = {**result.to_dict(), "seconds": round(time.perf_counter() - started, 3)}
        params = {**params, **result.best}
        estimator.set_params(**result.best)
        gram = result.gram
        _log.info("%s", _search_line(found))
        if result.flips is not None and not result.flips["flip_train"]:  # the images' rows alone
            X, mirrored = X[:n_images], False
            if gram is not None:  # F order: the final fit factorises it in place
                gram = np.asfortranarray(gram[:n_images, :n_images])
    elif mirrored and choose_flips and not flip_train:  # loaded for a search that did not run
        X, mirrored = X[:n_images], False
    if mirrored:
        y = np.concatenate([y, y])
    start = time.perf_counter()
    # The search's Gram matrix of these rows serves the final fit's eigenbasis (the same bits), and
    # is not read again: the fit may factorise it in place.
    with reused_gram(X, gram, last_fit=True) if gram is not None and wrapper is None else contextlib.nullcontext():
        estimator = estimator.fit(X, y) if wrapper is None else wrapper(estimator).fit(X, y).estimator_
    seconds = time.perf_counter() - start
    return TrainingResult(
        name, params, estimator, seconds, int(X.shape[0]), int(X.shape[1]), found, n_images if mirrored else 0
    )


def _search_line(search: dict[str, Any]) -> str:
    from ...classifiers.model_selection import search_summary

    return f"{search_summary(search)} ({search['seconds']:.1f} s)"


def default_search(
    estimator: Any, params: dict[str, Any], X: Any, n_images: int, *, in_memory: bool = True
) -> tuple[dict[str, list] | None, np.ndarray | None]:
    """The grid searched when the user gives neither ``C`` nor ``--search``, and the Gram matrix of
    ``X`` when it was computed for it: ``C`` over
    :func:`~classify_images.classifiers.model_selection.default_grid` when the estimator has a ``C``,
    ``params`` do not set it, and the search costs little (the linear SVM on rows in memory, fewer
    rows than dimensions: every fold and grid point from one Gram matrix, computed here first so
    that the grid's ``mean ‖x‖²`` is its diagonal, not another pass over the rows); else
    ``(None, None)`` (the estimator's default ``C``), said in one log line."""
    from ...classifiers.eigenbasis import gram_matrix
    from ...classifiers.model_selection import default_grid, gram_path_applies

    if "C" in params or "C" not in estimator.get_params(deep=False):
        return None, None
    if not in_memory or not (isinstance(X, np.ndarray) or sp.issparse(X) or is_column_blocks(X)):  # a cluster's
        _log.info(
            "C not given: the estimator's default C = %r is used (the rows are not in memory here, so "
            "cross-validating C would refit every fold; give --search C=... to choose it)",
            estimator.get_params()["C"],
        )
        return None, None
    if gram_path_applies(estimator, X, {"C": [1.0]}):  # (the values do not decide it)
        gram = gram_matrix(X)
        return default_grid(X, n_images, gram=gram), gram
    grid = default_grid(X, n_images)
    _log.info(
        "C not given: the estimator's default C = %r is used (cross-validating C here would refit every fold; "
        "give --search C=%s to choose it)",
        estimator.get_params()["C"],
        ",".join(f"{c:g}" for c in grid["C"]),
    )
    return None, None


@dataclass(frozen=True)
class Evaluation:
    """A model scored on the test rows of a feature set."""

    classifier: str  #: registered name of the classifier
    params: dict[str, Any]  #: its parameters, as recorded in the model file
    feature_set: str  #: folder of the feature set
    config_hash: str  #: pipeline config the features were computed with
    n_train: int  #: training images
    n_test: int  #: test images
    n_features: int  #: dimension of the features
    class_names: list[str]  #: class of each row / column of :attr:`confusion`
    confusion: np.ndarray  #: int64 (n_classes, n_classes): ``[i, j]`` images of class i predicted as j
    train_seconds: float | None  #: training time recorded in the model file (None if absent)
    test_seconds: float  #: wall-clock time of ``predict`` on the test rows
    mean_per_class_accuracy: float  #: see the module docstring
    predictions: Predictions | None = field(default=None, repr=False)  #: per test image (``predictions.csv``)
    config: dict | None = None  #: the pipeline config of the feature set
    search: dict | None = None  #: the model's cross-validated parameter choice (model file header), if any
    versions: dict | None = None  #: :func:`~classify_images.pipeline.storage.provenance.library_versions` at evaluation
    date: str | None = None  #: when the evaluation ran (ISO 8601, UTC)
    #: the channel combination of a multi-channel model (``{"rule", "channels"}``; None: rows as stored)
    combine: dict | None = None
    #: the dataset folder the feature set was built from (as its manifest records it; None: not recorded)
    dataset: str | None = None

    def most_confused(self, limit: int = 20) -> list[dict[str, Any]]:
        """The largest off-diagonal cells: ``true`` predicted as ``predicted``, ``count`` times.

        ``rate`` is the count over the test images of the true class; ties are broken by
        class order.  Cells with a zero count are never listed.
        """
        off = self.confusion.astype(np.int64).copy()
        np.fill_diagonal(off, 0)
        order = np.argsort(-off, axis=None, kind="stable")[:limit]
        totals = self.confusion.sum(axis=1)
        pairs = []
        for flat in order:
            i, j = divmod(int(flat), off.shape[1])
            if off[i, j] == 0:
                break
            pairs.append(
                {
                    "true": self.class_names[i],
                    "predicted": self.class_names[j],
                    "count": int(off[i, j]),
                    "rate": float(off[i, j] / max(totals[i], 1)),
                }
            )
        return pairs

    def misclassified(self, limit: int = 48) -> list[dict[str, Any]]:
        """The wrongly classified test images, most confident mistakes first (empty without predictions)."""
        if self.predictions is None:
            return []
        rows = self.predictions.rows(self.class_names)
        wrong = [row for row in rows if not row["correct"]]
        wrong.sort(key=lambda row: -row["score_predicted"])
        return wrong[:limit]

    @property
    def per_class_accuracy(self) -> np.ndarray:
        """Recognition rate of each class (NaN for a class with no test image)."""
        return per_class_accuracy(self.confusion)

    @property
    def overall_accuracy(self) -> float:
        """Fraction of test images classified correctly (every image counts equally)."""
        return float(np.trace(self.confusion) / max(self.confusion.sum(), 1))

    @property
    def top_k_accuracy(self) -> dict[int, float]:
        """:func:`top_k_accuracy` of the decision values, ``{k: fraction}`` (empty without predictions)."""
        if self.predictions is None:
            return {}
        return top_k_accuracy(self.predictions.y_true, self.predictions.scores)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the content of ``report.json``)."""
        return (
            _json_form(
                self,
                "classifier params feature_set config_hash n_train n_test n_features mean_per_class_accuracy "
                "overall_accuracy top_k_accuracy per_class_accuracy class_names confusion train_seconds test_seconds "
                "most_confused misclassified predictions config search versions date",
                top_k_accuracy={str(k): v for k, v in self.top_k_accuracy.items()},
                per_class_accuracy={name: float(rate) for name, rate in zip(self.class_names, self.per_class_accuracy)},
                confusion=self.confusion.tolist(),
                test_seconds=_seconds(self.test_seconds),
                most_confused=self.most_confused(),
                misclassified=self.misclassified(),
                predictions=PREDICTIONS_FILE if self.predictions is not None else None,
            )
            | _combine_entry(self.combine)
            | ({"dataset": self.dataset} if self.dataset is not None else {})
        )


def evaluate_model(model: Any, meta: dict, feature_set: FeatureSet) -> Evaluation:
    """Score a loaded model on the test rows of ``feature_set``.

    Parameters
    ----------
    model : fitted classifier
    meta : dict
        Header of its model file (:func:`~classify_images.pipeline.training.model_file.load_model`).
    feature_set : FeatureSet

    Raises
    ------
    ModelFileError
        The model was trained on another feature set.
    """
    check_model_matches(
        meta,
        config_hash=feature_set.config_hash,
        n_features=feature_set.n_features,
        class_names=feature_set.class_names,
    )
    n_train = len(feature_set.y_train)  # the test rows are scored block by block, the training rows not read
    combine = meta.get("combine")
    combined = (
        None
        if combine is None
        else partial(  # a model trained with --combine: its rows combined the same way
            combine_rows, channels=feature_set.channels, rule=combine["rule"], classifier=meta["classifier"]
        )
    )
    test_rows = PooledRows(feature_set, np.arange(n_train, n_train + len(feature_set.y_test)), transform=combined)
    return _evaluation(
        model,
        meta["classifier"],
        meta["params"],
        feature_set,
        test_rows,
        feature_set.y_test,
        feature_set.test_paths,
        n_train=n_train,
        train_seconds=meta.get("train_seconds"),
        search=meta.get("search"),
        combine=combine,
        X_mirror=PooledRows(feature_set, test_rows.indices, mirrored=True, transform=combined)
        if ((meta.get("search") or {}).get("flips") or {}).get("flip_test", augment_settings(feature_set).flip_test)
        == "average"
        else None,
    )


def combination_record(feature_set: FeatureSet, rule: str | None) -> dict | None:
    """What a model and a report record of ``--combine``: the rule and the channel layout (None without)."""
    return None if rule is None else {"rule": rule, "channels": [c.to_dict() for c in feature_set.channels]}


def _evaluation(
    model: Any,
    classifier: str,
    params: dict,
    feature_set: FeatureSet,
    X_test: np.ndarray | PooledRows,
    y_test: np.ndarray,
    test_paths: Sequence[str],
    *,
    n_train: int,
    train_seconds: float | None,
    search: dict | None = None,
    X_mirror: np.ndarray | PooledRows | None = None,
    combine: dict | None = None,
) -> Evaluation:
    """Score ``model`` on ``X_test`` (images ``test_paths`` of ``feature_set``; with ``X_mirror``, their
    mirrored rows, decision values averaged): confusion, predictions, provenance."""
    class_names = feature_set.class_names
    predicted, scores, test_seconds = _timed_decisions(model, X_test, class_names, X_mirror)
    y_test = np.asarray(y_test, dtype=np.int64)
    return Evaluation(
        classifier=classifier,
        params=params,
        feature_set=str(feature_set.path),
        config_hash=feature_set.config_hash,
        n_train=n_train,
        n_test=len(X_test),
        n_features=feature_set.n_features,
        class_names=class_names,
        confusion=confusion_matrix(y_test, predicted, labels=np.arange(len(class_names))),
        train_seconds=train_seconds,
        test_seconds=test_seconds,
        mean_per_class_accuracy=mean_per_class_accuracy(y_test, predicted),
        predictions=Predictions.from_scores(_image_paths(feature_set, test_paths), y_test, predicted, scores),
        config=feature_set.manifest.get("config"),
        search=search,
        versions=library_versions(),
        date=_now(),
        combine=combine,
        dataset=_dataset_root(feature_set.manifest),
    )


def _dataset_root(manifest: dict) -> str | None:
    """The dataset folder a manifest records (None when it records none, or not as text)."""
    dataset = manifest.get("dataset")
    root = dataset.get("root") if isinstance(dataset, dict) else None
    return root if isinstance(root, str) else None


@dataclass(frozen=True)
class ExperimentRun:
    """One seeded re-split of an experiment."""

    seed: int  #: seed of the split (:func:`~classify_images.pipeline.settings.dataset.split_indices`)
    mean_per_class_accuracy: float  #: on this split's test rows
    train_seconds: float  #: wall-clock time of ``fit``
    test_seconds: float  #: wall-clock time of ``predict``
    #: the classifier's ``random_state`` in this run (None: the classifier is not randomised)
    random_state: int | None = None
    #: recognition rate of each class on this split, in class order (NaN: no test image)
    per_class_accuracy: tuple[float, ...] | None = None
    #: :func:`top_k_accuracy` on this split
    top_k_accuracy: dict[int, float] = field(default_factory=dict)
    #: the parameters the search chose on this split's training rows (None: no search)
    chosen: dict[str, Any] | None = None
    #: the use of the stored mirrors the search chose on this split's training rows (None: not chosen)
    flips: dict[str, Any] | None = None

    def to_dict(self, class_names: Sequence[str] | None = None) -> dict[str, Any]:
        """JSON form (the per-class rates keyed by ``class_names`` when given, else a list)."""
        rates = None
        if self.per_class_accuracy is not None:
            rates = (
                [float(r) for r in self.per_class_accuracy]
                if class_names is None
                else {name: float(r) for name, r in zip(class_names, self.per_class_accuracy)}
            )
        return _json_form(
            self,
            "seed random_state mean_per_class_accuracy top_k_accuracy per_class_accuracy "
            "train_seconds test_seconds chosen" + (" flips" if self.flips is not None else ""),
            train_seconds=_seconds(self.train_seconds),
            test_seconds=_seconds(self.test_seconds),
            top_k_accuracy={str(k): v for k, v in self.top_k_accuracy.items()},
            per_class_accuracy=rates,
        )


@dataclass(frozen=True)
class Experiment:
    """Mean ± standard deviation of the accuracy over seeded re-splits."""

    classifier: str  #: registered name of the classifier
    params: dict[str, Any]  #: its parameters
    feature_set: str  #: folder of the feature set
    config_hash: str  #: pipeline config the features were computed with
    runs: tuple[ExperimentRun, ...]  #: one per seed, in seed order
    first: Evaluation | None = field(default=None, repr=False)  #: the full evaluation of the first seed's split
    combine: dict | None = None  #: the channel combination (``{"rule", "channels"}``), if any

    @property
    def accuracies(self) -> np.ndarray:
        """Mean per-class accuracy of each run."""
        return np.array([run.mean_per_class_accuracy for run in self.runs])

    @property
    def mean(self) -> float:
        """Mean of :attr:`accuracies`."""
        return float(self.accuracies.mean())

    @property
    def std(self) -> float:
        """Sample standard deviation (``ddof=1``) of :attr:`accuracies`; 0 for a single run."""
        return float(self.accuracies.std(ddof=1)) if len(self.runs) > 1 else 0.0

    @property
    def class_names(self) -> list[str] | None:
        """The classes (of :attr:`first`; None without it)."""
        return None if self.first is None else list(self.first.class_names)

    def per_class_statistics(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Mean and sample standard deviation (``ddof=1``; 0 for one run) of each class's rate over the runs.

        Classes in class order; a split where a class has no test image does not count for it
        (NaN if it has none in any split).  None when the runs do not record per-class rates.
        """
        if not self.runs or any(run.per_class_accuracy is None for run in self.runs):
            return None
        rates = np.array([run.per_class_accuracy for run in self.runs], dtype=np.float64)
        counted = np.sum(~np.isnan(rates), axis=0)
        with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(rates, axis=0)
            std = np.where(counted > 1, np.nanstd(rates, axis=0, ddof=1), np.where(counted == 1, 0.0, np.nan))
        return mean, std

    def edge_warning(self) -> str | None:
        """The one-line warning when the parameter search of any split chose its grid's edge, naming
        the splits (:func:`~classify_images.classifiers.model_selection.splits_edge_warning`); None
        without a search or when every choice lies inside the grid."""
        if self.first is None or self.first.search is None:
            return None
        from ...classifiers.model_selection import splits_edge_warning  # lazily, as search_parameters

        return splits_edge_warning(self.first.search["grid"], [(run.seed, run.chosen) for run in self.runs])

    def top_k_statistics(self) -> dict[int, tuple[float, float]]:
        """``{k: (mean, std)}`` of the runs' top-k accuracies (the k every run has)."""
        ks = set.intersection(*(set(run.top_k_accuracy) for run in self.runs)) if self.runs else set()
        out = {}
        for k in sorted(ks):
            values = np.array([run.top_k_accuracy[k] for run in self.runs])
            out[k] = (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the content of ``experiment.json``)."""
        names = self.class_names
        statistics = self.per_class_statistics()
        per_class = None
        if statistics is not None:
            keys = names if names is not None else [str(k) for k in range(len(statistics[0]))]
            per_class = {name: {"mean": float(m), "std": float(s)} for name, m, s in zip(keys, *statistics)}
        return _json_form(
            self,
            "classifier params feature_set config_hash repeats runs mean std top_k_accuracy per_class_accuracy note",
            repeats=len(self.runs),
            runs=[run.to_dict(names) for run in self.runs],
            top_k_accuracy={str(k): {"mean": m, "std": s} for k, (m, s) in self.top_k_statistics().items()},
            per_class_accuracy=per_class,
            note=EXPERIMENT_NOTE,
        ) | _combine_entry(self.combine)


def experiment_split(feature_set: FeatureSet, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The pooled row indices ``(train, test)`` of an experiment's split ``seed`` (sorted): the
    feature set's protocol drawn on its rows in the order the build split them (by class, then
    path), so that seed S re-draws the build's own split when the build used seed S and kept all the
    rest for testing (no test cap left images out)."""
    y_all = np.concatenate([feature_set.y_train, feature_set.y_test])
    paths_all = feature_set.train_paths + feature_set.test_paths
    split = feature_set.manifest["split"]
    build_order = np.asarray(sorted(range(len(paths_all)), key=lambda i: (int(y_all[i]), paths_all[i])), dtype=np.int64)
    train, test = split_indices(
        y_all[build_order],
        split["train_per_class"],
        split["test_per_class"],
        seed,
        train_fraction=split.get("train_fraction"),
    )
    return np.sort(build_order[train]), np.sort(build_order[test])


def run_experiment(
    feature_set: FeatureSet,
    name: str,
    params: dict[str, Any],
    repeats: int,
    *,
    first_seed: int = 0,
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
    search: dict[str, list] | str | None = None,
    combine: str | None = None,
    choose_flips: bool | None = None,
) -> Experiment:
    """Train and test ``repeats`` times on seeded re-splits of the stored rows.

    The rows of the training and test sets are pooled and split again with
    seeds ``first_seed … first_seed + repeats - 1`` under the feature set's
    protocol (``train_per_class``, ``test_per_class``).  The codebook (and a
    min-max normalisation, if any) stays the one learnt from the first split's
    training images, so the test images of later splits were seen, unlabelled,
    by the codebook — the usual practice when reporting mean ± std, but say so
    (:data:`EXPERIMENT_NOTE`).  A randomised classifier gets each run's split seed as its
    ``random_state`` unless ``params`` set one, so the experiment is reproducible.  With
    ``search``, each split chooses those parameters by cross-validation on its own training
    rows (:func:`train_classifier`), recorded per run (``chosen``).  With ``[augment]`` in the feature
    set's config, each split trains on its training images' mirrors too (``flip_train``) and averages
    the decision values of each test image and its mirror (``flip_test = "average"``): the mirrors
    are stored row for row with the images, so they follow their images into each split.  With
    ``combine`` (a rule of :mod:`~classify_images.classifiers.combination`), the rows of a
    multi-channel feature set are combined by it first (each split's training rows in place, the
    test rows block by block).  ``choose_flips`` (default: whenever the mirrors are stored) lets a
    search also choose the mirrors' use; False keeps the config's ``[augment]``.
    """
    record = combination_record(feature_set, combine)
    combined = None
    if combine is not None:  # refused before the rows are read
        check_combination(combine, feature_set.channels, name)
        combined = partial(combine_rows, channels=feature_set.channels, rule=combine, classifier=name)
    # no pooled copy: each split gathers its training rows (the one copy a fit needs) and
    # scores its test rows block by block from the store
    augment = augment_settings(feature_set)
    dtype = training_dtype(feature_set, name, combine)
    y_all = np.concatenate([feature_set.y_train, feature_set.y_test])
    paths_all = feature_set.train_paths + feature_set.test_paths
    runs = []
    first = None
    seeds = range(first_seed, first_seed + repeats)
    for seed in progress(seeds) if progress else seeds:
        _log.info("experiment: split %d of %d (seed %d)", seed - first_seed + 1, repeats, seed)
        train, test = experiment_split(feature_set, seed)
        mirrored = augment.flip_train or (bool(search) and augment.mirrors)
        X_train = (
            rows_by_columns(feature_set, train, name, params, search, mirrored=mirrored) if combine is None else None
        )
        if X_train is None:  # gathered: the one copy a fit needs
            X_train = _in_place(
                combined,
                rows_and_mirrors(feature_set, train, dtype)
                if mirrored
                else feature_set.pooled_rows(train, dtype=dtype),
            )
        training = train_classifier(
            name,
            params,
            X_train,
            y_all[train],
            seed=seed,
            class_names=feature_set.class_names,
            search=search,
            mirrored=mirrored,
            choose_flips=augment.mirrors if choose_flips is None else choose_flips and augment.mirrors,
            flip_train=augment.flip_train,
        )
        del X_train
        evaluation = _evaluation(
            training.estimator,
            name,
            training.params,
            feature_set,
            PooledRows(feature_set, test, transform=combined),
            y_all[test],
            [paths_all[k] for k in test],
            n_train=int(train.size),
            train_seconds=training.train_seconds,
            search=training.search,
            combine=record,
            X_mirror=PooledRows(feature_set, test, mirrored=True, transform=combined)
            if training.flip_test(augment.flip_test) == "average"
            else None,
        )
        first = first or evaluation
        random_state = training.estimator.get_params().get("random_state")
        runs.append(
            ExperimentRun(
                seed,
                evaluation.mean_per_class_accuracy,
                training.train_seconds,
                evaluation.test_seconds,
                random_state=random_state,
                per_class_accuracy=tuple(float(r) for r in evaluation.per_class_accuracy),
                top_k_accuracy=evaluation.top_k_accuracy,
                chosen=None if training.search is None else training.search["best"],
                flips=None if training.search is None else training.search.get("flips"),
            )
        )
    return Experiment(name, params, str(feature_set.path), feature_set.config_hash, tuple(runs), first, record)
