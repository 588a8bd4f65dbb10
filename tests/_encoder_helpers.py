"""Shared pieces of the encoder tests: obvious pyramid-cell membership, a small build."""

from __future__ import annotations

import json

import numpy as np

from classify_images.pipeline.settings.config import validate_config

from .conftest import SMALL_CONFIG


def reference_cells(x, y, shape, grids):
    """Lists of descriptor indices per cell, by explicit loops over (rows, cols) grids."""
    h, w = shape
    cells = []
    for rows, cols in grids:
        for r in range(rows):
            for c in range(cols):
                cells.append(
                    [
                        i
                        for i in range(len(x))
                        if min(int(x[i] * cols / w), cols - 1) == c and min(int(y[i] * rows / h), rows - 1) == r
                    ]
                )
    return cells


def random_layout(rng, n, shape=(50, 80)):
    """``n`` random descriptor positions in an image of ``shape`` (h, w)."""
    h, w = shape
    return rng.uniform(0, w, n), rng.uniform(0, h, n), shape


def small_config(codebook: dict, pooling: dict, normalization: str):
    """The tests' small pipeline with another codebook, pooling and normalisation."""
    raw = json.loads(json.dumps(SMALL_CONFIG))
    raw["codebook"] = codebook
    raw["pooling"] = pooling
    raw["normalization"] = {"method": normalization}
    return validate_config(raw)


def assert_image_model_classifies_like_rows(feature_set, image_root, model_path):
    """A linear model trained on ``feature_set``, saved with its extractor to ``model_path`` and
    restored as an image pipeline, gives the test images the feature set's rows and predictions."""
    from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC
    from classify_images.pipeline.extraction.extractor import FeatureExtractor
    from classify_images.pipeline.interfaces.image_features import load_image_model
    from classify_images.pipeline.training.model_file import save_model

    fs = feature_set
    classifier = QuadraticHingeSVC().fit(np.asarray(fs.X_train), np.asarray(fs.class_names)[fs.y_train])
    model = save_model(
        model_path, classifier, extractor=FeatureExtractor.from_feature_set(fs), feature_set=fs.identity()
    )
    paths = [str(image_root / p) for p in fs.test_paths]
    restored = load_image_model(model)
    np.testing.assert_allclose(
        restored.named_steps["features"].transform(paths), np.asarray(fs.X_test), rtol=1e-5, atol=1e-6
    )
    assert list(restored.predict(paths)) == list(classifier.predict(np.asarray(fs.X_test)))
    return model


def assert_new_images_match_rows(feature_set, paths):
    """The extractor rebuilt from a feature set gives its test rows to the same images."""
    from classify_images.pipeline.extraction.extractor import FeatureExtractor

    extractor = FeatureExtractor.from_feature_set(feature_set)
    X, status = extractor.transform_images(paths)
    assert all(s["ok"] for s in status)
    np.testing.assert_allclose(X, np.asarray(feature_set.X_test)[: len(paths)], rtol=1e-5, atol=1e-7)
