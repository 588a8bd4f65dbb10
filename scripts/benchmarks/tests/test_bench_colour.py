"""bench_colour runs end to end on the fixture images: one feature set per colour space, the
colour one 3 x 128-dimensional before its encoder, and a result per colour space."""

from __future__ import annotations

import json

import bench_colour

from tests.conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml


def test_bench_colour_on_the_fixture_images(tmp_path, capsys):
    config = write_config_toml(
        tmp_path / "small.toml",
        {**SMALL_CONFIG, "codebook": {"kind": "vlad", "size": 4, "n_samples": 2000, "n_iter": 5}},
    )
    out = tmp_path / "result.json"
    assert (
        bench_colour.main(
            [
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--train-per-class",
                "6",
                "--test-per-class",
                "6",
                "--colors",
                "gray",
                "opponent",
                "--workdir",
                str(tmp_path / "work"),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.startswith("machine: ") and "opponent - gray:" in printed
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"gray", "opponent"}
    # VLAD keeps the descriptor length: 5 cells x 4 words x 128 (grey) or x 384 (opponent)
    assert results["gray"]["n_features"] == 5 * 4 * 128 and results["opponent"]["n_features"] == 5 * 4 * 384
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["n_train"] == 24 for r in results.values())


def test_bench_flip_on_the_fixture_feature_set(tmp_path, capsys):
    import bench_flip

    from tests.conftest import build_fixture_feature_set

    out = tmp_path / "flip.json"
    assert bench_flip.main([str(build_fixture_feature_set(tmp_path)), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "flip-both" in printed and "mirrored rows of 40 images" in printed
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"C", "plain", "flip-train", "flip-test", "flip-both"}
    # training on twice the rows takes its own fit; the test-time variants reuse the same model
    assert results["flip-test"]["train_seconds"] == results["plain"]["train_seconds"]


def test_bench_search_methods_agree_on_the_fixture_feature_set(tmp_path, capsys):
    import bench_search

    from tests.conftest import build_fixture_feature_set

    fs = str(build_fixture_feature_set(tmp_path))
    capsys.readouterr()
    reports = []
    for method in ("gram", "refit"):
        assert bench_search.main([fs, "--method", method, "--grid", "0.01,1,100"]) == 0
        reports.append(json.loads(capsys.readouterr().out.splitlines()[-1]))
    assert [r["method"] for r in reports] == ["gram", "refit"]
    assert reports[0]["scores"] == reports[1]["scores"] and len(reports[0]["scores"]) == 3
