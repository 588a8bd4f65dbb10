"""Numba kernels of :mod:`classify_images.classifiers.pmsvm` (PmSVM and PmSVM-LUT).

Every kernel is ``@njit(cache=True, nogil=True)`` and reads the training or test
matrix as a :class:`~classify_images.classifiers._rows.RowArrays` tuple ``rows``,
which describes dense and CSR rows alike: both formats go through the same
arithmetic in the same order and give identical numbers.  The other arguments
come grouped in small named tuples: the
:class:`~classify_images.classifiers.pmsvm.PolynomialApproximation` ``approx``,
the :class:`DeltaTable` ``table``, the :class:`RowConstants` and the
:class:`DualProblem` of the solver.  Each kernel unpacks its tuples once, at its
top, and passes plain arrays and scalars to its helpers (see
:mod:`~classify_images.classifiers._rows` for why).

Notation (Wu, CVPR 2012; Yang & Wu, JMLR W&CP 2012) shared with ``pmsvm.py``:

* ``x_hat = min(x / max_j, 1)`` is a feature scaled into [0, 1] by the training
  maximum of its dimension; ``x_tilde = max(x_hat, eps)`` replaces zeros by
  ``eps`` in the kernel maths (CVPR Sec. 3.1).
* ``phi(x) = (1, t, ..., t^m)`` with ``t = ln(x_tilde + 0.05)`` is the basis of
  the polynomial ``g_j(x) ~ a_j . phi(x)`` (CVPR Eq. 9).
* ``u(x) = X^-1 M_p(c, x_tilde)`` is the coefficient increment of CVPR Eq. 11
  (``X`` the Vandermonde matrix of the nodes ``c`` in ``t``).
* ``phi0 = phi(0)`` and ``v0 = u(0)``: the basis and increment of a zero entry.

A *delta row* of a value ``x`` is ``[phi(x)[1:] - phi0[1:], u(x) - v0]`` (``2m+1``
numbers; ``phi(x)[0] - phi0[0] = 0``).  Zero entries have a zero delta row, so
every loop below runs over the stored non-zeros only (see :func:`dcd_solve`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ._random import shuffle_prefix
from ._rows import RowArrays, column, read_only

__all__ = [
    "LOG_SHIFT",
    "power_mean",
    "power_mean_gram_csr",
    "power_mean_gram_dense",
    "power_mean_nodes",
    "DeltaTable",
    "DualProblem",
    "RowConstants",
    "column_max",
    "row_constants",
    "delta_rows_values",
    "delta_rows_csr",
    "SolverEntries",
    "nonzero_rows_and_max",
    "solver_entries",
    "dcd_solve",
    "dual_coefficients",
    "drop_padding",
    "decision_values",
]

LOG_SHIFT = 0.05
"""The shift of the polynomial's variable ``t = ln(x + 0.05)`` (CVPR Algorithm 2)."""

LANES = 8
"""The solver's coefficients of a group are padded to a multiple of this many problems, so that
its loops over the group vectorise without a scalar remainder."""

BRANCH_FREE_DENSITY = 5
"""Dense rows with more than 1 in this many entries non-zero are compacted without a branch
(:func:`_dense_nonzeros`)."""

ENTRY_BLOCK = 4
"""Entries of a row whose gradient terms one pass over the group's accumulators adds (``m = 2``):
the accumulators are loaded and stored once per block rather than once per entry."""

BIN_ROUNDING = 1e-9
"""Added to ``b x_hat`` before ``floor``: ``x = max_j`` gives ``b (1 - 1e-16)``, not ``b - 1``."""


# --------------------------------------------------------------------- M_p
@njit(cache=True, nogil=True)
def power_mean(x: float, y: float, p: float) -> float:
    """Scalar power mean ``M_p(x, y) = ((x^p + y^p) / 2)^(1/p)`` (CVPR Eq. 1), ``p <= 0``.

    Evaluated as ``lo * ((1 + (lo/hi)^|p|) / 2)^(1/p)`` with ``lo = min(x, y)``,
    ``hi = max(x, y)`` (``expm1``/``log1p``), which neither overflows for very
    negative ``p`` nor loses precision as ``p -> 0``.  Limits: ``p = 0`` gives
    ``sqrt(x y)`` (Hellinger), ``p = -inf`` gives ``min(x, y)`` (HIK),
    ``p = -1`` gives ``2xy / (x + y)`` (chi-square).  ``M_p(x, 0) = 0``.
    Integer ``-64 <= p <= -2`` with ``min(x, y) >= 1e-4`` (no overflow) use the
    direct formula with integer powers: two transcendentals instead of four.
    """
    lo = min(x, y)
    hi = max(x, y)
    if lo <= 0.0:
        return 0.0
    if p == -1.0:
        return 2.0 * x * y / (x + y)
    if p == 0.0:
        return np.sqrt(x * y)
    if p == -np.inf:
        return lo
    if p >= -64.0 and p == np.floor(p) and lo >= 1e-4:
        # integer p (e.g. -8): x^p by multiplications, no overflow ((1e-4)^-64 = 1e256)
        n = int(-p)
        return np.exp(np.log(0.5 * (1.0 / lo**n + 1.0 / hi**n)) / p)
    log_ratio = np.log(lo / hi)  # <= 0
    return lo * np.exp(np.log1p(0.5 * np.expm1(-p * log_ratio)) / p)


