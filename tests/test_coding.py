import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.coding import (
    Normalizer,
    SparseCoder,
    learn_kmeans_codebook,
    learn_sparse_dictionary,
    pooled_dimension,
    pyramid_cells,
    spatial_pyramid_pool,
    vq_encode,
)


def _reference_pool(codes, x, y, shape, levels, method):
    """Obvious per-cell loop: the definition of spatial-pyramid pooling."""
    h, w = shape
    out = []
    for L in levels:
        for r in range(L):
            for c in range(L):
                inside = [
                    i
                    for i in range(len(x))
                    if min(int(x[i] * L / w), L - 1) == c and min(int(y[i] * L / h), L - 1) == r
                ]
                block = codes[inside]
                if not inside:
                    out.append(np.zeros(codes.shape[1]))
                elif method == "average":
                    out.append(block.mean(0))
                elif method == "max":
                    out.append(np.abs(block).max(0))
                elif method == "sqrt":
                    out.append(np.sqrt((block**2).mean(0)))
                else:
                    out.append(np.abs(block).mean(0))
    return np.concatenate(out)


@pytest.mark.parametrize("method", ["average", "max", "sqrt", "abs"])
def test_pooling_matches_reference_sparse_and_vq(method):
    rng = np.random.default_rng(0)
    n, K, shape = 60, 7, (50, 80)
    x, y = rng.uniform(0, 80, n), rng.uniform(0, 50, n)
    dense = rng.normal(size=(n, K)) * (rng.random((n, K)) < 0.3)
    got = spatial_pyramid_pool(sp.csr_matrix(dense), x, y, shape, K, (1, 2, 4), method)
    assert got.shape == (pooled_dimension(K, (1, 2, 4)),) and got.dtype == np.float32
    np.testing.assert_allclose(got, _reference_pool(dense, x, y, shape, (1, 2, 4), method), rtol=1e-5, atol=1e-6)
    index = rng.integers(0, K, n)
    onehot = np.eye(K)[index]
    got_vq = spatial_pyramid_pool(index, x, y, shape, K, (1, 3), method)
    np.testing.assert_allclose(got_vq, _reference_pool(onehot, x, y, shape, (1, 3), method), rtol=1e-5, atol=1e-6)


def test_max_pooling_kernel_equals_per_cell_maximum_exactly():
    """The compiled max pooling (one pass over the CSR entries) gives the obvious per-cell
    max of |u| bit for bit, on float32 codes with a non-square level; a NaN code stays NaN."""
    rng = np.random.default_rng(3)
    n, K, shape = 300, 9, (61, 97)
    x, y = rng.uniform(0, 97, n), rng.uniform(0, 61, n)
    dense = (rng.normal(size=(n, K)) * (rng.random((n, K)) < 0.2)).astype(np.float32)
    got = spatial_pyramid_pool(sp.csr_matrix(dense), x, y, shape, K, (1, 2, "3x1"), "max")
    cells = pyramid_cells(x, y, shape, (1, 2, "3x1"))
    want = np.zeros((cells.max() + 1, K), dtype=np.float32)
    for level in cells:
        for i in range(n):
            want[level[i]] = np.maximum(want[level[i]], np.abs(dense[i]))
    np.testing.assert_array_equal(got, want.ravel())
    as_float64 = spatial_pyramid_pool(
        sp.csr_matrix(dense.astype(np.float64) * (1 + 1e-9)), x, y, shape, K, (1, 2, "3x1"), "max"
    )
    np.testing.assert_array_equal(as_float64, (want.astype(np.float64) * (1 + 1e-9)).astype(np.float32).ravel())
    dense[0, 0] = np.nan
    with_nan = spatial_pyramid_pool(sp.csr_matrix(dense), x, y, shape, K, (1,), "max")
    assert np.isnan(with_nan[0]) and np.isfinite(with_nan[1:]).all()


