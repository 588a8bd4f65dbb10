"""Compiled kernels of :mod:`classify_images.coding.soft_assignment` (private).

:func:`soft_weights` turns the squared distances of each descriptor to its ``k`` nearest
codewords into the normalised Gaussian weights of localized soft assignment;
:func:`accumulate_cell_moments` and :func:`accumulate_cell_maxima` add those weights into
per-pyramid-cell statistics without ever forming the ``n × K`` code matrix.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["soft_weights", "accumulate_cell_moments", "accumulate_cell_maxima"]


@njit(nogil=True, cache=True, boundscheck=False)
def soft_weights(sq_distances: np.ndarray, beta: float) -> np.ndarray:
    """Row-normalised ``exp(-beta d²)`` of an (n, k) matrix of squared distances, float64.

    The smallest distance of each row is subtracted before the exponential (it cancels in
    the normalisation), so the largest weight of a row is computed as ``exp(0)``: no
    underflow to 0/0 however large ``beta · d²`` is.
    """
    n, k = sq_distances.shape
    out = np.empty((n, k), dtype=np.float64)
    for row in range(n):
        smallest = sq_distances[row, 0]
        for j in range(1, k):
            if sq_distances[row, j] < smallest:
                smallest = sq_distances[row, j]
        total = 0.0
        for j in range(k):
            weight = np.exp(-beta * (np.float64(sq_distances[row, j]) - smallest))
            out[row, j] = weight
            total += weight
        for j in range(k):
            out[row, j] /= total
    return out


@njit(nogil=True, cache=True, boundscheck=False)
def accumulate_cell_moments(
    neighbors: np.ndarray, weights: np.ndarray, cells: np.ndarray, sums: np.ndarray, sums_of_squares: np.ndarray
) -> None:
    """``sums[c, j] += u_ij`` and ``sums_of_squares[c, j] += u_ij²`` for every descriptor ``i``
    of cell ``c`` at every pyramid level (``cells`` is (n_levels, n), ``u_ij = weights[i, m]``
    for ``j = neighbors[i, m]``)."""
    n, k = neighbors.shape
    for level in range(cells.shape[0]):
        for row in range(n):
            cell = cells[level, row]
            for m in range(k):
                word = neighbors[row, m]
                weight = weights[row, m]
                sums[cell, word] += weight
                sums_of_squares[cell, word] += weight * weight


@njit(nogil=True, cache=True, boundscheck=False)
def accumulate_cell_maxima(neighbors: np.ndarray, weights: np.ndarray, cells: np.ndarray, maxima: np.ndarray) -> None:
    """``maxima[c, j] = max(maxima[c, j], u_ij)`` over the descriptors ``i`` of cell ``c``."""
    n, k = neighbors.shape
    for level in range(cells.shape[0]):
        for row in range(n):
            cell = cells[level, row]
            for m in range(k):
                word = neighbors[row, m]
                if weights[row, m] > maxima[cell, word]:
                    maxima[cell, word] = weights[row, m]
