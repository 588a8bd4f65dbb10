"""Nothing a user owns is overwritten: the output guard of every command (issue 26, "Data loss";
issue 25, point 4).

Each case puts decoys — a user's files, some with the names our outputs have — where a command
writes, and checks that every decoy is byte-identical afterwards and that the command ended
with exit status 2 and one line naming ``--force`` (when ``--force`` would help).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.interfaces.report import EXPERIMENT_FILE, REPORT_FILES
from classify_images.pipeline.storage.feature_store import FILE_NAMES, is_feature_set_folder, load_feature_set
from classify_images.pipeline.storage.output_guard import MARKER, is_model_file, params_suffix

from ._fuzz import fuzz_settings
from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, build_fixture_feature_set_and_model, write_config_toml


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """``root/fs`` (the fixture feature set), ``root/model.npz`` (linear), ``root/small.toml``, ``root/cache``."""
    return build_fixture_feature_set_and_model(tmp_path_factory.mktemp("built"))


def _decoys(folder: Path, names, *, seed: int = 0) -> dict[Path, bytes]:
    """User files ``folder/name`` of random bytes; returns what each holds."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in names:
        path = folder / name
        path.write_bytes(rng.bytes(int(rng.integers(1, 200))))
        written[path] = path.read_bytes()
    return written


def _snapshot(*folders: Path) -> dict[Path, bytes]:
    """Every regular file under ``folders`` (not following links) with its bytes."""
    files = {}
    for folder in folders:
        for parent, _, names in os.walk(folder):
            for name in names:
                path = Path(parent) / name
                if path.is_file() and not path.is_symlink():
                    files[path] = path.read_bytes()
    return files


def _assert_intact(decoys: dict[Path, bytes]) -> None:
    for path, content in decoys.items():
        assert path.is_file(), f"{path} is gone"
        assert path.read_bytes() == content, f"{path} was changed"


def _refused(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "refusing" in err, err
    for needle in needles:
        assert needle in err, err
    return err


def _build(out: Path, built: Path, *extra: str) -> int:
    return main(
        [
            "build-features",
            str(FIXTURE_IMAGES),
            "--config",
            str(built / "small.toml"),
            "--out",
            str(out),
            "--cache-dir",
            str(built / "cache"),
            "-q",
            *extra,
        ]
    )


# --- build-features ------------------------------------------------------------------------


def test_build_features_keeps_a_users_arrays_with_feature_set_names(built, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("X_train", "y_train", "X_test", "y_test"):
        np.save(out / f"{name}.npy", np.arange(5.0))
    decoys = _snapshot(out)
    assert _build(out, built) == 2
    _refused(capsys, str(out), "--force")
    _assert_intact(decoys)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in decoys)


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({"name": "My web app", "start_url": "/"}),
        "not json at all {",
        json.dumps({"format": "classify-images-feature-set"}),
    ],
)
def test_build_features_keeps_a_folder_with_only_a_foreign_manifest(built, tmp_path, capsys, content):
    """A web app's manifest, a non-JSON file, and even our format key without the files it lists."""
    out = tmp_path / "app"
    out.mkdir()
    (out / "manifest.json").write_text(content)
    decoys = _snapshot(out)
    assert not is_feature_set_folder(out)
    assert _build(out, built) == 2
    _refused(capsys, "--force")
    _assert_intact(decoys)


def test_build_features_force_replaces_only_feature_set_names_and_never_moves_other_files(built, tmp_path, capsys):
    out = tmp_path / "mixed"
    decoys = _decoys(out, ["X_train.npy", "notes.txt"])
    assert _build(out, built, "--force") == 2  # a file of another name: refused even with --force
    err = _refused(capsys, "notes.txt")
    assert "--force" not in err
    _assert_intact(decoys)
    (out / "notes.txt").unlink()
    assert _build(out, built, "--force") == 0  # only feature-set names: --force replaces them
    assert is_feature_set_folder(out)


