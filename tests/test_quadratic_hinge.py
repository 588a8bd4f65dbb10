"""QuadraticHingeSVC: objective and gradient, agreement with LinearSVC and a slow reference."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import check_grad, minimize
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from classify_images.classifiers._quadratic_hinge_objective import QuadraticHingeObjective, jacobi_scale, minimize_lbfgs
from classify_images.classifiers.base import ovr_targets
from classify_images.classifiers.eigenbasis import EigenBasis
from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC, paper_lambda_to_C

TIGHT = dict(tol=1e-10, max_iter=20000)


def _data(n=90, d=12, n_classes=3, seed=0, **kw):
    X, y = make_classification(
        n_samples=n,
        n_features=d,
        n_informative=min(d, 6),
        n_redundant=0,
        n_classes=n_classes,
        random_state=seed,
        **kw,
    )
    return X, y


def _slow_objective(W, b, X, Y, cost, rho):
    """Objective (1) written as the obvious double loop."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    n, P = Y.shape
    cost = np.broadcast_to(cost, (n, P))
    total = 0.5 * float(np.sum(W * W)) + 0.5 * rho * float(np.sum(b * b))
    for c in range(P):
        for i in range(n):
            margin = 1.0 - Y[i, c] * (X[i] @ W[:, c] + b[c])
            total += cost[i, c] * max(0.0, margin) ** 2
    return total


def _with_coef(model: QuadraticHingeSVC, coef, intercept) -> QuadraticHingeSVC:
    """A copy of ``model`` carrying another solver's coefficients (to evaluate its objective)."""
    other = QuadraticHingeSVC(**model.get_params())
    other.classes_, other.n_features_in_ = model.classes_, model.n_features_in_
    other.coef_ = np.asarray(coef, dtype=np.float64)
    other.intercept_ = np.broadcast_to(np.asarray(intercept, dtype=np.float64), (coef.shape[0],)).copy()
    return other


# ------------------------------------------------------------------ objective
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("fit_intercept,rho", [(False, 0.0), (True, 0.0), (True, 0.25)])
def test_gradient_matches_finite_differences(sparse, fit_intercept, rho):
    rng = np.random.default_rng(0)
    X, y = _data(n=30, d=7)
    X[rng.random(X.shape) < 0.4] = 0.0
    X = sp.csr_matrix(X) if sparse else X
    Y = ovr_targets(y, 3)
    cost = 0.7 * rng.uniform(0.5, 2.0, size=Y.shape)
    problem = QuadraticHingeObjective(X, Y, cost, fit_intercept=fit_intercept, intercept_penalty=rho)
    theta = 0.3 * rng.standard_normal(problem.n_params)
    error = check_grad(lambda t: problem.flat(t)[0], lambda t: problem.flat(t)[1], theta, epsilon=1e-7)
    assert error < 1e-5 * max(1.0, np.linalg.norm(problem.flat(theta)[1]))
    W, b = problem.unpack(theta)
    expected = _slow_objective(W, b, X, Y, cost, rho)
    assert problem.flat(theta)[0] == pytest.approx(expected, rel=1e-12)
    assert problem.value(W, b) == pytest.approx(expected, rel=1e-12)


