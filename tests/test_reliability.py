"""Issue 14: never lose a user's data, never run a stranger's code, never end in a traceback.

Each test is one case of docs/reliability.md: it asserts the one-line error (exit 2) or the
data left intact.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import validate_config
from classify_images.pipeline.storage import atomic
from classify_images.pipeline.storage.feature_store import (
    FeatureSetError,
    FeatureSetWriter,
    is_feature_set_folder,
    load_feature_set,
)

from .conftest import SMALL_CONFIG, write_config_toml


@pytest.fixture
def config_file(tmp_path) -> Path:
    return write_config_toml(tmp_path / "small.toml")


def _build(dataset, out, config_file, cache, *extra) -> int:
    return main(
        [
            "build-features",
            str(dataset),
            "--out",
            str(out),
            "--config",
            str(config_file),
            "--cache-dir",
            str(cache),
            "-q",
            *extra,
        ]
    )


def _one_line_error(capsys, *needles) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path → bytes), symlinks as their target."""
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            out[key] = os.readlink(path).encode()
        elif path.is_file():
            out[key] = path.read_bytes()
        else:
            out[key] = b"<dir>"
    return out


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# --- 1. data loss -------------------------------------------------------------------------


def test_out_a_users_folder_is_refused_and_untouched(tmp_path, small_dataset, config_file, capsys):
    pictures = tmp_path / "Pictures"
    (pictures / "holiday").mkdir(parents=True)
    (pictures / "holiday" / "beach.jpg").write_bytes(b"\xff\xd8 not really")
    (pictures / "notes.txt").write_text("keep me")
    before = _snapshot(pictures)
    assert _build(small_dataset, pictures, config_file, tmp_path / "cache") == 2
    _one_line_error(capsys, "refusing", "not a feature set", str(pictures))
    assert _snapshot(pictures) == before


@pytest.mark.parametrize("target", ["dataset", "parent", "inside"])
def test_out_the_dataset_its_ancestors_or_inside_it_is_refused(tmp_path, small_dataset, config_file, capsys, target):
    out = {"dataset": small_dataset, "parent": small_dataset.parent, "inside": small_dataset / "features"}[target]
    before = _snapshot(small_dataset)
    assert _build(small_dataset, out, config_file, tmp_path / "cache") == 2
    _one_line_error(capsys, "refusing", "dataset")
    assert _snapshot(small_dataset) == before


def test_out_a_plain_file_is_refused(tmp_path, small_dataset, config_file, capsys):
    out = tmp_path / "results"
    out.write_text("my thesis")
    assert _build(small_dataset, out, config_file, tmp_path / "cache") == 2
    _one_line_error(capsys, "is a file")
    assert out.read_text() == "my thesis"


@pytest.mark.parametrize("dangling", [False, True])
def test_out_a_symlink_is_refused(tmp_path, small_dataset, config_file, capsys, dangling):
    target = tmp_path / "elsewhere"
    if not dangling:
        target.mkdir()
        (target / "file.txt").write_text("x")
    link = tmp_path / "fs"
    link.symlink_to(target)
    assert _build(small_dataset, link, config_file, tmp_path / "cache") == 2
    _one_line_error(capsys, "symbolic link")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert dangling or (target / "file.txt").read_text() == "x"


def test_out_the_current_folder_is_refused(tmp_path, small_dataset, config_file, capsys, monkeypatch):
    here = tmp_path / "empty-here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert _build(small_dataset, ".", config_file, tmp_path / "cache") == 2
    _one_line_error(capsys, "current folder")


def test_empty_folder_and_own_feature_set_are_replaced(tmp_path, small_dataset, config_file, capsys):
    out, cache = tmp_path / "fs", tmp_path / "cache"
    out.mkdir()
    assert _build(small_dataset, out, config_file, cache) == 0
    first = load_feature_set(out).config_hash
    other = write_config_toml(tmp_path / "other.toml", {**SMALL_CONFIG, "pooling": {"method": "max", "levels": [1]}})
    assert _build(small_dataset, out, other, cache) == 0
    assert load_feature_set(out).config_hash != first
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".fs")) == []


def test_feature_set_with_a_foreign_file_is_refused(tmp_path, small_dataset, config_file, capsys):
    out, cache = tmp_path / "fs", tmp_path / "cache"
    assert _build(small_dataset, out, config_file, cache) == 0
    (out / "my-notes.txt").write_text("results discussion")
    assert not is_feature_set_folder(out)
    other = write_config_toml(tmp_path / "other.toml", {**SMALL_CONFIG, "pooling": {"method": "max", "levels": [1]}})
    capsys.readouterr()
    assert _build(small_dataset, out, other, cache) == 2
    _one_line_error(capsys, "not a feature set")
    assert (out / "my-notes.txt").read_text() == "results discussion"


