"""bench_logging_overhead runs end to end on a tiny problem and compares the codebooks it learns."""

from __future__ import annotations

import logging

from bench_logging_overhead import main


def test_tiny_run_reports_every_mode_and_the_same_codebook(capsys):
    assert main(["--samples", "300", "--words", "4", "--iterations", "3", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    modes = [line for line in lines if line.startswith("k-means 300x128 -> 4 words")]
    assert len(modes) == 3 and all(line.endswith("same codebook: True") for line in modes)
    assert lines[0].startswith("machine: ") and lines[-1].startswith("has_codebook on a ")
    assert [type(h) for h in logging.getLogger("classify_images").handlers] == [logging.NullHandler]
