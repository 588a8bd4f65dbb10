"""bench_fisher_spatial runs end to end on two fixture images with a small GMM."""

from __future__ import annotations

from pathlib import Path

from bench_fisher_spatial import main

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "data" / "images"


def test_tiny_run_reports_both_encoders(capsys):
    assert main(["--data", str(FIXTURES), "--n-images", "2", "--components", "4", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("machine: ") and lines[-1].startswith("2 images,") and "ratio" in lines[-1]
