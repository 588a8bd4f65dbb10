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
(:mod:`~classify_images.pipeline.storage.cache_store`): a file planted in the cache cannot
run code, it is a miss.

What is cached per image is compact:

* ``check_image_group`` — for a group of images (those whose fingerprints share their first two
  hex digits: at most 256 entries whatever the number of images, a new or changed image
  re-checks only its group), whether each is readable, its size after resizing, or the reason
  it is not (``check_image``: the same for one image);
* ``image_descriptors`` — dense SIFT as uint8 (VLFeat's 512·v convention [1]_) + grid
  positions (only when ``sift.cache_descriptors`` is true: ``n`` descriptors take
  ``128 n`` bytes, large for dense grids with several patch sizes, and recomputing
  them is cheap; see docs/benchmarks/build-and-cache.md);
* ``descriptor_sample`` — the few descriptors of a training image that feed the codebook
  (``positioned_descriptor_sample``: the same with their keypoints' relative coordinates,
  for an encoder that learns from positions, Fisher vectors with ``spatial_coordinates``),
  kept only with the descriptors (``sift.cache_descriptors``): otherwise drawn again when
  asked (the codebook itself stays cached);
* ``image_encoding``    — what the image's encoder keeps
  (:meth:`~classify_images.coding.encoders.Encoder.cached_item`): VQ indices (int16) or
  sparse / LLC codes (CSR float32) + positions, pooled afterwards, so that a change of
  pooling re-pools them; for soft assignment, per-cell sums of the codes and of their
  squares (or their maxima).  Its key holds the pyramid settings the item depends on
  (:meth:`~classify_images.coding.encoders.Encoder.cache_dependencies`) and the versions of
  the encoder's modules.  Nothing for VLAD and Fisher vectors, which aggregate each pyramid
  cell themselves: their item is the finished row, which the feature set stores, and larger
  than its input (a Fisher vector is 1 MiB of float32), so the encoder says it is not worth
  keeping (:attr:`~classify_images.coding.encoders.Encoder.caches_item` false) and the
  stage computes it each time it is asked.  No stage names an encoder: they ask it.

The codebook itself is learnt by :func:`learn_codebook` (:func:`learn_positioned_codebook`
from a positioned sample), cached on the content of the descriptor sample.  The cached functions take plain values (dicts, lists, numbers,
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
import warnings
from typing import Any

import numpy as np

from ...coding import codebook as codebook_module
from ...coding import encode as encode_module
from ...coding import normalize as normalize_module
from ...coding import pooling as pooling_module
from ...coding.codebook import sample_rows
from ...coding.encoders import Encoder, make_encoder
from ...coding.fisher import N_SPATIAL_COORDINATES, spatial_coordinates
from ...features import dsift as dsift_module
from ...features import preprocess as preprocess_module
from ...features.descriptors import make_descriptor
from ...features.dsift import dequantize_descriptors, quantize_descriptors
from ...features.preprocess import (
    DEFAULT_MAX_PIXELS,
    ImageReadError,
    load_colour,
    load_grayscale,
    load_grayscale_checked,
)
from ..storage.cache_store import BACKEND_NAME, secure_cache_folder
from .shared_reads import computed_once, load_image

#: Key added to the ``[sift]`` table a stage receives for the left-right mirror of an image.
#: (``"mirror"`` since the mirror's dense SIFT became a permutation of the image's: the entries
#: cached under the former key, ``"flip"``, were computed on the mirrored image's own grid.)
FLIP_KEY = "mirror"


def silence_persisting_warning() -> None:
    """Hide joblib's "Persisting input arguments took …" warning (and only it).

    joblib warns when writing a cache entry's small summary of its arguments took over 0.5 s — on
    a machine busy with other work, often — and says itself that "results will be correct in all
    cases": noise in every build's output (the demo's included).  Called on import (every worker
    that runs a stage imports this module) and by each :class:`StageCache` (a filter added on
    import inside a ``warnings.catch_warnings`` block would end with it).
    """
    warnings.filterwarnings("ignore", message="Persisting input arguments took", category=UserWarning, module="joblib")


silence_persisting_warning()

__all__ = [
    "FLIP_KEY",
    "implementation_versions",
    "check_image",
    "check_image_group",
    "check_group_of",
    "group_checks",
    "compute_descriptors",
    "mirrored_descriptors",
    "image_descriptors",
    "descriptor_sample",
    "positioned_descriptor_sample",
    "learn_codebook",
    "learn_positioned_codebook",
    "image_encoding",
    "StageCache",
]


def implementation_versions(encoder: Encoder | None = None) -> dict[str, int]:
    """``IMPLEMENTATION_VERSION`` of every module whose numbers end up in a feature set.

    ``encoder`` adds the versions of that encoder's own modules
    (:meth:`~classify_images.coding.encoders.Encoder.implementation_versions`).

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
    if encoder is not None:
        versions.update(encoder.implementation_versions())
    return versions


#: The common modules each cached stage depends on (the keys of :func:`implementation_versions`);
#: the encoding stage depends on its encoder's own modules as well.
_STAGE_MODULES = {
    "check_image": ("preprocess",),
    "check_image_group": ("preprocess",),
    "image_descriptors": ("preprocess", "dense_sift"),
    "descriptor_sample": ("preprocess", "dense_sift"),
    "positioned_descriptor_sample": ("preprocess", "dense_sift"),
    "learn_codebook": ("codebook",),
    "learn_positioned_codebook": ("codebook",),
    "image_encoding": ("preprocess", "dense_sift", "encode", "pooling"),
}


def _stage_versions(stage: str, encoder: Encoder | None = None) -> tuple[tuple[str, int], ...]:
    versions = implementation_versions(encoder)
    own = tuple(encoder.implementation_versions()) if encoder is not None else ()
    return tuple((module, versions[module]) for module in _STAGE_MODULES[stage] + own)


def check_image(
    path: str,
    fingerprint: str,
    max_side: int,
    min_side: int,
    max_pixels: int = DEFAULT_MAX_PIXELS,
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


#: Hex digits of an image's fingerprint that name its group of checks (:func:`check_image_group`).
CHECK_GROUP_DIGITS = 2


def check_group_of(fingerprint: str) -> str:
    """The group whose :func:`check_image_group` entry holds the check of the image of ``fingerprint``."""
    return fingerprint[:CHECK_GROUP_DIGITS]


def check_image_group(
    paths: list[str],
    fingerprints: list[str],
    max_side: int,
    min_side: int,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    implementation: tuple = (),
) -> dict[str, np.ndarray]:
    """:func:`check_image` of each image of a group, as one result (one stage-cache entry, not one a
    image: 9 609 files and 24 MB for 15-Scenes' 4 485 images, now one file per group):
    ``ok`` (bool, n), ``shape`` (int64, n x 2; 0 when not ok), ``reason`` and ``warning`` (str, n;
    empty when none), in the order of ``fingerprints`` (the key: pass them sorted)."""
    results = [check_image(p, f, max_side, min_side, max_pixels) for p, f in zip(paths, fingerprints, strict=True)]
    return {
        "ok": np.array([r["ok"] for r in results], dtype=bool),
        "shape": np.array([r.get("shape", (0, 0)) for r in results], dtype=np.int64).reshape(len(results), 2),
        "reason": np.array([r.get("reason", "") for r in results], dtype=str),
        "warning": np.array([r.get("warning", "") for r in results], dtype=str),
    }


def group_checks(result: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The per-image results (:func:`check_image`'s form) of a :func:`check_image_group` result."""
    checks = []
    for ok, shape, reason, warning in zip(
        result["ok"], result["shape"], result["reason"], result["warning"], strict=True
    ):
        check: dict[str, Any] = {"ok": True, "shape": (int(shape[0]), int(shape[1]))} if ok else {"ok": False}
        if not ok:
            check["reason"] = str(reason)
        if warning:
            check["warning"] = str(warning)
        checks.append(check)
    return checks


def compute_descriptors(
    path: str, max_side: int, sift: dict[str, Any], fingerprint: str | None = None
) -> dict[str, np.ndarray]:
    """The local descriptors of one image (:mod:`~classify_images.features.descriptors`: dense
    SIFT with the ``[sift]`` table, on the image decoded in colour when ``sift.color`` asks for it):
    ``descriptors`` (uint8, n×length), ``x``, ``y`` (float32), ``shape``.

    ``sift[FLIP_KEY] = True`` (absent otherwise, so unflipped keys are unchanged) gives those of
    the image mirrored left-right after decoding and shrinking (augmentation, Chatfield et al.,
    BMVC 2014): for a descriptor with :attr:`~classify_images.features.descriptors.Descriptor.mirror_columns`
    (dense SIFT), the image's own descriptors permuted, at the mirrored centres
    (:func:`mirrored_descriptors`: no second SIFT); otherwise computed on the mirrored pixels.  A
    flipped image is its own cache entry in every stage keyed by ``sift``.

    With ``fingerprint``, the bytes decoded must be the bytes fingerprinted.  Inside
    :func:`~classify_images.pipeline.extraction.shared_reads.decoded_once` (a multi-channel pass) the image is
    decoded once for every channel that reads it.
    """
    mirror = _permuted_mirror(sift)
    if mirror is not None:
        table, columns = mirror
        return mirrored_descriptors(compute_descriptors(path, max_side, table, fingerprint), columns)
    flip = bool(sift.get(FLIP_KEY, False))
    descriptor = make_descriptor({key: value for key, value in sift.items() if key != FLIP_KEY})
    load = load_colour if getattr(descriptor, "needs_colour", False) else load_grayscale
    image = load_image(load, path, max_side, fingerprint)  # once for all channels inside shared_reads.decoded_once
    if flip:
        image = np.ascontiguousarray(image[:, ::-1])
    result = descriptor.compute(image)
    return {
        "descriptors": quantize_descriptors(result.descriptors),
        "x": result.x,
        "y": result.y,
        "shape": np.asarray(image.shape[:2], dtype=np.int32),
    }


def _permuted_mirror(sift: dict[str, Any]) -> tuple[dict[str, Any], np.ndarray] | None:
    """``(the table without FLIP_KEY, the descriptor's mirror_columns)`` when ``sift`` asks for a
    mirror whose descriptors are a permutation of the image's; None otherwise."""
    if not sift.get(FLIP_KEY, False):
        return None
    table = {key: value for key, value in sift.items() if key != FLIP_KEY}
    columns = make_descriptor(table).mirror_columns
    return None if columns is None else (table, columns)


def mirrored_descriptors(data: dict[str, np.ndarray], columns: np.ndarray) -> dict[str, np.ndarray]:
    """The descriptors of the left-right mirror of the image whose descriptors are ``data``
    (:func:`compute_descriptors`' form): each row's entries in the order ``columns`` (the
    descriptor's :attr:`~classify_images.features.descriptors.Descriptor.mirror_columns`), centres
    ``x' = W - 1 - x``, the rows in the image's order.  For dense SIFT these are the descriptors
    of the mirrored image on the mirrored grid (:mod:`~classify_images.features.dsift`, "Mirror")."""
    width = int(data["shape"][1])
    return {
        "descriptors": np.take(data["descriptors"], columns, axis=1),  # 3.5x faster than [:, columns]
        "x": (np.float32(width - 1) - np.asarray(data["x"], dtype=np.float32)).astype(np.float32),
        "y": np.asarray(data["y"], dtype=np.float32),
        "shape": np.asarray(data["shape"], dtype=np.int32),
    }


def image_descriptors(
    path: str, fingerprint: str, max_side: int, sift: dict[str, Any], implementation: tuple = ()
) -> dict[str, np.ndarray]:
    """Cached form of :func:`compute_descriptors` (the fingerprint keys the cache)."""
    return compute_descriptors(path, max_side, sift, fingerprint)


def _descriptors(path, fingerprint, max_side, sift, descriptors_fn) -> dict[str, np.ndarray]:
    """An image's descriptors (through ``descriptors_fn``, the cached stage, when given); a mirror's
    from its image's when the descriptor permutes them (:func:`mirrored_descriptors`).  Inside a
    :func:`~classify_images.pipeline.extraction.shared_reads.decoded_once` scope each is computed
    once: an image's row and its mirror's, in one task, run dense SIFT once."""
    mirror = _permuted_mirror(sift)
    if mirror is not None:
        table, columns = mirror
        return mirrored_descriptors(_descriptors(path, fingerprint, max_side, table, descriptors_fn), columns)

    def compute() -> dict[str, np.ndarray]:
        if descriptors_fn is None:
            return compute_descriptors(path, max_side, sift, fingerprint)
        return descriptors_fn(path, fingerprint, max_side, sift)

    return computed_once(("descriptors", str(path), fingerprint, max_side, repr(sorted(sift.items()))), compute)


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


def positioned_descriptor_sample(
    path: str,
    fingerprint: str,
    max_side: int,
    sift: dict[str, Any],
    n_samples: int,
    seed: int,
    descriptors_fn=None,
    implementation: tuple = (),
) -> np.ndarray:
    """:func:`descriptor_sample`'s descriptors (the same rows) as float32, each followed by its
    keypoint's relative coordinates (:func:`~classify_images.coding.fisher.spatial_coordinates`):
    (n, length + 2), for an encoder that :attr:`~classify_images.coding.encoders.Encoder.learns_from_positions`.
    A stage of its own, so that :func:`descriptor_sample`'s cache entries stay valid (joblib
    drops a stage's entries when its code changes)."""
    data = _descriptors(path, fingerprint, max_side, sift, descriptors_fn)
    rows = sample_rows(data["descriptors"].shape[0], n_samples, np.random.default_rng(_image_seed(seed, fingerprint)))
    coordinates = spatial_coordinates(data["x"][rows], data["y"][rows], tuple(int(v) for v in data["shape"]))
    return np.concatenate([data["descriptors"][rows].astype(np.float32), coordinates], axis=1)


def learn_codebook(
    sample: np.ndarray, codebook: dict[str, Any], implementation: tuple = ()
) -> np.ndarray | dict[str, np.ndarray]:
    """The fitted state of the encoder of the ``[codebook]`` table ``codebook`` (its
    :meth:`~classify_images.coding.encoders.Encoder.learn`) from a uint8 descriptor sample."""
    return make_encoder(codebook).learn(dequantize_descriptors(sample))


def learn_positioned_codebook(
    sample: np.ndarray, codebook: dict[str, Any], implementation: tuple = ()
) -> np.ndarray | dict[str, np.ndarray]:
    """:func:`learn_codebook` from a :func:`positioned_descriptor_sample`, for an encoder that
    :attr:`~classify_images.coding.encoders.Encoder.learns_from_positions`: it learns from the
    descriptors and their coordinates."""
    descriptors, coordinates = sample[:, :-N_SPATIAL_COORDINATES], sample[:, -N_SPATIAL_COORDINATES:]
    return make_encoder(codebook).learn(dequantize_descriptors(descriptors), coordinates=coordinates)


def image_encoding(
    path: str,
    fingerprint: str,
    max_side: int,
    sift: dict[str, Any],
    codebook_params: dict[str, Any],
    dependencies: dict[str, Any],
    codebook_digest: str,
    codebook,
    descriptors_fn=None,
    implementation: tuple = (),
) -> np.ndarray | dict[str, np.ndarray]:
    """What the encoder of ``codebook_params`` caches for one image
    (:meth:`~classify_images.coding.encoders.Encoder.cached_item`: codes, per-cell statistics
    or the whole vector), keyed by ``codebook_digest`` (not the state's arrays) and by the
    pyramid settings the item depends on (``dependencies``,
    :meth:`~classify_images.coding.encoders.Encoder.cache_dependencies`)."""
    data = _descriptors(path, fingerprint, max_side, sift, descriptors_fn)
    encoder = make_encoder(codebook_params)
    return encoder.cached_item(
        encoder.prepared(codebook, codebook_digest),
        dequantize_descriptors(data["descriptors"]),
        data["x"],
        data["y"],
        tuple(int(v) for v in data["shape"]),
        **dependencies,
    )


class StageCache:
    """The per-image stages, memoised in ``cache_dir`` by :class:`joblib.Memory`.

    With ``cache_dir=None`` nothing is cached (every call recomputes).  The folder is
    created private, or refused when it is a user's folder (:func:`~.output_guard.check_cache_folder`)
    or others could write into it
    (:func:`~classify_images.pipeline.storage.cache_store.secure_cache_folder`), and results
    are stored without pickle.  Every stage
    function takes an ``implementation`` argument that it does not use: the cache passes
    the ``IMPLEMENTATION_VERSION`` of the modules upstream of the stage, so that it is
    part of the key.
    """

    def __init__(self, cache_dir: str | os.PathLike | None, *, cache_descriptors: bool = True) -> None:
        from joblib import Memory

        silence_persisting_warning()

        from ..storage.output_guard import check_cache_folder

        location = None if cache_dir is None else os.fspath(secure_cache_folder(check_cache_folder(cache_dir)))
        self.memory = Memory(location, backend=BACKEND_NAME, verbose=0)
        # Keys are image *content* (fingerprint) and parameters; the path is not
        # part of the key, so moving a dataset keeps its cache.
        self.check_image = self._cached(check_image, ["path"])
        self.check_image_group = self._cached(check_image_group, ["paths"])
        # The codebook learner by whether the encoder learns from positions too (its own stage).
        self._learners = {False: self._cached(learn_codebook, []), True: self._cached(learn_positioned_codebook, [])}
        self._descriptors = self._cached(image_descriptors, ["path"]) if cache_descriptors else None
        # A training image's descriptor sample is kept with its descriptors only: without them
        # (``sift.cache_descriptors = false``) it is drawn again when asked, e.g. 19 s of a
        # 15-Scenes Fisher build for 14.5 MB of cache (docs/light-pipeline.md).
        keep = self._cached if cache_descriptors else self._versioned
        self._sample = keep(descriptor_sample, ["path", "descriptors_fn"])
        self._positioned_sample = keep(positioned_descriptor_sample, ["path", "descriptors_fn"])
        self._encoding = self._cached(image_encoding, ["path", "codebook", "descriptors_fn"])

    def _cached(self, stage, ignore: list[str]):
        """``stage`` memoised, with its modules' implementation versions bound (and keyed)."""
        return functools.partial(
            self.memory.cache(stage, ignore=ignore), implementation=_stage_versions(stage.__name__)
        )

    @staticmethod
    def _versioned(stage, ignore: list[str]):
        """``stage`` not memoised (computed each time), called as :meth:`_cached` calls it."""
        return functools.partial(stage, implementation=_stage_versions(stage.__name__))

    def _learner(self, codebook_params: dict[str, Any], positioned: bool | None):
        if positioned is None:  # (a caller without the plan: ask the encoder of the table)
            positioned = make_encoder(codebook_params).learns_from_positions
        return self._learners[positioned]

    def learn_codebook(self, sample: np.ndarray, codebook_params: dict[str, Any], *, positioned: bool | None = None):
        """The codebook of ``codebook_params`` learnt from ``sample`` (:func:`learn_codebook`,
        or :func:`learn_positioned_codebook` for an encoder that learns from positions: ``positioned``,
        the encoder's :attr:`~classify_images.coding.encoders.Encoder.learns_from_positions`; None: asked here)."""
        return self._learner(codebook_params, positioned)(sample, codebook_params)

    def has_codebook(
        self, sample: np.ndarray, codebook_params: dict[str, Any], *, positioned: bool | None = None
    ) -> bool:
        """Whether :meth:`learn_codebook` of these arguments comes from the cache (hashes the
        sample, learns nothing)."""
        learner = self._learner(codebook_params, positioned)
        return learner.func.check_call_in_cache(sample, codebook_params, **learner.keywords)

    @property
    def caches_descriptors(self) -> bool:
        """Whether descriptors are kept in a cache folder (``sift.cache_descriptors`` and a folder)."""
        return self._descriptors is not None and self.memory.location is not None

    def image_descriptors(self, path, fingerprint, max_side, sift) -> dict[str, np.ndarray]:
        """:func:`image_descriptors` through the cache (the entry the sample and encode stages read);
        computed, not cached, when descriptors are not cached."""
        if self._descriptors is None:
            return compute_descriptors(path, max_side, sift, fingerprint)
        return self._descriptors(path, fingerprint, max_side, sift)

    def descriptor_sample(self, path, fingerprint, max_side, sift, n_samples, seed):
        return self._sample(path, fingerprint, max_side, sift, n_samples, seed, descriptors_fn=self._descriptors)

    def positioned_descriptor_sample(self, path, fingerprint, max_side, sift, n_samples, seed):
        return self._positioned_sample(
            path, fingerprint, max_side, sift, n_samples, seed, descriptors_fn=self._descriptors
        )

    def image_encoding(
        self,
        path,
        fingerprint,
        max_side,
        sift,
        encoder: Encoder,
        codebook_params,
        dependencies,
        codebook_digest,
        codebook,
    ):
        """:func:`image_encoding` through the cache, keyed by ``encoder``'s module versions too;
        computed, not cached, when the encoder's item is not worth keeping
        (:attr:`~classify_images.coding.encoders.Encoder.caches_item`)."""
        arguments = (path, fingerprint, max_side, sift, codebook_params, dependencies, codebook_digest, codebook)
        if not encoder.caches_item:
            return image_encoding(*arguments, descriptors_fn=self._descriptors)
        return self._encoding(
            *arguments, descriptors_fn=self._descriptors, implementation=_stage_versions("image_encoding", encoder)
        )
