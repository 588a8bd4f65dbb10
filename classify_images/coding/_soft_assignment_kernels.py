"""Compiled kernels of :mod:`classify_images.coding.soft_assignment` (private).

:func:`soft_weights` turns the squared distances of each descriptor to its ``k`` nearest
codewords into the normalised Gaussian weights of localized soft assignment;
:func:`accumulate_cells` adds those weights into per-pyramid-cell statistics (sums and sums
of squares, or maxima) without ever forming the ``n × K`` code matrix.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["soft_weights", "accumulate_cells"]


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
def accumulate_cells(
    neighbors: np.ndarray,
    weights: np.ndarray,
    cells: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    maxima: bool,
) -> None:
    """Per-cell statistics of the codes ``u_ij = weights[i, m]`` (``j = neighbors[i, m]``) of the
    descriptors ``i`` of cell ``c = cells[level, i]`` at every pyramid level (``cells`` is (n_levels, n)):
    ``first[c, j] += u_ij`` and ``second[c, j] += u_ij²``, or with ``maxima``
    ``first[c, j] = max(first[c, j], u_ij)`` (``second`` unused)."""
    n, k = neighbors.shape
    for level in range(cells.shape[0]):
        for row in range(n):
            cell = cells[level, row]
            for m in range(k):
                word = neighbors[row, m]
                weight = weights[row, m]
                if maxima:
                    if weight > first[cell, word]:
                        first[cell, word] = weight
                else:
                    first[cell, word] += weight
                    second[cell, word] += weight * weight
