"""Compiled kernels of :mod:`classify_images.coding.dictionary` (private): the dictionary update
and the search for near-duplicate atoms.

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

__all__ = ["update_atoms", "near_duplicate_atoms"]


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


@njit(nogil=True, cache=True, boundscheck=False)
def near_duplicate_atoms(G: np.ndarray, max_correlation: float) -> np.ndarray:
    """Atoms nearly collinear with an earlier atom that is kept, from the Gram matrix ``G = D Dᵀ``.

    Atom ``j`` is marked when ``|G[i, j]| > max_correlation · sqrt(G[i, i] G[j, j])`` for some
    ``i < j`` not itself marked (scanning ``i`` in increasing order), so of a group of collinear
    atoms the first is kept.  Returns a boolean mask of length ``K``.
    """
    K = G.shape[0]
    marked = np.zeros(K, dtype=np.bool_)
    for i in range(K):
        if marked[i]:
            continue
        for j in range(i + 1, K):
            if not marked[j] and abs(G[i, j]) > max_correlation * math.sqrt(G[i, i] * G[j, j]):
                marked[j] = True
    return marked
