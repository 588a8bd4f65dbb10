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
