"""A file is replaced only when it is what classify-images wrote: the output marker records each
file's size and SHA-256, and a marker we did not write (copied, hand-made, planted) never makes a
user's file ours.

Each case puts a user's files where a report is written and compares them byte for byte after the
command: refused without ``--force``; with ``--force`` kept aside as ``<name>.~1~``, never replaced.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.interfaces.report import REPORT_FILES
from classify_images.pipeline.storage.atomic import atomic_write
from classify_images.pipeline.storage.output_guard import (
    MARKER,
    MARKER_FORMAT,
    OutputFolder,
    OutputRefusedError,
    check_output_file,
    file_identity,
    is_model_file,
    read_marker,
)

from .conftest import build_fixture_feature_set_and_model

USER_FILES = {"report.md": b"# my own notes on the thesis\n", "predictions.csv": b"path,mine\na.png,cat\n"}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """``root/fs`` (the fixture feature set), ``root/model.npz`` (linear)."""
    return build_fixture_feature_set_and_model(tmp_path_factory.mktemp("built"))


def _evaluate(built: Path, out: Path, *extra: str) -> int:
    return main(["evaluate", str(built / "fs"), str(built / "model.npz"), "--out", str(out), *extra])


def _put_user_files(folder: Path) -> None:
    for name, content in USER_FILES.items():
        (folder / name).write_bytes(content)


def _refused_once(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and "refusing" in err, err
    return err


def _assert_user_files_kept(folder: Path, *, aside: bool) -> None:
    """The user's files are byte-identical: in place (refused), or as ``<name>.~1~`` (``--force``)."""
    for name, content in USER_FILES.items():
        kept = folder / (f"{name}.~1~" if aside else name)
        assert kept.read_bytes() == content, kept


def _forced_and_kept(built: Path, out: Path, capsys) -> None:
    assert _evaluate(built, out, "--force") == 0
    err = capsys.readouterr().err
    assert "report.md.~1~" in err and "predictions.csv.~1~" in err
    _assert_user_files_kept(out, aside=True)
    assert (out / "report.md").read_bytes() != USER_FILES["report.md"]
    assert _evaluate(built, out) == 0  # our report now: no --force needed, the kept files stay
    _assert_user_files_kept(out, aside=True)


def test_a_report_folder_emptied_by_rm_with_the_users_files_put_there(built, tmp_path, capsys):
    out = tmp_path / "report"
    assert _evaluate(built, out) == 0
    for path in out.iterdir():  # ``rm *``: the hidden marker stays
        if not path.name.startswith("."):
            path.unlink()
    _put_user_files(out)
    capsys.readouterr()
    assert _evaluate(built, out) == 2
    err = _refused_once(capsys)
    assert "predictions.csv, report.md there were not written" in err and MARKER not in err
    _assert_user_files_kept(out, aside=False)
    _forced_and_kept(built, out, capsys)


@pytest.mark.parametrize("marker", ["copied", "names-only", "hand-made-hashes"])
def test_a_marker_we_did_not_write_never_makes_a_users_file_ours(built, tmp_path, capsys, marker):
    out = tmp_path / "mine"
    out.mkdir()
    _put_user_files(out)
    if marker == "copied":  # from a real report folder of ours, for the same run
        ours = tmp_path / "ours"
        assert _evaluate(built, ours) == 0
        shutil.copy(ours / MARKER, out / MARKER)
    else:
        written = {} if marker == "names-only" else {name: [{"size": 10, "sha256": "0" * 64}] for name in USER_FILES}
        payload = {"format": MARKER_FORMAT, "format_version": 2, "kind": "report", "files": sorted(REPORT_FILES)}
        if marker == "names-only":
            payload["format_version"] = 1  # what markers held before they recorded bytes
        else:
            payload["written"] = written
        (out / MARKER).write_text(json.dumps(payload))
    capsys.readouterr()
    assert _evaluate(built, out) == 2
    _refused_once(capsys)
    _assert_user_files_kept(out, aside=False)
    _forced_and_kept(built, out, capsys)


def test_a_report_marker_planted_in_a_feature_set_is_refused_even_with_force(built, tmp_path, capsys):
    fs = tmp_path / "fs"
    shutil.copytree(built / "fs", fs)
    report = tmp_path / "report"
    assert _evaluate(built, report) == 0
    shutil.copy(report / MARKER, fs / MARKER)
    before = {path.name: path.read_bytes() for path in fs.iterdir()}
    capsys.readouterr()
    for extra in ([], ["--force"]):
        assert _evaluate(built, fs, *extra) == 2
        err = _refused_once(capsys)
        assert "feature set" in err and "--force" not in err
    assert {path.name: path.read_bytes() for path in fs.iterdir()} == before


