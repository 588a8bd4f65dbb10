"""A configuration turned, once, into the objects the feature pipeline runs.

A :class:`~classify_images.pipeline.settings.config.PipelineConfig` says *what* to compute, table
by table; the rooms that compute it need objects: the descriptor, the encoder, the spatial
pyramid, the normaliser.  :func:`make_feature_plan` makes them, once, where a configuration
enters the pipeline (a build, a model file or a feature set read back, ``ImageFeatures.fit``),
and a :class:`FeaturePlan` carries them down::

    PipelineConfig ──make_feature_plan──▶ FeaturePlan
        [sift]           descriptor       Descriptor      (features.descriptors.make_descriptor)
        [codebook]       encoder          Encoder         (coding.encoders.make_encoder)
        [pooling]        pyramid          Pyramid         (+ level_normalization, level_weights)
        [normalization]  normalizer()     Normalizer      (a new, unfitted one per call)
        [image]          max_side, max_pixels

The rooms below (fitting, the stages, the extractor, the build, the model file) ask the plan;
none reads the configuration's tables or calls the encoder or descriptor registries again.

The plan also keeps the *plain* tables the cached stages receive (``sift``, ``codebook_table``,
``learning_table``): joblib's cache key is a hash of a stage's arguments, so the stages keep
taking plain values, and these are exactly what :meth:`PipelineConfig.sift_params` and
:meth:`PipelineConfig.codebook_params` gave before — making the objects here moves where they
are made, not what is computed or how it is keyed.  A stage running on a worker (another
process) makes its encoder from the plain table it receives, as before.

How dense rows are stored (``--rows``: float32, float16, PQ) is a build option, not part of the
configuration: the build asks :attr:`FeaturePlan.sparse_rows` when it chooses the shard format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...coding.encoders import Encoder, Pyramid, make_encoder
from ...coding.normalize import Normalizer
from ...features.descriptors import Descriptor, make_descriptor
from .config import AugmentConfig, PipelineConfig

__all__ = ["FeaturePlan", "make_feature_plan", "feature_plan_of"]


@dataclass(frozen=True, eq=False)
class FeaturePlan:
    """The objects one configuration (one channel) turns into: made by :func:`make_feature_plan`.

    Attributes
    ----------
    config : PipelineConfig
        The configuration it was made from (what manifests, model files and hashes record).
    descriptor : Descriptor
        The local descriptor (``[descriptor] kind``; dense SIFT with its ``[sift]`` table by default).
    encoder : Encoder
        The encoder of ``[codebook]``.
    pyramid : Pyramid
        Levels and pooling function of ``[pooling]``.
    normalization : str
        ``[normalization] method`` (:meth:`normalizer` makes the normaliser).
    level_normalization : str
        ``[pooling] level_normalization``: each level's block divided by its norm.
    level_weights : tuple of float or None
        ``[pooling] level_weights`` (None: all 1).
    max_side : int
        ``[image] max_side``: the longer side images are shrunk to.
    max_pixels : int
        ``[image] max_pixels``: images announcing more pixels are skipped undecoded.
    smallest_image_side : int
        The shortest image side, px, that yields a descriptor (the largest patch for dense SIFT; an
        image smaller than it once shrunk has no row).
    n_samples, sample_seed : int
        ``[codebook] n_samples`` and ``seed``: the descriptor sample the codebook learns from.
    cache_descriptors : bool
        ``[sift] cache_descriptors``: keep descriptors in the stage cache.
    augment : AugmentConfig
        ``[augment]``: horizontal flips.
    sift : dict
        The descriptor's plain table the cached stages take (their cache key): ``[sift]`` for
        dense SIFT (:meth:`~classify_images.pipeline.settings.config.PipelineConfig.descriptor_params`).
    codebook_table : dict
        The plain ``[codebook]`` table the encoding stage takes (its cache key).
    learning_table : dict
        The plain ``[codebook]`` table of the codebook learner's cache key (without the keys that
        change the coding only: :attr:`~classify_images.coding.encoders.Encoder.coding_only_keys`).
    """

    config: PipelineConfig
    descriptor: Descriptor
    encoder: Encoder
    pyramid: Pyramid
    normalization: str
    level_normalization: str
    level_weights: tuple[float, ...] | None
    max_side: int
    max_pixels: int
    smallest_image_side: int
    n_samples: int
    sample_seed: int
    cache_descriptors: bool
    augment: AugmentConfig
    sift: dict[str, Any]
    codebook_table: dict[str, Any]
    learning_table: dict[str, Any]

    @property
    def kind(self) -> str:
        """The encoder's ``codebook.kind`` (for messages and manifests)."""
        return self.encoder.kind

    @property
    def codebook_size(self) -> int:
        """Words ``K`` the codebook is asked to have (``[codebook] size``)."""
        return self.encoder.size

    @property
    def descriptor_length(self) -> int:
        """Length of one descriptor (the codebook's second dimension)."""
        return self.descriptor.length

    @property
    def sparse_rows(self) -> bool:
        """Whether the encoder's rows are sparse enough to be stored as CSR shards."""
        return self.encoder.sparse_rows

    @property
    def weights_levels(self) -> bool:
        """Whether pooled rows get per-level normalisation or weights (``[pooling]``)."""
        return self.level_normalization != "none" or self.level_weights is not None

    def normalizer(self) -> Normalizer:
        """A new, unfitted normaliser of ``[normalization]`` (``minmax`` must be fitted on training rows)."""
        return Normalizer(self.normalization)

    def fitted_normalizer(self, statistics: Any) -> Normalizer:
        """The normaliser of ``[normalization]`` with its stored training statistics (None for a
        per-vector method): :meth:`~classify_images.coding.normalize.Normalizer.from_statistics`."""
        return Normalizer.from_statistics(self.normalization, statistics)