def test_float32_gradients_in_reused_buffers_follow_the_active_rows(monkeypatch):
    """Dense float32 products go into buffers kept between evaluations (gathered rows, ``X_b^T G``):
    evaluations whose active rows differ, block by block, each give their own gradient."""
    from classify_images.classifiers import _quadratic_hinge_objective as objective

    monkeypatch.setattr(objective, "_BLOCK_BYTES", 40 * 6 * 4)  # blocks of 40 float32 rows
    rng = np.random.default_rng(2)
    X = rng.standard_normal((200, 6))
    w = rng.standard_normal(6)
    Y = np.where(X @ w > 0, 1, -1).astype(np.int8)[:, None]
    problem = QuadraticHingeObjective(X.astype(np.float32), Y, 0.8)
    for length, b in ((5.0, 0.1), (0.5, -0.2), (5.0, 0.1), (2.0, 0.0), (0.0, 0.0)):
        W = length * (w / np.linalg.norm(w))[:, None]
        b = np.array([b])
        _, grad_W, grad_b = problem.value_and_grad(W, b)
        G = -2.0 * 0.8 * Y * np.maximum(1 - Y * (X @ W + b), 0)
        np.testing.assert_allclose(grad_W, W + X.T @ G, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(grad_b, G.sum(axis=0), rtol=1e-4, atol=1e-4)
    assert 0 < problem.n_gradient_rows < 5 * 200  # some blocks gathered their active rows


@pytest.mark.parametrize("sparse", [False, True])
def test_gradient_with_few_active_rows(sparse):
    """Few active margins (the row-subset branch of X^T G) still give the full gradient."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 6))
    w = rng.standard_normal(6)
    Y = np.where(X @ w > 0, 1, -1).astype(np.int8)[:, None]
    W = 5.0 * (w / np.linalg.norm(w))[:, None]
    b = np.array([0.1])
    active = np.count_nonzero(Y[:, 0] * (X @ W[:, 0] + b) < 1)
    assert 0 < active < 0.5 * 200
    problem = QuadraticHingeObjective(sp.csr_matrix(X) if sparse else X, Y, 0.8)
    _, grad_W, grad_b = problem.value_and_grad(W, b)
    G = -2.0 * 0.8 * Y * np.maximum(1 - Y * (X @ W + b), 0)
    np.testing.assert_allclose(grad_W, W + X.T @ G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad_b, G.sum(axis=0), rtol=1e-12)


def test_gradient_rows_counts_the_rows_the_gradient_product_reads(monkeypatch):
    """``n_gradient_rows`` against a row-by-row count of active margins per block, summed over
    evaluations: a block with fewer than half its rows active gathers them, else it is read whole."""
    from classify_images.classifiers import _quadratic_hinge_objective as objective

    rng = np.random.default_rng(1)
    n, d, P = 50, 16, 3
    monkeypatch.setattr(objective, "_BLOCK_BYTES", 8 * d * 4)  # blocks of 8 float32 rows
    X = rng.normal(size=(n, d)).astype(np.float32)
    Y = np.where(rng.integers(0, P, n)[:, None] == np.arange(P), 1.0, -1.0)
    X[:, :P] += 4.0 * (Y > 0)  # separable along the first P columns
    problem = QuadraticHingeObjective(X, Y, 1.0)
    separator = (2.0 * np.eye(d, P), np.full(P, -4.0))  # few active margins: blocks gather their rows
    cases = [(scale * rng.normal(size=(d, P)), scale * rng.normal(size=P)) for scale in (0.0, 0.3)] + [separator]
    expected_total = 0
    for W, b in cases:
        expected = 0
        for start in range(0, n, 8):
            rows = range(start, min(start + 8, n))
            active = sum(
                any(1.0 - Y[i, k] * (float(X[i] @ W[:, k].astype(np.float32)) + b[k]) > 0 for k in range(P))
                for i in rows
            )
            expected += active if active < 0.5 * len(rows) else len(rows)
        before = problem.n_gradient_rows
        problem.value_and_grad(W, b)
        assert problem.n_gradient_rows - before == expected
        expected_total += expected
    assert 0 < expected < 0.5 * n  # the separator's blocks were gathered, not read whole
    problem.value(W, b)  # no gradient, no rows counted
    assert problem.n_gradient_rows == expected_total


# ------------------------------------------------------- agreement LinearSVC
@pytest.mark.parametrize("solver", ["features", "eigen"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_agrees_with_linearsvc(solver, fit_intercept):
    """Same objective (penalised intercept = LIBLINEAR's) -> same optimum."""
    X, y = _data()
    ours = QuadraticHingeSVC(
        C=0.5,
        fit_intercept=fit_intercept,
        penalize_intercept=True,
        intercept_scaling=2.0,
        solver=solver,
        **TIGHT,
    ).fit(X, y)
    ref = LinearSVC(
        C=0.5,
        loss="squared_hinge",
        penalty="l2",
        fit_intercept=fit_intercept,
        intercept_scaling=2.0,
        tol=1e-12,
        max_iter=1_000_000,
    ).fit(X, y)
    theirs = _with_coef(ours, ref.coef_, ref.intercept_ if fit_intercept else 0.0)
    assert ours.objective_ == pytest.approx(theirs.objective(X, y), rel=1e-4)
    assert ours.objective(X, y) <= theirs.objective(X, y) * (1 + 1e-9)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=1e-4)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))