def test_a_foreign_manifest_is_not_ours(tmp_path):
    folder = tmp_path / "other-tool"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"format": "someone-else"}))
    assert not is_feature_set_folder(folder)


# --- 5. torn or partial files -------------------------------------------------------------


def _tear(out: Path, how: str) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    if how == "empty X_train":
        (out / "X_train.npy").write_bytes(b"")
    elif how == "empty manifest":
        (out / "manifest.json").write_bytes(b"")
    elif how == "manifest without split":
        del manifest["split"]
        (out / "manifest.json").write_text(json.dumps(manifest))
    elif how == "short y_test":
        np.save(out / "y_test.npy", np.load(out / "y_test.npy")[:-1])
    elif how == "label out of range":
        y = np.load(out / "y_train.npy")
        y[0] = 99
        np.save(out / "y_train.npy", y)
    elif how == "NaN in X_test":
        X = np.load(out / "X_test.npy")
        X[0, 0] = np.nan
        np.save(out / "X_test.npy", X)
    elif how == "float64 X_train":
        np.save(out / "X_train.npy", np.load(out / "X_train.npy").astype(np.float64))
    elif how == "pickled y_train":
        np.save(out / "y_train.npy", np.array([object()] * 3, dtype=object), allow_pickle=True)
    else:  # pragma: no cover
        raise AssertionError(how)


TEARS = [
    "empty X_train",
    "empty manifest",
    "manifest without split",
    "short y_test",
    "label out of range",
    "NaN in X_test",
    "float64 X_train",
    "pickled y_train",
]


@pytest.mark.parametrize("how", TEARS)
def test_torn_feature_set_is_one_line_everywhere_and_a_rebuild_repairs_it(
    tmp_path, small_dataset, config_file, capsys, how
):
    out, cache = tmp_path / "fs", tmp_path / "cache"
    assert _build(small_dataset, out, config_file, cache) == 0
    good = np.asarray(load_feature_set(out).X_test).copy()
    _tear(out, how)
    with pytest.raises(FeatureSetError):
        load_feature_set(out)
    capsys.readouterr()
    for argv in (
        ["train", str(out), "--classifier", "linear"],
        ["experiment", str(out), "--classifier", "linear", "--repeats", "1"],
    ):
        assert main(argv) == 2
        _one_line_error(capsys, str(out))
    if how == "empty manifest":  # no manifest of ours: not proven ours, so replaced only with --force
        assert _build(small_dataset, out, config_file, cache) == 2
        _one_line_error(capsys, str(out), "--force")
        assert (out / "manifest.json").read_bytes() == b""
        assert _build(small_dataset, out, config_file, cache, "--force") == 0
    else:
        assert _build(small_dataset, out, config_file, cache) == 0
    np.testing.assert_array_equal(np.asarray(load_feature_set(out).X_test), good)


def test_writer_syncs_every_file_and_the_folder_before_the_rename(tmp_path, monkeypatch):
    synced, order = [], []
    real_fsync_file, real_fsync_folder, real_replace = atomic.fsync_file, atomic.fsync_folder, atomic.replace_folder
    monkeypatch.setattr(
        "classify_images.pipeline.storage.feature_store.fsync_file",
        lambda p: (synced.append(Path(p).name), real_fsync_file(p)),
    )
    monkeypatch.setattr(atomic, "fsync_folder", lambda p: (order.append(("fsync", Path(p).name)), real_fsync_folder(p)))
    monkeypatch.setattr(
        "classify_images.pipeline.storage.feature_store.replace_folder",
        lambda *a: (order.append(("replace",)), real_replace(*a))[1],
    )
    with FeatureSetWriter(tmp_path / "fs") as writer:
        rows = writer.open_rows("X_train", 3, 4)
        rows[:] = 1.0
        rows.flush()
        writer.save("y_train", np.zeros(3, dtype=np.int64))
        writer.commit({"n_features": 4})
    assert {"X_train.npy", "y_train.npy"} <= set(synced)
    # the new folder is synced before it is renamed (the manifest itself by atomic_write)
    assert order.index(("fsync", f".fs.partial-{os.getpid()}")) < order.index(("replace",))


def test_open_rows_allocates_the_file_before_mapping(tmp_path):
    with FeatureSetWriter(tmp_path / "fs") as writer:
        rows = writer.open_rows("X_train", 64, 256)
        path = writer.tmp / "X_train.npy"
        stat = os.stat(path)
        assert stat.st_blocks * 512 >= 64 * 256 * 4  # allocated, not a sparse file
        rows[:] = np.arange(256, dtype=np.float32)
        rows.flush()
        del rows
        np.testing.assert_array_equal(np.load(path)[5], np.arange(256, dtype=np.float32))


