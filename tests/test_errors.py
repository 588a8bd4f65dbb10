"""One error base: every error classify-images raises for its user derives from
``ClassifyImagesError`` (the command line prints those as one line), and anything else is a
bug, reported as one."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from classify_images.errors import ClassifyImagesError


def _package_modules():
    yield importlib.import_module("classify_images.errors")
    for name in ("features", "coding", "classifiers", "pipeline"):
        package = importlib.import_module(f"classify_images.{name}")
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            yield importlib.import_module(info.name)


def test_every_error_class_of_the_package_derives_from_the_base():
    errors = {}
    for module in _package_modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, Exception)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):  # private ones are control flow that never leaves its module
                errors[f"{module.__name__}.{name}"] = value
    assert len(errors) >= 15, sorted(errors)
    assert not [name for name, cls in errors.items() if not issubclass(cls, ClassifyImagesError)]


def test_a_bug_is_reported_as_a_bug(monkeypatch, capsys):
    from classify_images.pipeline.interfaces import cli

    def broken(args):
        raise RuntimeError("boom")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    for action in parser._subparsers._group_actions[0].choices.values():
        action.set_defaults(func=broken)
    assert cli.main(["cache", "info"]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and "internal error: this is a bug in classify-images" in err


@pytest.mark.parametrize("error", ["ConfigError", "DatasetError"])
def test_user_errors_are_one_line(error, tmp_path, capsys):
    from classify_images.pipeline.interfaces.cli import main

    argv = (
        ["build-features", str(tmp_path / "absent"), "--out", str(tmp_path / "fs")]
        if error == "DatasetError"
        else ["build-features", str(tmp_path), "--config", str(tmp_path / "absent.toml"), "--out", str(tmp_path / "fs")]
    )
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("classify-images build-features: error:")
