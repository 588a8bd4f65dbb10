"""Tests of PmSVM / PmSVM-LUT (classify_images.classifiers.pmsvm).

The reference for the solver is the exact-kernel dual coordinate descent of
``tests/_pmsvm_reference.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.classifiers import make_classifier
from classify_images.classifiers.pmsvm import (
    ADHOC_NODES,
    PmSVM,
    interpolation_nodes,
    lut_bin_values,
    power_mean_kernel,
)
from classify_images.pipeline.training.model_file import load_model, save_model

from ._pmsvm_reference import exact_power_mean_svm, scale_features


def histograms(n: int, d: int = 150, n_classes: int = 3, words: int = 40, mix: float = 0.9, seed: int = 1):
    """L1-normalised bag-of-words histograms (about 20 % non-zero), overlapping classes."""
    rng = np.random.default_rng(seed)
    shared = rng.gamma(0.3, size=d)
    protos = [(1 - mix) * rng.gamma(0.3, size=d) + mix * shared for _ in range(n_classes)]
    protos = [q / q.sum() for q in protos]
    y = rng.integers(0, n_classes, n)
    X = np.array([rng.multinomial(words, protos[c]) for c in y], dtype=np.float64)
    X /= X.sum(axis=1, keepdims=True)
    return X.astype(np.float32), y


@pytest.fixture(scope="module")
def split():
    X, y = histograms(1500)
    return X[:300], y[:300], X[300:], y[300:]


# --------------------------------------------------------------- (a) kernel
def test_kernel_closed_forms():
    rng = np.random.default_rng(0)
    X, Y = rng.uniform(0.01, 1.0, (5, 7)), rng.uniform(0.01, 1.0, (4, 7))
    x, y = X[:, None, :], Y[None, :, :]
    chi2 = (2 * x * y / (x + y)).sum(-1)
    np.testing.assert_allclose(power_mean_kernel(X, Y, p=-1), chi2, rtol=1e-12)
    hik = np.minimum(x, y).sum(-1)
    np.testing.assert_allclose(power_mean_kernel(X, Y, p=-np.inf), hik, rtol=1e-12)
    # p -> -inf: M_p(x, y) = min * ((1 + r^|p|)/2)^(1/p) <= min * 2^(1/|p|)
    np.testing.assert_allclose(power_mean_kernel(X, Y, p=-1000), hik, rtol=1e-3)
    assert np.all(power_mean_kernel(X, Y, p=-8) >= hik)
    hellinger = np.sqrt(x * y).sum(-1)
    np.testing.assert_allclose(power_mean_kernel(X, Y, p=-1e-9), hellinger, rtol=1e-7)
    np.testing.assert_allclose(power_mean_kernel(X, Y, p=0), hellinger, rtol=1e-12)
    # the general formula at p = -2 against the textbook expression
    pm2 = ((x**-2 + y**-2) / 2) ** (-1 / 2)
    np.testing.assert_allclose(power_mean_kernel(X, Y, p=-2), pm2.sum(-1), rtol=1e-12)


def test_kernel_zeros_are_eps_and_sparse_matches_dense():
    X, _ = histograms(20, d=40, seed=3)
    X = X.astype(np.float64)
    eps = 1e-3
    for p in (-1.0, -8.0):
        K = power_mean_kernel(X, X[:7], p=p, eps=eps)
        np.testing.assert_allclose(
            K, power_mean_kernel(np.maximum(X, eps), np.maximum(X[:7], eps), p=p, eps=0.0), rtol=1e-10
        )
        np.testing.assert_allclose(
            power_mean_kernel(sp.csr_matrix(X), sp.csr_matrix(X[:7]), p=p, eps=eps), K, rtol=1e-10
        )
    # eps = 0: M_p(x, 0) = 0, the textbook chi-square kernel
    x, y = X[:, None, :], X[None, :7, :]
    chi2 = np.where(x * y > 0, 2 * x * y / np.maximum(x + y, 1e-300), 0.0).sum(-1)
    np.testing.assert_allclose(
        power_mean_kernel(sp.csr_matrix(X), sp.csr_matrix(X[:7]), p=-1, eps=0.0), chi2, rtol=1e-12
    )


def test_nodes_and_polynomial_approximation_of_g():
    np.testing.assert_array_equal(interpolation_nodes("adhoc", 2), ADHOC_NODES)
    with pytest.raises(ValueError, match="m=2 only"):
        PmSVM(m=3, nodes="adhoc").fit(*histograms(20, d=10))
    cheb = interpolation_nodes("chebyshev", 2)
    np.testing.assert_allclose(cheb, [0.0114, 0.1791, 0.8063], atol=1e-4)
    # CVPR Sec. 4.2 / Fig. 1: at p = -1 a degree-2 polynomial in ln(x + 0.05) follows
    # g_j within ~2 % of its range; LUT Tables 1-2: Chebyshev nodes beat the ad hoc ones.
    X, y = histograms(300, d=20, seed=5)
    A = scale_features(X, X)
    w = np.random.default_rng(0).uniform(0, 1, 300) * np.where(y == 0, 1.0, -1.0)
    grid = np.linspace(0.01, 1.0, 200)
    for p in (-1.0, -8.0):
        errors = {}
        for nodes in ("chebyshev", "adhoc"):
            approx = PmSVM(p=p, nodes=nodes).approximation()
            errors[nodes] = []
            for j in range(5):
                g = lambda v: power_mean_kernel(np.atleast_1d(v)[:, None], A[:, j : j + 1], p=p) @ w  # noqa: E731
                coef = approx.interpolate(g(approx.node_values))
                exact = g(grid)
                errors[nodes].append(np.abs(approx.polynomial(coef, grid) - exact).max() / np.abs(exact).max())
        assert np.mean(errors["chebyshev"]) < np.mean(errors["adhoc"]), (p, errors)
        if p == -1.0:
            assert max(errors["chebyshev"]) < 0.03, errors


# ------------------------------------------------- (b) exact reference
@pytest.fixture(scope="module")
def exact_scores(split):
    """The exact-kernel SVM's decision values on ``split``, computed once per ``(p, loss)``."""
    X_train, y_train, X_test, _ = split
    computed = {}

    def scores(p, loss):
        if (p, loss) not in computed:
            computed[p, loss] = exact_power_mean_svm(X_train, y_train, X_test, p=p, C=0.01, loss=loss)
        return computed[p, loss]

    return scores


