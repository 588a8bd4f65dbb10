"""Per-image stages of the feature pipeline, as pure functions that joblib caches.

Each function takes the image path *and its content fingerprint* (SHA-1 of the
bytes) together with the parameters of its own stage and of every stage
upstream.  :class:`StageCache` wraps them in :class:`joblib.Memory`, so the cache
key is the image content plus all upstream parameters: a changed image or an
upstream change can never return a stale result, and a downstream change
(pooling, normalisation, classifier) recomputes nothing here.  joblib writes
each result under a temporary name and renames it, so an interrupted run never
leaves a half-written entry.  Results are stored as ``.npz`` files read without
pickle, in a private cache folder
(:mod:`~classify_images.pipeline.cache_store`): a file planted in the cache cannot
run code, it is a miss.

What is cached per image is compact:

* ``check_image``      — readable?, its size after resizing, or the reason it is not;
* ``image_descriptors`` — dense SIFT as uint8 (VLFeat's 512·v convention [1]_) + grid
  positions (only when ``sift.cache_descriptors`` is true: ``n`` descriptors take
  ``128 n`` bytes, large for dense grids with several patch sizes, and recomputing
  them is cheap; see docs/benchmarks/build-and-cache.md);
* ``descriptor_sample`` — the few descriptors of a training image that feed the codebook;
* ``image_codes``       — VQ indices (int16) or sparse / LLC codes (CSR float32) + positions;
* ``image_cell_statistics`` — for soft assignment to k-means codewords: per pyramid cell,
  the sums of the codes and of their squares (or their maxima), float32, from which the
  pooling follows (:mod:`~classify_images.coding.soft_assignment`; per-descriptor soft
  codes would be ``k`` times the size of VQ indices);
* ``image_encoding``    — for VLAD and Fisher vectors, which aggregate the descriptors of
  each pyramid cell themselves (not codes pooled afterwards): the image's whole vector,
  cells concatenated and normalised (float32; as long as a row of the feature set).

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
from ..coding import fisher as fisher_module
from ..coding import llc as llc_module
from ..coding import normalize as normalize_module
from ..coding import pooling as pooling_module
from ..coding import soft_assignment as soft_assignment_module
from ..coding import vlad as vlad_module
from ..coding.codebook import (
    DEFAULT_PCA_DIMS,
    KMEANS_KINDS,
    codebook_size,
    learn_fisher_model,
    learn_kmeans_codebook,
    learn_sparse_dictionary,
    sample_rows,
)
from ..coding.encode import SparseCoder, vq_encode
from ..coding.fisher import FisherEncoder
from ..coding.llc import DEFAULT_N_NEIGHBORS, LlcCoder
from ..coding.pooling import n_pyramid_cells, pyramid_cells
from ..coding.soft_assignment import DEFAULT_BETA as DEFAULT_SOFT_BETA
from ..coding.soft_assignment import DEFAULT_N_NEIGHBORS as DEFAULT_SOFT_NEIGHBORS
from ..coding.soft_assignment import SoftAssignmentCoder
from ..coding.vlad import VladEncoder
from ..features import dsift as dsift_module
from ..features import preprocess as preprocess_module
from ..features.dsift import dense_sift, dequantize_descriptors, quantize_descriptors
from ..features.preprocess import DEFAULT_MAX_PIXELS, ImageReadError, load_grayscale, load_grayscale_checked
from .cache_store import BACKEND_NAME, secure_cache_folder

__all__ = [
    "implementation_versions",
    "check_image",
    "compute_descriptors",
    "image_descriptors",
    "descriptor_sample",
    "learn_codebook",
    "image_codes",
    "encoder_name",
    "image_cell_statistics",
    "AGGREGATING_KINDS",
    "encoder_cell_dimension",
    "image_encoding",
    "codes_matrix",
    "StageCache",
]


#: Codebook kinds whose encoder aggregates each pyramid cell itself (:func:`image_encoding`).
AGGREGATING_KINDS = ("vlad", "fisher")

def encoder_cell_dimension(kind: str, codebook) -> int:
    """Length of one pyramid cell's vector: ``K`` for pooled codes, ``K·d`` for VLAD,
    ``2·K·D`` for Fisher vectors."""
    if kind == "vlad":
        return int(codebook.shape[0] * codebook.shape[1])
    if kind == "fisher":
        return 2 * int(np.prod(codebook["means"].shape))
    return codebook_size(codebook)


#: The encoder modules of a codebook kind, beyond the ones every kind uses (their versions
#: enter the keys of that kind only, so adding an encoder changes no other kind's keys).
#: ``"soft"`` is soft assignment to a k-means codebook (:func:`encoder_name`).
_KIND_MODULES = {"llc": ("llc",), "vlad": ("vlad",), "fisher": ("vlad", "fisher"), "soft": ("soft_assignment",)}


def encoder_name(codebook_params: dict[str, Any]) -> str:
    """The encoder of a ``[codebook]`` table: its kind, or ``"soft"`` for soft assignment to
    k-means codewords (``kind = "kmeans"``, ``assignment = "soft"``)."""
    if codebook_params["kind"] == "kmeans" and codebook_params.get("assignment", "hard") == "soft":
        return "soft"
    return codebook_params["kind"]


def implementation_versions(kind: str | None = None) -> dict[str, int]:
    """``IMPLEMENTATION_VERSION`` of every module whose numbers end up in a feature set.

    ``kind`` (the codebook kind, or ``"soft"``: :func:`encoder_name`) adds the versions of
    that encoder's modules (:mod:`~classify_images.coding.llc`, :mod:`~classify_images.coding.vlad`,
    :mod:`~classify_images.coding.fisher`, :mod:`~classify_images.coding.soft_assignment`).

    Stage-cache keys hold the versions of the modules upstream of their stage, and the
    feature set's config hash holds them all: bumping a module's version after a change
    to its numerical output invalidates exactly what that module produced.  (joblib's own
    key covers the cached function's source only, not the code it calls.)
    """
    versions = {
        "preprocess": preprocess_module.IMPLEMENTATION_VERSION,
        "dense_sift": dsift_module.IMPLEMENTATION_VERSION,
        "codebook": codebook_module.IMPLEMENTATION_VERSION,
        "encode": encode_module.IMPLEMENTATION_VERSION,
        "pooling": pooling_module.IMPLEMENTATION_VERSION,
        "normalize": normalize_module.IMPLEMENTATION_VERSION,
    }
    encoder_versions = {
        "llc": llc_module.IMPLEMENTATION_VERSION,
        "vlad": vlad_module.IMPLEMENTATION_VERSION,
        "fisher": fisher_module.IMPLEMENTATION_VERSION,
        "soft_assignment": soft_assignment_module.IMPLEMENTATION_VERSION,
    }
    for module in _KIND_MODULES.get(kind, ()):
        versions[module] = encoder_versions[module]
    return versions


#: The modules each cached stage depends on (the keys of :func:`implementation_versions`).
_STAGE_MODULES = {
    "check_image": ("preprocess",),
    "image_descriptors": ("preprocess", "dense_sift"),
    "descriptor_sample": ("preprocess", "dense_sift"),
    "learn_codebook": ("codebook",),
    "image_codes": ("preprocess", "dense_sift", "encode"),
    "image_encoding": ("preprocess", "dense_sift", "encode", "pooling"),
    "image_cell_statistics": ("preprocess", "dense_sift", "encode", "pooling"),
}


_ENCODER_STAGES = ("image_codes", "image_encoding", "image_cell_statistics")


def _stage_versions(stage: str, kind: str | None = None) -> tuple[tuple[str, int], ...]:
    versions = implementation_versions(kind)
    modules = _STAGE_MODULES[stage] + (_KIND_MODULES.get(kind, ()) if stage in _ENCODER_STAGES else ())
    return tuple((module, versions[module]) for module in modules)


def check_image(
    path: str, fingerprint: str, max_side: int, min_side: int, max_pixels: int = DEFAULT_MAX_PIXELS,
    implementation: tuple = (),
) -> dict[str, Any]:
    """Decode an image once: ``{"ok": True, "shape": (h, w)}`` or ``{"ok": False, "reason": …}``.

    ``min_side`` is the largest patch size: an image smaller than one patch has
    no descriptor and is skipped.  An image whose header announces more than
    ``max_pixels`` pixels is skipped without being decoded; the bytes decoded are
    checked against ``fingerprint``.  A readable image whose decoder printed a
    warning (a damaged JPEG stream) has it under ``"warning"``.
    """
    try:
        image, warnings = load_grayscale_checked(path, max_side=max_side, max_pixels=max_pixels, sha1=fingerprint)
    except ImageReadError as exc:
        return {"ok": False, "reason": str(exc)}
    except OSError as exc:
        return {"ok": False, "reason": f"cannot read file ({exc.strerror or exc})"}
    height, width = image.shape
    if min(height, width) < min_side:
        return {"ok": False, "reason": f"image smaller than one patch ({width}x{height} px < {min_side} px)"}
    result = {"ok": True, "shape": (int(height), int(width))}
    if warnings:
        result["warning"] = "; ".join(warnings)[:500]
    return result


def compute_descriptors(
    path: str, max_side: int, sift: dict[str, Any], fingerprint: str | None = None
) -> dict[str, np.ndarray]:
    """Dense SIFT of one image: ``descriptors`` (uint8, n×128), ``x``, ``y`` (float32), ``shape``.

    With ``fingerprint``, the bytes decoded must be the bytes fingerprinted.
    """
    image = load_grayscale(path, max_side=max_side, sha1=fingerprint)
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
    return compute_descriptors(path, max_side, sift, fingerprint)


def _descriptors(path, fingerprint, max_side, sift, descriptors_fn) -> dict[str, np.ndarray]:
    if descriptors_fn is None:
        return compute_descriptors(path, max_side, sift, fingerprint)
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


def learn_codebook(
    sample: np.ndarray, codebook: dict[str, Any], implementation: tuple = ()
) -> np.ndarray | dict[str, np.ndarray]:
    """Codebook from a uint8 descriptor sample, by ``codebook["kind"]``: K × 128 float32
    words, or the arrays of a Fisher-vector model (PCA + GMM)."""
    descriptors = dequantize_descriptors(sample)
    if codebook["kind"] in KMEANS_KINDS:
        return learn_kmeans_codebook(
            descriptors, codebook["size"], max_iter=codebook["n_iter"], random_state=codebook["seed"]
        )
    if codebook["kind"] == "fisher":
        return learn_fisher_model(
            descriptors,
            codebook["size"],
            pca_dims=codebook.get("pca_dims") or DEFAULT_PCA_DIMS,
            max_iter=codebook["n_iter"],
            random_state=codebook["seed"],
        )
    return learn_sparse_dictionary(
        descriptors,
        codebook["size"],
        lambda1=codebook["lambda"],
        n_iter=codebook["n_iter"],
        random_state=codebook["seed"],
    )


#: The coder or encoder of the last codebook used (by digest), built once per process.
_CODERS: dict[str, Any] = {}


def _coder(codebook_params: dict[str, Any], codebook_digest: str, codebook):
    """The :class:`SparseCoder`, :class:`LlcCoder`, :class:`SoftAssignmentCoder`,
    :class:`VladEncoder` or :class:`FisherEncoder` of a codebook, kept for the next image."""
    key = f"{codebook_digest}:{sorted(codebook_params.items())}"
    coder = _CODERS.get(key)
    if coder is None:
        kind = encoder_name(codebook_params)
        if kind == "soft":
            coder = SoftAssignmentCoder(
                codebook,
                codebook_params.get("soft_neighbors") or DEFAULT_SOFT_NEIGHBORS,
                codebook_params.get("soft_beta") or DEFAULT_SOFT_BETA,
            )
        elif kind == "sparse":
            coder = SparseCoder(codebook, codebook_params["lambda"])
        elif kind == "llc":
            coder = LlcCoder(codebook, codebook_params.get("n_neighbors") or DEFAULT_N_NEIGHBORS)
        elif kind == "vlad":
            coder = VladEncoder(codebook)
        elif kind == "fisher":
            coder = FisherEncoder(codebook)
        else:
            raise ValueError(f"codebook kind {kind!r} has no coder")
        _CODERS.clear()
        _CODERS[key] = coder
    return coder


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
    parts ``data``, ``indices``, ``indptr`` (sparse or LLC codes, float32).
    """
    data = _descriptors(path, fingerprint, max_side, sift, descriptors_fn)
    descriptors = dequantize_descriptors(data["descriptors"])
    out = {"x": data["x"], "y": data["y"], "shape": data["shape"]}
    if codebook_params["kind"] == "kmeans":
        out["index"] = vq_encode(descriptors, codebook)
        return out
    codes = _coder(codebook_params, codebook_digest, codebook).encode(descriptors)
    out.update(data=codes.data.astype(np.float32), indices=codes.indices.astype(np.int16), indptr=codes.indptr.astype(np.int32))
    return out


def image_encoding(
    path: str,
    fingerprint: str,
    max_side: int,
    sift: dict[str, Any],
    codebook_params: dict[str, Any],
    levels: list,
    codebook_digest: str,
    codebook,
    descriptors_fn=None,
    implementation: tuple = (),
) -> np.ndarray:
    """The VLAD or Fisher vector of one image over the pyramid ``levels`` (float32), keyed
    by ``codebook_digest``, not the codebook's arrays."""
    data = _descriptors(path, fingerprint, max_side, sift, descriptors_fn)
    cells = pyramid_cells(data["x"], data["y"], tuple(int(v) for v in data["shape"]), levels)
    encoder = _coder(codebook_params, codebook_digest, codebook)
    return encoder.encode(dequantize_descriptors(data["descriptors"]), cells, n_pyramid_cells(levels))


def image_cell_statistics(
    path: str,
    fingerprint: str,
    max_side: int,
    sift: dict[str, Any],
    codebook_params: dict[str, Any],
    levels: list,
    statistics: str,
    codebook_digest: str,
    codebook: np.ndarray,
    descriptors_fn=None,
    implementation: tuple = (),
) -> dict[str, np.ndarray]:
    """Soft assignment: the per-cell ``statistics`` (``"moments"`` or ``"max"``,
    :data:`~classify_images.coding.soft_assignment.POOLING_STATISTICS`) of one image's soft
    codes over the pyramid ``levels`` (:func:`~classify_images.coding.soft_assignment.cell_statistics`),
    keyed by ``codebook_digest``, not the codebook's array."""
    data = _descriptors(path, fingerprint, max_side, sift, descriptors_fn)
    cells = pyramid_cells(data["x"], data["y"], tuple(int(v) for v in data["shape"]), levels)
    coder = _coder(codebook_params, codebook_digest, codebook)
    return coder.cell_statistics(dequantize_descriptors(data["descriptors"]), cells, n_pyramid_cells(levels), statistics)


def codes_matrix(codes: dict[str, np.ndarray], n_words: int):
    """The codes of :func:`image_codes` as VQ indices or a CSR matrix (n × K)."""
    if "index" in codes:
        return codes["index"]
    n = codes["indptr"].shape[0] - 1
    return sp.csr_matrix((codes["data"], codes["indices"].astype(np.int32), codes["indptr"]), shape=(n, n_words))


class StageCache:
    """The per-image stages, memoised in ``cache_dir`` by :class:`joblib.Memory`.

    With ``cache_dir=None`` nothing is cached (every call recomputes).  The folder is
    created private, or refused when others could write into it
    (:func:`~classify_images.pipeline.cache_store.secure_cache_folder`), and results
    are stored without pickle.  Every stage
    function takes an ``implementation`` argument that it does not use: the cache passes
    the ``IMPLEMENTATION_VERSION`` of the modules upstream of the stage, so that it is
    part of the key.
    """

    def __init__(self, cache_dir: str | os.PathLike | None, *, cache_descriptors: bool = True) -> None:
        from joblib import Memory

        location = None if cache_dir is None else os.fspath(secure_cache_folder(cache_dir))
        self.memory = Memory(location, backend=BACKEND_NAME, verbose=0)
        # Keys are image *content* (fingerprint) and parameters; the path is not
        # part of the key, so moving a dataset keeps its cache.
        self.check_image = self._cached(check_image, ["path"])
        self.learn_codebook = self._cached(learn_codebook, [])
        self._descriptors = self._cached(image_descriptors, ["path"]) if cache_descriptors else None
        self._sample = self._cached(descriptor_sample, ["path", "descriptors_fn"])
        self._codes = self._cached(image_codes, ["path", "codebook", "descriptors_fn"])
        self._encoding = self._cached(image_encoding, ["path", "codebook", "descriptors_fn"])
        self._cell_statistics = self._cached(image_cell_statistics, ["path", "codebook", "descriptors_fn"])

    def _cached(self, stage, ignore: list[str]):
        """``stage`` memoised, with its modules' implementation versions bound (and keyed)."""
        return functools.partial(self.memory.cache(stage, ignore=ignore), implementation=_stage_versions(stage.__name__))

    def descriptor_sample(self, path, fingerprint, max_side, sift, n_samples, seed):
        return self._sample(path, fingerprint, max_side, sift, n_samples, seed, descriptors_fn=self._descriptors)

    def image_codes(self, path, fingerprint, max_side, sift, codebook_params, codebook_digest, codebook):
        return self._codes(
            path, fingerprint, max_side, sift, codebook_params, codebook_digest, codebook, descriptors_fn=self._descriptors,
            implementation=_stage_versions("image_codes", encoder_name(codebook_params)),
        )

    def image_encoding(self, path, fingerprint, max_side, sift, codebook_params, levels, codebook_digest, codebook):
        return self._encoding(
            path, fingerprint, max_side, sift, codebook_params, levels, codebook_digest, codebook,
            descriptors_fn=self._descriptors, implementation=_stage_versions("image_encoding", encoder_name(codebook_params)),
        )

    def image_cell_statistics(self, path, fingerprint, max_side, sift, codebook_params, levels, statistics,
                              codebook_digest, codebook):
        return self._cell_statistics(
            path, fingerprint, max_side, sift, codebook_params, levels, statistics, codebook_digest, codebook,
            descriptors_fn=self._descriptors,
            implementation=_stage_versions("image_cell_statistics", encoder_name(codebook_params)),
        )