@pytest.mark.parametrize("n_classes,class_weight", [(3, "balanced"), (2, "balanced"), (3, {0: 2.0, 2: 0.5})])
def test_class_weight_matches_linearsvc(n_classes, class_weight):
    weights = [0.6, 0.3, 0.1] if n_classes == 3 else [0.8, 0.2]
    X, y = _data(n=120, d=8, n_classes=n_classes, seed=1, weights=weights)
    ours = QuadraticHingeSVC(C=0.3, fit_intercept=False, class_weight=class_weight, **TIGHT).fit(X, y)
    ref = LinearSVC(C=0.3, fit_intercept=False, class_weight=class_weight, tol=1e-12, max_iter=1_000_000).fit(X, y)
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X), atol=1e-4)


def test_unpenalised_intercept_matches_reference_per_class():
    """The ScSPM reference objective ``lambda ||w||^2 + sum sq-hinge`` (unregularised b),
    minimised class by class with a generic optimiser, has our minimiser at C = 1/(2 lambda)."""
    X, y = _data(n=70, d=6, seed=3)
    lam = 0.1
    ours = QuadraticHingeSVC(C=paper_lambda_to_C(lam), **TIGHT).fit(X, y)
    assert paper_lambda_to_C(lam) == 5.0
    Y = ovr_targets(y, 3).astype(float)
    for c in range(3):

        def reference(theta, yc=Y[:, c]):
            w, b = theta[:-1], theta[-1]
            return lam * w @ w + np.sum(np.maximum(0.0, 1.0 - yc * (X @ w + b)) ** 2)

        best = minimize(reference, np.zeros(7), method="BFGS", options={"gtol": 1e-10}).x
        np.testing.assert_allclose(ours.coef_[c], best[:-1], atol=1e-4)
        assert ours.intercept_[c] == pytest.approx(best[-1], abs=1e-4)


# --------------------------------------------------------- solvers and input
def test_eigen_and_feature_solvers_agree_when_d_exceeds_n():
    rng = np.random.default_rng(4)
    X = np.abs(rng.standard_normal((40, 150)))
    y = np.repeat(np.arange(4), 10)
    X[np.arange(40), y] += 3.0
    a = QuadraticHingeSVC(C=0.1, solver="features", tol=1e-8).fit(X, y)
    b = QuadraticHingeSVC(C=0.1, solver="eigen", tol=1e-8).fit(X, y)
    assert QuadraticHingeSVC().solver_for(X) == "span"  # "auto" picks the span of the rows here
    assert a.objective_ == pytest.approx(b.objective_, rel=1e-9)
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-5)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-5)


@pytest.mark.parametrize("shape", [(12, 30), (30, 12)], ids=["n<d", "n>d"])
@pytest.mark.parametrize("sparse", [False, True])
def test_eigenbasis_is_an_isometry_onto_the_span(shape, sparse):
    rng = np.random.default_rng(5)
    n, d = shape
    X = rng.standard_normal((n, d))
    X[5] = X[3] + X[4]  # rank deficient when n <= d
    rank = min(n, d) - (1 if n <= d else 0)
    basis = EigenBasis(sp.csr_matrix(X) if sparse else X)
    assert basis.rank == rank
    np.testing.assert_allclose(basis.Z.T @ basis.Z, np.diag(basis.eigenvalues), atol=1e-9)
    B = rng.standard_normal((basis.rank, 3))
    W = basis.weights(sp.csr_matrix(X) if sparse else X, B)
    np.testing.assert_allclose(X @ W, basis.Z @ B, atol=1e-9)
    np.testing.assert_allclose(np.sum(W * W), np.sum(B * B), rtol=1e-9)
    assert np.linalg.matrix_rank(np.column_stack([X.T, W])) == rank  # W lies in the span


