"""What classify-images says while it works (issue 25, point 1): library code logs through
``logging`` under ``classify_images`` (a NullHandler only), the command line shows the steps
on stderr (``-q``: warnings and errors only, ``-v``: details with times), Python calls show
them behind ``verbose=``, and nothing in the library prints."""

from __future__ import annotations

import ast
import io
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from classify_images import _log
from classify_images.pipeline.interfaces.cli import main

from .conftest import FIXTURE_IMAGES, REPO, write_config_toml

PACKAGE = "classify_images"


def _messages(caplog, name: str = PACKAGE, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(name) and (level is None or r.levelno == level)]


@pytest.fixture
def config_file(tmp_path) -> Path:
    return write_config_toml(tmp_path / "small.toml")


# ------------------------------------------------------------------ the library's loggers
def test_package_logger_has_only_a_null_handler():
    handlers = logging.getLogger(PACKAGE).handlers
    assert len(handlers) == 1 and isinstance(handlers[0], logging.NullHandler)


def test_library_code_does_not_print():
    """No ``print(`` call in the library's folders, except the command line's console text."""
    console = {"classify_images/pipeline/interfaces/cli.py", "classify_images/pipeline/interfaces/demo.py"}
    offenders = []
    paths = sorted((REPO / "classify_images").rglob("*.py"))
    assert len(paths) > 80  # the whole package is read
    for path in paths:
        name = path.relative_to(REPO).as_posix()
        if name in console:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


def test_levels_of_the_command_line():
    assert [_log.level_of(v) for v in (-1, 0, 1, 2)] == [logging.WARNING, logging.INFO, logging.DEBUG, logging.DEBUG]


# ------------------------------------------------------------------ long steps inside one call
def test_kmeans_iterations_are_debug_records_and_change_no_number(caplog):
    from classify_images.coding.codebook import learn_kmeans_codebook

    X = np.random.default_rng(0).random((600, 8), dtype=np.float32)
    quiet = learn_kmeans_codebook(X, 6, max_iter=15)  # nobody listens: no verbose, no thread
    with caplog.at_level(logging.DEBUG, logger=PACKAGE):
        logged = learn_kmeans_codebook(X, 6, max_iter=15)
    np.testing.assert_array_equal(logged, quiet)
    iterations = [r for r in caplog.records if "Iteration" in r.getMessage()]
    assert iterations and all(
        r.levelno == logging.DEBUG and r.name == "classify_images.coding.codebook" for r in iterations
    )
    assert any(m.startswith("k-means codebook (6 words") and "done in" in m for m in _messages(caplog))


def test_fisher_gmm_iterations_are_logged_and_change_no_number(caplog):
    from classify_images.coding.codebook import learn_fisher_model

    X = np.random.default_rng(1).random((400, 12), dtype=np.float32)
    quiet = learn_fisher_model(X, 3, pca_dims=4, max_iter=10)
    with caplog.at_level(logging.DEBUG, logger=PACKAGE):
        logged = learn_fisher_model(X, 3, pca_dims=4, max_iter=10)
    for name in quiet:
        np.testing.assert_array_equal(logged[name], quiet[name])
    assert any("Fisher-vector GMM" in m and "Iteration" in m for m in _messages(caplog, level=logging.DEBUG))


def test_sparse_dictionary_step_is_logged(caplog):
    from classify_images.coding.codebook import learn_sparse_dictionary

    X = np.random.default_rng(2).random((300, 16), dtype=np.float32)
    with caplog.at_level(logging.DEBUG, logger=PACKAGE):
        learn_sparse_dictionary(X, 8, n_iter=10, batch_size=32)
    assert any(
        m.startswith("sparse-coding dictionary (8 atoms, 10 mini-batches of 32)") and "done in" in m
        for m in _messages(caplog, level=logging.DEBUG)
    )


def test_step_progress_beats_at_info_with_the_latest_news(caplog):
    logger = logging.getLogger("classify_images.test")
    with caplog.at_level(logging.INFO, logger=PACKAGE):
        with _log.step_progress(logger, "long step", capture_stdout=True, interval=0.02) as verbose:
            assert verbose
            print("Iteration 7, inertia 1.5")  # what a verbose library prints
            time.sleep(0.2)
    beats = _messages(caplog, level=logging.INFO)
    assert beats and all(
        m.startswith("long step: Iteration 7, inertia 1.5, ") and m.endswith("s so far") for m in beats[1:]
    )


def test_step_progress_costs_nothing_when_nobody_listens(caplog):
    logger = logging.getLogger("classify_images.test")
    with (
        caplog.at_level(logging.WARNING, logger=PACKAGE),
        _log.step_progress(logger, "quiet step", capture_stdout=True) as verbose,
    ):
        assert not verbose and not isinstance(sys.stdout, _log._LinesToLog)
    assert caplog.records == []


