"""The A/B benchmarks import another checkout's ``classify_images`` whatever its layout: today's
``classify_images/`` folder, the older ``api/`` + mapped folders, or the code folders alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _checkouts import importable_root, layout, module_name

CLI = "classify_images.pipeline.interfaces.cli"


def _write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _package_layout(root: Path) -> None:
    _write(root / "classify_images" / "__init__.py", "WHO = 'package'\n")
    _write(root / "classify_images" / "pipeline" / "__init__.py")
    _write(root / "classify_images" / "pipeline" / "interfaces" / "__init__.py")
    _write(root / "classify_images" / "pipeline" / "interfaces" / "cli.py", "WHERE = 'interfaces'\n")


def _mapped_layout(root: Path) -> None:
    _write(root / "api" / "__init__.py", "WHO = 'mapped'\n")
    _write(root / "pipeline" / "__init__.py")
    _write(root / "pipeline" / "cli.py", "WHERE = 'flat'\n")
    _write(
        root / "pyproject.toml",
        '[tool.setuptools.package-dir]\n"classify_images" = "api"\n"classify_images.pipeline" = "pipeline"\n',
    )


def _folders_layout(root: Path) -> None:
    _write(root / "pipeline" / "__init__.py")
    _write(root / "pipeline" / "cli.py", "WHERE = 'flat'\n")


@pytest.mark.parametrize(
    "make, kind, who, where",
    [
        (_package_layout, "package", "package", "interfaces"),
        (_mapped_layout, "mapped", "mapped", "flat"),
        (_folders_layout, "folders", None, "flat"),
    ],
)
def test_each_layout_imports_its_own_code(tmp_path, make, kind, who, where):
    checkout = tmp_path / "checkout"
    make(checkout)
    assert layout(checkout) == kind
    root = importable_root(checkout, tmp_path / "scratch")
    assert root == (checkout.resolve() if kind == "package" else tmp_path / "scratch")
    cli = module_name(root, CLI)
    assert cli == (CLI if kind == "package" else "classify_images.pipeline.cli")
    script = f"import classify_images as p, {cli} as c; print(getattr(p, 'WHO', None), c.WHERE, c.__file__)"
    env = {**os.environ, "PYTHONPATH": str(root)}
    printed = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()
    assert printed[:2] == [str(who), where]
    assert Path(printed[2]).resolve().is_relative_to(checkout.resolve())
    with pytest.raises(ModuleNotFoundError, match="not in the checkout"):
        module_name(root, "classify_images.pipeline.interfaces.nothing")
