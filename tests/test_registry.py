"""The classifier registry (classifiers/registry.py): names, parameters from the command line."""

import pytest

from classify_images.classifiers import registry
from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC


@pytest.mark.parametrize(
    "text,expected",
    [
        ("C=0.01", ("C", 0.01)),
        ("p=-8", ("p", -8)),
        ("max_iter=100", ("max_iter", 100)),
        ("tol=1e-5", ("tol", 1e-5)),
        ("fit_intercept=false", ("fit_intercept", False)),
        ("fit_intercept=True", ("fit_intercept", True)),
        ("class_weight=none", ("class_weight", None)),
        ("class_weight=balanced", ("class_weight", "balanced")),
        ("nodes=chebyshev", ("nodes", "chebyshev")),
        (" levels = (1, 2) ", ("levels", (1, 2))),
        ("class_weight={0: 2.0}", ("class_weight", {0: 2.0})),
        ("name=a=b", ("name", "a=b")),
        ("empty=", ("empty", "")),
    ],
)
def test_parse_param(text, expected):
    key, value = registry.parse_param(text)
    assert (key, value) == expected
    assert type(value) is type(expected[1])


@pytest.mark.parametrize("text", ["C", "=3", " =3", ""])
def test_parse_param_rejects_malformed(text):
    with pytest.raises(ValueError, match="key=value"):
        registry.parse_param(text)


def test_make_classifier():
    estimator = registry.make_classifier("linear", {"C": 3.0, "tol": 1e-3})
    assert isinstance(estimator, QuadraticHingeSVC) and estimator.C == 3.0 and estimator.tol == 1e-3
    assert registry.classifier_name(estimator) == "linear"
    assert registry.classifier_class("linear") is QuadraticHingeSVC


def test_make_classifier_unknown_param_lists_valid_ones():
    with pytest.raises(ValueError) as info:
        registry.make_classifier("linear", {"gamma": 1.0})
    message = str(info.value)
    assert "'gamma'" in message and "'linear'" in message and "max_iter" in message and "\n" not in message


def test_unknown_classifier_lists_names():
    with pytest.raises(ValueError, match="unknown classifier 'svm'.*linear"):
        registry.make_classifier("svm")
