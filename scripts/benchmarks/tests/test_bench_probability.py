"""bench_probability runs on a tiny problem and its two calibrations agree."""

from __future__ import annotations

from bench_probability import main


def test_bench_probability_tiny_run_agrees_with_the_peer():
    payload = main(
        [
            "--train-per-class",
            "10",
            "--test-per-class",
            "4",
            "--n-features",
            "32",
            "--classifiers",
            "linear",
            "--folds",
            "3",
        ]
    )
    row = payload["results"]["linear"]
    assert row["max_abs_difference"] < 1e-6
    assert row["fit_and_calibrate_seconds"] >= row["fit_seconds"] > 0
