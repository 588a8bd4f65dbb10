"""Importing the ``classify_images`` of another checkout, whatever its layout (A/B benchmarks).

Three layouts have held the package:

* **folder = package** (today): the checkout's ``classify_images/`` folder is the package, its
  pipeline in sub-packages (``classify_images.pipeline.interfaces.cli``): the checkout itself
  goes on ``sys.path``.
* **mapped folders** (``pyproject.toml``'s ``[tool.setuptools.package-dir]``: ``api/`` the root
  package, ``features/``, ``coding/``, ``pipeline/`` … its sub-packages, a flat
  ``classify_images.pipeline.cli``): a tree of symbolic links under a temporary folder
  rebuilds the package as the mapping says.
* **code folders only** (older still: no ``api/``): the code folders linked under a
  ``classify_images`` folder.

:func:`importable_root` gives the folder to put on ``PYTHONPATH``; :func:`module_name` turns a
module's name of today's layout into the checkout's (``pipeline.interfaces.cli`` →
``pipeline.cli`` in the flat layouts).  Importing this module imports nothing but the standard
library.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

__all__ = ["CODE_FOLDERS", "layout", "importable_root", "module_name"]

PACKAGE = "classify_images"
#: The sub-packages of the older layouts (one folder each, at the checkout's root).
CODE_FOLDERS = ("features", "coding", "classifiers", "pipeline", "configs")


def layout(checkout: Path) -> str:
    """``"package"`` (a ``classify_images/`` folder), ``"mapped"`` (``api/`` and mapped folders) or ``"folders"``."""
    checkout = Path(checkout)
    if (checkout / PACKAGE / "__init__.py").is_file():
        return "package"
    if (checkout / "api" / "__init__.py").is_file():
        return "mapped"
    return "folders"


def _package_dirs(checkout: Path) -> dict[str, str]:
    """``{sub-package: folder}`` of a mapped checkout (``""``: the root package), from its pyproject.toml."""
    try:
        mapping = tomllib.loads((checkout / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        mapping = {PACKAGE: "api", **{f"{PACKAGE}.{name}": name for name in CODE_FOLDERS}}
    return {name.removeprefix(PACKAGE).lstrip("."): folder for name, folder in mapping.items()}


def importable_root(checkout: Path, scratch: Path) -> Path:
    """The folder whose ``classify_images`` is ``checkout``'s code (``scratch``: an empty or
    absent folder for the links of the older layouts)."""
    checkout = Path(checkout).resolve()
    kind = layout(checkout)
    if kind == "package":
        return checkout
    package = Path(scratch) / PACKAGE
    package.mkdir(parents=True)
    if kind == "mapped":
        dirs = _package_dirs(checkout)
        for entry in (checkout / dirs.pop("", "api")).iterdir():
            (package / entry.name).symlink_to(entry)
        for sub, folder in dirs.items():
            if "." not in sub and (checkout / folder).is_dir():
                (package / sub).symlink_to(checkout / folder)
        return Path(scratch)
    (package / "__init__.py").write_text("")
    for folder in CODE_FOLDERS:
        if (checkout / folder).is_dir():
            (package / folder).symlink_to(checkout / folder)
    return Path(scratch)


def module_name(root: Path, dotted: str) -> str:
    """``dotted`` (a module of today's layout, ``classify_images.pipeline.interfaces.cli``) as the
    package under ``root`` names it: itself when its file is there, else the flat pipeline's
    ``classify_images.pipeline.cli``."""
    parts = dotted.split(".")
    here = Path(root).joinpath(*parts)
    if here.with_suffix(".py").is_file() or (here / "__init__.py").is_file():
        return dotted
    if len(parts) == 4 and parts[:2] == [PACKAGE, "pipeline"]:
        flat = ".".join([*parts[:2], parts[3]])
        if Path(root).joinpath(*flat.split(".")).with_suffix(".py").is_file():
            return flat
    raise ModuleNotFoundError(f"{dotted} is not in the checkout under {root}")