def test_folder_swap_leaves_no_window_where_out_is_missing(tmp_path):
    """A reader polling ``out/manifest.json`` while the folder is replaced 200 times never misses it."""
    if atomic._RENAMEAT2 is None:
        pytest.skip("renameat2 is not available on this platform: the fallback swap has a window")
    out = tmp_path / "fs"
    out.mkdir()
    (out / "manifest.json").write_text("0")
    probe = tmp_path / ".probe"
    probe.mkdir()
    if not atomic.exchange_paths(probe, out):
        pytest.skip("this file system does not support RENAME_EXCHANGE")
    atomic.exchange_paths(probe, out)
    probe.rmdir()
    missing, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            if not (out / "manifest.json").exists():
                missing.append(1)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(200):
            new = tmp_path / f".fs.partial-{i}"
            new.mkdir()
            (new / "manifest.json").write_text(str(i + 1))
            assert atomic.replace_folder(new, out, tmp_path / f".fs.old-{i}")
            shutil.rmtree(tmp_path / f".fs.old-{i}")
    finally:
        stop.set()
        thread.join()
    assert (out / "manifest.json").read_text() == "200"
    assert missing == []


# --- 2. full disk -------------------------------------------------------------------------


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path, small_dataset, config_file):
    dead, alive = _dead_pid(), os.getppid()
    for name in (f".fs.partial-{dead}", f".fs.old-{dead}", f".fs.partial-{alive}"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "X_train.npy").write_bytes(b"\0" * 1000)
    (tmp_path / f".fs.old-{dead}" / "unrelated.txt").write_text("not ours")
    (tmp_path / f".report.json.{dead}.tmp").write_text("{")
    assert _build(small_dataset, tmp_path / "fs", config_file, tmp_path / "cache") == 0
    assert not (tmp_path / f".fs.partial-{dead}").exists()
    assert (tmp_path / f".fs.partial-{alive}").exists()  # its process still runs
    # a stale folder loses only the files this project writes
    assert sorted(p.name for p in (tmp_path / f".fs.old-{dead}").iterdir()) == ["unrelated.txt"]
    atomic.atomic_write_json(tmp_path / "report.json", {})
    assert not (tmp_path / f".report.json.{dead}.tmp").exists()


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_disk_full_while_allocating_rows_is_one_line_and_keeps_the_old_set(
    tmp_path, small_dataset, config_file, capsys, monkeypatch
):
    out, cache = tmp_path / "fs", tmp_path / "cache"
    assert _build(small_dataset, out, config_file, cache) == 0
    before = _snapshot(out)
    other = write_config_toml(tmp_path / "other.toml", {**SMALL_CONFIG, "pooling": {"method": "max", "levels": [1]}})
    monkeypatch.setattr(os, "posix_fallocate", _enospc)
    capsys.readouterr()
    assert _build(small_dataset, out, other, cache) == 2
    _one_line_error(capsys, "No space left on device", "free some space")
    assert _snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".fs.")] == []


def test_disk_full_while_writing_a_report_or_model_is_one_line(
    tmp_path, small_dataset, config_file, capsys, monkeypatch
):
    out, cache = tmp_path / "fs", tmp_path / "cache"
    assert _build(small_dataset, out, config_file, cache) == 0
    model = tmp_path / "model.npz"
    assert main(["train", str(out), "--classifier", "linear", "--out", str(model)]) == 0
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", _enospc)
    capsys.readouterr()
    assert main(["evaluate", str(out), str(model), "--out", str(tmp_path / "report"), "-q"]) == 2
    _one_line_error(capsys, "No space left on device")
    assert main(["train", str(out), "--classifier", "linear", "--out", str(tmp_path / "model2.npz"), "-q"]) == 2
    _one_line_error(capsys, "No space left on device")
    monkeypatch.setattr(os, "fsync", real_fsync)
    leftovers = [p.name for p in tmp_path.rglob(".*.tmp")]
    assert leftovers == []


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