@njit(cache=True, nogil=True)
def _row_offsets(rows, p, eps):
    """``sum_{j in nz(x)} [M_p(x~_j, eps) - eps]`` for every row (zero-entry correction)."""
    indptr = rows.indptr
    data = rows.data
    n_rows = indptr.shape[0] - 1
    out = np.zeros(n_rows)
    for i in range(n_rows):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += power_mean(max(data[k], eps), eps, p) - eps
        out[i] = s
    return out


@njit(cache=True, nogil=True)
def power_mean_gram_csr(x_rows, y_rows, n_features, p, eps):
    """Power-mean kernel matrix ``K[a, b] = sum_j M_p(x~_aj, y~_bj)`` of two CSR matrices.

    With ``x~ = max(x, eps)`` every one of the ``d`` dimensions contributes;
    splitting off the zero entries,

    ``K[a, b] = d eps + r_x[a] + r_y[b] + sum_{j in nz(x_a) & nz(y_b)}
    [M(x~,y~) - M(x~,eps) - M(eps,y~) + eps]``

    with ``r_x[a] = sum_{j in nz(x_a)} [M(x~_j, eps) - eps]`` (``M(eps, eps) = eps``),
    so the cost is that of merging the sorted index lists of each pair.
    """
    xptr, xind, xdat = x_rows.indptr, x_rows.indices, x_rows.data
    yptr, yind, ydat = y_rows.indptr, y_rows.indices, y_rows.data
    nx = xptr.shape[0] - 1
    ny = yptr.shape[0] - 1
    rx = _row_offsets(x_rows, p, eps)
    ry = _row_offsets(y_rows, p, eps)
    K = np.empty((nx, ny))
    base = n_features * eps
    for a in range(nx):
        a0 = xptr[a]
        a1 = xptr[a + 1]
        for b in range(ny):
            s = 0.0
            ka = a0
            kb = yptr[b]
            b1 = yptr[b + 1]
            while ka < a1 and kb < b1:
                ja = xind[ka]
                jb = yind[kb]
                if ja < jb:
                    ka += 1
                elif jb < ja:
                    kb += 1
                else:
                    u = max(xdat[ka], eps)
                    v = max(ydat[kb], eps)
                    s += power_mean(u, v, p) - power_mean(u, eps, p) - power_mean(eps, v, p) + eps
                    ka += 1
                    kb += 1
            K[a, b] = base + rx[a] + ry[b] + s
    return K


@njit(cache=True, nogil=True)
def power_mean_gram_dense(X, Y, p, eps):
    """Power-mean kernel matrix of two dense matrices (``sum_j M_p(max(x,eps), max(y,eps))``)."""
    nx, d = X.shape
    ny = Y.shape[0]
    K = np.empty((nx, ny))
    for a in range(nx):
        for b in range(ny):
            s = 0.0
            for j in range(d):
                s += power_mean(max(X[a, j], eps), max(Y[b, j], eps), p)
            K[a, b] = s
    return K


# ------------------------------------------------------------ argument groups
class DeltaTable(NamedTuple):
    """Where the delta row of a stored entry is read (see :func:`_table_row`)."""

    use_lut: bool  #: PmSVM-LUT (one row per bin) rather than one pre-computed row per stored entry
    bin_scale: np.ndarray  #: ``b / max_j`` per column (LUT mode; empty otherwise)
    n_bins: int  #: ``b``, the number of LUT bins (0 without LUT)
    values: np.ndarray  #: float32 (rows, 2m+1): the delta rows


class RowConstants(NamedTuple):
    """Per-example numbers shared by all problems (:func:`row_constants`)."""

    q_kernel: np.ndarray  #: ``M_p(x_i, x_i)``
    r: np.ndarray  #: ``sum_{j in nz(x_i)} v0 . (phi(x_ij) - phi0)``
    z: np.ndarray  #: ``sum_{j in nz(x_i)} phi0 . (u(x_ij) - v0)``
    zero_value: float  #: ``d v0 . phi0``


class DualProblem(NamedTuple):
    """The SVM dual solved by :func:`dcd_solve` and its stopping rule."""

    l2_loss: bool  #: squared hinge (``D_ii = 1/(2 C_i)``, no upper bound) rather than hinge
    cost: np.ndarray  #: loss weight ``C_ic`` (float64, shape (n, n_problems)): ``C`` times the row's weights
    tol: float  #: stop when ``max PG - min PG <= tol``
    max_iter: int  #: most outer iterations
    seed: int  #: seed of the per-iteration permutations (shared by all problems)


# ------------------------------------------------------------ preparation
@njit(cache=True, nogil=True)
def column_max(rows, n_features):
    """Largest value of every column (0 for a column without stored entries)."""
    out = np.zeros(n_features)
    indptr, indices, data, dense = rows
    n = indptr.shape[0] - 1
    if dense:  # a branch-free loop over each row's columns, in the input's type: it vectorises
        largest = np.zeros(n_features, dtype=data.dtype)
        for i in range(n):
            start = indptr[i]
            for j in range(n_features):
                value = data[start + j]
                largest[j] = value if value > largest[j] else largest[j]
        out[:] = largest
        return out
    for i in range(n):
        start = indptr[i]
        for k in range(start, indptr[i + 1]):
            j = indices[k]
            if data[k] > out[j]:
                out[j] = data[k]
    return out


def _integer_power(x: np.ndarray, n: int) -> np.ndarray:
    """``x ** n`` for an integer ``n >= 1`` by repeated squaring (array operations only)."""
    result = None
    power = x
    while True:
        if n & 1:
            result = power if result is None else result * power
        n >>= 1
        if not n:
            return result
        power = power * power


