"""One validation vocabulary: configuration tables and encoder parameters declare their allowed
values with scikit-learn's constraints (as the classifiers do) and refuse in one style."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.utils._param_validation import make_constraint

from classify_images.coding.encoders import encoder_class, encoder_kinds
from classify_images.pipeline.settings.config import ConfigError, validate_config
from classify_images.validation import (
    BOOLEAN,
    MAX_INT,
    Choices,
    Integral,
    Interval,
    Options,
    ParameterValueError,
    Real,
    StrOptions,
    check_value,
    describe,
    to_sklearn,
)

CONSTRAINTS = [
    Interval(Integral, 1, None, closed="left"),
    Interval(Integral, 1, 384, closed="both"),
    Interval(Integral, None, None, closed="neither"),
    Interval(Real, 0, None, closed="left"),
    Interval(Real, 0, None, closed="neither"),
    Interval(Real, 0, 1, closed="right"),
    Interval(Real, None, 0, closed="both"),
    StrOptions({"a", "b"}),
    Choices(("b", "a")),
    Options(int, {0}),
    BOOLEAN,
]
VALUES = [True, False, 0, 1, 384, 385, -1, 0.0, 0.5, 1.0, -0.5, float("inf"), -float("inf"), float("nan")]
VALUES += [np.int64(3), np.float32(0.5), "a", "c", None, [1], (1,)]


@pytest.mark.parametrize("constraint", CONSTRAINTS, ids=lambda c: type(c).__name__)
def test_the_constraints_are_scikit_learns(constraint):
    """Same names, signatures and answers as scikit-learn's own classes (without importing it)."""
    theirs = make_constraint(to_sklearn(constraint))
    assert type(theirs).__name__ == type(constraint).__name__ or isinstance(constraint, Choices)
    for value in VALUES:
        assert constraint.is_satisfied_by(value) == theirs.is_satisfied_by(value), (constraint, value)


def test_reading_a_config_does_not_import_scikit_learn():
    import subprocess
    import sys

    code = (
        "import sys; from classify_images.pipeline.settings.config import validate_config; "
        "validate_config({'codebook': {'kind': 'llc', 'n_neighbors': 3}}); print('sklearn' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_check_value_speaks_scikit_learns_constraints_in_one_style():
    count = Interval(Integral, 1, MAX_INT, closed="both")
    assert check_value("k", 3, [count]) == 3
    assert check_value("x", 2, [Interval(Real, 0, None, closed="neither")]) == 2.0  # reals stored as float
    assert isinstance(check_value("x", 2, [Interval(Real, 0, None, closed="neither")]), float)
    assert check_value("s", "b", [Choices(("a", "b"))]) == "b"
    assert check_value("u", None, [count, None]) is None
    for bad, constraints, words in [
        (0, [count], "k = 0: expected an integer ≥ 1"),
        (True, [count], "k = True: expected an integer ≥ 1"),  # a bool is not a number
        (1, [BOOLEAN], "k = 1: expected true or false"),
        (float("inf"), [Interval(Real, 0, None, closed="left")], "k = inf: expected a finite number ≥ 0"),
        ("c", [Choices(("b", "a"))], "k = 'c': expected one of 'b', 'a'"),  # in the order declared
        (9, [Interval(Integral, 1, 8, closed="both"), None], "k = 9: expected an integer ≥ 1 and ≤ 8"),
    ]:
        with pytest.raises(ParameterValueError) as caught:
            check_value("k", bad, constraints)
        assert str(caught.value) == words
    assert isinstance(Choices(("a",)), StrOptions) and to_sklearn(Choices(("a",))).options == {"a"}
    assert describe([Interval(Integral, 1, MAX_INT, closed="both"), Choices(("all",)), Options(int, {0})]) == (
        "an integer ≥ 1 or one of 'all' or 0"
    )


def test_every_encoder_parameter_is_declared_with_scikit_learn_constraints():
    for kind in encoder_kinds():
        for f in dataclasses.fields(encoder_class(kind).Params):
            constraints = f.metadata["constraints"]
            assert constraints, (kind, f.name)
            for constraint in constraints:
                make_constraint(to_sklearn(constraint))  # scikit-learn's vocabulary, or it raises


def test_config_and_encoder_refusals_share_the_style():
    for raw, words in [
        ({"codebook": {"size": 1}}, "config: codebook.size = 1: expected an integer ≥ 2"),
        ({"codebook": {"kind": "llc", "n_neighbors": 0}}, "config: codebook.n_neighbors = 0: expected an integer ≥ 1"),
        ({"sift": {"smooth": 1}}, "config: sift.smooth = 1: expected true or false"),
        ({"dataset": {"test_per_class": -1}}, "expected an integer ≥ 1 or one of 'all' or 0"),
    ]:
        with pytest.raises(ConfigError) as caught:
            validate_config(raw)
        assert words in str(caught.value) and "\n" not in str(caught.value)