def test_disk_full_on_a_small_tmpfs(tmp_path, small_dataset, config_file):
    """A real full disk: the build ends with one line (no SIGBUS), leaves no temporary folder."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "2m"):
        pytest.skip("needs root and permission to mount a tmpfs (the injected-ENOSPC tests above still run)")
    try:
        ballast = disk / "ballast"
        with open(ballast, "wb") as handle:  # fill the disk, then free a little
            with pytest.raises(OSError):
                while True:
                    handle.write(bytes(64 * 1024))
                    handle.flush()
        os.truncate(ballast, max(0, os.path.getsize(ballast) - 12 * 1024))
        script = (
            "import sys; from classify_images.pipeline.interfaces.cli import main; "
            f"sys.exit(main({['build-features', str(small_dataset), '--out', str(disk / 'fs'), '--config', str(config_file), '--no-cache', '-q']!r}))"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1800)
        assert done.returncode == 2, (done.returncode, done.stderr[-2000:])  # not -7 (SIGBUS)
        # the disk's lack of room is named: refused before encoding when the rows cannot fit the free
        # space (classify_images/pipeline/storage/room.py), else the write's own ENOSPC
        assert "No space left on device" in done.stderr or " free: free some space" in done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert sorted(p.name for p in disk.iterdir()) == ["ballast"]
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


# --- 3. a stage cache without pickle --------------------------------------------------------


class _Payload:
    """A pickle that, when loaded, writes a marker file (what a planted pickle would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_planted_pickle_in_the_cache_never_runs(tmp_path, small_dataset, config_file):
    import pickle

    out, cache, marker = tmp_path / "fs", tmp_path / "cache", tmp_path / "PWNED"
    assert _build(small_dataset, out, config_file, cache) == 0
    good = np.asarray(load_feature_set(out).X_train).copy()
    entries = sorted(cache.rglob("output.npz"))
    assert len(entries) > 10 and not list(cache.rglob("output.pkl"))
    payload = pickle.dumps(_Payload(marker))
    for i, entry in enumerate(entries):
        if i % 2:  # a pickle where joblib's own backend would look for it
            entry.unlink()
            entry.with_name("output.pkl").write_bytes(payload)
        else:  # a pickle under the name this backend reads
            entry.write_bytes(payload)
    shutil.rmtree(out)
    assert _build(small_dataset, out, config_file, cache) == 0
    assert not marker.exists()
    np.testing.assert_array_equal(np.asarray(load_feature_set(out).X_train), good)
    # the planted entries were misses and were rewritten as .npz
    assert len(list(cache.rglob("output.npz"))) == len(entries)


def test_cache_round_trips_every_stage_output_exactly():
    from classify_images.pipeline.storage.cache_store import decode_result, encode_result

    results = [
        {"ok": True, "shape": (96, 72)},
        {"ok": False, "reason": "truncated or corrupt image (JPEG has no end-of-image marker)"},
        {
            "descriptors": np.arange(256, dtype=np.uint8).reshape(2, 128),
            "x": np.ones(2, np.float32),
            "y": np.zeros(2, np.float32),
            "shape": np.array([5, 6], np.int32),
        },
        np.arange(12, dtype=np.float32).reshape(3, 4),
        {"index": np.array([1, 2], np.int16), "scale": 0.5, "count": 3},
    ]
    for result in results:
        arrays = encode_result(result)
        back = decode_result({k: np.asarray(v) for k, v in arrays.items()})
        if isinstance(result, np.ndarray):
            assert back.dtype == result.dtype and np.array_equal(back, result)
            continue
        assert set(back) == set(result)
        for key, value in result.items():
            if isinstance(value, np.ndarray):
                assert back[key].dtype == value.dtype and np.array_equal(back[key], value)
            else:
                assert type(back[key]) is type(value) and back[key] == value
    for bad in ([1, 2], {"a": [1]}, np.array([object()]), {"a": np.array([None])}):
        with pytest.raises(TypeError):
            encode_result(bad)


def test_cache_folder_is_private_and_others_folders_are_refused(tmp_path, small_dataset, config_file, capsys):
    cache = tmp_path / "new-cache"
    assert _build(small_dataset, tmp_path / "fs", config_file, cache) == 0
    assert (os.stat(cache).st_mode & 0o777) == 0o700
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    os.chmod(shared, 0o777)
    capsys.readouterr()
    assert _build(small_dataset, tmp_path / "fs2", config_file, shared) == 2
    _one_line_error(capsys, "writable by other users", "chmod go-w")
    assert not (tmp_path / "fs2").exists()
    if os.geteuid() == 0:
        theirs = tmp_path / "their-cache"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        assert _build(small_dataset, tmp_path / "fs3", config_file, theirs) == 2
        _one_line_error(capsys, "belongs to another user")


def test_disk_full_in_the_cache_is_one_line_and_leaves_no_temporary_file(
    tmp_path, small_dataset, config_file, capsys, monkeypatch
):
    from classify_images.pipeline.storage import cache_store

    def full_disk(handle, **arrays):
        handle.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_store.np, "savez", full_disk)
    cache = tmp_path / "cache"
    assert _build(small_dataset, tmp_path / "fs", config_file, cache) == 2
    _one_line_error(capsys, "No space left on device")
    monkeypatch.undo()
    assert [p for p in cache.rglob("output.npz*")] == []
    assert not (tmp_path / "fs").exists()


