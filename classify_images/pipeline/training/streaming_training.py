"""Training from row blocks: a training set larger than memory, learnt one block at a time.

:func:`fit_streaming` runs the epochs of an SGD classifier (HIK nSVM's Algorithm 1) as
passes over a *re-iterable* of ``(X_block, y_block)`` — :class:`RowBlocks`, a feature set's
``iter_row_blocks("train", rows)`` (memory-mapped ``.npy`` slices or shards, in the stored
row order: see below), or any object whose ``__iter__`` yields the blocks in the same order
every time — calling ``partial_fit`` on each block.  The memory it holds is of the order of
one block (the block being read and the one being learnt, their validated non-zeros) plus the
model, and, to resolve ``"auto"`` parameters, 8 bytes per row and 2^16-entry histograms.

The rule, for HIK nSVM (:meth:`~classify_images.classifiers.HIKnSVM.partial_fit`): an
epoch is one pass over the blocks in their order, each block's rows in their order
(``shuffle=False``) or shuffled within the block (``shuffle=True``); the epoch ends after
the last block.  With ``shuffle=False`` the model is the one ``fit`` learns on the
concatenated rows with ``shuffle=False``, bit for bit — ``"auto"`` learning rate and margin
included, resolved exactly from the blocks first
(:meth:`~classify_images.classifiers.HIKnSVM.auto_parameters`).  With ``shuffle=True``
(the default) the examples are not shuffled across blocks, so the model differs from the
in-memory ``fit`` (whose shuffle spans all rows) as another shuffle would; the accuracy of
both is compared in docs/benchmarks/cluster-and-scale.md.  SGD needs every block to mix the classes: a feature
set stores its training rows class by class, so contiguous blocks would show it one class
at a time.  :class:`RowBlocks` therefore cuts the blocks from a fixed seeded permutation
of the rows (each block read by index from the memory-mapped rows); with ``shuffle=False``
the model is then ``fit`` on the permuted rows, bit for bit.  A sharded feature set
(``build-features --store sharded``) is not read row by row: :class:`ShardBlocks` visits
its shards in a seeded permutation, several shards per block, so that a block mixes the
classes of the shards it joins while each shard is read once per pass.

The linear SVM learns from the same blocks in one of two ways (its ``streaming`` parameter).
By default (``"lbfgs"``, :meth:`~classify_images.classifiers.QuadraticHingeSVC.fit_blocks`) its
L-BFGS runs on the objective summed block by block: the model of ``fit`` within ``tol``, at one
pass over the blocks per evaluation (``n_epochs`` is not used).  With ``"sgd"``
(:meth:`~classify_images.classifiers.QuadraticHingeSVC.partial_fit`) it takes ``n_epochs`` passes
of averaged SGD: ``fit_streaming`` resolves its ``"auto"`` ``C`` over the blocks and gives it the
rows per epoch; its model approaches the optimum of ``fit`` with the epochs, it does not equal it
(docs/benchmarks/compressed-rows.md).  Shards stored compressed (``build-features --rows``) are
decoded one block at a time either way.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from sklearn.base import clone

from ...errors import ClassifyImagesError

__all__ = ["RowBlocks", "ShardBlocks", "StreamingError", "fit_streaming", "Incremental"]

_log = logging.getLogger(__name__)


class StreamingError(ClassifyImagesError, ValueError):
    """The estimator cannot learn from blocks, or the blocks changed between passes (one line)."""


class RowBlocks:
    """A re-iterable of ``(X[rows], y[rows])`` blocks of ``rows_per_block`` rows of a row-indexable ``X``.

    ``X`` is an ndarray (a memory-mapped one: only the block's rows are read), or a CSR
    matrix.  With ``seed=None`` the blocks are consecutive rows; with a seed they are
    consecutive slices of ``numpy.random.default_rng(seed).permutation(n)``, each slice's
    rows sorted (read in file order), the same blocks on every pass.  A block is a view of
    ``X`` (consecutive rows) or a new array of its rows only, so a pass holds at most one
    block in memory.

    Attributes
    ----------
    order : ndarray of int64, shape (n,)
        The rows in the order the blocks visit them: the concatenated blocks are
        ``X[order]``, ``y[order]``.
    """

    def __init__(self, X: Any, y: Any, rows_per_block: int, seed: int | None = None) -> None:
        if rows_per_block < 1:
            raise StreamingError(f"rows_per_block must be at least 1, not {rows_per_block}")
        self.X, self.y, self.rows_per_block = X, np.asarray(y), int(rows_per_block)
        n = X.shape[0]
        if seed is None:
            self.order = np.arange(n, dtype=np.int64)
        else:
            permutation = np.random.default_rng(seed).permutation(n)
            self.order = (
                np.concatenate(
                    [
                        np.sort(permutation[start : start + self.rows_per_block])
                        for start in range(0, n, self.rows_per_block)
                    ]
                ).astype(np.int64)
                if n
                else np.empty(0, dtype=np.int64)
            )

    def __len__(self) -> int:
        return -(-self.X.shape[0] // self.rows_per_block)

    def __iter__(self):
        for start in range(0, self.order.shape[0], self.rows_per_block):
            rows = self.order[start : start + self.rows_per_block]
            if rows[-1] - rows[0] == rows.shape[0] - 1:  # consecutive rows: a slice
                block = self.X[rows[0] : rows[-1] + 1]
            else:
                block = self.X[rows]
            yield block, self.y[rows]


class ShardBlocks:
    """A re-iterable of blocks made of whole shards of a sharded split, in a seeded order.

    The shards (``ShardedRows``, about 64 rows each, stored class by class) are visited in
    ``numpy.random.default_rng(seed).permutation(n_shards)`` order and joined, consecutive
    in that order, until a block holds at least ``rows_per_block`` rows; the same blocks on
    every pass.  Each shard is read once per pass, and a pass holds one block (dense rows
    or CSR, as the shards are stored).

    Attributes
    ----------
    order : ndarray of int64, shape (n,)
        The rows in the order the blocks visit them (the concatenated blocks are
        ``X[order]``, ``y[order]``).
    """

    def __init__(self, rows: Any, y: Any, rows_per_block: int, seed: int | None = None) -> None:
        if rows_per_block < 1:
            raise StreamingError(f"rows_per_block must be at least 1, not {rows_per_block}")
        self.rows, self.y, self.rows_per_block = rows, np.asarray(y), int(rows_per_block)
        n_shards = len(rows.entries)
        visit = np.arange(n_shards) if seed is None else np.random.default_rng(seed).permutation(n_shards)
        self.groups: list[list[int]] = []
        group: list[int] = []
        held = 0
        for index in visit:
            group.append(int(index))
            held += int(rows.entries[index]["rows"])
            if held >= self.rows_per_block:
                self.groups.append(group)
                group, held = [], 0
        if group:
            self.groups.append(group)
        ranges = [np.arange(rows.starts[i], rows.starts[i + 1], dtype=np.int64) for g in self.groups for i in g]
        self.order = np.concatenate(ranges) if ranges else np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.groups)

    def __iter__(self):
        for group in self.groups:
            block = self.rows.stack([self.rows.shard(index) for index in group])
            labels = np.concatenate([self.y[self.rows.starts[i] : self.rows.starts[i + 1]] for i in group])
            yield block, labels


def _survey(blocks: Iterable[tuple[Any, Any]]) -> tuple[int, int, np.ndarray]:
    """Number of blocks, of rows, and the sorted labels, in one pass."""
    n_blocks = n_rows = 0
    labels: set = set()
    for X_block, y_block in blocks:
        y_block = np.asarray(y_block)
        if X_block.shape[0] != y_block.shape[0]:
            raise StreamingError(f"block {n_blocks} has {X_block.shape[0]} rows but {y_block.shape[0]} labels")
        labels.update(np.unique(y_block).tolist())
        n_blocks += 1
        n_rows += int(X_block.shape[0])
    if n_blocks == 0 or n_rows == 0:
        raise StreamingError("the blocks hold no training row")
    return n_blocks, n_rows, np.array(sorted(labels))


def fit_streaming(
    estimator: Any,
    blocks: Iterable[tuple[Any, Any]],
    *,
    n_epochs: int | None = None,
    classes: Any = None,
) -> Any:
    """Fit a clone of ``estimator`` by ``n_epochs`` passes of ``partial_fit`` over ``blocks``
    (or, for an estimator with ``fit_blocks`` whose ``streaming`` is ``"lbfgs"``, by that method).

    Parameters
    ----------
    estimator : HIKnSVM, QuadraticHingeSVC (or any classifier with ``partial_fit``)
        Left unchanged.  For HIK nSVM, ``"auto"`` ``learning_rate`` and ``margin`` are first
        resolved over the blocks as ``fit`` resolves them on all the rows, and every block
        but the last of a pass continues the epoch (``end_epoch=False``); an estimator
        without ``end_epoch`` makes one ``partial_fit`` call per block, given the rows per
        epoch as ``n_samples`` when it takes it (QuadraticHingeSVC's averaged SGD, its
        ``"auto"`` ``C`` resolved over the blocks first).
    blocks : re-iterable of ``(X_block, y_block)``
        Iterated ``n_epochs`` + 1 times, in the same order (a first pass counts the blocks
        and collects the labels), plus up to 5 passes (float32; 9 for float64) to resolve
        ``"auto"`` parameters (:meth:`~classify_images.classifiers.HIKnSVM.auto_parameters`).
    n_epochs : int, default=None
        Passes; default the estimator's ``n_epochs``.
    classes : array-like, default=None
        Every label; default the labels the blocks hold.

    Returns
    -------
    estimator
        The fitted clone, with the estimator's parameters (``"auto"`` stays ``"auto"``; the
        values used are ``learning_rate_`` and ``margin_``, as after ``fit``).

    Raises
    ------
    StreamingError
        No ``partial_fit``, no epoch count, no rows, or blocks that change between passes.
    """
    if getattr(estimator, "streaming", None) == "lbfgs" and hasattr(estimator, "fit_blocks"):
        # (fit_blocks makes its own first pass over the blocks: labels, counts, norms)
        _log.info("%s: L-BFGS over the row blocks, one pass per evaluation", type(estimator).__name__)
        return clone(estimator).fit_blocks(blocks, classes=classes)
    if not hasattr(estimator, "partial_fit"):
        raise StreamingError(f"{type(estimator).__name__} has no partial_fit: it cannot learn from row blocks")
    params = estimator.get_params()
    if n_epochs is None:
        n_epochs = params.get("n_epochs")
        if n_epochs is None:
            raise StreamingError(f"give n_epochs: {type(estimator).__name__} has no n_epochs parameter")
    n_blocks, n_rows, labels = _survey(blocks)
    classes = labels if classes is None else np.asarray(classes)
    model = clone(estimator)
    resolved = model.auto_parameters(blocks) if hasattr(model, "auto_parameters") else {}
    model.set_params(**resolved)
    accepted = inspect.signature(model.partial_fit).parameters
    ends_epochs = "end_epoch" in accepted
    sized = {"n_samples": n_rows} if "n_samples" in accepted else {}
    _log.info(
        "%s: %d epochs of partial_fit over %d blocks (%d rows)", type(model).__name__, int(n_epochs), n_blocks, n_rows
    )
    start = time.perf_counter()
    for epoch in range(int(n_epochs)):
        seen = 0
        for X_block, y_block in blocks:
            seen += 1
            if seen > n_blocks:
                break
            if ends_epochs:
                model.partial_fit(X_block, y_block, classes=classes, end_epoch=seen == n_blocks)
            else:
                model.partial_fit(X_block, y_block, classes=classes, **sized)
        if seen != n_blocks:
            raise StreamingError(
                f"the blocks changed between passes ({n_blocks} blocks, then {seen}): "
                "fit_streaming needs a re-iterable that yields the same blocks every time"
            )
        _log.info(
            "%s: epoch %d of %d done, %.1f s",
            type(model).__name__,
            epoch + 1,
            int(n_epochs),
            time.perf_counter() - start,
        )
    return model.set_params(**{name: params[name] for name in resolved})


class Incremental:
    """A classifier trained from row blocks, as a wrapper estimator (dask-ml's ``Incremental``
    pattern): ``Incremental(HIKnSVM(), block_rows=1024, seed=0).fit(X, y)`` runs
    :func:`fit_streaming` over :class:`RowBlocks` of ``X`` (an ndarray, memory-mapped or not, or
    a CSR matrix), or over :class:`ShardBlocks` of a sharded feature set's rows, never
    assembling the matrix.

    Parameters
    ----------
    estimator : classifier with ``partial_fit`` (left unchanged)
    block_rows : int
        Rows per block (shards per block are chosen to hold about as many).
    seed : int
        Seed of the blocks' permutation (the rows of a feature set are stored class by class).
    n_epochs : int, optional
        Passes; default the estimator's own.

    Attributes
    ----------
    estimator_ : the fitted clone of ``estimator``
    """

    def __init__(self, estimator: Any, *, block_rows: int = 1024, seed: int = 0, n_epochs: int | None = None) -> None:
        self.estimator = estimator
        self.block_rows = block_rows
        self.seed = seed
        self.n_epochs = n_epochs

    def fit(self, X: Any, y: Any) -> Incremental:
        from ..storage.shard_store import ShardedRows

        if isinstance(X, ShardedRows):  # whole shards, never the assembled matrix
            blocks = ShardBlocks(X, y, self.block_rows, seed=self.seed)
        else:
            blocks = RowBlocks(X, y, self.block_rows, seed=self.seed)
        self.estimator_ = fit_streaming(self.estimator, blocks, n_epochs=self.n_epochs)
        return self

    def __getattr__(self, name: str) -> Any:
        """``predict``, ``decision_function``, ``classes_``, … of the fitted estimator."""
        if name.startswith("__") or "estimator_" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["estimator_"], name)
