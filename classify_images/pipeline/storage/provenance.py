"""Provenance: the versions of Python and of the libraries that computed a result, and the code's commit.

Feature-set manifests and model-file headers record :func:`library_versions`, so that a
number read back later can be traced to the code that produced it: this package, the
numerical libraries (OpenCV decodes and resizes the images; spams, the optional extra, learns
sparse-coding dictionaries when ``codebook.dictionary_solver = "spams"``: both change the numbers), and — when the package runs from a git checkout —
the commit (with ``+dirty`` when the checkout has uncommitted changes).
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
from pathlib import Path

__all__ = ["library_versions", "git_commit"]

#: Distributions whose versions are recorded (this package and the numerical libraries);
#: the first distribution of each tuple that is installed gives the version.
RECORDED_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "classify-images": ("classify-images",),
    "numpy": ("numpy",),
    "scipy": ("scipy",),
    "scikit-learn": ("scikit-learn",),
    "numba": ("numba",),
    "opencv": ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless", "opencv-contrib-python"),
    "spams": ("spams-bin", "spams"),
}

#: Seconds allowed to ``git`` (it is never needed, only nice to have).
_GIT_TIMEOUT = 2.0


def _distribution_version(names: tuple[str, ...]) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the git checkout this package runs from (``+dirty`` with local changes), else None.

    None when the package is installed from a wheel or an sdist, when ``git`` is missing, or
    when the package folder is not inside a repository.
    """
    folder = Path(__file__).resolve().parent
    if "site-packages" in folder.parts or "dist-packages" in folder.parts:
        return None  # installed copy: a repository around the environment is not its source
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=_GIT_TIMEOUT, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    if len(head) != 40:
        return None
    return head + ("+dirty" if status.strip() else "")


def library_versions() -> dict[str, str]:
    """Versions of Python and of :data:`RECORDED_DISTRIBUTIONS` (``"unknown"`` if not installed), and the commit.

    Returns
    -------
    versions : dict of str to str
        ``{"python": "3.x.y", "classify-images": …, "numpy": …, …, "opencv": …, "spams": …}``
        plus ``"git_commit"`` when the package runs from a git checkout.
    """
    versions = {"python": platform.python_version()}
    for key, names in RECORDED_DISTRIBUTIONS.items():
        versions[key] = _distribution_version(names)
    commit = git_commit()
    if commit is not None:
        versions["git_commit"] = commit
    return versions
