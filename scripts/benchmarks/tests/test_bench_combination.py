"""bench_combination runs end to end on two small fixture feature sets (k-means histograms and
max-pooled ones): every single channel, concat, average and mbkl, paired over two splits."""

from __future__ import annotations

import json

import bench_combination
import pytest

from tests.conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml


def _build(tmp_path, name, **tables):
    from classify_images.pipeline.interfaces.cli import main

    config = write_config_toml(tmp_path / f"{name}.toml", {**SMALL_CONFIG, **tables})
    out = tmp_path / name
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--out",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
        == 0
    )
    return out


def test_bench_combination_on_fixture_channels(tmp_path, capsys):
    bof = _build(tmp_path, "bof")
    maxpool = _build(tmp_path, "max", pooling={"method": "max", "levels": [1, 2]}, normalization={"method": "l2"})
    out = tmp_path / "combination.json"
    capsys.readouterr()
    assert (
        bench_combination.main(
            [
                "--channel",
                f"bof={bof}",
                "--channel",
                f"max={maxpool}:2",
                "--seeds",
                "0,1",
                "--search",
                "C=1,100",
                "--mbkl-search",
                "C=10,100",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.startswith("machine: ") and "peak resident memory" in printed
    report = json.loads(out.read_text())
    labels = [r["label"] for r in report["results"]]
    assert labels == ["bof", "max", "concat(bof+max)", "average(bof+max)", "mbkl(bof+max)"]
    assert [c["weight"] for c in report["channels"]] == [1.0, 2.0] and not any(c["signed"] for c in report["channels"])
    for result in report["results"]:
        assert [run["seed"] for run in result["runs"]] == [0, 1]
        assert all(
            0.0 <= run["accuracy"] <= 1.0 and run["chosen"]["C"] in result["grid"]["C"] for run in result["runs"]
        )
    shares = report["results"][-1]["runs"][0]["channel_weights"]
    assert set(shares) == {"bof", "max"} and abs(sum(shares.values()) - 1.0) < 1e-9
    assert set(report["gains"]) == {"concat(bof+max)", "average(bof+max)", "mbkl(bof+max)"}


def test_gram_and_rows_methods_agree(tmp_path, capsys):
    """The linear variants trained from the channels' Gram matrices (eigenbasis of the training span)
    are the classifiers trained on the combined rows: at the same C, the same accuracies per split
    (a search over a grid can break a tie of held-out scores the other way: C is fixed here)."""
    bof = _build(tmp_path, "bof")
    maxpool = _build(tmp_path, "max", pooling={"method": "max", "levels": [1, 2]}, normalization={"method": "l2"})
    reports = []
    for method in ("gram", "rows"):
        out = tmp_path / f"{method}.json"
        assert (
            bench_combination.main(
                [
                    "--channel",
                    f"bof={bof}",
                    "--channel",
                    f"max={maxpool}:2",
                    "--seeds",
                    "0,1,2",
                    "--search",
                    "C=10",
                    "--only",
                    "bof,concat(bof+max),average(bof+max)",
                    "--method",
                    method,
                    "--gram-dir",
                    str(tmp_path / "grams"),
                    "--json",
                    str(out),
                ]
            )
            == 0
        )
        reports.append(json.loads(out.read_text())["results"])
    for by_gram, by_rows in zip(*reports):
        assert by_gram["label"] == by_rows["label"]
        assert [r["accuracy"] for r in by_gram["runs"]] == pytest.approx([r["accuracy"] for r in by_rows["runs"]])
    assert {r["method"] for r in reports[0][0]["runs"]} == {"gram"} and len(list((tmp_path / "grams").iterdir())) == 2
