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
test image per class (:func:`~classify_images.pipeline.dataset.split_indices`
refuses smaller classes).

The results are dataclasses (:class:`TrainingResult`, :class:`Evaluation`,
:class:`Experiment`) with a ``to_dict()`` that gives their JSON form;
:mod:`~classify_images.pipeline.report` renders them.

References
----------
.. [1] S. Lazebnik, C. Schmid and J. Ponce, "Beyond Bags of Features: Spatial
   Pyramid Matching for Recognizing Natural Scene Categories", CVPR 2006.
.. [2] K. H. Brodersen, C. S. Ong, K. E. Stephan and J. M. Buhmann, "The balanced
   accuracy and its posterior distribution", ICPR 2010.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import balanced_accuracy_score, confusion_matrix

from ..classifiers.base import warm_up
from ..classifiers.registry import classifier_class, make_classifier
from .dataset import split_indices
from .feature_store import FeatureSet
from .model_file import check_model_matches

__all__ = [
    "TrainingResult",
    "Evaluation",
    "ExperimentRun",
    "Experiment",
    "per_class_accuracy",
    "mean_per_class_accuracy",
    "train_classifier",
    "evaluate_model",
    "run_experiment",
]

#: What :func:`run_experiment` re-uses from the first split, stated in its JSON form.
EXPERIMENT_NOTE = "re-splits of the stored rows; the codebook was learnt from the first split's training images only"


def _seconds(value: float | None) -> float | None:
    """Seconds as stored in JSON files: rounded to 0.1 ms."""
    return None if value is None else round(value, 4)


def _json_form(result: Any, keys: str, **converted: Any) -> dict[str, Any]:
    """``{key: result.<key>}`` for the space-separated ``keys``, in order; ``converted`` replaces some values."""
    return {key: converted[key] if key in converted else getattr(result, key) for key in keys.split()}


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


def _timed_predict(estimator: Any, X: np.ndarray) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    predicted = estimator.predict(X)
    return predicted, time.perf_counter() - start


