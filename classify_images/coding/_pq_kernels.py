"""Compiled kernels of :mod:`classify_images.coding.product_quantizer` (private).

:func:`nearest_centroids` gives, for every row and sub-vector position, the index of the
nearest of the position's ``K`` centroids, reading the rows in place (the last sub-vector's
missing dimensions count as zeros); :func:`centroid_sums` adds each sub-vector into its
centroid's sum for Lloyd's update.  A position's ``K`` centroids (``s × K`` float32, 8 KB for
``s = 8``) stay in the first-level cache while every row visits them, where the NumPy form
wrote and read an ``n × K`` distance block per position.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["nearest_centroids", "centroid_sums"]


@njit(nogil=True, cache=True, boundscheck=False)
def nearest_centroids(rows: np.ndarray, centroids_t: np.ndarray, squared: np.ndarray) -> np.ndarray:
    """``(n, m)`` int32 index of the nearest centroid of each sub-vector of ``rows``.

    ``rows`` (n, d) float32; ``centroids_t`` (m, s, K) float32, position ``j``'s centroids as
    columns; ``squared`` (m, K) float32, their squared norms.  The nearest minimises
    ``||c||² − 2 xᵀc`` (``||x||²`` is the same for every centroid), the first on ties.
    """
    n, d = rows.shape
    m, s, k = centroids_t.shape
    labels = np.empty((n, m), dtype=np.int32)
    scores = np.empty(k, dtype=np.float32)
    for j in range(m):
        first = j * s
        width = min(s, d - first)
        for i in range(n):
            for c in range(k):
                scores[c] = squared[j, c]
            for t in range(width):
                x = np.float32(-2.0) * rows[i, first + t]
                for c in range(k):
                    scores[c] += x * centroids_t[j, t, c]
            best, value = 0, scores[0]
            for c in range(1, k):
                if scores[c] < value:
                    best, value = c, scores[c]
            labels[i, j] = best
    return labels


@njit(nogil=True, cache=True, boundscheck=False)
def centroid_sums(rows: np.ndarray, labels: np.ndarray, sub_dim: int, n_centroids: int) -> tuple:
    """``(sums, counts)``: float64 ``(m, K, s)`` sums of the sub-vectors given to each centroid
    (missing dimensions of the last one as zeros) and int64 ``(m, K)`` their numbers."""
    n, d = rows.shape
    m = labels.shape[1]
    sums = np.zeros((m, n_centroids, sub_dim), dtype=np.float64)
    counts = np.zeros((m, n_centroids), dtype=np.int64)
    for i in range(n):
        for j in range(m):
            c = labels[i, j]
            counts[j, c] += 1
            first = j * sub_dim
            for t in range(min(sub_dim, d - first)):
                sums[j, c, t] += rows[i, first + t]
    return sums, counts
