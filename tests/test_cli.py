"""train / evaluate / experiment / predict on the shipped fixture images through the command line."""

import json
import zipfile

import numpy as np
import pytest

from classify_images.pipeline.interfaces.cli import main

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, build_fixture_feature_set, write_config_toml


@pytest.fixture(scope="module")
def feature_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    out = build_fixture_feature_set(root)
    return out


def test_train_evaluate_report(tmp_path, feature_set, capsys):
    model = tmp_path / "m.npz"
    assert main(["train", str(feature_set), "--classifier", "linear", "--param", "C=10", "--out", str(model)]) == 0
    assert main(["evaluate", str(feature_set), str(model), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "mean per-class accuracy" in out
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    confusion = np.array(report["confusion"])
    assert confusion.shape == (4, 4) and confusion.sum() == 20
    expected = np.mean(np.diag(confusion) / confusion.sum(1))
    assert report["mean_per_class_accuracy"] == pytest.approx(expected)
    assert report["mean_per_class_accuracy"] > 0.5  # four easy classes: far above chance (0.25)
    assert (tmp_path / "rep" / "report.md").read_text().startswith("# Evaluation")
    assert (tmp_path / "rep" / "confusion.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "classifier, params",
    [
        ("linear", ["C=10"]),
        ("pmsvm", ["p=-8", "lut_bins=100"]),
        ("mbkl", ["random_state=0"]),
        ("nsvm", ["random_state=0"]),
    ],
)
def test_every_classifier_trains_saves_and_evaluates(tmp_path, feature_set, capsys, classifier, params):
    model = tmp_path / f"{classifier}.npz"
    argv = ["train", str(feature_set), "--classifier", classifier, "--out", str(model)]
    assert main(argv + [arg for param in params for arg in ("--param", param)]) == 0
    assert main(["evaluate", str(feature_set), str(model), "--out", str(tmp_path / "rep")]) == 0
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["classifier"] == classifier
    assert report["mean_per_class_accuracy"] > 0.4  # four classes, 5 training images each; chance 0.25


def test_predict_new_images(tmp_path, feature_set, capsys):
    model = tmp_path / "m.npz"
    main(["train", str(feature_set), "--classifier", "linear", "--out", str(model)])
    capsys.readouterr()
    image = FIXTURE_IMAGES / "flower" / "11.jpg"
    assert (
        main(["predict", str(model), str(image), str(tmp_path / "missing.jpg"), "--top-k", "2"]) == 1
    )  # one not classified
    out, err = capsys.readouterr()
    header, *lines = out.strip().splitlines()
    assert "decision values" in header and len(lines) == 1
    assert lines[0].startswith(str(image) + ": ") and lines[0].count("(") == 2
    assert lines[0].split(": ")[1].split(" (")[0] in {"china", "digit_0", "digit_1", "flower"}  # a class name
    assert f"skipped {tmp_path / 'missing.jpg'}: file or folder does not exist" in err


def test_experiment_repeats(tmp_path, feature_set, capsys):
    assert (
        main(["experiment", str(feature_set), "--classifier", "linear", "--repeats", "3", "--out", str(tmp_path)]) == 0
    )
    result = json.loads((tmp_path / "experiment.json").read_text())
    assert len(result["runs"]) == 3 and len({r["seed"] for r in result["runs"]}) == 3
    accs = [r["mean_per_class_accuracy"] for r in result["runs"]]
    assert result["mean"] == pytest.approx(np.mean(accs)) and result["std"] == pytest.approx(np.std(accs, ddof=1))
    assert "±" in capsys.readouterr().out


def test_model_for_another_feature_set_is_refused(tmp_path, feature_set, capsys):
    model = tmp_path / "m.npz"
    main(["train", str(feature_set), "--classifier", "linear", "--out", str(model)])
    other = tmp_path / "other"
    config = tmp_path / "o.toml"
    config.write_text(
        "[dataset]\ntrain_per_class = 5\ntest_per_class = 5\nseed = 7\n[image]\nmax_side = 96\n"
        "[codebook]\nsize = 16\nn_samples = 3000\nn_iter = 20\n[pooling]\nlevels = [1, 2]\n"
    )
    main(["build-features", str(FIXTURE_IMAGES), "--config", str(config), "--out", str(other), "-q", "--no-cache"])
    capsys.readouterr()
    assert main(["evaluate", str(other), str(model)]) == 2
    err = capsys.readouterr().err
    assert "re-train the model on this feature set" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no-header"])
def test_damaged_model_file_is_a_clear_error(tmp_path, feature_set, capsys, damage):
    model = tmp_path / "m.npz"
    main(["train", str(feature_set), "--classifier", "linear", "--out", str(model)])
    data = model.read_bytes()
    if damage == "truncate":
        model.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        model.write_bytes(b"\x80\x04not a model at all")
    else:
        with zipfile.ZipFile(model, "w") as archive:
            archive.writestr("model/coef_.npy", b"junk")
    capsys.readouterr()
    assert main(["evaluate", str(feature_set), str(model)]) == 2
    err = capsys.readouterr().err
    assert "not a valid classify-images model" in err and len(err.strip().splitlines()) == 1


def test_threads_option_limits_blas_during_the_command(tmp_path, feature_set, monkeypatch):
    from threadpoolctl import threadpool_info

    from classify_images.pipeline.interfaces import cli

    seen = []
    train = cli.cmd_train
    monkeypatch.setattr(cli, "cmd_train", lambda args: seen.append(threadpool_info()) or train(args))
    # main() builds its parser on each call, so it picks up the spy
    argv = ["--threads", "1", "train", str(feature_set), "--classifier", "linear", "--out", str(tmp_path / "m.npz")]
    assert main(argv) == 0
    assert seen and all(pool["num_threads"] == 1 for pool in seen[0])
    assert (tmp_path / "m.npz").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "{fs}", "--classifier", "linear", "--param", "nonsense=1"], "has no parameter 'nonsense'"),
        (["train", "{fs}", "--classifier", "linear", "--param", "C"], "expected key=value"),
        (["train", "{fs}", "--classifier", "linear", "--param", "C=-1"], "The 'C' parameter"),
        (["train", "no-such-featureset-folder", "--classifier", "linear"], "does not exist"),
        (["evaluate", "{fs}", "no-such-model.npz"], "does not exist"),
        (["experiment", "{fs}", "--classifier", "linear", "--repeats", "0"], "--repeats must be from 1 to 1000, not 0"),
        (["--threads", "0", "train", "{fs}", "--classifier", "linear"], "--threads must be at least 1"),
        (["experiment", "{fs}", "--classifier", "nsvm", "--param", "margin=-1"], "The 'margin' parameter"),
    ],
)
def test_user_errors_one_line(feature_set, capsys, argv, message):
    argv = [a.replace("{fs}", str(feature_set)) for a in argv]
    assert main([*argv, "-q"]) == 2  # -q: the error alone (an experiment logs its first split before it)
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["build-features", "{images}", "--train-per-class", "-1"], "--train-per-class must be at least 1, not -1"),
        (["build-features", "{images}", "--test-per-class", "-3"], "--test-per-class must be at least 1"),
        (["build-features", "{images}", "--seed", "-1"], "--seed must be from 0 to"),
        (
            ["run", "{images}", "--classifier", "linear", "--train-per-class", "0"],
            "--train-per-class must be at least 1",
        ),
        (["demo", "--n-jobs", "0", "--workdir", "{tmp}/demo"], "--n-jobs must be a positive number"),
    ],
)
def test_split_and_worker_options_are_refused_by_their_name(tmp_path, monkeypatch, capsys, argv, message):
    """Refused by the option's name (not as a value of the ready-made config file), before any work."""
    argv = [a.replace("{images}", str(FIXTURE_IMAGES)).replace("{tmp}", str(tmp_path)) for a in argv]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and ".toml" not in err, err
    assert not list(cwd.iterdir()) and not (tmp_path / "demo").exists()


