"""Model selection: a classifier's parameters chosen by stratified k-fold cross-validation.

:func:`search_parameters` scores every point of a grid (``{"C": [0.1, 1, 10, 100]}``, or
several parameters: their product) by the mean, over ``folds`` seeded stratified folds of
the *training rows only* (:class:`sklearn.model_selection.StratifiedKFold`, shuffled), of the
mean per-class accuracy on the held-out fold (``balanced_accuracy``: the mean of the per-class
recalls), and returns the best point (ties: the first in grid order, as
:class:`~sklearn.model_selection.GridSearchCV` ranks them) with every score, and which of its
values lie on an edge of their grid (:attr:`SearchResult.on_edge`).

Two ways to fit the folds
    *Any estimator*: :class:`~sklearn.model_selection.GridSearchCV` (``refit=False``), which
    indexes the rows of each fold (a copy of ``(k − 1)/k`` of the rows per fit).

    *The linear squared-hinge SVM* (:class:`~classify_images.classifiers.quadratic_hinge.QuadraticHingeSVC`)
    when ``n ≤ d`` (rows fewer than dimensions, e.g. Fisher vectors): one Gram matrix
    ``K = X Xᵀ`` (``n × n``, float64) for all folds and grid points, no copy of the rows.
    For a fold with training rows ``T`` and held-out rows ``H``, the eigendecomposition
    ``K_TT = U diag(λ) Uᵀ`` (the ``pinv`` rank rule of
    :mod:`~classify_images.classifiers.eigenbasis`) gives the training rows in the orthonormal
    basis ``V = X_Tᵀ U diag(λ)^{-1/2}`` of their span, ``Z_T = U diag(λ)^{1/2}``, and the
    held-out rows in the same basis, ``Z_H = X_H V = K_HT U diag(λ)^{-1/2}``.  The objective only
    sees ``W`` through ``‖W‖²`` and ``X_T W`` and its minimiser lies in the span, so training
    on ``Z_T`` (``solver="features"``, whose Jacobi preconditioner is then ``diag(λ)``: the
    eigenbasis solver's) and scoring ``Z_H`` is training on ``X_T`` and scoring ``X_H``; each
    fold's decomposition serves every grid point.  The scores equal the generic path's up to
    the solver tolerance (tested).

    What a fold costs beyond the one Gram matrix: its ``n_T × n_T`` eigendecomposition
    (divide and conquer, ``driver="evd"``) and one L-BFGS fit per grid point on ``n_T × r``
    coordinates (kept in the rows' precision: float32 for float32 or float16 rows, whose
    products are then float32, refined in float64 if rounding stalls the line search, as on
    the rows themselves).  For float32 or float16 rows the decomposition itself is float32
    (``ssyevd``, half the time of ``dsyevd``), its rank rule that of float32 rounding
    (``λ > n_T · eps32 · λ_max``): the coordinates are float32 either way.  On Flowers-17 this
    moved one held-out score of 20 by one image (0.1 point); where two grid points tie within
    such a difference the choice can move between them.  Each product runs on one BLAS thread: matrices of a few thousand rows
    gain little from threads, and on a shared machine threads that wait for each other cost
    several times what they save.  The folds (with ``choose_flips``, each fold's two
    decompositions) are instead separate tasks on as many threads as the caller's BLAS pool
    had: tasks do not wait for each other, and LAPACK and BLAS release the GIL.  The scores do
    not depend on the threads.

    Every fold fit starts from ``W = 0``, as the final fit does, so a fold's model at each ``C``
    is the one the same fit of its rows gives.  Warm starts along ``C`` (each fit started from
    the solution at the ``C`` below) were measured and not kept: the stopping rule
    ``‖∇f‖ ≤ tol · ‖∇f(0)‖`` is loose at large ``C`` (``‖∇f(0)‖`` grows with ``C``; a cold fit
    stops after a few iterations), so warm-started fits ended elsewhere, nearer the optimum, and
    changed the choice on Flowers-17 while saving little time (docs/colour-and-defaults.md,
    "Cost of choosing C and the mirrors").

With mirrors (``mirrored=True``: ``[augment] flip_train``)
    ``X`` holds ``2n`` rows, the ``n`` training images then their mirrors in the same order
    (row ``n + i`` mirrors row ``i``), and ``y`` the ``n`` labels of the images.  The folds are
    drawn over the *images* (stratified on ``y``), and an image's mirror goes wherever the image
    goes: a fold trains on its training images and their mirrors (``T ∪ (T + n)``) and never
    sees the mirror of a held-out image.  It scores each held-out image ``i ∈ H`` as the test is
    scored with ``flip_test = "average"``: the class of the largest averaged decision value
    ``½ (f_c(x_i) + f_c(x_{n+i}))``.  On the Gram path ``K`` is the ``2n × 2n`` Gram matrix of
    all the rows (one for every fold and grid point, no row copies); the generic path fits each
    fold on its own copy of its rows.

The default search (no ``C`` given)
    :func:`default_grid` is the grid the commands search when a classifier with a ``C`` is trained
    without one: ``C = f / mean_i ‖x_i‖²`` for ``f`` in :data:`DEFAULT_C_FACTORS` (SVMlight's
    default [2]_ times 0.1 … 1000), so the grid follows the scale of the rows (unit-norm Fisher
    vectors: C = 0.1 … 1000).

Choosing the mirrors (``choose_flips=True``, with ``mirrored``)
    The four uses of stored mirrors (:data:`FLIP_VARIANTS`: training on the images alone or on the
    images and their mirrors; scoring a held-out image alone or averaged with its mirror) are
    scored with every grid point on the same folds, and the best (variant, point) pair is chosen;
    the variants are ordered from no mirrors to both, so on a tie the fewer mirrors win: a mirror
    is used only where it wins on the training rows (a pose-aligned dataset keeps none).  On the
    Gram path each fold needs two eigendecompositions (training rows without and with their
    mirrors) for all variants and grid points.

References
----------
.. [1] R. Kohavi, "A study of cross-validation and bootstrap for accuracy estimation and model
   selection", IJCAI 1995 (stratified k-fold).
.. [2] T. Joachims, "Making Large-Scale SVM Learning Practical", in Advances in Kernel Methods,
   MIT Press, 1999 (SVMlight's default ``C = 1 / mean x.x``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as la
from sklearn.base import clone
from sklearn.metrics import balanced_accuracy_score
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from threadpoolctl import threadpool_info, threadpool_limits

from .._log import fits_summarised
from ..errors import ClassifyImagesError
from ._half import row_squared_norms
from ._parallel import map_tasks
from .column_blocks import is_column_blocks
from .eigenbasis import gram_matrix
from .registry import MAX_SEARCH_POINTS

__all__ = [
    "SearchError",
    "SearchResult",
    "search_parameters",
    "search_summary",
    "edge_warning",
    "splits_edge_warning",
    "DEFAULT_FOLDS",
    "DEFAULT_C_FACTORS",
    "FLIP_VARIANTS",
    "default_grid",
    "gram_path_applies",
]

#: Folds of the cross-validation.
DEFAULT_FOLDS = 3

#: Multiples of SVMlight's ``C = 1 / mean ‖x‖²`` searched when ``C`` is not given (:func:`default_grid`).
DEFAULT_C_FACTORS = (0.1, 1.0, 10.0, 100.0, 1000.0)

#: The uses of stored mirrors ``choose_flips`` compares, fewest mirrors first:
#: ``(flip_train, flip_test)`` as in ``[augment]``.
FLIP_VARIANTS = ((False, "none"), (False, "average"), (True, "none"), (True, "average"))


def default_grid(X: Any, n_rows: int | None = None, *, gram: np.ndarray | None = None) -> dict[str, list[float]]:
    """``{"C": [f / mean_i ‖x_i‖² for f in DEFAULT_C_FACTORS]}`` over the first ``n_rows`` rows of
    ``X`` (all by default; the images without their mirrors), each value rounded to 3 significant
    digits; the factors themselves when every row is zero.

    Parameters
    ----------
    X : ndarray or sparse matrix, shape (n_samples, n_features)
    n_rows : int, optional
    gram : ndarray, shape (n_samples, n_samples), optional
        ``X Xᵀ`` when it is at hand: ``‖x_i‖²`` is its diagonal, and the rows are not read again.

    Returns
    -------
    dict
        ``{"C": [...]}``, increasing.
    """
    count = X.shape[0] if n_rows is None else n_rows
    rows = X[:count]
    if gram is not None:
        total = float(np.sum(np.diagonal(gram)[:count]))
    elif hasattr(rows, "multiply"):  # sparse
        total = float(rows.multiply(rows).sum())
    elif is_column_blocks(rows):
        total = float(np.sum(rows.squared_norms()))
    else:  # float64 sums of the rows' own values: no float64 copy of the rows
        total = float(np.sum(row_squared_norms(np.asarray(rows))))
    mean = total / max(rows.shape[0], 1)
    scale = 1.0 / mean if mean > 0 else 1.0
    return {"C": [float(f"{factor * scale:.3g}") for factor in DEFAULT_C_FACTORS]}


class SearchError(ClassifyImagesError, ValueError):
    """A parameter grid that cannot be searched (one line naming the parameter)."""


@dataclass(frozen=True)
class SearchResult:
    """What a grid search chose and why."""

    grid: dict[str, list]  #: the values tried, per parameter
    best: dict[str, Any]  #: the chosen value of each parameter
    scores: list[dict[str, Any]]  #: per grid point: ``{"params": {...}, "score": mean held-out accuracy}``
    folds: int  #: folds of the cross-validation
    seed: int  #: seed of the fold assignment
    method: str  #: ``"gram"`` (one Gram matrix, no row copies) or ``"refit"`` (GridSearchCV)
    on_edge: list[str] = field(
        default_factory=list
    )  #: parameters whose choice is the first or last value of a grid of ≥ 3
    mirrored: bool = False  #: folds of images with their mirrors, held-out images scored averaged with their mirrors
    #: with ``choose_flips``: the chosen use of the mirrors, ``{"flip_train": bool, "flip_test": "none" | "average"}``
    flips: dict[str, Any] | None = None
    #: the Gram matrix ``X Xᵀ`` of the rows searched (``method == "gram"``), for the final fit
    #: (:func:`~classify_images.classifiers.eigenbasis.reused_gram`); not part of :meth:`to_dict`
    gram: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (model file header, report)."""
        return {
            "grid": self.grid,
            "best": self.best,
            "scores": self.scores,
            "folds": self.folds,
            "seed": self.seed,
            "method": self.method,
            "on_edge": self.on_edge,
            "mirrored": self.mirrored,
            **({"flips": self.flips} if self.flips is not None else {}),
        }

    def warning(self) -> str | None:
        """The one-line warning when a choice is on its grid's edge, else None (:func:`edge_warning`)."""
        return edge_warning(self.to_dict())


