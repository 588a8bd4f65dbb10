"""Numba kernels of the HIK nSVM (Sharma & Jurie): scoring and the SGD of Algorithm 1.

All kernels are ``@njit(cache=True, nogil=True)`` so that the one-vs-rest problems can run
in threads.  Feature vectors are non-negative.  A row is processed through its non-zero
entries only: a zero feature contributes ``min(0, |w_d|) = 0`` to Eq. 7b and receives no
update (``|w_d| < 0`` never holds).  Rows come as
:func:`~classify_images.classifiers.base.matrix_arrays` describes them, so one kernel
serves dense and CSR input: dense rows have their zeros skipped (the SGD first gathers
them into ``(index, value)`` buffers), and both formats give identical numbers since the
features are visited in the same increasing order.

The decision function, for one problem, is Eq. 7b plus an optional bias ``b``::

    f(w, x) = b + sum_d sign(w_d) min(x_d, |w_d|)

The successive relaxation of §2.2 replaces, for a feature value ``x`` (0 < x < 1) and a
smoothing level ``t``, ``h(|w|) = min(x, |w|)`` by the piecewise-linear, concave
``h_t`` with ``tau = max(t, x)``::

    h_t(a) = x a / tau                     if a <= tau
    h_t(a) = x + s (a - tau),              s = x (tau - x) / (1 - x),   otherwise

and the term by ``sign(w) h_t(|w|)``.  ``t <= x`` (in particular ``t = 0``) gives the
intersection term exactly; ``t = 1`` gives ``x w``, the linear SVM's term (the convex
relaxation of Fig. 2).  The paper's Eq. 10 is only partly legible in our copy; this is our
reconstruction of a relaxation with the properties the text states (piecewise linear, odd,
exact at ``t = x``, linear at ``t = 1``, ``t`` replaced by ``max(t, x_d)``).
:class:`~classify_images.classifiers.hik_nsvm.HIKnSVM` always runs ``t = 0`` (Algorithm 1);
the relaxed levels serve ``scripts/study_hik_nsvm_relaxation.py``, which measured no gain in
accuracy or convergence from the relaxation start (BENCHMARKS.md, HIK nSVM).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = [
    "sgd",
    "objective",
    "decision",
    "intersection_gram",
    "epoch_orders",
]


# --------------------------------------------------------------------------- scalar pieces
@njit(cache=True, nogil=True)
def _hik_term(wd, x):
    """``sign(w_d) min(x, |w_d|)`` (one term of Eq. 7b), branch-free."""
    return math.copysign(min(abs(wd), np.float64(x)), wd)


@njit(cache=True, nogil=True)
def _relaxed_term(wd, x, t):
    """``sign(w_d) h_t(|w_d|)``: the term of the relaxation at level ``t`` (exact if t <= x)."""
    if t <= x:
        return _hik_term(wd, x)
    a = abs(wd)
    if a <= t:
        v = x * a / t
    else:
        v = x + x * (t - x) / (1.0 - x) * (a - t)
    return v if wd >= 0.0 else -v


@njit(cache=True, nogil=True)
def _relaxed_slope(wd, x, t):
    """``d/dw_d`` of :func:`_relaxed_term`; for ``t <= x`` the indicator ``[|w_d| < x]`` of Eq. 9."""
    a = abs(wd)
    if t <= x:
        return 1.0 if a < x else 0.0
    if a < t:
        return x / t
    return x * (t - x) / (1.0 - x)


@njit(cache=True, nogil=True)
def _shrink(wd, amount):
    """``sign(w_d) max(0, |w_d| - amount)`` (Algorithm 1, line 6)."""
    a = abs(wd) - amount
    if a <= 0.0:
        return 0.0
    return a if wd > 0.0 else -a


@njit(cache=True, nogil=True)
def _gather(row, idx, val):
    """Non-zero entries of a dense row into ``idx``/``val``; returns their number."""
    nnz = 0
    for d in range(row.shape[0]):
        x = row[d]
        if x != 0.0:
            idx[nnz] = d
            val[nnz] = x
            nnz += 1
    return nnz


# --------------------------------------------------------------------------- one SGD step
@njit(cache=True, nogil=True)
def _sgd_step(idx, val, nnz, y, c, W, last, cum, b, r, margin, t, fit_intercept, f, step):
    """One example of Algorithm 1 (lines 5-6) for the P problems of ``W`` (D, P) at once.

    Problem ``p`` sees the example with its own label ``y[p]`` and hinge weight ``c[p]``;
    its arithmetic does not depend on the other problems, so a group gives the same
    weights as its problems trained one by one.  The P weights of a feature are
    contiguous: one visit of the example's non-zeros serves all problems, and the inner
    loops over ``p`` vectorise.  ``t`` is the relaxation level (0: Eq. 7b exactly).

    The l1 shrink ``w_d <- sign(w_d) max(0, |w_d| - r lambda)`` moves ``w_d`` towards 0
    and stops there, so k successive shrinks equal one shrink by their total.  ``cum``
    is the total shrink of the epoch so far and ``last[d]`` the part of it already
    applied to feature ``d`` (of every problem): the features of the example are brought
    up to date before they are read, the others when the epoch ends.  The result is the
    same as the eager update.  ``b`` (P,) is updated in place; ``f``, ``step`` are (P,)
    work arrays.
    """
    P = W.shape[1]
    for p in range(P):
        f[p] = b[p]
    for k in range(nnz):
        d = idx[k]
        pending = cum - last[d]
        if pending > 0.0:
            for p in range(P):
                W[d, p] = _shrink(W[d, p], pending)
            last[d] = cum
        x = np.float64(val[k])
        if t <= 0.0:
            for p in range(P):
                f[p] += _hik_term(W[d, p], x)
        else:
            for p in range(P):
                f[p] += _relaxed_term(W[d, p], x, t)
    any_step = False
    for p in range(P):
        step[p] = 0.0
        if y[p] * f[p] < margin:
            step[p] = r * c[p] * y[p]
            any_step = True
            if fit_intercept:
                b[p] += step[p]
    if not any_step:
        return
    for k in range(nnz):
        d = idx[k]
        x = val[k]
        if t <= 0.0:  # Algorithm 1, line 5 (fast path of the t = 0 slope below)
            for p in range(P):
                if step[p] != 0.0 and abs(W[d, p]) < x:
                    W[d, p] += step[p]
        else:
            for p in range(P):
                W[d, p] += step[p] * _relaxed_slope(W[d, p], x, t)


@njit(cache=True, nogil=True)
def _flush(W, last, cum):
    """The shrinks of the epoch not yet applied (see :func:`_sgd_step`)."""
    for d in range(W.shape[0]):
        pending = cum - last[d]
        if pending > 0.0:
            for p in range(W.shape[1]):
                W[d, p] = _shrink(W[d, p], pending)
        last[d] = 0.0


# --------------------------------------------------------------------------- SGD driver
@njit(cache=True, nogil=True)
def epoch_orders(n, n_epochs, seed):
    """The example orders :func:`sgd` visits for ``seed``: (n_epochs, n) int64.

    Same calls to numba's (thread-local) generator as :func:`sgd`: seeded once, then one
    in-place shuffle of the previous order per epoch.
    """
    np.random.seed(seed)
    order = np.arange(n)
    out = np.empty((n_epochs, n), dtype=np.int64)
    for e in range(n_epochs):
        np.random.shuffle(order)
        out[e] = order
    return out


@njit(cache=True, nogil=True)
def sgd(indptr, indices, data, dense, Y, C, rates, ts, seed, W, b, alpha, margin, fit_intercept, curve):
    """The SGD epochs of Algorithm 1 for P problems sharing the examples' order, in place.

    Parameters
    ----------
    indptr, indices, data, dense : the rows, as
        :func:`~classify_images.classifiers.base.matrix_arrays` describes them (dense rows
        are gathered into their non-zeros first: both formats give the same numbers).
    Y : (n, P) float64 labels in {-1, +1}, one column per problem.
    C : (n, P) float64 per-example weights ``c_i`` of the hinge loss.
    rates, ts : (E,) float64 learning rate ``r`` and relaxation level ``t`` of each epoch
        (``t = 0`` is Algorithm 1 on the exact Eq. 7b).
    seed : int seeding the per-epoch shuffles (numba's thread-local generator).
    W : (D, P) float64 initial weights, updated in place.
    b : (P,) float64 initial biases, updated in place.
    alpha, margin : lambda and m of Eq. 7a.
    fit_intercept : bool.
    curve : (E, P) float64 receiving the exact objective (Eq. 7a) after each epoch, or an
        empty (0, P) array to skip that (it costs one scoring pass per epoch).
    """
    n = indptr.shape[0] - 1
    D, P = W.shape
    idx = np.empty(D if dense else 0, dtype=np.int64)
    val = np.empty(D if dense else 0, dtype=np.float64)
    last = np.zeros(D, dtype=np.float64)
    f = np.empty(P)
    step = np.empty(P)
    np.random.seed(seed)
    order = np.arange(n)
    for e in range(rates.shape[0]):
        np.random.shuffle(order)
        r = rates[e]
        t = ts[e]
        cum = 0.0
        for j in range(n):
            i = order[j]
            lo = indptr[i]
            hi = indptr[i + 1]
            if dense:
                nnz = _gather(data[lo:hi], idx, val)
                _sgd_step(idx, val, nnz, Y[i], C[i], W, last, cum, b, r, margin, t, fit_intercept, f, step)
            else:
                _sgd_step(indices[lo:hi], data[lo:hi], hi - lo, Y[i], C[i], W, last, cum, b, r, margin, t,
                          fit_intercept, f, step)
            cum += r * alpha
        _flush(W, last, cum)
        for p in range(P if curve.shape[0] > 0 else 0):
            y, c, w = np.ascontiguousarray(Y[:, p]), np.ascontiguousarray(C[:, p]), np.ascontiguousarray(W[:, p])
            curve[e, p] = objective(indptr, indices, data, dense, y, c, w, b[p], alpha, margin)


# --------------------------------------------------------------------------- objective
@njit(cache=True, nogil=True, inline="always")
def _column(k, lo, dense, indices):
    """Feature index of entry ``k`` of the row starting at ``lo`` (see ``matrix_arrays``)."""
    return k - lo if dense else indices[k]


@njit(cache=True, nogil=True)
def objective(indptr, indices, data, dense, y, sw, w, b, alpha, margin):
    """Eq. 7a: ``alpha ||w||_1 + (1/n) sum_i c_i max(0, m - y_i f(w, x_i))``.

    Rows as :func:`~classify_images.classifiers.base.matrix_arrays` describes them; a zero
    feature adds ``min(0, |w_d|) = 0`` to ``f`` and is skipped.
    """
    n = indptr.shape[0] - 1
    loss = 0.0
    for i in range(n):
        lo = indptr[i]
        f = b
        for k in range(lo, indptr[i + 1]):
            if data[k] != 0.0:
                f += _hik_term(w[_column(k, lo, dense, indices)], data[k])
        z = margin - y[i] * f
        if z > 0.0:
            loss += sw[i] * z
    reg = 0.0
    for d in range(w.shape[0]):
        reg += abs(w[d])
    return alpha * reg + loss / n


# --------------------------------------------------------------------------- prediction
@njit(cache=True, nogil=True)
def decision(indptr, indices, data, dense, Wt, intercept, out):
    """Eq. 7b for every row and problem: ``out[i, p] = b_p + sum_d sign(W_dp) min(X_id, |W_dp|)``.

    Rows as :func:`~classify_images.classifiers.base.matrix_arrays` describes them.  ``Wt``
    is the (D, P) transposed weight matrix, so that the P weights of a feature are
    contiguous.  Zero features are skipped (their term is 0): O(nnz P) per CSR row,
    O(D + nnz P) per dense row.
    """
    acc = np.empty(Wt.shape[1], dtype=np.float64)
    for i in range(indptr.shape[0] - 1):
        acc[:] = intercept
        lo = indptr[i]
        for k in range(lo, indptr[i + 1]):
            x = data[k]
            if x != 0.0:
                d = _column(k, lo, dense, indices)
                for p in range(acc.shape[0]):
                    acc[p] += _hik_term(Wt[d, p], x)
        out[i, :] = acc


# --------------------------------------------------------------------------- exact kernel
@njit(cache=True, nogil=True)
def intersection_gram(indptr, indices, data, B, out):
    """Histogram intersection kernel ``out[i, j] = sum_d min(A_id, B_jd)`` (Eq. 5).

    ``A`` is given in CSR form (non-negative) and ``B`` dense (m, D): O(nnz(A_i)) per entry.
    """
    for i in range(indptr.shape[0] - 1):
        lo = indptr[i]
        hi = indptr[i + 1]
        for j in range(B.shape[0]):
            s = 0.0
            for k in range(lo, hi):
                a = data[k]
                v = B[j, indices[k]]
                s += a if a < v else v
            out[i, j] = s
