"""An experiment on rows stored float16 trains the linear SVM on float16 rows: one copy, the store's bytes."""

from __future__ import annotations

import numpy as np

from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training import evaluation


def _float16_feature_set(tmp_path, store):
    from classify_images.pipeline.extraction.build import build_feature_set

    from ._encoder_helpers import small_config
    from .conftest import FIXTURE_IMAGES
    from .test_compressed_rows import FISHER

    build_feature_set(
        FIXTURE_IMAGES, tmp_path / "fs", small_config(**FISHER), cache_dir=None, store=store, rows="float16"
    )
    return load_feature_set(tmp_path / "fs")


def test_linear_experiment_gathers_float16_training_rows_and_scores_as_float32(tmp_path, monkeypatch):
    feature_set = _float16_feature_set(tmp_path, "sharded")
    seen = []
    train = evaluation.train_classifier

    def recording(name, params, X, y, **kwargs):
        seen.append((name, X.dtype))
        return train(name, params, X, y, **kwargs)

    monkeypatch.setattr(evaluation, "train_classifier", recording)
    half = evaluation.run_experiment(feature_set, "linear", {}, 1)
    assert seen == [("linear", np.dtype(np.float16))]
    # the same experiment on float32 copies of the same values: the same predictions
    monkeypatch.setattr(evaluation, "training_dtype", lambda *args, **kwargs: np.float32)
    seen.clear()
    single = evaluation.run_experiment(feature_set, "linear", {}, 1)
    assert seen == [("linear", np.dtype(np.float32))]
    assert half.runs[0].mean_per_class_accuracy == single.runs[0].mean_per_class_accuracy


def test_other_classifiers_and_float32_stores_keep_float32_rows(tmp_path):
    feature_set = _float16_feature_set(tmp_path, "sharded")
    assert evaluation.training_dtype(feature_set, "linear") == np.float16
    assert evaluation.training_dtype(feature_set, "pmsvm") == np.float32
    assert evaluation.training_dtype(feature_set, "linear", combine="sum") == np.float32
    feature_set.manifest.setdefault("store", {})["rows"] = "float32"
    assert evaluation.training_dtype(feature_set, "linear") == np.float32
