"""Compiled kernels of :mod:`classify_images.coding.fisher` (private).

:func:`accumulate_posterior_statistics` is the encoder's step from the log-joint densities of a
block of descriptors to its statistics :math:`\\sum_i \\gamma_{ik}[x_i, x_i^2, 1]`, one row at a
time: the row's largest entry, the components within ``log_cut`` of it (their exponentials; the
others get a posterior of exactly 0), the normalisation over those, and each kept posterior times
the row added to its component's statistics.  With ``K = 256`` components and a cut of
:math:`\\ln 10^{-4}` a 64-dimensional descriptor keeps about 11 components, so the statistics cost
``2 · 11 · (2D + 1)`` operations a descriptor instead of the ``2 · 256 · (2D + 1)`` of a dense
product, and only the kept entries go through the exponential.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["accumulate_posterior_statistics"]


@njit(nogil=True, cache=True, boundscheck=False, fastmath={"reassoc", "nsz"})
def _largest(values: np.ndarray):
    """The largest entry of a 1-D array (vectorised: the maximum does not depend on the order)."""
    largest = values[0]
    for j in range(1, values.shape[0]):
        value = values[j]
        largest = value if value > largest else largest
    return largest


# No reassociation: the normalising sum runs in the rows' order whatever the vector width; each
# statistic is its own sum in the descriptors' order (contraction to FMA changes no order).
@njit(nogil=True, cache=True, boundscheck=False, fastmath={"nsz", "contract"})
def accumulate_posterior_statistics(
    log_joint: np.ndarray, moments: np.ndarray, log_cut, statistics: np.ndarray
) -> None:
    """Add :math:`\\sum_i \\gamma_{ik}\\, m_i` to ``statistics[k]`` (K, W) float64, in place.

    ``log_joint`` (n, K) float32 are the descriptors' log-joint densities
    :math:`\\log\\pi_k + \\log\\mathcal N(x_i;\\mu_k,\\sigma_k^2)`, ``moments`` (n, W) float32 their
    rows :math:`m_i = [x_i, x_i^2, 1]`, ``log_cut < 0``: component ``k`` is kept for descriptor
    ``i`` when its log-joint is at least ``log_cut`` above the row's largest, and
    :math:`\\gamma_{ik} = e^{l_{ik} - l_i^{max}} / \\sum_{j\\ kept} e^{l_{ij} - l_i^{max}}`
    (exponentials and sums in float64), 0 for the others.
    """
    n, k = log_joint.shape
    width = moments.shape[1]
    kept = np.empty(k, dtype=np.int64)
    weights = np.empty(k, dtype=np.float64)
    row = np.empty(width, dtype=np.float64)
    for i in range(n):
        values = log_joint[i]
        largest = _largest(values)
        floor = largest + log_cut
        count = 0
        total = 0.0
        for j in range(k):
            if values[j] >= floor:
                weight = math.exp(np.float64(values[j]) - np.float64(largest))
                kept[count] = j
                weights[count] = weight
                total += weight
                count += 1
        if count == 0:  # a row of NaN: nothing to add
            continue
        for c in range(width):
            row[c] = moments[i, c]
        for t in range(count):
            posterior = weights[t] / total
            target = statistics[kept[t]]
            for c in range(width):
                target[c] += posterior * row[c]