def make_feature_plan(config: PipelineConfig) -> FeaturePlan:
    """The objects of ``config``: its descriptor, encoder, pyramid and normalisation (:class:`FeaturePlan`).

    The one place a pipeline configuration is turned into objects; call it where the configuration
    enters (a build, a model file read back) and hand the plan down.

    Parameters
    ----------
    config : PipelineConfig
        A checked configuration (:func:`~classify_images.pipeline.settings.config.load_config`).

    Returns
    -------
    FeaturePlan
    """
    sift = config.descriptor_params()  # dense SIFT's [sift] table, or a plug-in's [descriptor] table
    codebook_table = config.codebook_params()
    encoder = make_encoder(codebook_table)
    # the learner's key: the same table without the keys that change the coding only
    # (what ``config.codebook_params(learning=True)`` gives, without asking the registry again)
    learning_table = {key: value for key, value in codebook_table.items() if key not in encoder.coding_only_keys}
    pooling = config.pooling
    descriptor = make_descriptor(sift)
    return FeaturePlan(
        config=config,
        descriptor=descriptor,
        encoder=encoder,
        pyramid=Pyramid(tuple(pooling.levels), pooling.method),
        normalization=config.normalization.method,
        level_normalization=pooling.level_normalization,
        level_weights=pooling.level_weights,
        max_side=config.image.max_side,
        max_pixels=config.image.max_pixels,
        smallest_image_side=descriptor.smallest_side,
        n_samples=config.codebook.n_samples,
        sample_seed=config.codebook.seed,
        cache_descriptors=config.sift.cache_descriptors,
        augment=config.augment,
        sift=sift,
        codebook_table=codebook_table,
        learning_table=learning_table,
    )


def feature_plan_of(config: PipelineConfig | FeaturePlan) -> FeaturePlan:
    """``config`` itself when it is a :class:`FeaturePlan`, else :func:`make_feature_plan` of it: what
    the public functions that used to take a configuration call, so that both keep working."""
    return config if isinstance(config, FeaturePlan) else make_feature_plan(config)