def test_parallel_build_with_the_npz_cache_matches_serial(tmp_path, small_dataset, config_file):
    assert _build(small_dataset, tmp_path / "serial", config_file, tmp_path / "c1") == 0
    assert _build(small_dataset, tmp_path / "parallel", config_file, tmp_path / "c2", "--n-jobs", "2") == 0
    assert _build(small_dataset, tmp_path / "again", config_file, tmp_path / "c2", "--n-jobs", "2") == 0  # from cache
    serial = np.asarray(load_feature_set(tmp_path / "serial").X_test)
    for name in ("parallel", "again"):
        np.testing.assert_array_equal(np.asarray(load_feature_set(tmp_path / name).X_test), serial)


# --- 6. inputs that used to end in tracebacks -----------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A small feature set and a linear model trained on it (read-only for the tests)."""
    root = tmp_path_factory.mktemp("built")
    dataset = root / "data"
    for name in ("china", "digit_1", "flower"):
        shutil.copytree(Path(__file__).parent / "data" / "images" / name, dataset / name)
    config = write_config_toml(root / "small.toml")
    assert _build(dataset, root / "fs", config, root / "cache") == 0
    assert main(["train", str(root / "fs"), "--classifier", "linear", "--out", str(root / "model.npz")]) == 0
    return root


def test_non_utf8_file_names_are_built_and_listed(tmp_path, small_dataset, config_file, capsys):
    china = os.fsencode(small_dataset / "china")
    shutil.copyfile(os.path.join(china, b"00.jpg"), os.path.join(china, b"caf\xe9.jpg"))
    open(os.path.join(china, b"bro\xffken.jpg"), "wb").close()
    assert _build(small_dataset, tmp_path / "fs", config_file, tmp_path / "cache") == 0
    out = capsys.readouterr().out
    assert "bro\\udcffken.jpg" in out or "bro\udcffken.jpg" in out, out.splitlines()  # listed as skipped
    fs = load_feature_set(tmp_path / "fs")
    assert any(p.endswith("bro\udcffken.jpg") for p in (s["path"] for s in fs.manifest["skipped"]))


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["build-features", "{data}", "--n-jobs", "0"], "--n-jobs"),
        (["build-features", "{data}", "--config", "{root}"], "is a folder"),
        (["build-features", "{data}", "--out", "{root}/model.npz"], "is a file"),
        (["train", "{root}/fs", "--classifier", "linear", "--seed", "-1"], "--seed"),
        (["train", "{root}/fs", "--classifier", "linear", "--seed", str(2**32)], "--seed"),
        (["train", "{root}/fs", "--classifier", "linear", "--out", "{root}"], "is a folder"),
        (["train", "{root}/model.npz", "--classifier", "linear"], "not a folder"),
        (["experiment", "{root}/fs", "--classifier", "linear", "--seed", "-1"], "--seed"),
        (["experiment", "{root}/fs", "--classifier", "linear", "--seed", str(2**32 - 1), "--repeats", "2"], "--seed"),
        (
            ["experiment", "{root}/fs", "--classifier", "linear", "--repeats", "1", "--out", "{root}/model.npz"],
            "is a file",
        ),
        (["evaluate", "{root}/fs", "{root}/model.npz", "--out", "{root}/model.npz"], "is a file"),
        (["train", "{root}/fs", "--classifier", "pmsvm", "--param", "n_jobs=0"], "n_jobs"),
        (["train", "{root}/fs", "--classifier", "linear", "--param", "class_weight={99: 2}"], "class_weight"),
    ],
)
def test_bad_command_line_values_are_one_line(built, capsys, argv, needle):
    argv = [a.replace("{root}", str(built)).replace("{data}", str(built / "data")) for a in argv]
    assert main(argv) == 2
    _one_line_error(capsys, needle)


@pytest.mark.parametrize(
    "destination",
    [
        "/proc/m.npz",  # a folder nobody (not even root) can create files in
        "{root}/model.npz/m.npz",  # "inside" a file
    ],
)
def test_unwritable_model_destination_names_the_given_path(built, capsys, destination):
    """The error names --out as the user gave it, never the temporary file written beside it."""
    if destination.startswith("/proc") and not os.path.isdir("/proc"):
        pytest.fail("this case needs Linux's /proc")
    destination = destination.replace("{root}", str(built))
    assert main(["train", str(built / "fs"), "--classifier", "linear", "--out", destination, "-q"]) == 2
    err = _one_line_error(capsys, f"--out {destination}:", "cannot write the model file")
    assert ".tmp" not in err, err
    assert not any(name.endswith(".tmp") for name in os.listdir(built)), "a temporary file was left behind"