def _values_text(values: dict[str, Any]) -> str:
    return ", ".join(
        f"{name} = {value:g}"
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else f"{name} = {value!r}"
        for name, value in values.items()
    )


def search_summary(search: dict[str, Any]) -> str:
    """One line: what a search (``SearchResult.to_dict()``) chose, from which grid, by what."""
    grid = "; ".join(
        f"{name} in {', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in values)}"
        for name, values in search["grid"].items()
    )
    best = max(entry["score"] for entry in search["scores"])
    rows = (
        "training images and their mirrors, each image in one fold with its mirror"
        if search.get("mirrored")
        else "training rows"
    )
    flips = search.get("flips")
    mirrors = (
        ""
        if flips is None
        else "; mirrors: "
        + ("trained on" if flips["flip_train"] else "not trained on")
        + ", "
        + ("test images averaged with their mirrors" if flips["flip_test"] == "average" else "no test-time averaging")
    )
    return (
        f"{_values_text(search['best'])} chosen by {search['folds']}-fold stratified cross-validation on the "
        f"{rows} ({grid}; held-out mean per-class accuracy {100 * best:.2f} %){mirrors}"
    )


def edge_warning(search: dict[str, Any]) -> str | None:
    """The one-line warning when a search's choice is on its grid's edge, else None."""
    if not search.get("on_edge"):
        return None
    chosen = _values_text({name: search["best"][name] for name in search["on_edge"]})
    return f"the search chose {chosen}, on the edge of its grid: the best value may lie beyond it; widen the grid"


