"""Compiled kernels of :mod:`classify_images.coding.lars` (private).

:func:`encode_block` computes the lasso codes of a block of descriptors from
their correlations with the atoms; :func:`_homotopy` follows the LARS-lasso
path of one descriptor (started, or restarted, by :func:`_start_path`), on
an incrementally updated Cholesky factor of the active Gram block
(:func:`_chol_add`, :func:`_chol_solve`).  The algorithm,
its optimality conditions and its numerical safeguards are described in
:mod:`classify_images.coding.lars`; this module holds only their compiled
form.

Implementation choices (they fix the order of the floating-point operations,
hence the codes bit for bit):

* the direction ``a = G[:, A] w`` is accumulated four active rows per pass
  over the ``K`` atoms (a missing row is padded with weight 0), and the first
  pass also applies the previous step's residual update ``r -= gamma a``;
* the entry test is first made per block of ``_BLOCK`` atoms — is the bound
  ``|r_k - gamma a_k| >= mu - gamma`` crossed within the current best step? —
  and the exact entry steps are computed only in a block that has a hit;
* directions use a float32 copy of the Gram matrix, Cholesky factors and the
  final closed-form coefficients its float64 original;
* each code's column indices are sorted by an insertion sort of the small
  active set (scipy's canonical CSR order), and coefficients that round to
  0 in float32 are not stored.

Every work array is allocated once per block by :func:`encode_block`; all
kernels release the GIL (``nogil``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["encode_block"]

# Per-atom state during one descriptor's path (``state`` array, int8).
_FREE = 0
_ACTIVE = 1
_SKIP = 2  # degenerate atom: skipped until the next removal
_JUST_LEFT = 3  # left on the previous step: may not re-enter on this one

#: Smallest denominator ``1 - s a_k`` of an entry step that is trusted.
_DEN_TINY = 1e-12
#: Atoms per block of the entry pre-test.
_BLOCK = 64


@njit(nogil=True, cache=True, boundscheck=False)
def _chol_add(G, active, n, j, L, pivot_rtol):
    """Append atom ``j`` to the Cholesky factor of ``G[active[:n]][:, active[:n]]``.

    Returns False (and leaves ``L`` unchanged in its first ``n`` rows) if the
    pivot is too small, i.e. atom ``j`` is (numerically) dependent on the
    active atoms.
    """
    gjj = G[j, j]
    if gjj <= 0.0:
        return False
    s = 0.0
    for i in range(n):
        v = G[active[i], j]
        for m in range(i):
            v -= L[i, m] * L[n, m]
        v /= L[i, i]
        L[n, i] = v
        s += v * v
    d2 = gjj - s
    if d2 <= pivot_rtol * gjj:
        return False
    L[n, n] = np.sqrt(d2)
    return True


@njit(nogil=True, cache=True, boundscheck=False)
def _chol_solve(L, n, b, out):
    """Solve ``L Lᵀ out = b`` (first ``n`` entries)."""
    for i in range(n):
        v = b[i]
        for m in range(i):
            v -= L[i, m] * out[m]
        out[i] = v / L[i, i]
    for i in range(n - 1, -1, -1):
        v = out[i]
        for m in range(i + 1, n):
            v -= L[m, i] * out[m]
        out[i] = v / L[i, i]


@njit(nogil=True, cache=True, boundscheck=False)
def _start_path(G, best, correlation, active, signs, u, state, L, pivot_rtol):
    """Make atom ``best`` the only active one, with the sign of ``correlation``; returns 1."""
    _chol_add(G, active, 0, best, L, pivot_rtol)
    active[0] = best
    signs[0] = 1.0 if correlation > 0 else -1.0
    u[0] = 0.0
    state[best] = _ACTIVE
    return 1


@njit(nogil=True, cache=True, boundscheck=False)
def _homotopy(c, G, G32, lam, max_steps, state, skipped, active, signs, u, L, w, rhs, r, a, pivot_rtol):
    """LARS-lasso path for one descriptor; returns the active-set size.

    On return ``active[:n]`` holds the atom indices and ``u[:n]`` their
    coefficients (some may be exactly zero).  ``state`` (K,) must be all
    ``_FREE`` on entry and is left all ``_FREE``.  ``r`` and ``a`` (K,) are
    work space; ``G`` (float64) gives the Cholesky factors, ``G32`` (its
    float32 copy) the directions ``a = G[:, A] w``.
    """
    K = c.shape[0]
    cap = L.shape[0]
    best = -1
    mu = 0.0
    for k in range(K):
        v = c[k]
        r[k] = v
        if abs(v) > mu:
            mu = abs(v)
            best = k
    if best < 0 or mu <= lam:
        return 0

    # first atom: the largest correlation (an all-zero atom cannot have one)
    n = _start_path(G, best, c[best], active, signs, u, state, L, pivot_rtol)
    nskip = 0
    just_left = -1
    gprev = 0.0  # pending update r -= gprev * a (fused into the next pass)

    for _step in range(max_steps):
        # direction on the active set: G_AA w = s_A
        _chol_solve(L, n, signs, w)
        # a = G[:, A] w (G symmetric: a weighted sum of rows), four rows per
        # pass over K (missing rows padded with weight 0); the first pass
        # also applies the previous step's r -= γ a.
        i = 0
        while i < n:
            j0 = active[i]
            j1 = active[i + 1] if i + 1 < n else j0
            j2 = active[i + 2] if i + 2 < n else j0
            j3 = active[i + 3] if i + 3 < n else j0
            w0 = w[i]
            w1 = w[i + 1] if i + 1 < n else 0.0
            w2 = w[i + 2] if i + 2 < n else 0.0
            w3 = w[i + 3] if i + 3 < n else 0.0
            g0 = G32[j0]
            g1 = G32[j1]
            g2 = G32[j2]
            g3 = G32[j3]
            if i == 0:
                for k in range(K):
                    r[k] -= gprev * a[k]
                    a[k] = w0 * g0[k] + w1 * g1[k] + w2 * g2[k] + w3 * g3[k]
            else:
                for k in range(K):
                    a[k] += w0 * g0[k] + w1 * g1[k] + w2 * g2[k] + w3 * g3[k]
            i += 4

        gamma = mu - lam
        event = 0  # 0 stop, 1 enter, 2 leave
        who = -1
        enter_sign = 0.0
        # an active coefficient crossing zero
        for i in range(n):
            if u[i] * w[i] < 0.0:
                g = -u[i] / w[i]
                if g < gamma:
                    gamma = g
                    event = 2
                    who = i
        # an inactive atom reaching the bound.  Cheap vectorised test per
        # block first: is the bound crossed within the current best step,
        # |r_k - γ a_k| >= μ - γ ?  Only then the exact entry steps.
        for b0 in range(0, K, _BLOCK):
            b1 = min(b0 + _BLOCK, K)
            bound = mu - gamma
            hits = 0
            for k in range(b0, b1):
                if abs(r[k] - gamma * a[k]) >= bound:
                    hits += 1
            if hits == 0:
                continue
            for k in range(b0, b1):
                ak = a[k]
                if abs(r[k] - gamma * ak) < mu - gamma:
                    continue
                if state[k] != _FREE:
                    continue
                rk = r[k]
                for sign in (1.0, -1.0):  # |r_k - gamma a_k| reaches mu - gamma from either side
                    den = 1.0 - sign * ak
                    if den > _DEN_TINY:
                        num = mu - sign * rk
                        if num < 0.0:
                            num = 0.0
                        g = num / den
                        if g < gamma:
                            gamma = g
                            event = 1
                            who = k
                            enter_sign = sign
        if gamma < 0.0:
            gamma = 0.0

        # move along the path (r is updated lazily, see above)
        for i in range(n):
            u[i] += gamma * w[i]
        gprev = gamma
        mu -= gamma
        if just_left >= 0:
            state[just_left] = _FREE
            just_left = -1
        if event == 0:
            break

        if event == 1:
            if n < cap and _chol_add(G, active, n, who, L, pivot_rtol):
                active[n] = who
                signs[n] = enter_sign
                u[n] = 0.0
                state[who] = _ACTIVE
                n += 1
            else:
                state[who] = _SKIP
                skipped[nskip] = who
                nskip += 1
        else:
            gone = active[who]
            for i in range(who, n - 1):
                active[i] = active[i + 1]
                signs[i] = signs[i + 1]
                u[i] = u[i + 1]
            n -= 1
            # rebuild the factor of the smaller active set; skipped atoms may retry
            for i in range(nskip):
                state[skipped[i]] = _FREE
            nskip = 0
            for i in range(n):
                _chol_add(G, active, i, active[i], L, pivot_rtol)
            state[gone] = _JUST_LEFT
            just_left = gone
            if n == 0:
                # (not reached in exact arithmetic) restart from u = 0
                for k in range(K):
                    r[k] -= gprev * a[k]
                gprev = 0.0
                state[gone] = _FREE
                just_left = -1
                best = -1
                mu = 0.0
                for k in range(K):
                    if state[k] == _FREE and abs(r[k]) > mu:
                        mu = abs(r[k])
                        best = k
                if best < 0 or mu <= lam:
                    break
                n = _start_path(G, best, r[best], active, signs, u, state, L, pivot_rtol)

    # closed form on the final support: u_A = G_AA^{-1} (c_A - λ s_A)
    if n > 0:
        for i in range(n):
            rhs[i] = c[active[i]] - lam * signs[i]
        _chol_solve(L, n, rhs, u)
    for i in range(n):
        state[active[i]] = _FREE
    for i in range(nskip):
        state[skipped[i]] = _FREE
    if just_left >= 0:
        state[just_left] = _FREE
    return n


@njit(nogil=True, cache=True, boundscheck=False)
def encode_block(C, G, G32, lam, max_steps, pivot_rtol, cap):
    """Lasso codes of the descriptors whose correlations are the rows of ``C``.

    Parameters
    ----------
    C : ndarray of float32 or float64, shape (n, K)
        Correlations ``c = D x`` of each descriptor with the ``K`` atoms.
    G, G32 : ndarray, shape (K, K)
        Gram matrix ``D Dᵀ`` in float64 and its float32 copy.
    lam : float
        Weight of the l1 penalty.
    max_steps : int
        Cap on the homotopy steps per descriptor.
    pivot_rtol : float
        Relative Cholesky pivot below which an entering atom is skipped.
    cap : int
        Largest active set the Cholesky factor can hold.

    Returns
    -------
    indices : ndarray of int32, shape (nnz,)
        Atom indices of the non-zero coefficients, row after row, sorted.
    data : ndarray of float32, shape (nnz,)
        The coefficients.
    counts : ndarray of int64, shape (n,)
        Number of stored coefficients of each row.
    """
    nrows, K = C.shape
    state = np.zeros(K, dtype=np.int8)
    skipped = np.empty(max_steps + 1, dtype=np.int64)
    active = np.empty(cap, dtype=np.int64)
    signs = np.empty(cap, dtype=np.float64)
    u = np.empty(cap, dtype=np.float64)
    L = np.zeros((cap, cap), dtype=np.float64)
    w = np.empty(cap, dtype=np.float64)
    rhs = np.empty(cap, dtype=np.float64)
    r = np.empty(K, dtype=np.float64)
    a = np.zeros(K, dtype=np.float64)  # read (times 0) by the first fused pass
    size = max(16 * nrows, 64)
    indices = np.empty(size, dtype=np.int32)
    data = np.empty(size, dtype=np.float32)
    counts = np.zeros(nrows, dtype=np.int64)
    nnz = 0
    for row in range(nrows):
        n = _homotopy(C[row], G, G32, lam, max_steps, state, skipped, active, signs, u, L, w, rhs, r, a, pivot_rtol)
        if nnz + n > size:
            size = max(2 * size, nnz + n)
            new_i = np.empty(size, dtype=np.int32)
            new_d = np.empty(size, dtype=np.float32)
            new_i[:nnz] = indices[:nnz]
            new_d[:nnz] = data[:nnz]
            indices = new_i
            data = new_d
        # sorted column indices (scipy's canonical CSR): insertion sort of
        # the small active set, no allocation
        for t in range(1, n):
            j = active[t]
            v = u[t]
            q = t - 1
            while q >= 0 and active[q] > j:
                active[q + 1] = active[q]
                u[q + 1] = u[q]
                q -= 1
            active[q + 1] = j
            u[q + 1] = v
        m = 0
        for t in range(n):
            v = np.float32(u[t])
            if v != 0.0:
                indices[nnz + m] = active[t]
                data[nnz + m] = v
                m += 1
        counts[row] = m
        nnz += m
    return indices[:nnz].copy(), data[:nnz].copy(), counts
