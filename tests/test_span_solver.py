"""The span solver of the linear SVM: the optimum of the primal L-BFGS, no row threshold, one Gram matrix for many C.

Reference: ``solver="features"``, L-BFGS on ``(W, b)`` themselves (the slow obvious solver of the
same objective), run to ``tol=1e-10``.  Tolerance: objectives within ``1e-9`` relative, weights
within ``2e-5`` (float64 rows; float16 rows: the objective within ``1e-6``, its float32 Gram matrix).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.classifiers import quadratic_hinge
from classify_images.classifiers._half import half_to_float32, row_squared_norms
from classify_images.classifiers.eigenbasis import gram_matrix, reused_gram
from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC
from classify_images.classifiers.span import SpanBasis, span_bytes


def _rows(n, d, n_classes=4, seed=0):
    """Non-negative, sparse-ish, unit-L2 rows with a class signal (Fisher-vector-like)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    X = np.abs(rng.standard_normal((n, d))) * (rng.random((n, d)) < 0.3)
    X[np.arange(n), y] += 2.0
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def _reference(X, y, **params):
    return QuadraticHingeSVC(solver="features", tol=1e-10, max_iter=20000, **params).fit(X, y)


@pytest.mark.parametrize("shape", [(60, 300), (300, 60)], ids=["n<d", "n>d"])
@pytest.mark.parametrize(
    "params",
    [{}, {"class_weight": "balanced"}, {"penalize_intercept": True, "C": 3.0}, {"fit_intercept": False, "C": 0.5}],
    ids=["default", "balanced", "penalised-bias", "no-bias"],
)
def test_span_solver_reaches_the_primal_lbfgs_optimum(shape, params):
    X, y = _rows(*shape)
    X[5] = X[3] + X[4]  # rank deficient when n <= d
    y = y.copy()
    y[: shape[0] // 3] = 0  # unequal classes: class weights differ
    span = QuadraticHingeSVC(solver="span", tol=1e-10, **params).fit(X, y)
    reference = _reference(X, y, **params)
    assert span.objective_ == pytest.approx(reference.objective_, rel=1e-9)
    np.testing.assert_allclose(span.coef_, reference.coef_, atol=2e-5)
    np.testing.assert_allclose(span.intercept_, reference.intercept_, atol=2e-5)


def test_span_solver_on_sparse_and_sample_weighted_rows():
    X, y = _rows(50, 200, seed=1)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, y.size)
    span = QuadraticHingeSVC(solver="span", tol=1e-10).fit(sp.csr_matrix(X), y, sample_weight=weights)
    reference = QuadraticHingeSVC(solver="features", tol=1e-10, max_iter=20000).fit(X, y, sample_weight=weights)
    assert span.objective_ == pytest.approx(reference.objective_, rel=1e-9)
    np.testing.assert_allclose(span.coef_, reference.coef_, atol=2e-5)


def test_float16_rows_are_read_as_they_are_and_give_the_optimum_of_their_values():
    X, y = _rows(80, 400, seed=2)
    half = X.astype(np.float16)
    span = QuadraticHingeSVC(solver="span", tol=1e-9).fit(half, y)
    reference = _reference(half.astype(np.float64), y)
    assert span.objective_ == pytest.approx(reference.objective_, rel=1e-6)
    np.testing.assert_allclose(span.coef_, reference.coef_, atol=1e-4)
    np.testing.assert_allclose(
        span.decision_function(half), reference.decision_function(X.astype(np.float16)), atol=1e-3
    )


def test_no_row_count_switches_to_a_slower_solver(monkeypatch):
    """Around the old 6000-row threshold, and far past it, "auto" keeps the span solver while it fits."""
    monkeypatch.setattr(quadratic_hinge, "span_memory_budget", lambda: 64 << 30)  # a 128 GiB machine
    model = QuadraticHingeSVC()
    for n in (5999, 6000, 6001, 6060, 20000, 40000):
        assert model.solver_for(_Shape(n, 262_144)) == "span"


def test_auto_hands_over_to_the_feature_space_only_past_the_memory_budget(monkeypatch):
    monkeypatch.setattr(quadratic_hinge, "span_memory_budget", lambda: span_bytes(1000, 10**6))
    model = QuadraticHingeSVC()
    assert model.solver_for(_Shape(1000, 10**6)) == "span"
    assert model.solver_for(_Shape(1001, 10**6)) == "features"
    assert model.solver_for(_Shape(10**6, 1000)) == "span"  # n > d: X^T X, d x d


class _Shape:
    """Only a shape, as ``solver_for`` reads it."""

    def __init__(self, n, d):
        self.shape = (n, d)


