"""``cache clear`` deletes only what the stage cache wrote (a folder it did not create stays, even
empty), and ``cache info`` on a cache it cannot read says so instead of "0 bytes"."""

from __future__ import annotations

import os

from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.storage.cache_store import CREATED_MARKER, secure_cache_folder


def test_cache_clear_keeps_an_empty_folder_it_did_not_create(tmp_path, capsys):
    project = tmp_path / "my-project"
    project.mkdir()
    assert main(["cache", "clear", "--cache-dir", str(project)]) == 0
    assert project.is_dir()
    secure_cache_folder(project)  # an existing folder used as the cache: not recorded as created
    (project / "joblib" / "classify_images").mkdir(parents=True)
    (project / "joblib" / "classify_images" / "entry").write_bytes(b"cached")
    assert main(["cache", "clear", "--cache-dir", str(project)]) == 0
    assert project.is_dir() and list(project.iterdir()) == []


def test_cache_clear_removes_the_folder_it_created_once_empty(tmp_path, capsys):
    cache = tmp_path / "cache"
    secure_cache_folder(cache)
    assert (cache / CREATED_MARKER).is_file()
    (cache / "notes.txt").write_text("mine")
    assert main(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert (cache / "notes.txt").read_text() == "mine"
    (cache / "notes.txt").unlink()
    assert main(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert not cache.exists()


def test_cache_info_on_a_cache_it_cannot_read_is_one_error_line(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "joblib" / "classify_images" / "stage").mkdir(parents=True)
    (cache / "joblib" / "classify_images" / "stage" / "entry").write_bytes(b"x" * 100)
    real_scandir = os.scandir

    def denied(path="."):  # (the tests may run as root, whom permissions do not stop)
        if os.fspath(path).endswith("stage"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", denied)
    assert main(["cache", "info", "--cache-dir", str(cache)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Permission denied" in err and "Traceback" not in err, err
