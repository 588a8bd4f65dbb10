"""Test helper for the HIK nSVM: the example orders its SGD kernel visits."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def epoch_orders(n, n_epochs, seed):
    """The example orders ``_hik_nsvm_kernels.sgd`` visits for ``seed``: (n_epochs, n) int64.

    Same calls to numba's (thread-local) generator as the kernel: seeded once, then one
    in-place shuffle of the previous order per epoch.
    """
    np.random.seed(seed)
    order = np.arange(n)
    out = np.empty((n_epochs, n), dtype=np.int64)
    for e in range(n_epochs):
        np.random.shuffle(order)
        out[e] = order
    return out
