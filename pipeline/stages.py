"""Per-image stages of the feature pipeline, as pure functions that joblib caches.

Each function takes the image path *and its content fingerprint* (SHA-1 of the
bytes) together with the parameters of its own stage and of every stage
upstream.  :class:`StageCache` wraps them in :class:`joblib.Memory`, so the cache
key is the image content plus all upstream parameters: a changed image or an
upstream change can never return a stale result, and a downstream change
(pooling, normalisation, classifier) recomputes nothing here.  joblib writes
each result under a temporary name and renames it, so an interrupted run never
leaves a half-written entry.

What is cached per image is compact:

* ``check_image``      — readable?, its size after resizing, or the reason it is not;
* ``image_descriptors`` — dense SIFT as uint8 (VLFeat's 512·v convention [1]_) + grid
  positions (only when ``sift.cache_descriptors`` is true: ``n`` descriptors take
  ``128 n`` bytes, large for dense grids with several patch sizes, and recomputing
  them is cheap; see BENCHMARKS.md, section "Feature building on 15-Scenes");
* ``descriptor_sample`` — the few descriptors of a training image that feed the codebook;
* ``image_codes``       — VQ indices (int16) or sparse codes (CSR float32) + positions.

The codebook itself is learnt by :func:`learn_codebook`, cached on the content of
the descriptor sample.  The cached functions take plain values (dicts, lists, numbers,
strings): joblib's cache key is a hash of their arguments.

References
----------
.. [1] A. Vedaldi and B. Fulkerson, "VLFeat: an open and portable library of computer
   vision algorithms", ACM Multimedia 2010.
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..coding import codebook as codebook_module
from ..coding import encode as encode_module
from ..coding import normalize as normalize_module
from ..coding import pooling as pooling_module
from ..coding.codebook import learn_kmeans_codebook, learn_sparse_dictionary, sample_rows
from ..coding.encode import SparseCoder, vq_encode
from ..features import dsift as dsift_module
from ..features import preprocess as preprocess_module
from ..features.dsift import dense_sift, dequantize_descriptors, quantize_descriptors
from ..features.preprocess import ImageReadError, load_grayscale

__all__ = [
    "implementation_versions",
    "check_image",
    "compute_descriptors",
    "image_descriptors",
    "descriptor_sample",
    "learn_codebook",
    "image_codes",
    "codes_matrix",
    "StageCache",
]


def implementation_versions() -> dict[str, int]:
    """``IMPLEMENTATION_VERSION`` of every module whose numbers end up in a feature set.

    Stage-cache keys hold the versions of the modules upstream of their stage, and the
    feature set's config hash holds them all: bumping a module's version after a change
    to its numerical output invalidates exactly what that module produced.  (joblib's own
    key covers the cached function's source only, not the code it calls.)
    """
    return {
        "preprocess": preprocess_module.IMPLEMENTATION_VERSION,
        "dense_sift": dsift_module.IMPLEMENTATION_VERSION,
        "codebook": codebook_module.IMPLEMENTATION_VERSION,
        "encode": encode_module.IMPLEMENTATION_VERSION,
        "pooling": pooling_module.IMPLEMENTATION_VERSION,
        "normalize": normalize_module.IMPLEMENTATION_VERSION,
    }


#: The modules each cached stage depends on (the keys of :func:`implementation_versions`).
_STAGE_MODULES = {
    "check_image": ("preprocess",),
    "image_descriptors": ("preprocess", "dense_sift"),
    "descriptor_sample": ("preprocess", "dense_sift"),
    "learn_codebook": ("codebook",),
    "image_codes": ("preprocess", "dense_sift", "encode"),
}


def _stage_versions(stage: str) -> tuple[tuple[str, int], ...]:
    versions = implementation_versions()
    return tuple((module, versions[module]) for module in _STAGE_MODULES[stage])


def check_image(path: str, fingerprint: str, max_side: int, min_side: int, implementation: tuple = ()) -> dict[str, Any]:
    """Decode an image once: ``{"ok": True, "shape": (h, w)}`` or ``{"ok": False, "reason": …}``.

    ``min_side`` is the largest patch size: an image smaller than one patch has
    no descriptor and is skipped.
    """
    try:
        image = load_grayscale(path, max_side=max_side)
    except ImageReadError as exc:
        return {"ok": False, "reason": str(exc)}
    except OSError as exc:
        return {"ok": False, "reason": f"cannot read file ({exc.strerror or exc})"}
    height, width = image.shape
    if min(height, width) < min_side:
        return {"ok": False, "reason": f"image smaller than one patch ({width}x{height} px < {min_side} px)"}
    return {"ok": True, "shape": (int(height), int(width))}


def compute_descriptors(path: str, max_side: int, sift: dict[str, Any]) -> dict[str, np.ndarray]:
    """Dense SIFT of one image: ``descriptors`` (uint8, n×128), ``x``, ``y`` (float32), ``shape``."""
    image = load_grayscale(path, max_side=max_side)
    result = dense_sift(
        image,
        patch_sizes=tuple(sift["patch_sizes"]),
        step=sift["step"],
        smooth=sift["smooth"],
        contrast_threshold=sift["contrast_threshold"],
        # the issue-11 options appear in ``sift`` only when they differ from their defaults
        smoothing=sift.get("smoothing", "dsift"),
        window_size=sift.get("window_size") or None,
        bin_centres=sift.get("bin_centres", "patch"),
        grid_alignment=sift.get("grid_alignment", "corner"),
        low_contrast=sift.get("low_contrast", "keep"),
        root=sift.get("root_sift", False),
    )
    return {
        "descriptors": quantize_descriptors(result.descriptors),
        "x": np.asarray(result.x, dtype=np.float32),
        "y": np.asarray(result.y, dtype=np.float32),
        "shape": np.asarray(image.shape, dtype=np.int32),
    }


def image_descriptors(
    path: str, fingerprint: str, max_side: int, sift: dict[str, Any], implementation: tuple = ()
) -> dict[str, np.ndarray]:
    """Cached form of :func:`compute_descriptors` (the fingerprint keys the cache)."""
    return compute_descriptors(path, max_side, sift)


def _descriptors(path, fingerprint, max_side, sift, descriptors_fn) -> dict[str, np.ndarray]:
    if descriptors_fn is None:
        return compute_descriptors(path, max_side, sift)
    return descriptors_fn(path, fingerprint, max_side, sift)


def _image_seed(seed: int, fingerprint: str) -> int:
    return int.from_bytes(hashlib.sha1(f"{seed}:{fingerprint}".encode()).digest()[:8], "little")


def descriptor_sample(
    path: str,
    fingerprint: str,
    max_side: int,
    sift: dict[str, Any],
    n_samples: int,
    seed: int,
    descriptors_fn=None,
    implementation: tuple = (),
) -> np.ndarray:
    """``n_samples`` random descriptors (uint8) of one training image, seeded by image content."""
    data = _descriptors(path, fingerprint, max_side, sift, descriptors_fn)
    rows = sample_rows(data["descriptors"].shape[0], n_samples, np.random.default_rng(_image_seed(seed, fingerprint)))
    return data["descriptors"][rows]


def learn_codebook(sample: np.ndarray, codebook: dict[str, Any], implementation: tuple = ()) -> np.ndarray:
    """Codebook (K × 128 float32) from a uint8 descriptor sample, by ``codebook["kind"]``."""
    descriptors = dequantize_descriptors(sample)
    if codebook["kind"] == "kmeans":
        return learn_kmeans_codebook(
            descriptors, codebook["size"], max_iter=codebook["n_iter"], random_state=codebook["seed"]
        )
    return learn_sparse_dictionary(
        descriptors,
        codebook["size"],
        lambda1=codebook["lambda"],
        n_iter=codebook["n_iter"],
        random_state=codebook["seed"],
    )


_CODERS: dict[str, SparseCoder] = {}


def image_codes(
    path: str,
    fingerprint: str,
    max_side: int,
    sift: dict[str, Any],
    codebook_params: dict[str, Any],
    codebook_digest: str,
    codebook: np.ndarray,
    descriptors_fn=None,
    implementation: tuple = (),
) -> dict[str, np.ndarray]:
    """Codes of one image over the codebook (keyed by ``codebook_digest``, not the array).

    Returns ``x``, ``y``, ``shape`` and either ``index`` (VQ, int16) or the CSR
    parts ``data``, ``indices``, ``indptr`` (sparse codes, float32).
    """
    data = _descriptors(path, fingerprint, max_side, sift, descriptors_fn)
    descriptors = dequantize_descriptors(data["descriptors"])
    out = {"x": data["x"], "y": data["y"], "shape": data["shape"]}
    if codebook_params["kind"] == "kmeans":
        out["index"] = vq_encode(descriptors, codebook)
        return out
    coder = _CODERS.get(codebook_digest)
    if coder is None:
        _CODERS.clear()
        coder = _CODERS[codebook_digest] = SparseCoder(codebook, codebook_params["lambda"])
    codes = coder.encode(descriptors)
    out.update(data=codes.data.astype(np.float32), indices=codes.indices.astype(np.int16), indptr=codes.indptr.astype(np.int32))
    return out


def codes_matrix(codes: dict[str, np.ndarray], n_words: int):
    """The codes of :func:`image_codes` as VQ indices or a CSR matrix (n × K)."""
    if "index" in codes:
        return codes["index"]
    n = codes["indptr"].shape[0] - 1
    return sp.csr_matrix((codes["data"], codes["indices"].astype(np.int32), codes["indptr"]), shape=(n, n_words))


class StageCache:
    """The per-image stages, memoised in ``cache_dir`` by :class:`joblib.Memory`.

    With ``cache_dir=None`` nothing is cached (every call recomputes).  Every stage
    function takes an ``implementation`` argument that it does not use: the cache passes
    the ``IMPLEMENTATION_VERSION`` of the modules upstream of the stage, so that it is
    part of the key.
    """

    def __init__(self, cache_dir: str | os.PathLike | None, *, cache_descriptors: bool = True) -> None:
        from joblib import Memory

        self.memory = Memory(None if cache_dir is None else os.fspath(cache_dir), verbose=0)
        # Keys are image *content* (fingerprint) and parameters; the path is not
        # part of the key, so moving a dataset keeps its cache.
        self.check_image = self._cached(check_image, ["path"])
        self.learn_codebook = self._cached(learn_codebook, [])
        self._descriptors = self._cached(image_descriptors, ["path"]) if cache_descriptors else None
        self._sample = self._cached(descriptor_sample, ["path", "descriptors_fn"])
        self._codes = self._cached(image_codes, ["path", "codebook", "descriptors_fn"])

    def _cached(self, stage, ignore: list[str]):
        """``stage`` memoised, with its modules' implementation versions bound (and keyed)."""
        return functools.partial(self.memory.cache(stage, ignore=ignore), implementation=_stage_versions(stage.__name__))

    def descriptor_sample(self, path, fingerprint, max_side, sift, n_samples, seed):
        return self._sample(path, fingerprint, max_side, sift, n_samples, seed, descriptors_fn=self._descriptors)

    def image_codes(self, path, fingerprint, max_side, sift, codebook_params, codebook_digest, codebook):
        return self._codes(
            path, fingerprint, max_side, sift, codebook_params, codebook_digest, codebook, descriptors_fn=self._descriptors
        )
