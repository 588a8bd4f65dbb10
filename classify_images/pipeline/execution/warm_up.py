"""Compile a stage's numba kernels once, in this process, before its workers start.

The kernels are ``@njit(cache=True)``: compiled on their first call in a process and written
to numba's on-disk cache, from which every later process loads them.  On the first build after
an installation (or on a processor numba has not compiled for yet) the cache is empty, and each
joblib worker that starts a stage compiles every kernel of the stage itself, at the same time as
the others: with 2 workers, the 15-Scenes ScSPM build compiled the dense-SIFT and sparse-coding
kernels twice, about 20 CPU seconds per worker (docs/benchmarks/cold-build.md).

:func:`warm_descriptors` and :func:`warm_encoding` run the stage's own code on a small synthetic
image (a seeded, smoothed noise image: textured, so that every branch of the coder that a real
image reaches is reached) in the parent before the stage's tasks are handed out: the parent
compiles each kernel once and writes it to the cache, and the workers load it from there.  With
a warm cache they only load the kernels (a fraction of a second).  Nothing is cached in the stage
cache and nothing is returned: the results are not used.

:func:`encoder_compiled_aside` compiles the encoder's kernels in a separate process while the
parent samples and learns the codebook.  When the codebook is a sparse dictionary learnt by our
online learner (``codebook.dictionary_solver = "online"``), which runs in the parent and codes
with the same coder, that process compiles the learner's kernels first and says so; the parent
waits for that (:meth:`AsideCompilation.wait_for_learner`) before learning, so that each kernel
is compiled once, not once in each process (about 12 s of CPU on a cold numba cache).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...coding.codebook import learn_sparse_dictionary
from ...coding.encoders import Encoder, Pyramid, SparseCoding, make_encoder
from ...features.descriptors import make_descriptor
from ...features.dsift import dequantize_descriptors, quantize_descriptors
from ..settings.config import PipelineConfig
from ..settings.plan import FeaturePlan, feature_plan_of

__all__ = ["warm_descriptors", "warm_encoding", "encoder_compiled_aside", "AsideCompilation"]

#: How long the end of :func:`encoder_compiled_aside`'s block waits for the compiling process at
#: most (compiling the sparse coder takes about 20 CPU seconds; a killed process leaves no torn
#: entry: numba writes each under a temporary name and renames it); also the longest wait of
#: :meth:`AsideCompilation.wait_for_learner`.
_WAIT_SECONDS = 600.0

#: The line the compiling process prints once the online dictionary learner's kernels are in the cache.
_LEARNER_READY = "learner compiled"


def synthetic_image(largest_patch: int, seed: int = 0) -> np.ndarray:
    """A textured float32 image in [0, 1] of side ``2 · largest_patch + 8`` px: a few patches per side."""
    side = 2 * largest_patch + 8
    noise = np.random.default_rng(seed).random((side + 2, side + 2), dtype=np.float32)
    smooth = (noise[:-2, :-2] + noise[1:-1, 1:-1] + noise[2:, 2:] + noise[1:-1, :-2] + noise[:-2, 1:-1]) / 5
    return np.ascontiguousarray(smooth, dtype=np.float32)


def synthetic_input(descriptor: Any, side: int | None = None) -> np.ndarray:
    """:func:`synthetic_image` in the form ``descriptor`` reads (a descriptor, or its plain table):
    grey (H, W), or RGB (H, W, 3), its three channels different textures, for a descriptor that
    :attr:`~classify_images.features.descriptors.Descriptor.needs_colour`; ``side`` defaults to the
    descriptor's smallest image side."""
    if isinstance(descriptor, dict):
        descriptor = make_descriptor(descriptor)
    side = descriptor.smallest_side if side is None else side
    if not getattr(descriptor, "needs_colour", False):
        return synthetic_image(side)
    return np.ascontiguousarray(np.stack([synthetic_image(side, seed) for seed in range(3)], axis=2))


