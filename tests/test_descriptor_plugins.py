"""Descriptors are plug-ins: ``[descriptor] kind`` selects a registered one (default: dense
SIFT, whose keys stay in ``[sift]`` and whose cache keys and hashes do not change), and a new
descriptor is one class (here: defined in this test) and one registration — it then goes end to
end: build, train, evaluate and predict."""

from __future__ import annotations

import ast
import json
import pathlib

import numpy as np
import pytest

from classify_images.features import descriptors as descriptors_module
from classify_images.features.descriptors import (
    DenseSift,
    Descriptor,
    Descriptors,
    descriptor_class,
    descriptor_kinds,
    make_descriptor,
    register_descriptor,
)
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import ConfigError, stage_hash, validate_config
from classify_images.pipeline.storage.feature_store import load_feature_set

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml


def test_dense_sift_is_the_default_and_changes_no_key():
    assert descriptor_kinds()[0] == "sift" and descriptor_class("sift") is DenseSift
    default = validate_config(SMALL_CONFIG)
    explicit = validate_config({**SMALL_CONFIG, "descriptor": {"kind": "sift"}})
    assert "descriptor" not in default.to_dict() and "descriptor" not in default.to_dict(semantic_only=True)
    assert explicit.to_dict() == default.to_dict()
    assert explicit.descriptor_params() == default.sift_params() == explicit.sift_params()
    tables = list(default.to_dict())
    assert stage_hash(explicit, tables) == stage_hash(default, tables)
    assert isinstance(make_descriptor(default.descriptor_params()), DenseSift)
    assert default.smallest_image_side() == max(SMALL_CONFIG["sift"]["patch_sizes"])
    with pytest.raises(ConfigError, match=r"descriptor.kind = 'nope': expected one of 'sift'"):
        validate_config({**SMALL_CONFIG, "descriptor": {"kind": "nope"}})
    with pytest.raises(ConfigError, match=r"descriptor.step: dense SIFT's keys go in the \[sift\] table"):
        validate_config({**SMALL_CONFIG, "descriptor": {"step": 4}})


# ------------------------------------------------------------ a new descriptor, from a test
class _PatchMeans(Descriptor):
    """A toy descriptor: on a grid of ``step`` px, the 16 means of the 4 × 4 cells of an 8 × 8
    patch, halved (values in [0, 0.5], as the uint8 stage cache stores descriptors)."""

    kind = "test-patch-means"
    version_key = "test_patch_means"
    patch = 8

    @classmethod
    def check_params(cls, values):
        own = {}
        for key, value in values.items():
            if key != "step":
                raise ValueError(f"unknown key descriptor.{key}; known keys of {cls.kind!r}: step")
            if isinstance(value, bool) or not isinstance(value, int) or value < 2 or value % 2:
                raise ValueError(f"descriptor.step = {value!r}: expected an even integer ≥ 2")
            if value != 8:  # the default is left out (its cache keys stay)
                own[key] = value
        return own

    @property
    def length(self):
        return 16

    @property
    def smallest_side(self):
        return self.patch

    def implementation_version(self):
        return 1

    def compute(self, image):
        step, cell = self.table.get("step", 8), self.patch // 4
        height, width = image.shape
        rows, xs, ys = [], [], []
        for top in range(0, height - self.patch + 1, step):
            for left in range(0, width - self.patch + 1, step):
                patch = image[top : top + self.patch, left : left + self.patch]
                rows.append(patch.reshape(4, cell, 4, cell).mean(axis=(1, 3)).ravel() / 2)
                xs.append(left + self.patch / 2)
                ys.append(top + self.patch / 2)
        return Descriptors(
            np.asarray(rows, dtype=np.float32).reshape(-1, 16),
            np.asarray(xs, dtype=np.float32),
            np.asarray(ys, dtype=np.float32),
        )


@pytest.fixture
def toy_descriptor():
    register_descriptor(_PatchMeans)
    try:
        yield _PatchMeans
    finally:
        descriptors_module._REGISTERED.pop(_PatchMeans.kind, None)


def _toy_config(**descriptor) -> dict:
    raw = {table: dict(values) for table, values in SMALL_CONFIG.items() if table != "sift"}
    raw["descriptor"] = {"kind": _PatchMeans.kind, **descriptor}
    raw["codebook"] = {"kind": "kmeans", "size": 8, "n_samples": 500, "n_iter": 10}
    return raw


def test_a_new_descriptor_is_one_class_and_one_config(toy_descriptor, tmp_path, capsys):
    config = validate_config(_toy_config(step=4))
    assert config.descriptor_params() == {"kind": toy_descriptor.kind, "step": 4}
    assert config.to_dict()["descriptor"] == {"kind": toy_descriptor.kind, "step": 4}
    assert validate_config(config.to_dict()) == config  # the manifest's plain form reads back
    assert validate_config(_toy_config(step=8)).descriptor_params() == {"kind": toy_descriptor.kind}
    with pytest.raises(ConfigError, match="descriptor.step = 3: expected an even integer"):
        validate_config(_toy_config(step=3))
    with pytest.raises(ConfigError, match=r"\[sift\] applies to descriptor.kind = 'sift' only"):
        validate_config({**_toy_config(), "sift": {"step": 4}})

    out, model = tmp_path / "fs", tmp_path / "model.npz"
    toml = write_config_toml(tmp_path / "toy.toml", _toy_config(step=4))
    argv = ["build-features", str(FIXTURE_IMAGES), "--config", str(toml), "--out", str(out), "-q"]
    assert main([*argv, "--cache-dir", str(tmp_path / "cache")]) == 0
    fs = load_feature_set(out)
    assert fs.manifest["config"]["descriptor"] == {"kind": toy_descriptor.kind, "step": 4}
    assert fs.n_features == 8 * 5  # K words × (1 + 2 × 2) pyramid cells
    assert main(["train", str(out), "--classifier", "linear", "--out", str(model), "-q"]) == 0
    assert main(["evaluate", str(out), str(model), "--out", str(tmp_path / "report"), "-q"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert np.asarray(report["confusion"]).sum() == len(fs.y_test)
    images = [str(FIXTURE_IMAGES / path) for path in fs.test_paths[:3]]
    capsys.readouterr()
    assert main(["predict", str(model), *images, "--top-k", "1"]) == 0
    printed = capsys.readouterr().out
    assert all(image in printed for image in images), printed

    # Without the descriptor registered, the model is a one-line error naming the kind.
    descriptors_module._REGISTERED.pop(toy_descriptor.kind)
    assert main(["predict", str(model), *images]) != 0
    error = capsys.readouterr().err
    assert toy_descriptor.kind in error and "Traceback" not in error


def test_no_pipeline_module_names_a_descriptor_kind():
    """The pipeline asks the descriptor: no module of pipeline/ compares a value with ``"sift"``."""
    import classify_images.pipeline as pipeline

    offenders = []
    for path in sorted(pathlib.Path(pipeline.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                if "sift" in {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders
