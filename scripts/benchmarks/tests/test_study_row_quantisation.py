"""Tests of benchmarks/study_row_quantisation.py on a small Fisher-vector set with mirrors."""

from __future__ import annotations

import numpy as np
import study_row_quantisation

from classify_images.coding.scalar_quantizer import dequantize_rows, quantize_rows
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.settings.config import validate_config
from classify_images.pipeline.storage.feature_store import load_feature_set
from tests._encoder_helpers import small_config
from tests.conftest import FIXTURE_IMAGES


def test_restore_writes_what_a_build_with_those_rows_would_hold(tmp_path):
    raw = small_config(
        {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 5}, {"levels": [1]}, "none"
    ).to_dict()
    raw["augment"] = {"flip_train": True, "flip_test": "average"}
    config = validate_config(raw)
    exact = build_feature_set(
        FIXTURE_IMAGES, tmp_path / "exact", config, cache_dir=tmp_path / "cache", rows="float32"
    ).path
    built = build_feature_set(FIXTURE_IMAGES, tmp_path / "int4", config, cache_dir=tmp_path / "cache", rows="int4").path
    result = study_row_quantisation.restore(exact, tmp_path / "copy", "int4", rows_per_block=5)
    assert result["rows"] == "int4" and result["from"] == "float32"
    assert (
        0 < result["relative_l2_error"] < 0.5 and result["row_file_bytes_after"] < result["row_file_bytes_before"] / 5
    )
    copy, reference, source = load_feature_set(tmp_path / "copy"), load_feature_set(built), load_feature_set(exact)
    assert copy.row_encoding == "int4" and copy.manifest["split"] == source.manifest["split"]
    for split in ("train", "test"):
        np.testing.assert_array_equal(copy._dense(split), reference._dense(split))  # as the int4 build stored them
        np.testing.assert_array_equal(
            np.asarray(copy.mirrors(split)), dequantize_rows(quantize_rows(np.asarray(source.mirrors(split)), 4), 4)
        )
