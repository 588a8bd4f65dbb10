"""The fitted front half of the pipeline: image file → feature vector.

A :class:`FeatureExtractor` holds what turns an image into the vector a classifier
reads — the configuration, the codebook and the fitted normaliser — and applies, per
image,

1. decoding, grayscale, shrinking to ``image.max_side`` (:mod:`~classify_images.features.preprocess`);
2. dense SIFT (:mod:`~classify_images.features.dsift`);
3–4. encoding and spatial-pyramid pooling by the configuration's encoder
   (:mod:`~classify_images.coding.encoders`: VQ, soft assignment, sparse coding, LLC, VLAD,
   Fisher vectors, or a registered plug-in), which caches what it needs per image and pools it
   (:meth:`~classify_images.coding.encoders.Encoder.cached_item`,
   :meth:`~classify_images.coding.encoders.Encoder.pool`); then the pyramid levels'
   normalisation and weights (:func:`~classify_images.coding.pooling.weight_pyramid_levels`);
5. normalisation (:class:`~classify_images.coding.normalize.Normalizer`).

Steps 1–4 run through the per-image :class:`~classify_images.pipeline.extraction.stages.StageCache`.
:func:`~classify_images.pipeline.extraction.build.build_feature_set` learns the codebook and fits the
normaliser, then computes every row of the feature set with the extractor; ``predict``
rebuilds the same extractor from the feature set (:meth:`FeatureExtractor.from_feature_set`)
for new images, so a new image gets exactly the vector it would have had in the feature
set.  The extractor's state is plain: the configuration, the encoder's fitted state (a
codebook array, or named arrays such as a PCA + GMM model:
:meth:`~classify_images.coding.encoders.Encoder.to_arrays`) and the normaliser's statistics.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

import numpy as np

from ...coding.codebook import Codebook, codebook_digest
from ...coding.normalize import Normalizer
from ...coding.pooling import weight_pyramid_levels
from ...features.preprocess import DEFAULT_MAX_PIXELS, max_file_bytes
from ...files import describe_file_kind
from ..settings.config import PipelineConfig
from ..settings.dataset import file_fingerprint
from ..settings.plan import FeaturePlan, feature_plan_of
from .stages import FLIP_KEY, StageCache

__all__ = ["FeatureExtractor", "check_image", "readable_fingerprint"]


def readable_fingerprint(path: str, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> tuple[str, str]:
    """``(fingerprint, "")`` of a readable regular file, else ``("", reason)`` (never raises ``OSError``):
    what the path is when it is not a regular file (a FIFO, a device: never opened), a file larger
    than any image within ``max_pixels`` (:func:`~classify_images.features.preprocess.max_file_bytes`:
    not read)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        if os.path.islink(path):
            return "", "dangling symbolic link"
        return "", "file does not exist" if exc.errno == errno.ENOENT else f"cannot read file ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return "", f"not a regular file ({describe_file_kind(info.st_mode)}; only regular files are read)"
    limit = max_file_bytes(max_pixels)
    if limit is not None and info.st_size > limit:
        return "", (
            f"file too large ({info.st_size} bytes; an image within image.max_pixels = {max_pixels} "
            f"is at most {limit} bytes)"
        )
    try:
        return file_fingerprint(path), ""
    except OSError as exc:
        return "", f"cannot read file ({exc.strerror or exc})"


def check_image(cache: StageCache, config: PipelineConfig | FeaturePlan, path: str, fingerprint: str) -> dict[str, Any]:
    """``{"ok": True, "shape": (h, w)}`` or ``{"ok": False, "reason": …}`` for one image under ``config``
    (or its :class:`~classify_images.pipeline.settings.plan.FeaturePlan`): decodable, within
    ``image.max_pixels``, and not smaller than the largest patch once shrunk to ``image.max_side``
    (:func:`~classify_images.pipeline.extraction.stages.check_image`, through ``cache``)."""
    plan = feature_plan_of(config)
    return cache.check_image(path, fingerprint, plan.max_side, plan.smallest_image_side, plan.max_pixels)


