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

import numpy as np

from ..features.descriptors import make_descriptor
from ..features.dsift import dequantize_descriptors, quantize_descriptors

__all__ = ["warm_descriptors", "warm_encoding"]


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
    sift = extractor.config.sift_params()
    image = synthetic_image(max(sift["patch_sizes"]))
    result = make_descriptor(sift).compute(image)
    encoder = extractor.encoder
    coder = encoder.prepared(extractor.codebook, extractor.codebook_digest)
    item = encoder.cached_item(coder, dequantize_descriptors(quantize_descriptors(result.descriptors)),
                               result.x, result.y, image.shape, **encoder.cache_dependencies(extractor.pyramid))
    encoder.pool(coder, item, extractor.pyramid)