def power_mean_nodes(nodes: np.ndarray, x: np.ndarray, p: float) -> list[np.ndarray]:
    """``[M_p(c, x) for c in nodes]`` for an array ``x > 0`` and nodes ``c > 0``: :func:`power_mean`, vectorised.

    The formulas of :func:`power_mean` as NumPy array operations (NumPy's SIMD ``exp``,
    ``log``, ``sqrt``), with what depends on ``x`` alone computed once for all nodes: for
    integer ``p`` the term ``x^p`` (by squaring), and for ``p = -2^k`` the root ``s^(1/p)``
    is ``1 / sqrt^k(s)``.  Agrees with :func:`power_mean` to rounding (checked by the tests).
    """
    if p == -1.0:
        return [2.0 * c * x / (c + x) for c in nodes]
    if p == 0.0:
        root = np.sqrt(x)
        return [np.sqrt(c) * root for c in nodes]
    if p == -np.inf:
        return [np.minimum(x, c) for c in nodes]
    if -64.0 <= p <= -2.0 and p == np.floor(p) and min(x.min(initial=1.0), np.min(nodes)) >= 1e-4:
        n = int(-p)
        x_term = _integer_power(1.0 / x, n)  # x^p, no overflow: (1e-4)^-64 = 1e256
        out = []
        for c in nodes:
            s = 0.5 * (float(c) ** p + x_term)
            if n & (n - 1) == 0:  # n = 2^k: s^(-1/n) by k square roots
                for _ in range(n.bit_length() - 1):
                    s = np.sqrt(s)
                out.append(1.0 / s)
            else:
                out.append(np.exp(np.log(s) / p))
        return out
    out = []
    for c in nodes:
        lo = np.minimum(x, c)
        out.append(lo * np.exp(np.log1p(0.5 * np.expm1(-p * np.log(lo / np.maximum(x, c)))) / p))
    return out


_DELTA_CHUNK = 1 << 13
"""Values converted to delta rows at a time (the temporaries stay in a core's cache)."""


_KIND_GENERAL, _KIND_CHI2, _KIND_HELLINGER, _KIND_MIN, _KIND_ROOTS = range(5)
"""How :func:`_fill_delta_rows` evaluates ``M_p(c, x)``: NumPy's :func:`power_mean_nodes`
(``_KIND_GENERAL``), or in the kernel for ``p = -1``, ``0``, ``-inf`` and ``p = -2^k``."""


def _power_mean_kind(approx, x_min: float) -> tuple[int, int]:
    """``(kind, k)`` of :func:`_fill_delta_rows` for the power of ``approx`` (``k`` for ``p = -2^k``).

    The kernel's cases are those of :func:`power_mean_nodes` whose arithmetic is exactly
    rounded (``+ - * /``, ``sqrt``, ``min``), so that both give the same bits.
    """
    p = approx.p
    if p == -1.0:
        return _KIND_CHI2, 0
    if p == 0.0:
        return _KIND_HELLINGER, 0
    if p == -np.inf:
        return _KIND_MIN, 0
    if -64.0 <= p <= -2.0 and p == np.floor(p) and min(x_min, float(np.min(approx.node_values))) >= 1e-4:
        n = int(-p)
        if n & (n - 1) == 0:
            return _KIND_ROOTS, n.bit_length() - 1
    return _KIND_GENERAL, 0


@njit(cache=True, nogil=True, error_model="numpy")
def _fill_delta_rows(x_tilde, t, node_values, node_powers, m_zero, phi0, vinv, kind, k, node_terms, out):
    """Delta rows of the values ``x_tilde`` (``t = ln(x_tilde + 0.05)`` given) into ``out``.

    ``node_terms`` (m+1, n) holds ``M_p(c, x~) - M_p(c, eps)`` on entry for ``kind =
    _KIND_GENERAL`` and is the kernel's work space otherwise.  ``node_powers[r] = c_r^p``
    (``_KIND_ROOTS``).  The same operations in the same order as :func:`power_mean_nodes`
    and NumPy's evaluation of the delta rows, one contiguous loop per step (which the
    compiler vectorises; ``error_model="numpy"``: a division needs no exception check).
    """
    n = x_tilde.shape[0]
    m = phi0.shape[0] - 1
    for i in range(n):  # t^q - t0^q, q = 1..m
        power = t[i]
        for q in range(1, m + 1):
            out[i, q - 1] = power - phi0[q]
            power = power * t[i]
    if kind == _KIND_ROOTS:
        x_term = node_terms[m]  # the last row is free until its node is reached
        for i in range(n):
            x_term[i] = 1.0 / x_tilde[i]
        for _ in range(k):  # x^p = (1/x)^(2^k) by k squarings
            for i in range(n):
                x_term[i] = x_term[i] * x_term[i]
        for r in range(m + 1):
            row = node_terms[r]
            cp = node_powers[r]
            for i in range(n):
                row[i] = 0.5 * (cp + x_term[i])
            for _ in range(k):  # s^(1/p) = 1 / sqrt^k(s)
                for i in range(n):
                    row[i] = np.sqrt(row[i])
            mz = m_zero[r]
            for i in range(n):
                row[i] = 1.0 / row[i] - mz
    elif kind != _KIND_GENERAL:
        for r in range(m + 1):
            row = node_terms[r]
            c = node_values[r]
            mz = m_zero[r]
            if kind == _KIND_CHI2:
                two_c = 2.0 * c
                for i in range(n):
                    row[i] = two_c * x_tilde[i] / (c + x_tilde[i]) - mz
            elif kind == _KIND_HELLINGER:
                root_c = np.sqrt(c)
                for i in range(n):
                    row[i] = root_c * np.sqrt(x_tilde[i]) - mz
            else:
                for i in range(n):
                    row[i] = min(x_tilde[i], c) - mz
    column = np.empty(n)
    for r in range(m + 1):  # X^-1 (M_p(c, x~) - M_p(c, eps)), one output column at a time
        a = vinv[r, 0]
        first = node_terms[0]
        for i in range(n):
            column[i] = a * first[i]
        for q in range(1, m + 1):
            a = vinv[r, q]
            row = node_terms[q]
            for i in range(n):
                column[i] += a * row[i]
        for i in range(n):
            out[i, m + r] = column[i]