def test_unwritable_atomic_write_destination_is_named_by_the_error(tmp_path):
    """``atomic_write`` reports the destination (not its temporary name) in the ``OSError``."""
    (tmp_path / "plain").write_text("a file, not a folder")
    with pytest.raises(OSError) as info:
        with atomic.atomic_write(tmp_path / "plain" / "out.json", "w") as handle:
            handle.write("{}")
    assert info.value.filename == str(tmp_path / "plain" / "out.json"), info.value


@pytest.mark.parametrize("action", ["clear", "info"])
def test_cache_dir_that_is_a_file_is_one_line(tmp_path, capsys, action):
    plain = tmp_path / "notes.txt"
    plain.write_text("a file the user keeps")
    assert main(["cache", action, "--cache-dir", str(plain)]) == 2
    _one_line_error(capsys, f"--cache-dir {plain} is a file")
    assert plain.read_text() == "a file the user keeps"


@pytest.mark.parametrize("repeats", ["0", "-3", "1001", str(10**9)])
def test_experiment_repeats_outside_its_range_is_one_line(built, capsys, repeats):
    assert (
        main(
            [
                "experiment",
                str(built / "fs"),
                "--classifier",
                "linear",
                "--repeats",
                repeats,
                "--out",
                str(built / "never-written"),
            ]
        )
        == 2
    )
    _one_line_error(capsys, "--repeats must be from 1 to 1000", f"not {repeats}")
    assert not (built / "never-written").exists()


@pytest.mark.parametrize("workdir", ["{tmp}/plain", "{tmp}/plain/demo"])
def test_demo_workdir_that_is_a_file_is_one_line(tmp_path, capsys, workdir):
    (tmp_path / "plain").write_text("a file")
    workdir = workdir.replace("{tmp}", str(tmp_path))
    assert main(["demo", "--workdir", workdir, "-q"]) == 2
    _one_line_error(capsys, f"--workdir {workdir}", "not a folder")
    assert (tmp_path / "plain").read_text() == "a file"


@pytest.mark.parametrize(
    "toml, needle",
    [
        ("[sift]\ncontrast_threshold = nan\n", "sift.contrast_threshold"),
        ("[codebook]\nlambda = inf\n", "codebook.lambda"),
        ('[codebook]\nkind = "sparse"\nlambda = -inf\n', "codebook.lambda"),
        (f"[dataset]\nseed = {2**32}\n", "dataset.seed"),
        (f"[codebook]\nseed = {2**64}\n", "codebook.seed"),
        ("[pooling]\nlevels = [3000]\n", "pooling.levels"),
        ("[sift]\nstep = {a = 1}\n", "sift.step"),
        ("[sift]\npatch_sizes = {a = 1}\n", "sift.patch_sizes"),
        ("[image]\nmax_side = {a = 1}\n", "image.max_side"),
        ("[dataset]\ntest_per_class = {a = 1}\n", "dataset.test_per_class"),
        ("[pooling]\nmethod = {a = 1}\n", "pooling.method"),
        ("[codebook]\nsize = 99999999999999999999\n", "codebook.size"),
        ("[[dataset]]\nseed = 1\n", "[dataset]"),
        ("dataset = 3\n", "[dataset]"),
    ],
)
def test_bad_config_values_are_one_line(tmp_path, small_dataset, capsys, toml, needle):
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    assert (
        main(["build-features", str(small_dataset), "--config", str(config), "--out", str(tmp_path / "fs"), "-q"]) == 2
    )
    _one_line_error(capsys, needle)
    assert not (tmp_path / "fs").exists()


def test_seed_range_in_the_config_matches_the_command_line(built):
    validate_config({"dataset": {"seed": 2**32 - 1}, "codebook": {"seed": 2**32 - 1}})


# --- 7. decompression bombs, 8. one read, 9. smaller items ----------------------------------


def _gif(image: np.ndarray) -> bytes:
    """A GIF of a grayscale image (LZW with a clear code before every pixel: valid, uncompressed)."""
    import struct

    height, width = image.shape
    codes = [c for pixel in image.ravel() for c in (256, int(pixel))] + [257]
    bits = "".join(format(code, "09b")[::-1] for code in codes)
    bits += "0" * (-len(bits) % 8)
    data = bytes(int(bits[i : i + 8][::-1], 2) for i in range(0, len(bits), 8))
    blocks = b"".join(bytes([len(data[i : i + 255])]) + data[i : i + 255] for i in range(0, len(data), 255))
    palette = bytes(v for g in range(256) for v in (g, g, g))
    return (
        b"GIF89a"
        + struct.pack("<HHBBB", width, height, 0xF7, 0, 0)
        + palette
        + b","
        + struct.pack("<HHHHB", 0, 0, width, height, 0)
        + b"\x08"
        + blocks
        + b"\x00;"
    )


