"""Encoders are plug-ins: every registered encoder keeps its state as named arrays and back,
encodes an image the same through the pipeline's cache and on its own, and a new encoder
needs one module (here: a class defined in this test) and one config — nothing else of the
pipeline names it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC
from classify_images.coding import encoders as encoders_module
from classify_images.coding.encoders import (
    Encoder,
    EncoderParameterError,
    Pyramid,
    encoder_class,
    encoder_kinds,
    integer_at_least,
    make_encoder,
    parameter,
    register_encoder,
)
from classify_images.features.dsift import DESCRIPTOR_SIZE
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.extraction.extractor import FeatureExtractor
from classify_images.pipeline.extraction.stages import compute_descriptors
from classify_images.pipeline.interfaces.image_features import load_image_model
from classify_images.pipeline.settings.config import ConfigError, validate_config
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.model_file import load_model, save_model

from ._encoder_helpers import assert_image_model_classifies_like_rows
from .conftest import FIXTURE_IMAGES, SMALL_CONFIG


def test_the_built_in_encoders_are_found_not_listed():
    assert set(encoder_kinds()) >= {"kmeans", "sparse", "llc", "vlad", "fisher"}
    for kind in encoder_kinds():
        cls = encoder_class(kind)
        assert issubclass(cls, Encoder) and cls.kind == kind
    with pytest.raises(KeyError, match="unknown encoder kind 'nope'"):
        encoder_class("nope")


def _table(kind: str, **own) -> dict:
    return {"kind": kind, "size": 6, "n_samples": 500, "lambda": 0.15, "n_iter": 5, "seed": 0, **own}


TABLES = [
    _table("kmeans"),
    _table("kmeans", assignment="soft", soft_neighbors=2),
    _table("sparse"),
    _table("llc", n_neighbors=3),
    _table("vlad"),
    _table("fisher", pca_dims=8),
]


@pytest.fixture(scope="module")
def sample_image():
    """Dense SIFT of one fixture photograph (uint8 → float32), with positions and shape."""
    path = sorted((FIXTURE_IMAGES).rglob("*.jpg"))[0]
    data = compute_descriptors(
        str(path), 96, {"patch_sizes": [16], "step": 8, "smooth": True, "contrast_threshold": 1.0}
    )
    from classify_images.features.dsift import dequantize_descriptors

    return (
        str(path),
        dequantize_descriptors(data["descriptors"]),
        data["x"],
        data["y"],
        tuple(int(v) for v in data["shape"]),
    )


@pytest.mark.parametrize(
    "table", TABLES, ids=lambda t: "-".join(str(v) for k, v in t.items() if k in ("kind", "assignment"))
)
def test_state_round_trips_and_encode_equals_the_cached_path(table, sample_image):
    path, descriptors, x, y, shape = sample_image
    encoder = make_encoder(table)
    state = encoder.learn(descriptors)
    arrays = encoder.to_arrays(state)
    assert all(isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in arrays.values())
    back = encoder.from_arrays({k: a.copy() for k, a in arrays.items()}, DESCRIPTOR_SIZE)
    for name, array in encoder.to_arrays(back).items():
        np.testing.assert_array_equal(array, arrays[name])
    pyramid = Pyramid((1, 2), "max" if table["kind"] in ("sparse", "llc") else "average")
    row = encoder.encode(state, descriptors, x, y, shape, pyramid)
    assert row.dtype == np.float32 and row.shape == (encoder.dimension(state, pyramid),)
    assert np.isfinite(row).all() and np.abs(row).sum() > 0
    if encoder.signed:
        assert (row < 0).any()
    # Tampered states are refused with one line naming the array.
    name = sorted(arrays)[0]
    with pytest.raises(ValueError, match=repr(name)):
        encoder.from_arrays({**arrays, name: arrays[name][..., :-1]}, DESCRIPTOR_SIZE)
    with pytest.raises(ValueError, match=repr(name)):
        encoder.from_arrays({**arrays, name: np.full_like(arrays[name], np.nan)}, DESCRIPTOR_SIZE)


def test_parameters_are_checked_by_their_encoder():
    with pytest.raises(EncoderParameterError, match="codebook.n_neighbors = 0: expected an integer ≥ 1"):
        make_encoder(_table("llc", n_neighbors=0))
    with pytest.raises(EncoderParameterError, match="expected at most codebook.size = 6"):
        make_encoder(_table("llc", n_neighbors=7))
    with pytest.raises(EncoderParameterError, match="and ≤ 384"):  # the colour descriptors' length
        make_encoder(_table("fisher", pca_dims=385))


# ----------------------------------------------------------------- a new encoder, from a test
@dataclass(frozen=True)
class _ProjectionParams:
    #: random directions per word
    directions: int | None = parameter(None, integer_at_least(1, 8))


class _MeanProjection(Encoder):
    """A toy encoder: per pyramid cell, the mean of the descriptors projected on ``size``
    seeded random directions, and their mean absolute value (signed rows, 2·K per cell)."""

    kind = "test-mean-projection"
    Params = _ProjectionParams
    signed = True

    def learn(self, descriptors):
        rng = np.random.default_rng(self.table["seed"])
        return rng.standard_normal((self.size, descriptors.shape[1])).astype(np.float32)

    def cell_dimension(self, state):
        return 2 * self.n_words(state)

    def cache_dependencies(self, pyramid):
        return {"levels": list(pyramid.levels)}

    def cached_item(self, coder, descriptors, x, y, image_shape, **dependencies):
        levels = dependencies["levels"]
        cells = encoders_module.pyramid_cells(x, y, image_shape, levels)
        n_cells = encoders_module.n_pyramid_cells(levels)
        projected = descriptors @ coder.T
        out = np.zeros((n_cells, 2 * coder.shape[0]))
        counts = np.zeros(n_cells)
        for level_cells in cells:
            np.add.at(out[:, : coder.shape[0]], level_cells, projected)
            np.add.at(out[:, coder.shape[0] :], level_cells, np.abs(projected))
            np.add.at(counts, level_cells, 1)
        return (out / np.maximum(counts, 1)[:, None]).astype(np.float32).ravel()

    def pool(self, coder, item, pyramid):
        return item


@pytest.fixture
def toy_encoder():
    register_encoder(_MeanProjection)
    try:
        yield _MeanProjection
    finally:
        encoders_module._REGISTERED.pop(_MeanProjection.kind, None)


def test_a_new_encoder_is_one_class_and_one_config(toy_encoder, small_dataset, tmp_path):
    raw = {table: dict(values) for table, values in SMALL_CONFIG.items()}
    raw["codebook"] = {"kind": toy_encoder.kind, "size": 4, "n_samples": 500, "directions": 2}
    raw["normalization"] = {"method": "l2"}
    config = validate_config(raw)
    assert config.codebook.directions == 2 and config.codebook_params()["directions"] == 2
    with pytest.raises(ConfigError, match="directions = 9"):
        validate_config({**raw, "codebook": {**raw["codebook"], "directions": 9}})
    with pytest.raises(ConfigError, match=f"codebook.directions applies to codebook.kind = '{toy_encoder.kind}' only"):
        validate_config({**raw, "codebook": {"kind": "kmeans", "directions": 2}})

    result = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=tmp_path / "cache")
    fs = load_feature_set(tmp_path / "fs")
    assert result.n_features == 2 * 4 * 5 and fs.manifest["codebook"]["kind"] == toy_encoder.kind
    assert (np.asarray(fs.X_train) < 0).any()
    model = assert_image_model_classifies_like_rows(fs, small_dataset, tmp_path / "model.npz")
    load_model(model)  # the classifier alone too


def test_a_model_of_an_unregistered_encoder_is_a_one_line_error(toy_encoder, small_dataset, tmp_path):
    raw = {table: dict(values) for table, values in SMALL_CONFIG.items()}
    raw["codebook"] = {"kind": toy_encoder.kind, "size": 4, "n_samples": 500}
    build_feature_set(small_dataset, tmp_path / "fs", validate_config(raw))
    fs = load_feature_set(tmp_path / "fs")
    classifier = QuadraticHingeSVC().fit(np.asarray(fs.X_train), fs.y_train)
    model = save_model(tmp_path / "model.npz", classifier, extractor=FeatureExtractor.from_feature_set(fs))
    encoders_module._REGISTERED.pop(toy_encoder.kind)
    from classify_images.pipeline.training.model_file import ModelFileError

    with pytest.raises(ModelFileError, match=f"codebook.kind = '{toy_encoder.kind}'"):
        load_image_model(model)


def test_no_pipeline_module_names_an_encoder_kind():
    """The pipeline asks the encoder: no module of pipeline/ compares ``codebook.kind`` with a
    kind's name (the CLI's help and docstrings may mention them)."""
    import ast
    import pathlib

    import classify_images.pipeline as pipeline

    kinds = {"kmeans", "sparse", "llc", "vlad", "fisher", "soft"}
    offenders = []
    for path in sorted(pathlib.Path(pipeline.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                constants = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                if kinds & {c for c in constants if isinstance(c, str)}:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders
