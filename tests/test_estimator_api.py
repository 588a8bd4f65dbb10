"""The four classifiers as scikit-learn users expect them, with their DEFAULT parameters.

Every check of :func:`sklearn.utils.estimator_checks.parametrize_with_checks` is its own
test.  The checks expected to fail are listed with their reason in :data:`EXPECTED_FAILURES`
(only sample-weight equivalence of the stochastic solvers, each tested here to what its
solver does give).  Also here: ``sample_weight`` (integer weights = repeated rows, zero
weight = dropped row) against each solver's own result, ``class_weight`` (same meaning on
all four, unknown class refused), non-finite input, ``n_jobs=0``, negative test values
clipped at prediction, and the numba warm-up.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from classify_images.classifiers import MBKL, HIKnSVM, PmSVM, QuadraticHingeSVC
from classify_images.classifiers.base import warm_up

DEFAULTS = [QuadraticHingeSVC(), PmSVM(), HIKnSVM(), MBKL()]

_SGD = (
    "stochastic sub-gradient steps (Algorithm 1): a repeated row is visited twice per epoch, "
    "a weighted row once with a larger step; tested to what it gives in test_estimator_api"
)
_MBKL = (
    "random stumps and Step 1's subsample count rows, not weights (documented); "
    "zero weights tested in test_estimator_api"
)
_TOL = (
    "iterative solver stopped at its tolerance: the weighted and the repeated problem have "
    "the same optimum, reached to tolerance, not to 1e-7; tested at a tight tol in test_estimator_api"
)
_SIGNED = (
    "this check feeds signed blobs whatever the positive_only input tag (scikit-learn 1.9); "
    "the same check on the blobs shifted to non-negative values: test_extreme_class_weight"
)
EXPECTED_FAILURES = {
    "HIKnSVM": {
        "check_sample_weight_equivalence_on_dense_data": _SGD,
        "check_sample_weight_equivalence_on_sparse_data": _SGD,
        "check_class_weight_classifiers": _SIGNED,
    },
    "MBKL": {
        "check_sample_weight_equivalence_on_dense_data": _MBKL,
        "check_sample_weight_equivalence_on_sparse_data": _MBKL,
    },
    "PmSVM": {
        "check_sample_weight_equivalence_on_dense_data": _TOL,
        "check_sample_weight_equivalence_on_sparse_data": _TOL,
        "check_class_weight_classifiers": _SIGNED,
    },
    "QuadraticHingeSVC": {
        "check_sample_weight_equivalence_on_dense_data": _TOL,
        "check_sample_weight_equivalence_on_sparse_data": _TOL,
    },
}


def _expected_failures(estimator) -> dict[str, str]:
    return EXPECTED_FAILURES.get(type(estimator).__name__, {})


#: The document that lists :data:`EXPECTED_FAILURES` for users (README links it).
CHECKS_DOC = "docs/estimator-checks.md"
_TABLE_START, _TABLE_END = "<!-- expected-failures: start -->", "<!-- expected-failures: end -->"


def expected_failures_table() -> str:
    """:data:`EXPECTED_FAILURES` as the Markdown table of :data:`CHECKS_DOC` (between its markers);
    print it with ``python -m tests.test_estimator_api`` after changing the list."""
    lines = [_TABLE_START, "| classifier | check expected to fail | why |", "|---|---|---|"]
    lines += [
        f"| `{name}` | `{check}` | {reason} |"
        for name, checks in sorted(EXPECTED_FAILURES.items())
        for check, reason in sorted(checks.items())
    ]
    return "\n".join(lines + [_TABLE_END])


def test_the_documented_expected_failures_are_the_tested_ones():
    from .conftest import REPO

    document = (REPO / CHECKS_DOC).read_text(encoding="utf-8")
    start, end = document.find(_TABLE_START), document.find(_TABLE_END)
    assert 0 <= start < end, f"{CHECKS_DOC} has lost its table markers"
    assert document[start : end + len(_TABLE_END)] == expected_failures_table(), (
        f"{CHECKS_DOC} does not list EXPECTED_FAILURES of tests/test_estimator_api.py: replace its table with "
        "the output of python -m tests.test_estimator_api"
    )


@parametrize_with_checks(DEFAULTS, expected_failed_checks=_expected_failures)
def test_sklearn_check_with_defaults(estimator, check):
    check(estimator)


#: The other code paths the former tuned checks covered: PmSVM-LUT, the linear SVM's feature-space solver.
VARIANTS = [PmSVM(lut_bins=1000), QuadraticHingeSVC(solver="features")]


@parametrize_with_checks(VARIANTS, expected_failed_checks=_expected_failures)
def test_sklearn_check_of_variants(estimator, check):
    check(estimator)


def test_defaults_are_the_constructor_defaults():
    """The checks above run on estimators with no parameter set."""
    for estimator in DEFAULTS:
        assert estimator.get_params() == type(estimator)().get_params()


# ------------------------------------------------------------------ data
def histograms(n: int = 60, d: int = 30, n_classes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    profiles = rng.random((n_classes, d)) ** 3
    X = rng.poisson(20 * profiles[y] + 0.3).astype(np.float64)
    X /= X.sum(axis=1, keepdims=True)
    return X, y


def _tight(estimator, tol=1e-10):
    params = estimator.get_params()
    tight = {k: v for k, v in (("tol", tol), ("max_iter", 100_000)) if k in params}
    return estimator.set_params(**tight)


#: PmSVM's stopping rule is the spread of a float32 projected gradient: below about 2e-7 it is
#: never reached (1e-7 and 1e-10 both run the 100 000 iterations, 5 s, and end 8e-5 of the
#: scale apart), while 1e-6 converges in ~150 iterations to 4e-6 of the scale.
PMSVM_TIGHT_TOL = 1e-6


EXACT_WEIGHTS = {
    # dual CD: C_i = C s_i is exactly the dual of the repeated rows; L-BFGS: weighted loss
    "linear": lambda: _tight(QuadraticHingeSVC()),
    "pmsvm": lambda: _tight(PmSVM(random_state=0), PMSVM_TIGHT_TOL),
    "pmsvm-lut": lambda: _tight(PmSVM(lut_bins=100, random_state=0), PMSVM_TIGHT_TOL),
}


@pytest.mark.parametrize("name", sorted(EXACT_WEIGHTS))
def test_integer_sample_weight_is_repeating_rows(name):
    X, y = histograms()
    weight = np.random.default_rng(1).integers(1, 4, size=y.size)
    weighted = EXACT_WEIGHTS[name]().fit(X, y, sample_weight=weight)
    repeated = EXACT_WEIGHTS[name]().fit(np.repeat(X, weight, axis=0), np.repeat(y, weight))
    assert weighted.C_ == pytest.approx(repeated.C_, rel=1e-12)  # "auto" weighs rows as repeats
    scale = np.abs(repeated.decision_function(X)).max()
    assert np.all(weighted.n_iter_ < 100_000) and np.all(repeated.n_iter_ < 100_000)  # converged
    assert_allclose(weighted.decision_function(X), repeated.decision_function(X), atol=2e-3 * scale)
    # and the weights matter: not the unweighted model
    plain = EXACT_WEIGHTS[name]().fit(X, y)
    assert np.abs(plain.decision_function(X) - repeated.decision_function(X)).max() > 2e-2 * scale


def test_hik_nsvm_integer_weights_approximate_repeats():
    """SGD: a weighted step is not two visits; the models agree in what they predict."""
    X, y = histograms(n=90)
    weight = np.random.default_rng(1).integers(1, 4, size=y.size)
    weighted = HIKnSVM(random_state=0).fit(X, y, sample_weight=weight)
    repeated = HIKnSVM(random_state=0).fit(np.repeat(X, weight, axis=0), np.repeat(y, weight))
    assert np.mean(weighted.predict(X) == repeated.predict(X)) >= 0.9


@pytest.mark.parametrize(
    "make",
    [QuadraticHingeSVC, lambda: PmSVM(random_state=0), lambda: HIKnSVM(random_state=0), lambda: MBKL(random_state=0)],
    ids=["linear", "pmsvm", "nsvm", "mbkl"],
)
def test_zero_sample_weight_is_dropping_the_row(make):
    X, y = histograms()
    weight = np.ones(y.size)
    weight[::7] = 0
    kept = weight > 0
    weighted = make().fit(X, y, sample_weight=weight)
    dropped = make().fit(X[kept], y[kept])
    assert_array_equal(weighted.decision_function(X), dropped.decision_function(X))


def test_negative_sample_weight_refused():
    X, y = histograms()
    with pytest.raises(ValueError, match="Negative values in data passed to `sample_weight`"):
        PmSVM().fit(X, y, sample_weight=-np.ones(y.size))


# ------------------------------------------------------------ class_weight
@pytest.mark.parametrize("make", [QuadraticHingeSVC, PmSVM, HIKnSVM, MBKL], ids=lambda c: c.__name__)
def test_class_weight_is_a_sample_weight_on_the_positives(make):
    """Same meaning on all four: in problem c, the rows of class c weigh w_c (LIBLINEAR's rule).

    With two classes (one problem) every row weighs its own class's weight, which is
    exactly ``sample_weight = w[y]`` (with a fixed ``C``: ``C="auto"`` weighs its mean by
    the sample weights, as repeated rows would, and not by the class weights).
    """
    X, y = histograms(n_classes=2)
    labels = np.array(["cat", "dog"])[y]
    params = make().get_params()
    kwargs = {"random_state": 0} if "random_state" in params else {}
    if params.get("C") == "auto":
        kwargs["C"] = 0.5
    by_class = make(class_weight={"dog": 3.0}, **kwargs).fit(X, labels)
    by_sample = make(**kwargs).fit(X, labels, sample_weight=np.where(labels == "dog", 3.0, 1.0))
    assert_allclose(by_class.decision_function(X), by_sample.decision_function(X), rtol=1e-12, atol=1e-12)
    unweighted = make(**kwargs).fit(X, labels)
    assert not np.allclose(unweighted.decision_function(X), by_class.decision_function(X))
    balanced = make(class_weight="balanced", **kwargs).fit(X, labels)
    assert balanced.decision_function(X).shape == (X.shape[0],)


@pytest.mark.parametrize("make", [PmSVM, HIKnSVM], ids=lambda c: c.__name__)
@pytest.mark.parametrize("n_centers", [2, 3])
def test_extreme_class_weight(make, n_centers):
    """scikit-learn's check_class_weight_classifiers, on its blobs made non-negative."""
    from sklearn.datasets import make_blobs
    from sklearn.model_selection import train_test_split

    X, y = make_blobs(centers=n_centers, random_state=0, cluster_std=20)
    X -= X.min()
    X_train, X_test, y_train, _ = train_test_split(X, y, test_size=0.5, random_state=0)
    weights = {0: 1000, **{k: 0.0001 for k in range(1, n_centers)}}
    model = make(class_weight=weights, random_state=0).fit(X_train, y_train)
    assert np.mean(model.predict(X_test) == 0) > 0.87


@pytest.mark.parametrize("make", [QuadraticHingeSVC, PmSVM, HIKnSVM, MBKL], ids=lambda c: c.__name__)
def test_unknown_class_in_class_weight(make):
    X, y = histograms()
    labels = np.array(["coast", "forest", "street"])[y]
    with pytest.raises(ValueError, match="'accordion'.*not among the training labels"):
        make(class_weight={"accordion": 2.0}).fit(X, labels)


# ------------------------------------------------------------ input checks
@pytest.mark.parametrize("make", [QuadraticHingeSVC, PmSVM, HIKnSVM, MBKL], ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_is_a_clear_error(make, bad):
    X, y = histograms()
    X[3, 4] = bad
    with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
        make().fit(X, y)
    model = make().fit(histograms()[0], y)
    with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
        model.predict(X)


@pytest.mark.parametrize("make", [PmSVM, HIKnSVM], ids=lambda c: c.__name__)
def test_n_jobs_zero_refused(make):
    X, y = histograms()
    with pytest.raises(ValueError, match="'n_jobs' parameter of .* must be an int in the range \\[1, inf\\)"):
        make(n_jobs=0).fit(X, y)


@pytest.mark.parametrize("make", [PmSVM, HIKnSVM], ids=lambda c: c.__name__)
def test_negative_test_values_are_clipped_to_zero(make):
    X, y = histograms()
    model = make(random_state=0).fit(X, y)
    shifted = X - 0.01
    assert_array_equal(model.decision_function(shifted), model.decision_function(np.maximum(shifted, 0)))
    with pytest.raises(ValueError, match="Negative values"):
        make().fit(shifted, y)


@pytest.mark.parametrize("make", [QuadraticHingeSVC, PmSVM, HIKnSVM, MBKL], ids=lambda c: c.__name__)
def test_min_max_scaler_pipeline_in_cross_val_score(make):
    """Test folds scaled with the training folds' min and max have small negatives: no nan."""
    rng = np.random.default_rng(0)
    X, y = histograms(n=90)
    X = X + rng.normal(0, 0.01, X.shape)  # any real-valued features
    scores = cross_val_score(make_pipeline(MinMaxScaler(), make()), X, y, cv=3, error_score="raise")
    assert np.all(np.isfinite(scores)) and scores.mean() > 0.5


def test_pmsvm_p_minus_infinity_is_the_intersection_kernel():
    from classify_images.classifiers.pmsvm import PolynomialApproximation

    approx = PolynomialApproximation.build(-np.inf, 2, "chebyshev", 1e-3)
    assert_allclose(approx.m_zero, np.minimum(approx.node_values, 1e-3))
    X, y = histograms()
    assert PmSVM(p=float("-inf")).fit(X, y).score(X, y) > 0.8


# ------------------------------------------------------------ numba warm-up
def _compiled_signatures() -> int:
    from numba.core.registry import CPUDispatcher

    from classify_images.classifiers import _hik_nsvm_kernels, _mbkl_kernels, _pmsvm_kernels, _rows

    count = 0
    for module in (_pmsvm_kernels, _hik_nsvm_kernels, _mbkl_kernels, _rows):
        for value in vars(module).values():
            if isinstance(value, CPUDispatcher):
                count += len(value.signatures)
    return count


@pytest.mark.parametrize(
    "make",
    [
        lambda: PmSVM(random_state=0),
        lambda: PmSVM(lut_bins=100, random_state=0),
        lambda: HIKnSVM(random_state=0),
        lambda: MBKL(random_state=0),
    ],
    ids=["pmsvm", "pmsvm-lut", "nsvm", "mbkl"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_warm_up_compiles_everything_fit_and_predict_use(make, dtype):
    """After :func:`warm_up`, the timed ``fit`` and ``predict`` compile nothing."""
    X, y = histograms(n=120, d=60)
    X = X.astype(dtype)
    estimator = make()
    warm_up(estimator, X, y)
    before = _compiled_signatures()
    estimator.fit(X, y).predict(X)
    assert _compiled_signatures() == before


if __name__ == "__main__":  # python -m tests.test_estimator_api: the table of CHECKS_DOC
    print(expected_failures_table())