@pytest.mark.parametrize("shape", [(60, 200), (200, 60)], ids=["n<d", "n>d"])
def test_preconditioner_cuts_iterations_on_ill_conditioned_histograms(shape):
    """L1-normalised histograms with a large C: same optimum, several times fewer iterations."""
    rng = np.random.default_rng(0)
    n, d = shape
    y = np.arange(n) % 3
    X = rng.random((n, d)) * (rng.random((n, d)) < 0.2)
    X[np.arange(n), y] += 0.5
    X /= X.sum(axis=1, keepdims=True)
    Y, C = ovr_targets(y, 3), 1000.0
    basis = EigenBasis(X)
    runs = []
    for scale in (
        None,
        jacobi_scale(basis.eigenvalues, C, n_samples=n, n_problems=3, fit_intercept=True, intercept_penalty=0.0),
    ):
        result, converged = minimize_lbfgs(QuadraticHingeObjective(basis.Z, Y, C, scale=scale), tol=1e-6, max_iter=5000)
        assert converged
        runs.append(result)
    plain, preconditioned = runs
    assert preconditioned.fun == pytest.approx(plain.fun, rel=1e-6)
    assert preconditioned.nit * 4 < plain.nit


@pytest.mark.parametrize("solver", ["features", "eigen"])
def test_dense_and_csr_give_the_same_model(solver):
    rng = np.random.default_rng(6)
    X, y = _data(n=80, d=30)
    X[rng.random(X.shape) < 0.7] = 0.0
    dense = QuadraticHingeSVC(C=1.0, solver=solver, **TIGHT).fit(X, y)
    csr = QuadraticHingeSVC(C=1.0, solver=solver, **TIGHT).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(dense.coef_, csr.coef_, atol=1e-7)
    np.testing.assert_allclose(dense.decision_function(X), csr.decision_function(sp.csr_matrix(X)), atol=1e-7)


def test_float32_input_reaches_tol_with_float64_refinement():
    """float32 products stall L-BFGS near the optimum; the float64 restart finishes the job."""
    X, y = _data(n=80, d=20)
    X32 = X.astype(np.float32)
    m64 = QuadraticHingeSVC(C=1.0, solver="features", tol=1e-8).fit(X32.astype(np.float64), y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m32 = QuadraticHingeSVC(C=1.0, solver="features", tol=1e-8).fit(X32, y)
    assert m32.objective_ == pytest.approx(m64.objective_, rel=1e-10)
    np.testing.assert_allclose(m32.decision_function(X32), m64.decision_function(X32), atol=1e-4)


def test_two_classes_decision_shape_and_sign():
    X, y = _data(n=60, d=5, n_classes=2, class_sep=2.0)
    labels = np.array(["cat", "dog"])[y]
    model = QuadraticHingeSVC(C=1.0).fit(X, labels)
    scores = model.decision_function(X)
    assert scores.shape == (60,) and model.coef_.shape == (1, 5) and model.intercept_.shape == (1,)
    np.testing.assert_array_equal(model.predict(X), np.where(scores > 0, "dog", "cat"))
    assert model.score(X, labels) > 0.8


def test_deterministic_and_convergence_warning():
    X, y = _data()
    a = QuadraticHingeSVC(C=1.0).fit(X, y)
    b = QuadraticHingeSVC(C=1.0).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        QuadraticHingeSVC(C=1.0, max_iter=2).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        QuadraticHingeSVC(C=1.0, tol=1e-6).fit(X, y)


def test_objective_rejects_unknown_labels():
    X, y = _data(n=30, d=4)
    model = QuadraticHingeSVC().fit(X, y)
    assert model.objective(X, y) == pytest.approx(model.objective_, rel=1e-6)
    with pytest.raises(ValueError, match="not among"):
        model.objective(X, y + 5)


def test_invalid_parameters_are_rejected():
    X, y = _data(n=30, d=4)
    with pytest.raises(ValueError, match="C"):
        QuadraticHingeSVC(C=0.0).fit(X, y)
    with pytest.raises(ValueError, match="solver"):
        QuadraticHingeSVC(solver="newton").fit(X, y)