# ------------------------------------------------------------------ classifiers
def test_training_logs_its_problems_and_groups(caplog):
    from classify_images.classifiers.pmsvm import PmSVM

    rng = np.random.default_rng(3)
    y = np.repeat(np.arange(20), 3)
    X = rng.random((y.size, 5)) + np.eye(20)[y][:, :5]
    with caplog.at_level(logging.INFO, logger=PACKAGE):
        PmSVM(max_iter=5).fit(X, y)
    info = _messages(caplog, level=logging.INFO)
    assert "PmSVM: training 20 one-vs-rest problems on 60 rows of 5 features" in info
    # 20 problems in groups of at most 16: two groups, each reported when trained
    assert [m.rpartition(",")[0] for m in info if "trained" in m] == [
        "PmSVM: problems 1-10 of 20 trained",
        "PmSVM: problems 11-20 of 20 trained",
    ]


def test_streaming_training_logs_each_epoch(caplog):
    from classify_images.classifiers.hik_nsvm import HIKnSVM
    from classify_images.pipeline.training.streaming_training import RowBlocks, fit_streaming

    rng = np.random.default_rng(6)
    X, y = rng.random((40, 6)), np.repeat([0, 1], 20)
    with caplog.at_level(logging.INFO, logger=PACKAGE):
        fit_streaming(HIKnSVM(n_epochs=3, random_state=0), RowBlocks(X, y, 16))
    info = [m.rpartition(",")[0] or m for m in _messages(caplog, "classify_images.pipeline", logging.INFO)]
    assert info == [
        "HIKnSVM: 3 epochs of partial_fit over 3 blocks (40 rows)",
        "HIKnSVM: epoch 1 of 3 done",
        "HIKnSVM: epoch 2 of 3 done",
        "HIKnSVM: epoch 3 of 3 done",
    ]


def test_warm_up_is_not_a_step_to_report(caplog):
    from classify_images.classifiers.base import warm_up
    from classify_images.classifiers.pmsvm import PmSVM

    X, y = np.random.default_rng(4).random((12, 4)), np.repeat([0, 1, 2], 4)
    with caplog.at_level(logging.DEBUG, logger=PACKAGE):
        warm_up(PmSVM(), X, y)
    assert _messages(caplog, "classify_images.classifiers") == []


@pytest.mark.parametrize("verbose", [0, 1])
def test_classifier_verbose_goes_to_stderr_never_stdout(capsys, verbose):
    from classify_images.classifiers.mbkl import MBKL

    X, y = np.random.default_rng(5).random((30, 4)), np.repeat([0, 1, 2], 10)
    MBKL(n_stumps=8, max_iter=3, max_iter_kernel=3, verbose=verbose).fit(X, y)
    out, err = capsys.readouterr()
    assert out == ""
    assert ("MBKL: Step 2" in err) == bool(verbose)
    assert ("MBKL: training 3 one-vs-rest problems" in err) == bool(verbose)


# ------------------------------------------------------------------ Python API: verbose=
def _image_paths() -> list[str]:
    return [str(p) for name in ("china", "flower") for p in sorted((FIXTURE_IMAGES / name).glob("*"))[:4]]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_image_features_are_quiet_by_default(tmp_path, config_file, monkeypatch):
    from classify_images import ImageFeatures

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    features = ImageFeatures(config_file, cache_dir=tmp_path / "cache").fit(_image_paths())
    features.transform(_image_paths()[:2])
    assert terminal.getvalue() == ""


def test_image_features_verbose_shows_steps_and_bars(tmp_path, config_file, monkeypatch):
    from classify_images import ImageFeatures

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    features = ImageFeatures(config_file, cache_dir=tmp_path / "cache", verbose=True).fit(_image_paths())
    shown = terminal.getvalue()
    assert "check images: 8 images" in shown and "learning a kmeans codebook of 16 words" in shown
    assert "sample descriptors:  " in shown and "img/s" in shown  # a tqdm bar: stderr is a terminal here
    assert "Iteration" not in shown  # details need verbose=2
    ImageFeatures(config_file, cache_dir=tmp_path / "cache", verbose=True).fit(_image_paths())
    assert "reusing the cached kmeans codebook of 16 words" in terminal.getvalue()[len(shown) :]
    assert [type(h) for h in logging.getLogger(PACKAGE).handlers] == [logging.NullHandler]  # removed after
    assert features.transform(_image_paths()[:1]).shape == (1, features.n_features_out_)


