"""The classifiers known to the command line, registered in one place.

Adding a classifier is one entry in :data:`CLASSIFIERS`: its command-line name
and the import path of its estimator class (imported lazily, so that the CLI
starts fast and a broken optional classifier never breaks the others).
"""

from __future__ import annotations

import ast
import importlib
from typing import Any

from ..errors import ClassifyImagesError

__all__ = [
    "ClassifierParameterError",
    "CLASSIFIERS",
    "COMBINE_RULES",
    "classifier_class",
    "classifier_name",
    "make_classifier",
    "parse_param",
]


class ClassifierParameterError(ClassifyImagesError, ValueError):
    """Unknown classifier name or parameter (a user error: one-line message)."""


#: The channel-combination rules of ``--combine`` (:mod:`~classify_images.classifiers.combination`),
#: named here so that the command line's parser reads them without importing NumPy.
COMBINE_RULES = ("concat", "average", "mbkl")

CLASSIFIERS: dict[str, str] = {
    "linear": "classify_images.classifiers.quadratic_hinge:QuadraticHingeSVC",
    "pmsvm": "classify_images.classifiers.pmsvm:PmSVM",
    "mbkl": "classify_images.classifiers.mbkl:MBKL",
    "nsvm": "classify_images.classifiers.hik_nsvm:HIKnSVM",
}


def classifier_class(name: str) -> type:
    """Estimator class registered under ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not registered (the message lists the known names).
    """
    try:
        target = CLASSIFIERS[name]
    except KeyError:
        known = ", ".join(sorted(CLASSIFIERS))
        raise ClassifierParameterError(f"unknown classifier {name!r}; choose one of: {known}") from None
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def classifier_name(estimator: Any) -> str:
    """Registered name of an estimator instance (inverse of :func:`classifier_class`)."""
    qualified = f"{type(estimator).__module__}:{type(estimator).__name__}"
    for name, target in CLASSIFIERS.items():
        if target == qualified:
            return name
    raise ValueError(f"{type(estimator).__name__} is not a registered classifier")


#: Bound on the length of a ``--param`` value, checked before it is parsed (a class_weight of a few
#: hundred classes fits; 100 000 minus signs would exhaust the parser's memory).
MAX_PARAM_CHARS = 10_000

#: Points of a grid (the product of the numbers of values) a search tries at most
#: (:func:`~classify_images.classifiers.model_selection.search_parameters`): each is a
#: cross-validated fit, so 1000 points is already hours of work on a large feature set. Here, with
#: the parameter parsing, so the command line can check a grid without importing scikit-learn.
MAX_SEARCH_POINTS = 1000


def parse_param(text: str) -> tuple[str, Any]:
    """Parse a ``key=value`` command-line parameter.

    The value is read as a Python literal when it is one (``-8`` -> int,
    ``0.01`` -> float, ``True``/``None``, ``(1, 2)``), else kept as a string
    (``nodes=chebyshev``).  ``true``/``false``/``none`` are accepted too.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ClassifierParameterError(f"--param {text!r}: expected key=value, e.g. --param C=0.01")
    raw = raw.strip()
    if len(raw) > MAX_PARAM_CHARS:
        raise ClassifierParameterError(
            f"--param {key}: the value is {len(raw)} characters long, more than the {MAX_PARAM_CHARS} accepted"
        )
    lowered = {"true": True, "false": False, "none": None}
    if raw.lower() in lowered:
        return key, lowered[raw.lower()]
    try:
        return key, ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key, raw
    except (MemoryError, RecursionError):  # Python's parser gives up on deeply nested expressions
        raise ClassifierParameterError(
            f"--param {key}: the value is nested too deeply to read (give a number, a name or a short literal)"
        ) from None


def make_classifier(name: str, params: dict[str, Any] | None = None):
    """Instantiate classifier ``name`` with ``params``, checking every key.

    Raises
    ------
    ValueError
        If a parameter is not one of the estimator's (the message lists them).
    """
    cls = classifier_class(name)
    estimator = cls()
    params = dict(params or {})
    valid = estimator.get_params(deep=False)
    for key in params:
        if key not in valid:
            raise ClassifierParameterError(
                f"classifier {name!r} has no parameter {key!r}; valid parameters: " + ", ".join(sorted(valid))
            )
    return estimator.set_params(**params)