@pytest.mark.parametrize("shape", [(12, 30), (30, 12)], ids=["n<d", "n>d"])
def test_span_basis_is_an_isometry_onto_the_span(shape):
    rng = np.random.default_rng(5)
    n, d = shape
    X = rng.standard_normal((n, d))
    X[5] = X[3] + X[4]
    basis = SpanBasis(X)
    assert basis.rank == min(n, d) - (1 if n <= d else 0)
    B = rng.standard_normal((basis.rank, 3))
    W = basis.weights(X, B)
    np.testing.assert_allclose(basis.rows(X @ W), basis.Z @ B, atol=1e-9)
    np.testing.assert_allclose(np.sum(W * W), np.sum(B * B), rtol=1e-9)
    moment = np.tril(basis.second_moment())
    np.testing.assert_allclose(moment, np.tril(np.asarray(basis.Z).T @ basis.Z), atol=1e-9)


def test_preconditioner_makes_the_all_active_hessian_the_identity():
    X, _ = _rows(40, 120)
    basis = SpanBasis(X)
    R = basis.preconditioner(0.7)
    Z = basis.Z
    H = np.eye(basis.rank) + 1.4 * Z.T @ Z
    Rinv = np.linalg.inv(R)
    np.testing.assert_allclose(Rinv.T @ H @ Rinv, np.eye(basis.rank), atol=1e-8)


def test_span_and_eigenbasis_take_the_same_iterations():
    """The same preconditioned Hessian in a rotated basis: L-BFGS's iterates match (up to rounding)."""
    X, y = _rows(70, 250, n_classes=5)
    span = QuadraticHingeSVC(solver="span", tol=1e-8).fit(X, y)
    eigen = QuadraticHingeSVC(solver="eigen", tol=1e-8).fit(X, y)
    assert abs(span.n_iter_ - eigen.n_iter_) <= 2
    assert span.objective_ == pytest.approx(eigen.objective_, rel=1e-9)


