"""bench_default_search runs on a tiny feature set with mirrors: both sides, the ratio, the choice,
and the comparison with a search at a small solver tolerance."""

from __future__ import annotations

import json

from bench_default_search import main

from tests.conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml


def test_bench_default_search_tiny_run(tmp_path):
    from classify_images.pipeline.interfaces.cli import main as cli

    config = {**SMALL_CONFIG, "augment": {"flip_train": True, "flip_test": "average"}}
    toml = write_config_toml(tmp_path / "aug.toml", config)
    argv = ["build-features", str(FIXTURE_IMAGES), "--config", str(toml), "--out", str(tmp_path / "fs")]
    assert cli([*argv, "--cache-dir", str(tmp_path / "cache"), "-q"]) == 0
    out = tmp_path / "bench.json"
    payload = main([str(tmp_path / "fs"), "--rounds", "1", "--C", "1", "--reference-tol", "1e-8", "--json", str(out)])
    assert json.loads(out.read_text())["rounds"] == payload["rounds"]
    (round_,) = payload["rounds"]
    assert round_["ratio"] > 0 and round_["cpu_ratio"] > 0 and round_["chose"]["flips"] is not None
    assert round_["scores"] == payload["reference"]["default_scores"]
    reference = payload["reference"]
    assert len(reference["scores"]) == 5 * 4  # 5 values of C x 4 uses of the mirrors
    assert reference["scores"].keys() == reference["default_scores"].keys()
    assert 0 <= reference["largest_difference"] <= 1
