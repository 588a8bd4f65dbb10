"""Named split protocols (``--protocol``, classify_images/pipeline/settings/protocols.py) and the one-line warning for
classes with fewer images than a protocol asks (issue 25 point 5)."""

from __future__ import annotations

import json

import pytest

from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.protocols import PROTOCOLS, ProtocolError, protocol_split, short_classes

from .conftest import FIXTURE_IMAGES, write_config_toml


def test_protocol_counts():
    assert protocol_split("scene15", [300, 200]) == (100, None)
    assert protocol_split("caltech101-15", [31, 800]) == (15, 50)
    assert protocol_split("caltech101-30", [31, 800]) == (30, 50)
    # half of each class (the split's train_fraction); the count recorded is the smallest class's
    assert protocol_split("half", [12, 7, 20]) == (3, None) and PROTOCOLS["half"].train_fraction == 0.5
    assert protocol_split("half", [3, 2]) == (1, None)
    with pytest.raises(ProtocolError, match="known: scene15"):
        protocol_split("caltech256", [10, 10])
    assert set(PROTOCOLS) == {"scene15", "caltech101-15", "caltech101-30", "half"}


def test_short_classes_line():
    assert short_classes(["a", "b"], [80, 100], 30, 50) is None
    assert short_classes(["a", "b"], [10, 100], 30, None) is None  # all the rest: nothing is short
    line = short_classes(["a", "b", "c"], [31, 79, 200], 30, 50)
    assert line.startswith(
        "2 class(es) have fewer than the 80 images the split asks (30 training + 50 test): a (31), b (79)"
    )
    assert "\n" not in line


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("protocols")
    return root, write_config_toml(root / "small.toml")


def _build(workspace, capsys, name, *options):
    root, config = workspace
    out = root / name
    code = main(
        [
            "build-features",
            str(FIXTURE_IMAGES),
            "--config",
            str(config),
            "--out",
            str(out),
            "--cache-dir",
            str(root / "cache"),
            "-q",
            *options,
        ]
    )
    _, err = capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text()) if code == 0 else None
    return code, err, manifest


def test_protocol_half_overrides_the_config_and_options_override_the_protocol(workspace, capsys):
    code, err, manifest = _build(workspace, capsys, "half", "--protocol", "half")  # 12 images per class
    assert code == 0, err
    assert (manifest["split"]["train_per_class"], manifest["split"]["test_per_class"]) == (6, None)
    assert len(manifest["split"]["test"]) == 4 * 6 and "warning" not in err
    code, err, manifest = _build(workspace, capsys, "half-4", "--protocol", "half", "--train-per-class", "4")
    assert code == 0, err
    assert (manifest["split"]["train_per_class"], manifest["split"]["test_per_class"]) == (4, None)


def test_classes_smaller_than_the_protocol_asks_give_one_warning_line(workspace, capsys):
    code, err, manifest = _build(workspace, capsys, "caltech", "--protocol", "caltech101-15", "--train-per-class", "5")
    assert code == 0, err
    assert (manifest["split"]["train_per_class"], manifest["split"]["test_per_class"]) == (5, 50)
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [
        "classify-images build-features: warning: 4 class(es) have fewer than the 55 images the "
        "split asks (5 training + 50 test): china (12), digit_0 (12), digit_1 (12), flower (12); "
        "their test sets are smaller"
    ], err


def test_a_protocol_asking_more_training_images_than_a_class_has_is_one_error(workspace, capsys):
    code, err, _ = _build(workspace, capsys, "scene15", "--protocol", "scene15")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "fewer than 101 readable images" in err and "lower --train-per-class to at most 11" in err
