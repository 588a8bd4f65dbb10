"""Compiled kernel of :mod:`classify_images.coding.dictionary` (private): the dictionary update.

:func:`update_atoms` is one pass of block-coordinate descent over the atoms (Mairal et al. 2010,
Algorithm 2), sequential over the atoms, in place.  The order of the floating-point operations is
fixed (atoms in increasing order; for each, ``A[j, k] D[k]`` accumulated over ``k`` in increasing
order), so the dictionary does not depend on the number of threads of the caller.  The kernel
releases the GIL (``nogil``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["update_atoms"]


@njit(nogil=True, cache=True, boundscheck=False)
def update_atoms(D: np.ndarray, A: np.ndarray, B: np.ndarray, min_usage: float) -> int:
    """One pass of Algorithm 2 over the atoms (rows of ``D``), in place.

    For each atom ``j`` with ``A[j, j] > min_usage``::

        u = D[j] + (B[j] - A[j] @ D) / A[j, j]
        D[j] = u / max(||u||_2, 1)

    ``D`` (K, d), ``A`` (K, K) symmetric, ``B`` (K, d), all float64 C-contiguous.  The product
    ``A[j] @ D`` reads the atoms as already updated in this pass (Gauss–Seidel).  Returns the
    number of atoms left as they were (``A[j, j] <= min_usage``: unused so far).
    """
    K, d = D.shape
    u = np.empty(d)
    skipped = 0
    for j in range(K):
        ajj = A[j, j]
        if ajj <= min_usage:
            skipped += 1
            continue
        for t in range(d):
            u[t] = B[j, t]
        for k in range(K):
            a = A[j, k]
            if a != 0.0:
                for t in range(d):
                    u[t] -= a * D[k, t]
        norm2 = 0.0
        for t in range(d):
            u[t] = D[j, t] + u[t] / ajj
            norm2 += u[t] * u[t]
        scale = 1.0 / max(math.sqrt(norm2), 1.0)
        for t in range(d):
            D[j, t] = u[t] * scale
    return skipped