def warm_descriptors(descriptor: dict | FeaturePlan) -> None:
    """Compile the descriptor's kernels: the plan's descriptor, or the one of the plain table
    ``descriptor`` (:meth:`~classify_images.pipeline.settings.config.PipelineConfig.descriptor_params`)."""
    if isinstance(descriptor, FeaturePlan):
        descriptor.descriptor.compute(synthetic_input(descriptor.descriptor, descriptor.smallest_image_side))
    else:
        made = make_descriptor(descriptor)
        made.compute(synthetic_input(made))


def warm_encoding(extractor) -> None:
    """Compile the kernels of :meth:`FeatureExtractor.pooled
    <classify_images.pipeline.extraction.extractor.FeatureExtractor.pooled>`: descriptors, the encoder
    with the extractor's codebook, pooling."""
    coder = extractor.encoder.prepared(extractor.codebook, extractor.codebook_digest)
    plan = extractor.plan
    _encode_synthetic(plan.descriptor, plan.smallest_image_side, extractor.encoder, coder, extractor.pyramid)


def _encode_synthetic(descriptor, side: int, encoder: Encoder, coder, pyramid) -> None:
    image = synthetic_input(descriptor, side)
    result = descriptor.compute(image)
    item = encoder.cached_item(
        coder,
        dequantize_descriptors(quantize_descriptors(result.descriptors)),
        result.x,
        result.y,
        image.shape[:2],
        **encoder.cache_dependencies(pyramid),
    )
    encoder.pool(coder, item, pyramid)


def synthetic_state(encoder: Encoder, descriptor_length: int, seed: int = 0):
    """A fitted state of ``encoder``'s shapes and types (:meth:`~classify_images.coding.encoders.Encoder.state_spec`)
    with seeded positive values: enough to compile its kernels before the real codebook is learnt."""
    rng = np.random.default_rng(seed)
    arrays = {
        name: (rng.random(shape) + 0.1).astype(dtype)
        for name, (shape, dtype) in encoder.state_spec(descriptor_length).items()
    }
    return encoder.from_arrays(arrays, descriptor_length)


def learns_in_parent_with_numba(encoder: Encoder) -> bool:
    """Whether ``encoder``'s codebook is learnt by numba kernels in the building process: a sparse
    dictionary by our online learner (:mod:`~classify_images.coding.dictionary`)."""
    return isinstance(encoder, SparseCoding) and encoder.solver == "online"


def compile_learner(descriptor_length: int, seed: int = 0) -> None:
    """Compile the online dictionary learner's kernels: a tiny seeded
    :func:`~classify_images.coding.codebook.learn_sparse_dictionary` call (``solver="online"``) on
    descriptors of ``descriptor_length`` dimensions (numba compiles per argument type, not size)."""
    rng = np.random.default_rng(seed)
    descriptors = rng.random((64, descriptor_length), dtype=np.float32)
    descriptors[rng.random(descriptors.shape) < 0.5] = 0  # some atoms unused: every branch of the update
    learn_sparse_dictionary(
        descriptors, 8, lambda1=0.15, n_iter=3, batch_size=32, random_state=seed, solver="online", n_threads=1
    )


def _compile_encoder(sift: dict, codebook_params: dict, levels: list, pooling: str) -> None:
    """:func:`warm_encoding` with a synthetic state (what :func:`encoder_compiled_aside` runs),
    after the online dictionary learner's kernels when the parent needs them (then prints
    :data:`_LEARNER_READY`)."""
    encoder, descriptor = make_encoder(codebook_params), make_descriptor(sift)  # (a process of its own: plain values)
    if learns_in_parent_with_numba(encoder):
        compile_learner(descriptor.length)
        sys.stdout.write(_LEARNER_READY + "\n")  # the parent reads this line (not console text)
        sys.stdout.flush()
    state = synthetic_state(encoder, descriptor.length)
    _encode_synthetic(
        descriptor, descriptor.smallest_side, encoder, encoder.prepare(state), Pyramid(tuple(levels), pooling)
    )


