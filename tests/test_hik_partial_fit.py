"""HIK nSVM ``partial_fit`` and the streaming fit over row blocks (classify_images/pipeline/training/streaming_training.py).

The rule under test (HIKnSVM.partial_fit's docstring): an epoch is one pass over the blocks
in order; with ``shuffle=False`` it is ``fit`` on the concatenated rows, bit for bit.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from classify_images.classifiers import PmSVM
from classify_images.classifiers.hik_nsvm import HIKnSVM, blockwise_median
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.streaming_training import RowBlocks, StreamingError, fit_streaming

from .conftest import build_fixture_feature_set
from .test_hik_nsvm import histograms, reference_algorithm1


def blocks_of(X, y, sizes):
    """``(X, y)`` cut into consecutive blocks of the given sizes."""
    bounds = np.cumsum([0, *sizes])
    assert bounds[-1] == X.shape[0]
    return [(X[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def stream(estimator, blocks, n_epochs, classes, sample_weights=None):
    """Epochs of partial_fit over ``blocks``, the last block of each pass ending the epoch."""
    for _ in range(n_epochs):
        for k, (X, y) in enumerate(blocks):
            weight = None if sample_weights is None else sample_weights[k]
            estimator.partial_fit(X, y, classes=classes, sample_weight=weight, end_epoch=k == len(blocks) - 1)
    return estimator


# ------------------------------------------------------------------ partial_fit = fit
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n_classes", [2, 4])
def test_partial_fit_over_blocks_equals_fit_without_shuffle(sparse, n_classes):
    X, y = histograms(3, n=90, d=24, n_classes=n_classes)
    X = sp.csr_matrix(X) if sparse else X
    params = dict(
        learning_rate=2e-3,
        margin=0.03,
        n_epochs=8,
        fit_intercept=True,
        shuffle=False,
        class_weight={1: 2.0},
        random_state=0,
    )
    weight = np.random.default_rng(0).uniform(0.5, 2.0, size=90)
    full = HIKnSVM(**params).fit(X, y, sample_weight=weight)
    sizes = [7, 40, 1, 42]
    streamed = stream(
        HIKnSVM(**params),
        blocks_of(X, y, sizes),
        8,
        np.unique(y),
        [w for _, w in blocks_of(weight[:, None], weight, sizes)],
    )
    assert np.count_nonzero(full.coef_) > 0
    assert_array_equal(streamed.coef_, full.coef_)
    assert_array_equal(streamed.intercept_, full.intercept_)
    assert_array_equal(streamed.predict(X), full.predict(X))
    assert streamed.n_iter_ == full.n_iter_ == 8


def test_partial_fit_default_each_call_is_an_epoch():
    X, y = histograms(4, n=50, d=20, n_classes=3)
    params = dict(learning_rate=1e-3, n_epochs=6, shuffle=False)
    clf = HIKnSVM(**params)
    for epoch in range(6):
        clf.partial_fit(X, y, classes=[0, 1, 2])
        assert clf.n_iter_ == epoch + 1
    assert_array_equal(clf.coef_, HIKnSVM(**params).fit(X, y).coef_)


def test_partial_fit_shuffle_follows_the_documented_rule_and_algorithm1():
    """shuffle=True: each block's rows in RandomState(SeedSequence([seed, epoch, block])) order,
    checked against the literal Algorithm 1 (eager shrink) over those orders."""
    X, y01 = histograms(5, n=40, d=20)
    y = np.where(y01 == 1, 1.0, -1.0)
    clf = HIKnSVM(learning_rate=2e-3, alpha=1e-2, n_epochs=4, random_state=7)
    blocks = blocks_of(X, y01, [15, 25])
    stream(clf, blocks, 4, [0, 1])
    seed = HIKnSVM(random_state=7)._shuffle_seed()
    orders = []
    for epoch in range(4):
        order = []
        for k, start in enumerate((0, 15)):
            size = (15, 25)[k]
            block_seed = np.random.SeedSequence([seed, epoch, k]).generate_state(1)[0]
            order.extend(start + np.random.RandomState(block_seed).permutation(size))
        orders.append(order)
    w_ref = reference_algorithm1(X, y, orders, clf._schedule(clf.learning_rate_), clf.alpha, clf.margin_)
    assert np.count_nonzero(w_ref) > 0
    assert_allclose(clf.coef_[0], w_ref, rtol=1e-9, atol=1e-13)


def test_mid_epoch_model_has_the_shrinks_so_far_applied():
    """After end_epoch=False, coef_ is the literal (eager) Algorithm 1 after the rows seen so far."""
    X, y01 = histograms(6, n=30, d=15)
    y = np.where(y01 == 1, 1.0, -1.0)
    clf = HIKnSVM(learning_rate=3e-3, alpha=5e-2, n_epochs=2, shuffle=False)
    clf.partial_fit(X[:20], y01[:20], classes=[0, 1], end_epoch=False)
    rates = clf._schedule(clf.learning_rate_)
    assert_allclose(
        clf.coef_[0],
        reference_algorithm1(X, y, [np.arange(20)], rates[:1], clf.alpha, clf.margin_),
        rtol=1e-9,
        atol=1e-13,
    )
    assert clf.n_iter_ == 0
    clf.partial_fit(X[20:], y01[20:])  # ends epoch 0
    assert_allclose(
        clf.coef_[0],
        reference_algorithm1(X, y, [np.arange(30)], rates[:1], clf.alpha, clf.margin_),
        rtol=1e-9,
        atol=1e-13,
    )
    assert clf.n_iter_ == 1


def test_partial_fit_after_fit_continues_from_its_weights():
    X, y = histograms(7, n=40, d=12, n_classes=3)
    clf = HIKnSVM(learning_rate=1e-3, n_epochs=4, random_state=0).fit(X, y)
    before = clf.coef_.copy()
    clf.partial_fit(X, y)
    assert clf.n_iter_ == 5
    assert not np.array_equal(clf.coef_, before)
    assert np.abs(clf.coef_ - before).max() < 10 * clf.learning_rate_  # one more small-step epoch, not a restart


# ------------------------------------------------------------------ scikit-learn conventions
def test_partial_fit_needs_classes_on_the_first_call():
    X, y = histograms(8, n=20, d=6)
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        HIKnSVM().partial_fit(X, y)
    clf = HIKnSVM().partial_fit(X, y, classes=[0, 1])
    clf.partial_fit(X, y)  # later calls may omit them
    with pytest.raises(ValueError, match="is not the same as on last call"):
        clf.partial_fit(X, y, classes=[0, 1, 2])


def test_partial_fit_checks_features_labels_and_values():
    X, y = histograms(9, n=20, d=6)
    clf = HIKnSVM().partial_fit(X, y, classes=[0, 1])
    with pytest.raises(ValueError, match="X has 5 features, but HIKnSVM is expecting 6 features"):
        clf.partial_fit(X[:, :5], y)
    with pytest.raises(ValueError, match=r"labels \[7\] that are not in classes"):
        clf.partial_fit(X, np.full(20, 7))
    with pytest.raises(ValueError, match="Negative values"):
        clf.partial_fit(-X, y)  # refused in training, even after the first call (prediction clips)
    with pytest.raises(ValueError, match="at least 2 classes"):
        HIKnSVM().partial_fit(X, np.zeros(20), classes=[0])
    with pytest.raises(ValueError, match="'balanced' is not supported by partial_fit"):
        HIKnSVM(class_weight="balanced").partial_fit(X, y, classes=[0, 1])
    with pytest.raises(ValueError, match="n_epochs"):
        HIKnSVM(n_epochs=0).partial_fit(X, y, classes=[0, 1])  # parameters validated (_fit_context)


def test_partial_fit_zero_weight_rows_change_nothing():
    X, y = histograms(10, n=30, d=8)
    params = dict(learning_rate=1e-3, n_epochs=3, shuffle=False)
    weight = np.ones(30)
    weight[::3] = 0
    a = stream(HIKnSVM(**params), [(X, y)], 3, [0, 1], [weight])
    b = stream(HIKnSVM(**params), [(X[weight > 0], y[weight > 0])], 3, [0, 1])
    assert_array_equal(a.coef_, b.coef_)


# ------------------------------------------------------------------ "auto" parameters from blocks
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count", [1, 2, 999, 1000])
def test_blockwise_median_is_numpys(dtype, count):
    rng = np.random.default_rng(count)
    values = (rng.random(count) * rng.choice([1e-3, 1.0, 50.0], size=count)).astype(dtype)
    values[: count // 3] = values[0]  # ties
    parts = np.array_split(values, 7)
    got = blockwise_median(lambda: iter(parts), count, dtype)
    assert got == float(np.median(values))


@pytest.mark.parametrize("layout", ["dense32", "csr32", "dense64"])
def test_auto_parameters_are_those_fit_resolves(layout):
    X, y = histograms(11, n=77, d=19, n_classes=3)
    if layout == "csr32":
        X = sp.csr_matrix(X)
    elif layout == "dense64":
        X = X.astype(np.float64)
    full = HIKnSVM(n_epochs=1).fit(X, y)
    params = HIKnSVM().auto_parameters(blocks_of(X, y, [30, 30, 17]))
    assert params == {"learning_rate": full.learning_rate_, "margin": full.margin_}
    assert HIKnSVM(learning_rate=0.5, margin=0.1).auto_parameters(blocks_of(X, y, [77])) == {
        "learning_rate": 0.5,
        "margin": 0.1,
    }


# ------------------------------------------------------------------ fit_streaming
@pytest.mark.parametrize("seed", [None, 3])
def test_fit_streaming_equals_the_in_memory_fit(seed):
    X, y = histograms(12, n=101, d=16, n_classes=3)
    estimator = HIKnSVM(n_epochs=6, shuffle=False, random_state=0)  # "auto" rate and margin
    blocks = RowBlocks(X, y, 25, seed=seed)
    streamed = fit_streaming(estimator, blocks)
    full = HIKnSVM(n_epochs=6, shuffle=False, random_state=0).fit(X[blocks.order], y[blocks.order])
    assert_array_equal(streamed.coef_, full.coef_)
    assert streamed.learning_rate_ == full.learning_rate_ and streamed.margin_ == full.margin_
    assert streamed.get_params() == estimator.get_params()  # "auto" stays "auto"
    assert not hasattr(estimator, "coef_")  # the estimator given is left unchanged
    if seed is not None:
        assert sorted(blocks.order.tolist()) == list(range(101)) and not np.array_equal(blocks.order, np.arange(101))


def test_fit_streaming_over_a_feature_sets_memory_mapped_rows(tmp_path):
    feature_set = load_feature_set(build_fixture_feature_set(tmp_path))
    names = np.asarray(feature_set.class_names)[feature_set.y_train]
    assert isinstance(feature_set.X_train, np.memmap)
    blocks = RowBlocks(feature_set.X_train, names, 6, seed=0)
    streamed = fit_streaming(HIKnSVM(n_epochs=5, shuffle=False, random_state=0), blocks)
    X = np.asarray(feature_set.X_train)
    full = HIKnSVM(n_epochs=5, shuffle=False, random_state=0).fit(X[blocks.order], names[blocks.order])
    assert_array_equal(streamed.coef_, full.coef_)
    assert_array_equal(streamed.predict(np.asarray(feature_set.X_test)), full.predict(np.asarray(feature_set.X_test)))


def test_fit_streaming_with_shuffle_learns_the_task():
    X, y = histograms(13, n=200, d=20, n_classes=4)
    streamed = fit_streaming(HIKnSVM(n_epochs=20, random_state=0), RowBlocks(X, y, 30, seed=1))
    full = HIKnSVM(n_epochs=20, random_state=0).fit(X, y)
    assert full.score(X, y) >= 0.95
    assert streamed.score(X, y) >= full.score(X, y) - 0.03


def test_fit_streaming_holds_one_block(tmp_path):
    """Peak traced memory of a streaming fit over memory-mapped rows: a few blocks, not the data."""
    rng = np.random.default_rng(0)
    n, d, block_rows = 20000, 400, 150
    X = rng.random((n, d), dtype=np.float32)
    y = rng.integers(0, 3, n)
    X[np.arange(n), y] += 1.0  # dense rows (the kernel reads them in place: no CSR copy)
    np.save(tmp_path / "X.npy", X)
    del X
    rows = np.load(tmp_path / "X.npy", mmap_mode="r")
    data_bytes, block_bytes = n * d * 4, block_rows * d * 4
    estimator = HIKnSVM(n_epochs=2, random_state=0)
    blocks = RowBlocks(rows, y, block_rows, seed=0)  # shuffled blocks: each block is read into memory
    fit_streaming(estimator, RowBlocks(rows[:300], y[:300], block_rows, seed=0))  # compile outside the trace
    tracemalloc.start()
    fit_streaming(estimator, blocks)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # one block read, its non-zeros gathered by the validation, the l1 norms (8 bytes per row),
    # the median's 2^16-bin histograms: bounded by a few blocks, independent of n
    assert peak < 4 * block_bytes + 3 * 8 * (1 << 16) + 16 * n, (peak, block_bytes)
    assert peak < data_bytes / 8, (peak, data_bytes)


def test_fit_streaming_refusals():
    X, y = histograms(14, n=20, d=5)
    with pytest.raises(StreamingError, match="PmSVM has no partial_fit"):
        fit_streaming(PmSVM(), [(X, y)])
    with pytest.raises(StreamingError, match="no training row"):
        fit_streaming(HIKnSVM(), [])

    class Shrinking:
        """Yields one block fewer on every pass."""

        def __init__(self):
            self.n = 4

        def __iter__(self):
            self.n -= 1
            return iter(blocks_of(X, y, [5, 5, 5, 5])[: self.n])

    with pytest.raises(StreamingError, match="changed between passes"):
        fit_streaming(HIKnSVM(n_epochs=3, learning_rate=1e-3, margin=0.1), Shrinking())
    with pytest.raises(StreamingError, match="rows_per_block must be at least 1"):
        RowBlocks(X, y, 0)
