"""Tests of benchmarks/bench_packed_codes.py on a small Fisher-vector set."""

from __future__ import annotations

import bench_packed_codes

from classify_images.pipeline.extraction.build import build_feature_set
from tests._encoder_helpers import small_config
from tests.conftest import FIXTURE_IMAGES


def test_measure_reports_both_forms_decoding_to_the_same_bits(tmp_path):
    config = small_config(
        {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 5}, {"levels": [1]}, "none"
    )
    built = build_feature_set(FIXTURE_IMAGES, tmp_path / "fs", config, cache_dir=tmp_path / "cache").path
    record = bench_packed_codes.measure(built, n_rows=5, repeats=2)
    assert record["same_float32_bits"] is True and record["rows"] == 5
    assert record["bits_per_value_one_byte"] > 8  # the steps too
    assert 0 < record["bits_per_value_packed"] < 16  # a tiny row: the header weighs
    assert set(record["cpu_s"]) == {"code", "pack", "decode_bytes", "decode_packed"}
    assert all(value >= 0 for value in record["cpu_s"].values())
