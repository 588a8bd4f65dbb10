"""Tests of the HIK nSVM (classifiers/hik_nsvm.py): Eq. 7b, Algorithm 1, persistence."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from classify_images.classifiers import _hik_nsvm_kernels as K
from classify_images.classifiers import hik_nsvm as hik_nsvm_module
from classify_images.classifiers._rows import matrix_arrays
from classify_images.classifiers.hik_nsvm import HIKnSVM, hik_decision, hik_nsvm_objective
from classify_images.pipeline.training.model_file import load_model, save_model

from ._hik_nsvm_reference import epoch_orders


def histograms(seed: int, n: int = 80, d: int = 30, n_classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """l1-normalised sparse-ish histograms; class c puts extra mass on bins 3c..3c+2 (separable)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d)) * (rng.random((n, d)) < 0.5)
    y = rng.integers(0, n_classes, n)
    for c in range(n_classes):
        X[y == c, 3 * c : 3 * c + 3] += 0.5
    X /= X.sum(axis=1, keepdims=True)
    return X.astype(np.float32), y


def numpy_decision(X, W, b) -> np.ndarray:
    """Eq. 7b written directly: sum_d sign(w_d) min(x_d, |w_d|) + b."""
    X = np.asarray(X, dtype=np.float64)
    return (np.sign(W)[None] * np.minimum(X[:, None, :], np.abs(W)[None])).sum(-1) + b


def reference_algorithm1(X, y, orders, rates, alpha, margin):
    """Algorithm 1 of the paper, eager and literal (slow obvious reference)."""
    X = np.asarray(X, dtype=np.float64)
    w = np.zeros(X.shape[1])
    for order, r in zip(orders, rates):
        for i in order:
            f = np.sum(np.sign(w) * np.minimum(X[i], np.abs(w)))
            if y[i] * f < margin:
                w = w + r * y[i] * (np.abs(w) < X[i])  # line 5
            w = np.sign(w) * np.maximum(0.0, np.abs(w) - r * alpha)  # line 6
    return w


# ------------------------------------------------------------------ decision function
@pytest.mark.parametrize("sparse", [False, True])
def test_decision_matches_numpy_formula(sparse):
    rng = np.random.default_rng(1)
    X, _ = histograms(1, n=25, d=40)
    W = rng.normal(scale=0.03, size=(4, 40)) * (rng.random((4, 40)) < 0.7)
    b = rng.normal(size=4)
    Xin = sp.csr_matrix(X) if sparse else X
    assert_allclose(hik_decision(Xin, W, b), numpy_decision(X, W, b), rtol=1e-12, atol=1e-14)


def test_fitted_decision_function_is_eq7b_of_coef():
    X, y = histograms(2, n_classes=3)
    clf = HIKnSVM(learning_rate=1e-3, n_epochs=10, fit_intercept=True, random_state=0).fit(X, y)
    assert clf.coef_.shape == (3, X.shape[1]) and np.any(clf.intercept_ != 0)
    assert_allclose(clf.decision_function(X), numpy_decision(X, clf.coef_, clf.intercept_), rtol=1e-12)
    assert_array_equal(clf.predict(X), clf.classes_[np.argmax(clf.decision_function(X), axis=1)])


# ------------------------------------------------------------------ Algorithm 1
@pytest.mark.parametrize("sparse", [False, True])
def test_sgd_matches_literal_algorithm1(monkeypatch, sparse):
    """The lazy-shrink numba SGD equals the literal Algorithm 1 (same shuffles)."""
    monkeypatch.setattr(hik_nsvm_module, "_CSR_DENSITY", 0.0)  # dense X through the dense kernel
    X, y01 = histograms(5, n=40, d=20)
    y = np.where(y01 == 1, 1.0, -1.0)
    clf = HIKnSVM(learning_rate=2e-3, alpha=1e-2, n_epochs=12, random_state=3)
    clf.fit(sp.csr_matrix(X) if sparse else X, y01)
    rates = clf._schedule(clf.learning_rate_)
    assert_allclose(rates, [2e-3] * 6 + [2e-4] * 6)  # r / 10 after half the epochs
    orders = epoch_orders(X.shape[0], clf.n_epochs, clf._shuffle_seed())
    w_ref = reference_algorithm1(X, y, orders, rates, clf.alpha, clf.margin_)
    assert np.count_nonzero(w_ref) > 0
    assert_allclose(clf.coef_[0], w_ref, rtol=1e-9, atol=1e-13)


def test_objective_does_not_increase_in_small_step_epochs():
    X, y = histograms(0)
    clf = HIKnSVM(learning_rate=1e-3, n_epochs=100, random_state=0, record_objective=True).fit(X, y)
    curve = clf.objective_curve_[:, 0]
    assert clf.score(X, y) == 1.0
    late = curve[50:]  # r / 10 from epoch 50 on
    assert np.all(np.diff(late) <= 1e-2 * late[:-1])  # only SGD jitter of the size of one small step
    assert late[-1] <= late[0]
    assert curve[-1] < 0.05 * curve[0]
    # the recorded value is Eq. 7a at the final weights
    y_pm = np.where(y == 1, 1.0, -1.0)
    assert_allclose(curve[-1], hik_nsvm_objective(X, y_pm, clf.coef_[0], 0.0, clf.alpha, clf.margin_), rtol=1e-12)


