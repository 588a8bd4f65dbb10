"""Training rows read a block of columns at a time, never held whole.

The linear SVM's span solver (:mod:`~classify_images.classifiers.span`) and the cross-validation
of its ``C`` (:mod:`~classify_images.classifiers.model_selection`) read the training rows ``X``
(``n x d``, ``n <= d``) in two passes only, each over blocks of columns: the Gram matrix

.. math::

    K = X X^\\top = \\sum_j X_{:, J_j} X_{:, J_j}^\\top ,

and the weights ``W = X^\\top A`` (block ``J_j`` of ``W`` is ``X_{:, J_j}^\\top A``).  Everything else
works in the ``n``-dimensional coordinates of the span.  So the rows need not be in memory: a
:class:`ColumnBlockRows` produces the float32 block ``X_{:, J}`` on request, e.g. decoded from a
feature set's memory-mapped rows (8-bit codes, float16), and memory holds one block
(``n x 4096`` float32) instead of the ``n x d`` rows.

A :class:`ColumnBlockRows` is read by :func:`float32_columns` (the Gram matrix, the weights);
indexing it by rows (``X[:n]``, ``X[rows]``) gives another one, not a copy; ``np.asarray(X)``
gives the float32 rows, for the solvers that need them whole (``solver="features"``,
``"eigen"``, ``n > d``) and for prediction.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from ._half import half_to_float32

__all__ = ["ColumnBlockRows", "as_float32", "float32_columns", "is_column_blocks"]

#: Columns per block when a :class:`ColumnBlockRows` is made whole or its norms are summed.
_COLUMNS = 4096


class ColumnBlockRows(abc.ABC):
    """``(n, d)`` float32 rows that produce a block of their columns on request.

    Subclasses give :attr:`shape`, :meth:`read_columns` and :meth:`take`, and set
    :attr:`checked_finite` when every value is known to be finite (e.g. checked when the rows
    were loaded), so that a fit does not read them once more to check.
    """

    ndim = 2
    dtype = np.dtype(np.float32)
    #: every value is finite (the provider checked): a fit skips its own pass over the rows
    checked_finite: bool = False

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, int]:
        """``(n, d)``."""

    @abc.abstractmethod
    def read_columns(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Columns ``start:stop`` of every row, a C-ordered float32 ``(n, stop - start)`` array
        (``out`` when given, of that shape)."""

    @abc.abstractmethod
    def take(self, rows: np.ndarray) -> ColumnBlockRows:
        """The rows ``rows`` (an array of row numbers, in that order), read the same way."""

    @property
    @abc.abstractmethod
    def identity(self) -> tuple:
        """A key equal for two objects exactly when they read the same rows in the same order
        (a Gram matrix computed for one serves the other)."""

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        """``X[rows]`` (an int, a slice, an index or boolean array) another :class:`ColumnBlockRows`
        (an int: that row, float32 1-d); ``X[:, start:stop]`` the decoded columns; ``X[rows, cols]``
        the decoded rows' columns."""
        if isinstance(key, tuple):
            rows, columns = (key + (slice(None),))[:2] if len(key) < 2 else key[:2]
            if (
                isinstance(rows, slice)
                and rows == slice(None)
                and isinstance(columns, slice)
                and columns.step in (None, 1)
            ):
                start, stop, _ = columns.indices(self.shape[1])
                return self.read_columns(start, max(start, stop))
            return np.asarray(self[rows])[(Ellipsis, columns)]
        if isinstance(key, (int, np.integer)):
            return np.asarray(self.take(np.arange(self.shape[0])[[key]]))[0]
        return self.take(np.arange(self.shape[0])[key])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        n, d = self.shape
        rows = np.empty((n, d), dtype=np.float32)
        for start in range(0, d, _COLUMNS):
            stop = min(start + _COLUMNS, d)
            rows[:, start:stop] = self.read_columns(start, stop)
        return rows if dtype is None else rows.astype(dtype, copy=False)

    def squared_norms(self) -> np.ndarray:
        """``||x_i||^2`` of every row, float64, summed over the blocks of columns."""
        n, d = self.shape
        total = np.zeros(n)
        buffer = None
        for start in range(0, d, _COLUMNS):
            stop = min(start + _COLUMNS, d)
            reuse = buffer is not None and buffer.shape == (n, stop - start)
            buffer = self.read_columns(start, stop, buffer if reuse else None)
            total += np.einsum("ij,ij->i", buffer, buffer, dtype=np.float64)
        return total


def is_column_blocks(X: Any) -> bool:
    """Whether ``X`` is a :class:`ColumnBlockRows`."""
    return isinstance(X, ColumnBlockRows)


def as_float32(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``values`` (2-d) as a C-ordered float32 array, into ``out`` when given: float16 by table
    look-up (several times faster than NumPy's cast, the same bits), other dtypes by NumPy."""
    return half_to_float32(values, out)


def float32_columns(X: Any, start: int, stop: int, buffer: np.ndarray | None = None) -> np.ndarray:
    """Columns ``start:stop`` of the dense rows ``X`` (float32 or float16 array, or a
    :class:`ColumnBlockRows`) as a C-ordered float32 array, written into ``buffer`` when it has
    that shape (a buffer reused block after block: no page faults per block)."""
    if isinstance(X, ColumnBlockRows):
        width = stop - start
        fits = buffer is not None and buffer.shape == (X.shape[0], width)
        return X.read_columns(start, stop, buffer if fits else None)
    columns = X[:, start:stop]
    return half_to_float32(columns, buffer if buffer is not None and columns.shape == buffer.shape else None)
