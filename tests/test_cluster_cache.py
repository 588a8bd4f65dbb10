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

from classify_images.pipeline.stages import StageCache, check_image, descriptor_sample

from .conftest import FIXTURE_IMAGES, REPO

_SIFT = {"patch_sizes": [16], "step": 8, "smooth": True, "contrast_threshold": 1.0}


def _writer_code(cache: str, start_file: str) -> str:
    return textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        from classify_images.pipeline.dataset import file_fingerprint
        from classify_images.pipeline.stages import StageCache
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
    from classify_images.pipeline.dataset import file_fingerprint

    cache, start = tmp_path / "cache", tmp_path / "go"
    writers = [subprocess.Popen([sys.executable, "-c", _writer_code(str(cache), str(start))], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(1.0)  # let both import and wait at the start line
    start.touch()
    outputs = [writer.communicate(timeout=300) for writer in writers]
    for writer, (out, err) in zip(writers, outputs):
        assert writer.returncode == 0 and out.startswith("done 48"), err[-2000:]
        assert "Warning" not in err, err[-2000:]  # joblib warns when it cannot write an entry

    files = [path for path in cache.rglob("*") if path.is_file()]
    # only complete entries: no temporary name of joblib's or of our backend's writes is left
    assert {path.name for path in files} <= {"output.npz", "metadata.json", "func_code.py", ".gitignore"}
    outputs_written = [path for path in files if path.name == "output.npz"]
    assert len(outputs_written) == 2 * 48 + 48  # check, sample, and the descriptors the sample read

    reader = StageCache(cache, cache_descriptors=True)
    for path in sorted(FIXTURE_IMAGES.rglob("*.jpg")):
        path, fingerprint = str(path), file_fingerprint(path)
        for memoised, args in ((reader.check_image, (path, fingerprint, 96, 16)),
                               (reader._sample, (path, fingerprint, 96, _SIFT, 20, 0))):
            keywords = {"implementation": memoised.keywords["implementation"]}
            if memoised is reader._sample:
                keywords["descriptors_fn"] = reader._descriptors
            assert memoised.func.check_call_in_cache(*args, **keywords), f"{path}: entry missing or unreadable"
        assert reader.check_image(path, fingerprint, 96, 16) == check_image(path, fingerprint, 96, 16)
        np.testing.assert_array_equal(reader.descriptor_sample(path, fingerprint, 96, _SIFT, 20, 0),
                                      descriptor_sample(path, fingerprint, 96, _SIFT, 20, 0))