def test_negative_experiment_seed_names_only_the_seed(feature_set, capsys):
    assert main(["experiment", str(feature_set), "--classifier", "linear", "--repeats", "2", "--seed", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--seed must be from 0 to 4294967295, got -1" in err and "--repeats" not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "{fs}", "--classifier", "pmsvm", "--param", "nonsense=1"],
        ["experiment", "{fs}", "--classifier", "mbkl", "--param", "nonsense=1"],
    ],
)
def test_classifier_errors_are_not_prefixed_twice(feature_set, capsys, argv):
    """A one-line user error raised while training keeps its own wording (not "classifier 'x': classifier 'x': ...")."""
    assert main([*(a.replace("{fs}", str(feature_set)) for a in argv), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.count("classifier '") == 1, err


def test_model_of_another_feature_set_is_not_called_a_classifier_error(tmp_path, feature_set, capsys):
    import shutil

    model = tmp_path / "m.npz"
    assert main(["train", str(feature_set), "--classifier", "linear", "--out", str(model)]) == 0
    other = tmp_path / "other"
    shutil.copytree(feature_set, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["config_hash"] = "0" * len(manifest["config_hash"])
    (other / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["evaluate", str(other), str(model), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert "re-train the model" in err and "classifier 'linear'" not in err and len(err.splitlines()) == 1, err


def test_model_of_the_same_config_on_other_images_is_refused_naming_the_images(tmp_path, feature_set, capsys):
    """The feature set's identity hashes the config and the images: the refusal says so (not "different config")."""
    import shutil

    model = tmp_path / "m.npz"
    assert main(["train", str(feature_set), "--classifier", "linear", "--out", str(model)]) == 0
    images = tmp_path / "images"
    shutil.copytree(FIXTURE_IMAGES, images)
    next(images.glob("flower/*.jpg")).unlink()
    other = tmp_path / "other"
    assert (
        main(
            [
                "build-features",
                str(images),
                "--config",
                str(feature_set.parent / "small.toml"),
                "--out",
                str(other),
                "--cache-dir",
                str(feature_set.parent / "cache"),
                "-q",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", str(other), str(model), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert "other images" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("command", ["train", "experiment"])
def test_signed_features_refused_by_additive_kernels(tmp_path, feature_set, capsys, command):
    import shutil

    signed = tmp_path / "signed"
    shutil.copytree(feature_set, signed)
    X = np.load(signed / "X_train.npy")
    X[0, 0] = -0.5
    np.save(signed / "X_train.npy", X)
    for classifier in ("pmsvm", "nsvm"):
        assert main([command, str(signed), "--classifier", classifier, "--out", str(tmp_path / "out"), "-q"]) == 2
        err = capsys.readouterr().err.strip()
        assert "needs non-negative features" in err and str(signed) in err and len(err.splitlines()) == 1
    assert main([command, str(signed), "--classifier", "linear", "--out", str(tmp_path / "out2")]) == 0


def test_additive_kernels_on_vlad_vectors_do_not_suggest_another_pooling(tmp_path, capsys):
    """VLAD vectors are signed whatever the pooling: the error points to the linear classifier only."""
    config = {
        **SMALL_CONFIG,
        "codebook": {"kind": "vlad", "size": 4, "n_samples": 2000, "n_iter": 10},
        "normalization": {"method": "none"},
    }
    fs = tmp_path / "vlad"
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(write_config_toml(tmp_path / "v.toml", config)),
                "--out",
                str(fs),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
        == 0
    )
    capsys.readouterr()
    for command in ("train", "experiment"):
        assert main([command, str(fs), "--classifier", "pmsvm", "--out", str(tmp_path / "out"), "-q"]) == 2
        err = capsys.readouterr().err.strip()
        assert "vlad vectors, which are signed by construction" in err and "pooling" not in err, err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize("classifier", ["pmsvm", "mbkl", "nsvm"])
def test_randomised_classifiers_reproducible_from_the_command_line(tmp_path, feature_set, capsys, classifier):
    """train twice -> identical models (random_state from --seed, recorded); experiment twice -> same runs."""
    from classify_images.pipeline.training.model_file import load_model

    models = []
    for name in ("a", "b"):
        assert (
            main(["train", str(feature_set), "--classifier", classifier, "--out", str(tmp_path / f"{name}.npz")]) == 0
        )
        models.append(load_model(tmp_path / f"{name}.npz"))
    (first, meta), (second, _) = models
    assert meta["params"]["random_state"] == 0
    for key, value in first._model_arrays().items():
        np.testing.assert_array_equal(value, second._model_arrays()[key])
    assert (
        main(["train", str(feature_set), "--classifier", classifier, "--seed", "3", "--out", str(tmp_path / "c.npz")])
        == 0
    )
    assert load_model(tmp_path / "c.npz")[1]["params"]["random_state"] == 3
    runs = []
    for name in ("x", "y"):
        assert (
            main(
                [
                    "experiment",
                    str(feature_set),
                    "--classifier",
                    classifier,
                    "--repeats",
                    "2",
                    "--out",
                    str(tmp_path / name),
                ]
            )
            == 0
        )
        runs.append(json.loads((tmp_path / name / "experiment.json").read_text())["runs"])
    assert [r["mean_per_class_accuracy"] for r in runs[0]] == [r["mean_per_class_accuracy"] for r in runs[1]]