@pytest.mark.parametrize("extension", [".png", ".jpg", ".bmp", ".tif", ".webp", ".pgm", ".gif"])
def test_image_size_reads_the_header_of_every_format(extension):
    import cv2

    from classify_images.features.preprocess import image_size

    image = (np.arange(37 * 53) % 251).astype(np.uint8).reshape(37, 53)
    data = _gif(image) if extension == ".gif" else cv2.imencode(extension, image)[1].tobytes()
    assert image_size(data) == (53, 37)


def _png_announcing(width: int, height: int) -> bytes:
    import struct
    import zlib

    import cv2

    data = bytearray(cv2.imencode(".png", np.zeros((20, 20), np.uint8))[1].tobytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(data[12:29]))  # IHDR's checksum, as a crafted file has
    return bytes(data)


def _jpeg_announcing(width: int, height: int) -> bytes:
    import struct

    data = bytearray((Path(__file__).parent / "data" / "china-300.jpg").read_bytes())
    sof = next(i for i in range(2, len(data) - 1) if data[i] == 0xFF and data[i + 1] in (0xC0, 0xC1, 0xC2))
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


@pytest.mark.parametrize("bomb", [_png_announcing, _jpeg_announcing])
def test_decompression_bomb_is_refused_before_decoding(bomb, monkeypatch):
    import cv2

    from classify_images.features import preprocess

    calls = []
    monkeypatch.setattr(preprocess.cv2, "imdecode", lambda *a: calls.append(1) or cv2.imdecode(*a))
    with pytest.raises(preprocess.ImageReadError, match=r"image too large \(30000 x 30000 pixels"):
        preprocess.decode_grayscale(bomb(30000, 30000), max_pixels=preprocess.DEFAULT_MAX_PIXELS)
    assert calls == []


def test_bomb_in_a_dataset_is_skipped_and_listed(tmp_path, small_dataset, config_file, capsys):
    (small_dataset / "flower" / "bomb.png").write_bytes(_png_announcing(30000, 30000))
    assert _build(small_dataset, tmp_path / "fs", config_file, tmp_path / "cache") == 0
    skipped = {s["path"]: s["reason"] for s in load_feature_set(tmp_path / "fs").manifest["skipped"]}
    assert skipped["flower/bomb.png"].startswith("image too large (30000 x 30000 pixels > image.max_pixels")
    # the cap is configurable
    config = write_config_toml(tmp_path / "cap.toml", {**SMALL_CONFIG, "image": {"max_side": 96, "max_pixels": 1000}})
    assert _build(small_dataset, tmp_path / "fs2", config, tmp_path / "cache") == 2  # every image is above 1000 px
    _one_line_error(capsys, "no readable image")


def test_a_file_changed_during_the_build_is_not_decoded_under_the_old_fingerprint(
    tmp_path, small_dataset, config_file, monkeypatch
):
    from classify_images.pipeline.extraction import build_steps as build_module

    real = build_module.file_fingerprint
    target = str(small_dataset / "china" / "03.jpg")
    # the file "changes" between fingerprinting and decoding: its fingerprint is of other bytes
    monkeypatch.setattr(build_module, "file_fingerprint", lambda p: "0" * 40 if p == target else real(p))
    assert _build(small_dataset, tmp_path / "fs", config_file, tmp_path / "cache") == 0
    skipped = {s["path"]: s["reason"] for s in load_feature_set(tmp_path / "fs").manifest["skipped"]}
    assert skipped["china/03.jpg"].startswith("file changed while the build was reading it")


def test_corrupt_jpeg_is_listed_and_its_warning_does_not_leak(tmp_path, small_dataset, config_file, capfd):
    path = small_dataset / "china" / "05.jpg"
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 40] = bytes(b ^ 0x55 for b in data[middle : middle + 40])
    path.write_bytes(bytes(data))
    assert _build(small_dataset, tmp_path / "fs", config_file, tmp_path / "cache") == 0
    captured = capfd.readouterr()
    assert "Corrupt JPEG" not in captured.err and captured.err == ""  # -q: nothing on stderr
    warnings = load_feature_set(tmp_path / "fs").manifest["decoder_warnings"]
    assert [w["path"] for w in warnings] == ["china/05.jpg"] and "Corrupt JPEG" in warnings[0]["warning"]


