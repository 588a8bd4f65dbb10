"""One validation vocabulary: scikit-learn's parameter constraints, for every setting.

The classifiers declare ``_parameter_constraints`` with :mod:`sklearn.utils._param_validation`'s
:class:`Interval`, :class:`StrOptions`, :class:`Options`, ``None`` and types, checked by
scikit-learn when they fit.  The configuration tables
(:mod:`~classify_images.pipeline.settings.config`) and the encoders' own parameters
(:mod:`~classify_images.coding.encoders`) declare their allowed values with the same
constraints — the classes here have scikit-learn's names, signatures and ``is_satisfied_by``
(``tests/test_validation.py`` checks them against scikit-learn's on a grid of values, and
:meth:`to_sklearn` gives scikit-learn's own object) but do not import scikit-learn, which would
add its import time to every command that reads a configuration.  :func:`check_value` checks a
value and words a refusal in one style::

    <key> = <value>: expected <what the constraints allow>

for example ``codebook.n_neighbors = 0: expected an integer ≥ 1`` or
``pooling.method = 'median': expected one of 'average', 'max', ...``.  Two rules go beyond
scikit-learn's, so that a setting read from TOML means what it says: a bool is not a number
(TOML's ``true`` is not 1), and a number is a finite Python ``int`` / ``float`` (a value of an
``Interval`` of reals is returned as a ``float``, so ``5`` and ``5.0`` hash alike).
:class:`Choices` is a :class:`StrOptions` that keeps the order it was given (its message lists
the values in that order).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from numbers import Integral, Real
from typing import Any

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
    "to_sklearn",
]

#: Largest value of an integer setting (counts and sizes): far above any sensible value, and small
#: enough for every array index and for NumPy's integer types.  An ``Interval`` closed at it reads
#: "≥ low" in messages.
MAX_INT = 2**31 - 1


class Interval:
    """scikit-learn's ``Interval(type, left, right, *, closed)``: a number of ``type`` (``Integral``
    or ``Real``) between ``left`` and ``right`` (None: unbounded), ``closed`` one of ``"left"``,
    ``"right"``, ``"both"``, ``"neither"``."""

    def __init__(self, type: type, left: float | None, right: float | None, *, closed: str) -> None:
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"closed must be 'left', 'right', 'both' or 'neither', not {closed!r}")
        self.type, self.left, self.right, self.closed = type, left, right, closed

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, self.type) or (isinstance(value, float) and math.isnan(value)):
            return False
        return self.within(value)

    def within(self, value: float) -> bool:
        """Whether the number ``value`` lies within the bounds (its type not checked)."""
        left_out = operator.lt if self.closed in ("left", "both") else operator.le
        right_out = operator.gt if self.closed in ("right", "both") else operator.ge
        left = -math.inf if self.left is None else self.left
        right = math.inf if self.right is None else self.right
        return not left_out(value, left) and not right_out(value, right)

    def to_sklearn(self) -> Any:
        from sklearn.utils._param_validation import Interval as SklearnInterval

        return SklearnInterval(self.type, self.left, self.right, closed=self.closed)


class Options:
    """scikit-learn's ``Options(type, options)``: a value of ``type`` among ``options``."""

    def __init__(self, type: type, options: Iterable[Any]) -> None:
        self.type, self.options = type, set(options)

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, self.type) and value in self.options

    def __str__(self) -> str:
        return " or ".join(sorted(map(repr, self.options)))

    def to_sklearn(self) -> Any:
        from sklearn.utils._param_validation import Options as SklearnOptions

        return SklearnOptions(self.type, self.options)


class StrOptions(Options):
    """scikit-learn's ``StrOptions(options)``: a string among ``options``."""

    def __init__(self, options: Iterable[str]) -> None:
        super().__init__(str, options)

    def to_sklearn(self) -> Any:
        from sklearn.utils._param_validation import StrOptions as SklearnStrOptions

        return SklearnStrOptions(self.options)


class Choices(StrOptions):
    """:class:`StrOptions` whose values keep the order given (messages list them in that order)."""

    def __init__(self, options: Iterable[str]) -> None:
        self.ordered = tuple(options)
        super().__init__(self.ordered)

    def __str__(self) -> str:
        return "one of " + ", ".join(map(repr, self.ordered))


#: ``true`` or ``false`` (Python bools only).
BOOLEAN = Options(bool, {True, False})


def to_sklearn(constraint: Any) -> Any:
    """scikit-learn's constraint object of ``constraint`` (``None`` and types as they are)."""
    return constraint.to_sklearn() if hasattr(constraint, "to_sklearn") else constraint


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
    if isinstance(constraint, Interval):  # a finite Python number (the Integral / Real check, without abc's)
        number = (int,) if constraint.type is Integral else (int, float)
        if not isinstance(value, number) or (isinstance(value, float) and not math.isfinite(value)):
            return False
        return constraint.within(value)
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return constraint.is_satisfied_by(value)


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
