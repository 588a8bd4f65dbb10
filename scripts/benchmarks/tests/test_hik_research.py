"""Tests of the HIK nSVM research kernels (benchmarks/_hik_research.py): relaxation, exact kernel."""

from __future__ import annotations

import _hik_research as R
import numpy as np
import scipy.sparse as sp
from numpy.testing import assert_allclose

from classify_images.classifiers import _hik_nsvm_kernels as K
from classify_images.classifiers._rows import matrix_arrays
from tests._hik_nsvm_reference import epoch_orders
from tests.test_hik_nsvm import histograms


def test_intersection_gram_matches_numpy():
    A, _ = histograms(3, n=7, d=20)
    B, _ = histograms(4, n=5, d=20)
    out = np.empty((7, 5))
    Acsr = sp.csr_matrix(A)
    R.intersection_gram(Acsr.indptr, Acsr.indices, Acsr.data, B, out)
    assert_allclose(out, np.minimum(A[:, None, :], B[None]).sum(-1), rtol=1e-6)


def test_relaxed_term_limits():
    x = 0.2
    for w in np.linspace(-1.0, 1.0, 41):
        assert R.relaxed_term(w, x, 0.0) == K._hik_term(w, x)  # t = 0: Eq. 7b
        assert R.relaxed_term(w, x, 0.1) == K._hik_term(w, x)  # t <= x: exact
        assert np.isclose(R.relaxed_term(w, x, 1.0), x * w)  # t = 1: linear
        assert np.isclose(R.relaxed_term(w, x, 0.5), -R.relaxed_term(-w, x, 0.5))  # odd
    # continuous at |w| = t, and the slope is the derivative of the term
    assert np.isclose(R.relaxed_term(0.5 - 1e-12, x, 0.5), R.relaxed_term(0.5 + 1e-12, x, 0.5))
    for w, t in [(0.3, 0.5), (0.7, 0.5), (-0.7, 0.5)]:
        numeric = (R.relaxed_term(w + 1e-7, x, t) - R.relaxed_term(w - 1e-7, x, t)) / 2e-7
        assert np.isclose(R.relaxed_slope(w, x, t), numeric)


def test_relaxation_level_one_is_linear_sgd():
    """Kernel level t = 1 (sec. 2.2's convex end) runs l1-regularised hinge SGD on f = w.x."""
    X, y01 = histograms(11, n=30, d=15)
    y = np.where(y01 == 1, 1.0, -1.0)
    A = sp.csr_matrix(X)
    rates, ts = np.full(4, 0.5), np.ones(4)
    W = np.zeros((15, 1))
    problems = K.HingeProblems(y[:, None].copy(), np.ones((30, 1)), 1e-2, 0.02, False)
    R.relaxed_sgd(matrix_arrays(A), problems, K.Epochs(rates, 5), ts, W, np.zeros(1))
    w = W[:, 0]
    ref = np.zeros(15)
    for order, r in zip(epoch_orders(30, 4, 5), rates):
        for i in order:
            if y[i] * (X[i] @ ref) < 0.02:
                ref = ref + r * y[i] * X[i]
            ref = np.sign(ref) * np.maximum(0.0, np.abs(ref) - r * 1e-2)
    assert np.abs(ref).max() < 1.0 and np.count_nonzero(ref) > 0  # stays in the linear part
    assert_allclose(w, ref, rtol=1e-6, atol=1e-12)
