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
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator

import numpy as np

from ..coding.encoders import Encoder, Pyramid, make_encoder
from ..features.descriptors import make_descriptor
from ..features.dsift import dequantize_descriptors, quantize_descriptors

__all__ = ["warm_descriptors", "warm_encoding", "encoder_compiled_aside"]

#: How long the end of :func:`encoder_compiled_aside`'s block waits for the compiling process at
#: most (compiling the sparse coder takes about 20 CPU seconds; a killed process leaves no torn
#: entry: numba writes each under a temporary name and renames it).
_WAIT_SECONDS = 600.0


def synthetic_image(largest_patch: int, seed: int = 0) -> np.ndarray:
    """A textured float32 image in [0, 1] of side ``2 · largest_patch + 8`` px: a few patches per side."""
    side = 2 * largest_patch + 8
    noise = np.random.default_rng(seed).random((side + 2, side + 2), dtype=np.float32)
    smooth = (noise[:-2, :-2] + noise[1:-1, 1:-1] + noise[2:, 2:] + noise[1:-1, :-2] + noise[:-2, 1:-1]) / 5
    return np.ascontiguousarray(smooth, dtype=np.float32)


def warm_descriptors(sift: dict) -> None:
    """Compile the descriptor's kernels (dense SIFT with the ``[sift]`` table ``sift``)."""
    make_descriptor(sift).compute(synthetic_image(max(sift["patch_sizes"])))


def warm_encoding(extractor) -> None:
    """Compile the kernels of :meth:`FeatureExtractor.pooled
    <classify_images.pipeline.extractor.FeatureExtractor.pooled>`: descriptors, the encoder
    with the extractor's codebook, pooling."""
    coder = extractor.encoder.prepared(extractor.codebook, extractor.codebook_digest)
    _encode_synthetic(extractor.config.sift_params(), extractor.encoder, coder, extractor.pyramid)


def _encode_synthetic(sift: dict, encoder: Encoder, coder, pyramid) -> None:
    image = synthetic_image(max(sift["patch_sizes"]))
    result = make_descriptor(sift).compute(image)
    item = encoder.cached_item(coder, dequantize_descriptors(quantize_descriptors(result.descriptors)),
                               result.x, result.y, image.shape, **encoder.cache_dependencies(pyramid))
    encoder.pool(coder, item, pyramid)


def synthetic_state(encoder: Encoder, descriptor_length: int, seed: int = 0):
    """A fitted state of ``encoder``'s shapes and types (:meth:`~classify_images.coding.encoders.Encoder.state_spec`)
    with seeded positive values: enough to compile its kernels before the real codebook is learnt."""
    rng = np.random.default_rng(seed)
    arrays = {name: (rng.random(shape) + 0.1).astype(dtype)
              for name, (shape, dtype) in encoder.state_spec(descriptor_length).items()}
    return encoder.from_arrays(arrays, descriptor_length)


def _compile_encoder(sift: dict, codebook_params: dict, levels: list, pooling: str) -> None:
    """:func:`warm_encoding` with a synthetic state (what :func:`encoder_compiled_aside` runs)."""
    encoder = make_encoder(codebook_params)
    state = synthetic_state(encoder, make_descriptor(sift).length)
    _encode_synthetic(sift, encoder, encoder.prepare(state), Pyramid(tuple(levels), pooling))


@contextlib.contextmanager
def encoder_compiled_aside(config) -> Iterator[None]:
    """Compile the encoder's kernels in a separate process while the block runs (the sample
    and the codebook, which leave a core idle), waiting for it at the end of the block.

    The process compiles on a synthetic state (:func:`synthetic_state`) and writes the
    kernels to numba's cache, from which this process and the workers then load them.  It is
    a plain ``python -c`` (no ``multiprocessing``: the caller's main module is not imported
    again) whose output is discarded; if it fails, the kernels are compiled as before, by
    :func:`warm_encoding`.  An error in the block kills it, and so does a wait longer than
    :data:`_WAIT_SECONDS`.
    """
    arguments = [config.sift_params(), config.codebook_params(), list(config.pooling.levels), config.pooling.method]
    process = None
    try:
        payload = json.dumps(arguments).encode()
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys, json; from classify_images.pipeline.warm_up import _compile_encoder; "
             "_compile_encoder(*json.load(sys.stdin))"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    except (OSError, TypeError, ValueError):  # parameters JSON cannot hold, or no process: compile later
        pass
    if process is not None:
        with contextlib.suppress(OSError):  # (it exited already)
            process.stdin.write(payload)
            process.stdin.close()
    try:
        yield
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