def splits_edge_warning(grid: dict[str, list], chosen: Sequence[tuple[int, dict[str, Any] | None]]) -> str | None:
    """The one-line warning when the choice of *any* split of an experiment is on its grid's edge.

    Parameters
    ----------
    grid : dict
        The searched grid, ``{name: [values]}`` (the same on every split).
    chosen : sequence of (seed, dict or None)
        Each split's seed and the values its search chose (None: no search on that split).

    Returns
    -------
    str or None
        ``"the search chose a value on the edge of its grid on 2 of 3 splits (seed 0: C = 100;
        seed 2: C = 100): …"``, or None when every choice lies inside its grid.
    """
    on_edge = [(seed, {name: best[name] for name in _edges(grid, best)}) for seed, best in chosen if best]
    on_edge = [(seed, values) for seed, values in on_edge if values]
    if not on_edge:
        return None
    where = "; ".join(f"seed {seed}: {_values_text(values)}" for seed, values in on_edge)
    return (
        f"the search chose a value on the edge of its grid on {len(on_edge)} of {len(chosen)} splits ({where}): "
        "the best value may lie beyond it; widen the grid"
    )


def _check_grid(estimator: Any, grid: dict[str, list]) -> dict[str, list]:
    if not grid:
        raise SearchError("--search needs at least one parameter, e.g. --search C=0.1,1,10,100")
    known = estimator.get_params(deep=False)
    for name, values in grid.items():
        if name not in known:
            raise SearchError(
                f"--search {name}=...: {type(estimator).__name__} has no parameter {name!r}; "
                f"its parameters: {', '.join(sorted(known))}"
            )
        if not isinstance(values, (list, tuple)) or not values:
            raise SearchError(f"--search {name}=...: give one or more values separated by commas")
        try:
            for value in values:
                clone(estimator).set_params(**{name: value})._validate_params()
        except (ValueError, TypeError) as exc:
            raise SearchError(f"--search {name}=...: {str(exc).splitlines()[0]}") from None
    return {name: list(values) for name, values in grid.items()}


