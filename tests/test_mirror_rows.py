"""Mirrored rows (``[augment]``): an image and its mirror encoded in one task, dense SIFT run once
for both (the mirror's descriptors are the image's, permuted); the codebook's sample drawn from
at most ``max(ceil(n_samples / 300), 100)`` training images."""

from __future__ import annotations

import numpy as np

from classify_images.features import descriptors as descriptors_module
from classify_images.pipeline.extraction import fitting
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.settings.config import load_config
from classify_images.pipeline.settings.dataset import file_fingerprint
from classify_images.pipeline.settings.plan import feature_plan_of
from classify_images.pipeline.storage.feature_store import load_feature_set

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml


def _config(tmp_path, **codebook):
    tables = {
        **SMALL_CONFIG,
        "sift": {**SMALL_CONFIG["sift"], "cache_descriptors": False},
        "codebook": {**SMALL_CONFIG["codebook"], **codebook},
        "augment": {"flip_train": True, "flip_test": "average"},
    }
    return load_config(write_config_toml(tmp_path / "mirrors.toml", tables))


def test_a_cold_mirrored_build_runs_dense_sift_once_per_image_and_per_sampled_image(tmp_path, monkeypatch):
    calls = []
    real = descriptors_module.DenseSift.compute

    def counting(self, image):
        calls.append(image.shape)
        return real(self, image)

    monkeypatch.setattr(descriptors_module.DenseSift, "compute", counting)
    config = _config(tmp_path)
    fs = load_feature_set(build_feature_set(FIXTURE_IMAGES, tmp_path / "fs", config, cache_dir=tmp_path / "cache").path)
    n_train, n_test = len(fs.train_paths), len(fs.test_paths)
    sampled = len(fitting.sampled_images(np.arange(n_train), feature_plan_of(config)))
    assert len(calls) == sampled + n_train + n_test  # not + 2 (n_train + n_test): the mirrors reuse them
    assert np.asarray(fs.mirrors("train")).shape == np.asarray(fs.X_train).shape
    assert not np.array_equal(np.asarray(fs.mirrors("train")), np.asarray(fs.X_train))


def test_mirror_rows_do_not_depend_on_the_task_that_computes_them(tmp_path):
    """A mirror row computed alone (no shared scope: dense SIFT of the image again) is the row the
    build's pair task stored."""
    from classify_images.pipeline.extraction.extractor import FeatureExtractor

    config = _config(tmp_path)
    fs = load_feature_set(build_feature_set(FIXTURE_IMAGES, tmp_path / "fs", config, cache_dir=tmp_path / "cache").path)
    extractor = FeatureExtractor.from_feature_set(fs)
    for row in (0, len(fs.train_paths) - 1):
        path = str(FIXTURE_IMAGES / fs.train_paths[row])
        alone = extractor.vector(path, file_fingerprint(path), flip=True)
        np.testing.assert_array_equal(alone.astype(np.float32), np.asarray(fs.mirrors("train"))[row].astype(np.float32))


def test_the_sample_is_drawn_from_at_most_n_samples_over_300_training_images_and_at_least_100():
    class Plan:
        n_samples, sample_seed = 60_000, 7

    few = np.arange(5, 205)
    np.testing.assert_array_equal(fitting.sampled_images(few, Plan), few)  # 200 = ceil(60 000 / 300)
    many = np.arange(100, 1000)
    chosen = fitting.sampled_images(many, Plan)
    assert chosen.size == 200 and np.all(np.diff(chosen) > 0) and set(chosen) <= set(many)
    Plan.n_samples = 3000  # 10 images' worth: still 100 of them
    assert fitting.sampled_images(many, Plan).size == 100
    Plan.n_samples = 60_000
    np.testing.assert_array_equal(fitting.sampled_images(many, Plan), chosen)  # seeded
    Plan.sample_seed = 8
    assert not np.array_equal(fitting.sampled_images(many, Plan), chosen)
