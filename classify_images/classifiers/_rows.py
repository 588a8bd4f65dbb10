"""One description of the rows of a dense or CSR matrix for the numba kernels.

Every kernel of :mod:`classify_images.classifiers` reads its input matrix
through a :class:`RowArrays` tuple ``(indptr, indices, data, dense)``:

* CSR input: the matrix's own three arrays, ``dense=False``; the entries of
  row ``i`` are ``data[indptr[i]:indptr[i+1]]``, their columns ``indices[...]``.
* Dense input (made C-contiguous): ``data`` is the matrix flattened,
  ``indptr[i] = i d`` and the column of entry ``k`` of row ``i`` is
  ``k - indptr[i]`` (``indices`` is empty), ``dense=True``.

A kernel written against these arrays serves both formats with one code path,
visiting the entries of a row in increasing column order either way, so dense
and CSR input give identical numbers.  :func:`column` is the one place that
maps an entry to its column.

A kernel takes the tuple as its argument and unpacks it once, at its top
(``indptr, indices, data, dense = rows``); its loops and its helpers, :func:`column`
included, then see plain arrays.  Reading the tuple's fields inside the loops,
directly or through a helper that numba inlines there (``inline="always"``), made
the same arithmetic several times slower.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import njit

__all__ = ["RowArrays", "column", "matrix_arrays", "read_only"]


class RowArrays(NamedTuple):
    """The rows of a dense or CSR matrix, as the numba kernels read them (module docstring)."""

    indptr: np.ndarray  #: start of each row in ``data``; length ``n + 1``
    indices: np.ndarray  #: column of each stored entry (CSR), empty for dense rows
    data: np.ndarray  #: stored values (CSR) or the flattened C-ordered matrix (dense)
    dense: bool  #: whether ``data`` is a flattened dense matrix


def read_only(values: np.ndarray) -> np.ndarray:
    """A read-only view of ``values`` (no copy)."""
    view = values.view()
    view.flags.writeable = False
    return view


def matrix_arrays(X) -> RowArrays:
    """The :class:`RowArrays` of a CSR matrix or of a 2-d array (made C-contiguous).

    The arrays always have the same types for one dtype of values: ``indptr`` int64,
    ``indices`` int32 (a column index is below the number of features; a CSR matrix's int64
    indices are copied), ``data`` a read-only view (float32 or float64, as given).  Numba
    compiles a kernel once per combination of argument types, so every kernel is compiled
    for two kinds of rows (float32, float64) instead of up to nine (index dtypes, writable or
    read-only values)."""
    if sp.issparse(X):
        indptr = X.indptr.astype(np.int64)  # a copy of n + 1 offsets: writable, whatever X's
        indices = X.indices if X.shape[1] > np.iinfo(np.int32).max else X.indices.astype(np.int32, copy=False)
        return RowArrays(indptr, indices, read_only(X.data), False)
    X = np.ascontiguousarray(X)
    n, d = X.shape
    indptr = np.arange(0, n * d + 1, max(d, 1), dtype=np.int64)[: n + 1]
    return RowArrays(indptr, np.empty(0, dtype=np.int32), read_only(X.reshape(-1)), True)


@njit(cache=True, nogil=True, inline="always")
def column(k, start, dense, indices):
    """Column of entry ``k`` of the row whose first entry is ``start`` (``dense``, ``indices`` of the rows)."""
    return k - start if dense else indices[k]
