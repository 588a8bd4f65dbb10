"""Compiled kernel of :mod:`classify_images.coding.llc` (private).

:func:`k_smallest` selects, per row of a distance matrix, the ``k`` smallest entries in
one pass over the row, keeping them in a sorted buffer of ``k`` (insertion), so it
costs ``O(K)`` comparisons per row for the small ``k`` of LLC (5) where
:func:`numpy.argpartition` does a full partition.  A later entry replaces a buffered one
only when strictly smaller, so ties go to the smaller index: the order is that of a
stable sort by distance.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["k_smallest"]


@njit(nogil=True, cache=True, boundscheck=False)
def k_smallest(distances: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the ``k`` smallest entries of every row, nearest first (n, k) int64."""
    n, n_columns = distances.shape
    out = np.empty((n, k), dtype=np.int64)
    best = np.empty(k, dtype=distances.dtype)
    for row in range(n):
        filled = 0
        for column in range(n_columns):
            value = distances[row, column]
            if filled == k and value >= best[k - 1]:
                continue
            position = filled if filled < k else k - 1
            while position > 0 and best[position - 1] > value:  # shift the larger ones right
                best[position] = best[position - 1]
                out[row, position] = out[row, position - 1]
                position -= 1
            best[position] = value
            out[row, position] = column
            if filled < k:
                filled += 1
    return out
