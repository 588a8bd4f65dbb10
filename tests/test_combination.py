"""Channel combination rules (classifiers/combination.py) against slow, obvious references."""

from types import SimpleNamespace

import numpy as np
import pytest

from classify_images.classifiers.combination import (
    Channel,
    CombinationError,
    channels_from_dicts,
    check_combination,
    combine_rows,
    mbkl_channel_weights,
)
from classify_images.errors import ClassifyImagesError


def _channels(weights=(1.0, 2.0, 0.5), dims=(3, 4, 2), signed=(True, False, False)):
    out, offset = [], 0
    for k, (w, d, s) in enumerate(zip(weights, dims, signed)):
        out.append(Channel(f"c{k}", offset, d, s, w))
        offset += d
    return tuple(out)


def _rows(channels, n, rng, nonnegative=False):
    X = rng.standard_normal((n, sum(c.dims for c in channels))).astype(np.float32)
    for c in channels:
        if nonnegative or not c.signed:
            X[:, c.offset : c.offset + c.dims] = np.abs(X[:, c.offset : c.offset + c.dims])
    X[1, channels[1].offset : channels[1].offset + channels[1].dims] = 0  # an empty block stays empty
    return X


def _block(x, c):
    return [float(v) for v in x[c.offset : c.offset + c.dims]]


def _linear_kernel_by_loops(x, y, channels, weights_on_kernel, norm):
    """sum_c weight_c * <x_c / |x_c|, y_c / |y_c|>, one number at a time."""
    total = 0.0
    for c, weight in zip(channels, weights_on_kernel):
        a, b = _block(x, c), _block(y, c)
        na = sum(v * v for v in a) ** 0.5 if norm == "l2" else sum(abs(v) for v in a)
        nb = sum(v * v for v in b) ** 0.5 if norm == "l2" else sum(abs(v) for v in b)
        dot = sum(u * v for u, v in zip(a, b))
        total += weight * (dot / ((na or 1.0) * (nb or 1.0)))
    return total


def _hik_by_loops(x, y, channels, beta):
    """sum_c beta_c HIK(x_c / |x_c|_1, y_c / |y_c|_1)."""
    total = 0.0
    for c, weight in zip(channels, beta):
        a, b = _block(x, c), _block(y, c)
        na, nb = sum(a) or 1.0, sum(b) or 1.0
        total += weight * sum(min(u / na, v / nb) for u, v in zip(a, b))
    return total


def test_average_linear_is_the_average_of_normalised_linear_kernels():
    rng = np.random.default_rng(0)
    channels = _channels()
    X = _rows(channels, 5, rng)
    Z = combine_rows(X, channels, "average", "linear").astype(np.float64)
    beta = np.array([c.weight for c in channels]) / sum(c.weight for c in channels)
    for i in range(5):
        for j in range(5):
            expected = _linear_kernel_by_loops(X[i], X[j], channels, beta, "l2")
            assert Z[i] @ Z[j] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_concat_kernel_weighs_each_normalised_block_by_its_squared_weight():
    rng = np.random.default_rng(1)
    channels = _channels()
    X = _rows(channels, 4, rng)
    Z = combine_rows(X, channels, "concat", "linear").astype(np.float64)
    squared = [c.weight**2 for c in channels]
    for i in range(4):
        for j in range(4):
            assert Z[i] @ Z[j] == pytest.approx(
                _linear_kernel_by_loops(X[i], X[j], channels, squared, "l2"), rel=1e-5, abs=1e-6
            )


