"""Numba kernels of :mod:`classify_images.classifiers.mbkl` (MBKL, Roig, Boix & Van Gool [1]_).

Notation (the paper's, sections 3-5): a decision stump ``k`` reads feature
``f_k`` and fires, ``sigma_k(x) = [x[f_k] > t_k]``.  Stump outputs are kept as
one byte per (stump, sample) and the matrices of Steps 1 and 2 are never built
with more than that: Step 1's ``s_k(x)`` (Eq. 10) is computed on the fly from
the stump bits and the Step-0 signs.

All kernels are ``@njit(cache=True, nogil=True)`` and single-threaded; thresholds
are float64 and every comparison is done in float64, so training (CSC columns)
and prediction (dense or CSR rows, as a
:class:`~classify_images.classifiers._rows.RowArrays` tuple) fire the same stumps on
the same values.

References
----------
.. [1] G. Roig, X. Boix and L. Van Gool, "Random Decision Stumps for Kernel Learning
   and Efficient SVM", ACCV 2012.
.. [2] G.-X. Yuan, K.-W. Chang, C.-J. Hsieh and C.-J. Lin, "A Comparison of Optimization
   Methods and Software for Large-scale L1-regularized Linear Classification", JMLR 11,
   2010.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ._random import shuffle_prefix, xorshift_state

__all__ = [
    "StumpColumns",
    "stump_bits_csc",
    "fired_counts",
    "l1r_l2svc_stumps",
    "signed_stump_matrix",
    "decision",
]


class StumpColumns(NamedTuple):
    """Step 1's implicit matrix: its columns are stumps, its rows (problem, sample) pairs."""

    bits: np.ndarray  #: uint8 (n_stumps, n_samples) stump outputs
    signs: np.ndarray  #: int8 (n_stumps, n_problems) Step-0 signs ``a``
    active: np.ndarray  #: int64 stumps with a non-zero sign for some problem (the columns)
    row_sample: np.ndarray  #: int64 training sample of each row
    row_label: np.ndarray  #: int8 label (+1/-1) of each row
    problem_ptr: np.ndarray  #: int64 (n_problems + 1,): rows of problem ``c`` are ``ptr[c]:ptr[c+1]``


# --------------------------------------------------------------------- stumps
@njit(cache=True, nogil=True)
def stump_bits_csc(indptr, indices, data, n_rows, features, thresholds):
    """Stump outputs ``bits[k, i] = [x_i[f_k] > t_k]`` (uint8, shape (K, n)).

    ``X`` is given in CSC form (implicit entries are 0).  A column is scattered
    into a dense buffer once per run of stumps on the same feature, so sorting
    the stumps by feature makes this O(nnz(X) + K n).
    """
    n_stumps = features.shape[0]
    bits = np.empty((n_stumps, n_rows), dtype=np.uint8)
    column = np.zeros(n_rows, dtype=np.float64)
    current = -1
    for k in range(n_stumps):
        f = features[k]
        if f != current:
            if current >= 0:
                for p in range(indptr[current], indptr[current + 1]):
                    column[indices[p]] = 0.0
            for p in range(indptr[f], indptr[f + 1]):
                column[indices[p]] = data[p]
            current = f
        t = thresholds[k]
        for i in range(n_rows):
            bits[k, i] = 1 if column[i] > t else 0
    return bits


@njit(cache=True, nogil=True)
def fired_counts(bits, y_index, n_classes):
    """``counts[k, c]`` = number of training samples of class ``c`` firing stump ``k``."""
    n_stumps, n_rows = bits.shape
    counts = np.zeros((n_stumps, n_classes), dtype=np.int64)
    for k in range(n_stumps):
        for i in range(n_rows):
            if bits[k, i]:
                counts[k, y_index[i]] += 1
    return counts