def tie_to_parent(parent: int, poll_seconds: float = 1.0) -> None:
    """End this process when its parent ``parent`` ends, however it ends (``kill -9`` included).

    On Linux the kernel sends this process SIGKILL when its parent exits
    (``prctl(PR_SET_PDEATHSIG)``); everywhere, a daemon thread checks every ``poll_seconds``
    that the parent is still ``parent`` (an orphan is adopted by another process).  A parent
    already gone ends this process at once.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError, TypeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


class AsideCompilation:
    """What :func:`encoder_compiled_aside` yields: :meth:`wait_for_learner`.

    Parameters
    ----------
    process : subprocess.Popen or None
        The compiling process (its stdout a pipe), or ``None`` when none was started.
    learner_first : bool
        Whether the process compiles the online dictionary learner's kernels first.
    """

    def __init__(self, process: subprocess.Popen | None, learner_first: bool) -> None:
        self._ready = threading.Event()
        if process is None or not learner_first:
            self._ready.set()
            return
        threading.Thread(target=self._watch, args=(process.stdout,), daemon=True).start()

    def _watch(self, stdout) -> None:
        """Set the event on :data:`_LEARNER_READY` or at the end of the output (the process ended)."""
        try:
            for line in stdout:  # read to the end: the process never blocks on a full pipe
                if line.decode(errors="replace").strip() == _LEARNER_READY:
                    self._ready.set()
        finally:
            self._ready.set()

    def wait_for_learner(self, timeout: float = _WAIT_SECONDS) -> bool:
        """Wait until the online learner's kernels are in numba's cache (or the process ended,
        failed or was not needed): ``True``, or ``False`` after ``timeout`` seconds (the caller
        then compiles what is missing itself)."""
        return self._ready.wait(timeout)


@contextlib.contextmanager
def encoder_compiled_aside(config: PipelineConfig | FeaturePlan) -> Iterator[AsideCompilation]:
    """Compile the encoder's kernels in a separate process while the block runs (the sample
    and the codebook, which leave a core idle), waiting for it at the end of the block.

    With our online dictionary learner (:func:`learns_in_parent_with_numba`) the process compiles
    the learner's kernels first; the block calls ``wait_for_learner()`` on what it receives before
    learning, so that the parent loads them instead of compiling them a second time.

    The process compiles on a synthetic state (:func:`synthetic_state`) and writes the
    kernels to numba's cache, from which this process and the workers then load them.  It is
    a plain ``python -c`` (no ``multiprocessing``: the caller's main module is not imported
    again), tied to this process (:func:`tie_to_parent`: it ends when this one does, even killed),
    whose output is discarded (but for :data:`_LEARNER_READY`); if it fails, the kernels are compiled as before, by
    :func:`warm_encoding`.  An error in the block kills it, and so does a wait longer than
    :data:`_WAIT_SECONDS`.
    """
    plan = feature_plan_of(config)
    arguments = [plan.sift, plan.codebook_table, list(plan.pyramid.levels), plan.pyramid.method]
    learner_first = learns_in_parent_with_numba(plan.encoder)
    process = None
    try:
        payload = json.dumps(arguments).encode()
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, json; from classify_images.pipeline.execution.warm_up import _compile_encoder, "
                f"tie_to_parent; tie_to_parent({os.getpid()}); _compile_encoder(*json.load(sys.stdin))",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE if learner_first else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except (OSError, TypeError, ValueError):  # parameters JSON cannot hold, or no process: compile later
        pass
    if process is not None:
        with contextlib.suppress(OSError):  # (it exited already)
            process.stdin.write(payload)
            process.stdin.close()
    try:
        yield AsideCompilation(process, learner_first)
    except BaseException:
        if process is not None:
            process.kill()
        raise
    finally:
        if process is not None:
            try:
                process.wait(timeout=_WAIT_SECONDS)
            except subprocess.TimeoutExpired:  # stuck: the parent compiles what is missing itself
                process.kill()
                process.wait()