def test_our_feature_set_is_still_replaced_without_force(built, tmp_path):
    out = tmp_path / "fs"
    shutil.copytree(built / "fs", out)
    other = write_config_toml(tmp_path / "other.toml", {**SMALL_CONFIG, "pooling": {"method": "max", "levels": [1]}})
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(other),
                "--out",
                str(out),
                "--cache-dir",
                str(built / "cache"),
                "-q",
            ]
        )
        == 0
    )
    assert load_feature_set(out).config_hash != load_feature_set(built / "fs").config_hash


# --- train ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["npz", "text", "link"])
def test_train_keeps_a_users_file_at_out(built, tmp_path, capsys, kind):
    out = tmp_path / "weights.npz"
    if kind == "npz":
        np.savez(out, w=np.arange(10.0))
    elif kind == "text":
        out.write_text("my weights")
    else:
        target = tmp_path / "elsewhere.npz"
        np.savez(target, w=np.arange(3.0))
        out.symlink_to(target)
    decoys = _snapshot(tmp_path)
    assert main(["train", str(built / "fs"), "--classifier", "linear", "--out", str(out)]) == 2
    _refused(capsys, str(out), "--force")
    _assert_intact(decoys)
    if kind == "link":  # --force replaces the link by the model; its target is untouched
        assert main(["train", str(built / "fs"), "--classifier", "linear", "--out", str(out), "--force"]) == 0
        assert not out.is_symlink() and is_model_file(out)
        _assert_intact({tmp_path / "elsewhere.npz": decoys[tmp_path / "elsewhere.npz"]})


def test_train_replaces_its_own_model_and_refuses_the_feature_set_folder(built, tmp_path, capsys):
    out = tmp_path / "model.npz"
    shutil.copy(built / "model.npz", out)
    assert is_model_file(out) and not is_model_file(built / "fs" / "X_train.npy")
    assert main(["train", str(built / "fs"), "--classifier", "linear", "--param", "C=0.5", "--out", str(out)]) == 0
    fs = tmp_path / "fs"
    shutil.copytree(built / "fs", fs)
    before = _snapshot(fs)
    capsys.readouterr()
    assert main(["train", str(fs), "--classifier", "linear", "--out", str(fs / "model.npz"), "--force"]) == 2
    _refused(capsys, "feature set")
    _assert_intact(before)
    assert sorted(_snapshot(fs)) == sorted(before)


# --- evaluate, experiment, run -------------------------------------------------------------

USER_REPORT_FILES = ["report.md", "predictions.csv", "report.html", "experiment.json", "model.npz", "notes.txt"]


@pytest.mark.parametrize("command", ["evaluate", "experiment", "run"])
def test_report_commands_keep_a_users_folder(built, tmp_path, capsys, command):
    out = tmp_path / "results"
    decoys = _decoys(out, USER_REPORT_FILES)
    argv = {
        "evaluate": ["evaluate", str(built / "fs"), str(built / "model.npz")],
        "experiment": ["experiment", str(built / "fs"), "--classifier", "linear", "--repeats", "1"],
        "run": [
            "run",
            str(FIXTURE_IMAGES),
            "--config",
            str(built / "small.toml"),
            "--classifier",
            "linear",
            "--cache-dir",
            str(built / "cache"),
            "-q",
        ],
    }[command]
    assert main([*argv, "--out", str(out)]) == 2
    _refused(capsys, str(out), "--force")
    _assert_intact(decoys)
    assert sorted(out.iterdir()) == sorted(decoys)


def test_evaluate_force_replaces_only_the_report_names(built, tmp_path, capsys):
    out = tmp_path / "results"
    decoys = _decoys(out, USER_REPORT_FILES)
    assert main(["evaluate", str(built / "fs"), str(built / "model.npz"), "--out", str(out), "--force"]) == 0
    replaced = set(REPORT_FILES)
    _assert_intact({path: content for path, content in decoys.items() if path.name not in replaced})
    assert (out / "report.md").read_bytes() != decoys[out / "report.md"]
    # now ours: a second evaluate needs no --force, and the user's other files still stay
    assert main(["evaluate", str(built / "fs"), str(built / "model.npz"), "--out", str(out)]) == 0
    _assert_intact({path: content for path, content in decoys.items() if path.name not in replaced})


