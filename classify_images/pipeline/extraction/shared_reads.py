"""Each image decoded once per stage pass, however many channels read it.

A multi-channel build (:mod:`~classify_images.pipeline.extraction.channels`) runs several descriptor +
encoder channels over the same images; each channel's cached stages
(:func:`~classify_images.pipeline.extraction.stages.descriptor_sample`,
:func:`~classify_images.pipeline.extraction.stages.image_encoding`, and the descriptors under them) compute
their descriptors from the decoded image, and on a cold cache each would decode the file again.
Inside :func:`decoded_once` (entered by the per-image task of a pass, around all its channels), the
first channel that decodes an image keeps the pixels and the others take them: one file read,
one fingerprint check and one decode + resize per image, loader (grey or colour) and ``max_side``.

The stage functions and their arguments are unchanged, so every cache key is unchanged: a
channel equal to a single-channel configuration reads and writes that configuration's entries.
Outside :func:`decoded_once` (single-channel builds, the transformer) :func:`load_image` is the
loader itself.  Only the task that opened the scope sees it (a :class:`contextvars.ContextVar`),
and it holds the few images of one task: they are dropped when the task ends.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["decoded_once", "load_image", "computed_once"]

#: The images decoded in the current task's scope, by (loader, path, fingerprint, max_side); None outside one.
_DECODED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("classify_images_decoded", default=None)


@contextlib.contextmanager
def decoded_once() -> Iterator[None]:
    """Within the block, :func:`load_image` decodes each (file, loader, ``max_side``) once."""
    token = _DECODED.set({})
    try:
        yield
    finally:
        _DECODED.reset(token)


def load_image(load: Callable[..., np.ndarray], path: str, max_side: int, fingerprint: str | None) -> np.ndarray:
    """``load(path, max_side=max_side, sha1=fingerprint)``, or the pixels an earlier channel of the
    same :func:`decoded_once` scope decoded with the same arguments (the same array: the stages never
    write into an image, a flip is a copy)."""
    decoded = _DECODED.get()
    if decoded is None:
        return load(path, max_side=max_side, sha1=fingerprint)
    key = (load.__module__, load.__qualname__, str(path), fingerprint, max_side)
    if key not in decoded:
        decoded[key] = load(path, max_side=max_side, sha1=fingerprint)
    return decoded[key]


def computed_once(key: tuple, compute: Callable[[], dict]) -> dict:
    """``compute()``, or its result for the same ``key`` earlier in the same :func:`decoded_once`
    scope (an image's descriptors, which its mirror's are a permutation of); computed each time
    outside one.  The arrays of a kept result are made read-only: its readers share them."""
    decoded = _DECODED.get()
    if decoded is None:
        return compute()
    key = ("computed", *key)
    if key not in decoded:
        result = compute()
        for value in result.values():
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
        decoded[key] = result
    return decoded[key]