@pytest.mark.parametrize(
    "p, loss, m", [(-1.0, "l2", 2), (-8.0, "l2", 2), (-np.inf, "l2", 2), (-1.0, "l1", 2), (-8.0, "l2", 3)]
)
def test_matches_exact_kernel_svm(split, exact_scores, p, loss, m):
    """``m = 2`` runs the solver's unrolled loops, ``m = 3`` its general ones."""
    X_train, y_train, X_test, y_test = split
    reference = exact_scores(p, loss)
    clf = PmSVM(p=p, C=0.01, loss=loss, m=m, random_state=0).fit(X_train, y_train)
    scores = clf.decision_function(X_test)
    assert np.corrcoef(scores.ravel(), reference.ravel())[0, 1] > 0.99
    acc = np.mean(clf.predict(X_test) == y_test)
    acc_ref = np.mean(clf.classes_[reference.argmax(axis=1)] == y_test)
    assert acc_ref > 0.6  # a problem where accuracy can differ
    assert abs(acc - acc_ref) <= 0.01
    assert np.all((clf.n_iter_ >= 2) & (clf.n_iter_ <= 15))


# ------------------------------------------------------------- (c) LUT
def test_lut_matches_non_lut(split):
    """LUT paper Sec. 5.1: table errors ~0.001 (b = 1000); Table 8: same accuracy as PmSVM.

    With bin centres the mean table errors are below 0.001; the largest T1 error
    is ~0.01 (near x = 0, where d ln(x + 0.05)/dx = 20), not the paper's 0.001.
    """
    X_train, y_train, X_test, _ = split
    plain = PmSVM(p=-8, random_state=0).fit(X_train, y_train)
    lut = PmSVM(p=-8, lut_bins=1000, random_state=0).fit(X_train, y_train)
    approx = lut.approximation()
    x = np.random.default_rng(0).uniform(0, 1, 20000)
    table = lut.lut_table(approx)[np.minimum((x * 1000).astype(int), 1000)]
    exact = approx.delta_rows(x)
    e1 = np.abs(table[:, 0] - exact[:, 0])  # T1 - ln(x + 0.05)
    e2 = np.abs(table[:, 2:] - exact[:, 2:]).sum(axis=1)  # ||T2 - X^-1 M_p(c, x)||_1
    assert e1.mean() < 1e-3 and e2.mean() < 1e-3 and e2.max() < 2e-3 and e1.max() < 0.011
    a, b = plain.decision_function(X_test), lut.decision_function(X_test)
    assert np.abs(a - b).max() <= 1e-3 * np.abs(a).max()
    assert np.mean(a.argmax(axis=1) == b.argmax(axis=1)) >= 0.99
    # memory: the LUT model keeps no per-value pre-computation; tables are (b+1, 2m+1)
    assert lut.lut_table(approx).shape == (1001, 5)
    np.testing.assert_array_equal(lut_bin_values(4), [0.125, 0.375, 0.625, 0.875, 1.0])