def test_evaluate_into_the_feature_set_folder_is_refused_even_with_force(built, tmp_path, capsys):
    fs = tmp_path / "fs"
    shutil.copytree(built / "fs", fs)
    before = _snapshot(fs)
    for extra in ([], ["--force"]):
        assert main(["evaluate", str(fs), str(built / "model.npz"), "--out", str(fs), *extra]) == 2
        err = _refused(capsys, "feature set")
        assert "--force" not in err
    _assert_intact(before)
    assert sorted(_snapshot(fs)) == sorted(before)
    assert is_feature_set_folder(fs)


def test_report_folder_of_ours_takes_user_notes_along(built, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["evaluate", str(built / "fs"), str(built / "model.npz"), "--out", str(out)]) == 0
    assert json.loads((out / MARKER).read_text())["files"] == sorted(REPORT_FILES)
    notes = _decoys(out, ["notes.txt"])
    assert main(["evaluate", str(built / "fs"), str(built / "model.npz"), "--out", str(out)]) == 0
    _assert_intact(notes)


def test_experiment_defaults_are_named_by_their_parameters(built, tmp_path, capsys):
    """Issue 25.4: a second experiment with another --param no longer overwrites the first one's report."""
    fs = tmp_path / "fs"
    shutil.copytree(built / "fs", fs)
    argv = ["experiment", str(fs), "--classifier", "linear", "--repeats", "1"]
    assert main([*argv, "--param", "C=0.5"]) == 0
    first = tmp_path / f"fs-linear{params_suffix({'C': 0.5})}-experiment"
    kept = _snapshot(first)
    assert set(REPORT_FILES) | {EXPERIMENT_FILE} <= {path.name for path in kept}
    assert main([*argv, "--param", "C=2"]) == 0
    _assert_intact(kept)
    assert (tmp_path / "fs-linear-C=2-experiment" / "report.html").is_file()
    # an explicit --out holding another run: refused without --force, replaced with it
    capsys.readouterr()
    assert main([*argv, "--param", "C=2", "--out", str(first)]) == 2
    _refused(capsys, "another run", "--force")
    _assert_intact(kept)
    assert main([*argv, "--param", "C=2", "--out", str(first), "--force"]) == 0
    assert json.loads((first / EXPERIMENT_FILE).read_text())["params"] == {"C": 2}


def test_params_suffix_is_short_and_safe():
    assert params_suffix({}) == "" and params_suffix(None) == ""
    assert params_suffix({"p": -8, "C": 0.01}) == "-C=0.01-p=-8"
    long = params_suffix({"class_weight": "balanced", "max_iter": 100000, "tol": 1e-9})
    assert long.startswith("-p") and len(long) == 10
    assert params_suffix({"x": "../../etc"}).startswith("-p")  # never a path separator


# --- demo, cache ---------------------------------------------------------------------------


def test_demo_keeps_a_users_workdir(tmp_path, capsys):
    workdir = tmp_path / "work"
    decoys = _decoys(workdir, ["demo.json", "thesis.tex"])
    assert main(["demo", "--workdir", str(workdir), "-q"]) == 2
    _refused(capsys, "--workdir", "--force")
    _assert_intact(decoys)
    assert sorted(workdir.iterdir()) == sorted(decoys)


def test_cache_clear_never_follows_a_link_out_of_the_cache(tmp_path, capsys):
    user = tmp_path / "user"
    decoys = _decoys(user / "classify_images", ["thesis.tex", "data.npy"])
    decoys |= _decoys(user, ["other.txt"])
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "joblib").symlink_to(user)
    assert main(["cache", "info", "--cache-dir", str(cache)]) == 0
    assert "(0 bytes in 0 files" in capsys.readouterr().out  # the user's files are not counted
    assert main(["cache", "clear", "--cache-dir", str(cache)]) == 0
    _assert_intact(decoys)
    assert not (cache / "joblib").is_symlink()  # the link itself is removed


