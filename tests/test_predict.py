"""Self-contained models and ``classify-images predict``: a model file alone classifies images,
and no input to ``predict`` ends in a traceback (issue 13 items 1 and 3, issue 14 section 6)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from classify_images.pipeline.interfaces.cli import main

from ._fuzz import fuzz_settings, run_cli
from .conftest import FIXTURE_IMAGES, build_fixture_feature_set, write_config_toml

CLASSES = ["china", "digit_0", "digit_1", "flower"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A feature set of the fixture images and a linear model trained on it by the command line."""
    root = tmp_path_factory.mktemp("predict")
    fs = build_fixture_feature_set(root)
    model = root / "model.npz"
    assert main(["train", str(fs), "--classifier", "linear", "--param", "C=10", "--out", str(model)]) == 0
    return fs, model


@pytest.fixture()
def lone_model(tmp_path, trained):
    """The model file moved alone into an empty folder (the feature set is out of reach)."""
    _, model = trained
    folder = tmp_path / "alone"
    folder.mkdir()
    return shutil.copy(model, folder / "model.npz")


def _run(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(capsys, argv, message):
    code, _, err = _run(capsys, [*argv, "-q"])  # -q: the error alone on stderr (no steps before it)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


# --------------------------------------------------------------- self-contained
def test_model_alone_predicts_class_names_from_image_paths(tmp_path, trained, lone_model, monkeypatch):
    from classify_images import load_model
    from classify_images.pipeline.extraction.extractor import FeatureExtractor
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.training.model_file import load_model as load_classifier

    fs_path, _ = trained
    moved = tmp_path / "moved-away"
    shutil.move(fs_path, moved)  # the training feature set is gone from where the model recorded it
    try:
        monkeypatch.chdir(lone_model.parent)
        model = load_model("model.npz")
        images = [str(FIXTURE_IMAGES / c / "11.jpg") for c in CLASSES] + [str(FIXTURE_IMAGES / "china" / "10.jpg")]
        predicted = model.predict(images)
        assert predicted.dtype.kind == "U" and set(predicted) <= set(CLASSES)
        assert list(model.classes_) == CLASSES
        scores = model.decision_function(images)
        assert scores.shape == (5, 4)
        np.testing.assert_array_equal(predicted, np.asarray(CLASSES)[scores.argmax(axis=1)])
        # the same vectors and scores as the feature set's extractor and the classifier give
        feature_set = load_feature_set(moved)
        X, _ = FeatureExtractor.from_feature_set(feature_set).transform_images(images)
        classifier, _ = load_classifier("model.npz")
        np.testing.assert_array_equal(model[0].transform(images), X)
        np.testing.assert_array_equal(scores, classifier.decision_function(X))
        assert (predicted == [p.split(os.sep)[-2] for p in images]).mean() >= 0.6  # easy classes
        code, out, err = run_cli(["predict", "model.npz", *images[:1]])
        assert code == 0 and out.splitlines()[1].split(": ")[1].split(" (")[0] in CLASSES, err
    finally:
        shutil.move(moved, fs_path)


def test_cli_trained_model_has_class_names(trained):
    from classify_images.pipeline.training.model_file import load_model, read_model_meta

    _, model = trained
    classifier, meta = load_model(model)
    assert list(classifier.classes_) == CLASSES and meta["classes"] == CLASSES
    assert meta["extractor"]["config"]["codebook"]["size"] == 16
    assert meta["feature_set"]["class_names"] == CLASSES and len(meta["feature_set"]["config_hash"]) == 40
    assert read_model_meta(model)["format_version"] == 3


def test_evaluate_is_unchanged_by_class_names(tmp_path, trained, capsys):
    """A model trained on names scores exactly as one trained on indices (same problems, same order)."""
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.training.evaluation import evaluate_model, train_classifier
    from classify_images.pipeline.training.model_file import load_model

    fs_path, model_path = trained
    fs = load_feature_set(fs_path)
    by_index = train_classifier("linear", {"C": 10}, np.asarray(fs.X_train), fs.y_train).estimator
    named, meta = load_model(model_path)
    np.testing.assert_array_equal(by_index.coef_, named.coef_)
    np.testing.assert_array_equal(by_index.decision_function(fs.X_test), named.decision_function(fs.X_test))
    index_meta = {**meta, "classes": [0, 1, 2, 3]}
    assert (evaluate_model(named, meta, fs).confusion == evaluate_model(by_index, index_meta, fs).confusion).all()


def test_class_weight_by_name_or_index(tmp_path, trained, capsys):
    from classify_images.pipeline.training.model_file import load_model

    fs, _ = trained
    by_name, by_index, plain = tmp_path / "name.npz", tmp_path / "index.npz", tmp_path / "plain.npz"
    assert _run(capsys, ["train", fs, "--classifier", "linear", "--out", plain])[0] == 0
    assert (
        _run(
            capsys, ["train", fs, "--classifier", "linear", "--param", "class_weight={'flower': 3}", "--out", by_name]
        )[0]
        == 0
    )
    assert (
        _run(capsys, ["train", fs, "--classifier", "linear", "--param", "class_weight={3: 3}", "--out", by_index])[0]
        == 0
    )
    (a, meta), (b, _) = load_model(by_name), load_model(by_index)
    assert meta["params"]["class_weight"] == {"flower": 3}
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.array_equal(a.coef_, load_model(plain)[0].coef_)  # the weight changed the model


@pytest.mark.parametrize("weights", ["{99: 2}", "{'accordion': 2}", "{-1: 2}", "{True: 2}"])
def test_unknown_class_weight_key_is_one_line(trained, capsys, weights):
    fs, _ = trained
    _one_line_error(
        capsys, ["train", fs, "--classifier", "linear", "--param", f"class_weight={weights}"], "is not a class"
    )


# ----------------------------------------------------------------- predict inputs
@pytest.fixture()
def inputs(tmp_path):
    """A folder tree with images, non-images and broken files."""
    return _make_inputs(tmp_path / "inputs")


def _make_inputs(root):
    """``root``: a folder tree with images, non-images and broken files."""
    (root / "sub" / "deeper").mkdir(parents=True)
    shutil.copy(FIXTURE_IMAGES / "flower" / "11.jpg", root / "a.jpg")
    shutil.copy(FIXTURE_IMAGES / "china" / "11.jpg", root / "sub" / "deeper" / "b.JPG")
    (root / "notes.txt").write_text("not an image")
    (root / "sub" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    (root / "sub" / "empty.jpg").write_bytes(b"")
    (root / ".hidden.jpg").write_bytes(b"")
    os.symlink(root / "gone.jpg", root / "sub" / "dangling.jpg")
    return root


def _skips(err: str) -> dict[str, str]:
    """The ``skipped PATH: REASON`` lines of ``predict``'s stderr, as path → reason."""
    return dict(line[len("skipped ") :].split(": ", 1) for line in err.splitlines() if line.startswith("skipped "))


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_predict_folder_recursively_lists_skips_on_stderr(capsys, lone_model, inputs, fmt):
    """In every format the skipped inputs, and their count, go to stderr: stdout holds the results only."""
    code, out, err = _run(
        capsys, ["predict", lone_model, inputs, inputs / "notes.txt", inputs / "nope.jpg", "--format", fmt]
    )
    assert code == 1, err  # something asked for was not classified; the rest is printed
    expected = {str(inputs / "sub" / p) for p in ("broken.png", "empty.jpg", "dangling.jpg")} | {
        str(inputs / "notes.txt"),
        str(inputs / "nope.jpg"),
    }
    skipped = _skips(err)
    assert set(skipped) == expected, err
    assert "does not exist" in skipped[str(inputs / "nope.jpg")]
    assert "extension" in skipped[str(inputs / "notes.txt")]
    assert "symbolic link" in skipped[str(inputs / "sub" / "dangling.jpg")]
    assert "5 inputs skipped, 2 images classified" in err
    assert "Traceback" not in err
    if fmt != "json":  # stdout: the results only (a JSON document has a member listing the skips)
        assert not any(path in out for path in expected), out
    classified = [str(inputs / "a.jpg"), str(inputs / "sub/deeper/b.JPG")]
    if fmt == "table":
        assert [line.split(": ")[0] for line in out.strip().splitlines()[1:]] == classified
    elif fmt == "csv":
        assert sorted({row["path"] for row in csv.DictReader(io.StringIO(out))}) == classified
    else:
        document = json.loads(out)  # stdout is one JSON document, whatever was skipped
        assert [p["path"] for p in document["predictions"]] == classified
        assert {s["path"] for s in document["skipped"]} == expected  # and it lists the skips too


@pytest.mark.parametrize("case", ["missing", "empty-folder", "only-broken", "quoted-glob", "not-an-image"])
def test_nothing_readable_is_one_line(tmp_path, capsys, lone_model, inputs, case):
    argument = {
        "missing": tmp_path / "missing.jpg",
        "empty-folder": tmp_path,
        "only-broken": inputs / "sub" / "broken.png",
        "quoted-glob": str(inputs / "*.jpg"),
        "not-an-image": inputs / "notes.txt",
    }[case]
    if case == "empty-folder":
        argument = tmp_path / "empty"
        argument.mkdir()
    _one_line_error(capsys, ["predict", lone_model, argument], "no readable image")


@pytest.mark.parametrize("k", ["0", "-1"])
def test_top_k_below_one_is_one_line(capsys, lone_model, k):
    _one_line_error(
        capsys,
        ["predict", lone_model, FIXTURE_IMAGES / "flower" / "11.jpg", "--top-k", k],
        f"--top-k must be at least 1, not {k}",
    )


@pytest.mark.parametrize("k", ["5", "99"])
def test_top_k_above_the_classes_shows_every_class_with_a_note(capsys, lone_model, k):
    code, out, err = _run(
        capsys, ["predict", lone_model, FIXTURE_IMAGES / "flower" / "11.jpg", "--top-k", k, "--format", "csv"]
    )
    assert code == 0, err
    assert f"note: --top-k {k} is more than the model's 4 classes; showing all 4" in err
    assert [row["rank"] for row in csv.DictReader(io.StringIO(out))] == ["1", "2", "3", "4"]


def test_default_top_k_on_a_two_class_model(tmp_path, capsys):
    """The default ``--top-k`` (3) shows every class of a model with fewer, instead of refusing it."""
    dataset = tmp_path / "two"
    for name in ("china", "flower"):
        shutil.copytree(FIXTURE_IMAGES / name, dataset / name)
    config = write_config_toml(tmp_path / "small.toml")
    assert (
        main(
            [
                "build-features",
                str(dataset),
                "--config",
                str(config),
                "--out",
                str(tmp_path / "fs"),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
        == 0
    )
    model = tmp_path / "model.npz"
    assert main(["train", str(tmp_path / "fs"), "--classifier", "linear", "--out", str(model)]) == 0
    capsys.readouterr()
    code, out, err = _run(capsys, ["predict", model, FIXTURE_IMAGES / "flower" / "11.jpg", "--format", "csv"])
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["rank"] for r in rows] == ["1", "2"] and sorted(r["class"] for r in rows) == ["china", "flower"]
    code, out, err = _run(capsys, ["predict", model, FIXTURE_IMAGES / "flower" / "11.jpg", "--top-k", "3"])
    assert code == 0 and "showing all 2" in err, err


def test_top_k_all_classes_and_formats(capsys, lone_model, inputs):
    image = inputs / "a.jpg"
    code, out, _ = _run(capsys, ["predict", lone_model, image, "--top-k", "4", "--format", "csv"])
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["rank"] for r in rows] == ["1", "2", "3", "4"] and sorted(r["class"] for r in rows) == CLASSES
    values = [float(r["decision_value"]) for r in rows]
    assert values == sorted(values, reverse=True)
    code, out, _ = _run(capsys, ["predict", lone_model, inputs, "--top-k", "2", "--format", "json"])
    document = json.loads(out)
    assert "decision values" in document["scores"] and document["top_k"] == 2
    assert len(document["predictions"]) == 2 and all(len(p["top"]) == 2 for p in document["predictions"])
    assert document["predictions"][0]["top"][0]["class"] == rows[0]["class"]
    assert document["predictions"][0]["top"][0]["decision_value"] == pytest.approx(values[0], abs=1e-6)
    # the folder's notes.txt is listed too (every file not used is listed with its reason)
    assert len(document["skipped"]) == 4 and all(s["reason"] for s in document["skipped"])
    assert {s["path"]: s["reason"] for s in document["skipped"]}[
        str(inputs / "notes.txt")
    ] == "not an image file extension (.txt)"


def test_file_that_cannot_be_opened_is_listed(capsys, lone_model, inputs, monkeypatch):
    """A permission error (simulated: the tests may run as root, who reads anything) is a listed skip."""
    from classify_images.pipeline.extraction import extractor

    real = extractor.file_fingerprint

    def fingerprint(path):
        if path.endswith("a.jpg"):
            raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(extractor, "file_fingerprint", fingerprint)
    code, out, err = _run(capsys, ["predict", lone_model, inputs / "a.jpg", inputs / "sub" / "deeper" / "b.JPG"])
    assert code == 1, err
    assert f"skipped {inputs / 'a.jpg'}: cannot read file (Permission denied)" in err


def test_undecodable_file_name(tmp_path, capsys, lone_model):
    folder = tmp_path / "odd"
    folder.mkdir()
    name = os.path.join(os.fsencode(folder), b"caf\xe9.jpg")
    shutil.copy(FIXTURE_IMAGES / "flower" / "11.jpg", name)
    code, out, err = _run(capsys, ["predict", lone_model, folder])
    assert code == 0, err
    assert "caf\\xe9.jpg: " in out


@pytest.mark.parametrize("model", ["missing.npz", "folder", "garbage"])
def test_bad_model_argument_is_one_line(tmp_path, capsys, model):
    path = tmp_path / model
    if model == "folder":
        path.mkdir()
    elif model == "garbage":
        path.write_bytes(b"PK\x03\x04 not really")
    _one_line_error(capsys, ["predict", path, FIXTURE_IMAGES / "flower" / "11.jpg"], "model file")


def test_model_without_extractor_is_one_line(tmp_path, capsys, trained):
    from classify_images.pipeline.training.model_file import load_model, save_model

    classifier, meta = load_model(trained[1])
    bare = save_model(tmp_path / "bare.npz", classifier, feature_set=meta["feature_set"])
    _one_line_error(capsys, ["predict", bare, FIXTURE_IMAGES / "flower" / "11.jpg"], "holds no feature extractor")


# ------------------------------------------------------------------------ fuzz
_ARGUMENTS = [
    "a.jpg",
    "sub",
    "sub/broken.png",
    "sub/empty.jpg",
    "sub/dangling.jpg",
    "notes.txt",
    "nope.jpg",
    ".",
    "*.jpg",
    "sub/deeper/b.JPG",
    "",
]


@pytest.fixture(scope="module")
def fuzz_inputs(tmp_path_factory, trained):
    """The model file alone in a folder, and the input tree, shared by the examples of the fuzz test
    (which only read them)."""
    root = tmp_path_factory.mktemp("fuzz-predict")
    (root / "alone").mkdir()
    return shutil.copy(trained[1], root / "alone" / "model.npz"), _make_inputs(root / "inputs")


@fuzz_settings(30)
@given(
    names=st.lists(st.sampled_from(_ARGUMENTS), min_size=1, max_size=4),
    top_k=st.integers(-3, 6) | st.just(2**70),
    fmt=st.sampled_from(["table", "csv", "json"]),
)
def test_fuzzed_predict_arguments_never_end_in_a_traceback(fuzz_inputs, names, top_k, fmt):
    model, inputs = fuzz_inputs
    argv = ["predict", model, *[inputs / n if n else "" for n in names], "--top-k", top_k, "--format", fmt, "-q"]
    code, out, err = run_cli(argv)
    assert code in (0, 1, 2) and "Traceback" not in err
    if code == 2:
        assert len(err.strip().splitlines()) == 1
    else:
        assert top_k >= 1 and ("showing all 4" in err) == (top_k > 4)
        assert (code == 1) == ("skipped" in err)  # 1: some input was not classified
        if fmt == "json":
            json.loads(out)


@pytest.mark.realdata
def test_model_alone_on_real_photographs(tmp_path, caltech_mini, capsys):
    """caltech101-mini: a model moved alone predicts, from the image files, exactly what the classifier
    gives on the feature set's stored rows (class names, top-1), for every test image."""
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.training.model_file import load_model

    config = write_config_toml(
        tmp_path / "c.toml",
        {
            "dataset": {"train_per_class": 10, "test_per_class": 5, "seed": 0},
            "image": {"max_side": 200},
            "sift": {"patch_sizes": [16], "step": 8},
            "codebook": {"kind": "kmeans", "size": 128, "n_samples": 20000, "n_iter": 30},
            "pooling": {"method": "average", "levels": [1, 2]},
            "normalization": {"method": "l1"},
        },
    )
    run = tmp_path / "run"
    assert (
        main(
            [
                "run",
                str(caltech_mini),
                "--config",
                str(config),
                "--classifier",
                "pmsvm",
                "--out",
                str(run),
                "-q",
                "--cache-dir",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    alone = tmp_path / "alone"
    alone.mkdir()
    model = shutil.copy(run / "model.npz", alone / "model.npz")
    fs = load_feature_set(run / "features")
    root = fs.manifest["dataset"]["root"]
    tests = [os.path.join(root, p) for p in fs.test_paths]
    capsys.readouterr()
    assert main(["predict", str(model), *tests, "--top-k", "1", "--format", "csv"]) == 0
    predicted = {row["path"]: row["class"] for row in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    classifier, _ = load_model(model)
    expected = classifier.predict(np.asarray(fs.X_test))
    assert [predicted[p] for p in tests] == list(expected)
    assert set(expected) <= set(fs.class_names)


# ------------------------------------------------- the model's image-size guard
def _with_image_table(source, destination, edit) -> None:
    """A copy of the model file ``source`` whose extractor's ``[image]`` table is ``edit(table)``."""
    with np.load(source, allow_pickle=False) as archive:
        members = {key: archive[key] for key in archive.files}
    meta = json.loads(str(members["__meta__"][()]))
    edit(meta["extractor"]["config"]["image"])
    members["__meta__"] = np.array(json.dumps(meta))
    np.savez(destination, **members)


def test_predict_uses_the_max_pixels_recorded_in_the_model(tmp_path, capsys, trained):
    """``image.max_pixels`` of the model's pipeline config guards ``predict`` (not the library default)."""
    from classify_images import load_model
    from classify_images.pipeline.interfaces.image_features import UnreadableImagesError

    _, model = trained
    guarded = tmp_path / "guarded.npz"
    _with_image_table(model, guarded, lambda table: table.update(max_pixels=64 * 64))  # the digits' size
    large, small = FIXTURE_IMAGES / "china" / "11.jpg", FIXTURE_IMAGES / "digit_1" / "11.jpg"  # 120², 64² px
    code, out, err = _run(capsys, ["predict", guarded, large, small, "--format", "csv"])
    assert code == 1, err  # the large image is not classified
    assert {row["path"] for row in csv.DictReader(io.StringIO(out))} == {str(small)}
    assert _skips(err) == {
        str(large): "image too large (120 x 120 pixels > image.max_pixels = 4096); raise image.max_pixels to read it"
    }
    with pytest.raises(UnreadableImagesError, match="image.max_pixels = 4096"):
        load_model(guarded).predict([str(large)])
    assert load_model(guarded).predict([str(small)]).shape == (1,)


def test_model_file_without_max_pixels_still_loads_and_uses_the_default(tmp_path, capsys, trained):
    """A model file written before ``image.max_pixels`` existed loads (no pickle) with the default guard."""
    from classify_images import load_model
    from classify_images.pipeline.settings.config import DEFAULT_MAX_PIXELS

    _, model = trained
    old = tmp_path / "old.npz"
    _with_image_table(model, old, lambda table: table.pop("max_pixels"))
    loaded = load_model(old)
    assert loaded[0].extractor_.config.image.max_pixels == DEFAULT_MAX_PIXELS
    image = FIXTURE_IMAGES / "china" / "11.jpg"
    assert loaded.predict([str(image)]).tolist() == load_model(model).predict([str(image)]).tolist()
    code, out, err = _run(capsys, ["predict", old, image])
    assert code == 0 and "skipped" not in err, err


def test_image_features_fit_uses_the_configs_max_pixels(tmp_path):
    import dataclasses

    from classify_images import ImageFeatures
    from classify_images.pipeline.interfaces.image_features import UnreadableImagesError
    from classify_images.pipeline.settings.config import validate_config

    from .conftest import SMALL_CONFIG

    config = validate_config({**SMALL_CONFIG})
    config = dataclasses.replace(config, image=dataclasses.replace(config.image, max_pixels=64 * 64))
    paths = [str(p) for p in sorted((FIXTURE_IMAGES / "china").glob("*.jpg"))]
    with pytest.raises(UnreadableImagesError, match="image.max_pixels = 4096"):
        ImageFeatures(config, cache_dir=False).fit(paths)


def test_predict_in_parallel_gives_the_same_results(capsys, lone_model, inputs):
    """``--n-jobs 2`` classifies the same images the same way, in input order (relative paths too)."""
    arguments = ["predict", lone_model, inputs, "--top-k", "2", "--format", "json"]
    one = json.loads(_run(capsys, arguments)[1])
    code, out, err = _run(capsys, [*arguments, "--n-jobs", "2"])
    assert code == 1, err  # the fixture folder holds unreadable files: listed, and the status says so
    two = json.loads(out)
    assert [p["path"] for p in two["predictions"]] == [p["path"] for p in one["predictions"]]
    for a, b in zip(one["predictions"], two["predictions"]):
        assert [t["class"] for t in a["top"]] == [t["class"] for t in b["top"]]
        assert [t["decision_value"] for t in a["top"]] == pytest.approx(
            [t["decision_value"] for t in b["top"]], abs=1e-6
        )
    assert two["skipped"] == one["skipped"]


def test_a_repeated_param_is_refused(capsys, lone_model, tmp_path):
    from classify_images.pipeline.interfaces.cli import main as cli_main

    assert cli_main(["experiment", str(tmp_path), "--classifier", "linear", "--param", "C=1", "--param", "C=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--param C is given twice (1 and 2): give it once" in err[0]