# ------------------------------------------------------------------ Step 1
@njit(cache=True, nogil=True)
def _gather_column(j, columns, rows, values):
    """Non-zeros of column ``j`` of Step 1's implicit matrix, times the labels: ``y_r s_j(x_r)``.

    Fills ``rows[:count]`` and ``values[:count]`` and returns ``count``.  Rows are
    grouped by problem (``problem_ptr``), so a stump whose Step-0 sign is 0 for a
    problem skips that problem's rows.  Column ``n_active`` is the bias (value 1).
    """
    bits = columns.bits
    signs = columns.signs
    row_sample = columns.row_sample
    row_label = columns.row_label
    problem_ptr = columns.problem_ptr
    n_active = columns.active.shape[0]
    count = 0
    if j == n_active:
        for r in range(row_sample.shape[0]):
            rows[count] = r
            values[count] = float(row_label[r])
            count += 1
        return count
    k = columns.active[j]
    for c in range(problem_ptr.shape[0] - 1):
        a = signs[k, c]
        if a == 0:
            continue
        for r in range(problem_ptr[c], problem_ptr[c + 1]):
            v = a if bits[k, row_sample[r]] else -a
            rows[count] = r
            values[count] = float(row_label[r] * v)
            count += 1
    return count


@njit(cache=True, nogil=True)
def l1r_l2svc_stumps(columns, C, eps, max_iter, seed):
    """l1-regularised squared-hinge SVM on Step 1's ``s(x)`` (LIBLINEAR ``-s 5 -B 1``).

    Minimises ``||w||_1 + C sum_r max(0, 1 - y_r w^T s_r)^2`` over ``w`` of length
    ``m + 1`` (``m = len(active)`` stumps, then the bias as the weight of a
    constant feature 1, penalised like the others, as LIBLINEAR does).  Rows
    are grouped by one-vs-rest problem: rows ``problem_ptr[c]:problem_ptr[c+1]``
    belong to problem ``c``; row ``r`` is sample ``row_sample[r]`` with label
    ``row_label[r]`` and ``s_r[j] = signs[active[j], c] * (2 bits[active[j], sample] - 1)``
    (the arrays of ``columns``, a :class:`StumpColumns`).

    This is a port of LIBLINEAR's ``solve_l1r_l2_svc`` (coordinate descent with
    one Newton step per coordinate, Armijo line search, shrinking [2]_), reading
    the implicit matrix column by column (:func:`_gather_column`).  The
    coordinate order of every iteration is a random permutation of the active
    columns drawn from a xorshift64* generator seeded with ``seed``.  Stops when the summed minimum-norm sub-gradient
    falls below ``eps`` times its value at ``w = 0``.

    Returns
    -------
    w : ndarray (m + 1,) float64
    n_iter : int
    """
    n_active = columns.active.shape[0]
    w_size = n_active + 1
    n_rows = columns.row_sample.shape[0]
    w = np.zeros(w_size)
    b = np.ones(n_rows)  # b_r = 1 - y_r w^T s_r
    xj_sq = np.zeros(w_size)
    index = np.arange(w_size)
    rows = np.empty(n_rows, dtype=np.int64)
    values = np.empty(n_rows, dtype=np.float64)
    for j in range(w_size):
        count = _gather_column(j, columns, rows, values)
        xj_sq[j] = C * count  # every non-zero is +-1
    state = xorshift_state(seed)

    sigma = 0.01
    max_num_linesearch = 20
    active_size = w_size
    gmax_old = np.inf
    gnorm1_init = -1.0
    n_iter = 0
    while n_iter < max_iter:
        gmax_new = 0.0
        gnorm1_new = 0.0
        shuffle_prefix(index, active_size, state)
        s = 0
        while s < active_size:
            j = index[s]
            count = _gather_column(j, columns, rows, values)
            g_loss = 0.0
            h = 0.0
            for q in range(count):
                r = rows[q]
                if b[r] > 0.0:
                    v = values[q]
                    g_loss -= C * v * b[r]
                    h += C * v * v
            g_loss *= 2.0
            g = g_loss
            h = max(2.0 * h, 1e-12)
            gp = g + 1.0
            gn = g - 1.0
            violation = 0.0
            if w[j] == 0.0:
                if gp < 0.0:
                    violation = -gp
                elif gn > 0.0:
                    violation = gn
                elif gp > gmax_old / n_rows and gn < -gmax_old / n_rows:
                    active_size -= 1
                    tmp = index[s]
                    index[s] = index[active_size]
                    index[active_size] = tmp
                    continue
            elif w[j] > 0.0:
                violation = abs(gp)
            else:
                violation = abs(gn)
            gmax_new = max(gmax_new, violation)
            gnorm1_new += violation

            if gp < h * w[j]:
                d = -gp / h
            elif gn > h * w[j]:
                d = -gn / h
            else:
                d = -w[j]
            if abs(d) < 1.0e-12:
                s += 1
                continue

            delta = abs(w[j] + d) - abs(w[j]) + g * d
            d_old = 0.0
            loss_old = 0.0
            num_linesearch = 0
            while num_linesearch < max_num_linesearch:
                d_diff = d_old - d
                cond = abs(w[j] + d) - abs(w[j]) - sigma * delta
                appxcond = xj_sq[j] * d * d + g_loss * d + cond
                if appxcond <= 0.0:
                    for q in range(count):
                        b[rows[q]] += d_diff * values[q]
                    break
                loss_new = 0.0
                for q in range(count):
                    r = rows[q]
                    if num_linesearch == 0 and b[r] > 0.0:
                        loss_old += C * b[r] * b[r]
                    b_new = b[r] + d_diff * values[q]
                    b[r] = b_new
                    if b_new > 0.0:
                        loss_new += C * b_new * b_new
                cond = cond + loss_new - loss_old
                if cond <= 0.0:
                    break
                d_old = d
                d *= 0.5
                delta *= 0.5
                num_linesearch += 1
            w[j] += d
            if num_linesearch >= max_num_linesearch:
                # recompute b from scratch after a failed line search (as LIBLINEAR)
                for r in range(n_rows):
                    b[r] = 1.0
                for jj in range(w_size):
                    if w[jj] != 0.0:
                        cnt = _gather_column(jj, columns, rows, values)
                        for q in range(cnt):
                            b[rows[q]] -= w[jj] * values[q]
            s += 1

        if n_iter == 0:
            gnorm1_init = gnorm1_new
        n_iter += 1
        if gnorm1_new <= eps * gnorm1_init:
            if active_size == w_size:
                break
            active_size = w_size
            gmax_old = np.inf
            continue
        gmax_old = gmax_new
    return w, n_iter