def test_average_additive_gives_the_average_of_normalised_intersection_kernels():
    rng = np.random.default_rng(2)
    channels = _channels(signed=(False, False, False))
    X = _rows(channels, 4, rng, nonnegative=True)
    Z = combine_rows(X, channels, "average", "nsvm").astype(np.float64)
    beta = [c.weight / sum(d.weight for d in channels) for c in channels]
    for i in range(4):
        for j in range(4):
            assert np.minimum(Z[i], Z[j]).sum() == pytest.approx(_hik_by_loops(X[i], X[j], channels, beta), rel=1e-5)
        if i != 1:  # each normalised kernel has self-similarity 1: K(x, x) = sum beta = 1
            assert np.minimum(Z[i], Z[i]).sum() == pytest.approx(1.0, rel=1e-5)


def test_mbkl_rule_keeps_the_rows_and_in_place_works():
    rng = np.random.default_rng(3)
    channels = _channels(signed=(False, False, False))
    X = _rows(channels, 600, rng, nonnegative=True)  # more than one chunk
    np.testing.assert_array_equal(combine_rows(X, channels, "mbkl", "mbkl"), X)
    expected = combine_rows(X, channels, "concat", "linear")
    combine_rows(X, channels, "concat", "linear", out=X)
    np.testing.assert_array_equal(X, expected)


@pytest.mark.parametrize(
    "rule, classifier, channels, words",
    [
        ("mbkl", "mbkl", _channels(), "'c0' is signed"),
        ("mbkl", "linear", _channels(signed=(False,) * 3), "--classifier mbkl"),
        ("average", "pmsvm", _channels(), "'c0' is signed"),
        ("sum", "linear", _channels(), "allowed values are concat, average, mbkl"),
        ("concat", "linear", (), "no channel layout"),
    ],
)
def test_refusals_are_one_line(rule, classifier, channels, words):
    with pytest.raises(CombinationError, match=words) as caught:
        check_combination(rule, channels, classifier)
    assert isinstance(caught.value, ClassifyImagesError) and "\n" not in str(caught.value)


def test_channels_round_trip_and_must_tile_the_row():
    channels = _channels()
    assert channels_from_dicts([c.to_dict() for c in channels], 9) == channels
    with pytest.raises(CombinationError, match="cover 9 columns of the 10"):
        channels_from_dicts([c.to_dict() for c in channels], 10)
    broken = [c.to_dict() for c in channels]
    broken[1]["offset"] = 2
    with pytest.raises(CombinationError, match="does not follow"):
        channels_from_dicts(broken, 9)


def test_mbkl_channel_weights_by_loops():
    channels = _channels(signed=(False,) * 3)
    features = np.array([0, 2, 3, 3, 8, 7, 5])
    theta = np.array([1.0, 0.5, 2.0, 1.0, 0.25, 0.25, 1.0])
    shares = mbkl_channel_weights(SimpleNamespace(stump_features_=features, theta_=theta), channels)
    for c in channels:
        expected = sum(t for f, t in zip(features, theta) if c.offset <= f < c.offset + c.dims) / theta.sum()
        assert shares[c.name] == pytest.approx(expected)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_the_rules_ask_the_classifier_not_its_name():
    """A classifier (here a class defined in this test) says what the rules need with two class
    attributes; no rule compares names."""
    from classify_images.classifiers.combination import channel_scales
    from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC

    class AdditiveToy(QuadraticHingeSVC):
        homogeneous_additive_kernel = True

    class WeightLearningToy(QuadraticHingeSVC):
        learns_channel_weights = True

    channels, signed = _channels(signed=(False, False, False)), _channels()
    assert channel_scales("average", channels, AdditiveToy)[0] == "l1"
    assert channel_scales("average", channels, QuadraticHingeSVC)[0] == "l2"
    assert channel_scales("average", channels, "nsvm")[0] == "l1"
    with pytest.raises(CombinationError, match="signed"):
        check_combination("average", signed, AdditiveToy)
    check_combination("average", signed, QuadraticHingeSVC)
    check_combination("mbkl", channels, WeightLearningToy)
    with pytest.raises(CombinationError, match="use --classifier mbkl, not 'AdditiveToy'"):
        check_combination("mbkl", channels, AdditiveToy)
