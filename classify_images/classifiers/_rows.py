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

__all__ = ["RowArrays", "column", "matrix_arrays"]


class RowArrays(NamedTuple):
    """The rows of a dense or CSR matrix, as the numba kernels read them (module docstring)."""

    indptr: np.ndarray  #: start of each row in ``data``; length ``n + 1``
    indices: np.ndarray  #: column of each stored entry (CSR), empty for dense rows
    data: np.ndarray  #: stored values (CSR) or the flattened C-ordered matrix (dense)
    dense: bool  #: whether ``data`` is a flattened dense matrix


def matrix_arrays(X) -> RowArrays:
    """The :class:`RowArrays` of a CSR matrix or of a 2-d array (made C-contiguous)."""
    if sp.issparse(X):
        return RowArrays(X.indptr, X.indices, X.data, False)
    X = np.ascontiguousarray(X)
    n, d = X.shape
    indptr = np.arange(0, n * d + 1, max(d, 1), dtype=np.int64)[: n + 1]
    return RowArrays(indptr, np.empty(0, dtype=np.int32), X.reshape(-1), True)


@njit(cache=True, nogil=True, inline="always")
def column(k, start, dense, indices):
    """Column of entry ``k`` of the row whose first entry is ``start`` (``dense``, ``indices`` of the rows)."""
    return k - start if dense else indices[k]
