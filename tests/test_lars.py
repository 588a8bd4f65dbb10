"""The numba LARS-lasso encoder against spams.lasso (mode 2) and the lasso KKT conditions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.coding import SparseCoder
from classify_images.coding.lars import LassoDictionary, lasso_lars_codes, lasso_objective

from .conftest import FIXTURE_IMAGES, FIXTURE_PHOTO, SCENE15

LAM = 0.15

#: Why a comparison with spams.lasso skips (spams-bin is a dependency: only when it cannot be
#: imported).  The tests that need no spams run without it.
NO_SPAMS = "spams (spams-bin) is this test's reference and cannot be imported"


def _spams():
    return pytest.importorskip("spams", reason=NO_SPAMS)


def _spams_codes(X, D, lam):
    spams = _spams()
    X = np.asarray(X, dtype=np.float64)
    D = np.asarray(D, dtype=np.float64)
    G = np.asfortranarray(D @ D.T)
    q = np.asfortranarray(D @ X.T)
    codes = spams.lasso(np.asfortranarray(X.T), Q=G, q=q, lambda1=lam, mode=2, numThreads=1)
    return np.asarray(codes.T.todense())


def _check_kkt(X, D, U, lam, tol):
    corr = (np.asarray(X, np.float64) - U @ D) @ D.T
    assert np.all(np.abs(corr) <= lam + tol)
    support = U != 0
    np.testing.assert_allclose(corr[support], lam * np.sign(U[support]), atol=tol)


def _compare(X, D, lam, *, correlation_dtype, atol, kkt_tol, same_support=True):
    D = np.asarray(D, dtype=np.float64)
    U = lasso_lars_codes(X, D, lam, correlation_dtype=correlation_dtype)
    assert sp.isspmatrix_csr(U) and U.dtype == np.float32 and U.shape == (X.shape[0], D.shape[0])
    assert U.has_sorted_indices
    A = U.toarray().astype(np.float64)
    R = _spams_codes(X, D, lam)
    np.testing.assert_allclose(A, R, atol=atol, rtol=0)
    if same_support:
        assert np.array_equal(A != 0, R != 0)
    else:  # supports may differ only on coefficients below atol
        assert np.all(np.abs(A[(A != 0) != (R != 0)]) <= atol)
        assert np.all(np.abs(R[(A != 0) != (R != 0)]) <= atol)
    fo, fr = lasso_objective(X, D, A, lam), lasso_objective(X, D, R, lam)
    np.testing.assert_allclose(fo, fr, rtol=1e-6, atol=1e-12)
    _check_kkt(X, D, A, lam, kkt_tol)
    return A


@pytest.mark.parametrize("K,d", [(40, 32), (256, 64), (300, 20)])
def test_random_dictionaries_match_spams(K, d):
    rng = np.random.default_rng(K + d)
    D = rng.normal(size=(K, d))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    X = rng.normal(size=(300, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X[:100] *= rng.uniform(0.1, 3.0, size=(100, 1))
    A = _compare(X, D, LAM, correlation_dtype=np.float64, atol=1e-6, kkt_tol=1e-6)
    assert (A != 0).sum(1).mean() > 3


@pytest.fixture(scope="module", params=["fixture", pytest.param("scene15", marks=pytest.mark.realdata)])
def sift_data(request):
    """Dense SIFT of real photographs: the shipped fixture photos, or six 15-Scenes images (realdata)."""
    from classify_images.features.dsift import dense_sift
    from classify_images.features.preprocess import load_grayscale

    rng = np.random.default_rng(0)
    if request.param == "fixture":
        pick = [FIXTURE_PHOTO, *sorted(FIXTURE_IMAGES.glob("[cf]*/*.jpg"))]
    else:
        if not SCENE15.exists():
            pytest.fail(f"real-data test: {SCENE15} is missing (set CLASSIFY_IMAGES_DATASETS)")
        paths = sorted(SCENE15.glob("*/*.jpg"))
        pick = [paths[i] for i in rng.choice(len(paths), 6, replace=False)]
    X = np.concatenate([dense_sift(load_grayscale(p), 16, 8).descriptors for p in pick])
    train, test = X[: len(X) // 2], X[len(X) // 2 :]
    norms = np.linalg.norm(train, axis=1)
    atoms = train[rng.choice(np.flatnonzero(norms > 0.5), 512, replace=False)].astype(np.float64)
    atoms /= np.linalg.norm(atoms, axis=1, keepdims=True)
    return test[:1500], atoms


def test_dense_sift_matches_spams_float64(sift_data):
    X, D = sift_data
    A = _compare(X, D, LAM, correlation_dtype=np.float64, atol=1e-6, kkt_tol=1e-6)
    nnz = (A != 0).sum(1)
    assert 3 < nnz[nnz > 0].mean() < 40


def test_dense_sift_matches_spams_float32_correlations(sift_data):
    X, D = sift_data
    _compare(X, D, LAM, correlation_dtype=np.float32, atol=1e-4, kkt_tol=1e-5, same_support=False)


def test_zero_and_tiny_descriptors_give_empty_codes():
    rng = np.random.default_rng(5)
    D = rng.normal(size=(50, 16))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    X = np.zeros((4, 16))
    X[1] = 1e-3 * rng.normal(size=16)  # max |Dx| < λ
    X[2] = rng.normal(size=16)
    U = lasso_lars_codes(X, D, LAM)
    assert U.getnnz(1).tolist()[:2] == [0, 0] and U.getnnz(1)[3] == 0 and U.getnnz(1)[2] > 0
    empty = lasso_lars_codes(np.zeros((0, 16)), D, LAM)
    assert empty.shape == (0, 50) and empty.dtype == np.float32


def test_degenerate_dictionary_duplicate_and_zero_atoms():
    """Duplicated atoms (singular Gram) and an all-zero atom: still a lasso solution."""
    rng = np.random.default_rng(6)
    D = rng.normal(size=(30, 12))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    D = np.vstack([D, D[:5], np.zeros((1, 12))])
    X = rng.normal(size=(200, 12))
    U = lasso_lars_codes(X, D, LAM, correlation_dtype=np.float64).toarray().astype(np.float64)
    _check_kkt(X, D, U, LAM, 1e-6)
    assert not U[:, -1].any()
    # dependent atoms stop the feature-sign search: the full path takes over
    assert _kernel_counts(X, D, LAM, 16)[1] > 0
    # KKT ⇒ optimal (convex problem).  spams' LARS is no reference here: on this
    # singular Gram it returns NaNs and sub-optimal codes for some descriptors.
    R = _spams_codes(X, D, LAM)
    fo, fr = lasso_objective(X, D, U, LAM), lasso_objective(X, D, R, LAM)
    ok = np.isfinite(fr)
    assert np.all(fo[ok] <= fr[ok] * (1 + 1e-6) + 1e-12)


def test_max_steps_caps_the_path():
    rng = np.random.default_rng(7)
    D = rng.normal(size=(64, 32))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    X = rng.normal(size=(20, 32))
    U = lasso_lars_codes(X, D, 0.01, max_steps=2)
    assert U.getnnz(1).max() <= 3


def test_sparse_coder_uses_lars_and_precomputed_gram():
    rng = np.random.default_rng(8)
    D = rng.normal(size=(60, 24))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    X = rng.normal(size=(50, 24)).astype(np.float32)
    coder = SparseCoder(D, LAM)
    np.testing.assert_allclose(coder.gram, D @ D.T, atol=1e-12)
    U = coder.encode(X)
    assert sp.isspmatrix_csr(U) and U.dtype == np.float32 and U.shape == (50, 60)
    # the solver: spams.lasso on the same float32 correlations X Dᵀ (computed by the kernel) and Gram
    from classify_images.coding._lars_kernels import correlations

    spams = _spams()

    C = np.empty((50, 60), np.float32)
    correlations(X, np.ascontiguousarray(D.T, dtype=np.float32), C)
    same_c = spams.lasso(
        np.asfortranarray(X.T, dtype=np.float64),
        Q=np.asfortranarray(D @ D.T),
        q=np.asfortranarray(C.T, dtype=np.float64),
        lambda1=LAM,
        mode=2,
        numThreads=1,
    )
    np.testing.assert_allclose(U.toarray(), np.asarray(same_c.T.todense()), atol=1e-6, rtol=0)
    # against float64 correlations: with random (not SIFT) data some codes have up to d = 24
    # non-zeros (G_AA ill-conditioned), and the ~1e-7 float32 rounding of c moves them by up to
    # 1.4e-4 (measured; BLAS's float32 product: 8e-5)
    np.testing.assert_allclose(U.toarray(), _spams_codes(X, D, LAM), atol=3e-4, rtol=0)
    assert coder.encode(np.zeros((0, 24), np.float32)).shape == (0, 60)


def test_lasso_dictionary_gives_the_same_codes_as_the_bare_array():
    """A LassoDictionary (Gram matrices computed once, as SparseCoder keeps them) gives the codes of
    the bare dictionary bit for bit, in either correlation dtype, and keeps one Dᵀ per dtype."""
    rng = np.random.default_rng(11)
    D = rng.normal(size=(80, 16))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    X = rng.normal(size=(40, 16)).astype(np.float32)
    products = LassoDictionary(D)
    for dtype in (np.float32, np.float64, np.float32):
        a = lasso_lars_codes(X, products, LAM, correlation_dtype=dtype)
        b = lasso_lars_codes(X, D, LAM, correlation_dtype=dtype)
        assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
        assert np.array_equal(a.data, b.data)
    assert products.atoms_by_column(np.float32) is products.atoms_by_column(np.float32)
    assert products.gram32.dtype == np.float32 and np.array_equal(products.gram32, (D @ D.T).astype(np.float32))
    with pytest.raises(ValueError, match="gram must have shape"):
        LassoDictionary(D, gram=np.eye(3))


def test_bad_arguments():
    D = np.eye(4)
    with pytest.raises(ValueError, match="match the dictionary"):
        lasso_lars_codes(np.zeros((2, 3)), D, LAM)
    with pytest.raises(ValueError, match="lambda1"):
        lasso_lars_codes(np.zeros((2, 4)), D, -1.0)


def _kernel_counts(X, D, lam, n_candidates):
    """(codes, descriptors finished on the full path, KKT checks on all atoms) from the compiled kernel."""
    from classify_images.coding._lars_kernels import encode_block
    from classify_images.coding.lars import _KKT_MARGIN, _PIVOT_RTOL

    D = np.asarray(D, dtype=np.float64)
    G = D @ D.T
    C = np.ascontiguousarray(np.asarray(X, np.float32) @ D.astype(np.float32).T)
    K, d = D.shape
    idx, val, cnt, n_full, n_checks = encode_block(
        C,
        G,
        G.astype(np.float32),
        lam,
        4 * min(K, d) + 16,
        _PIVOT_RTOL,
        min(K, d + 8),
        n_candidates,
        lam * (1 - _KKT_MARGIN),
    )
    return (idx, val, cnt), n_full, n_checks


def _assert_same_solutions(X, D, A, B, lam, *, atol):
    """Codes ``A`` and ``B`` (dense) of the same lasso: same support, close values, same objective."""
    assert np.array_equal(A != 0, B != 0)
    np.testing.assert_allclose(A, B, atol=atol, rtol=0)
    np.testing.assert_allclose(lasso_objective(X, D, A, lam), lasso_objective(X, D, B, lam), rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("n_candidates", [1, 3, 16, 64])
def test_feature_sign_codes_equal_the_full_path(sift_data, n_candidates):
    """Feature-sign on pools grown by the KKT check gives the full homotopy's codes (to float32 rounding)."""
    X, D = sift_data
    full = lasso_lars_codes(X, D, LAM, n_candidates=None)
    screened = lasso_lars_codes(X, D, LAM, n_candidates=n_candidates)
    assert screened.has_sorted_indices
    _assert_same_solutions(
        X, D, screened.toarray().astype(np.float64), full.toarray().astype(np.float64), LAM, atol=1e-6
    )
    _, n_full, n_checks = _kernel_counts(X, D, LAM, n_candidates)
    # the KKT check did reject pool solutions (more checks than descriptors), and
    # feature-sign, not the full-path fallback, found the codes
    assert n_checks > X.shape[0]
    assert n_full == 0


