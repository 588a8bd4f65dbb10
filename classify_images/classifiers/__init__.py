"""Classifiers: PmSVM (+LUT), MBKL, HIK nSVM and a linear quadratic-hinge SVM (L-BFGS).

Every classifier is a scikit-learn estimator built on
:class:`~classify_images.classifiers.base.OneVsRestClassifierBase`; the command
line knows them by the names of :data:`~classify_images.classifiers.registry.CLASSIFIERS`.
Estimator classes (and :class:`~.base.NegativeFeaturesError`, whose module loads
scikit-learn) are imported lazily: ``from classify_images.classifiers import PmSVM``.
"""

from .registry import (
    CLASSIFIERS,
    ClassifierParameterError,
    classifier_class,
    classifier_name,
    make_classifier,
    parse_param,
)

_LAZY = {target.rpartition(":")[2]: name for name, target in CLASSIFIERS.items()}


def __getattr__(attribute: str):
    if attribute in _LAZY:
        return classifier_class(_LAZY[attribute])
    if attribute == "NegativeFeaturesError":
        from .base import NegativeFeaturesError

        return NegativeFeaturesError
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


__all__ = [
    "CLASSIFIERS",
    "ClassifierParameterError",
    "NegativeFeaturesError",
    "classifier_class",
    "classifier_name",
    "make_classifier",
    "parse_param",
    *_LAZY,
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
