"""MBKL's options from the gap study (issue 11): distinct-value quantile thresholds, the
``theta_exponent`` of the learnt kernel weights (the benchmark's Step-1 memo: benchmarks/tests)."""

from __future__ import annotations

import numpy as np
import pytest

from classify_images.classifiers import MBKL
from classify_images.classifiers.mbkl import PAPER_SETTING

from .test_mbkl_thresholds import _sparse_histograms, _stumps_dense_and_sparse


def test_distinct_quantile_thresholds_match_a_slow_reference_dense_and_sparse():
    X, _ = _sparse_histograms()
    X[:, 7] = 0.0  # a column with a single distinct value
    dense_f, dense_t, features, levels = _stumps_dense_and_sparse(X, 600, "distinct_quantile")
    expected = []
    for f, u in zip(features, levels):
        values = sorted(set(X[:, f].tolist()))  # each distinct value once
        position = u * (len(values) - 1)
        low = int(np.floor(position))
        high = min(low + 1, len(values) - 1)
        expected.append(values[low] + (position - low) * (values[high] - values[low]))
    expected = np.array(expected)
    order = np.lexsort((expected, features))
    np.testing.assert_array_equal(dense_f, features[order])
    np.testing.assert_allclose(dense_t, expected[order], rtol=1e-12, atol=1e-15)


def test_distinct_quantile_rarely_repeats_the_zero_threshold():
    X, _ = _sparse_histograms(seed=3)
    at_zero = {}
    for rule in ("quantile", "distinct_quantile"):
        _, thresholds = MBKL._random_stumps(X, 4000, np.random.RandomState(0), rule)
        at_zero[rule] = np.mean(thresholds == 0.0)
    # about 85 % of each column is zero: the plain quantile puts most thresholds at 0
    assert at_zero["quantile"] > 0.6 and at_zero["distinct_quantile"] < 0.2, at_zero


@pytest.fixture(scope="module")
def histograms():
    return _sparse_histograms(seed=4, n=150, d=30)


def _fit(X, y, **params):
    base = dict(
        n_stumps=600, threshold_rule="distinct_quantile", init_rule="balanced", C=10.0, C_kernel=10.0, random_state=0
    )
    return MBKL(**{**base, **params}).fit(X, y)


def test_theta_exponent_one_is_the_papers_theta_and_zero_keeps_only_the_selection(histograms):
    X, y = histograms
    default = _fit(X, y, theta_exponent=1.0)  # the paper's learnt theta
    half = _fit(X, y, theta_exponent=0.5)
    select = _fit(X, y, theta_exponent=0.0)
    defaults = MBKL(**{k: v for k, v in select.get_params().items() if k != "theta_exponent"}).fit(X, y)
    assert PAPER_SETTING["theta_exponent"] == 1.0 and MBKL().theta_exponent == 0.0
    for name in MBKL._fitted_arrays:
        np.testing.assert_array_equal(getattr(defaults, name), getattr(select, name))
    assert default.theta_.size > 10 and np.ptp(default.theta_) > 0  # learnt, unequal weights
    for model, power in ((half, 0.5), (select, 0.0)):  # same stumps, weights theta ** power
        np.testing.assert_array_equal(model.stump_features_, default.stump_features_)
        np.testing.assert_array_equal(model.stump_thresholds_, default.stump_thresholds_)
        np.testing.assert_allclose(model.theta_, default.theta_**power, rtol=1e-12)
        # the fast decision equals the explicit map of Eq. 4 with these weights
        phi = model.explicit_map(X)
        np.testing.assert_allclose(
            model.decision_function(X), phi @ model.coef_.T + model.intercept_, rtol=1e-9, atol=1e-9
        )
    np.testing.assert_array_equal(select.theta_, np.ones_like(select.theta_))
    assert not np.allclose(select.decision_function(X), default.decision_function(X))


def test_new_options_fit_deterministically(histograms):
    X, y = histograms
    first = _fit(X, y, theta_exponent=0.0)
    second = _fit(X, y, theta_exponent=0.0)
    for name in MBKL._fitted_arrays:
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    np.testing.assert_array_equal(first.decision_function(X), second.decision_function(X))
    assert first.score(X, y) > 0.6


def test_negative_theta_exponent_is_refused(histograms):
    X, y = histograms
    with pytest.raises(ValueError, match="theta_exponent"):
        MBKL(theta_exponent=-1.0).fit(X, y)


@pytest.mark.parametrize("rule", ["quantile", "distinct_quantile"])
def test_quantile_rules_make_the_fit_invariant_to_a_monotone_rescaling(histograms, rule):
    """Why per-dimension scaling or a power transform cannot help MBKL with quantile thresholds:
    the stumps fire on the same training samples, so Steps 0-2 learn the same model."""
    X, y = histograms
    params = dict(n_stumps=400, threshold_rule=rule, init_rule="balanced", C_kernel=10.0, random_state=0)
    plain = MBKL(**params).fit(X, y)
    transformed = 3.0 * np.sqrt(X)  # increasing on [0, inf) in every dimension
    power = MBKL(**params).fit(transformed, y)
    np.testing.assert_array_equal(plain.stump_features_, power.stump_features_)
    np.testing.assert_array_equal(plain.theta_, power.theta_)
    np.testing.assert_array_equal(plain.coef_, power.coef_)
    np.testing.assert_array_equal(plain.decision_function(X), power.decision_function(transformed))