def test_build_feature_set_verbose_levels(tmp_path, config_file, capsys, caplog):
    from classify_images import build_feature_set
    from classify_images.pipeline.settings.config import load_config

    config = load_config(config_file)
    with caplog.at_level(logging.WARNING):  # a caller's root handler, at WARNING
        build_feature_set(FIXTURE_IMAGES, tmp_path / "fs", config, cache_dir=tmp_path / "cache")
        assert capsys.readouterr().err == "" and caplog.records == []  # verbose=False: nothing
        build_feature_set(FIXTURE_IMAGES, tmp_path / "fs2", config, cache_dir=tmp_path / "cache", verbose=True)
    err = capsys.readouterr().err
    assert "reusing the cached kmeans codebook of 16 words" in err and "[" not in err  # steps, no details
    build_feature_set(FIXTURE_IMAGES, tmp_path / "fs3", config, cache_dir=None, verbose=2)
    err = capsys.readouterr().err
    assert "k-means codebook (16 words, at most 20 iterations): Iteration" in err  # details, with times
    assert logging.getLogger(PACKAGE).level == logging.NOTSET  # restored
    assert [type(h) for h in logging.getLogger(PACKAGE).handlers] == [logging.NullHandler]


# ------------------------------------------------------------------ command line
def _build(tmp_path, config_file, out: str, *options) -> int:
    return main(
        [
            "build-features",
            str(FIXTURE_IMAGES),
            "--config",
            str(config_file),
            "--out",
            str(tmp_path / out),
            "--cache-dir",
            str(tmp_path / "cache"),
            *options,
        ]
    )


def test_cli_default_shows_steps_on_stderr_and_says_when_the_codebook_is_reused(tmp_path, config_file, capsys):
    assert _build(tmp_path, config_file, "fs1") == 0
    out, err = capsys.readouterr()
    assert "learning a kmeans codebook of 16 words from 1700 training descriptors" in err
    assert "check images: 48 images" in err and "encode + pool: 40 images" in err
    assert "learning" not in out and "Iteration" not in err and "so far" not in err  # details are -v's
    assert "feature set:" in out or "features" in out  # the result stays on stdout
    assert _build(tmp_path, config_file, "fs2") == 0
    err = capsys.readouterr().err
    assert "reusing the cached kmeans codebook of 16 words (learnt from the same 1700 training descriptors)" in err
    assert "learning a" not in err


def test_cli_quiet_shows_no_step(tmp_path, config_file, capsys):
    assert _build(tmp_path, config_file, "fs", "-q") == 0
    out, err = capsys.readouterr()
    assert err == "" and out


def test_cli_verbose_shows_details_with_times(tmp_path, config_file, capsys):
    assert (
        main(
            [
                "-v",
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(config_file),
                "--out",
                str(tmp_path / "fs"),
                "--no-cache",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(line.startswith("[") and " s] " in line for line in lines)
    assert any("k-means codebook (16 words, at most 20 iterations): Iteration" in line for line in lines)
    assert any("encode + pool: 40 images in" in line for line in lines)


def test_cli_experiment_steps_and_errors_after_the_steps(tmp_path, config_file, capsys):
    fs = tmp_path / "fs"
    assert _build(tmp_path, config_file, "fs", "-q") == 0
    capsys.readouterr()
    assert (
        main(
            [
                "experiment",
                str(fs),
                "--classifier",
                "linear",
                "--repeats",
                "2",
                "--seed",
                "3",
                "--out",
                str(tmp_path / "experiment"),
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if line.startswith("experiment:")] == [
        "experiment: split 1 of 2 (seed 3)",
        "experiment: split 2 of 2 (seed 4)",
    ]
    assert "experiment:" not in out
    assert main(["train", str(fs), "--classifier", "pmsvm", "--param", "C=-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("classify-images train: error: ") and not any("Traceback" in line for line in err)


def test_cli_run_and_predict_steps(tmp_path, config_file, capsys):
    assert (
        main(
            [
                "run",
                str(FIXTURE_IMAGES),
                "--config",
                str(config_file),
                "--classifier",
                "linear",
                "--out",
                str(tmp_path / "run"),
                "--cache-dir",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if line.startswith("==")] == [
        "== build-features",
        "== train",
        "== evaluate",
    ]
    assert "==" not in out
    assert "QuadraticHingeSVC: training 4 one-vs-rest problems on 20 rows" in err
    images = [str(p) for p in sorted((FIXTURE_IMAGES / "flower").glob("*"))[:3]]
    assert main(["predict", str(tmp_path / "run" / "model.npz"), *images]) == 0
    out, err = capsys.readouterr()
    assert err.strip() == "predict: 3 images" and len(out.splitlines()) == 4
    assert main(["predict", str(tmp_path / "run" / "model.npz"), *images, "-q"]) == 0
    assert capsys.readouterr().err == ""
