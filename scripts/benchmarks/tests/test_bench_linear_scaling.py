"""bench_linear_scaling runs tiny points in child processes and records what the benchmark reports."""

from __future__ import annotations

import json

import numpy as np
from bench_linear_scaling import N_CLASSES, main, make_rows


def test_made_rows_are_unit_float16_with_the_class_cycle(tmp_path):
    make_rows(tmp_path / "rows.npy", 2 * N_CLASSES, 256)
    X = np.load(tmp_path / "rows.npy", mmap_mode="r")
    assert X.dtype == np.float16 and X.shape == (2 * N_CLASSES, 256)
    norms = np.linalg.norm(np.asarray(X, dtype=np.float64), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=2e-3)
    assert np.all(np.asarray(X) >= 0)


def test_tiny_points_record_path_cpu_memory_and_the_blas_reference(tmp_path):
    out = tmp_path / "out.json"
    main(
        ["--rows", "150", "202", "--dims", "512", "--reference", "202", "--data", str(tmp_path / "r.npy")]
        + ["--json", str(out)]
    )
    points = json.loads(out.read_text())["points"]
    assert [p["rows"] for p in points] == [150, 202]
    for point in points:
        assert point["path"] == "span" and point["finished"] and point["classes"] == N_CLASSES
        assert point["train_cpu_s"] > 0 and point["peak_rss_bytes"] > point["peak_anonymous_bytes"] > 0
    assert "blas_gram_cpu_s" in points[1] and "blas_gram_cpu_s" not in points[0]