def _points(grid: dict[str, list]) -> list[dict[str, Any]]:
    """The grid's points in :class:`~sklearn.model_selection.ParameterGrid`'s order (names sorted, last fastest)."""
    names = sorted(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(grid[name] for name in names))]


def _edges(grid: dict[str, list], best: dict[str, Any]) -> list[str]:
    edges = []
    for name, values in grid.items():
        numeric = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numeric) == len(values) >= 3 and best[name] in (min(numeric), max(numeric)):
            edges.append(name)
    return edges


def gram_path_applies(estimator: Any, X: Any, grid: dict[str, list]) -> bool:
    """Whether :func:`search_parameters` scores ``grid`` on ``X`` through one Gram matrix (the linear
    squared-hinge SVM on dense rows, fewer rows than dimensions): every fold and grid point at the
    cost of one Gram matrix and one eigendecomposition per fold."""
    return _gram_applies(estimator, X, grid)


def _gram_applies(estimator: Any, X: Any, grid: dict[str, list]) -> bool:
    from .quadratic_hinge import QuadraticHingeSVC

    return (
        isinstance(estimator, QuadraticHingeSVC)
        and "solver" not in grid
        and estimator.solver != "features"
        and (isinstance(X, np.ndarray) or is_column_blocks(X))
        and X.shape[0] <= X.shape[1]
    )


def _fold_coordinates(
    K: np.ndarray, train: np.ndarray, held_out: np.ndarray, d: int, precision: type = np.float64
) -> tuple[np.ndarray, np.ndarray]:
    """``(Z_T, Z_H)``: a fold's training and held-out rows in the eigenbasis of the training rows' span,
    computed in ``precision`` (float32: the decomposition ``ssyevd``, about half the time of
    ``dsyevd``; the rank rule then that of float32 rounding, ``n_T · eps32 · λ_max``)."""
    K_train = K[np.ix_(train, train)].astype(precision, copy=False)
    lam, U = la.eigh(K_train, driver="evd", check_finite=False)
    eps = np.finfo(precision).eps
    floor = (max(train.size, d) if precision == np.float64 else train.size) * eps * max(float(lam[-1]), 0.0)
    keep = lam > floor
    if not np.any(keep):  # all training rows zero: one null coordinate
        return np.zeros((train.size, 1), dtype=precision), np.zeros((held_out.size, 1), dtype=precision)
    root = np.sqrt(lam[keep])
    U = U[:, keep]
    return U * root, K[np.ix_(held_out, train)].astype(precision, copy=False) @ (U / root)


