"""One-vs-rest training on a Dask cluster: groups of classes on the workers, one model back.

A one-vs-rest classifier solves one binary problem per class.  For PmSVM (+LUT) and HIK
nSVM the problems are independent: each has its own arithmetic, and the only random draw
(the seed of the example order) is shared by all of them.  So the problems are split into
groups, one group per worker by default; each worker fits its group on the whole training
set (:meth:`~classify_images.classifiers.base.OneVsRestClassifierBase.fit_problem_group`),
and the client concatenates the per-class arrays
(:func:`~classify_images.classifiers.base.merge_problem_groups`) into the model that
``fit`` on one machine learns, bit for bit: the same ``coef_``, hence the same predictions.

The linear squared-hinge SVM (``QuadraticHingeSVC``) minimises a sum of per-class
objectives: on one machine one L-BFGS run solves them jointly (the default), on a cluster
each group of classes is solved by its own L-BFGS run, and the merged model is the joint
one within solver tolerance (each run stops by its own gradient norm; not bit for bit:
``n_iter_`` is the largest of the groups', ``objective_`` their sum).  MBKL (stumps and
kernel weights learnt from all classes, then a joint L-BFGS) does not decompose into
independent per-class problems; it is refused with a one-line
:class:`DistributedTrainingError` rather than trained into a different model.

Where the workers get the training rows.  Every problem needs every row, so every worker
needs the whole training matrix.  Two sources:

* :class:`FeatureSetRows` — the feature set's folder, on a filesystem every worker sees
  (the shared filesystem the stage cache already needs, docs/design.md).  Each worker opens
  it itself (once per process) and memory-maps the rows: nothing passes through the client,
  and the worker processes of one machine share the file's pages in the OS page cache.
  This is the choice for large sets — the client could not hold them, and sending them
  from it would cost (workers × bytes) over its one network link.
* an in-memory matrix — sent once to every worker (``client.scatter(..., broadcast=True)``),
  for a client that holds the rows and workers that do not share its disk.

The seed: ``random_state`` is turned into a ``RandomState`` on the client and every task
receives a copy in the same state, so every group draws the seed ``fit`` draws, whichever
worker runs it (an int gives the model of ``fit`` with that int; ``None`` one model, whose
seed is drawn on the client; a ``RandomState`` instance is not advanced).

Dask is imported by the caller (:mod:`classify_images.pipeline.execution.cluster`); this module only
uses the ``client`` it is given.
"""

from __future__ import annotations

import copy
import functools
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.utils import check_random_state

from ...classifiers._parallel import even_bounds
from ...classifiers.base import merge_problem_groups, n_problems
from ...errors import ClassifyImagesError
from ..storage.feature_store import FeatureSet, FeatureSetError, load_feature_set

__all__ = ["DistributedTrainingError", "FeatureSetRows", "check_distributable", "fit_distributed", "ParallelProblems"]


class DistributedTrainingError(ClassifyImagesError, ValueError):
    """The classifier cannot be trained in groups of classes (one line saying why)."""


@dataclass(frozen=True)
class FeatureSetRows:
    """The training rows of a feature set, read by each worker from ``path`` (a shared filesystem).

    ``shape`` and ``config_hash`` are the client's view of the feature set: a worker that
    finds another one at ``path`` (not the same filesystem) refuses with one line.
    """

    path: str
    shape: tuple[int, int]
    config_hash: str

    @classmethod
    def of(cls, feature_set: FeatureSet) -> FeatureSetRows:
        """The rows of an opened feature set (its absolute path, so that workers started elsewhere find it).

        The shape comes from the manifest: the client does not read the rows.
        """
        shape = (len(feature_set.train_paths), int(feature_set.manifest["n_features"]))
        return cls(str(feature_set.path.resolve()), shape, feature_set.config_hash)

    def load(self) -> np.ndarray:
        """The memory-mapped training rows (opened once per process)."""
        return _open_rows(self)


@functools.lru_cache(maxsize=2)
def _open_rows(rows: FeatureSetRows) -> np.ndarray:
    feature_set = load_feature_set(rows.path)
    if feature_set.config_hash != rows.config_hash or tuple(feature_set.X_train.shape) != rows.shape:
        raise FeatureSetError(
            f"the worker finds another feature set at {rows.path} (training rows {feature_set.X_train.shape}, "
            f"the client's {rows.shape}): the workers must see the client's files (a shared filesystem)"
        )
    return feature_set.X_train


def check_distributable(estimator_class: type) -> None:
    """Raise :class:`DistributedTrainingError` unless the classifier's problems can be fitted in groups."""
    if getattr(estimator_class, "_problem_axes", None) is None:
        reason = getattr(estimator_class, "_joint_reason", "is not a one-vs-rest classifier of this package")
        raise DistributedTrainingError(f"{estimator_class.__name__} {reason}")


def _fit_group(estimator: Any, rows: Any, y: np.ndarray, start: int, stop: int, sample_weight: Any) -> tuple[Any, list]:
    """Task run on a worker: problems ``start:stop`` of ``estimator`` (and the warnings it raised)."""
    X = rows.load() if isinstance(rows, FeatureSetRows) else rows
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        group = clone(estimator).fit_problem_group(X, y, start, stop, sample_weight=sample_weight)
    return group, [(warning.category, str(warning.message)) for warning in caught]


