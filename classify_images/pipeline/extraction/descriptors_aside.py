"""Dense SIFT of the images still to encode, cached on the core the dictionary leaves idle.

While the build learns the codebook in the parent (our online dictionary learner, or
``spams.trainDL`` on one thread: its two threads would learn another dictionary, so the features
would depend on ``--n-jobs``), a core of a two-core machine is often idle: the encoder's kernels
compile aside for part of it
(:func:`~classify_images.pipeline.execution.warm_up.encoder_compiled_aside`), then nothing.  The encode
stage needs every image's descriptors; the sample stage has cached those of the training
images already (``sift.cache_descriptors``).  :func:`descriptors_cached_aside` computes the
others' meanwhile, in a separate process at the lowest priority (``nice 19``: it takes only
what the parent and the compiling process leave), through the same
:class:`~classify_images.pipeline.extraction.stages.StageCache` stage as the encode stage — the same
function, arguments and cache entries — so the encode stage reads them instead of decoding the
image and computing them.  Reading a cached entry costs about a third of computing and writing
it (docs/benchmarks/cold-build.md, "Descriptors computed aside during the codebook").

Nothing depends on how far it got: an image it did not reach is computed by the encode stage as
before, and an entry is the same bytes whoever writes it (the stage is a pure function of the
image; entries are written under a temporary name and renamed, so a stopped process leaves no
torn entry).  At the end of the block the process is told to stop (its standard input closes),
finishes the image it is on and exits; the block does not wait for it (a thread reaps it, and
kills it after :data:`_WAIT_SECONDS`).  It also stops when the build's process dies (its standard
input closes then too; and when that process is killed, it is killed with it:
:func:`~classify_images.pipeline.extraction.runner.die_with_parent`).
An image it cannot read is left to the encode stage, which reports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence

__all__ = ["descriptors_cached_aside"]

#: How long the stopped process may take to finish the image it is on (a few milliseconds of work,
#: but at the lowest priority) before it is killed.
_WAIT_SECONDS = 30.0
#: The process's niceness: it runs on what the build leaves idle, never in the build's way.
_NICENESS = 19


@contextlib.contextmanager
def descriptors_cached_aside(
    cache_dir: str | os.PathLike, images: Sequence[tuple[str, str]], max_side: int, sift: dict
) -> Iterator[None]:
    """Cache the descriptors of ``images`` (``(path, fingerprint)`` pairs, in this order) in the
    stage cache at ``cache_dir`` from a separate low-priority process while the block runs.

    Parameters
    ----------
    cache_dir : path-like
        The build's stage-cache folder (it keeps descriptors: ``sift.cache_descriptors``).
    images : sequence of (str, str)
        Paths and content fingerprints, in the order the encode stage reaches them.
    max_side : int
        ``image.max_side``.
    sift : dict
        The ``[sift]`` table as the stages receive it (:meth:`PipelineConfig.sift_params`).

    If the process cannot start (or the parameters do not fit in JSON), the block runs without it.
    """
    process = None
    if images:
        try:
            payload = json.dumps([os.fspath(cache_dir), [list(pair) for pair in images], max_side, sift]).encode()
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from classify_images.pipeline.extraction.descriptors_aside import _main; _main()",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            process.stdin.write(payload + b"\n")
            process.stdin.flush()
        except (OSError, TypeError, ValueError):  # no process, or it exited already: the encode stage computes them
            pass
    try:
        yield
    finally:
        if process is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()  # "stop": it finishes the image it is on, then exits
            # Not waited for: at its low priority, finishing that image may take a while on a busy
            # machine, and nothing needs it (an entry it has not written yet is computed by the encode
            # stage; both write the same bytes, each renamed into place).  A thread reaps it.
            threading.Thread(target=_reap, args=(process,), name="reap-descriptors-aside", daemon=True).start()


def _reap(process: subprocess.Popen) -> None:
    """Wait for the stopped process; kill it if it has not exited after :data:`_WAIT_SECONDS`."""
    try:
        process.wait(timeout=_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def cache_descriptors(
    cache_dir: str, images: Sequence[Sequence[str]], max_side: int, sift: dict, stop: threading.Event
) -> int:
    """Compute and cache the descriptors of ``images`` in order until ``stop`` is set; the number
    of images done (already cached ones count, they are only read)."""
    from .stages import StageCache

    cache = StageCache(cache_dir, cache_descriptors=True)
    done = 0
    for path, fingerprint in images:
        if stop.is_set():
            break
        with contextlib.suppress(Exception):  # an unreadable image: the encode stage reports it
            cache.image_descriptors(path, fingerprint, max_side, sift)
            done += 1
    return done


def _main() -> None:
    """The aside process: parameters on the first line of standard input; its end means "stop"."""
    from .runner import die_with_parent

    die_with_parent()  # a killed build leaves no process behind (an entry it was writing is a temporary, swept later)
    if hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(_NICENESS)
    cache_dir, images, max_side, sift = json.loads(sys.stdin.readline())
    stop = threading.Event()

    def wait_for_stop() -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdin.buffer.read()
        stop.set()

    threading.Thread(target=wait_for_stop, name="stop-on-eof", daemon=True).start()
    cache_descriptors(cache_dir, images, max_side, sift, stop)
