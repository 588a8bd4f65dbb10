"""Compiled kernels of :mod:`classify_images.coding.fisher` (private).

:func:`shift_and_cut` prepares a block of log-joint densities for the exponential of the
log-sum-exp: each row shifted by its largest entry and the entries below ``cut`` set to
``-inf``, in one pass over the block (NumPy needs four: the maximum, the subtraction, the
comparison and the masked assignment).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["shift_and_cut"]


# Reassociation lets the row maximum vectorise; no "nnan"/"ninf" flags: the kernel writes -inf.
@njit(nogil=True, cache=True, boundscheck=False, fastmath={"reassoc", "nsz", "contract"})
def shift_and_cut(log_joint: np.ndarray, cut, minus_infinity) -> None:
    """In place, for each row ``r`` of ``log_joint`` (n, K): ``r - max(r)``, entries below ``cut``
    (negative) replaced by ``minus_infinity`` (their exponential is then exactly 0).  ``cut`` and
    ``minus_infinity`` are scalars of the array's dtype (no promotion to float64 in the loop)."""
    n, k = log_joint.shape
    for row in range(n):
        values = log_joint[row]
        largest = values[0]
        for j in range(1, k):
            value = values[j]
            largest = value if value > largest else largest
        for j in range(k):
            shifted = values[j] - largest
            values[j] = shifted if shifted >= cut else minus_infinity