def fit_distributed(
    client: Any,
    estimator: Any,
    rows: Any,
    y: Any,
    *,
    sample_weight: Any = None,
    n_groups: int | None = None,
    timeout: float | None = None,
) -> Any:
    """Fit ``estimator`` on a Dask cluster, its one-vs-rest problems in groups over the workers.

    Parameters
    ----------
    client : distributed.Client
        The cluster (:func:`~classify_images.pipeline.execution.cluster.open_client`).
    estimator : PmSVM, HIKnSVM or QuadraticHingeSVC (unfitted; left unchanged)
        A classifier whose problems decompose (:func:`check_distributable`).
    rows : FeatureSetRows, or an ndarray / CSR matrix
        The training rows: read by the workers from the shared path, or sent to each worker
        once (module docstring).
    y : array-like of shape (n_samples,)
        The labels (on the client; sent once to every worker).
    sample_weight : array-like of shape (n_samples,), default=None
    n_groups : int, default=None
        Groups of problems, near-equal and contiguous; default one per worker (at most one
        per problem).  The model does not depend on it.
    timeout : float, default=None
        Seconds to wait for the groups (None: no limit); then ``TimeoutError``, and the
        unfinished tasks are cancelled.

    Returns
    -------
    estimator
        A new fitted estimator: the model ``clone(estimator).fit(X, y, sample_weight)`` learns
        (bit for bit, or within solver tolerance for QuadraticHingeSVC).
        Warnings the workers raised (``ConvergenceWarning``) are raised again on the client.

    Raises
    ------
    DistributedTrainingError
        The classifier learns its problems jointly.
    ValueError
        Fewer than 2 classes, or what ``fit`` refuses (raised from the worker).
    TimeoutError
        ``timeout`` passed.
    """

    check_distributable(type(estimator))
    y = np.asarray(y)
    classes = np.unique(y)
    if classes.size < 2:
        raise ValueError(f"{type(estimator).__name__} needs samples of at least 2 classes; got {classes.size}")
    total = n_problems(classes.size)
    if n_groups is None:
        n_groups = max(1, len(client.scheduler_info().get("workers", {})))
    bounds = even_bounds(total, max(1, min(total, int(n_groups))))
    seeded = "random_state" in estimator.get_params()
    random_state = estimator.get_params()["random_state"] if seeded else None
    state = copy.deepcopy(check_random_state(random_state))  # drawn from by no one but the tasks' copies

    def task_estimator() -> Any:
        """A clone whose ``random_state`` is a copy of ``state``: every group draws the same seed."""
        task = clone(estimator)
        return task.set_params(random_state=copy.deepcopy(state)) if seeded else task

    # hash=False: keys of their own, so that data scattered by an earlier call and being
    # released meanwhile is never mistaken for this call's (content-hashed keys would collide)
    if not isinstance(rows, FeatureSetRows):
        [rows] = client.scatter([rows], broadcast=True, hash=False)
    [y_shared] = client.scatter([y], broadcast=True, hash=False)
    futures = [
        client.submit(
            _fit_group, task_estimator(), rows, y_shared, int(bounds[k]), int(bounds[k + 1]), sample_weight, pure=False
        )
        for k in range(len(bounds) - 1)
    ]
    if timeout is None:
        results = client.gather(futures)
    else:
        deadline = time.monotonic() + timeout
        try:
            results = [future.result(timeout=max(deadline - time.monotonic(), 0.0)) for future in futures]
        except TimeoutError:
            client.cancel(futures)
            raise TimeoutError(f"the {len(futures)} groups of classes did not finish within {timeout:g} s") from None
    for category, message in dict.fromkeys(warning for _, caught in results for warning in caught):
        warnings.warn(message, category, stacklevel=2)
    model = merge_problem_groups([group for group, _ in results])
    return model.set_params(random_state=random_state) if seeded else model


class ParallelProblems:
    """A classifier whose one-vs-rest problems are trained on a Dask cluster, as a wrapper
    estimator (dask-ml's ``ParallelPostFit`` / ``Incremental`` pattern):
    ``ParallelProblems(PmSVM(), client=client).fit(rows, y)`` runs :func:`fit_distributed`.

    Parameters
    ----------
    estimator : classifier whose problems decompose (:func:`check_distributable`; left unchanged)
    client : distributed.Client
    rows : FeatureSetRows, optional
        Where the workers read the training rows (a feature set on a shared file system);
        default: the ``X`` given to :meth:`fit`, sent to each worker once.
    n_groups : int, optional
        Groups of problems (default: one per worker).

    Attributes
    ----------
    estimator_ : the fitted estimator, equal to one fitted on one machine within solver tolerance
    """

    def __init__(self, estimator: Any, *, client: Any, rows: Any = None, n_groups: int | None = None) -> None:
        self.estimator = estimator
        self.client = client
        self.rows = rows
        self.n_groups = n_groups

    def fit(self, X: Any, y: Any) -> ParallelProblems:
        """Train on ``rows`` when given (``X`` then only describes them), else on ``X``."""
        rows = X if self.rows is None else self.rows
        self.estimator_ = fit_distributed(self.client, self.estimator, rows, y, n_groups=self.n_groups)
        return self

    def __getattr__(self, name: str) -> Any:
        """``predict``, ``decision_function``, ``classes_``, … of the fitted estimator."""
        if name.startswith("__") or "estimator_" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["estimator_"], name)
