"""Descriptors cached aside during the codebook (classify_images/pipeline/extraction/descriptors_aside.py): the same entries
the encode stage would write, the same feature set, a prompt stop.

No test here bounds how long anything takes: the aside process runs at ``nice 19`` and a machine busy
with other work may give it little time.  Waits are bounded by :data:`HANG_GUARD` only, so that a
broken stop fails the test instead of hanging the run; what the tests assert is behaviour (the
process exits by itself with status 0 when told to stop, before the end of its list; entries appear)."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from classify_images.pipeline.extraction import descriptors_aside, fitting
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.extraction.descriptors_aside import cache_descriptors, descriptors_cached_aside
from classify_images.pipeline.extraction.stages import StageCache, compute_descriptors
from classify_images.pipeline.settings.config import load_config
from classify_images.pipeline.settings.dataset import file_fingerprint
from classify_images.pipeline.storage.feature_store import load_feature_set

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, assert_same_features

IMAGES = sorted(str(p) for p in (FIXTURE_IMAGES / "china").glob("*.jpg"))[:4]
CONFIG = load_config(None, SMALL_CONFIG)
SIFT, MAX_SIDE = CONFIG.sift_params(), CONFIG.image.max_side


#: A bound on waits against a hang only, never a claim about speed (a loaded machine stays far below it).
HANG_GUARD = 600.0


@pytest.fixture
def no_reaper_kill(monkeypatch):
    """The reaper waits as long as the hang guard: a stopped process then exits by itself, however
    little processor time a busy machine leaves it (its status says it finished its image and left)."""
    monkeypatch.setattr(descriptors_aside, "_WAIT_SECONDS", HANG_GUARD)


def _wait_until(condition) -> None:
    """Poll ``condition`` until it holds (or the hang guard ends: the caller's assertion then fails)."""
    deadline = time.monotonic() + HANG_GUARD
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def _distinct_images(folder, count: int) -> list[tuple[str, str]]:
    """``count`` distinct image files (the fixture image with a different trailing comment each: a
    different fingerprint, so a different cache entry to compute)."""
    folder.mkdir()
    data = open(IMAGES[0], "rb").read()
    paths = []
    for i in range(count):
        path = folder / f"{i:05d}.jpg"
        path.write_bytes(data + f"{i}".encode())
        paths.append(str(path))
    return _pairs(paths)


def _pairs(paths=IMAGES):
    return [(path, file_fingerprint(path)) for path in paths]


def _cached(cache: StageCache, path: str, fingerprint: str) -> bool:
    return cache._descriptors.func.check_call_in_cache(path, fingerprint, MAX_SIDE, SIFT, **cache._descriptors.keywords)


def test_the_entries_are_the_encode_stages_and_hold_the_computed_descriptors(tmp_path):
    cache = StageCache(tmp_path / "cache")
    assert cache.caches_descriptors
    assert cache_descriptors(str(tmp_path / "cache"), _pairs(), MAX_SIDE, SIFT, threading.Event()) == len(IMAGES)
    for path, fingerprint in _pairs():
        assert _cached(cache, path, fingerprint)  # the key the sample and encode stages look up
        read, computed = (
            cache.image_descriptors(path, fingerprint, MAX_SIDE, SIFT),
            compute_descriptors(path, MAX_SIDE, SIFT, fingerprint),
        )
        assert read.keys() == computed.keys()
        for key in read:
            assert read[key].dtype == computed[key].dtype and read[key].tobytes() == computed[key].tobytes(), key


def test_a_set_stop_computes_nothing_and_an_unreadable_image_is_left_to_the_encode_stage(tmp_path):
    stop = threading.Event()
    stop.set()
    assert cache_descriptors(str(tmp_path / "cache"), _pairs(), MAX_SIDE, SIFT, stop) == 0
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    pairs = [(str(broken), file_fingerprint(broken))] + _pairs(IMAGES[:1])
    assert cache_descriptors(str(tmp_path / "cache"), pairs, MAX_SIDE, SIFT, threading.Event()) == 1


def test_the_process_caches_while_the_block_runs_then_stops(tmp_path):
    cache = StageCache(tmp_path / "cache")
    pairs = _pairs()
    with descriptors_cached_aside(tmp_path / "cache", pairs, MAX_SIDE, SIFT):
        _wait_until(lambda: all(_cached(cache, *pair) for pair in pairs))
    assert all(_cached(cache, *pair) for pair in pairs)
    assert not [p for p in (tmp_path / "cache").rglob("*") if ".npz." in p.name]  # no temporaries left


def test_the_end_of_the_block_stops_a_long_list_promptly(tmp_path, monkeypatch, no_reaper_kill):
    """Told to stop, the process finishes the image it is on and exits (status 0, not killed), far
    before the end of its list: the entries it wrote are a few of the 2000 it was given."""
    started = []
    real_popen = descriptors_aside.subprocess.Popen
    monkeypatch.setattr(
        descriptors_aside.subprocess, "Popen", lambda *a, **k: started.append(real_popen(*a, **k)) or started[-1]
    )
    pairs = _distinct_images(tmp_path / "images", 2000)
    cache = StageCache(tmp_path / "cache")
    with descriptors_cached_aside(tmp_path / "cache", pairs, MAX_SIDE, SIFT):
        _wait_until(lambda: _cached(cache, *pairs[0]))  # it is at work on the list
    assert started[0].wait(timeout=HANG_GUARD) == 0  # it finished the image it was on and exited by itself
    done = sum(_cached(cache, *pair) for pair in pairs)
    assert 1 <= done < len(pairs), done  # it stopped on the way, not at the end of the list


def test_an_error_in_the_block_propagates_and_the_process_ends(tmp_path, monkeypatch, no_reaper_kill):
    started = []
    real_popen = descriptors_aside.subprocess.Popen
    monkeypatch.setattr(
        descriptors_aside.subprocess, "Popen", lambda *a, **k: started.append(real_popen(*a, **k)) or started[-1]
    )
    with pytest.raises(KeyError):
        with descriptors_cached_aside(tmp_path / "cache", _pairs() * 2000, MAX_SIDE, SIFT):
            raise KeyError("boom")
    assert started[0].wait(timeout=HANG_GUARD) == 0


def test_no_process_without_images_descriptor_cache_or_json_exact_sift(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fitting, "descriptors_cached_aside", lambda *a, **k: calls.append(a))
    nothing = StageCache(None)
    no_descriptors = StageCache(tmp_path / "c1", cache_descriptors=False)
    kept = StageCache(tmp_path / "c2")
    paths, fingerprints = IMAGES, [f for _, f in _pairs()]
    for cache, images in ((nothing, np.arange(2)), (no_descriptors, np.arange(2)), (kept, None), (kept, np.arange(0))):
        fitting._descriptors_aside(paths, fingerprints, images, CONFIG, cache)
    assert calls == []
    tupled = load_config(None, SMALL_CONFIG)
    monkeypatch.setattr(type(tupled), "sift_params", lambda self: {**SIFT, "patch_sizes": tuple(SIFT["patch_sizes"])})
    fitting._descriptors_aside(paths, fingerprints, np.arange(2), tupled, kept)  # a tuple comes back a list: other key
    assert calls == []
    monkeypatch.undo()


def test_a_build_with_descriptors_cached_aside_gives_the_same_feature_set(tmp_path, small_dataset, monkeypatch):
    """The codebook waits until the process has cached every test image's descriptors: the encode
    stage reads them all, and the rows are those of a build that computed them itself."""
    used = []
    real = fitting.descriptors_cached_aside

    @contextlib.contextmanager
    def complete(cache_dir, images, max_side, sift):
        cache = StageCache(cache_dir)
        with real(cache_dir, images, max_side, sift):
            _wait_until(lambda: all(_cached(cache, *pair) for pair in images))
            used.append(sum(_cached(cache, *pair) for pair in images))
            yield

    monkeypatch.setattr(fitting, "descriptors_cached_aside", complete)
    aside = build_feature_set(small_dataset, tmp_path / "aside", CONFIG, n_jobs=2, cache_dir=tmp_path / "c-aside")
    assert used == [aside.n_test]  # every test image's descriptors came from the aside process
    reference = build_feature_set(small_dataset, tmp_path / "one", CONFIG, n_jobs=1, cache_dir=tmp_path / "c-one")
    assert_same_features(load_feature_set(aside.path), load_feature_set(reference.path))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_build_takes_the_process_with_it(tmp_path):
    """``kill -9`` of the process holding the block: the aside process is gone soon after."""
    script = f"""
import sys, time
from classify_images.pipeline.extraction import descriptors_aside
real = descriptors_aside.subprocess.Popen
def popen(*a, **k):
    process = real(*a, **k)
    print(process.pid, flush=True)
    return process
descriptors_aside.subprocess.Popen = popen
pairs = {_pairs()!r} * 5000
with descriptors_aside.descriptors_cached_aside({str(tmp_path / "cache")!r}, pairs, {MAX_SIDE}, {SIFT!r}):
    time.sleep(600)
"""
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        aside = int(holder.stdout.readline())
        time.sleep(1.0)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        _wait_until(lambda: not (os.path.exists(f"/proc/{aside}") and _alive(aside)))
        assert not _alive(aside)
    finally:
        if holder.poll() is None:
            holder.kill()


def _alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
