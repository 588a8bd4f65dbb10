"""``classify-images run`` (build + train + evaluate), the ``[classifier]`` config table, the
cache as a citizen (XDG_CACHE_HOME, place and size printed, ``cache info|clear``) and provenance."""

from __future__ import annotations

import json
import os

import pytest

from classify_images.pipeline.extraction.build import default_cache_dir
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import ConfigError, classifier_table, load_config

from .conftest import FIXTURE_IMAGES, write_config_toml


def _config_with_classifier(path, table: str):
    write_config_toml(path)
    path.write_text(path.read_text() + table)
    return path


# ------------------------------------------------------------------------ run
def test_run_builds_trains_and_evaluates(tmp_path, capsys):
    from classify_images.pipeline.training.model_file import load_model

    config = _config_with_classifier(
        tmp_path / "c.toml", '[classifier]\nname = "pmsvm"\nparams = { p = -8, C = 0.1 }\n'
    )
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--out",
                str(out),
                "-q",
                "--cache-dir",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    stdout = capsys.readouterr().out
    assert "mean per-class accuracy" in stdout and "stage cache:" in stdout
    model, meta = load_model(out / "model.npz")
    assert meta["classifier"] == "pmsvm" and meta["params"]["p"] == -8 and meta["params"]["C"] == 0.1
    assert meta["params"]["random_state"] == 0
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["classifier"] == "pmsvm" and report["mean_per_class_accuracy"] > 0.4
    assert (out / "features" / "manifest.json").exists()
    # --classifier replaces the table (its params belong to the table's classifier); --param adds
    assert (
        main(
            [
                "run",
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--out",
                str(tmp_path / "run2"),
                "-q",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--classifier",
                "linear",
                "--param",
                "C=10",
                "--threads",
                "1",
            ]
        )
        == 0
    )
    _, meta = load_model(tmp_path / "run2" / "model.npz")
    assert meta["classifier"] == "linear" and meta["params"]["C"] == 10


def test_run_same_numbers_as_the_three_commands(tmp_path, capsys):
    config = write_config_toml(tmp_path / "c.toml")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    assert (
        main(
            [
                "run",
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--classifier",
                "mbkl",
                "--out",
                str(tmp_path / "run"),
                "-q",
                *cache,
            ]
        )
        == 0
    )
    fs, model = tmp_path / "fs", tmp_path / "m.npz"
    assert main(["build-features", str(FIXTURE_IMAGES), "--config", str(config), "--out", str(fs), "-q", *cache]) == 0
    assert main(["train", str(fs), "--classifier", "mbkl", "--out", str(model)]) == 0
    assert main(["evaluate", str(fs), str(model), "--out", str(tmp_path / "rep")]) == 0
    one = json.loads((tmp_path / "run" / "report" / "report.json").read_text())
    three = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert one["confusion"] == three["confusion"] and one["config_hash"] == three["config_hash"]