def test_cache_clear_reads_no_fifo_planted_as_its_gitignore(tmp_path):
    """``cache clear`` reads the cache folder's ``.gitignore`` (joblib's, removed when alone): a FIFO
    there is left alone, not opened for reading (which would wait for a writer forever)."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    (cache / "joblib").mkdir(parents=True)
    os.mkfifo(cache / ".gitignore")
    done = subprocess.run(
        [sys.executable, "-m", "classify_images.pipeline.interfaces.cli", "cache", "clear", "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        timeout=1800,  # a hang guard only (a loaded machine is far slower)
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(cache / ".gitignore").st_mode)


def test_cache_dir_in_a_users_git_work_tree_gets_no_gitignore(built, tmp_path, capsys):
    """joblib writes '.gitignore' with '*' into the folder it is given (measured, joblib 1.6):
    a cache folder that holds a user's files is refused before any work."""
    tree = tmp_path / "project"
    decoys = _decoys(tree, ["main.py", "README.md"])
    (tree / ".git").mkdir()
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(built / "small.toml"),
                "--out",
                str(tmp_path / "fs"),
                "--cache-dir",
                str(tree),
                "-q",
            ]
        )
        == 2
    )
    _refused(capsys, str(tree), ".gitignore")
    _assert_intact(decoys)
    assert not (tree / ".gitignore").exists() and not (tree / "joblib").exists()
    assert not (tmp_path / "fs").exists()


def test_atomic_writes_temporary_names_are_recognised_exactly(tmp_path):
    from classify_images.pipeline.storage.atomic import atomic_write, is_temporary_of

    seen = []
    for concurrent in (False, True):
        with atomic_write(tmp_path / "manifest.json", "w", concurrent=concurrent) as handle:
            handle.write("{}")
            seen += [p.name for p in tmp_path.iterdir() if p.name != "manifest.json"]
    assert len(seen) == 2 and all(is_temporary_of(name, "manifest.json") for name in seen)
    for other in ("manifest.json", ".manifest.json.x.tmp", ".manifest.json.12.partial", "..manifest.json.1.tmp"):
        assert not is_temporary_of(other, "manifest.json")


def test_a_cache_folder_another_process_is_creating_is_accepted(tmp_path):
    """Two processes starting on one new cache folder: the second may list it while the first's
    marker is still a temporary file of its atomic write; that is our file, not a user's (this
    race failed the two-writer cluster test once).  A user's file beside it is still refused."""
    from classify_images.pipeline.storage.cache_store import CREATED_MARKER
    from classify_images.pipeline.storage.output_guard import OutputRefusedError, check_cache_folder

    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / f".{CREATED_MARKER}.28638.tmp").write_text("{")
    assert check_cache_folder(folder) == folder
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(OutputRefusedError, match="notes.txt"):
        check_cache_folder(folder)


# --- Hypothesis: folders mixing a user's files with our names ------------------------------

OUR_NAMES = sorted({*REPORT_FILES, EXPERIMENT_FILE, *FILE_NAMES, "model.npz", "features", "report"})
OTHER_NAMES = ["notes.txt", "data.csv", ".hidden", "README.md"]


@fuzz_settings(12)
@given(
    names=st.sets(st.sampled_from(OUR_NAMES + OTHER_NAMES), max_size=5),
    command=st.sampled_from(["build-features", "evaluate", "train"]),
    seed=st.integers(0, 2**16),
)
def test_generated_user_folders_are_never_changed(built, tmp_path_factory, names, command, seed):
    """Whatever a user's folder holds, a command either leaves it byte-identical (exit 2), or the
    folder held none of the user's files (empty: exit 0)."""
    out = tmp_path_factory.mktemp("generated") / "out"
    decoys = _decoys(out, sorted(names), seed=seed)
    target = out / "model.npz" if command == "train" else out
    argv = {
        "build-features": [
            "build-features",
            str(FIXTURE_IMAGES),
            "--config",
            str(built / "small.toml"),
            "--cache-dir",
            str(built / "cache"),
            "-q",
        ],
        "evaluate": ["evaluate", str(built / "fs"), str(built / "model.npz")],
        "train": ["train", str(built / "fs"), "--classifier", "linear"],
    }[command]
    status = main([*argv, "--out", str(target)])
    if command == "train":
        assert status == (2 if "model.npz" in names else 0)
    else:
        assert status == (2 if names else 0)
    _assert_intact(
        {
            path: content
            for path, content in decoys.items()
            if not (command == "train" and status == 0 and path == target)
        }
    )
