"""The private scikit-learn names the classifiers use, imported in one place.

scikit-learn's parameter-validation machinery (``Interval``, ``StrOptions``,
``InvalidParameterError``) and the ``fit``
decorator ``_fit_context``, and ``partial_fit``'s check of ``classes`` on the first call
(``_check_partial_fit_first_call``) are not public API: they live in private modules
that may move between releases.  Every module of the package imports them from
here, so that a change of scikit-learn touches this file only.

``InvalidParameterError`` (a subclass of both ``ValueError`` and ``TypeError``)
is the error an estimator raises for a parameter outside its
``_parameter_constraints``; callers outside :mod:`classify_images.classifiers`
(the command line) import it from here too.
"""

from __future__ import annotations

from numbers import Integral

from sklearn.base import _fit_context
from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    Options,
    StrOptions,
)
from sklearn.utils.multiclass import _check_partial_fit_first_call

#: ``n_jobs``: ``None``, a positive count or a negative one (joblib's ``-1``: all CPUs,
#: ``-2``: all but one ...); ``0`` stands for no thread at all and is refused.
N_JOBS_CONSTRAINT = [
    Interval(Integral, 1, None, closed="left"),
    Interval(Integral, None, -1, closed="right"),
    None,
]

__all__ = [
    "N_JOBS_CONSTRAINT",
    "Interval",
    "InvalidParameterError",
    "Options",
    "StrOptions",
    "_check_partial_fit_first_call",
    "_fit_context",
]