def _write_delta_rows(x_hat: np.ndarray, approx, out: np.ndarray) -> None:
    """Write the delta rows of the scaled values ``x_hat`` into ``out`` (see :func:`delta_rows_values`).

    NumPy computes ``t = ln(x~ + 0.05)`` (its vectorised ``log``); :func:`_fill_delta_rows`
    the rest in one call.
    """
    m = approx.m
    x_tilde = np.maximum(np.minimum(x_hat, 1.0), approx.eps)
    t = np.log(x_tilde + LOG_SHIFT)
    kind, k = _power_mean_kind(approx, float(x_tilde.min(initial=1.0)))
    node_terms = np.empty((m + 1, x_tilde.shape[0]))
    if kind == _KIND_GENERAL:
        for r, (mk, mz) in enumerate(zip(power_mean_nodes(approx.node_values, x_tilde, approx.p), approx.m_zero)):
            node_terms[r] = mk - mz
    node_powers = np.array([float(c) ** approx.p for c in approx.node_values])
    _fill_delta_rows(
        x_tilde, t, approx.node_values, node_powers, approx.m_zero, approx.phi0, approx.vinv, kind, k, node_terms, out
    )


def delta_rows_values(values, approx) -> np.ndarray:
    """Delta rows ``[t^q - t0^q (q = 1..m), X^-1 (M_p(c, x~) - M_p(c, eps))]`` of scaled values.

    ``t = ln(x~ + 0.05)``, ``x~ = max(min(x_hat, 1), eps)`` (CVPR Eq. 11 minus its zero
    part); float32, shape ``(len(values), 2m + 1)``.  Used for the LUT paper's tables T1/T2
    (Eqs. 18-19).
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    out = np.empty((values.shape[0], 2 * approx.m + 1), dtype=np.float32)
    for lo in range(0, values.shape[0], _DELTA_CHUNK):
        _write_delta_rows(values[lo : lo + _DELTA_CHUNK], approx, out[lo : lo + _DELTA_CHUNK])
    return out


def delta_rows_csr(rows, inv_max, approx) -> np.ndarray:
    """Delta rows of every stored entry of CSR ``rows`` (PmSVM's pre-computation, CVPR Sec. 4.4).

    Computed in chunks, so the only large array is the float32 result.
    """
    data, indices = rows.data, rows.indices
    out = np.empty((data.shape[0], 2 * approx.m + 1), dtype=np.float32)
    for lo in range(0, data.shape[0], _DELTA_CHUNK):
        hi = lo + _DELTA_CHUNK
        x_hat = data[lo:hi].astype(np.float64) * inv_max[indices[lo:hi]]
        _write_delta_rows(x_hat, approx, out[lo:hi])
    return out


# ------------------------------------------------------------- training
@njit(cache=True, nogil=True, inline="always")
def _table_row(k, start, dense, indices, data, use_lut, bin_scale, n_bins):
    """Column ``j`` of entry ``k`` and the row of the table's ``values`` holding its delta row.

    The arguments after ``start`` are the fields of the
    :class:`~classify_images.classifiers._rows.RowArrays` and of the
    :class:`DeltaTable`, unpacked once by the calling kernel (see
    :mod:`~classify_images.classifiers._rows` for why).

    LUT mode: the row is the bin ``h = floor(b x_hat)`` of the LUT paper
    (``x_hat * b = x * bin_scale[j]``), capped at ``b``; ``BIN_ROUNDING`` makes
    a value equal to the training maximum land in bin ``b`` despite rounding.  Otherwise the table
    holds one pre-computed row per stored entry and the row is ``k``.
    """
    j = column(k, start, dense, indices)
    if use_lut:
        h = int(data[k] * bin_scale[j] + BIN_ROUNDING)
        if h > n_bins:
            h = n_bins
        return j, h
    return j, k


@njit(cache=True, nogil=True)
def row_constants(rows, table, inv_max, approx, n_features):
    """Per-example numbers shared by all classes (computed once before training).

    Returns ``q_kernel, r, z`` with

    * ``q_kernel[i] = M_p(x_i, x_i) = sum_j x~_ij`` (CVPR Algorithm 3, line 2):
      ``M_p(x, x) = x``, so for any ``p`` the diagonal is the L1 norm of the
      scaled features with zeros counted as ``eps``;
    * ``r[i] = sum_{j in nz(x_i)} v0 . (phi(x_ij) - phi0)``;
    * ``z[i] = sum_{j in nz(x_i)} phi0 . (u(x_ij) - v0)``

    (see :func:`dcd_solve` for their use).
    """
    indptr, indices, data, dense = rows
    use_lut, bin_scale, n_bins, values = table
    eps = approx.eps
    v0 = approx.v0
    phi0 = approx.phi0
    n = indptr.shape[0] - 1
    m = phi0.shape[0] - 1
    q_kernel = np.empty(n)
    r = np.empty(n)
    z = np.empty(n)
    for i in range(n):
        start = indptr[i]
        end = indptr[i + 1]
        sq = 0.0
        sr = 0.0
        sz = 0.0
        n_zero = n_features - (end - start)
        for k in range(start, end):
            if data[k] == 0.0:
                n_zero += 1
                continue
            j, row = _table_row(k, start, dense, indices, data, use_lut, bin_scale, n_bins)
            sq += max(min(data[k] * inv_max[j], 1.0), eps)
            for q in range(m):
                sr += v0[q + 1] * values[row, q]
            for q in range(m + 1):
                sz += phi0[q] * values[row, m + q]
        q_kernel[i] = sq + n_zero * eps
        r[i] = sr
        z[i] = sz
    return q_kernel, r, z


class SolverEntries(NamedTuple):
    """The training rows as :func:`dcd_solve` reads them (:func:`solver_entries`).

    CSR structure only: the solver needs, for each stored non-zero, its column and the
    row of ``values`` holding its delta row, never the value itself.
    """

    indptr: np.ndarray  #: start of each example's entries; length ``n + 1``
    indices: np.ndarray  #: column of each entry (int32)
    table_rows: (
        np.ndarray
    )  #: LUT: row of ``values`` of each entry (its bin); otherwise empty (entry ``k`` reads row ``k``)
    use_lut: bool  #: whether ``table_rows`` is used
    values: np.ndarray  #: float32 (rows, 2m+1): the delta rows (LUT: one per bin, then an all-zero row)


@njit(cache=True, nogil=True)
def _lut_bins(rows, bin_scale, n_bins, bin_dtype_sample):
    """The LUT bin of every stored entry of CSR ``rows`` (:func:`_table_row`).

    An explicit zero gets the table's all-zero row ``n_bins + 1``.
    """
    indptr, indices, data, _ = rows
    n = indptr.shape[0] - 1
    bins = np.empty(indices.shape[0], dtype=bin_dtype_sample.dtype)
    for i in range(n):
        start = indptr[i]
        for k in range(start, indptr[i + 1]):
            if data[k] == 0.0:
                bins[k] = n_bins + 1
                continue
            _, h = _table_row(k, start, False, indices, data, True, bin_scale, n_bins)
            bins[k] = h
    return bins


@njit(cache=True, nogil=True)
def _dense_nonzeros(data, n, d, sample_every):
    """CSR arrays of the non-zeros of the dense C-ordered ``(n, d)`` matrix ``data``, and its column maxima.

    One pass over the input: each row is read once from memory to count its non-zeros and
    update the column maxima (a branch-free loop, vectorised), then copied from cache.  A row
    with more than ``1/BRANCH_FREE_DENSITY`` non-zeros is copied without a branch (a zero is
    written to the next free slot, which the next non-zero or the next row overwrites): in
    dense feature rows the zero/non-zero pattern is unpredictable and mispredicted branches
    cost more than the extra stores, while in sparse rows the branch is predicted.  The
    output is sized from the non-zeros of every ``sample_every``-th row and grown if needed.
    Returns ``indptr`` (int64), ``indices`` (int32), ``values`` and ``column_max`` (in the
    input's type; views of possibly larger buffers).
    """
    sampled = 0
    n_sampled = 0
    for i in range(0, n, sample_every):
        count = 0
        for j in range(d):
            count += data[i * d + j] != 0.0
        sampled += count
        n_sampled += 1
    capacity = sampled * n // max(n_sampled, 1)
    capacity += capacity // 8 + d + 1
    indices = np.empty(capacity, dtype=np.int32)
    values = np.empty(capacity, dtype=data.dtype)
    indptr = np.zeros(n + 1, dtype=np.int64)
    largest = np.zeros(d, dtype=data.dtype)
    o = 0
    for i in range(n):
        start = i * d
        count = 0
        for j in range(d):
            value = data[start + j]
            largest[j] = value if value > largest[j] else largest[j]
            count += value != 0.0
        if o + count + 1 > capacity:
            capacity = max(capacity + capacity // 2, o + count + 1)
            grown_indices = np.empty(capacity, dtype=np.int32)
            grown_values = np.empty(capacity, dtype=data.dtype)
            grown_indices[:o] = indices[:o]
            grown_values[:o] = values[:o]
            indices, values = grown_indices, grown_values
        if count * BRANCH_FREE_DENSITY > d:
            for j in range(d):
                value = data[start + j]
                indices[o] = j
                values[o] = value
                o += value != 0.0
        else:
            for j in range(d):
                if data[start + j] != 0.0:
                    indices[o] = j
                    values[o] = data[start + j]
                    o += 1
        indptr[i + 1] = o
    return indptr, indices[:o], values[:o], largest


_SAMPLE_EVERY = 32
""":func:`nonzero_rows_and_max` sizes its output from the non-zeros of every this-many-th row."""


def nonzero_rows_and_max(rows: RowArrays, n_features: int) -> tuple[RowArrays, np.ndarray]:
    """CSR :class:`~classify_images.classifiers._rows.RowArrays` of the non-zeros of ``rows``, and the column maxima.

    Dense input is converted in one pass (:func:`_dense_nonzeros`); CSR input is returned as
    it is, with :func:`column_max`.  The maxima are float64.
    """
    if not rows.dense:
        return rows, column_max(rows, n_features)
    n = rows.indptr.shape[0] - 1
    indptr, indices, values, largest = _dense_nonzeros(rows.data, n, n_features, _SAMPLE_EVERY)
    return RowArrays(indptr, indices, read_only(values), False), largest.astype(np.float64)


def solver_entries(rows: RowArrays, table: DeltaTable) -> SolverEntries:
    """The :class:`SolverEntries` of the training ``rows`` (CSR: :func:`nonzero_rows_and_max`).

    PmSVM-LUT computes the bin of every stored value once, here, rather than at every
    visit of its example; the bins take 2 bytes per non-zero (``uint16`` up to 65 534 bins).
    Without LUT the table already holds one delta row per stored entry.
    """
    if rows.dense:
        raise ValueError("solver_entries: the rows must be CSR (nonzero_rows_and_max)")
    indptr, indices = rows.indptr.astype(np.int64), rows.indices.astype(np.int32, copy=False)
    if not table.use_lut:
        return SolverEntries(indptr, indices, np.empty(0, dtype=np.uint16), False, table.values)
    sample = np.empty(0, dtype=np.uint16 if table.n_bins + 1 <= np.iinfo(np.uint16).max else np.int32)
    bins = _lut_bins(rows._replace(indices=indices), table.bin_scale, table.n_bins, sample)
    values = np.vstack([table.values, np.zeros((1, table.values.shape[1]), dtype=table.values.dtype)])
    return SolverEntries(indptr, indices, bins, True, values)


@njit(cache=True, nogil=True, inline="always")
def _rows_gradient(start, end, indices, table_rows, use_lut, values, b, acc):
    """``acc[c] = sum_{j in nz(x_i)} b[j, :, c] . (phi(x_ij) - phi0)[1:]`` for every problem ``c``.

    ``b[j, q - 1, c]`` holds the coefficient of ``t^q`` (q = 1..m); the rows and the
    table come as the fields of the :class:`SolverEntries`.
    """
    m = b.shape[1]
    width = b.shape[2]
    acc[:] = 0.0
    if m == 2:  # the default degree: one loop over the group per ENTRY_BLOCK entries
        k = start
        while k + ENTRY_BLOCK <= end:
            j0, j1, j2, j3 = indices[k], indices[k + 1], indices[k + 2], indices[k + 3]
            r0 = table_rows[k] if use_lut else k
            r1 = table_rows[k + 1] if use_lut else k + 1
            r2 = table_rows[k + 2] if use_lut else k + 2
            r3 = table_rows[k + 3] if use_lut else k + 3
            p0, q0 = values[r0, 0], values[r0, 1]
            p1, q1 = values[r1, 0], values[r1, 1]
            p2, q2 = values[r2, 0], values[r2, 1]
            p3, q3 = values[r3, 0], values[r3, 1]
            for c in range(width):  # the entries' terms added in entry order, as one entry at a time
                s = acc[c]
                s += b[j0, 0, c] * p0 + b[j0, 1, c] * q0
                s += b[j1, 0, c] * p1 + b[j1, 1, c] * q1
                s += b[j2, 0, c] * p2 + b[j2, 1, c] * q2
                s += b[j3, 0, c] * p3 + b[j3, 1, c] * q3
                acc[c] = s
            k += ENTRY_BLOCK
        tail_start = k
        for k in range(tail_start, end):
            j = indices[k]
            row = table_rows[k] if use_lut else k
            dphi1 = values[row, 0]
            dphi2 = values[row, 1]
            for c in range(width):
                acc[c] += b[j, 0, c] * dphi1 + b[j, 1, c] * dphi2
        return
    for k in range(start, end):
        j = indices[k]
        row = table_rows[k] if use_lut else k
        for q in range(m):
            dphi = values[row, q]
            for c in range(width):
                acc[c] += b[j, q, c] * dphi


@njit(cache=True, nogil=True, inline="always")
def _rows_update(start, end, indices, table_rows, use_lut, values, b, delta):
    """``b[j, q - 1, c] += delta[c] (u(x_ij) - v0)_q`` (q = 1..m) for the non-zeros of row ``i``.

    The ``q = 0`` coefficients never enter a gradient (``phi(x)_0 - phi0_0 = 0``; their
    sum is tracked by ``beta``), so the solver does not keep them (:func:`dual_coefficients`
    computes them afterwards).
    """
    m = b.shape[1]
    width = b.shape[2]
    if m == 2:
        for k in range(start, end):
            j = indices[k]
            row = table_rows[k] if use_lut else k
            du1 = values[row, 3]
            du2 = values[row, 4]
            for c in range(width):
                step = delta[c]
                b[j, 0, c] += step * du1
                b[j, 1, c] += step * du2
        return
    for k in range(start, end):
        j = indices[k]
        row = table_rows[k] if use_lut else k
        for q in range(m):
            du = values[row, m + 1 + q]
            for c in range(width):
                b[j, q, c] += delta[c] * du


@njit(cache=True, nogil=True)
def dcd_solve(entries, Y, constants, problem, b, alpha, n_iter):
    """Dual coordinate descent of PmSVM (CVPR Algorithm 3; LUT paper Algorithm 3).

    Solves, for every column ``c`` of ``Y`` (a one-vs-rest problem, labels in
    {-1, +1}), ``min_a 1/2 a^T (Q + D) a - e^T a`` s.t. ``0 <= a_i <= U`` with
    ``Q_it = y_i y_t M_p(x_i, x_t)`` (CVPR Eq. 3); ``D = 0, U_i = C_i`` for the hinge
    (``problem.l2_loss=False``), ``D_ii = 1/(2 C_i), U = inf`` for the squared hinge, with
    ``C_i = problem.cost[i, c]`` (``C`` times the sample and class weights of row ``i``), following
    LIBLINEAR's ``solve_l2r_l1l2_svc``: a random permutation every outer
    iteration, shrinking, and the stopping rule ``max PG - min PG <= tol`` on
    the projected gradient (all per problem).

    The gradient needs ``g(x_i) = sum_j a_j . phi(x_ij)`` (CVPR Eq. 9) and the
    update ``a_j += delta u(x_ij)`` for every ``j`` (Eq. 11, ``delta = y_i
    Delta alpha_i``), both over all ``d`` dimensions.  The zero entries share
    the increment ``v0``, so the coefficients are kept as ``a_j = b_j + S v0``
    with ``S = sum_i alpha_i y_i`` and ``b_j += delta (u(x_ij) - v0)`` on the
    non-zeros of ``x_i`` only.  Then, with ``beta = phi0 . sum_j b_j``,

    ``g(x_i) = sum_{j in nz} b_j . (phi(x_ij) - phi0) + S (r_i + zero_value) + beta``

    (``r_i``, ``z_i``, ``zero_value`` from ``constants``, see :func:`row_constants`;
    ``zero_value = d v0 . phi0``), and an update changes ``beta`` by ``delta z_i``:
    O(nnz_i m) per step.  ``phi(x)_0 - phi0_0 = 0``, so only ``b_{j,1..m}`` enter the
    sum: the solver keeps those (``b``, float32: half the memory traffic of float64;
    the gradient's rounding error is far below any useful ``tol``), and the ``t^0``
    coefficients of the model are computed from the final ``alpha`` afterwards
    (:func:`dual_coefficients`).

    The problems of the group share the examples' order (one permutation of all
    ``n`` examples per outer iteration, skipping those a problem has shrunk), so
    each visit of ``x_i`` serves all of them: its entries and table rows are
    read once and ``b[j, :, :]`` is contiguous over the problems.  A problem's
    numbers do not depend on the others in its group (same seed, same
    permutations), so any grouping (threads) gives the same model.

    Writes ``b`` (d, m, w) float32, ``alpha`` (n, w) float64 (the dual variables; columns
    beyond the problems stay 0) and ``n_iter`` (outer iterations until each problem
    stopped).  ``w >= n_problems``: columns beyond the problems are padding, so that the
    loops over the group have a vector-friendly length.
    """
    indptr, indices, table_rows, use_lut, values = entries
    q_kernel, r, z, zero_value = constants
    l2_loss, cost, tol, max_iter, seed = problem
    n, n_classes = Y.shape
    diag = 0.0
    upper = np.inf
    shrunk = np.zeros((n, n_classes), dtype=np.bool_)
    n_shrunk = np.zeros(n_classes, dtype=np.int64)
    done = np.zeros(n_classes, dtype=np.bool_)
    beta = np.zeros(n_classes)
    S = np.zeros(n_classes)
    acc = np.empty(b.shape[2], dtype=b.dtype)
    delta = np.zeros(b.shape[2], dtype=b.dtype)
    pg_max_old = np.full(n_classes, np.inf)
    pg_min_old = np.full(n_classes, -np.inf)
    pg_max_new = np.empty(n_classes)
    pg_min_new = np.empty(n_classes)
    alpha[:, :] = 0.0
    n_iter[:] = 0
    b[:, :, :] = 0.0
    index = np.arange(n)
    no_state = np.empty(0, dtype=np.uint64)  # numba's Mersenne Twister, seeded here
    np.random.seed(seed)
    n_done = 0
    it = 0
    while it < max_iter and n_done < n_classes:
        pg_max_new[:] = -np.inf
        pg_min_new[:] = np.inf
        shuffle_prefix(index, n, no_state)
        for s in range(n):
            i = index[s]
            needed = False
            for c in range(n_classes):
                if not done[c] and not shrunk[i, c]:
                    needed = True
                    break
            if not needed:
                continue
            start = indptr[i]
            end = indptr[i + 1]
            _rows_gradient(start, end, indices, table_rows, use_lut, values, b, acc)
            any_delta = False
            for c in range(n_classes):
                delta[c] = 0.0
                if done[c] or shrunk[i, c]:
                    continue
                yi = float(Y[i, c])
                a = alpha[i, c]
                if l2_loss:
                    diag = 0.5 / cost[i, c]
                else:
                    upper = cost[i, c]
                G = yi * (acc[c] + S[c] * (r[i] + zero_value) + beta[c]) - 1.0 + diag * a
                PG = 0.0
                if a == 0.0:
                    if G > pg_max_old[c]:
                        shrunk[i, c] = True
                        n_shrunk[c] += 1
                        continue
                    elif G < 0.0:
                        PG = G
                elif a == upper:
                    if G < pg_min_old[c]:
                        shrunk[i, c] = True
                        n_shrunk[c] += 1
                        continue
                    elif G > 0.0:
                        PG = G
                else:
                    PG = G
                pg_max_new[c] = max(pg_max_new[c], PG)
                pg_min_new[c] = min(pg_min_new[c], PG)
                if abs(PG) > 1.0e-12:
                    new = min(max(a - G / (q_kernel[i] + diag), 0.0), upper)
                    alpha[i, c] = new
                    step = (new - a) * yi
                    if step != 0.0:
                        delta[c] = step
                        any_delta = True
                        beta[c] += step * z[i]
                        S[c] += step
            if any_delta:
                _rows_update(start, end, indices, table_rows, use_lut, values, b, delta)
        it += 1
        for c in range(n_classes):
            if done[c]:
                continue
            n_iter[c] = it
            if pg_max_new[c] - pg_min_new[c] <= tol:
                if n_shrunk[c] == 0:
                    done[c] = True
                    n_done += 1
                    continue
                for i in range(n):
                    shrunk[i, c] = False
                n_shrunk[c] = 0
                pg_max_old[c] = np.inf
                pg_min_old[c] = -np.inf
                continue
            pg_max_old[c] = pg_max_new[c]
            pg_min_old[c] = pg_min_new[c]
            if pg_max_old[c] <= 0.0:
                pg_max_old[c] = np.inf
            if pg_min_old[c] >= 0.0:
                pg_min_old[c] = -np.inf


@njit(cache=True, nogil=True)
def dual_coefficients(entries, weights, b, v0, n_features):
    """The model ``a_j = b_j + S v0`` (CVPR Eqs. 8 and 11) after :func:`dcd_solve`.

    ``weights[i, c] = alpha_ic y_ic``, ``S_c = sum_i w_ic``.  The coefficients of ``t^1 ..
    t^m`` are the solver's ``b`` (float32) plus ``S v0``; those of ``t^0``, which the solver
    does not keep, are ``b_j0 = sum_i w_i (u(x_ij) - v0)_0``: one pass over the rows with a
    non-zero weight, in float64.  Returns ``coef`` (d, m+1, w) float64 with
    ``coef[j, q, c] = a_{j,q}`` of problem ``c``.
    """
    indptr, indices, table_rows, use_lut, values = entries
    n, width = weights.shape
    m = v0.shape[0] - 1
    coef = np.empty((n_features, m + 1, width))
    S = np.zeros(width)
    for i in range(n):
        for c in range(width):
            S[c] += weights[i, c]
    for j in range(n_features):
        for q in range(1, m + 1):
            for c in range(width):
                coef[j, q, c] = np.float64(b[j, q - 1, c]) + S[c] * v0[q]
    intercepts = np.empty((n_features, width))  # contiguous: the pass below touches 8 bytes per problem
    for j in range(n_features):
        for c in range(width):
            intercepts[j, c] = S[c] * v0[0]
    for i in range(n):
        any_weight = False
        for c in range(width):
            if weights[i, c] != 0.0:
                any_weight = True
        if not any_weight:
            continue
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            row = table_rows[k] if use_lut else k
            du = np.float64(values[row, m])
            for c in range(width):
                intercepts[j, c] += weights[i, c] * du
    coef[:, 0, :] = intercepts
    return coef


# ------------------------------------------------------------ prediction
@njit(cache=True, nogil=True)
def drop_padding(a, k):
    """The first ``k`` entries of the last axis of the C-contiguous 3-d ``a``, moved in place.

    Returns a C-contiguous ``(a.shape[0], a.shape[1], k)`` view of ``a``'s memory: every
    entry moves to a lower (or the same) address, in increasing order, so nothing is
    overwritten before it is read.
    """
    n_rows = a.shape[0] * a.shape[1]
    width = a.shape[2]
    flat = a.reshape(-1)
    for row in range(n_rows):
        for c in range(k):
            flat[row * k + c] = flat[row * width + c]
    return flat[: n_rows * k].reshape((a.shape[0], a.shape[1], k))


@njit(cache=True, nogil=True)
def decision_values(rows, table, inv_max, approx, coef, zero_scores):
    """Decision values ``g(q) = sum_j a_j . phi(q_j)`` (CVPR Eq. 10; LUT paper Eq. 20).

    ``coef[j, q, c]`` is ``a_{j,q}`` of problem ``c`` (its ``q = 0`` term cancels in
    ``phi(q_j) - phi0``); ``zero_scores[c] =
    sum_j a_cj . phi0`` is the score of the all-zero vector, so that
    ``g(q) = zero_scores + sum_{j in nz(q)} a_j . (phi(q_j) - phi0)``: O(nnz m)
    per problem.  LUT mode reads ``phi(q_j) - phi0`` from the table's bin of
    ``q_j``; otherwise ``t = ln(min(q_j / max_j, 1) ~ + 0.05)`` is computed.
    """
    indptr, indices, data, dense = rows
    use_lut, bin_scale, n_bins, values = table
    eps = approx.eps
    phi0 = approx.phi0
    n = indptr.shape[0] - 1
    m = coef.shape[1] - 1
    n_problems = coef.shape[2]
    out = np.empty((n, n_problems))
    dphi = np.empty(m)
    for i in range(n):
        for c in range(n_problems):
            out[i, c] = zero_scores[c]
        start = indptr[i]
        for k in range(start, indptr[i + 1]):
            if data[k] == 0.0:
                continue
            j, row = _table_row(k, start, dense, indices, data, use_lut, bin_scale, n_bins)
            if use_lut:
                for q in range(m):
                    dphi[q] = values[row, q]
            else:
                t = np.log(max(min(data[k] * inv_max[j], 1.0), eps) + LOG_SHIFT)
                power = 1.0
                for q in range(m):
                    power *= t
                    dphi[q] = power - phi0[q + 1]
            for q in range(m):
                for c in range(n_problems):
                    out[i, c] += coef[j, q + 1, c] * dphi[q]
    return out
