"""The C allocator's thresholds: per-image buffers reused instead of mapped afresh for each image.

Applied by the commands that encode images one after another
(:data:`~classify_images.pipeline.interfaces.cli.ENCODING_COMMANDS`).  The commands that hold
feature rows and Gram matrices take :func:`return_freed_memory` instead: freed blocks of a few
MiB returned, not kept (15-Scenes ``fisher-flip-rootsift`` ``experiment --repeats 3``: peak
2.54 GB with the raised thresholds, 2.52 GB with glibc's dynamic ones, 2.17 GB with the mmap
threshold held at 4 MiB; 4 % more CPU in page faults).

Every image of a build allocates the same large temporaries — its dense-SIFT descriptors (some
14 000 frames × 384 values for ``recommended``'s opponent channels on a 300 × 225 image, 21 MB
in float32), their RootSIFT and PCA images, the GMM posteriors — and frees them before the next
image.  glibc's
``malloc`` serves a block above its *mmap threshold* (128 KiB at first, raised as such blocks are
freed, to 32 MiB at most) with a fresh ``mmap``, and gives heap memory above its *trim threshold*
back to the system on ``free``: each image then touches its buffers' pages anew, one page fault
per 4 KiB.  On Flowers-17's ``recommended`` build that was 6.1 million faults and 77 s of system
time out of 1 320 CPU-s.

:func:`reuse_freed_memory` raises both thresholds (``mallopt(M_MMAP_THRESHOLD)`` to
:data:`MMAP_THRESHOLD_BYTES`, ``mallopt(M_TRIM_THRESHOLD)`` to :data:`TRIM_THRESHOLD_BYTES`), so
that blocks below 64 MiB come from the heap and up to 256 MiB of freed heap stays with the
process for the next image; larger arrays (feature rows, Gram matrices) are still mapped and
returned on ``free``.  It also sets the equivalent environment variables
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``), which glibc reads when a process starts,
so that worker processes started afterwards (joblib's) do the same.  No number changes: only
where freed memory waits.  A user's own ``MALLOC_*_THRESHOLD_`` settings are left as they are;
elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = [
    "MMAP_THRESHOLD_BYTES",
    "TRIM_THRESHOLD_BYTES",
    "HOLDING_MMAP_THRESHOLD_BYTES",
    "HOLDING_TRIM_THRESHOLD_BYTES",
    "reuse_freed_memory",
    "return_freed_memory",
]

#: Blocks at least this large are mapped afresh (and returned to the system when freed).
MMAP_THRESHOLD_BYTES = 64 * 2**20
#: Freed heap memory kept by the process, at most (above it, the heap's top is given back).
TRIM_THRESHOLD_BYTES = 256 * 2**20

#: The mmap threshold of the commands that hold feature rows (:func:`return_freed_memory`): fixed,
#: not raised by glibc as blocks are freed.
HOLDING_MMAP_THRESHOLD_BYTES = 4 * 2**20
#: Their trim threshold: glibc's default.
HOLDING_TRIM_THRESHOLD_BYTES = 128 * 2**10

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>


def _set_thresholds(mmap_bytes: int, trim_bytes: int) -> bool:
    """Set glibc's mmap and trim thresholds here (``mallopt``) and, by the environment, in the
    processes started from now on; a user's own ``MALLOC_*_THRESHOLD_`` settings win.  Returns
    whether this process's allocator took them (False where it is not glibc's)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False  # the user's choice (glibc read it when this process started)
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(mmap_bytes)
    os.environ["MALLOC_TRIM_THRESHOLD_"] = str(trim_bytes)
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt  # absent from musl
        return bool(mallopt(_M_MMAP_THRESHOLD, mmap_bytes)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_bytes))
    return False


def reuse_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (:data:`MMAP_THRESHOLD_BYTES`,
    :data:`TRIM_THRESHOLD_BYTES`) here and in processes started from now on: for the commands
    that encode images one after another.

    Returns
    -------
    bool
        Whether this process's allocator took the thresholds (False where it is not glibc's).
    """
    return _set_thresholds(MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES)


def return_freed_memory() -> bool:
    """Hold glibc's mmap threshold at :data:`HOLDING_MMAP_THRESHOLD_BYTES` and its trim threshold
    at :data:`HOLDING_TRIM_THRESHOLD_BYTES` (glibc's own starting value), here and in processes
    started from now on: for the commands that hold feature rows and Gram matrices.

    glibc raises its mmap threshold each time a mapped block is freed, up to 32 MiB, so that the
    blocks of a few MiB that such a command allocates and frees by the hundred (blocks of rows
    converted to float32, products' temporaries) end up in the heap, where the freed ones stay
    resident between larger live arrays.  Held at 4 MiB, they are mapped and returned on free.

    Returns
    -------
    bool
        Whether this process's allocator took the thresholds (False where it is not glibc's).
    """
    return _set_thresholds(HOLDING_MMAP_THRESHOLD_BYTES, HOLDING_TRIM_THRESHOLD_BYTES)
