"""Shared fixtures.

The default test run needs nothing but the repository: real photographs and digits ship in
``tests/data`` (see its README).  Tests that need the large real datasets (15-Scenes,
caltech101-mini) are marked ``realdata``; they are deselected by default (pyproject's
``addopts``) and run with ``python -m pytest tests -m realdata``, reading the datasets from
``$CLASSIFY_IMAGES_DATASETS`` (default ``../shared/datasets`` beside the repository).  When
they are selected and the data is missing they fail — they never pass or skip silently.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
#: Four classes of twelve small real images each: china, digit_0, digit_1, flower.
FIXTURE_IMAGES = DATA / "images"
#: scikit-learn's china.jpg in grayscale, longer side 300 px.
FIXTURE_PHOTO = DATA / "china-300.jpg"

SHARED_DATASETS = Path(os.environ.get("CLASSIFY_IMAGES_DATASETS", REPO.parent / "shared" / "datasets"))
CALTECH_MINI = SHARED_DATASETS / "caltech101-mini"
SCENE15 = SHARED_DATASETS / "scene15"
FLOWERS17 = SHARED_DATASETS / "flowers17"


def pytest_collection_modifyitems(config, items):
    """Mark every property-based test ``fuzz`` (tests/_fuzz.py: fewer examples unless
    ``CLASSIFY_IMAGES_FULL_FUZZ=1``), so that CI can run them all again with ``-m fuzz``."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.fuzz)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's ``addopts``): one pytest-xdist worker per processor this process
    may run on (at most 4), not psutil's count of the host's cores, which ignores the CPU affinity
    a container or ``taskset`` sets."""
    try:
        processors = len(os.sched_getaffinity(0))
    except AttributeError:  # (no sched_getaffinity: macOS, Windows)
        processors = os.cpu_count() or 1
    return max(1, min(processors, 4))


#: The small pipeline configuration most tests build with (also read by benchmarks/bench_startup.py).
SMALL_CONFIG_FILE = DATA / "small.toml"
SMALL_CONFIG = tomllib.loads(SMALL_CONFIG_FILE.read_text())


def write_config_toml(path: Path, config: dict = SMALL_CONFIG) -> Path:
    """``config`` (tables of scalars and lists) written as a TOML file at ``path``."""
    lines = []
    for table, values in config.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_same_features(built, reference) -> None:
    """Feature sets ``built`` and ``reference`` hold the same rows and labels bit for bit, from
    the same split, codebook and configuration (e.g. a cluster build and the one-machine build)."""
    import numpy as np

    for name in ("X_train", "X_test", "y_train", "y_test"):
        a, b = np.asarray(getattr(built, name)), np.asarray(getattr(reference, name))
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), f"{name} differs from the single-machine build"
    assert built.manifest["split"] == reference.manifest["split"]
    assert built.manifest["codebook"] == reference.manifest["codebook"]
    assert built.config_hash == reference.config_hash


def build_fixture_feature_set(root: Path) -> Path:
    """A feature set of the fixture images, built by the command line into ``root/fs``
    with the small test config and a stage cache in ``root/cache``."""
    from classify_images.pipeline.interfaces.cli import main

    config = write_config_toml(root / "small.toml")
    out = root / "fs"
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--out",
                str(out),
                "--cache-dir",
                str(root / "cache"),
                "-q",
            ]
        )
        == 0
    )
    return out


def build_fixture_feature_set_and_model(root: Path) -> Path:
    """:func:`build_fixture_feature_set` into ``root/fs`` and a linear model trained on it,
    ``root/model.npz``; returns ``root``."""
    from classify_images.pipeline.interfaces.cli import main

    build_fixture_feature_set(root)
    assert main(["train", str(root / "fs"), "--classifier", "linear", "--out", str(root / "model.npz")]) == 0
    return root


def require_real_data(request: pytest.FixtureRequest, path: Path) -> Path:
    """``path`` of a real dataset, for a test marked ``realdata``; a failure when it is missing."""
    if request.node.get_closest_marker("realdata") is None:
        pytest.fail(f"{request.node.nodeid} reads {path.name} but is not marked @pytest.mark.realdata")
    if not path.exists():
        pytest.fail(f"real-data test: {path} is missing (set CLASSIFY_IMAGES_DATASETS to the datasets folder)")
    return path


@pytest.fixture
def caltech_mini(request) -> Path:
    """The real caltech101-mini folder (5 Caltech-101 classes × 20 images); realdata tests only."""
    return require_real_data(request, CALTECH_MINI)


@pytest.fixture
def scene15(request) -> Path:
    """The real 15-Scenes folder (4485 images); realdata tests only."""
    return require_real_data(request, SCENE15)


@pytest.fixture
def flowers17(request) -> Path:
    """The real Oxford Flowers-17 folder (17 species × 80 colour photographs); realdata tests only."""
    return require_real_data(request, FLOWERS17)


@pytest.fixture
def small_dataset(tmp_path) -> Path:
    """A writable copy of three fixture classes, 12 real images each."""
    root = tmp_path / "data"
    for name in ("china", "digit_1", "flower"):
        shutil.copytree(FIXTURE_IMAGES / name, root / name)
    return root
