"""Tests of MBKL (classifiers/mbkl.py): maths against slow references, Table 1, Step 1, API."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.svm import LinearSVC

from classify_images.classifiers import _mbkl_kernels as kern
from classify_images.classifiers.mbkl import MBKL, PAPER_SETTING, _balanced_allocation, initial_signs, kernel_rows
from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC
from classify_images.pipeline.training.model_file import load_model, save_model


def _paper(**params):
    """MBKL in the paper's setting (Algorithm 1; the defaults differ, see the module docstring)."""
    return MBKL(**{**PAPER_SETTING, **params})


def _blobs(n_per_class=30, n_features=6, n_classes=3, seed=0):
    rng = np.random.RandomState(seed)
    centres = rng.uniform(0, 3, size=(n_classes, n_features))
    X = np.vstack([c + rng.normal(scale=0.8, size=(n_per_class, n_features)) for c in centres])
    y = np.repeat(np.arange(n_classes), n_per_class)
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = _blobs()
    model = _paper(C_kernel=10.0, C=10.0, tol=1e-8, random_state=0).fit(X, y)
    return model, X, y


def _stump_outputs(model, X):
    """Slow reference: sigma_k(x) = [x_f > t] for the selected stumps, (n, K) of 0/1."""
    return (np.asarray(X, dtype=np.float64)[:, model.stump_features_] > model.stump_thresholds_).astype(float)


# ------------------------------------------------------------- explicit map / kernel
def test_explicit_map_reproduces_the_kernel(fitted):
    model, X, _ = fitted
    A, B = X[:7], X[20:31]
    sa, sb = _stump_outputs(model, A), _stump_outputs(model, B)
    kernel = np.zeros((A.shape[0], B.shape[0]))
    for i in range(A.shape[0]):
        for j in range(B.shape[0]):
            kernel[i, j] = sum(model.theta_[k] * (sa[i, k] == sb[j, k]) for k in range(model.theta_.size))
    np.testing.assert_allclose(model.explicit_map(A) @ model.explicit_map(B).T, kernel, rtol=1e-12)
    assert model.theta_.size > 5  # a non-trivial kernel


