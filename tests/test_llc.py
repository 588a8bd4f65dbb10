"""LLC codes against a direct constrained least-squares solve; signed max pooling; a small build."""

import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.coding import LlcCoder, llc_codes, spatial_pyramid_pool
from classify_images.coding.llc import nearest_codewords
from classify_images.coding.pooling import pooled_dimension
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.storage.feature_store import load_feature_set

from ._encoder_helpers import assert_new_images_match_rows, random_layout, reference_cells, small_config


def _reference_llc(x, codebook, k, beta):
    """min ‖x − Mw‖² + λ‖w‖² s.t. Σw = 1 over the k nearest codewords (M = B_xᵀ), by its KKT
    system solved with lstsq; λ = β·Σ_j ‖b_j − x‖² (β·trace(C))."""
    distances = np.array([np.sum((b - x) ** 2) for b in codebook])
    nearest = np.argsort(distances, kind="stable")[:k]
    M = codebook[nearest].T  # d × k
    lam = beta * distances[nearest].sum()
    kkt = np.zeros((k + 1, k + 1))
    kkt[:k, :k] = 2 * (M.T @ M + lam * np.eye(k))
    kkt[:k, k] = kkt[k, :k] = 1.0
    rhs = np.concatenate([2 * M.T @ x, [1.0]])
    solution = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
    code = np.zeros(codebook.shape[0])
    code[nearest] = solution[:k]
    return code


@pytest.mark.parametrize("k, beta", [(5, 1e-4), (3, 1e-2), (1, 1e-4)])
def test_llc_codes_match_constrained_least_squares(k, beta):
    rng = np.random.default_rng(1)
    codebook = rng.normal(size=(20, 12))
    X = rng.normal(size=(40, 12))
    got = llc_codes(X, codebook, k, beta)
    assert sp.isspmatrix_csr(got) and got.dtype == np.float32 and got.shape == (40, 20)
    assert np.all(np.diff(got.indptr) == k)
    expected = np.array([_reference_llc(x, codebook, k, beta) for x in X])
    np.testing.assert_allclose(got.toarray(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.toarray().sum(1), 1.0, rtol=1e-5)
    assert (got.toarray() < 0).any() or k == 1  # the codes are signed


def test_nearest_codewords_are_brute_force_order():
    rng = np.random.default_rng(2)
    codebook, X = rng.normal(size=(30, 8)), rng.normal(size=(50, 8))
    got = nearest_codewords(X, codebook, 5)
    expected = np.argsort(((X[:, None, :] - codebook[None]) ** 2).sum(-1), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(
        nearest_codewords(X, codebook, 30),
        np.argsort(((X[:, None, :] - codebook[None]) ** 2).sum(-1), axis=1, kind="stable"),
    )
    with pytest.raises(ValueError, match="n_neighbors must be in"):
        nearest_codewords(X, codebook, 31)


@pytest.mark.parametrize("k", [1, 2, 5, 12])
def test_k_smallest_is_a_stable_sort_with_ties(k):
    from classify_images.coding._llc_kernels import k_smallest

    rng = np.random.default_rng(5)
    distances = rng.integers(0, 6, size=(200, 12)).astype(np.float64)  # many ties
    expected = np.argsort(distances, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(k_smallest(distances, k), expected)


def test_llc_is_deterministic_and_chunking_free():
    rng = np.random.default_rng(3)
    codebook, X = rng.random((64, 128)).astype(np.float32), rng.random((9000, 128)).astype(np.float32)
    coder = LlcCoder(codebook)
    first, second = coder.encode(X), coder.encode(X)
    np.testing.assert_array_equal(first.toarray(), second.toarray())
    # Chunks (4096 rows) change nothing: the same rows coded alone give the same codes.
    np.testing.assert_array_equal(coder.encode(X[4090:4100]).toarray(), first[4090:4100].toarray())


def test_signed_max_pooling_matches_reference():
    rng = np.random.default_rng(4)
    n, K = 70, 9
    x, y, shape = random_layout(rng, n)
    dense = rng.normal(size=(n, K)) * (rng.random((n, K)) < 0.4)
    dense[:, 0] = -np.abs(rng.normal(size=n)) - 0.1  # word 0 used by every descriptor, negatively
    levels, grids = (1, 2, "3x1"), [(1, 1), (2, 2), (3, 1)]
    got = spatial_pyramid_pool(sp.csr_matrix(dense), x, y, shape, K, levels, "signed_max")
    expected = np.concatenate([dense[c].max(0) if c else np.zeros(K) for c in reference_cells(x, y, shape, grids)])
    assert got.shape == (pooled_dimension(K, levels),) == (8 * K,)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert (got.reshape(8, K)[:, 0] < 0).all()  # a max of negative codes stays negative


def test_llc_build_end_to_end(tmp_path, small_dataset):
    config = small_config(
        {"kind": "llc", "size": 16, "n_samples": 3000, "n_iter": 20, "n_neighbors": 5},
        {"method": "signed_max", "levels": [1, 2]},
        "l2",
    )
    cache = tmp_path / "cache"
    result = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=cache)
    fs = load_feature_set(tmp_path / "fs")
    assert result.n_features == 16 * 5 and fs.codebook().shape == (16, 128)
    assert fs.manifest["implementation_versions"]["llc"] >= 1
    X = np.asarray(fs.X_train)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-5)
    # Same config without the cache: the same numbers.
    build_feature_set(small_dataset, tmp_path / "fs2", config, cache_dir=None)
    np.testing.assert_array_equal(np.asarray(load_feature_set(tmp_path / "fs2").X_train), X)
    assert_new_images_match_rows(fs, [str(small_dataset / p) for p in fs.test_paths[:3]])


def test_encoder_versions_key_their_own_kind_only(tmp_path, small_dataset, monkeypatch):
    from classify_images.coding import llc as llc_module
    from classify_images.coding.encoders import make_encoder
    from classify_images.pipeline.extraction import stages

    def encoder(kind):
        return make_encoder({"kind": kind, "size": 16, "lambda": 0.15, "n_iter": 1, "seed": 0})

    assert dict(stages._stage_versions("image_encoding", encoder("llc")))["llc"] == llc_module.IMPLEMENTATION_VERSION
    assert "llc" not in dict(stages._stage_versions("image_encoding", encoder("kmeans")))
    assert {"vlad", "fisher", "pooling"} <= set(dict(stages._stage_versions("image_encoding", encoder("fisher"))))
    assert set(stages.implementation_versions()) == set(stages.implementation_versions(encoder("kmeans")))

    config = small_config(
        {"kind": "llc", "size": 16, "n_samples": 3000, "n_iter": 20}, {"method": "signed_max", "levels": [1, 2]}, "l2"
    )
    cache = tmp_path / "cache"
    build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=cache)
    calls = []
    original = llc_module.LlcCoder.encode
    monkeypatch.setattr(llc_module.LlcCoder, "encode", lambda self, d: calls.append(1) or original(self, d))
    build_feature_set(small_dataset, tmp_path / "fs2", config, cache_dir=cache)
    assert not calls  # cached codes reused
    monkeypatch.setattr(llc_module, "IMPLEMENTATION_VERSION", llc_module.IMPLEMENTATION_VERSION + 1)
    build_feature_set(small_dataset, tmp_path / "fs3", config, cache_dir=cache)
    assert len(calls) == 30  # every image re-encoded after the bump
