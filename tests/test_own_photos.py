"""A folder of one's own photos: one default pipeline with its classifier, nothing dropped silently,
fair splits, a failed run that does not block its retry, and reports that say what ran on what."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from classify_images._log import _StepProgress
from classify_images.pipeline.interfaces import cli, workflows
from classify_images.pipeline.interfaces.cli import build_parser, main
from classify_images.pipeline.interfaces.report_html import class_order, dataset_display
from classify_images.pipeline.settings.config import classifier_table, load_config, named_configs
from classify_images.pipeline.settings.dataset import DatasetError, discover_dataset, split_indices, walk_image_files
from classify_images.pipeline.settings.defaults import RECOMMENDED_CONFIG
from classify_images.pipeline.settings.protocols import small_classes
from classify_images.pipeline.settings.recommendation import default_classifier, pairing_warning, shipped_config_name
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.storage.output_guard import params_suffix

from .conftest import FIXTURE_IMAGES, write_config_toml


@pytest.fixture
def photos(tmp_path):
    """The fixture's four classes of 12 images, with a sub-folder, a HEIC file and a stray file."""
    root = tmp_path / "photos"
    shutil.copytree(FIXTURE_IMAGES, root)
    (root / "china" / "2019").mkdir()
    for name in sorted(p.name for p in (root / "china").glob("*.jpg"))[:3]:
        (root / "china" / name).rename(root / "china" / "2019" / name)
    (root / "flower" / "IMG_0001.HEIC").write_bytes(b"\0\0\0\x18ftypheic")
    (root / "notes.txt").write_text("my photos")
    (root / "china" / ".DS_Store").write_bytes(b"hidden")
    return root


def _small_toml(path, classifier: str | None = None):
    write_config_toml(path)
    if classifier is not None:
        with open(path, "a") as handle:
            handle.write(f'\n[classifier]\nname = "{classifier}"\n')
    return path


# --- nothing dropped silently ---------------------------------------------------------------


def test_class_folders_are_read_recursively_and_every_unused_file_is_listed(photos):
    import cv2

    ok, avif = cv2.imencode(".avif", cv2.imread(str(photos / "flower" / "00.jpg")))
    assert ok
    (photos / "flower" / "phone.avif").write_bytes(avif.tobytes())  # a format the reader decodes: used
    dataset = discover_dataset(photos)
    assert "flower/phone.avif" in dataset.paths
    china = [p for p, label in zip(dataset.paths, dataset.labels) if dataset.class_names[label] == "china"]
    assert len(china) == 12 and sum(p.startswith("china/2019/") for p in china) == 3  # the sub-folder's photos
    reasons = {entry["path"]: entry["reason"] for entry in dataset.unusable}
    assert set(reasons) == {"flower/IMG_0001.HEIC", "notes.txt"}  # hidden files are not photos, not listed
    assert reasons["flower/IMG_0001.HEIC"].startswith("unsupported format (HEIC/HEIF)")
    assert "not in a class folder" in reasons["notes.txt"]


def test_predict_follows_the_same_rule_for_folders(photos):
    found, passed_over = walk_image_files(photos / "flower")
    files, skipped = workflows.find_images([str(photos / "flower"), str(photos / "china")])
    assert len(files) == 12 + 12 and len(found) == 12
    assert [entry["path"] for entry in passed_over] == ["IMG_0001.HEIC"]
    assert {s["path"]: s["reason"][:18] for s in skipped} == {
        str(photos / "flower" / "IMG_0001.HEIC"): "unsupported format"
    }