def _fold_rows(K: np.ndarray, train: np.ndarray, held_out: np.ndarray, X: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_fold_coordinates` in the precision of the rows ``X``: float64 for float64 rows, else
    float32 (the span solver's rule), so the fold's fits multiply in float32 as they would on the rows."""
    precision = np.float64 if X.dtype == np.float64 else np.float32
    Z_train, Z_held = _fold_coordinates(K, train, held_out, X.shape[1], precision)
    return Z_train.astype(precision, copy=False), Z_held.astype(precision, copy=False)


def _with_mirrors(images: np.ndarray, n: int, mirrored: bool) -> np.ndarray:
    """Row indices of the images ``images`` and, with ``mirrored``, of their mirrors (``images + n``) after them."""
    return np.concatenate([images, images + n]) if mirrored else images


def _held_out_predictions(model: Any, X_held: Any, mirrored: bool) -> np.ndarray:
    """The classes predicted for the held-out images: ``model.predict``, or, with ``mirrored``
    (``X_held``: the images then their mirrors), the class of the largest decision value
    averaged over each image and its mirror (``flip_test = "average"``)."""
    if not mirrored:
        return model.predict(X_held)
    values = np.asarray(model.decision_function(X_held), dtype=np.float64)
    half = values.shape[0] // 2
    averaged = 0.5 * (values[:half] + values[half:])
    winners = (averaged > 0).astype(np.int64) if averaged.ndim == 1 else np.argmax(averaged, axis=1)
    return model.classes_[winners]


def _blas_pool_size() -> int:
    """Threads the caller's BLAS pool may use (``--threads``, a worker's limit), at least 1."""
    counts = [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
    return max(1, min(counts)) if counts else 1


def _fold_tasks(tasks: list, run) -> list:
    """``[run(task) for task in tasks]`` with BLAS on one thread per task and the tasks on as many
    threads as the caller's BLAS pool had (at most one per task).

    A fold's work is a few thousand rows square: one BLAS thread per product wastes little, and
    threads that wait for each other inside a product cost several times what they save on a
    shared machine; whole tasks on separate threads do not wait for each other (LAPACK and BLAS
    release the GIL).  Each task's numbers are its own, whatever the threads.
    """
    threads = min(len(tasks), _blas_pool_size())
    with threadpool_limits(1, user_api="blas"):
        return map_tasks(lambda k: run(tasks[k]), len(tasks), threads)


def _gram_scores(
    estimator: Any, X: np.ndarray, y: np.ndarray, points: list[dict], splits: list, mirrored: bool, K: np.ndarray
) -> np.ndarray:
    n, labels = y.size, np.concatenate([y, y]) if mirrored else y

    def fold_scores(split: tuple[np.ndarray, np.ndarray]) -> list[float]:
        train, held_out = split
        rows = _with_mirrors(train, n, mirrored)
        Z_train, Z_held = _fold_rows(K, rows, _with_mirrors(held_out, n, mirrored), X)
        return [
            balanced_accuracy_score(
                y[held_out],
                _held_out_predictions(
                    clone(estimator).set_params(**point, solver="features").fit(Z_train, labels[rows]), Z_held, mirrored
                ),
            )
            for point in points
        ]

    scores = np.array(_fold_tasks(splits, fold_scores)).T  # (points, folds)
    return scores.mean(axis=1)


def _class_of(model: Any, values: np.ndarray) -> np.ndarray:
    """The classes of the largest decision values (two classes: the sign)."""
    winners = (values > 0).astype(np.int64) if values.ndim == 1 else np.argmax(values, axis=1)
    return model.classes_[winners]


def _flip_scores(
    estimator: Any, X: Any, y: np.ndarray, points: list[dict], splits: list, K: np.ndarray | None
) -> np.ndarray:
    """Held-out scores ``(len(FLIP_VARIANTS), len(points))`` of every use of the mirrors and grid point
    (``X``: the images then their mirrors; ``K``: their Gram matrix, or None to fit copies of the rows).

    One task per fold and use of the mirrors in training, those with mirrors (twice the rows, eight
    times the eigendecomposition) first, so that two threads finish together."""
    n = y.size
    labels = np.concatenate([y, y])

    def task_scores(task: tuple[int, bool]) -> np.ndarray:
        j, train_mirrors = task
        train, held_out = splits[j]
        held_rows = _with_mirrors(held_out, n, True)
        rows = _with_mirrors(train, n, train_mirrors)
        if K is not None:
            Z_train, Z_held = _fold_rows(K, rows, held_rows, X)
            fixed = {"solver": "features"}
        else:
            Z_train, Z_held, fixed = X[rows], X[held_rows], {}
        scores = np.zeros((2, len(points)))  # test "none", "average"
        for i, point in enumerate(points):
            model = clone(estimator).set_params(**point, **fixed).fit(Z_train, labels[rows])
            values = np.asarray(model.decision_function(Z_held), dtype=np.float64)
            half = held_out.size
            for t, test in enumerate(("none", "average")):
                both = values[:half] if test == "none" else 0.5 * (values[:half] + values[half:])
                scores[t, i] = balanced_accuracy_score(y[held_out], _class_of(model, both))
        return scores

    tasks = [(j, train_mirrors) for train_mirrors in (True, False) for j in range(len(splits))]
    if K is not None:
        results = _fold_tasks(tasks, task_scores)
    else:  # fits on the rows themselves: their products keep the caller's BLAS threads
        results = [task_scores(task) for task in tasks]
    scores = np.zeros((len(FLIP_VARIANTS), len(points), len(splits)))
    for (j, train_mirrors), task in zip(tasks, results):
        for t, test in enumerate(("none", "average")):
            scores[FLIP_VARIANTS.index((train_mirrors, test)), :, j] = task[t]
    return scores.mean(axis=2)


def _refit_mirrored_scores(estimator: Any, X: Any, y: np.ndarray, points: list[dict], splits: list) -> np.ndarray:
    """The generic path with mirrors: each fold and grid point fitted on a copy of the fold's rows."""
    labels = np.concatenate([y, y])
    scores = np.zeros((len(points), len(splits)))
    for j, (train, held_out) in enumerate(splits):
        rows, held_rows = _with_mirrors(train, y.size, True), _with_mirrors(held_out, y.size, True)
        for i, point in enumerate(points):
            model = clone(estimator).set_params(**point).fit(X[rows], labels[rows])
            scores[i, j] = balanced_accuracy_score(y[held_out], _held_out_predictions(model, X[held_rows], True))
    return scores.mean(axis=1)


def search_parameters(
    estimator: Any,
    X: Any,
    y: Any,
    grid: dict[str, list],
    *,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    mirrored: bool = False,
    choose_flips: bool = False,
    gram: np.ndarray | None = None,
) -> SearchResult:
    """The point of ``grid`` with the best mean held-out per-class accuracy (module docstring).

    Parameters
    ----------
    estimator : unfitted scikit-learn classifier
        Its other parameters are kept; the grid's are set on clones.
    X : array-like or sparse matrix, shape (n_samples, n_features), or (2 n_samples, n_features) with ``mirrored``
        The training rows (nothing else is seen); with ``mirrored``, followed by their mirrors.
    y : array-like, shape (n_samples,)
        The labels of the training images (not repeated for the mirrors).
    grid : dict of str to list
        Values to try per parameter.
    folds : int, default 3
    seed : int, default 0
        Seed of the shuffled stratified folds.
    mirrored : bool, default False
        ``X`` holds the images then their mirrors: folds keep each image with its mirror and
        score the held-out images by the decision values averaged with their mirrors' (module docstring).
    choose_flips : bool, default False
        With ``mirrored``: also choose whether to train on the mirrors and whether to average the
        test decision values with the mirrors' (:data:`FLIP_VARIANTS`, module docstring); the choice
        is :attr:`SearchResult.flips`.
    gram : ndarray, shape (n_rows, n_rows), optional
        ``gram_matrix(X)``, when the caller has it (the default search computes it first, for
        :func:`default_grid`); used on the Gram path instead of computing it again.

    Returns
    -------
    SearchResult

    Raises
    ------
    SearchError
        Unknown parameter or invalid value, a class with fewer training rows than folds, or
        more than :data:`MAX_SEARCH_POINTS` points (counted before any is made).
    """
    n_points = math.prod(len(values) for values in grid.values()) if isinstance(grid, dict) else 0
    if n_points > MAX_SEARCH_POINTS:
        raise SearchError(
            f"--search: the grid has {n_points} points; at most {MAX_SEARCH_POINTS} are searched "
            "(each is a cross-validated fit): give fewer values"
        )
    grid = _check_grid(estimator, grid)
    y = np.asarray(y)
    _, counts = np.unique(y, return_counts=True)
    if counts.min() < folds:
        raise SearchError(
            f"--search: a class has {counts.min()} training rows, fewer than the {folds} folds "
            "of the cross-validation; give more training images per class"
        )
    if mirrored and X.shape[0] != 2 * y.size:
        raise ValueError(f"{X.shape[0]} rows for {y.size} images and their mirrors (expected {2 * y.size})")
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    points = _points(grid)
    splits = list(splitter.split(np.zeros(y.size), y))
    with fits_summarised(
        "search: %d-fold cross-validation of %d parameter value%s on %d training images (%d fits)",
        folds,
        len(points),
        "s" if len(points) > 1 else "",
        y.size,
        folds * len(points) * (len(FLIP_VARIANTS) if choose_flips else 1),
    ):
        if choose_flips:
            if not mirrored:
                raise ValueError("choose_flips needs the mirrored rows (mirrored=True)")
            gram = (gram if gram is not None else gram_matrix(X)) if _gram_applies(estimator, X, grid) else None
            method = "gram" if gram is not None else "refit"
            table = _flip_scores(estimator, X, y, points, splits, gram)
        else:
            mean_scores, method, gram = _search_scores(estimator, X, y, grid, points, splits, mirrored, gram)
    if choose_flips:
        v, i = np.unravel_index(int(np.argmax(table)), table.shape)  # first maximum: fewest mirrors, grid order
        best = points[int(i)]
        flip_train, flip_test = FLIP_VARIANTS[int(v)]
        scores = [
            {"params": point, "flip_train": train, "flip_test": test, "score": float(table[a, b])}
            for a, (train, test) in enumerate(FLIP_VARIANTS)
            for b, point in enumerate(points)
        ]
        return SearchResult(
            grid,
            dict(best),
            scores,
            folds,
            seed,
            method,
            _edges(grid, best),
            mirrored,
            flips={"flip_train": bool(flip_train), "flip_test": flip_test},
            gram=gram,
        )
    best = points[int(np.argmax(mean_scores))]
    scores = [{"params": point, "score": float(score)} for point, score in zip(points, mean_scores)]
    return SearchResult(grid, dict(best), scores, folds, seed, method, _edges(grid, best), mirrored, gram=gram)


def _search_scores(
    estimator: Any,
    X: Any,
    y: np.ndarray,
    grid: dict[str, list],
    points: list[dict],
    splits: list,
    mirrored: bool,
    gram: np.ndarray | None = None,
) -> tuple[np.ndarray, str, Any]:
    """The mean held-out score of each point, the method that gave them, and the Gram matrix (if used)."""
    if _gram_applies(estimator, X, grid):
        gram = gram_matrix(X) if gram is None else gram
        return _gram_scores(estimator, X, y, points, splits, mirrored, gram), "gram", gram
    if mirrored:
        return _refit_mirrored_scores(estimator, X, y, points, splits), "refit", None
    search = GridSearchCV(
        estimator, grid, scoring="balanced_accuracy", cv=splits, refit=False, error_score="raise"
    ).fit(X, y)
    order = {
        tuple(sorted(p.items())): s for p, s in zip(search.cv_results_["params"], search.cv_results_["mean_test_score"])
    }
    return np.array([order[tuple(sorted(p.items()))] for p in points]), "refit", None
