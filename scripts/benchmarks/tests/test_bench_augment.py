"""bench_augment runs on a tiny augmented feature set and agrees with the product's experiment."""

from __future__ import annotations

from bench_augment import main

from tests.conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml


def test_bench_augment_tiny_run_matches_run_experiment(tmp_path):
    from classify_images.pipeline.interfaces.cli import main as cli

    config = {**SMALL_CONFIG, "augment": {"flip_train": True, "flip_test": "average"}}
    toml = write_config_toml(tmp_path / "aug.toml", config)
    assert (
        cli(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(toml),
                "--out",
                str(tmp_path / "fs"),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
        == 0
    )
    payload = main([str(tmp_path / "fs"), "--seeds", "0", "1", "--grid", "1", "10", "--check-product"])
    check = payload["summary"]["product_check"]
    assert check["run_experiment"] == check["bench"]
    assert len(payload["runs"]) == 2 and payload["cost"]["mirror_bytes"] == payload["cost"]["rows_bytes"]
    for run in payload["runs"]:
        assert run["C"] in (1.0, 10.0)
        assert 0 <= run["train+test"]["accuracy"] <= 1