@pytest.mark.parametrize("K,d,n_candidates", [(40, 32, 1), (40, 32, 4), (256, 64, 2), (256, 64, 16), (300, 20, 8)])
def test_feature_sign_matches_full_path_and_spams_float64(K, d, n_candidates):
    """float64 correlations: feature-sign, the full LARS path and spams.lasso agree (support, values, KKT)."""
    rng = np.random.default_rng(10 * K + d)
    D = rng.normal(size=(K, d))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    X = rng.normal(size=(200, d)) * rng.uniform(0.2, 2.0, size=(200, 1))
    A = lasso_lars_codes(X, D, LAM, correlation_dtype=np.float64, n_candidates=n_candidates)
    A = A.toarray().astype(np.float64)
    F = lasso_lars_codes(X, D, LAM, correlation_dtype=np.float64, n_candidates=None).toarray().astype(np.float64)
    _assert_same_solutions(X, D, A, F, LAM, atol=1e-6)
    _assert_same_solutions(X, D, A, _spams_codes(X, D, LAM), LAM, atol=1e-6)
    _check_kkt(X, D, A, LAM, 1e-6)
    assert (A != 0).sum(1).mean() > 3
    (_, _, counts), n_full, n_checks = _kernel_counts(X, D, LAM, n_candidates)
    assert n_checks > X.shape[0]
    # the full path is only the fallback for codes whose active atoms nearly
    # span R^d (an entering atom is then numerically dependent on them)
    assert n_full <= (counts >= 0.8 * d).sum()


