"""Compiled kernel of :mod:`classify_images.coding.pooling` (private).

:func:`max_abs_pool_csr` is the ``max`` pooling of sparse codes, :math:`z_{cj} = \\max_{i
\\in c} |u_{ij}|` over each pyramid cell :math:`c`, in one pass over the stored entries
of the CSR matrix (each entry visited once per pyramid level), with no intermediate
matrices.  A maximum does not depend on the order of the comparisons, so the result is
the same, bit for bit, as any other way of taking it; a NaN code entry makes its cell's
entry NaN, as :func:`numpy.maximum` does.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["max_abs_pool_csr"]


@njit(nogil=True, cache=True, boundscheck=False)
def max_abs_pool_csr(
    data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, cells: np.ndarray, out: np.ndarray
) -> None:
    """``out[cells[l, i], indices[p]] = max(out[...], |data[p]|)`` for every stored entry ``p`` of
    row ``i`` and every level ``l``; ``out`` (n_cells, K) is zeros on entry (float32 for float64
    codes too: rounding is monotonic, so storing each new maximum rounded gives the rounded
    maximum)."""
    for i in range(indptr.shape[0] - 1):
        for level in range(cells.shape[0]):
            row = out[cells[level, i]]
            for p in range(indptr[i], indptr[i + 1]):
                v = abs(data[p])
                j = indices[p]
                if v > row[j] or v != v:  # NaN wins and stays (not v > NaN)
                    row[j] = v
