"""bench_dictionary_learning runs end to end on a tiny sample: our learner on 1 and 2 threads
gives one dictionary, and its held-out objective is reported against spams' (when installed)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
from bench_dictionary_learning import main


def test_tiny_run_reports_every_learner_and_the_same_bits(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "sample.npy", rng.integers(0, 256, (900, 16), dtype=np.uint8))
    with_spams = importlib.util.find_spec("spams") is not None
    argv = [
        "--sample",
        str(tmp_path / "sample.npy"),
        "--atoms",
        "12",
        "--iterations",
        "6",
        "--batch-size",
        "50",
        "--held-out",
        "200",
        "--json",
        str(tmp_path / "out.json"),
    ]
    assert main(argv + ([] if with_spams else ["--spams-threads"])) == 0
    result = json.loads((tmp_path / "out.json").read_text())
    names = [r["name"] for r in result["runs"]]
    assert names == ["initial atoms"] + (["spams 1 thr"] if with_spams else []) + ["ours 1 thr", "ours 2 thr"]
    assert result["ours_same_bits_on_every_thread_count"] is True
    assert all(r["objective"] < result["runs"][0]["objective"] for r in result["runs"][1:])
    if with_spams:
        assert "objective_vs_spams" in result["runs"][-1]
    assert capsys.readouterr().out.startswith("machine: ")