def test_build_lists_the_skipped_files_with_their_reasons(photos, tmp_path, capsys):
    config = _small_toml(tmp_path / "small.toml")
    argv = ["build-features", str(photos), "--config", str(config), "--out", str(tmp_path / "fs")]
    assert main([*argv, "--cache-dir", str(tmp_path / "cache"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "skipped: 2" in out and "skipped flower/IMG_0001.HEIC: unsupported format (HEIC/HEIF)" in out
    manifest = json.loads((tmp_path / "fs" / "manifest.json").read_text())
    assert sum(p.startswith("china/2019/") for p in manifest["split"]["train"] + manifest["split"]["test"]) == 3


# --- fair splits ------------------------------------------------------------------------------


def test_a_training_fraction_keeps_each_class_share():
    labels = np.repeat([0, 1, 2], [40, 40, 3])
    train, test = split_indices(labels, 1, None, seed=0, train_fraction=0.5)
    assert np.bincount(labels[train]).tolist() == [20, 20, 1]  # not every class cut to the smallest's 1
    assert np.bincount(labels[test]).tolist() == [20, 20, 2]
    assert small_classes(["cats", "dogs", "owls"], [20, 20, 1]).endswith(
        "owls (1); they will be recognised less well: add photos to them"
    )
    assert small_classes(["cats", "dogs"], [20, 15]) is None


def test_protocol_half_warns_naming_the_class_that_is_far_smaller(photos, tmp_path, capsys):
    for extra in sorted((photos / "digit_0").glob("*.jpg"))[3:]:
        extra.unlink()  # digit_0: 3 photos, the others 12
    config = _small_toml(tmp_path / "small.toml")
    argv = ["build-features", str(photos), "--config", str(config), "--out", str(tmp_path / "fs"), "--protocol", "half"]
    assert main([*argv, "--cache-dir", str(tmp_path / "cache"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "warning: 1 class(es) have far fewer training images than the others (median 6): digit_0 (1)" in err
    fs = load_feature_set(tmp_path / "fs")
    assert np.bincount(fs.y_train).tolist() == [6, 1, 6, 6] and fs.manifest["split"]["train_fraction"] == 0.5


def test_too_few_photos_for_a_shipped_protocol_suggests_protocol_half(tmp_path):
    with pytest.raises(DatasetError, match="use --protocol half"):
        split_indices(np.repeat([0, 1], 40), 100)


# --- one default pipeline, each config with its classifier ------------------------------------------


def test_every_shipped_config_names_a_classifier_that_suits_it():
    for name in named_configs():
        classifier, params = classifier_table(name)
        assert classifier is not None, name
        config = load_config(name)
        assert shipped_config_name(config) == name
        assert default_classifier(config)[:2] == (classifier, params)
        if name not in ("lspm", "digits"):  # the linear baselines on histograms, kept on purpose
            assert pairing_warning(config, classifier) is None, name
    assert "pmsvm" in pairing_warning(load_config("bof-spm"), "linear")
    assert pairing_warning(load_config("fisher-flip-rootsift"), "linear") is None
    assert pairing_warning(load_config("scspm"), "linear") is None


def test_no_config_means_the_recommended_one_said_in_one_line(photos, caplog):
    args = build_parser().parse_args(["build-features", str(photos)])
    with caplog.at_level(logging.INFO, logger="classify_images"):
        config, out, _, _ = cli._build_options(args)
        assert caplog.messages == []  # (said once the command's checks pass: an error stays one line)
        cli._log_config_choice(args)
    assert config == load_config(RECOMMENDED_CONFIG) and out.name == f"photos-{RECOMMENDED_CONFIG}"
    assert f"config: {RECOMMENDED_CONFIG} (the recommended pipeline; --config to choose another)" in caplog.messages
    run = build_parser().parse_args(["run", str(photos)])
    assert cli._run_classifier(run) == classifier_table(RECOMMENDED_CONFIG)


def test_train_without_classifier_takes_the_one_the_features_call_for(photos, tmp_path, capsys):
    config = _small_toml(tmp_path / "small.toml")  # own settings, L1 histograms: pmsvm
    assert main(["build-features", str(photos), "--config", str(config), "--out", str(tmp_path / "fs"), "-q"]) == 0
    assert main(["train", str(tmp_path / "fs"), "--out", str(tmp_path / "m.npz")]) == 0
    err = capsys.readouterr().err
    assert "classifier: pmsvm (the classifier for histograms; --classifier to choose another)" in err
    assert json.loads(load_model_header(tmp_path / "m.npz"))["classifier"] == "pmsvm"


def load_model_header(path) -> str:
    from classify_images.pipeline.training.model_file import read_model_meta

    return json.dumps(read_model_meta(path))


# --- run: pairing warning, probabilities, next command, retry after a failure ------------------------


def test_run_warns_of_a_poor_pairing_offers_probabilities_and_the_next_command(photos, tmp_path, capsys):
    config = _small_toml(tmp_path / "small.toml", "linear")
    out = tmp_path / "run"
    argv = ["run", str(photos), "--config", str(config), "--out", str(out), "--probability", "--train-per-class", "6"]
    assert main([*argv, "--calibration-folds", "2", "--cache-dir", str(tmp_path / "cache")]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and "use --classifier pmsvm" in warnings[0], captured.err
    assert "classifier: linear (the config's [classifier]" in captured.err
    assert f"classify-images predict {out / 'model.npz'} PHOTO_OR_FOLDER --proba" in captured.out
    from classify_images import load_model

    assert hasattr(load_model(out / "model.npz")[-1], "predict_proba")
    page = (out / "report" / "report.html").read_text()
    assert 'id="advice"' in page and "use --classifier pmsvm" in page
    assert 'id="dataset">photos<' in page and 'id="config-name">own settings' in page
    assert "use --classifier pmsvm" in (out / "report" / "report.md").read_text()


def test_a_failed_run_does_not_block_its_corrected_retry(photos, tmp_path, capsys, monkeypatch):
    config = _small_toml(tmp_path / "small.toml", "pmsvm")
    out = tmp_path / "run"
    argv = ["run", str(photos), "--config", str(config), "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    real = workflows.train_model

    def failing(*args, **kwargs):
        raise cli.UsageError("training failed (simulated)")

    monkeypatch.setattr(workflows, "train_model", failing)
    assert main([*argv, "--train-per-class", "5", "-q"]) == 2  # it claimed the folder, then failed
    monkeypatch.setattr(workflows, "train_model", real)
    assert main([*argv, "--train-per-class", "6", "-q"]) == 0, capsys.readouterr().err  # another run: not refused
    marker = json.loads((out / ".classify-images.json").read_text())
    assert "finished" not in marker  # finished: a third, different run is refused again without --force
    assert main([*argv, "--train-per-class", "4", "-q"]) == 2
    assert "another run" in capsys.readouterr().err


# --- experiments and reports ------------------------------------------------------------------------


def test_experiment_seed_redraws_the_builds_split_and_the_report_shows_each_splits_choice(photos, tmp_path, capsys):
    config = _small_toml(tmp_path / "small.toml")
    build = ["build-features", str(photos), "--config", str(config), "--out", str(tmp_path / "fs"), "-q"]
    assert main([*build, "--train-per-class", "6", "--test-per-class", "0", "--seed", "3"]) == 0
    out = tmp_path / "exp"
    argv = ["experiment", str(tmp_path / "fs"), "--classifier", "pmsvm", "--repeats", "2", "--seed", "3"]
    assert main([*argv, "--search", "C=0.1,1", "--out", str(out), "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    manifest = json.loads((tmp_path / "fs" / "manifest.json").read_text())
    predicted = [line.split(",")[0] for line in (out / "predictions.csv").read_text().splitlines()[1:]]
    assert sorted(p.split("photos/", 1)[1] for p in predicted) == sorted(manifest["split"]["test"])
    page = (out / "report.html").read_text()
    runs = report["experiment"]["runs"]
    assert [run["seed"] for run in runs] == [3, 4] and all(run["chosen"] for run in runs)
    assert "<th>C chosen</th>" in page  # every split's C, not the first split's only
    assert "Split of seed 3 (every split&#x27;s choice: the Splits table)" in page
    assert "Order: the mean over the 2 splits, worst first" in page


def test_worst_first_follows_the_mean_over_the_splits():
    evaluation = SimpleNamespace(per_class_accuracy=np.array([0.2, 0.9, 0.5]))
    runs = [SimpleNamespace(), SimpleNamespace()]
    experiment = SimpleNamespace(runs=runs, per_class_statistics=lambda: (np.array([0.8, 0.3, 0.6]), np.zeros(3)))
    assert class_order(evaluation).tolist() == [0, 2, 1]  # one split's order
    assert class_order(evaluation, experiment).tolist() == [1, 2, 0]  # the mean's


def test_the_dataset_is_shown_relative_and_names_carry_parameters(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-photos").mkdir()
    assert dataset_display(str(tmp_path / "my-photos")) == "my-photos"
    assert dataset_display("/somewhere/else/holiday") == "holiday"
    assert params_suffix({"search-C": [1, 10, 100]}) == "-search-C=1,10,100"  # not a hash


# --- logs ---------------------------------------------------------------------------------------------


def test_a_search_logs_one_line_not_one_per_fit(caplog):
    from classify_images.classifiers.model_selection import search_parameters
    from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC

    rng = np.random.default_rng(0)
    X, y = rng.random((60, 8)), np.repeat([0, 1, 2], 20)
    with caplog.at_level(logging.INFO, logger="classify_images"):
        search_parameters(QuadraticHingeSVC(), X, y, {"C": [0.1, 1, 10]}, folds=3)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert info == ["search: 3-fold cross-validation of 3 parameter values on 60 training images (9 fits)"], info


def test_a_long_step_estimates_the_time_left_from_its_iterations():
    now = [100.0]  # a clock the test moves: no wall-clock time is measured
    progress = _StepProgress(logging.getLogger("x"), "GMM", 10.0, total=25, clock=lambda: now[0])
    now[0] = 160.0  # a minute of k-means start before the first EM iteration: not counted per iteration
    progress.note("k-means start: iteration 3 of at most 300, centres moved 0.1")
    assert progress.status() == "k-means start: iteration 3 of at most 300, centres moved 0.1, 60 s so far"
    progress.note("Iteration 1 (EM): mean log-likelihood 10")
    for second in range(2, 6):  # then one EM iteration every 10 s
        now[0] += 10.0
        progress.note(f"Iteration {second} (EM): mean log-likelihood 10")
    assert progress.status() == (
        "Iteration 5 (EM): mean log-likelihood 10, 100 s so far, at most ~200 s left (5 of at most 25 iterations done)"
    )
    assert isinstance(progress.done, threading.Event)