# ------------------------------------------------------------------ Step 2
@njit(cache=True, nogil=True)
def signed_stump_matrix(bits, selected, scale):
    """``Psi[i, j] = scale[j] * (2 bits[selected[j], i] - 1)``, float32 (n, len(selected))."""
    n_rows = bits.shape[1]
    n_selected = selected.shape[0]
    out = np.empty((n_rows, n_selected), dtype=np.float32)
    for i in range(n_rows):
        for j in range(n_selected):
            v = np.float32(scale[j])
            out[i, j] = v if bits[selected[j], i] else -v
    return out


# -------------------------------------------------------------- prediction
@njit(cache=True, nogil=True)
def _accumulate_row(row, features, thresholds, weights, out_row):
    """``out_row += sum_{k: row[f_k] > t_k} weights[k]``: one comparison per stump.

    Not marked ``inline="always"``: numba inlining it at both call sites of :func:`decision`
    (dense and CSR rows) made the loop over dense rows markedly slower.
    """
    n_problems = weights.shape[1]
    for k in range(features.shape[0]):
        if row[features[k]] > thresholds[k]:
            for c in range(n_problems):
                out_row[c] += weights[k, c]


@njit(cache=True, nogil=True)
def decision(rows, n_features, features, thresholds, weights, base):
    """``f(x_i) = base + sum_{k: sigma_k(x_i) = 1} weights[k]`` for every row, (n, P) float64.

    A dense row is read in place; a CSR row is scattered into a dense buffer of
    ``n_features`` zeros first (and cleared after).
    """
    indptr, indices, data, dense = rows
    n_rows = indptr.shape[0] - 1
    out = np.empty((n_rows, base.shape[0]), dtype=np.float64)
    row = np.zeros(0 if dense else n_features, dtype=np.float64)
    for i in range(n_rows):
        lo = indptr[i]
        hi = indptr[i + 1]
        out[i, :] = base
        if dense:
            _accumulate_row(data[lo:hi], features, thresholds, weights, out[i])
            continue
        for p in range(lo, hi):
            row[indices[p]] = data[p]
        _accumulate_row(row, features, thresholds, weights, out[i])
        for p in range(lo, hi):
            row[indices[p]] = 0.0
    return out
