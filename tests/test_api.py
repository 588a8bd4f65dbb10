"""The top-level API: ``from classify_images import ...``, ``__version__``, ``--version``, ``--threads``."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import classify_images
from classify_images.pipeline.interfaces.cli import main


def test_public_names_import_from_the_top_level():
    from classify_images import (  # noqa: F401
        MBKL,
        HIKnSVM,
        ImageFeatures,
        PmSVM,
        QuadraticHingeSVC,
        build_feature_set,
        load_model,
        save_model,
    )
    from classify_images.classifiers.pmsvm import PmSVM as PmSVMClass
    from classify_images.pipeline.extraction.build import build_feature_set as build
    from classify_images.pipeline.interfaces.image_features import load_image_model
    from classify_images.pipeline.training.model_file import save_model as save

    assert PmSVM is PmSVMClass and build_feature_set is build and load_model is load_image_model
    assert save_model is save
    assert set(classify_images.__all__) == {
        "__version__",
        "ImageFeatures",
        "PmSVM",
        "HIKnSVM",
        "MBKL",
        "QuadraticHingeSVC",
        "load_model",
        "save_model",
        "build_feature_set",
    }
    with pytest.raises(AttributeError):
        classify_images.NoSuchThing  # noqa: B018


def test_version_from_package_metadata(capsys):
    assert classify_images.__version__ == importlib.metadata.version("classify-images")
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"classify-images {classify_images.__version__}"


def test_import_is_cheap():
    """``import classify_images`` loads none of the heavy libraries (they load on first use)."""
    code = (
        "import sys, classify_images; "
        "print(sorted(m for m in ('numba', 'sklearn', 'cv2', 'scipy', 'numpy', 'joblib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("position", ["before", "after"])
def test_threads_before_or_after_the_command(tmp_path, monkeypatch, position):
    from threadpoolctl import threadpool_info

    from classify_images.pipeline.interfaces import cli

    seen = []
    monkeypatch.setattr(cli, "cmd_predict", lambda args: seen.append(threadpool_info()) or 0)
    argv = ["predict", "model.npz", "image.jpg"]
    argv = ["--threads", "1", *argv] if position == "before" else [*argv, "--threads", "1"]
    assert main(argv) == 0
    assert seen and seen[0] and all(pool["num_threads"] == 1 for pool in seen[0])


def test_threads_after_the_command_is_validated(capsys):
    assert main(["predict", "model.npz", "image.jpg", "--threads", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--threads must be at least 1" in err and len(err.splitlines()) == 1