def test_a_refusal_never_lists_the_marker_as_a_users_file(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / MARKER).write_text("{not json")
    (out / "thesis.tex").write_text("mine")
    with pytest.raises(OutputRefusedError) as refused:
        OutputFolder(out, REPORT_FILES, "report").check()
    assert "thesis.tex" in str(refused.value) and MARKER not in str(refused.value)
    (out / "thesis.tex").unlink()
    with pytest.raises(OutputRefusedError, match=f"its {MARKER} is not one classify-images wrote"):
        OutputFolder(out, REPORT_FILES, "report").check()


def test_each_file_is_recorded_before_it_replaces_the_old_one(tmp_path):
    """A crash after a file's rename (no ``__exit__``) still leaves it ours."""
    out = tmp_path / "out"
    guard = OutputFolder(out, ("report.md", "report.json"), "report")
    guard.check()
    guard.claim().__enter__()  # and never left: the process "dies" after the write
    with atomic_write(out / "report.md", "w") as handle:
        handle.write("first")
    assert read_marker(out)["written"]["report.md"] == [file_identity(out / "report.md")]
    OutputFolder(out, ("report.md", "report.json"), "report").check()  # ours, without --force
    guard.__exit__(None, None, None)
    (out / "report.md").write_text("the user's now")
    with pytest.raises(OutputRefusedError, match="report.md there was not written"):
        OutputFolder(out, ("report.md", "report.json"), "report").check()


def test_our_marker_reindented_is_still_ours(tmp_path):
    """The run is recorded by a digest and a short text: a run of 900 kB of parameters keeps a
    small marker, which re-indenting by hand cannot push past the size a marker may have."""
    out = tmp_path / "report"
    run = {"command": "experiment", "params": {"note": "x" * 900_000}}
    with OutputFolder(out, ("report.md",), "report", run=run).claim():
        with atomic_write(out / "report.md", "w") as handle:
            handle.write("ours")
    marker = json.loads((out / MARKER).read_text())
    (out / MARKER).write_text(json.dumps(marker, indent=200))
    assert os.path.getsize(out / MARKER) < 64 * 1024
    OutputFolder(out, ("report.md",), "report", run=run).check()  # ours, same run, without --force
    with pytest.raises(OutputRefusedError, match="another run"):
        OutputFolder(out, ("report.md",), "report", run={**run, "seed": 1}).check()


def test_train_force_keeps_a_users_file_aside(built, tmp_path, capsys):
    out = tmp_path / "weights.npz"
    out.write_bytes(b"my weights")
    (tmp_path / "weights.npz.~1~").write_bytes(b"an older backup of mine")
    with pytest.raises(OutputRefusedError):
        check_output_file(out, "model file")
    assert main(["train", str(built / "fs"), "--classifier", "linear", "--out", str(out), "--force"]) == 0
    assert is_model_file(out)
    assert (tmp_path / "weights.npz.~1~").read_bytes() == b"an older backup of mine"
    assert (tmp_path / "weights.npz.~2~").read_bytes() == b"my weights"


def test_claim_without_force_never_moves_a_users_file(tmp_path):
    """:meth:`OutputFolder.claim` refuses, as :meth:`check` does, a file put there since: only
    ``--force`` keeps one aside."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_bytes(b"mine")
    with pytest.raises(OutputRefusedError, match="report.md there was not written"):
        OutputFolder(out, ("report.md",), "report").claim()
    assert (out / "report.md").read_bytes() == b"mine" and not (out / "report.md.~1~").exists()


def test_the_journal_of_a_write_in_progress_is_folded_into_the_marker(tmp_path):
    """While files are written, each identity is appended to ``.classify-images.log``; leaving the
    write folds them into the marker and removes the journal.  A journal proves bytes only."""
    from classify_images.pipeline.storage.output_guard import JOURNAL

    out = tmp_path / "out"
    guard = OutputFolder(out, ("report.md", "report.json"), "report").claim()
    guard.__enter__()
    for name in ("report.md", "report.json"):
        with atomic_write(out / name, "w") as handle:
            handle.write(name)
    assert len((out / JOURNAL).read_text().splitlines()) == 2
    guard.__exit__(None, None, None)
    assert not (out / JOURNAL).exists()
    assert read_marker(out)["written"]["report.json"] == [file_identity(out / "report.json")]
    (out / JOURNAL).symlink_to(tmp_path / "elsewhere")  # planted: never written through
    with OutputFolder(out, ("report.md", "report.json"), "report").claim():
        with atomic_write(out / "report.md", "w") as handle:
            handle.write("again")
    assert not (tmp_path / "elsewhere").exists()
