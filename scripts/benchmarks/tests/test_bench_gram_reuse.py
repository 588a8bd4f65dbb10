"""bench_gram_reuse runs end to end on a tiny problem: both modes, the same model."""

from __future__ import annotations

from bench_gram_reuse import main


def test_tiny_run_reports_both_modes_and_the_same_model(capsys, tmp_path):
    assert (
        main(
            [
                "--images",
                "60",
                "--dims",
                "300",
                "--classes",
                "3",
                "--mirrored",
                "--grid",
                "0.1,1",
                "--repeats",
                "1",
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("machine: ")
    assert lines[1].startswith("reused Gram matrix: 120 rows x 300 dims") and lines[2].startswith("recomputed")
    assert lines[3].endswith("same model bit for bit: True")
    assert (tmp_path / "r.json").exists()