@pytest.mark.parametrize(
    "table, message",
    [
        ('[classifier]\nname = "svm"\n', "classifier.name = 'svm': expected one of"),
        ('[classifier]\nname = "pmsvm"\nparams = { gamma = 1 }\n', "has no parameter 'gamma'"),
        ('[classifier]\nname = "pmsvm"\nkernel = "x"\n', "unknown key classifier.kernel"),
        ('[classifier]\nname = "pmsvm"\nparams = 3\n', "classifier.params must be a table"),
        ("classifier = 3\n", "[classifier] must be a table"),
    ],
)
def test_bad_classifier_table_is_one_line(tmp_path, capsys, table, message):
    config = tmp_path / "c.toml"
    config.write_text(table + (write_config_toml(tmp_path / "base.toml").read_text()))
    with pytest.raises(ConfigError, match=None) as info:
        classifier_table(config)
    assert message in str(info.value)
    assert main(["run", str(FIXTURE_IMAGES), "--config", str(config), "--out", str(tmp_path / "r"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_classifier_table_leaves_the_feature_config_alone(tmp_path):
    plain = write_config_toml(tmp_path / "plain.toml")
    with_table = _config_with_classifier(tmp_path / "t.toml", '[classifier]\nname = "linear"\n')
    assert load_config(with_table) == load_config(plain)  # same feature set, same config hash
    assert classifier_table(with_table) == ("linear", {}) and classifier_table(plain) == (None, {})


def test_run_without_a_classifier_is_one_line(tmp_path, capsys):
    config = write_config_toml(tmp_path / "c.toml")
    assert main(["run", str(FIXTURE_IMAGES), "--config", str(config), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert "name the classifier" in err and len(err.splitlines()) == 1


def test_run_out_is_a_file_is_one_line(tmp_path, capsys):
    config = write_config_toml(tmp_path / "c.toml")
    (tmp_path / "file").write_text("mine")
    assert (
        main(
            [
                "run",
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--classifier",
                "linear",
                "-q",
                "--out",
                str(tmp_path / "file"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "is a file" in err and len(err.splitlines()) == 1 and (tmp_path / "file").read_text() == "mine"


# ---------------------------------------------------------------------- cache
@pytest.mark.parametrize(
    "environment, expected",
    [
        ({"CLASSIFY_IMAGES_CACHE": "/c/mine", "XDG_CACHE_HOME": "/x"}, "/c/mine"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/classify-images"),
        ({"XDG_CACHE_HOME": "relative/path"}, "HOME/.cache/classify-images"),
        ({}, "HOME/.cache/classify-images"),
    ],
)
def test_default_cache_dir(monkeypatch, tmp_path, environment, expected):
    monkeypatch.delenv("CLASSIFY_IMAGES_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    assert str(default_cache_dir()) == expected.replace("HOME", str(tmp_path))


def test_cache_info_and_clear_delete_only_the_stage_cache(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "xdg" / "classify-images"
    monkeypatch.delenv("CLASSIFY_IMAGES_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    config = write_config_toml(tmp_path / "c.toml")
    assert (
        main(["build-features", str(FIXTURE_IMAGES), "--config", str(config), "--out", str(tmp_path / "fs"), "-q"]) == 0
    )
    out = capsys.readouterr().out
    assert f"stage cache: {cache} (" in out
    files = [os.path.join(d, f) for d, _, names in os.walk(cache / "joblib") for f in names]
    size = sum(os.lstat(f).st_size for f in files)
    assert files and size > 0
    assert main(["cache", "info"]) == 0
    info = capsys.readouterr().out
    assert str(cache) in info and f"in {len(files)} files" in info
    (cache / "my-notes.txt").write_text("a file the user keeps here")
    assert main(["cache", "clear"]) == 0
    assert "deleted" in capsys.readouterr().out
    assert not (cache / "joblib").exists() and (cache / "my-notes.txt").read_text()
    assert main(["cache", "info"]) == 0 and "0 bytes in 0 files" in capsys.readouterr().out
    (cache / "my-notes.txt").unlink()
    assert main(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert not cache.exists()  # empty folders are removed; clearing twice is fine
    assert main(["cache", "info"]) == 0 and "does not exist yet" in capsys.readouterr().out


# ----------------------------------------------------------------- provenance
def test_provenance_records_opencv_spams_and_commit():
    import importlib.util

    import cv2

    from classify_images.pipeline.storage.provenance import git_commit, library_versions

    versions = library_versions()
    assert versions["opencv"].startswith(cv2.__version__.split("-")[0][:3])
    # spams is the optional extra classify-images[spams]: its version when installed
    assert (versions["spams"] != "unknown") == (importlib.util.find_spec("spams") is not None)
    commit = git_commit()
    if commit is not None:  # running from a git checkout (the repository's own tests do)
        assert versions["git_commit"] == commit and len(commit.split("+")[0]) == 40