def test_average_vq_pooling_is_normalised_histogram_and_empty_cells_zero():
    index = np.array([0, 0, 1])
    x, y = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0])  # all in the top-left quarter
    z = spatial_pyramid_pool(index, x, y, (100, 100), 2, (1, 2), "average").reshape(5, 2)
    np.testing.assert_allclose(z[0], [2 / 3, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(z[1], [2 / 3, 1 / 3], rtol=1e-6)
    assert not z[2:].any()


def test_vq_matches_brute_force():
    rng = np.random.default_rng(1)
    X, C = rng.random((500, 16)).astype(np.float32), rng.random((20, 16)).astype(np.float32)
    expected = np.argmin(((X[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
    assert np.array_equal(vq_encode(X, C), expected)


def test_sparse_codes_satisfy_lasso_optimality():
    """KKT conditions of min ½‖x − Vᵀu‖² + λ‖u‖₁: |V(x − Vᵀu)| ≤ λ, = λ·sign(u) on the support."""
    rng = np.random.default_rng(2)
    V = rng.normal(size=(40, 32))
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    X = rng.normal(size=(25, 32))
    lam = 0.15
    U = SparseCoder(V, lam).encode(X)
    assert sp.isspmatrix_csr(U) and U.shape == (25, 40) and U.dtype == np.float32
    U = U.toarray().astype(np.float64)
    correlation = (X - U @ V) @ V.T
    assert np.all(np.abs(correlation) <= lam + 1e-3)
    support = U != 0
    np.testing.assert_allclose(correlation[support], lam * np.sign(U[support]), atol=1e-3)
    assert 0 < support.sum(1).mean() < 40


def test_normalisations():
    X = np.array([[3.0, -4.0, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(Normalizer("l2").transform(X)[0], [0.6, -0.8, 0.0], rtol=1e-6)
    np.testing.assert_allclose(Normalizer("l1").transform(X)[0], [3 / 7, -4 / 7, 0.0], rtol=1e-6)
    power = Normalizer("power").transform(X)[0]
    np.testing.assert_allclose(power, np.array([np.sqrt(3), -2.0, 0]) / np.sqrt(7), rtol=1e-6)
    assert not Normalizer("l2").transform(X)[1].any()  # zero vector stays zero, no NaN
    train = np.array([[0.0, 2.0], [1.0, 4.0]], dtype=np.float32)
    minmax = Normalizer("minmax").fit(train)
    np.testing.assert_allclose(minmax.transform(np.array([[0.5, 6.0], [-1.0, 3.0]])), [[0.5, 1.0], [0.0, 0.5]])
    with pytest.raises(ValueError, match="not one of"):
        Normalizer("l3")


@pytest.mark.parametrize("method", ["l2", "l1", "power", "none"])
def test_per_vector_normalizer_is_the_formula_and_needs_no_fit(method):
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((7, 20)) * (rng.random((7, 20)) < 0.6)).astype(np.float32)
    X[3] = 0.0
    normalizer = Normalizer(method)
    assert normalizer.per_vector and normalizer.is_fitted and normalizer.statistics() is None
    Z = X.astype(np.float64)
    if method == "power":
        Z = np.sign(Z) * np.sqrt(np.abs(Z))
    norms = {
        "l2": np.linalg.norm(Z, axis=1),
        "power": np.linalg.norm(Z, axis=1),
        "l1": np.abs(Z).sum(axis=1),
        "none": np.ones(len(Z)),
    }[method]
    expected = Z / np.where(norms > 0, norms, 1.0)[:, None]
    out = normalizer.transform(X)
    assert out.dtype == np.float32 and out.shape == X.shape
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)
    # Fitting changes nothing, and a row is normalised the same alone or in a batch.
    np.testing.assert_array_equal(Normalizer(method).fit(X[:2] * 100).transform(X), out)
    np.testing.assert_array_equal(normalizer.transform(X[5]), out[5:6])


def test_minmax_normalizer_learns_from_training_rows_only():
    rng = np.random.default_rng(1)
    X_train = rng.random((30, 6)).astype(np.float32) * 4 - 1
    X_train[:, 2] = 0.5  # constant on the training rows
    X_test = rng.random((10, 6)).astype(np.float32) * 8 - 3
    normalizer = Normalizer("minmax")
    assert not normalizer.per_vector and not normalizer.is_fitted
    with pytest.raises(ValueError, match="fitted"):
        normalizer.transform(X_test)
    normalizer.fit(X_train)
    np.testing.assert_array_equal(normalizer.minima_, X_train.min(axis=0))
    np.testing.assert_array_equal(normalizer.maxima_, X_train.max(axis=0))
    lo, hi = X_train.min(axis=0).astype(np.float64), X_train.max(axis=0).astype(np.float64)
    span = np.where(hi > lo, hi - lo, np.inf)
    expected = np.clip((X_test - lo) / span, 0.0, 1.0)
    out = normalizer.transform(X_test)
    assert out.dtype == np.float32 and out.min() >= 0 and out.max() <= 1
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert not out[:, 2].any()  # a dimension constant on the training rows maps to 0
    # The test rows do not move the statistics; transforming in chunks changes no bit.
    np.testing.assert_array_equal(Normalizer("minmax").fit(X_train).transform(X_test), out)
    np.testing.assert_array_equal(
        np.concatenate([normalizer.transform(X_test[:4]), normalizer.transform(X_test[4:])]), out
    )
    np.testing.assert_array_equal(normalizer.fit_transform(X_train), normalizer.transform(X_train))
    restored = Normalizer.from_statistics("minmax", normalizer.statistics())
    np.testing.assert_array_equal(restored.transform(X_test), out)


def test_codebooks_deterministic_and_shaped():
    rng = np.random.default_rng(3)
    X = rng.random((600, 12)).astype(np.float32)
    C1, C2 = learn_kmeans_codebook(X, 8, random_state=0), learn_kmeans_codebook(X, 8, random_state=0)
    assert C1.shape == (8, 12) and C1.dtype == np.float32 and np.array_equal(C1, C2)
    D1 = learn_sparse_dictionary(X, 16, n_iter=20, batch_size=64, random_state=0)
    D2 = learn_sparse_dictionary(X, 16, n_iter=20, batch_size=64, random_state=0)
    assert D1.shape == (16, 12) and np.array_equal(D1, D2)
    assert np.all(np.linalg.norm(D1, axis=1) <= 1 + 1e-4)
    with pytest.raises(ValueError, match="cannot make 50 words"):
        learn_kmeans_codebook(X[:20], 50)
