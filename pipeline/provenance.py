"""Provenance: the versions of Python and of the libraries that computed a result.

Feature-set manifests and model-file headers record :func:`library_versions`, so that a
number read back later can be traced to the code that produced it.
"""

from __future__ import annotations

import importlib.metadata
import platform

__all__ = ["library_versions"]

#: Distributions whose versions are recorded (this package and the numerical libraries).
RECORDED_DISTRIBUTIONS = ("classify-images", "numpy", "scipy", "scikit-learn", "numba")


def library_versions() -> dict[str, str]:
    """Versions of Python and of :data:`RECORDED_DISTRIBUTIONS` (``"unknown"`` if not installed).

    Returns
    -------
    versions : dict of str to str
        ``{"python": "3.x.y", "classify-images": …, "numpy": …, …}``.
    """
    versions = {"python": platform.python_version()}
    for distribution in RECORDED_DISTRIBUTIONS:
        try:
            versions[distribution] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            versions[distribution] = "unknown"
    return versions