class FeatureExtractor:
    """Image → feature vector, with a learnt codebook and a fitted normaliser.

    Parameters
    ----------
    config : PipelineConfig or FeaturePlan
        The pipeline's configuration (tables ``image``, ``sift``, ``codebook``,
        ``pooling``, ``normalization`` are used), or the objects already made of it
        (:func:`~classify_images.pipeline.settings.plan.make_feature_plan`: then nothing is made again).
    codebook : ndarray of float32, shape (K, 128), or dict of ndarray
        The fitted state of the configuration's encoder
        (:meth:`~classify_images.coding.encoders.Encoder.learn`): k-means centres, a
        sparse-coding dictionary, or named arrays (the PCA + GMM model of Fisher vectors).
    normalizer : Normalizer, optional
        Default: an unfitted ``Normalizer(config.normalization.method)``.  A normaliser
        that needs training statistics (``minmax``) must be fitted before
        :meth:`vector` is called; until then :meth:`pooled` gives the vectors to fit it on.
    cache : StageCache, optional
        Per-image stage cache (default: none, every call recomputes).

    Attributes
    ----------
    plan : FeaturePlan
        The configuration's objects: descriptor, encoder, pyramid, normalisation.
    config : PipelineConfig
        The configuration (``plan.config``).
    encoder : Encoder
        The configuration's encoder (``plan.encoder``).
    pyramid : Pyramid
        Levels and pooling function (``[pooling]``).
    codebook_digest : str
        SHA-1 of the codebook's bytes (keys the cached codes).
    n_features : int
        Length of the vectors, the encoder's cell dimension times the pyramid's cells
        (:meth:`~classify_images.coding.encoders.Encoder.dimension`).
    """

    def __init__(
        self,
        config: PipelineConfig | FeaturePlan,
        codebook: Codebook,
        normalizer: Normalizer | None = None,
        *,
        cache: StageCache | None = None,
    ) -> None:
        self.plan = plan = feature_plan_of(config)
        self.config = plan.config
        self.codebook = codebook
        self.normalizer = normalizer if normalizer is not None else plan.normalizer()
        self.cache = cache if cache is not None else StageCache(None, cache_descriptors=False)
        self.codebook_digest = codebook_digest(codebook)
        # Plain values for the cached stage functions (their cache keys).
        self._sift = plan.sift
        self._codebook_params = plan.codebook_table
        self.encoder = plan.encoder
        self.pyramid = plan.pyramid
        self.n_features = self.encoder.dimension(codebook, self.pyramid)

    @classmethod
    def from_feature_set(cls, feature_set: Any, *, cache_dir: str | os.PathLike | None = None) -> FeatureExtractor:
        """The extractor a feature set was built with (its config, codebook and normaliser).

        Parameters
        ----------
        feature_set : FeatureSet
            A loaded feature set (:func:`~classify_images.pipeline.storage.feature_store.load_feature_set`).
        cache_dir : path-like, optional
            Stage cache for the codes of new images (descriptors are not cached).
        """
        return cls(
            feature_plan_of(feature_set.config),
            feature_set.codebook(),
            feature_set.normalizer(),
            cache=StageCache(cache_dir, cache_descriptors=False),
        )

    def with_cache(self, cache: StageCache) -> FeatureExtractor:
        """The same extractor (configuration, codebook, normaliser) reading and filling ``cache``."""
        return FeatureExtractor(self.plan, self.codebook, self.normalizer, cache=cache)

    def check(self, path: str, fingerprint: str) -> dict[str, Any]:
        """``{"ok": True, "shape": (h, w)}`` or ``{"ok": False, "reason": …}`` for one image.

        An image that cannot be decoded, announces more than the config's ``image.max_pixels``
        pixels, or is smaller than the largest patch once shrunk, is not ok (:func:`check_image`).
        """
        return check_image(self.cache, self.plan, path, fingerprint)

    def pooled(self, path: str, fingerprint: str, *, flip: bool = False) -> np.ndarray:
        """The pooled vector of a readable image (float32, ``n_features``), its levels normalised
        and weighted as ``[pooling]`` says, not yet normalised as a whole.

        ``fingerprint`` is the SHA-1 of the file's bytes
        (:func:`~classify_images.pipeline.settings.dataset.file_fingerprint`); it keys the cache.  ``flip``:
        the vector of the image mirrored left-right (its own cache entries:
        :func:`~classify_images.pipeline.extraction.stages.compute_descriptors`).
        """
        sift = {**self._sift, FLIP_KEY: True} if flip else self._sift
        item = self.cache.image_encoding(
            path,
            fingerprint,
            self.plan.max_side,
            sift,
            self.encoder,
            self._codebook_params,
            self.encoder.cache_dependencies(self.pyramid),
            self.codebook_digest,
            self.codebook,
        )
        coder = self.encoder.prepared(self.codebook, self.codebook_digest)
        return self._weight_levels(self.encoder.pool(coder, item, self.pyramid))

    def _weight_levels(self, pooled: np.ndarray) -> np.ndarray:
        """``[pooling] level_normalization`` and ``level_weights`` (unchanged when unset)."""
        plan = self.plan
        if not plan.weights_levels:
            return pooled
        return weight_pyramid_levels(
            pooled,
            self.encoder.cell_dimension(self.codebook),
            list(plan.pyramid.levels),
            plan.level_normalization,
            plan.level_weights,
        )

    def vector(self, path: str, fingerprint: str, *, flip: bool = False) -> np.ndarray:
        """The feature vector of a readable image (``flip``: of its mirror): :meth:`pooled`, then normalised."""
        pooled = self.pooled(path, fingerprint, flip=True) if flip else self.pooled(path, fingerprint)
        return self.normalizer.transform(pooled)[0]

    def transform_images(self, paths: list[str], *, mirrored: bool = False) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """Feature vectors of image files (``mirrored``: of their mirrors); unreadable ones are reported, not raised.

        Returns
        -------
        X : ndarray of float32, shape (n_ok, n_features)
            The rows of the images that could be read, in input order.
        status : list of dict
            Per input path: ``{"path", "ok", "reason"?, "shape"?}``.
        """
        rows, status = [], []
        for path in paths:
            fingerprint, reason = readable_fingerprint(path, self.config.image.max_pixels)
            check = self.check(path, fingerprint) if fingerprint else {"ok": False, "reason": reason}
            status.append({"path": path, **check})
            if check["ok"]:
                rows.append(self.vector(path, fingerprint, flip=mirrored))
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), self.n_features), status