def _same_bits(U, V):
    return (
        np.array_equal(U.indptr, V.indptr)
        and np.array_equal(U.indices, V.indices)
        and U.data.tobytes() == V.data.tobytes()
    )


@pytest.mark.parametrize("correlation_dtype", [np.float32, np.float64])
def test_codes_are_deterministic_and_independent_of_the_batch(sift_data, correlation_dtype, monkeypatch):
    """Same input, same bytes; a descriptor's code does not depend on the other rows of its block.

    Other row order, other batch sizes (single rows, odd sizes), other block
    boundaries: the same codes bit for bit (a BLAS ``gemm`` for ``X Dᵀ``
    broke this on AVX2 processors).
    """
    from classify_images.coding import lars

    X, D = sift_data
    code = lambda rows: lasso_lars_codes(rows, D, LAM, correlation_dtype=correlation_dtype)  # noqa: E731
    U1 = code(X)
    assert _same_bits(U1, code(X))
    order = np.random.default_rng(3).permutation(X.shape[0])
    assert _same_bits(code(X[order]), U1[order])
    assert _same_bits(sp.vstack([code(X[i : i + 1]) for i in range(40)]).tocsr(), U1[:40])
    edges = [0, 1, 8, 45, 378, 379, 1001, X.shape[0]]
    assert _same_bits(sp.vstack([code(X[a:b]) for a, b in zip(edges, edges[1:])]).tocsr(), U1)
    monkeypatch.setattr(lars, "_CHUNK", 37)
    assert _same_bits(code(X), U1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,d,K", [(1, 128, 512), (2, 128, 40), (7, 13, 33), (64, 3, 5)])
def test_correlations_sum_in_a_fixed_order(dtype, n, d, K):
    """The compiled product equals the slow sum over coordinates in turn, bit for bit, and X Dᵀ to rounding."""
    from classify_images.coding._lars_kernels import correlations

    rng = np.random.default_rng(n + d + K)
    X = (rng.random((n, d)) * 100).astype(dtype)
    DT = rng.normal(size=(d, K)).astype(dtype)
    out = np.full((n, K), np.nan, dtype=dtype)
    correlations(X, DT, out)
    slow = np.zeros((n, K), dtype=dtype)
    for j in range(d):  # one rounding per product and per sum, coordinates in increasing order
        slow = slow + X[:, j : j + 1] * DT[j]
    assert out.tobytes() == slow.tobytes()
    exact = X.astype(np.float64) @ DT.astype(np.float64)
    np.testing.assert_allclose(out, exact, rtol=0, atol=d * np.finfo(dtype).eps * np.abs(X).sum(1).max() * 4)


def test_one_atom_and_two_atoms():
    """K = 1: soft thresholding, u = sign(c) max(|c| - λ, 0) / |d|²; K = 2 with a one-atom pool."""
    rng = np.random.default_rng(11)
    d = rng.normal(size=(1, 8))
    X = rng.normal(size=(50, 8)) * 0.3
    c = (X @ d.T).ravel()
    expect = np.sign(c) * np.maximum(np.abs(c) - LAM, 0) / (d @ d.T).item()
    U = lasso_lars_codes(X, d, LAM, correlation_dtype=np.float64).toarray().ravel()
    np.testing.assert_allclose(U, expect, rtol=1e-6, atol=1e-7)
    assert (U == 0).sum() == (expect == 0).sum() > 0
    D2 = np.vstack([d, rng.normal(size=(1, 8))])
    A = lasso_lars_codes(X, D2, LAM, correlation_dtype=np.float64, n_candidates=1).toarray().astype(np.float64)
    F = lasso_lars_codes(X, D2, LAM, correlation_dtype=np.float64, n_candidates=None).toarray().astype(np.float64)
    _assert_same_solutions(X, D2, A, F, LAM, atol=1e-6)
    _check_kkt(X, D2, A, LAM, 1e-6)


def test_large_lambda_gives_empty_codes():
    rng = np.random.default_rng(12)
    D = rng.normal(size=(30, 10))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    X = rng.normal(size=(20, 10))
    lam = 1.01 * np.abs(X @ D.T).max()
    assert lasso_lars_codes(X, D, lam).nnz == 0
    assert lasso_lars_codes(X, D, lam, n_candidates=None).nnz == 0


def test_screened_codes_match_spams_when_the_check_fails_often(sift_data):
    X, D = sift_data
    D = np.asarray(D, dtype=np.float64)
    A = lasso_lars_codes(X, D, LAM, correlation_dtype=np.float64, n_candidates=2).toarray().astype(np.float64)
    R = _spams_codes(X, D, LAM)
    np.testing.assert_allclose(A, R, atol=1e-6, rtol=0)
    assert np.array_equal(A != 0, R != 0)
    np.testing.assert_allclose(lasso_objective(X, D, A, LAM), lasso_objective(X, D, R, LAM), rtol=1e-6, atol=1e-12)
    _check_kkt(X, D, A, LAM, 1e-6)


def test_bad_n_candidates():
    with pytest.raises(ValueError, match="n_candidates"):
        lasso_lars_codes(np.zeros((2, 4)), np.eye(4), LAM, n_candidates=0)
