"""MBKL's quantile rules for stump thresholds (the paper's range rule stays available: ``PAPER_SETTING``)."""

import numpy as np
import scipy.sparse as sp

from classify_images.classifiers import MBKL


def _sparse_histograms(seed=0, n=120, d=40):
    """Heavy-tailed, mostly-zero non-negative rows in 3 classes (BoF-like)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.pareto(1.5, size=(n, d)) * (rng.random((n, d)) < 0.15)
    X[:, :6] += (rng.random((n, 6)) < 0.5) * (y[:, None] == np.arange(6)[None] % 3)  # class-dependent bins
    return X / np.maximum(X.sum(1, keepdims=True), 1e-12), y


def _stumps_dense_and_sparse(X, n_stumps, rule):
    """The stumps drawn from dense and CSR ``X`` (checked equal), and the raw draws
    ``(features, levels)`` in the order ``_random_stumps`` makes them (seed 0)."""
    dense_f, dense_t = MBKL._random_stumps(X, n_stumps, np.random.RandomState(0), rule)
    sparse_f, sparse_t = MBKL._random_stumps(sp.csr_matrix(X), n_stumps, np.random.RandomState(0), rule)
    np.testing.assert_array_equal(dense_f, sparse_f)
    np.testing.assert_allclose(dense_t, sparse_t, rtol=0, atol=1e-15)
    rng = np.random.RandomState(0)
    return dense_f, dense_t, rng.randint(0, X.shape[1], size=n_stumps), rng.uniform(0.0, 1.0, size=n_stumps)


def test_quantile_thresholds_are_the_empirical_quantiles_dense_and_sparse():
    X, _ = _sparse_histograms()
    dense_f, dense_t, features, levels = _stumps_dense_and_sparse(X, 500, "quantile")
    expected = np.array([np.quantile(X[:, f], u) for f, u in zip(features, levels)])
    order = np.lexsort((expected, features))
    np.testing.assert_array_equal(dense_f, features[order])
    np.testing.assert_allclose(dense_t, expected[order], rtol=1e-12, atol=0)


def test_papers_rule_stays_available_and_quantile_stumps_split_more_often():
    from classify_images.classifiers.mbkl import PAPER_SETTING

    X, y = _sparse_histograms(seed=1)
    assert PAPER_SETTING["threshold_rule"] == "range" and MBKL().threshold_rule == "distinct_quantile"
    splitting = {}
    for rule in ("range", "quantile"):
        features, thresholds = MBKL._random_stumps(X, 2000, np.random.RandomState(0), rule)
        fired = X[:, features] > thresholds
        splitting[rule] = np.mean(fired.any(0) & ~fired.all(0) & (fired.mean(0) > 0.05))
    assert splitting["quantile"] > splitting["range"] + 0.2, splitting


def test_quantile_rule_fits_deterministically():
    X, y = _sparse_histograms(seed=2)
    first = MBKL(threshold_rule="quantile", random_state=0).fit(X, y)
    second = MBKL(threshold_rule="quantile", random_state=0).fit(X, y)
    np.testing.assert_array_equal(first.stump_thresholds_, second.stump_thresholds_)
    np.testing.assert_array_equal(first.decision_function(X), second.decision_function(X))
    assert first.score(X, y) > 0.6
