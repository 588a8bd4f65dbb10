"""Spatial coordinates in Fisher vectors (``codebook.spatial_coordinates``, Sánchez et al. 2012):
the coordinates against a loop, the vector against the formulas with explicit loops, the GMM
learnt on them, one build that learns and encodes with the same coordinates (mirrors too), the
option off keeping every existing key, and the one-line refusals."""

import numpy as np
import pytest

from classify_images.coding import FisherEncoder, learn_fisher_model
from classify_images.coding.fisher import POSTERIOR_THRESHOLD, spatial_coordinates
from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells
from classify_images.features.dsift import dequantize_descriptors
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.extraction.stages import (
    FLIP_KEY,
    compute_descriptors,
    descriptor_sample,
    positioned_descriptor_sample,
)
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import TABLES, ConfigError, load_config, stage_hash, validate_config
from classify_images.pipeline.settings.dataset import file_fingerprint
from classify_images.pipeline.storage.feature_store import load_feature_set

from ._encoder_helpers import assert_new_images_match_rows, random_layout, reference_cells, small_config
from .conftest import REPO, SMALL_CONFIG, write_config_toml
from .test_fisher import _random_model, _reference_fisher


def _reference_coordinates(x, y, shape):
    h, w = shape
    return np.array([[x[i] / w - 0.5, y[i] / h - 0.5] for i in range(len(x))])


def test_spatial_coordinates_are_the_relative_positions():
    rng = np.random.default_rng(0)
    x, y, shape = random_layout(rng, 40)
    got = spatial_coordinates(x, y, shape)
    assert got.dtype == np.float32 and got.shape == (40, 2)
    np.testing.assert_allclose(got, _reference_coordinates(x, y, shape), rtol=1e-6, atol=1e-7)
    assert (np.abs(got) <= 0.5).all()


def test_fisher_vector_with_coordinates_matches_formulas():
    rng = np.random.default_rng(1)
    model = _random_model(rng, K=4, D=5, P=6)  # D = 3 PCA components + 2 coordinates
    model["pca_components"] = model["pca_components"][:3]
    n = 60
    x, y, shape = random_layout(rng, n)
    S = rng.normal(size=(n, 6))
    levels, grids = (1, 2, "3x1"), [(1, 1), (2, 2), (3, 1)]
    encoder = FisherEncoder(model, spatial_coordinates=True)
    cells = pyramid_cells(x, y, shape, levels)
    got = encoder.encode(S, cells, n_pyramid_cells(levels), coordinates=spatial_coordinates(x, y, shape))
    expected = _reference_fisher(
        S,
        model,
        reference_cells(x, y, shape, grids),
        extra=_reference_coordinates(x, y, shape),
        threshold=POSTERIOR_THRESHOLD,
    )
    assert got.shape == (8 * 2 * 4 * 5,) == (8 * encoder.cell_dimension,)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="needs the descriptors' spatial coordinates"):
        encoder.encode(S, cells, 8)
    with pytest.raises(ValueError, match="has no spatial coordinates"):
        FisherEncoder(_random_model(rng)).encode(S, cells, 8, coordinates=spatial_coordinates(x, y, shape))
    with pytest.raises(ValueError, match="expected 3 .3 PCA components.$"):
        FisherEncoder(model)  # a model with coordinates read as one without


def test_the_gmm_models_the_coordinates_and_the_pca_ignores_them():
    rng = np.random.default_rng(2)
    S = rng.random((3000, 16)).astype(np.float32)  # appearance alike everywhere...
    coordinates = np.where(rng.random((3000, 1)) < 0.5, -0.3, 0.3) + rng.normal(0, 0.02, (3000, 2))  # ...two places
    plain = learn_fisher_model(S, 2, pca_dims=4, max_iter=30, random_state=0)
    spatial = learn_fisher_model(S, 2, pca_dims=4, max_iter=30, random_state=0, coordinates=coordinates)
    assert spatial["means"].shape == spatial["variances"].shape == (2, 6)
    np.testing.assert_array_equal(spatial["pca_components"], plain["pca_components"])
    np.testing.assert_array_equal(spatial["pca_mean"], plain["pca_mean"])
    np.testing.assert_allclose(np.sort(spatial["means"][:, 4]), [-0.3, 0.3], atol=0.01)  # one Gaussian per place
    assert (spatial["variances"][:, 4:] < 0.01).all()
    with pytest.raises(ValueError, match=r"coordinates must have shape \(3000, 2\)"):
        learn_fisher_model(S, 2, pca_dims=4, coordinates=coordinates[:10])


def _spatial_config(flag: bool = True):
    return small_config(
        {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30, "spatial_coordinates": flag},
        {"levels": [1, "3x1"]},
        "none",
    )


