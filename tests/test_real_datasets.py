"""Checks that need the real datasets (marked ``realdata``; run by ``.ci/run``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.dataset import discover_dataset, split_indices

from .conftest import write_config_toml

pytestmark = pytest.mark.realdata


def test_scene15_protocol(scene15):
    """15-Scenes: 15 classes, 4485 images, 200-410 per class; 100 training images per class."""
    dataset = discover_dataset(scene15)
    counts = np.bincount(dataset.labels)
    assert len(dataset.class_names) == 15 and counts.sum() == 4485
    assert counts.min() >= 200 and counts.max() <= 410
    train, test = split_indices(dataset.labels, 100, None, 0)
    assert len(train) == 1500 and len(test) == 2985 and not set(train) & set(test)
    assert np.bincount(dataset.labels[train]).tolist() == [100] * 15


def test_caltech_mini_end_to_end(tmp_path, caltech_mini, capsys):
    """build-features -> train -> evaluate on four real Caltech-101 classes (background excluded)."""
    config = write_config_toml(tmp_path / "small.toml")
    features, model, report = tmp_path / "fs", tmp_path / "m.npz", tmp_path / "rep"
    assert (
        main(
            [
                "build-features",
                str(caltech_mini),
                "--config",
                str(config),
                "--out",
                str(features),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
        == 0
    )
    assert main(["train", str(features), "--classifier", "linear", "--param", "C=10", "--out", str(model)]) == 0
    assert main(["evaluate", str(features), str(model), "--out", str(report)]) == 0
    result = json.loads((report / "report.json").read_text())
    assert result["class_names"] == ["Faces_easy", "accordion", "airplanes", "car_side"]
    assert result["mean_per_class_accuracy"] > 0.5  # four easy Caltech classes; chance 0.25


def test_caltech_mini_best_config_end_to_end(tmp_path, caltech_mini, capsys):
    """The most accurate shipped config (``fisher-flip-rootsift``: Fisher vectors of RootSIFT + flips,
    BENCHMARKS.md), as shipped, by one ``run`` with C searched on caltech101-mini: mirrors stored, used
    in training and averaged at test time."""
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                str(caltech_mini),
                "--config",
                "fisher-flip-rootsift",
                "--classifier",
                "linear",
                "--search",
                "C=1,10,100",
                "--train-per-class",
                "10",
                "--test-per-class",
                "10",
                "--out",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--n-jobs",
                "2",
                "-q",
            ]
        )
        == 0
    )
    manifest = json.loads((out / "features" / "manifest.json").read_text())
    assert manifest["augment"]["mirrors"]
    result = json.loads((out / "report" / "report.json").read_text())
    assert result["search"]["best"]["C"] in (1, 10, 100)
    assert result["class_names"] == ["Faces_easy", "accordion", "airplanes", "car_side"]
    assert result["mean_per_class_accuracy"] > 0.8  # four easy Caltech classes; chance 0.25


_TWO_SMALL_CHANNELS = """
[dataset]
train_per_class = 10
test_per_class = 10

[image]
max_side = 200

[[channel]]
name = "fisher"
[channel.sift]
patch_sizes = [16, 24]
step = 8
[channel.codebook]
kind = "fisher"
size = 16
pca_dims = 32
n_samples = 20000
n_iter = 10
[channel.pooling]
levels = [1, 2]
[channel.normalization]
method = "none"

[[channel]]
name = "scspm"
[channel.sift]
patch_sizes = [16]
step = 8
[channel.codebook]
kind = "sparse"
size = 128
n_samples = 20000
lambda = 0.15
n_iter = 50
[channel.pooling]
method = "max"
levels = [1, 2]
"""


def test_caltech_mini_combined_channels_end_to_end(tmp_path, caltech_mini, capsys):
    """``run`` with a two-channel config (the shape of ``scene15-combined``, Fisher vectors + ScSPM, with
    small codebooks so that CI stays short; ``--combine average``, C searched) on caltech101-mini: one
    command builds both channels, combines them and records the rule."""
    out, config = tmp_path / "run", tmp_path / "two-channels.toml"
    config.write_text(_TWO_SMALL_CHANNELS, encoding="utf-8")
    assert (
        main(
            [
                "run",
                str(caltech_mini),
                "--config",
                str(config),
                "--classifier",
                "linear",
                "--combine",
                "average",
                "--search",
                "C=1,10,100",
                "--out",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--n-jobs",
                "2",
                "-q",
            ]
        )
        == 0
    )
    manifest = json.loads((out / "features" / "manifest.json").read_text())
    assert [(c["name"], c["dims"], c["signed"]) for c in manifest["channels"]] == [
        ("fisher", 2 * 16 * 32 * 5, True),
        ("scspm", 128 * 5, False),
    ]
    result = json.loads((out / "report" / "report.json").read_text())
    assert result["combine"]["rule"] == "average" and result["search"]["best"]["C"] in (1, 10, 100)
    assert result["class_names"] == ["Faces_easy", "accordion", "airplanes", "car_side"]
    assert result["mean_per_class_accuracy"] > 0.8  # four easy Caltech classes; chance 0.25


def test_flowers17_recommended_config_in_small_chooses_c_and_mirrors(tmp_path, flowers17, caplog):
    """The recommended config's tables (opponent RootSIFT Fisher vectors, mirrors stored), shrunk to
    run in a minute, on 3 Flowers-17 species × 12 colour photographs, by one ``run`` with no C: the
    colour descriptors are computed (no grey-images line), C and the use of the mirrors are chosen by
    cross-validation on the training images and recorded in the report."""
    import logging
    import shutil
    import tomllib

    from classify_images.pipeline.settings.defaults import named_configs

    subset = tmp_path / "flowers"
    for species in ("bluebell", "daffodil", "sunflower"):
        (subset / species).mkdir(parents=True)
        for image in sorted((flowers17 / species).iterdir())[:12]:
            shutil.copy(image, subset / species / image.name)
    tables = tomllib.loads(named_configs()["recommended"].read_text())
    assert tables["sift"]["color"] == "opponent" and tables["augment"]["flip_train"]
    tables["dataset"] = {"train_per_class": 8, "test_per_class": 4, "seed": 0}
    tables["image"]["max_side"] = 160
    tables["sift"].update(patch_sizes=[16, 24], step=8)
    tables["codebook"].update(size=8, pca_dims=32, n_samples=5000, n_iter=10)
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    config = tmp_path / "small-recommended.toml"
    config.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        code = main(
            [
                "run",
                str(subset),
                "--config",
                str(config),
                "--classifier",
                "linear",
                "--out",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
    assert code == 0
    assert not any("images are grey" in record.getMessage() for record in caplog.records)
    result = json.loads((out / "report" / "report.json").read_text())
    assert result["class_names"] == ["bluebell", "daffodil", "sunflower"]
    search = result["search"]
    assert search["method"] == "gram" and search["mirrored"] and len(search["grid"]["C"]) == 5
    assert set(search["flips"]) == {"flip_train", "flip_test"}
    assert result["mean_per_class_accuracy"] > 0.6  # blue, yellow and large yellow flowers; chance 1/3