# ----------------------------------------------- (d) estimator contract
@pytest.mark.parametrize("lut_bins", [None, 1000])
def test_dense_and_csr_agree(split, lut_bins):
    X_train, y_train, X_test, _ = split
    dense = PmSVM(p=-8, lut_bins=lut_bins, random_state=3).fit(X_train, y_train)
    csr = PmSVM(p=-8, lut_bins=lut_bins, random_state=3).fit(sp.csr_matrix(X_train), y_train)
    np.testing.assert_allclose(dense.coef_, csr.coef_, rtol=0, atol=1e-12)
    d1 = dense.decision_function(X_test)
    np.testing.assert_allclose(d1, dense.decision_function(sp.csr_matrix(X_test)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d1, csr.decision_function(X_test.astype(np.float64)), rtol=1e-9, atol=1e-9)
    # explicit zeros in CSR are zeros; test values beyond the training maxima are clipped
    Z = sp.csr_matrix(X_test)
    Z.data[::7] = 0.0
    np.testing.assert_allclose(dense.decision_function(Z), dense.decision_function(Z.toarray()), rtol=1e-12, atol=1e-12)
    big = X_test * 3
    np.testing.assert_allclose(
        dense.decision_function(big), dense.decision_function(np.minimum(big, dense.feature_max_)), atol=1e-12
    )


def test_determinism_threads_and_binary(split):
    X_train, y_train, X_test, _ = split
    a = PmSVM(random_state=7).fit(X_train, y_train)
    b = PmSVM(random_state=7, n_jobs=2).fit(X_train, y_train)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.decision_function(X_test), b.decision_function(X_test))
    c = PmSVM(random_state=8).fit(X_train, y_train)
    assert not np.array_equal(a.coef_, c.coef_)  # the permutation is seeded
    np.testing.assert_allclose(a.decision_function(X_test), c.decision_function(X_test), atol=0.05)
    binary = PmSVM(random_state=0).fit(X_train, y_train == 0)
    assert binary.coef_.shape == (X_train.shape[1], 3, 1) and binary.decision_function(X_test).shape == (1200,)


def test_save_load_round_trip(tmp_path, split):
    X_train, y_train, X_test, _ = split
    clf = make_classifier("pmsvm", {"p": -8, "lut_bins": 1000, "random_state": 0}).fit(X_train, y_train)
    path = save_model(tmp_path / "pmsvm", clf, feature_set={"n_features": X_train.shape[1]})
    loaded, meta = load_model(path)
    assert meta["params"]["lut_bins"] == 1000 and loaded.get_params() == clf.get_params()
    np.testing.assert_array_equal(loaded.decision_function(X_test), clf.decision_function(X_test))
    np.testing.assert_array_equal(loaded.n_iter_, clf.n_iter_)


@pytest.mark.parametrize("p", [-1.0, -8.0])
def test_auto_C_is_4_over_the_mean_kernel_diagonal(p):
    """``C="auto"`` = 4 / mean_i M_p(x~_i, x~_i) on the scaled training rows (the exact kernel's
    diagonal: ``M_p(x, x) = x`` at every node of the approximation); an explicit C is kept."""
    X, y = histograms(200, d=60)
    diagonal = np.diag(power_mean_kernel(scale_features(X, X), p=p))
    assert PmSVM(p=p, random_state=0).fit(X, y).C_ == pytest.approx(4.0 / diagonal.mean(), rel=1e-9)
    assert PmSVM(p=p, C=0.01, random_state=0).fit(X, y).C_ == 0.01


