"""The one base of every error classify-images raises for its user to fix.

Every such error is a :class:`ClassifyImagesError` with a one-line message that names the
file, option or value and what to do: a bad configuration, an unreadable dataset or model
file, a lost cluster, …  The command line prints these as one line (exit status 2); any
other exception is a bug in classify-images and is reported as one.  Each area has its own
subclass (``ConfigError``, ``DatasetError``, ``FeatureSetError``, ``ModelFileError``, …),
defined in the module that raises it; most also derive from :class:`ValueError`, as they
did before this base existed.

This module imports nothing, so that every layer of the package (features, coding,
classifiers, pipeline) can derive its errors from the base.
"""

from __future__ import annotations

__all__ = ["ClassifyImagesError"]


class ClassifyImagesError(Exception):
    """An error for the user to fix (one-line message); the base of every such error of classify-images."""
