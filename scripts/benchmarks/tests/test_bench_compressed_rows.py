"""Tests of benchmarks/bench_compressed_rows.py on small synthetic rows."""

from __future__ import annotations

import bench_compressed_rows
import numpy as np


def test_measure_reports_bytes_accuracy_and_streaming():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 64))
    y = np.arange(300) % 3
    X = (centres[y] + rng.normal(size=(300, 64))).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    results = bench_compressed_rows.measure(X[:150], y[:150], X[150:], y[150:], epochs=(5,), block_rows=50)
    table = results["encodings"]
    assert [table[e]["bytes_per_image"] for e in bench_compressed_rows.ENCODINGS] == [256, 128, 4, 8]
    assert (
        table["float32"]["relative_l2_error_test"]
        == 0.0
        < table["float16"]["relative_l2_error_test"]
        < table["pq8"]["relative_l2_error_test"]
        < table["pq16"]["relative_l2_error_test"]
    )
    assert table["float32"]["lbfgs"]["accuracy"] > 0.9
    assert set(results["streaming"]) == {"float32/asgd-5", "pq8/asgd-5", "float32/lbfgs-blocks", "pq8/lbfgs-blocks"}
    exact = results["streaming"]["float32/lbfgs-blocks"]  # L-BFGS block by block: fit's optimum, within tol
    assert abs(exact["objective_gap"]) < 1e-3 and exact["accuracy"] == table["float32"]["lbfgs"]["accuracy"]
    assert results["streaming"]["float32/asgd-5"]["objective_gap"] >= 0
    assert results["streaming"]["float32/asgd-5"]["accuracy"] > 0.8
