"""Points that held but were fragile: each now ends in one clear line, or not at all when nothing
went wrong (a reader of the output that stops early, ``| head``)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_reader_that_stops_early_is_no_error(tmp_path):
    """``classify-images … | head``: the closed pipe ends the command quietly (status 141, as SIGPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "classify_images.pipeline.interfaces.cli", "cache", "info"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env={**os.environ, "CLASSIFY_IMAGES_CACHE": str(tmp_path / "cache")},
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert done.stderr.decode() == "" and done.returncode == 141, done


def test_run_combine_with_a_single_channel_config_is_refused_before_the_build(tmp_path, capsys, monkeypatch):
    from classify_images.pipeline.interfaces import workflows
    from classify_images.pipeline.interfaces.cli import main

    from .conftest import FIXTURE_IMAGES, write_config_toml

    def never(*args, **kwargs):
        raise AssertionError("the build started")

    monkeypatch.setattr(workflows, "run_pipeline", never)
    config = write_config_toml(tmp_path / "small.toml")
    argv = ["run", str(FIXTURE_IMAGES), "--config", str(config), "--classifier", "linear", "--out", str(tmp_path / "r")]
    assert main([*argv, "--combine", "average", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "single channel" in err and "--combine" in err, err
    assert not (tmp_path / "r").exists()


def test_a_rebuild_found_up_to_date_removes_what_a_killed_rename_left(tmp_path, capsys):
    """A build killed between the rename that moves the old set aside and its removal leaves
    ``.<out>.partial-<pid>``; the next build, finding the set up to date, removes it too."""
    import shutil

    from classify_images.pipeline.interfaces.cli import main

    from .conftest import FIXTURE_IMAGES, build_fixture_feature_set

    build_fixture_feature_set(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process id no process has any more
    partial = tmp_path / f".fs.partial-{gone.pid}"
    shutil.copytree(tmp_path / "fs", partial)
    argv = ["build-features", str(FIXTURE_IMAGES), "--config", str(tmp_path / "small.toml"), "--out"]
    assert main([*argv, str(tmp_path / "fs"), "--cache-dir", str(tmp_path / "cache"), "-q"]) == 0
    assert "already up to date" in capsys.readouterr().out
    assert not partial.exists() and (tmp_path / "fs" / "manifest.json").is_file()


def test_joblibs_persisting_input_arguments_warning_is_not_shown():
    """A busy machine makes joblib warn "Persisting input arguments took …" on cache writes (the
    demo printed it); a stage cache silences that one warning, and only it."""
    import warnings

    from classify_images.pipeline.extraction.stages import StageCache

    with warnings.catch_warnings(record=True) as caught:
        StageCache(None)
        warnings.warn_explicit(
            "Persisting input arguments took 0.71s to run.If this happens often ...",
            UserWarning,
            "memory.py",
            1,
            module="joblib.memory",
        )
        warnings.warn_explicit("another joblib warning", UserWarning, "memory.py", 2, module="joblib.memory")
    assert [str(w.message) for w in caught] == ["another joblib warning"]


def test_pq_centroids_whose_rows_overflow_float32_are_refused():
    """Finite PQ centroids of ±3e38 (checksum updated) trained and evaluated at chance with only a
    NumPy warning: a decoded row's squared norm overflowed float32.  Refused, naming the bound."""
    import numpy as np
    import pytest

    from classify_images.coding.product_quantizer import ProductQuantizer, RowCodecError, max_centroid_magnitude

    codebooks = np.random.default_rng(0).standard_normal((4, 16, 8)).astype(np.float32)
    assert ProductQuantizer.from_codebooks(codebooks, 32).n_features_ == 32
    for value in (3e38, -3e38, 2 * max_centroid_magnitude(32)):
        tampered = codebooks.copy()
        tampered[1, 3, 2] = value
        with pytest.raises(RowCodecError, match="overflows float32"):
            ProductQuantizer.from_codebooks(tampered, 32)


def test_a_webp_announcing_a_16383_square_canvas_is_too_large_not_corrupt():
    import cv2
    import numpy as np
    import pytest

    from classify_images.features.preprocess import DEFAULT_MAX_PIXELS, ImageReadError, decode_grayscale

    side = (16383 - 1).to_bytes(3, "little")
    chunk = b"VP8X" + (10).to_bytes(4, "little") + b"\x00\x00\x00\x00" + side + side
    canvas = b"RIFF" + (4 + len(chunk)).to_bytes(4, "little") + b"WEBP" + chunk
    with pytest.raises(ImageReadError, match=r"image too large \(16383 x 16383 pixels"):
        decode_grayscale(canvas, max_pixels=DEFAULT_MAX_PIXELS)
    small = b"RIFF" + (4 + len(chunk)).to_bytes(4, "little") + b"WEBP" + b"VP8X" + (10).to_bytes(4, "little")
    small += b"\x00" * 4 + (99).to_bytes(3, "little") * 2  # a 100² canvas with no image: corrupt, as before
    with pytest.raises(ImageReadError, match="truncated or corrupt"):
        decode_grayscale(small, max_pixels=DEFAULT_MAX_PIXELS)
    ok, encoded = cv2.imencode(".webp", np.full((40, 60), 128, np.uint8))
    assert ok and decode_grayscale(encoded.tobytes(), max_side=None, max_pixels=DEFAULT_MAX_PIXELS).shape == (40, 60)


def test_the_kernel_compiling_helper_ends_with_its_parent(tmp_path):
    """The process that compiles kernels aside is tied to its parent: a parent killed (``kill -9``)
    takes it along, instead of leaving it compiling for minutes."""
    import inspect
    import signal
    import time

    from classify_images.pipeline.execution import warm_up

    assert "tie_to_parent(" in inspect.getsource(warm_up.encoder_compiled_aside)
    child = (
        "import os, time; from classify_images.pipeline.execution.warm_up import tie_to_parent; "
        "tie_to_parent(os.getppid(), poll_seconds=0.2); print(os.getpid(), flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
    )
    helper = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(600):  # (a liveness wait, not a timing check: the helper ends, soon or late)
        try:
            os.kill(helper, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{helper}/stat").read().split()[2] == "Z":  # ended, not yet reaped by its new parent
            break
        time.sleep(0.1)
    else:
        os.kill(helper, signal.SIGKILL)
        raise AssertionError("the helper outlived its parent")
