"""The stage cache shared by concurrent writers (cluster workers on one shared folder).

Two processes compute the same entries into the same cache folder at the same time: both
finish, every entry reads back complete and equal to a direct computation, and no
temporary file is left behind.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np

from classify_images.pipeline.extraction.stages import StageCache, check_image, descriptor_sample

from .conftest import FIXTURE_IMAGES, REPO

_SIFT = {"patch_sizes": [16], "step": 8, "smooth": True, "contrast_threshold": 1.0}


def _writer_code(cache: str, start_file: str) -> str:
    return textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        from classify_images.pipeline.settings.dataset import file_fingerprint
        from classify_images.pipeline.extraction.stages import StageCache
        paths = sorted(str(p) for p in Path({str(FIXTURE_IMAGES)!r}).rglob("*.jpg"))
        fingerprints = [file_fingerprint(p) for p in paths]
        cache = StageCache({cache!r}, cache_descriptors=True)
        while not os.path.exists({start_file!r}):  # both writers start together
            time.sleep(0.001)
        for path, fingerprint in zip(paths, fingerprints):
            cache.check_image(path, fingerprint, 96, 16)
            cache.descriptor_sample(path, fingerprint, 96, {_SIFT!r}, 20, 0)
        print("done", len(paths))
    """)


def test_two_processes_writing_the_same_cache_keys(tmp_path):
    from classify_images.pipeline.settings.dataset import file_fingerprint

    cache, start = tmp_path / "cache", tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _writer_code(str(cache), str(start))],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(1.0)  # let both import and wait at the start line
    start.touch()
    outputs = [writer.communicate(timeout=1800) for writer in writers]
    for writer, (out, err) in zip(writers, outputs):
        assert writer.returncode == 0 and out.startswith("done 48"), err[-2000:]
        assert "Warning" not in err, err[-2000:]  # joblib warns when it cannot write an entry

    files = [path for path in cache.rglob("*") if path.is_file()]
    # only complete entries: no temporary name of joblib's or of our backend's writes is left
    # (and the cache's own record that it created the folder, which `cache clear` reads)
    expected = {"output.npz", "metadata.json", "func_code.py", ".gitignore", ".classify-images-cache.json"}
    assert {path.name for path in files} <= expected
    outputs_written = [path for path in files if path.name == "output.npz"]
    assert len(outputs_written) == 2 * 48 + 48  # check, sample, and the descriptors the sample read

    reader = StageCache(cache, cache_descriptors=True)
    for path in sorted(FIXTURE_IMAGES.rglob("*.jpg")):
        path, fingerprint = str(path), file_fingerprint(path)
        for memoised, args in (
            (reader.check_image, (path, fingerprint, 96, 16)),
            (reader._sample, (path, fingerprint, 96, _SIFT, 20, 0)),
        ):
            keywords = {"implementation": memoised.keywords["implementation"]}
            if memoised is reader._sample:
                keywords["descriptors_fn"] = reader._descriptors
            assert memoised.func.check_call_in_cache(*args, **keywords), f"{path}: entry missing or unreadable"
        assert reader.check_image(path, fingerprint, 96, 16) == check_image(path, fingerprint, 96, 16)
        np.testing.assert_array_equal(
            reader.descriptor_sample(path, fingerprint, 96, _SIFT, 20, 0),
            descriptor_sample(path, fingerprint, 96, _SIFT, 20, 0),
        )


# --- temporaries of writers killed in the middle of a write ---------------------------------


def _killed_writer_code(cache: str, image: str) -> str:
    """A process that dies (``os._exit``) halfway through writing the cache entry of one check."""
    return textwrap.dedent(f"""
        import os
        import numpy
        from classify_images.pipeline.settings.dataset import file_fingerprint
        from classify_images.pipeline.extraction.stages import StageCache

        def savez_then_die(handle, **arrays):
            handle.write(b"PK half an npz")
            handle.flush()
            os._exit(3)

        numpy.savez = savez_then_die
        StageCache({cache!r}).check_image({image!r}, file_fingerprint({image!r}), 96, 16)
    """)


