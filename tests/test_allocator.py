"""glibc's thresholds raised for the commands: freed per-image buffers reused, not mapped afresh."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import resource, sys
import numpy as np
from classify_images.pipeline.execution.allocator import reuse_freed_memory
if sys.argv[1] == "raised":
    assert reuse_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    buffer = np.ones((10000, 1024), np.float32)  # 41 MB: above the most glibc's own threshold rises to
    del buffer
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_raised_thresholds_reuse_freed_buffers_instead_of_faulting_them_in_again():
    """40 allocations of 41 MB: 10 000 page faults each by default (glibc maps every block above
    32 MiB afresh), about one allocation's worth once the thresholds are raised."""
    default, raised = _faults("default"), _faults("raised")
    assert raised < default / 4, (raised, default)


def test_a_users_own_malloc_settings_are_left_alone(monkeypatch):
    from classify_images.pipeline.execution.allocator import reuse_freed_memory

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert reuse_freed_memory() is False
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ


COMMAND_SCRIPT = """
import os, sys
from classify_images.pipeline.interfaces.cli import main
main(sys.argv[1:])
print("thresholds:", os.environ.get("MALLOC_MMAP_THRESHOLD_"))
"""


@pytest.mark.parametrize(
    "argv, raised",
    [
        (["build-features", "no-such-folder"], True),  # encodes image after image
        (["predict", "no-such-model", "no-such-image.jpg"], True),
        (["experiment", "no-such-feature-set"], False),  # holds rows and Gram matrices: held low
        (["train", "no-such-feature-set"], False),
        (["evaluate", "no-such-feature-set", "no-such-model"], False),
    ],
)
def test_the_commands_that_encode_images_raise_the_thresholds_the_others_hold_them_low(tmp_path, argv, raised):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", COMMAND_SCRIPT, *argv], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert "Traceback" not in out.stderr
    assert out.stdout.strip().endswith(str(64 * 2**20 if raised else 4 * 2**20)), out.stdout
