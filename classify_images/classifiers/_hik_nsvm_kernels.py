"""Numba kernels of the HIK nSVM (Sharma & Jurie [1]_): scoring and the SGD of Algorithm 1.

All kernels are ``@njit(cache=True, nogil=True)`` so that the one-vs-rest problems can run
in threads.  Feature vectors are non-negative.  A row is processed through its non-zero
entries only: a zero feature contributes ``min(0, |w_d|) = 0`` to Eq. 7b and receives no
update (``|w_d| < 0`` never holds).  Rows come as a
:class:`~classify_images.classifiers._rows.RowArrays` tuple, so one kernel serves dense
and CSR input: dense rows have their zeros skipped (the SGD first gathers them into
``(index, value)`` buffers), and both formats give identical numbers since the features
are visited in the same increasing order.

The decision function, for one problem, is Eq. 7b plus an optional bias ``b``::

    f(w, x) = b + sum_d sign(w_d) min(x_d, |w_d|)

References
----------
.. [1] G. Sharma and F. Jurie, "Learning discriminative spatial representation for image
   classification", BMVC 2011.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from ._rows import column

__all__ = ["Epochs", "HingeProblems", "decision", "flush", "objective", "sgd", "sgd_pass"]


class HingeProblems(NamedTuple):
    """The P binary problems of Eq. 7a trained together by :func:`sgd`."""

    Y: np.ndarray  #: (n, P) float64 labels in {-1, +1}, one column per problem
    C: np.ndarray  #: (n, P) float64 weight ``c_i`` of each example's hinge loss
    alpha: float  #: lambda of Eq. 7a, weight of ``||w||_1``
    margin: float  #: m of Eq. 7a
    fit_intercept: bool  #: learn a bias ``b`` (not in the paper)


class Epochs(NamedTuple):
    """The passes of Algorithm 1."""

    rates: np.ndarray  #: (E,) float64 learning rate ``r`` of each epoch
    seed: int  #: seeds the per-epoch shuffles (numba's thread-local generator)


# --------------------------------------------------------------------------- scalar pieces
@njit(cache=True, nogil=True)
def _hik_term(wd, x):
    """``sign(w_d) min(x, |w_d|)`` (one term of Eq. 7b), branch-free."""
    return math.copysign(min(abs(wd), np.float64(x)), wd)


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


@njit(cache=True, nogil=True, inline="always")
def _catch_up(w, last, d, cum):
    """Apply to feature ``d``, whose P weights are ``w`` (row ``d`` of ``W``), the shrinks
    of the epoch it has not received yet (see :func:`_sgd_step`).

    It takes the row rather than ``W``: numba inlines it into the loop over the example's
    features, where indexing the 2-d ``W`` instead made that loop several times slower.
    """
    pending = cum - last[d]
    if pending > 0.0:
        for p in range(w.shape[0]):
            w[p] = _shrink(w[p], pending)
        last[d] = cum


# --------------------------------------------------------------------------- one SGD step
@njit(cache=True, nogil=True)
def _sgd_step(idx, val, nnz, y, c, W, b, last, f, step, cum, r, margin, fit_intercept):
    """One example of Algorithm 1 (lines 5-6) for the P problems of ``W`` (D, P) at once.

    Problem ``p`` sees the example with its own label ``y[p]`` and hinge weight ``c[p]``;
    its arithmetic does not depend on the other problems, so a group gives the same
    weights as its problems trained one by one.  The P weights of a feature are
    contiguous: one visit of the example's non-zeros serves all problems, and the inner
    loops over ``p`` vectorise.

    The l1 shrink ``w_d <- sign(w_d) max(0, |w_d| - r lambda)`` moves ``w_d`` towards 0
    and stops there, so k successive shrinks equal one shrink by their total.  ``cum``
    is the total shrink of the epoch so far and ``last[d]`` the part of it already
    applied to feature ``d`` (of every problem): the features of the example are brought
    up to date before they are read, the others when the epoch ends.  The result is the
    same as the eager update.  ``b`` (P,) is updated in place; ``f``, ``step`` are (P,)
    work arrays (the example's scores and updates).  :func:`sgd` unpacks its named tuples
    once and passes their fields.
    """
    P = W.shape[1]
    for p in range(P):
        f[p] = b[p]
    for k in range(nnz):
        d = idx[k]
        _catch_up(W[d], last, d, cum)
        x = np.float64(val[k])
        for p in range(P):
            f[p] += _hik_term(W[d, p], x)
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
    for k in range(nnz):  # Algorithm 1, line 5
        d = idx[k]
        x = val[k]
        for p in range(P):
            if step[p] != 0.0 and abs(W[d, p]) < x:
                W[d, p] += step[p]


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
def _step_buffers(W, dense):
    """The work arrays of :func:`_sgd_step` for the (D, P) weights ``W``: ``idx``, ``val``
    (D,) for gathering a dense row (empty for CSR rows), ``last`` (D,) zeros, ``f``, ``step`` (P,)."""
    D, P = W.shape
    size = D if dense else 0
    return (
        np.empty(size, dtype=np.int64),
        np.empty(size, dtype=np.float64),
        np.zeros(D, dtype=np.float64),
        np.empty(P),
        np.empty(P),
    )


@njit(cache=True, nogil=True)
def sgd_pass(rows, order, problems, r, W, b, last, cum):
    """Algorithm 1 (lines 4-6) over the examples ``order`` at step ``r``, for P problems, in place.

    The pass continues an epoch: ``cum`` is the total l1 shrink of the epoch before it and
    ``last`` (D,) the part of it already applied to each feature (the lazy shrink of
    :func:`_sgd_step`); the new total is returned.  An epoch is one pass, or several
    consecutive passes over blocks of examples passing ``last`` and the returned ``cum`` on
    (the same arithmetic as one pass over their concatenation), ended by :func:`_flush`.

    Parameters
    ----------
    rows : RowArrays
        The examples (dense rows are gathered into their non-zeros first).
    order : (m,) int64
        The examples to visit, in order.
    problems : HingeProblems
    r : float
        The learning rate.
    W : (D, P) float64, b : (P,) float64
        Weights and biases, updated in place.
    last : (D,) float64
        Shrink applied to each feature so far in the epoch, updated in place.
    cum : float
        Total shrink of the epoch before this pass.
    """
    indptr, indices, data, dense = rows
    Y, C, alpha, margin, fit_intercept = problems
    idx, val, _, f, step = _step_buffers(W, dense)  # ``last`` is the caller's
    for j in range(order.shape[0]):
        i = order[j]
        lo = indptr[i]
        hi = indptr[i + 1]
        if dense:
            nnz = _gather(data[lo:hi], idx, val)
            _sgd_step(idx, val, nnz, Y[i], C[i], W, b, last, f, step, cum, r, margin, fit_intercept)
        else:
            _sgd_step(
                indices[lo:hi], data[lo:hi], hi - lo, Y[i], C[i], W, b, last, f, step, cum, r, margin, fit_intercept
            )
        cum += r * alpha
    return cum


@njit(cache=True, nogil=True)
def flush(W, last, cum):
    """End an epoch: apply to ``W`` the shrinks not yet applied and reset ``last`` (see :func:`_sgd_step`)."""
    _flush(W, last, cum)


@njit(cache=True, nogil=True)
def sgd(rows, problems, epochs, W, b, curve, shuffle=True):
    """The SGD epochs of Algorithm 1 for P problems sharing the examples' order, in place.

    Parameters
    ----------
    rows : RowArrays
        The training rows (dense rows are gathered into their non-zeros first: both
        formats give the same numbers).
    problems : HingeProblems
        Labels, hinge weights, ``alpha``, ``margin`` and ``fit_intercept``.
    epochs : Epochs
        Learning rate of each epoch and the seed of the shuffles: numba's generator is seeded
        once, then the previous order is shuffled in place every epoch.
    W : (D, P) float64 initial weights, updated in place.
    b : (P,) float64 initial biases, updated in place.
    curve : (E, P) float64 receiving the exact objective (Eq. 7a) after each epoch, or an
        empty (0, P) array to skip that (it costs one scoring pass per epoch).
    shuffle : bool, default True
        False: every epoch visits the rows in their order.
    """
    Y, C, alpha, margin, fit_intercept = problems
    rates, seed = epochs
    n = rows.indptr.shape[0] - 1
    P = W.shape[1]
    last = np.zeros(W.shape[0], dtype=np.float64)
    np.random.seed(seed)
    order = np.arange(n)
    for e in range(rates.shape[0]):
        if shuffle:
            np.random.shuffle(order)
        cum = sgd_pass(rows, order, problems, rates[e], W, b, last, 0.0)
        _flush(W, last, cum)
        for p in range(P if curve.shape[0] > 0 else 0):
            y, c, w = np.ascontiguousarray(Y[:, p]), np.ascontiguousarray(C[:, p]), np.ascontiguousarray(W[:, p])
            curve[e, p] = objective(rows, y, c, w, b[p], alpha, margin)


# --------------------------------------------------------------------------- objective
@njit(cache=True, nogil=True)
def objective(rows, y, sw, w, b, alpha, margin):
    """Eq. 7a: ``alpha ||w||_1 + (1/n) sum_i c_i max(0, m - y_i f(w, x_i))``.

    A zero feature adds ``min(0, |w_d|) = 0`` to ``f`` and is skipped.
    """
    indptr, indices, data, dense = rows
    n = indptr.shape[0] - 1
    loss = 0.0
    for i in range(n):
        lo = indptr[i]
        f = b
        for k in range(lo, indptr[i + 1]):
            if data[k] != 0.0:
                f += _hik_term(w[column(k, lo, dense, indices)], data[k])
        z = margin - y[i] * f
        if z > 0.0:
            loss += sw[i] * z
    reg = 0.0
    for d in range(w.shape[0]):
        reg += abs(w[d])
    return alpha * reg + loss / n


# --------------------------------------------------------------------------- prediction
@njit(cache=True, nogil=True)
def decision(rows, Wt, intercept, out):
    """Eq. 7b for every row and problem: ``out[i, p] = b_p + sum_d sign(W_dp) min(X_id, |W_dp|)``.

    ``Wt`` is the (D, P) transposed weight matrix, so that the P weights of a feature are
    contiguous.  Zero features are skipped (their term is 0): O(nnz P) per CSR row,
    O(D + nnz P) per dense row.
    """
    indptr, indices, data, dense = rows
    acc = np.empty(Wt.shape[1], dtype=np.float64)
    for i in range(indptr.shape[0] - 1):
        acc[:] = intercept
        lo = indptr[i]
        for k in range(lo, indptr[i + 1]):
            x = data[k]
            if x != 0.0:
                d = column(k, lo, dense, indices)
                for p in range(acc.shape[0]):
                    acc[p] += _hik_term(Wt[d, p], x)
        out[i, :] = acc
