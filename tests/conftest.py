"""Shared fixtures: real images from ../shared/datasets, small pipeline configs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = Path(os.environ.get("CLASSIFY_IMAGES_DATASETS", REPO.parent / "shared" / "datasets"))
CALTECH_MINI = SHARED_DATASETS / "caltech101-mini"
SCENE15 = SHARED_DATASETS / "scene15"

#: A small, fast pipeline for tests (same stages as the real configs).
SMALL_CONFIG = {
    "dataset": {"train_per_class": 5, "test_per_class": 5, "seed": 0},
    "image": {"max_side": 96},
    "sift": {"patch_sizes": [16], "step": 8},
    "codebook": {"kind": "kmeans", "size": 16, "n_samples": 3000, "n_iter": 20},
    "pooling": {"method": "average", "levels": [1, 2]},
    "normalization": {"method": "l1"},
}


def require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"test data {path} is missing (set CLASSIFY_IMAGES_DATASETS to the shared datasets folder)")
    return path


@pytest.fixture(scope="session")
def caltech_mini() -> Path:
    return require(CALTECH_MINI)


@pytest.fixture
def small_dataset(tmp_path, caltech_mini) -> Path:
    """A writable copy of three caltech101-mini classes, 12 images each."""
    root = tmp_path / "data"
    for name in ("Faces_easy", "accordion", "car_side"):
        files = sorted((caltech_mini / name).iterdir())[:12]
        (root / name).mkdir(parents=True)
        for f in files:
            shutil.copy(f, root / name / f.name)
    return root