def _kill_a_writer(cache, image) -> None:
    writer = subprocess.run(
        [sys.executable, "-c", _killed_writer_code(str(cache), str(image))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,  # a hang guard only (a loaded machine is far slower)
    )
    assert writer.returncode == 3, writer.stderr[-2000:]


def _temporaries(cache):
    return sorted(path for path in cache.rglob("output.npz.*") if path.is_file())


def test_a_writer_killed_mid_write_leaves_a_temporary_readers_ignore_and_the_cache_removes(tmp_path, capsys):
    from classify_images.pipeline.interfaces.cli import main
    from classify_images.pipeline.settings.dataset import file_fingerprint
    from classify_images.pipeline.storage.cache_folder import cache_usage

    cache = tmp_path / "cache"
    first, second = sorted(FIXTURE_IMAGES.rglob("*.jpg"))[:2]
    _kill_a_writer(cache, first)
    _kill_a_writer(cache, second)
    left = _temporaries(cache)
    assert len(left) == 2 and not list(cache.rglob("output.npz"))

    usage = cache_usage(cache)
    assert (usage.n_stale, usage.stale_bytes) == (2, 2 * len(b"PK half an npz"))
    assert main(["cache", "info", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "2 temporary files (28 bytes) left by writers killed" in out and "cache prune" in out

    # A reader ignores the temporary (a miss: recomputed), and the writer of the entry sweeps its folder.
    reader = StageCache(cache)
    assert reader.check_image(str(first), file_fingerprint(str(first)), 96, 16) == check_image(
        str(first), file_fingerprint(str(first)), 96, 16
    )
    assert not left[0].exists() and (left[0].parent / "output.npz").is_file()
    assert _temporaries(cache) == [left[1]]

    # ``cache prune`` removes the other one, and only it.
    entries = sorted(path for path in cache.rglob("*") if path.is_file() and path != left[1])
    assert main(["cache", "prune", "--cache-dir", str(cache)]) == 0
    assert "deleted 1 temporary files (14 bytes)" in capsys.readouterr().out
    assert _temporaries(cache) == []
    assert sorted(path for path in cache.rglob("*") if path.is_file()) == entries
    assert cache_usage(cache).n_stale == 0
    assert main(["cache", "info", "--cache-dir", str(cache)]) == 0
    assert "temporary" not in capsys.readouterr().out


def test_which_temporaries_are_stale(tmp_path):
    """A live writer's temporary is kept, on this host by its process id, on another host by its age."""
    import os

    from classify_images.pipeline.storage import cache_store
    from classify_images.pipeline.storage.cache_folder import prune_cache

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here, there = cache_store._HOST, "0" * 12 if cache_store._HOST != "0" * 12 else "1" * 12
    hour = cache_store.STALE_AFTER_SECONDS
    folder = tmp_path / "cache" / "joblib" / "classify_images" / "f" / "key"
    folder.mkdir(parents=True)
    u = "0123456789abcdef" * 2
    cases = {  # name: (seconds since the last write, stale?)
        f"output.npz.{u}-h{here}-{os.getpid()}-1": (2 * hour, False),  # this live process: whatever its age
        f"output.npz.{u}-h{here}-{dead.pid}-1": (0, True),  # writer gone from this host
        f"output.npz.{u}-h{there}-{dead.pid}-1": (hour - 60, False),  # another host: a pid says nothing there
        f"metadata.json.{u}-h{there}-{os.getpid()}-1": (hour + 60, True),  # another host, an hour silent
        f"func_code.py.{u}-{dead.pid}-1": (60, False),  # joblib's form, no host: by age only
        f"output.npz.{u}-{os.getpid()}-7": (hour + 60, True),
        "output.npz": (2 * hour, False),  # entries and other files are never temporaries
        "notes.txt": (2 * hour, False),
        f"output.npz.{u}": (2 * hour, False),
    }
    now = time.time()
    for name, (age, _) in cases.items():
        (folder / name).write_bytes(b"x" * 10)
        os.utime(folder / name, (now - age, now - age))
    assert {name for name in cases if cache_store.is_stale_temporary(folder / name)} == {
        name for name, (_, stale) in cases.items() if stale
    }
    removed = prune_cache(tmp_path / "cache")
    assert (removed.n_files, removed.n_bytes) == (3, 30)
    assert {path.name for path in folder.iterdir()} == {name for name, (_, stale) in cases.items() if not stale}


def test_a_writer_whose_temporary_is_pruned_meanwhile_skips_the_entry(tmp_path, monkeypatch):
    """Removing a live writer's temporary (a prune misjudging it) costs the entry, not the result."""
    import os

    from classify_images.pipeline.settings.dataset import file_fingerprint
    from classify_images.pipeline.storage import cache_store

    image = str(sorted(FIXTURE_IMAGES.rglob("*.jpg"))[0])
    fingerprint = file_fingerprint(image)

    def pruned_before_the_rename(src, dst):
        if os.path.basename(dst) == "output.npz":
            os.unlink(src)
        os.replace(src, dst)

    monkeypatch.setattr(cache_store.NpzStoreBackend, "_move_item", staticmethod(pruned_before_the_rename))
    cache = StageCache(tmp_path / "cache")
    expected = check_image(image, fingerprint, 96, 16)
    assert cache.check_image(image, fingerprint, 96, 16) == expected
    assert not list((tmp_path / "cache").rglob("output.npz")) and not _temporaries(tmp_path / "cache")
    monkeypatch.undo()
    assert StageCache(tmp_path / "cache").check_image(image, fingerprint, 96, 16) == expected
    assert len(list((tmp_path / "cache").rglob("output.npz"))) == 1