def test_gif_is_an_image_for_build_features_as_for_predict(tmp_path, small_dataset, config_file):
    from classify_images.pipeline.settings.dataset import discover_dataset

    image = (np.add.outer(np.arange(64), np.arange(64)) % 256).astype(np.uint8)
    (small_dataset / "flower" / "extra.gif").write_bytes(_gif(image))
    assert "flower/extra.gif" in discover_dataset(small_dataset).paths
    assert _build(small_dataset, tmp_path / "fs", config_file, tmp_path / "cache") == 0
    fs = load_feature_set(tmp_path / "fs")
    listed = fs.train_paths + fs.test_paths + [s["path"] for s in fs.manifest["skipped"]]
    assert "flower/extra.gif" in listed


def test_dangling_and_looping_symlinks_are_listed_as_skipped(tmp_path, small_dataset, config_file):
    (small_dataset / "china" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    loop = small_dataset / "china" / "loop.jpg"
    loop.symlink_to(loop)
    assert _build(small_dataset, tmp_path / "fs", config_file, tmp_path / "cache") == 0
    skipped = {s["path"]: s["reason"] for s in load_feature_set(tmp_path / "fs").manifest["skipped"]}
    assert skipped["china/gone.jpg"].startswith("broken symbolic link")
    assert skipped["china/loop.jpg"] == "symbolic link loop"


# --- 4. reproducible from the command line (done before; checked here) -------------------------


def test_experiment_json_records_each_runs_random_state_and_is_reproducible(built, tmp_path, capsys):
    runs = []
    for name in ("a", "b"):
        argv = [
            "experiment",
            str(built / "fs"),
            "--classifier",
            "mbkl",
            "--repeats",
            "2",
            "--seed",
            "7",
            "--param",
            "n_stumps=200",
            "--out",
            str(tmp_path / name),
        ]
        assert main(argv) == 0, capsys.readouterr().err
        runs.append(json.loads((tmp_path / name / "experiment.json").read_text())["runs"])
    assert [run["random_state"] for run in runs[0]] == [7, 8]
    assert [r["mean_per_class_accuracy"] for r in runs[0]] == [r["mean_per_class_accuracy"] for r in runs[1]]


def test_kill_9_during_encoding_keeps_the_old_set_and_the_resumed_build_is_bit_identical(
    tmp_path, small_dataset, config_file
):
    out, cache = tmp_path / "fs", tmp_path / "cache"
    assert _build(small_dataset, out, config_file, cache) == 0
    before = _snapshot(out)
    other = write_config_toml(tmp_path / "other.toml", {**SMALL_CONFIG, "pooling": {"method": "max", "levels": [1, 2]}})
    argv = [
        "build-features",
        str(small_dataset),
        "--out",
        str(out),
        "--config",
        str(other),
        "--cache-dir",
        str(cache),
        "-q",
    ]
    script = (
        "import os, signal, sys\n"
        "from classify_images.coding import encoders as extractor\n"
        "from classify_images.pipeline.interfaces.cli import main\n"
        "real, calls = extractor.spatial_pyramid_pool, [0]\n"
        "def dying(*a, **k):\n"
        "    calls[0] += 1\n"
        "    if calls[0] > 10:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(*a, **k)\n"
        "extractor.spatial_pyramid_pool = dying\n"
        f"sys.exit(main({argv!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=1800)
    assert done.returncode == -9
    assert _snapshot(out) == before  # the previous feature set is untouched
    assert any(p.name.startswith(".fs.partial-") for p in tmp_path.iterdir())  # what the killed run left
    assert main(argv) == 0
    assert not any(p.name.startswith(".fs.") for p in tmp_path.iterdir())  # removed: its process is gone
    fresh = tmp_path / "fresh"
    assert _build(small_dataset, fresh, other, tmp_path / "fresh-cache") == 0
    for name in ("X_train", "X_test", "y_train", "y_test", "codebook"):
        assert (out / f"{name}.npy").read_bytes() == (fresh / f"{name}.npy").read_bytes()


def test_non_finite_rows_are_refused_before_the_feature_set_is_written(
    tmp_path, small_dataset, config_file, capsys, monkeypatch
):
    from classify_images.pipeline.extraction import build as build_module

    real = build_module.fit_normalizer

    def poisoned(extractor, X):
        real(extractor, X)
        X["test"][2, 0] = np.inf

    monkeypatch.setattr(build_module, "fit_normalizer", poisoned)
    assert _build(small_dataset, tmp_path / "fs", config_file, tmp_path / "cache") == 2
    _one_line_error(capsys, "not finite")
    assert not (tmp_path / "fs").exists()
