"""Compiled kernels of :mod:`classify_images.coding.lars` (private).

:func:`encode_block` computes the lasso codes of a block of descriptors from
their correlations with the atoms.  Screened (the default), each descriptor
is solved by :func:`_feature_sign` on a pool of atoms that starts from
:func:`_screen` and grows (:func:`_extend_pool`) by the atoms that
:func:`_kkt_violators` finds violating the full problem's optimality
condition; the pool's residual correlations come from Gram entries gathered
per active atom (:func:`_pool_residuals`).  Unscreened, or as the fallback,
:func:`_homotopy` follows the LARS-lasso path on all atoms (started, or
restarted, by :func:`_start_path`).  Both keep an incrementally updated
Cholesky factor of the active Gram block (:func:`_chol_append`,
:func:`_chol_add`, :func:`_refactor`, :func:`_chol_solve`).  The algorithms,
their optimality conditions and their numerical safeguards are described in
:mod:`classify_images.coding.lars`; this module holds only their compiled
form.

Implementation choices (they fix the order of the floating-point operations,
hence the codes bit for bit):

* the correlations ``c = D x`` are computed by :func:`correlations`, not by
  BLAS: each entry is summed over the ``d`` coordinates in increasing order,
  one rounding per product and per sum (no fused multiply-add, no
  reassociation), so a descriptor's correlations, hence its code, do not
  depend on the other rows of its batch, their order or number, nor on the
  processor's vector width (an optimised BLAS ``gemm`` picks its kernel and
  summation order by the row's place in the block and by the CPU);
* the feature-sign search gathers float64 Gram entries (its residuals and
  factors are float64); the KKT check over all atoms reads rows of the
  float32 copy of the Gram matrix, four active rows per pass;
* the first pool is found from block maxima of ``|c|`` (a vectorised
  reduction) and a scan of the blocks that reach the threshold;

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

__all__ = ["correlations", "encode_block"]

# Per-atom state during one descriptor's path (``state`` array, int8).
_FREE = 0
_ACTIVE = 1
_SKIP = 2  # degenerate atom: skipped until the next removal
_JUST_LEFT = 3  # left on the previous step: may not re-enter on this one

#: Smallest denominator ``1 - s a_k`` of an entry step that is trusted.
_DEN_TINY = 1e-12
#: Atoms per block of the entry pre-test.
_BLOCK = 64
#: The first pool takes the atoms with |c_k| >= _SCREEN_RATIO * max |c| (see _screen).
_SCREEN_RATIO = 0.8
#: Atoms per block of the screen's block maxima.
_SCREEN_BLOCK = 16


@njit(nogil=True, cache=True, boundscheck=False)
def _correlations_one(x, DT, o):
    """``o = DTᵀ x``, each entry summed over ``j = 0, 1, ..., d-1`` in turn (see :func:`correlations`)."""
    d = x.shape[0]
    K = DT.shape[1]
    d4 = d - d % 4
    for k in range(K):
        o[k] = 0.0
    for j in range(0, d4, 4):
        x0, x1, x2, x3 = x[j], x[j + 1], x[j + 2], x[j + 3]
        g0, g1, g2, g3 = DT[j], DT[j + 1], DT[j + 2], DT[j + 3]
        for k in range(K):
            o[k] = (((o[k] + x0 * g0[k]) + x1 * g1[k]) + x2 * g2[k]) + x3 * g3[k]
    for j in range(d4, d):
        xj = x[j]
        g = DT[j]
        for k in range(K):
            o[k] += xj * g[k]


@njit(nogil=True, cache=True, boundscheck=False)
def correlations(X, DT, out):
    """``out = X DT`` (``out[i, k] = sum_j X[i, j] DT[j, k]``), each entry in a fixed order.

    Every entry is the sum over ``j = 0, 1, ..., d-1`` in turn, each product
    and each partial sum rounded to the dtype (no fused multiply-add: numba
    compiles without ``fastmath``), so row ``i`` of ``out`` depends on row
    ``i`` of ``X`` only, bit for bit, whatever the other rows, their number
    and order, and whatever the processor's vector width.  Two rows share
    each pass over ``DT`` (the same operations for each), four coordinates
    are added per pass.

    Parameters
    ----------
    X : ndarray, shape (n, d)
        Descriptors as rows (float32 or float64, C-contiguous).
    DT : ndarray, shape (d, K)
        Transposed dictionary, same dtype, C-contiguous.
    out : ndarray, shape (n, K)
        Written in place, same dtype.
    """
    n, d = X.shape
    K = DT.shape[1]
    d4 = d - d % 4
    n2 = n - n % 2
    for i in range(0, n2, 2):
        x, y = X[i], X[i + 1]
        o, p = out[i], out[i + 1]
        for k in range(K):
            o[k] = 0.0
            p[k] = 0.0
        for j in range(0, d4, 4):
            x0, x1, x2, x3 = x[j], x[j + 1], x[j + 2], x[j + 3]
            y0, y1, y2, y3 = y[j], y[j + 1], y[j + 2], y[j + 3]
            g0, g1, g2, g3 = DT[j], DT[j + 1], DT[j + 2], DT[j + 3]
            for k in range(K):
                a, b, c, e = g0[k], g1[k], g2[k], g3[k]
                o[k] = (((o[k] + x0 * a) + x1 * b) + x2 * c) + x3 * e
                p[k] = (((p[k] + y0 * a) + y1 * b) + y2 * c) + y3 * e
        for j in range(d4, d):
            xj, yj = x[j], y[j]
            g = DT[j]
            for k in range(K):
                o[k] += xj * g[k]
                p[k] += yj * g[k]
    if n2 < n:
        _correlations_one(X[n2], DT, out[n2])


@njit(nogil=True, cache=True, boundscheck=False)
def _chol_append(L, n, gjj, pivot_rtol):
    """Append an atom to the Cholesky factor ``L`` of the ``n`` active atoms' Gram block.

    On entry ``L[n, :n]`` holds the new atom's Gram entries with the active
    atoms and ``gjj`` its squared norm; the new row of the factor is computed
    in place.  Returns False (the first ``n`` rows are unchanged) if the pivot
    is too small, i.e. the atom is (numerically) dependent on the active atoms.
    """
    if gjj <= 0.0:
        return False
    s = 0.0
    for i in range(n):
        v = L[n, i]
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
def _chol_add(G, active, n, j, L, pivot_rtol):
    """Append atom ``j`` to the Cholesky factor of ``G[active[:n]][:, active[:n]]`` (see :func:`_chol_append`)."""
    for i in range(n):
        L[n, i] = G[active[i], j]
    return _chol_append(L, n, G[j, j], pivot_rtol)


@njit(nogil=True, cache=True, boundscheck=False)
def _chol_forward(L, lo, n, b, y):
    """Entries ``lo:n`` of ``y = L⁻¹ b`` (forward substitution; ``y[:lo]`` already computed)."""
    for i in range(lo, n):
        v = b[i]
        for m in range(i):
            v -= L[i, m] * y[m]
        y[i] = v / L[i, i]


@njit(nogil=True, cache=True, boundscheck=False)
def _chol_back(L, n, y, out):
    """``out = L⁻ᵀ y`` (first ``n`` entries; back substitution, ``out`` may be ``y``)."""
    for i in range(n - 1, -1, -1):
        v = y[i]
        for m in range(i + 1, n):
            v -= L[m, i] * out[m]
        out[i] = v / L[i, i]


@njit(nogil=True, cache=True, boundscheck=False)
def _chol_solve(L, n, b, out):
    """Solve ``L Lᵀ out = b`` (first ``n`` entries)."""
    _chol_forward(L, 0, n, b, out)
    _chol_back(L, n, out, out)


@njit(nogil=True, cache=True, boundscheck=False)
def _four_weights(x, n, i):
    """``x[i:i+4]``, padded with zeros past ``n``."""
    return (
        x[i],
        x[i + 1] if i + 1 < n else 0.0,
        x[i + 2] if i + 2 < n else 0.0,
        x[i + 3] if i + 3 < n else 0.0,
    )


@njit(nogil=True, cache=True, boundscheck=False)
def _four_rows(M, index, n, i):
    """Rows ``M[index[i:i+4]]``; past ``n`` the first is repeated (its weight is 0)."""
    g0 = M[index[i]]
    return (
        g0,
        M[index[i + 1]] if i + 1 < n else g0,
        M[index[i + 2]] if i + 2 < n else g0,
        M[index[i + 3]] if i + 3 < n else g0,
    )


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
    """LARS-lasso path of one descriptor on all atoms; returns the active-set size.

    On return ``active[:n]`` holds the atom indices and ``u[:n]`` their
    coefficients (some may be exactly zero).  ``state`` must be all
    ``_FREE`` on entry and is left so.  ``G`` (float64) gives the Cholesky
    factors, ``G32`` (its float32 copy) the directions ``a = G[:, A] w``.
    """
    cap = L.shape[0]
    K = c.shape[0]
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
    n = _start_path(G, best, r[best], active, signs, u, state, L, pivot_rtol)
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
            w0, w1, w2, w3 = _four_weights(w, n, i)
            g0, g1, g2, g3 = _four_rows(G32, active, n, i)
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


@njit(nogil=True, cache=True, boundscheck=False, fastmath=True)
def _block_max_abs(c, bmax):
    """``bmax[b] = max |c_k|`` over each block of ``_SCREEN_BLOCK`` atoms (the last may be shorter); the overall max.

    ``fastmath`` only lets the max reductions vectorise: a maximum does not
    depend on the order of the comparisons.
    """
    K = c.shape[0]
    top = abs(c[0])
    for b in range(bmax.shape[0]):
        lo = b * _SCREEN_BLOCK
        hi = min(lo + _SCREEN_BLOCK, K)
        v = abs(c[lo])
        for k in range(lo + 1, hi):
            v = max(v, abs(c[k]))
        bmax[b] = v
        top = max(top, v)
    return top


@njit(nogil=True, cache=True, boundscheck=False)
def _screen(c, lam, m, cols, in_set, bmax):
    """First pool: atoms of large ``|c_k|``, about ``m`` of them, into ``cols``; their number (0: the code is empty).

    Takes the atoms with ``|c_k| >= rho max|c|``, ``rho`` = ``_SCREEN_RATIO``
    (scanning only the blocks whose maximum reaches the threshold), then
    raises ``rho`` halfway towards 1 while more than ``2 m`` remain (each
    time on the atoms already taken).  Returns 0 if ``max |c_k| <= lam``:
    then ``u = 0`` satisfies the KKT condition.  Marks the pool in ``in_set``
    (cleared by the caller).
    """
    K = c.shape[0]
    top = _block_max_abs(c, bmax)
    if top <= lam:
        return 0
    rho = _SCREEN_RATIO
    tau = rho * top
    q = 0
    for b in range(bmax.shape[0]):
        if bmax[b] >= tau:
            for k in range(b * _SCREEN_BLOCK, min((b + 1) * _SCREEN_BLOCK, K)):
                cols[q] = k  # branch-free append
                q += abs(c[k]) >= tau
    while q > 2 * m:
        rho = 0.5 * (1.0 + rho)
        tau = rho * top
        kept = 0
        for t in range(q):
            j = cols[t]
            if abs(c[j]) >= tau:
                cols[kept] = j
                kept += 1
        q = kept
    for t in range(q):
        in_set[cols[t]] = 1
    return q


@njit(nogil=True, cache=True, boundscheck=False)
def _kkt_violators(c, G32, active, u, n, in_set, bound, r, out):
    """Atoms outside the candidates with ``|c_j - (G u)_j| > bound``, in index order, into ``out``; their number.

    The residual correlations are accumulated four active rows per pass over
    the ``K`` atoms into the work array ``r``.
    """
    K = c.shape[0]
    for k in range(K):
        r[k] = c[k]
    i = 0
    while i < n:
        u0, u1, u2, u3 = _four_weights(u, n, i)
        g0, g1, g2, g3 = _four_rows(G32, active, n, i)
        for k in range(K):
            r[k] -= u0 * g0[k] + u1 * g1[k] + u2 * g2[k] + u3 * g3[k]
        i += 4
    nv = 0
    for k in range(K):
        if in_set[k] == 0 and abs(r[k]) > bound:
            out[nv] = k
            nv += 1
    return nv


@njit(nogil=True, cache=True, boundscheck=False)
def _pool_residuals(c, pool, mc, grams, n, u, r_pool):
    """``r_pool[k] = c[pool[k]] - sum_i u[i] grams[i, k]`` on the ``mc`` pool atoms, four active rows per pass."""
    for k in range(mc):
        r_pool[k] = c[pool[k]]
    i = 0
    while i < n:
        u0, u1, u2, u3 = _four_weights(u, n, i)
        g0 = grams[i]
        g1 = grams[i + 1] if i + 1 < n else g0
        g2 = grams[i + 2] if i + 2 < n else g0
        g3 = grams[i + 3] if i + 3 < n else g0
        for k in range(mc):
            r_pool[k] -= u0 * g0[k] + u1 * g1[k] + u2 * g2[k] + u3 * g3[k]
        i += 4


@njit(nogil=True, cache=True, boundscheck=False)
def _extend_pool(G, pool, mc, extra, nv, in_set, pstate, grams, active, n):
    """Append the atoms ``extra[:nv]`` to the pool (free, with their Gram entries with the active atoms); the new size."""
    for q in range(nv):
        j = extra[q]
        pool[mc + q] = j
        in_set[j] = 1
        pstate[mc + q] = _FREE
    for i in range(n):
        g = G[active[i]]
        out = grams[i]
        for q in range(nv):
            out[mc + q] = g[extra[q]]
    return mc + nv


@njit(nogil=True, cache=True, boundscheck=False)
def _refactor(grams, ppos, gdiag, active, n, L, pivot_rtol):
    """Cholesky factor of the active Gram block from scratch (after a removal), from the gathered Gram rows."""
    for i in range(n):
        for m in range(i):
            L[i, m] = grams[m, ppos[i]]
        if not _chol_append(L, i, gdiag[active[i]], pivot_rtol):
            return False
    return True


@njit(nogil=True, cache=True, boundscheck=False)
def _feature_sign(
    c,
    G,
    gdiag,
    lam,
    pool,
    mc,
    r_pool,
    pstate,
    grams,
    n,
    active,
    ppos,
    signs,
    u,
    L,
    ustar,
    rhs,
    y,
    skipped,
    pivot_rtol,
    max_iter,
):
    """Feature-sign search for the lasso on the pool atoms ``pool[:mc]``, warm-started; the active-set size, or -1.

    On entry ``active[:n]`` (pool positions ``ppos[:n]``, marked ``_ACTIVE``
    in ``pstate[:mc]``, the other pool atoms ``_FREE``), ``signs[:n]``,
    ``u[:n]`` and the Cholesky factor ``L`` describe a point that is optimal
    on its active set (``n = 0`` is allowed), and ``grams[i, :mc]`` holds the
    Gram entries of active atom ``i`` with the pool.  On return the pool's
    lasso is solved: ``|r_k| <= lam`` on the inactive pool atoms, and
    ``u[:n]`` is the closed-form solution on the final active set, with
    ``r_pool[:mc]`` the pool's residual correlations.  -1 (the caller then
    follows the full path) if the start is not sign-consistent, an entering
    atom is numerically dependent on the active ones, the factor is full, or
    ``max_iter`` iterations did not suffice.
    """
    cap = L.shape[0]
    for i in range(n):
        if u[i] * signs[i] <= 0.0:
            return -1
    _pool_residuals(c, pool, mc, grams, n, u, r_pool)
    at_optimum = True  # u is optimal on its active set
    nskip = 0
    ny = 0  # y[:ny] = L⁻¹ (c_A - lam s_A)[:ny]: unchanged while atoms are only appended
    for _it in range(max_iter):
        newest = -1
        best = -1
        if at_optimum:
            # the inactive pool atom of largest |r_k| > lam enters, with the sign of r_k
            top = lam
            for k in range(mc):
                if pstate[k] == _FREE:
                    v = abs(r_pool[k])
                    if v > top:
                        top = v
                        best = k
            if best < 0:
                for t in range(nskip):
                    pstate[skipped[t]] = _FREE
                return n
            if n >= cap:
                return -1
            j = pool[best]
            g = G[j]
            out = grams[n]
            for k in range(mc):
                out[k] = g[pool[k]]
            for i in range(n):
                L[n, i] = grams[i, best]
            if not _chol_append(L, n, gdiag[j], pivot_rtol):
                return -1
            active[n] = j
            ppos[n] = best
            signs[n] = 1.0 if r_pool[best] > 0 else -1.0
            u[n] = 0.0
            pstate[best] = _ACTIVE
            newest = n
            n += 1
        # minimiser of the quadratic on the signs' orthant: G_AA u* = c_A - lam s_A
        # (the same operations as _chol_solve; the forward part only for new rows)
        for i in range(ny, n):
            rhs[i] = c[active[i]] - lam * signs[i]
        _chol_forward(L, ny, n, rhs, y)
        ny = n
        _chol_back(L, n, y, ustar)
        if newest >= 0 and ustar[newest] * signs[newest] <= 0.0:
            # |r_j| exceeded lam by rounding only: not a violator at this point
            n -= 1
            ny = n
            pstate[best] = _SKIP
            skipped[nskip] = best
            nskip += 1
            continue
        # line search from u towards u*: the first coefficient to reach zero
        t = 1.0
        who = -1
        for i in range(n):
            if ustar[i] * signs[i] <= 0.0:
                ti = u[i] / (u[i] - ustar[i])
                if ti < t:
                    t = ti
                    who = i
        for q in range(nskip):  # u moves: skipped atoms may enter again
            pstate[skipped[q]] = _FREE
        nskip = 0
        if who < 0:
            for i in range(n):
                u[i] = ustar[i]
            _pool_residuals(c, pool, mc, grams, n, u, r_pool)
            at_optimum = True
            continue
        for i in range(n):
            u[i] += t * (ustar[i] - u[i])
        u[who] = 0.0
        # drop every coefficient at (or past) zero, keep the order of the others
        q = 0
        for i in range(n):
            if u[i] * signs[i] > 0.0:
                if q != i:
                    active[q] = active[i]
                    ppos[q] = ppos[i]
                    signs[q] = signs[i]
                    u[q] = u[i]
                    for t in range(mc):  # a loop, not a slice copy: no shape check to compile
                        grams[q, t] = grams[i, t]
                q += 1
            else:
                pstate[ppos[i]] = _FREE
        n = q
        ny = 0
        if not _refactor(grams, ppos, gdiag, active, n, L, pivot_rtol):
            return -1
        at_optimum = False
    return -1


@njit(nogil=True, cache=True, boundscheck=False)
def encode_block(C, G, G32, lam, max_steps, pivot_rtol, cap, n_candidates, kkt_bound):
    """Lasso codes of the descriptors whose correlations are the rows of ``C``.

    Screened (``n_candidates < K``), each descriptor is solved by
    feature-sign search on a pool of about ``n_candidates`` atoms of largest
    ``|c_k|``; the code is kept once every other atom satisfies the full
    problem's KKT condition ``|c_j - (G u)_j| <= kkt_bound`` (then it solves
    the full lasso), otherwise the violators join the pool and the search
    continues.  Unscreened, or when the search fails, the LARS-lasso path is
    followed on all ``K`` atoms.

    Parameters
    ----------
    C : ndarray of float32 or float64, shape (n, K)
        Correlations ``c = D x`` of each descriptor with the ``K`` atoms.
    G, G32 : ndarray, shape (K, K)
        Gram matrix ``D Dᵀ`` in float64 and its float32 copy.
    lam : float
        Weight of the l1 penalty.
    max_steps : int
        Cap on the homotopy steps, and on the feature-sign iterations per
        pool, of a descriptor.
    pivot_rtol : float
        Relative Cholesky pivot below which an entering atom is skipped.
    cap : int
        Largest active set the Cholesky factor can hold.
    n_candidates : int
        About the size of the first pool (``>= K``: no screening).
    kkt_bound : float
        Largest ``|residual correlation|`` accepted outside the pool
        (a little below ``lam``, so that rounding errs towards a larger pool).

    Returns
    -------
    indices : ndarray of int32, shape (nnz,)
        Atom indices of the non-zero coefficients, row after row, sorted.
    data : ndarray of float32, shape (nnz,)
        The coefficients.
    counts : ndarray of int64, shape (n,)
        Number of stored coefficients of each row.
    n_full : int
        Number of screened descriptors whose feature-sign search failed
        (their path was followed on all atoms).
    n_checks : int
        Number of KKT checks on all atoms.
    """
    nrows, K = C.shape
    state = np.zeros(K, dtype=np.int8)
    skipped = np.empty(max_steps + 1, dtype=np.int64)
    active = np.empty(cap, dtype=np.int64)
    pos = np.empty(cap, dtype=np.int64)
    signs = np.empty(cap, dtype=np.float64)
    u = np.empty(cap, dtype=np.float64)
    L = np.zeros((cap, cap), dtype=np.float64)
    w = np.empty(cap, dtype=np.float64)
    rhs = np.empty(cap, dtype=np.float64)
    r = np.empty(K, dtype=np.float64)
    a = np.zeros(K, dtype=np.float64)  # read (times 0) by the first fused pass
    cols = np.empty(K, dtype=np.int64)
    in_set = np.zeros(K, dtype=np.int8)
    extra = np.empty(K, dtype=np.int64)
    bmax = np.empty((K + _SCREEN_BLOCK - 1) // _SCREEN_BLOCK, dtype=C.dtype)
    pstate = np.zeros(K, dtype=np.int8)
    r_pool = np.empty(K, dtype=np.float64)
    ustar = np.empty(cap, dtype=np.float64)
    yfw = np.empty(cap, dtype=np.float64)
    fs_skipped = np.empty(K, dtype=np.int64)
    grams = np.empty((cap, K), dtype=np.float64)
    gdiag = np.diag(G).copy()
    n_checks = 0
    screen = n_candidates < K
    size = max(16 * nrows, 64)
    indices = np.empty(size, dtype=np.int32)
    data = np.empty(size, dtype=np.float32)
    counts = np.zeros(nrows, dtype=np.int64)
    nnz = 0
    n_full = 0
    for row in range(nrows):
        c = C[row]
        full = True
        if screen:
            m = _screen(c, lam, n_candidates, cols, in_set, bmax)
            n = 0
            full = m > 0  # m == 0: max |c_k| <= lam, the code is empty
            for k in range(m):
                pstate[k] = _FREE
            while full:
                n = _feature_sign(
                    c,
                    G,
                    gdiag,
                    lam,
                    cols,
                    m,
                    r_pool,
                    pstate,
                    grams,
                    n,
                    active,
                    pos,
                    signs,
                    u,
                    L,
                    ustar,
                    rhs,
                    yfw,
                    fs_skipped,
                    pivot_rtol,
                    max_steps,
                )
                if n < 0:
                    break
                n_checks += 1
                nv = _kkt_violators(c, G32, active, u, n, in_set, kkt_bound, r, extra)
                if nv == 0:
                    full = False
                    break
                m = _extend_pool(G, cols, m, extra, nv, in_set, pstate, grams, active, n)
            for t in range(m):
                in_set[cols[t]] = 0
            n_full += full
        if full:
            n = _homotopy(c, G, G32, lam, max_steps, state, skipped, active, signs, u, L, w, rhs, r, a, pivot_rtol)
        if nnz + n > size:
            size = max(2 * size, nnz + n)
            new_i = np.empty(size, dtype=np.int32)
            new_d = np.empty(size, dtype=np.float32)
            for t in range(nnz):  # loops, not slice copies: no shape-mismatch error to compile
                new_i[t] = indices[t]
                new_d[t] = data[t]
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
    return indices[:nnz].copy(), data[:nnz].copy(), counts, n_full, n_checks
