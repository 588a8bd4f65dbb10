"""Research kernels of the HIK nSVM studies (not used by the classifier).

* :func:`relaxed_sgd`: Algorithm 1 of Sharma & Jurie [1]_ run on the *successive
  relaxation* of §2.2 at a given level ``t`` per epoch, for
  ``studies/study_hik_nsvm_relaxation.py``.
* :func:`intersection_gram`: the exact histogram intersection kernel (Eq. 5), for the
  exact-kernel SVM baseline of ``benchmarks/bench_hik_nsvm.py``.

The relaxation replaces, for a feature value ``x`` (0 < x < 1) and a smoothing level
``t``, ``h(|w|) = min(x, |w|)`` by the piecewise-linear, concave ``h_t`` with
``tau = max(t, x)``::

    h_t(a) = x a / tau                     if a <= tau
    h_t(a) = x + s (a - tau),              s = x (tau - x) / (1 - x),   otherwise

and the term of Eq. 7b by ``sign(w) h_t(|w|)``.  ``t <= x`` (in particular ``t = 0``)
gives the intersection term exactly; ``t = 1`` gives ``x w``, the linear SVM's term (the
convex relaxation of Fig. 2).  The paper's Eq. 10 is only partly legible in our copy; this
is our reconstruction of a relaxation with the properties the text states (piecewise
linear, odd, exact at ``t = x``, linear at ``t = 1``, ``t`` replaced by ``max(t, x_d)``).
The study found no gain in accuracy or convergence from the relaxation start (see
docs/benchmarks/hik-nsvm.md), which is why the classifier runs ``t = 0`` only.

The SGD shares the lazy l1 shrink, the dense-row gathering and the argument tuples of the
production kernels (:mod:`classify_images.classifiers._hik_nsvm_kernels`).

References
----------
.. [1] G. Sharma and F. Jurie, "Learning discriminative spatial representation for image
   classification", BMVC 2011.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from classify_images.classifiers._hik_nsvm_kernels import (
    _catch_up,
    _flush,
    _gather,
    _hik_term,
    _step_buffers,
)

__all__ = ["intersection_gram", "relaxed_sgd", "relaxed_slope", "relaxed_term"]


@njit(cache=True, nogil=True)
def relaxed_term(wd, x, t):
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
def relaxed_slope(wd, x, t):
    """``d/dw_d`` of :func:`relaxed_term`; for ``t <= x`` the indicator ``[|w_d| < x]`` of Eq. 9."""
    a = abs(wd)
    if t <= x:
        return 1.0 if a < x else 0.0
    if a < t:
        return x / t
    return x * (t - x) / (1.0 - x)


@njit(cache=True, nogil=True)
def _relaxed_step(idx, val, nnz, y, c, W, b, last, f, step, cum, r, t, margin, fit_intercept):
    """One example of Algorithm 1 on the relaxation at level ``t`` (the production step with
    :func:`relaxed_term` and :func:`relaxed_slope` in place of Eq. 7b's term and Eq. 9)."""
    P = W.shape[1]
    for p in range(P):
        f[p] = b[p]
    for k in range(nnz):
        d = idx[k]
        _catch_up(W[d], last, d, cum)
        for p in range(P):
            f[p] += relaxed_term(W[d, p], np.float64(val[k]), t)
    for p in range(P):
        step[p] = 0.0
        if y[p] * f[p] < margin:
            step[p] = r * c[p] * y[p]
            if fit_intercept:
                b[p] += step[p]
    for k in range(nnz):
        d = idx[k]
        for p in range(P):
            W[d, p] += step[p] * relaxed_slope(W[d, p], val[k], t)


@njit(cache=True, nogil=True)
def relaxed_sgd(rows, problems, epochs, levels, W, b):
    """As :func:`~classify_images.classifiers._hik_nsvm_kernels.sgd` (same shuffles, same
    lazy shrink), epoch ``e`` on the relaxation at level ``levels[e]``; no objective curve."""
    indptr, indices, data, dense = rows
    Y, C, alpha, margin, fit_intercept = problems
    rates, seed = epochs
    n = indptr.shape[0] - 1
    idx, val, last, f, step = _step_buffers(W, dense)
    np.random.seed(seed)
    order = np.arange(n)
    for e in range(rates.shape[0]):
        np.random.shuffle(order)
        r = rates[e]
        t = levels[e]
        cum = 0.0
        for j in range(n):
            i = order[j]
            lo = indptr[i]
            hi = indptr[i + 1]
            if dense:
                nnz = _gather(data[lo:hi], idx, val)
                _relaxed_step(idx, val, nnz, Y[i], C[i], W, b, last, f, step, cum, r, t, margin, fit_intercept)
            else:
                _relaxed_step(
                    indices[lo:hi],
                    data[lo:hi],
                    hi - lo,
                    Y[i],
                    C[i],
                    W,
                    b,
                    last,
                    f,
                    step,
                    cum,
                    r,
                    t,
                    margin,
                    fit_intercept,
                )
            cum += r * alpha
        _flush(W, last, cum)


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