def test_rejects_negative_input_and_bad_params():
    X, y = histograms(30, d=10)
    with pytest.raises(ValueError, match="Negative values"):
        PmSVM().fit(X - 0.5, y)
    with pytest.raises(ValueError, match="p"):
        PmSVM(p=1.0).fit(X, y)
    with pytest.raises(ValueError, match="nodes"):
        PmSVM(nodes="uniform").fit(X, y)


def test_drop_padding_in_place():
    from classify_images.classifiers import _pmsvm_kernels

    a = np.random.default_rng(0).random((5, 3, 16))
    expected = a[:, :, :11].copy()
    out = _pmsvm_kernels.drop_padding(a, 11)
    assert out.shape == (5, 3, 11) and out.flags.c_contiguous
    np.testing.assert_array_equal(out, expected)
    assert np.shares_memory(out, a)  # no second copy of the model


# ------------------------------------------------- (e) fast paths vs references
@pytest.mark.parametrize("p", [-1.0, 0.0, -np.inf, -8.0, -2.0, -3.0, -64.0, -0.5, -20.5, -100.0])
def test_vectorised_power_mean_matches_scalar(p):
    from classify_images.classifiers import _pmsvm_kernels as _k

    nodes = np.array([0.0114, 0.179, 0.806, 1e-3])
    for x in (np.geomspace(1e-6, 1.0, 300), np.random.default_rng(0).uniform(1e-3, 1, 300)):  # below/above 1e-4
        got = _k.power_mean_nodes(nodes, x, p)
        assert len(got) == nodes.size
        for c, values in zip(nodes, got):
            np.testing.assert_allclose(values, [_k.power_mean(c, v, p) for v in x], rtol=1e-12, atol=0)


