"""One validation vocabulary: scikit-learn's parameter constraints, for every setting.

The classifiers declare ``_parameter_constraints`` (:mod:`sklearn.utils._param_validation`:
:class:`Interval`, :class:`StrOptions`, :class:`Options`, ``None``, types), checked by
scikit-learn when they fit.  The configuration tables
(:mod:`~classify_images.pipeline.settings.config`) and the encoders' own parameters
(:mod:`~classify_images.coding.encoders`) declare their allowed values with the same constraint
objects, and :func:`check_value` checks a value against them and words a refusal in one style::

    <key> = <value>: expected <what the constraints allow>

for example ``codebook.n_neighbors = 0: expected an integer ≥ 1`` or
``pooling.method = 'median': expected one of 'average', 'max', 'signed_max'``.  Two rules go
beyond scikit-learn's, so that a setting read from TOML means what it says: a bool is not a
number (TOML's ``true`` is not 1), and a number is a Python ``int`` / ``float`` (a value of an
``Interval`` of reals is returned as a ``float``, so ``5`` and ``5.0`` hash alike).
:class:`Choices` is a :class:`StrOptions` that keeps the order it was given (its message lists
the values in that order).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from numbers import Integral, Real
from typing import Any

from sklearn.utils._param_validation import Interval, Options, StrOptions, make_constraint

__all__ = [
    "Interval",
    "Options",
    "StrOptions",
    "Choices",
    "Integral",
    "Real",
    "BOOLEAN",
    "MAX_INT",
    "ParameterValueError",
    "describe",
    "check_value",
]

#: Largest value of an integer setting (counts and sizes): far above any sensible value, and small
#: enough for every array index and for NumPy's integer types.  An ``Interval`` closed at it reads
#: "≥ low" in messages.
MAX_INT = 2**31 - 1


class Choices(StrOptions):
    """:class:`StrOptions` whose values keep the order given (messages list them in that order)."""

    def __init__(self, options: Iterable[str]) -> None:
        self.ordered = tuple(options)
        super().__init__(set(self.ordered))

    def __str__(self) -> str:
        return "one of " + ", ".join(map(repr, self.ordered))


#: ``true`` or ``false`` (Python bools only).
BOOLEAN = Options(bool, {True, False})


class ParameterValueError(ValueError):
    """A value outside its constraints (one line: ``key = value: expected ...``)."""


def _is_boolean(constraint: Any) -> bool:
    return isinstance(constraint, Options) and constraint.type is bool


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _describe_one(constraint: Any) -> str:
    if constraint is None or isinstance(constraint, type(None)):
        return "unset"
    if _is_boolean(constraint):
        return "true or false"
    if isinstance(constraint, Interval):
        kind = "an integer" if constraint.type is Integral else "a finite number"
        low, high = constraint.left, constraint.right
        if high == MAX_INT and constraint.type is Integral:
            high = None
        parts = []
        if low is not None:
            parts.append(("≥ " if constraint.closed in ("left", "both") else "> ") + _bound(low))
        if high is not None:
            parts.append(("≤ " if constraint.closed in ("right", "both") else "< ") + _bound(high))
        return f"{kind} {' and '.join(parts)}".rstrip() if parts else kind
    if isinstance(constraint, Options) and not isinstance(constraint, StrOptions):
        return " or ".join(sorted(map(repr, constraint.options)))
    if isinstance(constraint, type):
        return {list: "a list", tuple: "a tuple", dict: "a table"}.get(constraint, f"a {constraint.__name__}")
    return str(constraint)


def describe(constraints: Sequence[Any]) -> str:
    """What ``constraints`` allow, in words (``"an integer ≥ 1 or unset"``)."""
    words = [_describe_one(c) for c in constraints if c is not None]
    return " or ".join(words) if words else "nothing"


def _satisfies(value: Any, constraint: Any) -> bool:
    if constraint is None:
        return value is None
    if isinstance(value, bool) and not _is_boolean(constraint):
        return False  # a bool is not a number, nor a choice
    if isinstance(constraint, Interval):
        number = (int,) if constraint.type is Integral else (int, float)
        if not isinstance(value, number) or (isinstance(value, float) and not math.isfinite(value)):
            return False
    return make_constraint(constraint).is_satisfied_by(value)


def check_value(key: str, value: Any, constraints: Sequence[Any]) -> Any:
    """``value`` if it satisfies one of ``constraints`` (a value of an ``Interval`` of reals as a
    ``float``).

    Raises
    ------
    ParameterValueError
        ``"<key> = <value>: expected <describe(constraints)>"``.
    """
    for constraint in constraints:
        if _satisfies(value, constraint):
            if isinstance(constraint, Interval) and constraint.type is Real:
                return float(value)
            return value
    raise ParameterValueError(f"{key} = {value!r}: expected {describe(constraints)}")