def test_objective_formula():
    X, y01 = histograms(6, n=20, d=10)
    y = np.where(y01 == 1, 1.0, -1.0)
    w = np.linspace(-0.1, 0.1, 10)
    f = numpy_decision(X, w[None], 0.01)[:, 0]
    c = np.linspace(0.5, 2.0, 20)
    expected = 0.3 * np.abs(w).sum() + np.mean(c * np.maximum(0.0, 0.02 - y * f))
    assert_allclose(hik_nsvm_objective(sp.csr_matrix(X), y, w, 0.01, 0.3, 0.02, c), expected, rtol=1e-12)


# ------------------------------------------------------------------ determinism, formats
def test_determinism_and_threads():
    X, y = histograms(7, n_classes=4)
    params = dict(learning_rate=1e-3, n_epochs=20)
    a = HIKnSVM(random_state=11, **params).fit(X, y).coef_
    b = HIKnSVM(random_state=11, n_jobs=2, **params).fit(X, y).coef_
    c = HIKnSVM(random_state=12, **params).fit(X, y).coef_
    assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("csr_density", [0.0, 1.0])  # 0: the dense kernel; 1: dense X trained as CSR
def test_dense_and_csr_agree(monkeypatch, csr_density):
    monkeypatch.setattr(hik_nsvm_module, "_CSR_DENSITY", csr_density)
    X, y = histograms(8, n_classes=3)
    params = dict(learning_rate=1e-3, n_epochs=20, fit_intercept=True, random_state=0)
    dense = HIKnSVM(**params).fit(X, y)
    csr = HIKnSVM(**params).fit(sp.csr_matrix(X), y)
    assert np.count_nonzero(dense.coef_) > 0
    assert_array_equal(dense.coef_, csr.coef_)
    assert_array_equal(dense.intercept_, csr.intercept_)
    assert_array_equal(dense.decision_function(X), csr.decision_function(sp.csr_matrix(X)))


def test_negative_input_rejected():
    X, y = histograms(9)
    X[0, 0] = -0.1
    with pytest.raises(ValueError, match="Negative values in data"):
        HIKnSVM(n_epochs=1).fit(X, y)


# ------------------------------------------------------------------ options
def test_class_weight_scales_the_steps():
    """A class weight of 2 is the step of a sample weight 2 on that class's rows (same run)."""
    X, y = histograms(10, n=40)
    y = np.r_[np.zeros(20, int), np.ones(20, int)]
    params = dict(learning_rate=1e-3, n_epochs=10, random_state=0)
    by_class = HIKnSVM(class_weight={1: 2.0}, **params).fit(X, y).coef_
    by_sample = HIKnSVM(**params).fit(X, y, sample_weight=np.where(y == 1, 2.0, 1.0)).coef_
    assert_array_equal(by_class, by_sample)
    assert not np.array_equal(by_class, HIKnSVM(**params).fit(X, y).coef_)


def test_auto_learning_rate():
    X, y = histograms(13)
    clf = HIKnSVM(n_epochs=2, random_state=0).fit(X, y)
    assert clf.learning_rate_ == pytest.approx(np.median(X[X > 0]) / 40.0)
    assert HIKnSVM(n_epochs=2).fit(sp.csr_matrix(X), y).learning_rate_ == clf.learning_rate_
    assert HIKnSVM(n_epochs=2).fit(4.0 * X, y).learning_rate_ == pytest.approx(4.0 * clf.learning_rate_)
    assert HIKnSVM(n_epochs=2, learning_rate=0.5).fit(X, y).learning_rate_ == 0.5


@pytest.mark.parametrize("sparse", [False, True])
def test_problems_trained_together_equal_problems_trained_alone(sparse):
    """The SGD kernel trains a group of problems in one pass: same numbers as one by one."""
    X, y01 = histograms(12, n=60, d=25, n_classes=3)
    Y = np.where(y01[:, None] == np.arange(3), 1.0, -1.0)
    C = np.random.default_rng(0).uniform(0.5, 2.0, size=Y.shape)
    epochs = K.Epochs(np.array([3e-3] * 5 + [3e-4] * 5), 9)
    rows = matrix_arrays(sp.csr_matrix(X) if sparse else X)
    W, b, curve = np.zeros((25, 3)), np.zeros(3), np.zeros((10, 3))
    K.sgd(rows, K.HingeProblems(Y, C, 1e-2, 0.02, True), epochs, W, b, curve)
    for p in range(3):
        w, bias, one_curve = np.zeros((25, 1)), np.zeros(1), np.zeros((10, 1))
        one = K.HingeProblems(Y[:, p : p + 1].copy(), C[:, p : p + 1].copy(), 1e-2, 0.02, True)
        K.sgd(rows, one, epochs, w, bias, one_curve)
        assert np.count_nonzero(w) > 0
        assert_array_equal(W[:, p], w[:, 0])
        assert b[p] == bias[0]
        assert_array_equal(curve[:, p], one_curve[:, 0])


# ------------------------------------------------------------------ sklearn, persistence
def test_save_load_round_trip(tmp_path):
    X, y = histograms(12, n_classes=3)
    labels = np.array(["coast", "forest", "street"])[y]
    clf = HIKnSVM(learning_rate=1e-3, n_epochs=10, fit_intercept=True, random_state=0).fit(X, labels)
    path = save_model(tmp_path / "nsvm", clf, feature_set={"n_features": X.shape[1]})
    loaded, meta = load_model(path)
    assert isinstance(loaded, HIKnSVM) and meta["classifier"] == "nsvm"
    assert loaded.get_params() == clf.get_params()
    assert_array_equal(loaded.classes_, clf.classes_)
    assert_array_equal(loaded.decision_function(X), clf.decision_function(X))
    assert_array_equal(loaded.predict(X), clf.predict(X))