def test_delta_rows_of_csr_entries_match_values():
    from classify_images.classifiers import _pmsvm_kernels as _k
    from classify_images.classifiers._rows import matrix_arrays

    X, _ = histograms(50, d=30, seed=4)
    A = sp.csr_matrix(X)
    inv_max = 1.0 / np.maximum(X.max(axis=0), 1e-12).astype(np.float64)
    approx = PmSVM(p=-8).approximation()
    rows = _k.delta_rows_csr(matrix_arrays(A), inv_max, approx)
    np.testing.assert_array_equal(rows, approx.delta_rows(A.data * inv_max[A.indices]))
    # each column against its definition (float32 rounding)
    x = np.maximum(np.minimum(A.data * inv_max[A.indices], 1.0), approx.eps)
    t = np.log(x + 0.05)
    np.testing.assert_allclose(rows[:, 0], t - approx.phi0[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rows[:, 1], t**2 - approx.phi0[2], rtol=1e-6, atol=1e-6)
    m_nodes = np.array([[_k.power_mean(c, v, -8.0) for c in approx.node_values] for v in x]) - approx.m_zero
    np.testing.assert_allclose(rows[:, 2:], m_nodes @ approx.vinv.T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lut_bins", [None, 100])
def test_solver_float32_and_model_from_dual_against_references(split, lut_bins):
    """The float32 solver reaches the float64 solver's dual; the model is ``sum_i alpha_i y_i u(x_i)``
    (its ``t^0`` part computed from the dual, the rest the solver's float32 sums)."""
    from classify_images.classifiers import _pmsvm_kernels as _k
    from classify_images.classifiers._rows import matrix_arrays

    X_train, y_train, _, _ = split
    clf = PmSVM(p=-8, lut_bins=lut_bins, C=0.01, tol=1e-3, random_state=0)
    approx = clf.approximation()
    A = sp.csr_matrix(X_train)
    rows = matrix_arrays(A)
    d = A.shape[1]
    clf.feature_max_ = _k.column_max(rows, d)
    inv_max, _ = clf._scales()
    table = clf._delta_table(approx, rows, inv_max)
    q_kernel, r, z = _k.row_constants(rows, table, inv_max, approx, d)
    constants = _k.RowConstants(q_kernel, r, z, d * float(approx.v0 @ approx.phi0))
    entries = _k.solver_entries(rows, table)
    Y = np.where(y_train[:, None] == np.unique(y_train)[None, :], 1, -1).astype(np.int8)
    problem = _k.DualProblem(True, np.full(Y.shape, 0.01), 1e-3, 1000, 0)
    alphas, slopes = {}, {}
    for dtype in (np.float32, np.float64):
        alpha, b = np.empty((Y.shape[0], 8)), np.empty((d, 2, 8), dtype=dtype)
        _k.dcd_solve(entries, Y, constants, problem, b, alpha, np.empty(3, np.int64))
        alphas[dtype], slopes[dtype] = alpha, b
    assert np.all(alphas[np.float32][:, 3:] == 0) and np.abs(alphas[np.float32]).max() > 0
    np.testing.assert_allclose(
        alphas[np.float32], alphas[np.float64], rtol=0, atol=1e-3 * np.abs(alphas[np.float64]).max()
    )
    # slow reference: a_j = sum_i w_i u(x_ij), with u(0) = v0 on the zero entries
    weights = alphas[np.float32][:, :3] * Y
    coef = _k.dual_coefficients(entries, np.ascontiguousarray(weights), slopes[np.float32], approx.v0, d)
    scaled = np.minimum(X_train * inv_max, 1.0)
    if lut_bins is None:
        u = approx.delta_rows(scaled.ravel())[:, 2:].reshape(*scaled.shape, 3).astype(np.float64)
    else:
        bins = np.minimum((scaled * lut_bins + 1e-9).astype(int), lut_bins)
        u = clf.lut_table(approx)[bins][:, :, 2:].astype(np.float64)
    u[scaled == 0] = 0.0
    expected = np.einsum("ijq,ic->jqc", u, weights) + weights.sum(axis=0)[None, None, :] * approx.v0[None, :, None]
    np.testing.assert_allclose(coef[:, 0], expected[:, 0], rtol=1e-9, atol=1e-12)  # t^0: computed from the dual
    # t^1..t^m: the solver's float32 running sums, within float32 rounding of the exact sums
    np.testing.assert_allclose(coef[:, 1:], expected[:, 1:], rtol=0, atol=1e-5 * np.abs(expected[:, 1:]).max())
    assert not np.array_equal(coef[:, 1:], expected[:, 1:])  # (they are float32 sums, not recomputed)


@pytest.mark.parametrize("lut_bins", [None, 100])
def test_explicit_zeros_and_class_weights_across_groups(split, lut_bins):
    X_train, y_train, X_test, _ = split
    A = sp.csr_matrix(X_train)
    A.data[::5] = 0.0  # explicit zeros are zeros
    dense = PmSVM(lut_bins=lut_bins, random_state=0).fit(A.toarray(), y_train)
    csr = PmSVM(lut_bins=lut_bins, random_state=0).fit(A, y_train)
    np.testing.assert_allclose(csr.coef_, dense.coef_, rtol=0, atol=1e-12)
    # class weights: each group of problems reads its own classes' costs
    weights = {0: 3.0, 1: 0.5, 2: 1.0}
    one = PmSVM(class_weight=weights, random_state=0).fit(X_train, y_train)
    two = PmSVM(class_weight=weights, random_state=0, n_jobs=2).fit(X_train, y_train)
    np.testing.assert_array_equal(one.coef_, two.coef_)
    plain = PmSVM(random_state=0).fit(X_train, y_train)
    assert not np.allclose(one.decision_function(X_test), plain.decision_function(X_test))


def test_nonzero_rows_of_dense_input():
    from classify_images.classifiers import _pmsvm_kernels as _k
    from classify_images.classifiers._rows import matrix_arrays

    X, _ = histograms(30, d=25, seed=6)
    (indptr, indices, data, dense), fmax = _k.nonzero_rows_and_max(matrix_arrays(X), 25)
    expected = sp.csr_matrix(X)
    assert not dense
    np.testing.assert_array_equal(fmax, X.max(axis=0).astype(np.float64))
    np.testing.assert_array_equal(indptr, expected.indptr)
    np.testing.assert_array_equal(indices, expected.indices)
    np.testing.assert_array_equal(data, expected.data)


# ------------------------------------- (f) the fast pre-computation and solver loops vs references
def _delta_rows_reference(x_hat, approx):
    """The delta rows by NumPy array operations, step by step (the kernel's slow reference)."""
    from classify_images.classifiers import _pmsvm_kernels as _k

    m = approx.m
    x = np.maximum(np.minimum(np.asarray(x_hat, dtype=np.float64), 1.0), approx.eps)
    t = np.log(x + _k.LOG_SHIFT)
    out = np.empty((x.size, 2 * m + 1), dtype=np.float32)
    power = t
    for q in range(1, m + 1):
        out[:, q - 1] = power - approx.phi0[q]
        power = power * t
    terms = [mk - mz for mk, mz in zip(_k.power_mean_nodes(approx.node_values, x, approx.p), approx.m_zero)]
    for r in range(m + 1):
        column = approx.vinv[r, 0] * terms[0]
        for k in range(1, m + 1):
            column += approx.vinv[r, k] * terms[k]
        out[:, m + r] = column
    return out


@pytest.mark.parametrize("p", [-1.0, 0.0, -np.inf, -8.0, -2.0, -64.0, -3.0, -0.5])
@pytest.mark.parametrize("eps", [1e-3, 1e-5])
def test_delta_rows_kernel_matches_numpy_bit_for_bit(p, eps):
    """The kernel's special cases (chi2, Hellinger, min, p = -2^k) give NumPy's bits."""
    approx = PmSVM(p=p, eps=eps, m=3 if p == -2.0 else 2).approximation()
    x = np.concatenate([np.random.default_rng(1).uniform(0, 1, 20000) ** 3, [0.0, 1e-6, 1e-4, 1e-3, 1.0, 1.5]])
    np.testing.assert_array_equal(approx.delta_rows(x), _delta_rows_reference(x, approx))


def test_column_max_dense_and_csr():
    from classify_images.classifiers import _pmsvm_kernels as _k
    from classify_images.classifiers._rows import matrix_arrays

    X, _ = histograms(40, d=33, seed=2)
    X[:, 5] = 0.0
    expected = X.max(axis=0).astype(np.float64)
    np.testing.assert_array_equal(_k.column_max(matrix_arrays(X), 33), expected)
    np.testing.assert_array_equal(_k.column_max(matrix_arrays(sp.csr_matrix(X)), 33), expected)


def test_nonzero_rows_of_dense_and_sparse_rows():
    """Rows above and below the branch-free density are compacted alike (both copy loops)."""
    from classify_images.classifiers import _pmsvm_kernels as _k
    from classify_images.classifiers._rows import matrix_arrays

    rng = np.random.default_rng(3)
    density = np.array([0.0, 0.02, 0.1, 0.19, 0.21, 0.5, 0.9, 1.0])[:, None]
    X = ((rng.uniform(size=(8, 200)) < density) * rng.uniform(0.1, 1.0, (8, 200))).astype(np.float32)
    expected = sp.csr_matrix(X)
    # every row sampled (an exact size), or one row in 32 (the all-zero first row: the output grows)
    for sample_every in (1, 32):
        indptr, indices, data, fmax = _k._dense_nonzeros(X.reshape(-1), 8, 200, sample_every)
        np.testing.assert_array_equal(indptr, expected.indptr)
        np.testing.assert_array_equal(indices, expected.indices)
        np.testing.assert_array_equal(data, expected.data)
        np.testing.assert_array_equal(fmax, X.max(axis=0))
    (_, _, _, dense), _ = _k.nonzero_rows_and_max(matrix_arrays(sp.csr_matrix(X)), 200)
    assert not dense


@pytest.mark.parametrize("use_lut", [False, True])
def test_blocked_gradient_matches_one_entry_at_a_time(use_lut):
    """The gradient's blocks of entries add the same float32 terms in the same order."""
    from classify_images.classifiers import _pmsvm_kernels as _k

    rng = np.random.default_rng(4)
    d, width = 50, 8
    b = rng.standard_normal((d, 2, width)).astype(np.float32)
    values = rng.standard_normal((30, 5)).astype(np.float32)
    for length in range(11):
        indices = np.sort(rng.choice(d, length, replace=False)).astype(np.int32)
        table_rows = rng.integers(0, 30, length).astype(np.uint16) if use_lut else np.empty(0, np.uint16)
        rows = table_rows.astype(int) if use_lut else np.arange(length)
        acc = np.empty(width, dtype=np.float32)
        _k._rows_gradient(0, length, indices, table_rows, use_lut, values, b, acc)
        expected = np.zeros(width, dtype=np.float32)
        for j, row in zip(indices, rows):
            expected = expected + (b[j, 0] * values[row, 0] + b[j, 1] * values[row, 1])
        np.testing.assert_array_equal(acc, expected)