def test_a_build_learns_and_encodes_with_the_same_coordinates(tmp_path, small_dataset):
    config = validate_config({**_spatial_config().to_dict(), "augment": {"flip_train": True, "flip_test": "average"}})
    result = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=tmp_path / "cache", rows="float32")
    fs = load_feature_set(tmp_path / "fs")
    model = fs.codebook()
    assert model["means"].shape == (4, 10) and result.n_features == 4 * 2 * 4 * 10
    sift, max_side = config.sift_params(), config.image.max_side
    path = str(small_dataset / fs.train_paths[0])
    fingerprint = file_fingerprint(path)
    # The GMM's sample: the plain sample's rows, each with its keypoint's coordinates.
    sample = positioned_descriptor_sample(path, fingerprint, max_side, sift, 50, 0)
    np.testing.assert_array_equal(sample[:, :-2], descriptor_sample(path, fingerprint, max_side, sift, 50, 0))
    data = compute_descriptors(path, max_side, sift)
    full = np.concatenate(
        [data["descriptors"], _reference_coordinates(data["x"], data["y"], tuple(data["shape"]))], axis=1
    )
    for row in sample:
        assert np.isclose(full, row, rtol=0, atol=1e-6).all(axis=1).any()
    # Every row (the mirror's with the mirror's own coordinates) is the encoder's on those coordinates.
    encoder = FisherEncoder(model, spatial_coordinates=True)
    for flip, rows in ((False, fs.X_train), (True, fs.mirrors("train"))):
        data = compute_descriptors(path, max_side, {**sift, FLIP_KEY: True} if flip else sift)
        shape = tuple(int(v) for v in data["shape"])
        expected = encoder.encode(
            dequantize_descriptors(data["descriptors"]),
            pyramid_cells(data["x"], data["y"], shape, [1, "3x1"]),
            4,
            coordinates=_reference_coordinates(data["x"], data["y"], shape),
        )
        np.testing.assert_allclose(np.asarray(rows)[0], expected, rtol=1e-4, atol=1e-6)  # float32 posteriors
        if flip:  # the unflipped image's coordinates would give another row
            wrong = encoder.encode(
                dequantize_descriptors(data["descriptors"]),
                pyramid_cells(data["x"], data["y"], shape, [1, "3x1"]),
                4,
                coordinates=_reference_coordinates(shape[1] - 1 - data["x"], data["y"], shape),
            )
            assert not np.allclose(np.asarray(rows)[0], wrong, rtol=1e-4, atol=1e-6)
    assert not np.allclose(np.asarray(fs.X_train)[0], np.asarray(fs.mirrors("train"))[0])
    assert_new_images_match_rows(fs, [str(small_dataset / p) for p in fs.test_paths[:3]])


def test_the_option_off_keeps_every_key():
    flip = load_config(REPO / "classify_images" / "configs" / "fisher-flip.toml")
    # The hash fisher-flip had before the option existed: its feature sets and caches stay valid.
    assert stage_hash(flip, list(TABLES)) == "151a41a0fad668f269e9bec0b16d76d5a6f856bb"
    off = load_config(
        REPO / "classify_images" / "configs" / "fisher-flip.toml", {"codebook": {"spatial_coordinates": False}}
    )
    assert "spatial_coordinates" not in off.codebook_params() and off.codebook_params() == flip.codebook_params()
    assert stage_hash(off, list(TABLES)) == stage_hash(flip, list(TABLES))
    xy = load_config(REPO / "classify_images" / "configs" / "fisher-flip-xy.toml")
    assert xy.codebook_params() == {**flip.codebook_params(), "spatial_coordinates": True}
    assert xy.codebook_params(learning=True)["spatial_coordinates"] is True  # a codebook of its own
    assert xy.sift_params() == flip.sift_params()  # the same descriptors (cache shared)
    assert {k: v for k, v in xy.to_dict().items() if k != "codebook"} == {
        k: v for k, v in flip.to_dict().items() if k != "codebook"
    }
    assert stage_hash(xy, list(TABLES)) != stage_hash(flip, list(TABLES))


@pytest.mark.parametrize(
    "codebook, message",
    [
        (
            {"kind": "vlad", "size": 8, "spatial_coordinates": True},
            "codebook.spatial_coordinates applies to codebook.kind = 'fisher' only",
        ),
        (
            {"kind": "fisher", "size": 8, "spatial_coordinates": 1},
            "codebook.spatial_coordinates = 1: expected true or false",
        ),
    ],
)
def test_other_encoders_and_non_booleans_are_refused_in_one_line(tmp_path, small_dataset, capsys, codebook, message):
    with pytest.raises(ConfigError, match=message):
        validate_config({**SMALL_CONFIG, "codebook": codebook})
    toml = write_config_toml(tmp_path / "c.toml", {**SMALL_CONFIG, "codebook": codebook})
    assert main(["build-features", str(small_dataset), "--config", str(toml), "--out", str(tmp_path / "fs"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