def test_many_C_share_one_gram_matrix_and_one_factorisation(monkeypatch):
    from classify_images.classifiers import span as span_module

    X, y = _rows(50, 200)
    K = gram_matrix(X)
    built = []
    original = span_module.SpanBasis.__init__

    def counted(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(span_module.SpanBasis, "__init__", counted)
    with reused_gram(X, K):
        models = [QuadraticHingeSVC(C=C, solver="span", tol=1e-9).fit(X, y) for C in (0.1, 1.0, 10.0)]
    assert len(built) == 1
    for C, model in zip((0.1, 1.0, 10.0), models):
        alone = QuadraticHingeSVC(C=C, solver="span", tol=1e-9).fit(X, y)
        assert model.objective_ == pytest.approx(alone.objective_, rel=1e-9)
    np.testing.assert_array_equal(K, gram_matrix(X))  # the shared Gram matrix is not overwritten


def test_gram_matrix_of_float32_and_float16_rows_by_float32_products():
    rng = np.random.default_rng(3)
    X = np.abs(rng.standard_normal((30, 9000))).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    for rows in (X, X.astype(np.float16)):
        exact = rows.astype(np.float64) @ rows.astype(np.float64).T
        K = gram_matrix(rows)
        assert K.dtype == np.float64
        np.testing.assert_allclose(K, exact, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(K, K.T)


def test_half_conversion_and_norms_match_numpy_bit_for_bit():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    converted = half_to_float32(bits)
    np.testing.assert_array_equal(converted, bits.astype(np.float32))  # NaNs compare equal here
    finite = np.nan_to_num(bits, nan=0.0, posinf=0.0, neginf=0.0)
    np.testing.assert_allclose(row_squared_norms(finite), np.einsum("ij,ij->i", finite, finite, dtype=np.float64))


def test_non_finite_float16_rows_are_refused():
    X, y = _rows(20, 50)
    X = X.astype(np.float16)
    X[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        QuadraticHingeSVC().fit(X, y)


def test_float32_rows_with_a_large_C_still_reach_the_optimum():
    """A large C makes ``I + 2 s Z^T Z`` ill-conditioned; its float32 factor is only a preconditioner."""
    X, y = _rows(60, 300, seed=4)
    single = X.astype(np.float32)
    span = QuadraticHingeSVC(C=1e4, solver="span", tol=1e-8, max_iter=5000).fit(single, y)
    reference = _reference(single.astype(np.float64), y, C=1e4)
    assert span.objective_ == pytest.approx(reference.objective_, rel=1e-5)
    np.testing.assert_array_equal(span.predict(single), reference.predict(single))


def test_a_last_fit_factorises_the_given_gram_matrix_in_place_and_holds_less():
    """``reused_gram(..., last_fit=True)`` (a search's final fit): the same model bit for bit as
    with the Gram matrix kept for other fits, the factor written into the given matrix (no
    ``n x n`` copy), nothing kept for a next fit, and a traced peak at least one float64 ``n x n``
    matrix lower (a kept fit holds the copy, ``Z^T Z`` and, while forming the weights, ``Z`` and
    ``R^{-1}``)."""
    import tracemalloc

    from classify_images.classifiers.eigenbasis import derived_from_gram

    X, y = _rows(300, 1500)
    X = X.astype(np.float32)
    K = gram_matrix(X)
    peaks, models = {}, {}
    for last_fit in (False, True):
        given = K.copy(order="F")
        tracemalloc.start()
        try:
            with reused_gram(X, given, last_fit=last_fit):
                assert (derived_from_gram(X) is None) == last_fit
                models[last_fit] = QuadraticHingeSVC(C=1.0, solver="span").fit(X, y)
            peaks[last_fit] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert np.array_equal(given, K) != last_fit  # written into only when given up
    np.testing.assert_array_equal(models[True].coef_, models[False].coef_)
    np.testing.assert_array_equal(models[True].intercept_, models[False].intercept_)
    assert peaks[True] <= peaks[False] - 8 * 300 * 300, peaks


def test_a_rank_far_below_the_rows_keeps_a_copy_of_its_factor_and_the_optimum():
    """Rows of rank 20 repeated to 200 (``L_11`` copied out of the ``n x n`` factor): the optimum
    of the feature-space solver, and of the full-rank path's view of the factor."""
    base, y = _rows(20, 300)
    X = np.repeat(base, 10, axis=0)
    y = np.repeat(y, 10)
    basis = SpanBasis(X)
    assert basis.rank == 20 and basis._L11.flags.f_contiguous and basis._L11.shape == (20, 20)
    span = QuadraticHingeSVC(solver="span", tol=1e-10, max_iter=20000).fit(X, y)
    assert span.objective_ == pytest.approx(_reference(X, y).objective_, rel=1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_triangular_products_are_the_dense_ones(dtype):
    """The span objective multiplies each block of rows of the lower trapezoidal ``Z`` by its
    first columns only, and ``B = R^{-1} Theta``, ``R^{-T} grad`` by ``?trmm``: value and gradient
    equal the dense products' (reference: ``Z`` marked not trapezoidal, ``np.linalg.inv(R)``)."""
    from classify_images.classifiers.span import SpanObjective

    X, y = _rows(90, 400)
    X = X.astype(dtype)
    basis = SpanBasis(X)
    assert basis.lower_trapezoidal
    np.testing.assert_array_equal(np.triu(basis.Z, 1), 0.0)  # rows in pivot order: zero beyond the diagonal
    Y = np.where(y[:, None] == np.arange(4), 1.0, -1.0)
    R = basis.preconditioner(0.5)
    R_dense = np.array(R, dtype=np.float64)
    objectives = {
        trapezoidal: SpanObjective(
            basis.Z,
            basis.rows(Y),
            1.0,
            np.array(R),
            fit_intercept=True,
            intercept_penalty=0.0,
            intercept_scale=np.full(4, 0.5),
            lower_trapezoidal=trapezoidal,
        )
        for trapezoidal in (False, True)
    }
    theta = np.random.default_rng(2).standard_normal(basis.rank * 4 + 4)
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    B, _ = objectives[True].unpack(theta)
    np.testing.assert_allclose(
        B, np.linalg.inv(R_dense) @ theta[:-4].reshape(-1, 4), rtol=rtol, atol=rtol * np.abs(B).max()
    )
    (value, grad), (value_t, grad_t) = objectives[False].flat(theta), objectives[True].flat(theta)
    assert value_t == pytest.approx(value, rel=rtol)
    np.testing.assert_allclose(grad_t, grad, rtol=rtol, atol=rtol * np.abs(grad).max())
    for objective in objectives.values():
        objective.block_bytes = 1  # one row a block: the first row's product has one column
    assert objectives[True].flat(theta)[0] == pytest.approx(value, rel=rtol)


def test_span_evaluations_run_on_one_blas_thread_and_feature_space_ones_on_the_callers(monkeypatch):
    """The span objective's products are small (``n x r`` by ``r x P``): its evaluations run with
    one BLAS thread (a second only spins between them); the feature-space objective's products
    are the rows' and keep the caller's threads.  Recorded inside each evaluation."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from classify_images.classifiers import _quadratic_hinge_objective as objective_module

    seen = {}
    evaluate = objective_module.QuadraticHingeObjective.value_and_grad

    def recording(self, W, b):
        counts = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
        seen.setdefault(type(self).__name__, set()).update(counts)
        return evaluate(self, W, b)

    monkeypatch.setattr(objective_module.QuadraticHingeObjective, "value_and_grad", recording)
    X, y = _rows(60, 300)
    with threadpool_limits(2, user_api="blas"):
        callers = {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}
        QuadraticHingeSVC(solver="span").fit(X, y)
        QuadraticHingeSVC(solver="features").fit(X, y)
    assert seen["SpanObjective"] == {1}
    assert seen["QuadraticHingeObjective"] == callers
