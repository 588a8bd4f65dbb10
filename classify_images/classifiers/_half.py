"""Float16 rows converted to float32 by table look-up (several times faster than NumPy's cast here).

A float16 value has 2^16 bit patterns: the float32 value of each is kept in a 256 KiB table
(made by NumPy's own cast, so the result is bit for bit NumPy's), and a block of rows is
converted by one look-up per entry.  Used by the Gram matrix and the weights of the span solver
(:mod:`~classify_images.classifiers.span`), which read float16 feature sets block by block.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["half_to_float32", "row_squared_norms", "remember_squared_norms", "remembered_squared_norms"]

_TABLE = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


@njit(cache=True, nogil=True)
def _look_up(bits, table, out):  # pragma: no cover - compiled
    rows, columns = bits.shape
    for i in range(rows):
        for j in range(columns):
            out[i, j] = table[bits[i, j]]


def half_to_float32(block: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``block`` (2-d; float16, or any dtype NumPy casts) as a C-ordered float32 array, into ``out`` if given."""
    if out is None:
        out = np.empty(block.shape, dtype=np.float32)
    if block.dtype != np.float16 or block.size == 0:
        np.copyto(out, block, casting="unsafe")
        return out
    _look_up(block.view(np.uint16), _TABLE, out)
    return out


@njit(cache=True, nogil=True)
def _half_row_squared_norms(bits, table, out):  # pragma: no cover - compiled
    rows, columns = bits.shape
    for i in range(rows):
        partial = np.zeros(8)
        j = 0
        while j + 8 <= columns:
            for k in range(8):
                value = np.float64(table[bits[i, j + k]])
                partial[k] += value * value
            j += 8
        total = partial.sum()
        while j < columns:
            value = np.float64(table[bits[i, j]])
            total += value * value
            j += 1
        out[i] = total


def row_squared_norms(X: np.ndarray) -> np.ndarray:
    """``||x_i||^2`` of every row of a dense array, float64; a non-finite entry gives a non-finite norm.

    Float16 rows are read through the look-up table, summed in float64 (no float64 or float32
    copy of ``X``); other dtypes by ``einsum`` in float64.
    """
    if X.dtype != np.float16:
        return np.einsum("ij,ij->i", X, X, dtype=np.float64)
    out = np.empty(X.shape[0])
    _half_row_squared_norms(X.view(np.uint16), _TABLE, out)
    return out


#: The squared norms of the last float16 rows validated, with the layout of those rows.
_REMEMBERED: list = [None]


def _layout(X: np.ndarray) -> tuple:
    return X.__array_interface__["data"][0], X.shape, X.strides, X.dtype.str


def remember_squared_norms(X: np.ndarray, norms: np.ndarray) -> None:
    """Keep ``norms`` (those of the rows ``X``) for :func:`remembered_squared_norms`: the validation
    of float16 rows reads every row once for their finiteness, and ``C="auto"`` needs the same sums."""
    _REMEMBERED[0] = (_layout(X), norms)


def remembered_squared_norms(X: np.ndarray) -> np.ndarray:
    """:func:`row_squared_norms` of ``X``, taken from :func:`remember_squared_norms` when they are the
    same rows (same buffer, shape, strides and dtype; the rows must not have changed since)."""
    kept = _REMEMBERED[0]
    if kept is not None and isinstance(X, np.ndarray) and kept[0] == _layout(X):
        return kept[1]
    return row_squared_norms(X)
