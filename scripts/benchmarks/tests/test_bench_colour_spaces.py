"""bench_colour_spaces runs on the fixture images and reports every colour space asked for."""

from __future__ import annotations

import json

import bench_colour_spaces

from tests.conftest import FIXTURE_IMAGES


def test_bench_colour_spaces_on_the_fixture_images(tmp_path, capsys):
    out = tmp_path / "spaces.json"
    argv = [str(FIXTURE_IMAGES), "--images", "2", "--max-side", "64", "--rounds", "1", "--json", str(out)]
    assert bench_colour_spaces.main([*argv, "--spaces", "opponent", "c", "lab"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("machine: ") and "lab: conversion" in printed
    result = json.loads(out.read_text())
    assert set(result["cpu_seconds"]) == {"opponent", "c", "lab"} and result["images"] == 2