@dataclass(frozen=True)
class TrainingResult:
    """A fitted classifier and what its training cost."""

    classifier: str  #: registered name (:data:`~classify_images.classifiers.registry.CLASSIFIERS`)
    params: dict[str, Any]  #: parameters given on top of the estimator's defaults
    estimator: Any  #: the fitted estimator
    train_seconds: float  #: wall-clock time of ``fit``
    n_samples: int  #: training rows
    n_features: int  #: dimension of the rows

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without the estimator: see :func:`~classify_images.pipeline.model_file.save_model`)."""
        return _json_form(self, "classifier params n_samples n_features train_seconds",
                          train_seconds=_seconds(self.train_seconds))


def seeded_params(name: str, params: dict[str, Any], seed: int | None) -> dict[str, Any]:
    """``params`` with ``random_state=seed`` for a classifier that has one and was given none.

    The commands pass their seed here, so that the same command on the same data trains the
    same model (PmSVM's example order, MBKL's stumps and HIK nSVM's epochs are random).
    """
    if seed is None or "random_state" in params or "random_state" not in classifier_class(name)().get_params():
        return dict(params)
    return {**params, "random_state": int(seed)}


def train_classifier(
    name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray, *, seed: int | None = None
) -> TrainingResult:
    """Fit the registered classifier ``name`` with ``params`` on rows ``X``, labels ``y``.

    ``seed`` becomes ``random_state`` unless ``params`` set it (:func:`seeded_params`).
    The numba kernels are compiled on a tiny problem first
    (:func:`~classify_images.classifiers.base.warm_up`), so that ``train_seconds`` is
    the training alone, not numba's compilation.
    """
    params = seeded_params(name, params, seed)
    estimator = make_classifier(name, params)
    warm_up(estimator, X, y)
    start = time.perf_counter()
    estimator.fit(X, y)
    seconds = time.perf_counter() - start
    return TrainingResult(name, params, estimator, seconds, int(X.shape[0]), int(X.shape[1]))


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

    @property
    def per_class_accuracy(self) -> np.ndarray:
        """Recognition rate of each class (NaN for a class with no test image)."""
        return per_class_accuracy(self.confusion)

    @property
    def overall_accuracy(self) -> float:
        """Fraction of test images classified correctly (every image counts equally)."""
        return float(np.trace(self.confusion) / max(self.confusion.sum(), 1))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the content of ``report.json``)."""
        return _json_form(
            self,
            "classifier params feature_set config_hash n_train n_test n_features mean_per_class_accuracy "
            "overall_accuracy per_class_accuracy class_names confusion train_seconds test_seconds",
            per_class_accuracy={name: float(rate) for name, rate in zip(self.class_names, self.per_class_accuracy)},
            confusion=self.confusion.tolist(),
            test_seconds=_seconds(self.test_seconds),
        )


def evaluate_model(model: Any, meta: dict, feature_set: FeatureSet) -> Evaluation:
    """Score a loaded model on the test rows of ``feature_set``.

    Parameters
    ----------
    model : fitted classifier
    meta : dict
        Header of its model file (:func:`~classify_images.pipeline.model_file.load_model`).
    feature_set : FeatureSet

    Raises
    ------
    ModelFileError
        The model was trained on another feature set.
    """
    check_model_matches(meta, config_hash=feature_set.config_hash, n_features=feature_set.n_features)
    X_test = np.asarray(feature_set.X_test)
    predicted, test_seconds = _timed_predict(model, X_test)
    n_classes = len(feature_set.class_names)
    return Evaluation(
        classifier=meta["classifier"],
        params=meta["params"],
        feature_set=str(feature_set.path),
        config_hash=feature_set.config_hash,
        n_train=int(feature_set.X_train.shape[0]),
        n_test=int(X_test.shape[0]),
        n_features=feature_set.n_features,
        class_names=feature_set.class_names,
        confusion=confusion_matrix(feature_set.y_test, predicted, labels=np.arange(n_classes)),
        train_seconds=meta.get("train_seconds"),
        test_seconds=test_seconds,
        mean_per_class_accuracy=mean_per_class_accuracy(feature_set.y_test, predicted),
    )


@dataclass(frozen=True)
class ExperimentRun:
    """One seeded re-split of an experiment."""

    seed: int  #: seed of the split (:func:`~classify_images.pipeline.dataset.split_indices`)
    mean_per_class_accuracy: float  #: on this split's test rows
    train_seconds: float  #: wall-clock time of ``fit``
    test_seconds: float  #: wall-clock time of ``predict``

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return _json_form(self, "seed mean_per_class_accuracy train_seconds test_seconds",
                          train_seconds=_seconds(self.train_seconds), test_seconds=_seconds(self.test_seconds))


@dataclass(frozen=True)
class Experiment:
    """Mean ± standard deviation of the accuracy over seeded re-splits."""

    classifier: str  #: registered name of the classifier
    params: dict[str, Any]  #: its parameters
    feature_set: str  #: folder of the feature set
    config_hash: str  #: pipeline config the features were computed with
    runs: tuple[ExperimentRun, ...]  #: one per seed, in seed order

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

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the content of ``experiment.json``)."""
        return _json_form(self, "classifier params feature_set config_hash repeats runs mean std note",
                          repeats=len(self.runs), runs=[run.to_dict() for run in self.runs], note=EXPERIMENT_NOTE)


def run_experiment(
    feature_set: FeatureSet,
    name: str,
    params: dict[str, Any],
    repeats: int,
    *,
    first_seed: int = 0,
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
) -> Experiment:
    """Train and test ``repeats`` times on seeded re-splits of the stored rows.

    The rows of the training and test sets are pooled and split again with
    seeds ``first_seed … first_seed + repeats - 1`` under the feature set's
    protocol (``train_per_class``, ``test_per_class``).  The codebook (and a
    min-max normalisation, if any) stays the one learnt from the first split's
    training images, so the test images of later splits were seen, unlabelled,
    by the codebook — the usual practice when reporting mean ± std, but say so
    (:data:`EXPERIMENT_NOTE`).  A randomised classifier gets each run's split seed as its
    ``random_state`` unless ``params`` set one, so the experiment is reproducible.
    """
    X_all = np.concatenate([np.asarray(feature_set.X_train), np.asarray(feature_set.X_test)])
    y_all = np.concatenate([feature_set.y_train, feature_set.y_test])
    split = feature_set.manifest["split"]
    runs = []
    seeds = range(first_seed, first_seed + repeats)
    for seed in progress(seeds) if progress else seeds:
        train, test = split_indices(y_all, split["train_per_class"], split["test_per_class"], seed)
        training = train_classifier(name, params, X_all[train], y_all[train], seed=seed)
        predicted, test_seconds = _timed_predict(training.estimator, X_all[test])
        accuracy = mean_per_class_accuracy(y_all[test], predicted)
        runs.append(ExperimentRun(seed, accuracy, training.train_seconds, test_seconds))
    return Experiment(name, params, str(feature_set.path), feature_set.config_hash, tuple(runs))