def test_numba_prediction_equals_explicit_phi_prediction(fitted):
    model, X, _ = fitted
    reference = model.explicit_map(X) @ model.coef_.T + model.intercept_
    np.testing.assert_allclose(model.decision_function(X), reference, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(model.decision_function(sp.csr_matrix(X)), reference, rtol=1e-10, atol=1e-10)
    X32 = X.astype(np.float32)
    reference32 = model.explicit_map(X32) @ model.coef_.T + model.intercept_
    np.testing.assert_allclose(model.decision_function(X32), reference32, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("setting", [PAPER_SETTING, {"learn_theta": False}, {}], ids=["paper", "theta=1", "defaults"])
def test_step2_equals_the_svm_on_phi(setting):
    """Training on psi (half the columns) gives the same classifier as the SVM on Eq. 4's phi."""
    X, y = _blobs(seed=1)
    model = MBKL(**{**setting, "C": 3.0, "C_kernel": 10.0}, tol=1e-10, random_state=3).fit(X, y)
    phi = model.explicit_map(X) * np.sqrt(2.0 / model.theta_.sum())  # the unit-norm scaling of C
    svm = QuadraticHingeSVC(C=3.0, tol=1e-10, max_iter=5000).fit(phi, y)
    # psi is float32, so compare objectives tightly and decision values to float32 accuracy
    ours = QuadraticHingeSVC(C=3.0).fit(phi, y)
    scale = np.sqrt(2.0 / model.theta_.sum())
    ours.coef_, ours.intercept_ = model.coef_ / scale, model.intercept_
    assert ours.objective(phi, y) == pytest.approx(svm.objective(phi, y), rel=1e-5)
    np.testing.assert_allclose(model.decision_function(X), svm.decision_function(phi), atol=2e-3)
    # the optimum on phi has c0 = -c1 (what Step 2 stores)
    np.testing.assert_allclose(svm.coef_[:, 0::2], -svm.coef_[:, 1::2], atol=1e-3)


# ------------------------------------------------------------- Table 1
# one test per cell: p of t_p = 10 positives, n of t_n = 20 negatives fire the stump
@pytest.mark.parametrize(
    "p, n, expected",
    [
        (5, 10, 0),  # p/tp >= .5, n/tn >= .5  -> a = 0 (boundary values included)
        (9, 20, 0),
        (4, 10, -1),  # p/tp < .5, n/tn >= .5  -> fires on the negatives: votes against
        (0, 20, -1),
        (5, 9, 1),  # p/tp >= .5, n/tn < .5  -> fires on the positives: votes for
        (10, 0, 1),
        (4, 9, 0),  # p/tp < .5, n/tn < .5   -> a = 0
        (0, 0, 0),
    ],
)
def test_table1_cell(p, n, expected):
    a = initial_signs(np.array([[p]]), np.array([10]), np.array([[n]]), np.array([20]))
    assert a.dtype == np.int8 and a[0, 0] == expected


@pytest.mark.parametrize("p, n, expected", [(4, 2, 1), (4, 8, 0), (4, 9, -1), (9, 17, 1), (9, 19, -1), (0, 0, 0)])
def test_balanced_rule(p, n, expected):
    """Our optional Step-0 rule: sign(p/t_p - n/t_n) (t_p = 10, t_n = 20)."""
    a = initial_signs(np.array([[p]]), np.array([10]), np.array([[n]]), np.array([20]), rule="balanced")
    assert a[0, 0] == expected


def test_table1_sign_agrees_with_eq8_on_a_separating_stump():
    """A stump firing exactly on the positives must score them +a > 0 (Eq. 8): a = +1."""
    X = np.array([[0.0], [0.1], [0.9], [1.0]])
    y = np.array([0, 0, 1, 1])
    fired = (X[:, 0] > 0.5).astype(int)
    a = initial_signs(
        np.array([[fired[y == 1].sum()]]), np.array([2]), np.array([[fired[y == 0].sum()]]), np.array([2])
    )
    scores = np.where(fired == 1, a[0, 0], -a[0, 0])  # Eq. 8: +a when sigma = 1, -a otherwise
    assert np.all(np.sign(scores) == np.where(y == 1, 1, -1))


def _step1_problem(X, y, n_stumps=200, seed=0):
    model = MBKL(n_stumps=n_stumps)
    rng = np.random.RandomState(seed)
    features, thresholds = model._random_stumps(X, n_stumps, rng)
    Xc = sp.csc_matrix(X)
    bits = kern.stump_bits_csc(
        Xc.indptr.astype(np.int64), Xc.indices.astype(np.int64), Xc.data, X.shape[0], features, thresholds
    )
    counts = kern.fired_counts(bits, y, 3)
    sizes = np.bincount(y)
    signs = initial_signs(counts, sizes, counts.sum(1, keepdims=True) - counts, sizes.sum() - sizes)
    active = np.flatnonzero(np.any(signs != 0, axis=1))
    rows = kernel_rows(y, 3, 2.0, None, rng)
    return bits, signs, active, rows


def test_printed_table1_signs_would_zero_theta():
    """With the sign cells swapped (our text copy of Table 1), Step 1 gives (almost) no theta > 0."""
    X, y = _blobs(seed=2)
    bits, signs, active, rows = _step1_problem(X, y)
    w_ours, _ = kern.l1r_l2svc_stumps(kern.StumpColumns(bits, signs, active, *rows), 0.1, 1e-4, 1000, 0)
    printed_columns = kern.StumpColumns(bits, (-signs).astype(np.int8), active, *rows)
    w_printed, _ = kern.l1r_l2svc_stumps(printed_columns, 0.1, 1e-4, 1000, 0)
    ours, printed = w_ours[:-1], w_printed[:-1]
    assert (ours > 0).sum() >= 10 and np.maximum(ours, 0).sum() >= 0.9 * np.abs(ours).sum()
    assert (printed > 0).sum() == 0 and (printed < 0).sum() >= 10


# ------------------------------------------------------------- Step 1
def test_step1_solver_matches_liblinear():
    """Our port reaches LIBLINEAR's -s 5 objective on the explicit s(x) matrix."""
    X, y = _blobs(seed=4)
    bits, signs, active, (sample, label, ptr) = _step1_problem(X, y, n_stumps=80)
    problem = np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
    S = signs[active][:, problem].T * (2.0 * bits[active][:, sample].T - 1.0)  # s_k(x) per row
    C = 0.5

    def objective(w, b):
        return np.abs(w).sum() + abs(b) + C * np.sum(np.maximum(0, 1 - label * (S @ w + b)) ** 2)

    w, _ = kern.l1r_l2svc_stumps(kern.StumpColumns(bits, signs, active, sample, label, ptr), C, 1e-6, 5000, 0)
    ref = LinearSVC(penalty="l1", loss="squared_hinge", dual=False, C=C, tol=1e-8, max_iter=10000).fit(S, label)
    ours, theirs = objective(w[:-1], w[-1]), objective(ref.coef_[0], ref.intercept_[0])
    assert ours == pytest.approx(theirs, rel=1e-5)
    assert np.any(w[:-1] < 0)  # the clipping of Step 1 has something to do here


def test_theta_non_negative_after_step1(fitted):
    model, _, _ = fitted
    assert model.theta_.dtype == np.float64 and np.all(model.theta_ > 0)
    assert 0 < model.theta_.size <= model.n_stumps_step0_ <= model.n_stumps_
    assert model.n_iter_kernel_ >= 1


def test_kernel_rows_are_class_balanced():
    y = np.repeat(np.arange(4), [10, 20, 30, 40])
    sample, label, ptr = kernel_rows(y, 4, 2.0, None, np.random.RandomState(0))
    assert ptr[0] == 0 and ptr[-1] == sample.size and np.all(np.diff(ptr) > 0)
    for c in range(4):
        rows = slice(ptr[c], ptr[c + 1])
        pos, neg = sample[rows][label[rows] == 1], sample[rows][label[rows] == -1]
        assert np.all(y[pos] == c) and pos.size == (y == c).sum()
        neg_classes = np.bincount(y[neg], minlength=4)
        assert neg_classes[c] == 0 and neg_classes.sum() == min(2 * (y == c).sum(), (y != c).sum())
        others, caps = np.delete(neg_classes, c), np.delete(np.bincount(y), c)
        # as even as the class sizes allow: classes not exhausted differ by at most one
        below = others[others < caps]
        assert below.size == 0 or (below.max() - below.min() <= 1 and below.min() >= others.max() - 1)
    capped = kernel_rows(y, 4, 2.0, 90, np.random.RandomState(0))[0]
    assert capped.size <= 90 + 4
    assert _balanced_allocation(7, np.array([1, 10, 10])).tolist() == [1, 3, 3]


# ------------------------------------------------------------- options and API
def test_theta_one_option_keeps_every_stump():
    X, y = _blobs(seed=5)
    model = MBKL(n_stumps=40, learn_theta=False, random_state=0).fit(X, y)
    assert model.theta_.size == model.n_stumps_ == 40
    assert np.all(model.theta_ == 1.0) and model.n_iter_kernel_ == 0


def test_adapts_where_linear_fails():
    """Quadrant AND: a learnt step function per dimension beats a linear boundary.

    (The stump kernel is additive over dimensions, so XOR-like problems, whose
    per-dimension marginals carry no information, are out of its reach.)
    """
    rng = np.random.RandomState(1)
    X = rng.uniform(0, 1, size=(600, 2))
    y = np.all(X > 0.5, axis=1).astype(int)
    Xtr, ytr, Xte, yte = X[:300], y[:300], X[300:], y[300:]
    mbkl = MBKL(n_stumps=200, C=10.0, C_kernel=10.0, random_state=0).fit(Xtr, ytr)
    linear = QuadraticHingeSVC(C=10.0).fit(Xtr, ytr)
    assert mbkl.score(Xte, yte) >= 0.97
    assert linear.score(Xte, yte) <= mbkl.score(Xte, yte) - 0.05


def test_sparse_and_dense_training_agree(fitted):
    model, X, y = fitted
    X = X.copy()
    X[X < 1.0] = 0.0  # make it sparse-ish
    dense = MBKL(random_state=0).fit(X, y)
    sparse = MBKL(random_state=0).fit(sp.csr_matrix(X), y)
    np.testing.assert_array_equal(dense.stump_thresholds_, sparse.stump_thresholds_)
    np.testing.assert_allclose(
        dense.decision_function(X), sparse.decision_function(sp.csr_matrix(X)), rtol=1e-6, atol=1e-8
    )


def test_deterministic():
    X, y = _blobs(seed=6)
    a = MBKL(random_state=7).fit(X, y)
    b = MBKL(random_state=7).fit(X, y)
    for name in MBKL._fitted_arrays:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    c = MBKL(random_state=8).fit(X, y)
    assert not np.array_equal(a.stump_thresholds_[:5], c.stump_thresholds_[:5])


def test_save_load_round_trip(tmp_path, fitted):
    model, X, _ = fitted
    path = save_model(tmp_path / "mbkl", model, feature_set={"n_features": X.shape[1]})
    loaded, meta = load_model(path)
    assert type(loaded) is MBKL and meta["classifier"] == "mbkl"
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))
    np.testing.assert_array_equal(loaded.stump_features_, model.stump_features_)
    np.testing.assert_array_equal(loaded.theta_, model.theta_)
    assert loaded.get_params() == model.get_params()


def test_two_classes_decision_shape():
    X, y = _blobs(n_classes=2, seed=8)
    model = MBKL(random_state=0).fit(X, y)
    assert model.decision_function(X).shape == (X.shape[0],) and model.coef_.shape[0] == 1
    assert model.score(X, y) > 0.9


def test_no_stump_selected_gives_a_bias_only_model(tmp_path):
    X, y = _blobs(seed=9)
    model = MBKL(C_kernel=1e-6, random_state=0).fit(X, y)  # the l1 term wins: theta = 0
    assert model.theta_.size == 0 and model.coef_.shape == (3, 0)
    scores = model.decision_function(X)
    np.testing.assert_allclose(scores, np.broadcast_to(model.intercept_, scores.shape))
    loaded, _ = load_model(save_model(tmp_path / "empty", model))
    np.testing.assert_array_equal(loaded.decision_function(X), scores)
