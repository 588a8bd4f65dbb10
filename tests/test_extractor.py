"""The FeatureExtractor: the vectors of build_feature_set and of predict come from one object."""

import json

import numpy as np
import pytest

from classify_images.coding.normalize import Normalizer
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.extraction.extractor import FeatureExtractor
from classify_images.pipeline.settings.config import validate_config
from classify_images.pipeline.settings.dataset import file_fingerprint
from classify_images.pipeline.storage.feature_store import load_feature_set

from .conftest import SMALL_CONFIG


def _build(tmp_path, dataset, **tables):
    raw = json.loads(json.dumps(SMALL_CONFIG))
    raw.update(tables)
    out = tmp_path / "fs"
    build_feature_set(dataset, out, validate_config(raw), cache_dir=tmp_path / "cache")
    return load_feature_set(out)


@pytest.mark.parametrize(
    "tables",
    [
        {},  # k-means, average pooling, l1 (per-vector, applied as each image is pooled)
        {"pooling": {"method": "sqrt", "levels": [1, 2]}, "normalization": {"method": "minmax"}},  # fitted
    ],
    ids=["l1", "minmax"],
)
def test_extractor_vectors_are_the_stored_rows(tmp_path, small_dataset, tables):
    fs = _build(tmp_path, small_dataset, **tables)
    extractor = FeatureExtractor.from_feature_set(fs)
    assert extractor.n_features == fs.n_features
    assert extractor.codebook_digest == fs.manifest["codebook"]["digest"]
    paths = [str(small_dataset / p) for p in fs.train_paths[:3] + fs.test_paths[:3]]
    X, status = extractor.transform_images(paths)
    assert all(s["ok"] for s in status)
    np.testing.assert_array_equal(X, np.concatenate([fs.X_train[:3], fs.X_test[:3]]))
    single = extractor.vector(paths[0], file_fingerprint(paths[0]))
    np.testing.assert_array_equal(single, fs.X_train[0])


def test_minmax_statistics_come_from_the_training_rows(tmp_path, small_dataset):
    fs = _build(tmp_path, small_dataset, normalization={"method": "minmax"})
    normalizer = fs.normalizer()
    assert isinstance(normalizer, Normalizer) and normalizer.method == "minmax"
    extractor = FeatureExtractor.from_feature_set(fs)
    paths = [str(small_dataset / p) for p in fs.train_paths]
    pooled = np.stack([extractor.pooled(p, file_fingerprint(p)) for p in paths])
    np.testing.assert_array_equal(normalizer.minima_, pooled.min(axis=0))
    np.testing.assert_array_equal(normalizer.maxima_, pooled.max(axis=0))
    X_train = np.asarray(fs.X_train)
    assert X_train.min() == 0.0 and X_train.max() <= 1.0


def test_unreadable_files_are_reported_not_raised(tmp_path, small_dataset):
    fs = _build(tmp_path, small_dataset)
    empty, text = tmp_path / "empty.jpg", tmp_path / "text.png"
    empty.write_bytes(b"")
    text.write_text("not an image")
    good = str(small_dataset / fs.test_paths[0])
    paths = [str(tmp_path / "missing.jpg"), good, str(empty), str(text)]
    X, status = FeatureExtractor.from_feature_set(fs).transform_images(paths)
    assert [s["path"] for s in status] == paths
    assert [s["ok"] for s in status] == [False, True, False, False]
    assert status[0]["reason"] == "file does not exist" and all(s["reason"] for s in status if not s["ok"])
    assert X.shape == (1, fs.n_features) and X.dtype == np.float32
    np.testing.assert_array_equal(X[0], fs.X_test[0])
    X_none, _ = FeatureExtractor.from_feature_set(fs).transform_images([str(empty)])
    assert X_none.shape == (0, fs.n_features)


def test_unfitted_minmax_extractor_refuses_vectors(tmp_path, small_dataset):
    fs = _build(tmp_path, small_dataset)
    extractor = FeatureExtractor(
        validate_config({**SMALL_CONFIG, "normalization": {"method": "minmax"}}), fs.codebook()
    )
    path = str(small_dataset / fs.test_paths[0])
    with pytest.raises(ValueError, match="fitted"):
        extractor.vector(path, file_fingerprint(path))
