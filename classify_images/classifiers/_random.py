"""The seeds and the seeded shuffle of the classifiers' numba kernels.

A classifier that shuffles its examples draws one integer seed from its
``random_state`` (:func:`kernel_seed`) and passes it to its kernel, which seeds
its own random stream with it: numba's Mersenne Twister (``np.random.seed`` in
a kernel seeds the calling thread's generator, so every thread replays the
same stream) or, where the kernel ports code that draws from its own
generator, the xorshift64* state of :func:`xorshift_state`.  All the problems
of a classifier share the seed, hence the order of the examples, so the model
does not depend on how the problems are grouped over threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from sklearn.utils import check_random_state

__all__ = ["kernel_seed", "random_below", "shuffle_prefix", "xorshift_state"]


def kernel_seed(random_state: Any) -> int:
    """A seed in ``[0, 2^31 - 1)`` drawn from ``random_state`` (None, int or RandomState).

    A ``RandomState`` instance advances by one draw, so successive calls give
    successive seeds.
    """
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


@njit(cache=True, nogil=True)
def xorshift_state(seed):
    """The state array of the xorshift64* generator for ``seed`` (see :func:`random_below`)."""
    state = np.empty(1, dtype=np.uint64)
    state[0] = np.uint64(seed) * np.uint64(2654435761) + np.uint64(88172645463325252)
    return state


@njit(cache=True, nogil=True, inline="always")
def random_below(state, m):
    """A random integer in ``[0, m)``.

    ``state`` empty: numba's Mersenne Twister (seeded by ``np.random.seed``).
    Otherwise one xorshift64* step on ``state[0]`` (Vigna's multiplier), the
    non-negative 63-bit output taken modulo ``m``.
    """
    if state.shape[0] == 0:
        return np.random.randint(0, m)
    x = state[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    state[0] = x
    return np.int64((x * np.uint64(2685821657736338717)) >> np.uint64(1)) % m


@njit(cache=True, nogil=True, inline="always")
def shuffle_prefix(index, size, state):
    """Shuffle ``index[:size]`` in place (Fisher-Yates, first position first).

    Position ``s`` swaps with ``s + random_below(state, size - s)``.
    """
    for s in range(size):
        other = s + random_below(state, size - s)
        tmp = index[s]
        index[s] = index[other]
        index[other] = tmp
