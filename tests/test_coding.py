import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.coding import (
    SparseCoder,
    apply_minmax,
    fit_minmax,
    learn_kmeans_codebook,
    learn_sparse_dictionary,
    normalize_rows,
    pooled_dimension,
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
                    i for i in range(len(x))
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
                    out.append(np.sqrt((block ** 2).mean(0)))
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
    np.testing.assert_allclose(normalize_rows(X, "l2")[0], [0.6, -0.8, 0.0], rtol=1e-6)
    np.testing.assert_allclose(normalize_rows(X, "l1")[0], [3 / 7, -4 / 7, 0.0], rtol=1e-6)
    power = normalize_rows(X, "power")[0]
    np.testing.assert_allclose(power, np.array([np.sqrt(3), -2.0, 0]) / np.sqrt(7), rtol=1e-6)
    assert not normalize_rows(X, "l2")[1].any()  # zero vector stays zero, no NaN
    train = np.array([[0.0, 2.0], [1.0, 4.0]], dtype=np.float32)
    lo, hi = fit_minmax(train)
    np.testing.assert_allclose(apply_minmax(np.array([[0.5, 6.0], [-1.0, 3.0]]), lo, hi), [[0.5, 1.0], [0.0, 0.5]])
    with pytest.raises(ValueError, match="not one of"):
        normalize_rows(X, "l3")


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
