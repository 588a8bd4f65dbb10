"""A split's training rows read from the feature set's memory maps a block of columns at a time.

An experiment's split trains the linear SVM on some of the pooled rows (the training rows,
then the test rows) and, with ``[augment]``, on their mirrors.  Gathering them is one copy of
``n x d`` values (2 bytes a value in float16: 1.6 GB for the 3 030 training images and mirrors
of a 101-class split of Fisher vectors).  The span solver reads the rows in two passes over
blocks of columns only (:mod:`~classify_images.classifiers.column_blocks`), so
:class:`StoredColumns` gives it each block decoded straight from the stored rows (float32,
float16, or 8- and 4-bit codes, of which only the block's codes and steps are read) and drops
the pages it read from the process every :data:`ROWS_PER_RELEASE` rows: memory holds one
``n x 4096`` float32 block, not the rows.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ...classifiers.column_blocks import ColumnBlockRows, as_float32
from .coded_rows import CodedRows
from .feature_store import FeatureSet, release_mapped_pages

__all__ = ["StoredColumns", "stored_columns", "ROWS_PER_RELEASE"]

#: Rows read between two drops of the pages their reading mapped: a block of columns touches two
#: or three pages of each row, and each fault maps up to 64 KiB around its page
#: (:data:`~classify_images.pipeline.storage.feature_store.FAULT_AROUND_BYTES`), so at most
#: about 12 MB of mapped pages are resident at once, instead of 190 MB a source of 1 500 rows.
ROWS_PER_RELEASE = 64


def _readable(rows) -> bool:
    """Whether a split's stored rows can be read by columns: a dense memory map (float32 or
    float16) or 8- or 4-bit codes (not shards, not product-quantised rows)."""
    if isinstance(rows, CodedRows):
        return hasattr(rows.codec, "decode_columns")
    return isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.dtype in (np.float32, np.float16)


class StoredColumns(ColumnBlockRows):
    """Rows of stored arrays, in a given order, read a block of columns at a time.

    Parameters
    ----------
    sources : list of arrays
        The stored row arrays (memory-mapped float32 or float16 arrays, or
        :class:`~classify_images.pipeline.storage.coded_rows.CodedRows`).
    source : ndarray of int, shape (n,)
        Row ``i`` is row ``row[i]`` of ``sources[source[i]]``.
    row : ndarray of int, shape (n,)
    n_features : int

    The values were checked finite when the feature set was loaded (``checked_finite``).
    """

    checked_finite = True

    def __init__(self, sources: list, source: np.ndarray, row: np.ndarray, n_features: int) -> None:
        self.sources, self.n_features = list(sources), int(n_features)
        self.source = np.asarray(source, dtype=np.intp)
        self.row = np.asarray(row, dtype=np.intp)
        # per source: the rows to read in increasing order (the file's order) and where they go
        self._reads = []
        for k in range(len(self.sources)):
            positions = np.flatnonzero(self.source == k)
            if positions.size:
                order = np.argsort(self.row[positions], kind="stable")
                self._reads.append((k, positions[order], self.row[positions[order]]))
        # one source read in row order (e.g. a set's first rows): decoded straight into the block
        self._in_order = len(self._reads) == 1 and np.array_equal(self._reads[0][1], np.arange(self.row.size))
        self._identity = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.row.size, self.n_features)

    @property
    def identity(self) -> tuple:
        if self._identity is None:
            digest = hashlib.blake2b(self.source.tobytes() + self.row.tobytes(), digest_size=16).hexdigest()
            self._identity = ("stored-columns", tuple(id(s) for s in self.sources), self.shape, digest)
        return self._identity

    def take(self, rows: np.ndarray) -> StoredColumns:
        rows = np.asarray(rows, dtype=np.intp)
        return StoredColumns(self.sources, self.source[rows], self.row[rows], self.n_features)

    def read_columns(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty((self.row.size, stop - start), dtype=np.float32)
        for k, positions, rows in self._reads:
            stored = self.sources[k]
            for chunk in range(0, rows.size, ROWS_PER_RELEASE):  # pages dropped every few rows
                part = slice(chunk, chunk + ROWS_PER_RELEASE)
                these = rows[part]
                target = out[part] if self._in_order else None  # (in order: positions are 0 … n - 1)
                if isinstance(stored, CodedRows):
                    block = stored.codec.decode_columns(stored.stored, these, start, stop, self.n_features, out=target)
                else:
                    block = as_float32(stored[these, start:stop], target)
                if not self._in_order:
                    out[positions[part]] = block
                release_mapped_pages(stored, int(these[0]), int(these[-1]) + 1)
        return out


def stored_columns(feature_set: FeatureSet, indices: np.ndarray, *, mirrored: bool = False) -> StoredColumns | None:
    """The pooled rows ``indices`` (training rows, then test rows) of ``feature_set``, followed
    with ``mirrored`` by their mirrors in the same order (the rows
    :func:`~classify_images.pipeline.extraction.augment.rows_and_mirrors` would gather), as a
    :class:`StoredColumns`; None when the rows are not stored in a form read by columns
    (shards, product-quantised rows) or the mirrors are not stored."""
    if mirrored and not feature_set.has_mirrors:
        return None
    sources = [feature_set.rows["train"], feature_set.rows["test"]]
    if mirrored:
        sources += [feature_set.mirror_rows["train"], feature_set.mirror_rows["test"]]
    if not all(_readable(rows) for rows in sources):
        return None
    indices = np.asarray(indices, dtype=np.intp)
    n_train = sources[0].shape[0]
    source = (indices >= n_train).astype(np.intp)
    row = np.where(indices >= n_train, indices - n_train, indices)
    if mirrored:
        source, row = np.concatenate([source, source + 2]), np.concatenate([row, row])
    return StoredColumns(sources, source, row, feature_set.n_features)
