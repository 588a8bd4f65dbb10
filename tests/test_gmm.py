"""The chunked, multi-threaded diagonal GMM (coding/gmm.py) against scikit-learn's, and its bits
against the thread count."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from classify_images.coding.gmm import CHUNK_ROWS, chunk_statistics, fit_diagonal_gmm, kmeans_lloyd


def _blobs(n, D, K, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(K, D)) * 3
    return centres[rng.integers(K, size=n)] + rng.normal(size=(n, D)) * rng.uniform(0.5, 1.5, size=D)


def test_chunk_statistics_are_the_plain_sums_in_any_thread_count():
    x = _blobs(2 * CHUNK_ROWS + 123, 3, 4)
    for n_threads in (1, 2, 3):
        s1, s2 = chunk_statistics(
            x.shape[0], lambda rows: (x[rows].sum(axis=0), float((x[rows] ** 2).sum())), n_threads
        )
        np.testing.assert_allclose(s1, x.sum(axis=0), rtol=1e-12)
        assert s2 == pytest.approx(float((x**2).sum()), rel=1e-12)


def test_kmeans_labels_are_sklearns():
    from sklearn.cluster import KMeans

    x = _blobs(3000, 5, 6, seed=1)
    with threadpool_limits(1):
        expected = KMeans(6, n_init=1, random_state=np.random.RandomState(3)).fit(x).labels_
        got = kmeans_lloyd(x, 6, random_state=3, n_threads=2)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("max_iter", [3, 100])
def test_gmm_is_sklearns_gaussian_mixture(max_iter):
    """Same algorithm, initialisation and stopping rule: the same model to rounding."""
    from sklearn.mixture import GaussianMixture

    x = _blobs(4000, 6, 5, seed=2)
    with threadpool_limits(1):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sk = GaussianMixture(5, covariance_type="diag", max_iter=max_iter, random_state=7).fit(x)
        ours, converged = fit_diagonal_gmm(x, 5, max_iter=max_iter, random_state=7, n_threads=2)
    assert converged == sk.converged_
    np.testing.assert_allclose(ours["weights"], sk.weights_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours["means"], sk.means_, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours["variances"], sk.covariances_, rtol=1e-9)


def test_same_bits_for_any_thread_count():
    """Fixed chunks summed in a fixed order: 1, 2 and 3 threads give identical arrays."""
    x = _blobs(3 * CHUNK_ROWS + 17, 4, 6, seed=3)
    with threadpool_limits(1):
        models = [fit_diagonal_gmm(x, 6, max_iter=5, random_state=0, n_threads=t)[0] for t in (1, 2, 3)]
    for model in models[1:]:
        for key in models[0]:
            assert np.array_equal(model[key], models[0][key]), key
