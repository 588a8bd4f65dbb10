"""Pipeline configuration: TOML files read into frozen dataclasses.

A configuration has one table per stage of the data flow, in the order the data goes
through them, each read into its own frozen dataclass::

    [dataset]        DatasetConfig        keep_background, train_per_class, test_per_class, seed
    [image]          ImageConfig          max_side, max_pixels
    [descriptor]     DescriptorConfig     kind (default "sift"), and another descriptor's own keys
    [sift]           SiftConfig           patch_sizes, step, smooth, contrast_threshold, cache_descriptors,
                                          smoothing, window_size, bin_centres, grid_alignment,
                                          low_contrast, root_sift, color
    [codebook]       CodebookConfig       kind, size, n_samples, lambda, n_iter, seed, n_neighbors, pca_dims,
                                          assignment, soft_neighbors, soft_beta
    [pooling]        PoolingConfig        method, levels, level_normalization, level_weights
    [normalization]  NormalizationConfig  method
    [augment]        AugmentConfig        flip_train, flip_test

and :class:`PipelineConfig` holds the eight.  ``[descriptor]`` at its default (dense SIFT, whose
keys are ``[sift]``) is left out of the plain form, so every configuration that does not set it
keeps its hashes, cache keys and manifests.  Every field has a default; a file or a
command-line flag overrides some of them.  The allowed values come from the module that
uses them: pooling methods from :data:`~classify_images.coding.pooling.POOLING_METHODS`,
normalisations from :data:`~classify_images.coding.normalize.NORMALIZATIONS`, encoder
kinds from the registry (:func:`~classify_images.coding.encoders.encoder_kinds`) and each
encoder's own ``[codebook]`` keys from that encoder (its ``Params``), the patch-size and
step rules from :func:`~classify_images.features.dsift.validate_patch_sizes` and
:func:`~classify_images.features.dsift.validate_step`, the image-size rule from
:func:`~classify_images.features.preprocess.validate_max_side`.

An unknown table or key, or a value of the wrong type or outside its allowed values, is
a :class:`ConfigError` whose one-line message names the key and what is allowed.
Ready-made files live in ``configs/`` and can be named without their extension
(``--config scspm``).

The plain form of a configuration (:meth:`PipelineConfig.to_dict`: ``{table: {key:
value}}``, lists for sequences) is what the feature-set manifest records, what
:func:`stage_hash` digests and what the cached stage functions receive.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...coding.encoders import DEFAULT_KIND, EncoderParameterError, encoder_class, encoder_kinds
from ...coding.normalize import NORMALIZATIONS
from ...coding.pooling import LEVEL_NORMALIZATIONS, POOLING_METHODS, validate_level_weights, validate_levels
from ...errors import ClassifyImagesError
from ...features.colour import COLOR_SPACES, GRAY
from ...features.descriptors import DEFAULT_KIND as DEFAULT_DESCRIPTOR
from ...features.descriptors import descriptor_class, descriptor_kinds, make_descriptor
from ...features.dsift import (
    BIN_CENTRES,
    GRID_ALIGNMENTS,
    LOW_CONTRAST_MODES,
    SMOOTHING_RULES,
    validate_patch_sizes,
    validate_step,
)
from ...features.preprocess import DEFAULT_MAX_PIXELS, OPENCV_MAX_PIXELS, validate_max_side
from ...files import FileTooLargeError, NotRegularFileError, read_regular_bytes
from ...validation import (
    BOOLEAN,
    MAX_INT,
    Choices,
    Integral,
    Interval,
    Options,
    ParameterValueError,
    Real,
    check_value,
)
from .defaults import named_configs

__all__ = [
    "ConfigError",
    "DatasetConfig",
    "ImageConfig",
    "DescriptorConfig",
    "SiftConfig",
    "CodebookConfig",
    "PoolingConfig",
    "NormalizationConfig",
    "AugmentConfig",
    "FLIP_TEST_MODES",
    "PipelineConfig",
    "TABLES",
    "load_config",
    "validate_config",
    "stage_hash",
    "named_configs",
    "CLASSIFIER_TABLE",
    "classifier_table",
    "CHANNEL_TABLE",
    "ChannelConfig",
    "ChannelsConfig",
    "read_any_config",
]


class ConfigError(ClassifyImagesError, ValueError):
    """A configuration file or value is invalid (user error)."""


# --- value checks: each returns the value to store or raises ConfigError naming ``key`` ---
# The allowed values are declared with scikit-learn's constraints, as the classifiers declare
# theirs (:mod:`classify_images.validation`); a refusal reads ``<file>: <table>.<key> = <value>:
# expected <what is allowed>``.

_Check = Callable[[str, Any], Any]

#: Largest seed NumPy's legacy ``RandomState`` (scikit-learn's ``random_state``) accepts.
MAX_SEED = 2**32 - 1


def _constrained(*constraints: Any, convert: Callable[[Any], Any] | None = None) -> _Check:
    """The check of a setting whose allowed values are ``constraints`` (scikit-learn's:
    :func:`~classify_images.validation.check_value`); ``convert`` maps the accepted value to the
    one stored."""

    def check(key: str, value: Any) -> Any:
        try:
            value = check_value(key, value, constraints)
        except ParameterValueError as exc:
            raise ConfigError(str(exc)) from None
        return value if convert is None else convert(value)

    return check


def _count(low: int, high: int = MAX_INT) -> Interval:
    """An integer in ``[low, high]`` (:data:`~classify_images.validation.MAX_INT`: no practical bound)."""
    return Interval(Integral, low, high, closed="both")


#: A finite number ≥ 0.
_NON_NEGATIVE = Interval(Real, 0, None, closed="left")
#: ``true`` or ``false``.
_bool = _constrained(BOOLEAN)
#: The TOML shape of a sequence setting: an integer or a list (its items are checked after).
_int_or_list = _constrained(Interval(Integral, None, None, closed="neither"), list, tuple)


def _no_cap(value: Any) -> Any:
    """``0`` and ``"all"`` of a capped count mean no cap (stored as None)."""
    return None if value is None or value == "all" or value == 0 else value


def _choice(allowed: tuple[str, ...]) -> _Check:
    return _constrained(Choices(allowed))


def _owned_by(rule: Callable[[Any], Any]) -> _Check:
    """A check done by the module that owns the value (its ``ValueError`` names the reason)."""

    def check(key: str, value: Any) -> Any:
        try:
            return rule(value)
        except (ValueError, TypeError, OverflowError) as exc:
            raise ConfigError(f"{key} = {value!r}: {exc}") from None

    return check


def _all_of(*checks: _Check) -> _Check:
    def check(key: str, value: Any) -> Any:
        for one in checks:
            value = one(key, value)
        return value

    return check


def _setting(default: Any, check: _Check, *, key: str | None = None, semantic: bool | str = True) -> Any:
    """A config field: its default, its check, its TOML key (when not the field name), and
    whether it changes any computed number (``semantic=False``: left out of hashes;
    ``"unless-default"``: left out while it has its default, so that adding the key
    keeps the hashes and caches of every existing configuration)."""
    return field(default=default, metadata={"check": check, "key": key, "semantic": semantic})


#: The pipeline's floor on ``image.max_side`` (the default patch, 16 px, must fit).
MIN_MAX_SIDE = 16


# --- the tables ---


@dataclass(frozen=True)
class DatasetConfig:
    """``[dataset]``: which images, and the seeded train/test split."""

    #: keep Caltech-101's BACKGROUND_Google class
    keep_background: bool = _setting(False, _bool)
    #: training images per class
    train_per_class: int = _setting(15, _constrained(_count(1)))
    #: cap on test images per class (None: all)
    test_per_class: int | None = _setting(
        50, _constrained(_count(1), None, Choices(("all",)), Options(int, {0}), convert=_no_cap)
    )
    #: seed of the split
    seed: int = _setting(0, _constrained(_count(0, MAX_SEED)))
    #: fraction of each class for training (``--protocol half``: 0.5), instead of ``train_per_class``
    train_fraction: float | None = _setting(
        None, _constrained(Interval(Real, 0, 1, closed="neither"), None), semantic="unless-default"
    )


@dataclass(frozen=True)
class ImageConfig:
    """``[image]``: decoding."""

    #: longer side after shrinking, px
    max_side: int = _setting(300, _all_of(_constrained(_count(MIN_MAX_SIDE)), _owned_by(validate_max_side)))
    #: images announcing more pixels (width × height) are skipped without being decoded
    #: (a safety limit, left out of the config hash: changing only it does not rebuild a
    #: feature set, it keys the image checks in the stage cache)
    max_pixels: int = _setting(DEFAULT_MAX_PIXELS, _constrained(_count(1, OPENCV_MAX_PIXELS)), semantic=False)


def _descriptor_kind(key: str, value: Any) -> Any:
    """A registered descriptor kind (:func:`~classify_images.features.descriptors.descriptor_kinds`)."""
    return _choice(descriptor_kinds())(key, value)


@dataclass(frozen=True)
class DescriptorConfig:
    """``[descriptor]``: the local descriptor (:mod:`~classify_images.features.descriptors`).

    ``kind = "sift"`` (the default) takes its keys from ``[sift]``; another registered kind
    takes its own keys from this table, beside ``kind``, checked by the descriptor
    (:meth:`~classify_images.features.descriptors.Descriptor.check_params`) and held in
    :attr:`options`.
    """

    #: the descriptor: "sift" (dense SIFT, the [sift] table) or a registered plug-in
    kind: str = _setting(DEFAULT_DESCRIPTOR, _descriptor_kind, semantic="unless-default")
    #: the descriptor's own keys, checked (empty for dense SIFT)
    options: Any = field(default=None, metadata={"check": None, "key": None, "semantic": True, "table": False})

    def __post_init__(self) -> None:
        if self.options is None:
            object.__setattr__(self, "options", {})

    @property
    def is_default(self) -> bool:
        """Dense SIFT (left out of the plain form: its keys are ``[sift]``)."""
        return self.kind == DEFAULT_DESCRIPTOR and not self.options


@dataclass(frozen=True)
class SiftConfig:
    """``[sift]``: dense SIFT."""

    #: patch sides, px
    patch_sizes: tuple[int, ...] = _setting((16,), _all_of(_int_or_list, _owned_by(validate_patch_sizes)))
    #: grid step, px
    step: int = _setting(8, _owned_by(validate_step))
    #: Gaussian smoothing per patch size
    smooth: bool = _setting(True, _bool)
    #: raw descriptor norm at or below which a patch is low-contrast (see low_contrast)
    contrast_threshold: float = _setting(1.0, _constrained(_NON_NEGATIVE))
    #: keep descriptors in the stage cache
    cache_descriptors: bool = _setting(True, _bool, semantic=False)
    #: smoothing sigma rule: "dsift" sqrt((s/6)² − ¼) or "phow" s/6 (s = patch / 4)
    smoothing: str = _setting("dsift", _choice(SMOOTHING_RULES), semantic="unless-default")
    #: VLFeat's Gaussian bin weights (vl_phow 1.5); 0: every bin weighs 1
    window_size: float = _setting(0.0, _constrained(_NON_NEGATIVE), semantic="unless-default")
    #: spatial-bin centres: "patch" (half-integers for even bins) or "integer" (VLFeat)
    bin_centres: str = _setting("patch", _choice(BIN_CENTRES), semantic="unless-default")
    #: grids of the patch sizes: "corner" (all at 0) or "centre" (shared centres, vl_phow)
    grid_alignment: str = _setting("corner", _choice(GRID_ALIGNMENTS), semantic="unless-default")
    #: low-contrast patches: "keep" un-normalised, "zero" (vl_phow) or "drop"
    low_contrast: str = _setting("keep", _choice(LOW_CONTRAST_MODES), semantic="unless-default")
    #: RootSIFT (Hellinger) descriptors
    root_sift: bool = _setting(False, _bool, semantic="unless-default")
    #: "gray", or dense SIFT per channel of a colour space, 3 × 128 per keypoint:
    #: "opponent", "hsv", "rgb", "c" (C-SIFT), "lab" (CIE L*a*b*) (van de Sande et al. 2010;
    #: :mod:`~classify_images.features.colour`)
    color: str = _setting(GRAY, _choice(COLOR_SPACES), semantic="unless-default")


def _encoder_kind(key: str, value: Any) -> Any:
    """A registered encoder kind (:func:`~classify_images.coding.encoders.encoder_kinds`)."""
    return _choice(encoder_kinds())(key, value)


@dataclass(frozen=True)
class CodebookConfig:
    """``[codebook]``: the encoder and the codebook it learns from a sample of training descriptors.

    The keys common to every encoder are fields here; the encoder's own keys (``n_neighbors``
    of LLC, ``pca_dims`` of Fisher vectors, ``assignment``, ``soft_neighbors``, ``soft_beta``
    of k-means VQ, or a plug-in's) are its parameter dataclass
    (:attr:`~classify_images.coding.encoders.Encoder.Params`), held in :attr:`options` and
    checked by the encoder; in the TOML table and the plain form they stand beside the
    common keys, and one at its default is left out of the hashes.
    """

    #: the encoder (:mod:`~classify_images.coding.encoders`): k-means VQ, sparse coding, LLC, VLAD, Fisher vectors, …
    kind: str = _setting(DEFAULT_KIND, _encoder_kind)
    #: number of words K (codewords, atoms, Gaussians)
    size: int = _setting(1024, _constrained(_count(2)))
    #: training descriptors sampled to learn it
    n_samples: int = _setting(200_000, _constrained(_count(100)))
    #: sparsity weight λ of sparse coding (a key of every kind, for the config hashes of existing feature sets)
    lambda_: float = _setting(0.15, _constrained(_NON_NEGATIVE), key="lambda")
    #: iterations of the learner
    n_iter: int = _setting(100, _constrained(_count(1)))
    #: seed of the sample and the learner
    seed: int = _setting(0, _constrained(_count(0, MAX_SEED)))
    #: the encoder's own keys (its ``Params``; default: the encoder's defaults)
    options: Any = field(default=None, metadata={"check": None, "key": None, "semantic": True, "table": False})

    def __post_init__(self) -> None:
        if self.options is None:
            object.__setattr__(self, "options", encoder_class(self.kind).Params())

    def __getattr__(self, name: str) -> Any:
        """The encoder's own keys read as attributes (``config.codebook.pca_dims``)."""
        options = self.__dict__.get("options")
        if options is not None and name in {f.name for f in dataclasses.fields(options)}:
            return getattr(options, name)
        raise AttributeError(f"[codebook] has no key {name!r} for kind {self.__dict__.get('kind')!r}")

    def own_items(self, *, semantic_only: bool = False) -> dict[str, Any]:
        """The encoder's own keys and values; ``semantic_only``: those not at their default."""
        return {
            f.name: getattr(self.options, f.name)
            for f in dataclasses.fields(self.options)
            if not semantic_only or getattr(self.options, f.name) != f.default
        }


@dataclass(frozen=True)
class PoolingConfig:
    """``[pooling]``: spatial-pyramid pooling."""

    #: pooling function
    method: str = _setting("average", _choice(POOLING_METHODS))
    #: pyramid levels: L (L × L cells) or "RxC" (R rows × C columns, e.g. "3x1"), at most
    #: ``MAX_PYRAMID_LEVEL`` rows and columns
    levels: tuple[int | str, ...] = _setting((1, 2, 4), _owned_by(validate_levels))
    #: each level's block divided by its own norm before level_weights: "none", "l1", "l2"
    level_normalization: str = _setting("none", _choice(LEVEL_NORMALIZATIONS), semantic="unless-default")
    #: weight of each level's block, one number > 0 per level (unset: all 1)
    level_weights: tuple[float, ...] | None = _setting(
        None, _owned_by(validate_level_weights), semantic="unless-default"
    )


@dataclass(frozen=True)
class NormalizationConfig:
    """``[normalization]``: normalisation of the pooled vectors."""

    #: normalisation method
    method: str = _setting("l1", _choice(NORMALIZATIONS))


#: ``[augment] flip_test``: decision values of the image alone, or averaged with its mirror's.
FLIP_TEST_MODES = ("none", "average")


@dataclass(frozen=True)
class AugmentConfig:
    """``[augment]``: horizontal flips (Chatfield et al., BMVC 2014, section 2.1.3).

    Both keys are left out of the hashes at their defaults, so a configuration without
    ``[augment]`` keeps its config hash and cache keys.  Either one set stores the mirrored
    row of every image beside its row (:mod:`~classify_images.pipeline.extraction.build`).
    """

    #: train on the training images and on their mirrors (one more row per training image)
    flip_train: bool = _setting(False, _bool, semantic="unless-default")
    #: "average": the decision values of an image and of its mirror, averaged, at test time
    flip_test: str = _setting("none", _choice(FLIP_TEST_MODES), semantic="unless-default")

    @property
    def mirrors(self) -> bool:
        """Whether the feature set stores the mirrored rows (either key set)."""
        return self.flip_train or self.flip_test != "none"


def _toml_key(f: dataclasses.Field) -> str:
    return f.metadata["key"] or f.name


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _in_hash(table: Any, f: dataclasses.Field) -> bool:
    semantic = f.metadata["semantic"]
    if semantic == "unless-default":
        return getattr(table, f.name) != f.default
    return bool(semantic)


def _table_dict(table: Any, *, semantic_only: bool = False) -> dict[str, Any]:
    plain = {
        _toml_key(f): _plain(getattr(table, f.name))
        for f in dataclasses.fields(table)
        if f.metadata.get("table", True) and (not semantic_only or _in_hash(table, f))
    }
    if isinstance(table, CodebookConfig):  # the encoder's own keys
        plain.update({key: _plain(value) for key, value in table.own_items(semantic_only=semantic_only).items()})
    if isinstance(table, DescriptorConfig):  # the descriptor's own keys
        plain.update({key: _plain(value) for key, value in table.options.items()})
    return plain


def _read_table(cls: type, name: str, values: dict[str, Any], source: str) -> Any:
    if cls is CodebookConfig:
        return _read_codebook(values, source)
    if cls is DescriptorConfig:
        return _read_descriptor(values, source)
    fields = {_toml_key(f): f for f in dataclasses.fields(cls)}
    for key in values:
        if key not in fields:
            raise ConfigError(f"{source}: unknown key {name}.{key}; known keys of [{name}]: {', '.join(fields)}")
    return cls(
        **{
            f.name: f.metadata["check"](f"{source}: {name}.{key}", values.get(key, f.default))
            for key, f in fields.items()
        }
    )


def _read_codebook(values: dict[str, Any], source: str) -> CodebookConfig:
    """``[codebook]``: the common keys, then the encoder's own keys, checked by the encoder.

    Another encoder's key is refused unless unset or at its default (older manifests record
    every kind's keys)."""
    common = {_toml_key(f): f for f in dataclasses.fields(CodebookConfig) if f.metadata.get("table", True)}
    checked = {
        f.name: f.metadata["check"](f"{source}: codebook.{key}", values.get(key, f.default))
        for key, f in common.items()
    }
    encoder = encoder_class(checked["kind"])
    own = encoder.own_keys()
    for key, value in values.items():
        if key in common or key in own:
            continue
        owners = [kind for kind in encoder_kinds() if key in encoder_class(kind).own_keys()]
        if not owners:
            known = ", ".join([*common, *own])
            raise ConfigError(
                f"{source}: unknown key codebook.{key}; known keys of [codebook] (kind {checked['kind']!r}): {known}"
            )
        default = {f.name: f.default for f in dataclasses.fields(encoder_class(owners[0]).Params)}[key]
        if value is not None and value != default:
            raise ConfigError(
                f"{source}: codebook.{key} applies to codebook.kind = {owners[0]!r} only "
                f"(kind is {checked['kind']!r}); remove it"
            )
    try:
        options = encoder.check_params({key: values.get(key) for key in own}, checked["size"])
    except EncoderParameterError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return CodebookConfig(**checked, options=options)


def _read_descriptor(values: dict[str, Any], source: str) -> DescriptorConfig:
    """``[descriptor]``: ``kind``, then the descriptor's own keys, checked by the descriptor."""
    kind = _descriptor_kind(f"{source}: descriptor.kind", values.get("kind", DEFAULT_DESCRIPTOR))
    try:
        options = descriptor_class(kind).check_params({k: v for k, v in values.items() if k != "kind"})
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return DescriptorConfig(kind=kind, options=dict(options))


@dataclass(frozen=True)
class PipelineConfig:
    """The whole configuration: one field per TOML table."""

    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    descriptor: DescriptorConfig = field(default_factory=DescriptorConfig)
    sift: SiftConfig = field(default_factory=SiftConfig)
    codebook: CodebookConfig = field(default_factory=CodebookConfig)
    pooling: PoolingConfig = field(default_factory=PoolingConfig)
    normalization: NormalizationConfig = field(default_factory=NormalizationConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, source: str = "config") -> PipelineConfig:
        """Read and check ``{table: {key: value}}`` (missing keys take their defaults).

        Raises
        ------
        ConfigError
            Unknown table or key, wrong type, value outside the allowed ones.
        """
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: expected tables [dataset], [sift], …")
        for name, values in raw.items():
            if name not in _ALL_TABLES:
                raise ConfigError(f"{source}: unknown table [{name}]; known tables: {', '.join(_ALL_TABLES)}")
            if not isinstance(values, dict):
                raise ConfigError(f"{source}: [{name}] must be a table of key = value")
        config = cls(
            **{name: _read_table(table, name, raw.get(name, {}), source) for name, table in _ALL_TABLES.items()}
        )
        _check_level_weights(config.pooling, source)
        if (
            not config.descriptor.is_default
            and dataclasses.replace(config.sift, cache_descriptors=True) != SiftConfig()
        ):
            raise ConfigError(
                f"{source}: [sift] applies to descriptor.kind = 'sift' only (kind is "
                f"{config.descriptor.kind!r}); give the descriptor's keys in [descriptor] and remove [sift]'s "
                "(except cache_descriptors)"
            )
        if config.sift.color != GRAY and config.sift.low_contrast == "drop":
            raise ConfigError(
                f"{source}: sift.low_contrast = 'drop' cannot be used with sift.color = "
                f"{config.sift.color!r} (each channel would drop different patches); use 'keep' or 'zero'"
            )
        return config

    def to_dict(self, *, semantic_only: bool = False) -> dict[str, dict[str, Any]]:
        """The plain form ``{table: {key: value}}`` (lists for sequences).

        ``semantic_only`` leaves out the keys that change no computed number
        (``sift.cache_descriptors``), and ``[augment]`` when it is at its defaults (so that a
        configuration without it keeps its hashes).  ``[descriptor]`` is left out whenever it is
        at its default (dense SIFT), in both forms.
        """
        tables = {name: _table_dict(getattr(self, name), semantic_only=semantic_only) for name in _ALL_TABLES}
        if semantic_only and not tables["augment"]:
            del tables["augment"]
        if self.descriptor.is_default:
            del tables["descriptor"]
        return tables

    def codebook_params(self, *, learning: bool = False) -> dict[str, Any]:
        """The ``[codebook]`` table as the encoder and the cached stages take it: the common
        keys, and the encoder's own keys that are not at their defaults.

        With ``learning`` (the codebook learner's key), the keys the encoder declares as changing
        the coding but not the codebook (``coding_only_keys``) are left out, so that, for
        example, hard and soft assignment share a codebook.
        """
        dropped = encoder_class(self.codebook.kind).coding_only_keys if learning else ()
        return {
            key: value for key, value in _table_dict(self.codebook, semantic_only=True).items() if key not in dropped
        }

    def sift_params(self) -> dict[str, Any]:
        """The ``[sift]`` table as the dense-SIFT stages take it (semantic keys only)."""
        return _table_dict(self.sift, semantic_only=True)

    def descriptor_params(self) -> dict[str, Any]:
        """The descriptor's plain table as the stages take it
        (:func:`~classify_images.features.descriptors.make_descriptor`): :meth:`sift_params` for
        dense SIFT (its cache keys unchanged), else ``{"kind": ..., **own keys}``."""
        if self.descriptor.kind == DEFAULT_DESCRIPTOR:
            return self.sift_params()
        return _table_dict(self.descriptor, semantic_only=True)  # kind (not the default) and own keys

    def smallest_image_side(self) -> int:
        """The shortest image side, px, that yields a descriptor (the largest SIFT patch for
        dense SIFT; :attr:`~classify_images.features.descriptors.Descriptor.smallest_side`)."""
        return make_descriptor(self.descriptor_params()).smallest_side


def _check_level_weights(pooling: PoolingConfig, source: str) -> None:
    """``pooling.level_weights`` has one weight per pyramid level."""
    if pooling.level_weights is not None and len(pooling.level_weights) != len(pooling.levels):
        raise ConfigError(
            f"{source}: pooling.level_weights has {len(pooling.level_weights)} values for "
            f"{len(pooling.levels)} pooling.levels: give one weight per level"
        )


#: Every table a configuration may hold, by TOML name, in data-flow order.
_ALL_TABLES: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(PipelineConfig)}
#: The tables of every configuration's plain form, by TOML name, in data-flow order; ``[descriptor]``
#: joins them only when it selects another descriptor than dense SIFT (:meth:`PipelineConfig.to_dict`).
TABLES: dict[str, type] = {name: table for name, table in _ALL_TABLES.items() if name != "descriptor"}


#: The array of tables of a multi-channel configuration (``[[channel]]``).
CHANNEL_TABLE = "channel"
#: The tables a ``[[channel]]`` table holds (its descriptor, encoder, pyramid, normalisation);
#: ``[dataset]`` and ``[image]`` stay at the top, shared by every channel (one split, one decode size).
CHANNEL_TABLES = ("sift", "codebook", "pooling", "normalization")
#: Channel names: a letter, then letters, digits, ``_`` or ``-`` (they name columns and arrays).
_CHANNEL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class ChannelConfig:
    """One ``[[channel]]`` table: a name, a weight, and the channel's whole configuration (the
    shared ``[dataset]`` and ``[image]`` tables with its own ``[sift]``, ``[codebook]``,
    ``[pooling]``, ``[normalization]``), exactly the :class:`PipelineConfig` of the single-channel
    file with those tables, so that its stage-cache keys are that file's."""

    name: str
    weight: float
    config: PipelineConfig

    def to_dict(self, *, semantic_only: bool = False) -> dict[str, Any]:
        plain = self.config.to_dict(semantic_only=semantic_only)
        return {"name": self.name, "weight": self.weight, **{table: plain[table] for table in CHANNEL_TABLES}}


@dataclass(frozen=True)
class ChannelsConfig:
    """A multi-channel configuration: ``[dataset]``, ``[image]`` and one or more ``[[channel]]`` tables::

        [dataset]
        train_per_class = 100
        [[channel]]
        name = "fv"
        weight = 1.0
        [channel.sift]
        step = 4
        [channel.codebook]
        kind = "fisher"
        [[channel]]
        name = "scspm"
        [channel.codebook]
        kind = "sparse"

    A feature set built from it holds, per image, the concatenation of its channels' rows
    (:mod:`~classify_images.pipeline.extraction.channels`).
    """

    channels: tuple[ChannelConfig, ...]

    @property
    def dataset(self) -> DatasetConfig:
        return self.channels[0].config.dataset

    @property
    def image(self) -> ImageConfig:
        return self.channels[0].config.image

    @property
    def augment(self) -> AugmentConfig:
        """No flips: ``[augment]`` is not read with ``[[channel]]`` tables (not implemented yet)."""
        return AugmentConfig()

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, source: str = "config") -> ChannelsConfig:
        """Read and check ``{"dataset": …, "image": …, "channel": [{name, weight, sift, …}, …]}``.

        Raises
        ------
        ConfigError
            A table other than ``[dataset]``, ``[image]`` at the top, a channel without a valid
            unique name, an unknown key, a bad weight, a normalisation fitted on training rows
            (``minmax``: not per channel yet), or any error of a channel's own tables.
        """
        entries = raw.get(CHANNEL_TABLE)
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            raise ConfigError(f"{source}: [[{CHANNEL_TABLE}]] must be one or more tables (write [[channel]] lines)")
        misplaced = sorted(set(raw) - {"dataset", "image", CHANNEL_TABLE})
        if misplaced:
            raise ConfigError(
                f"{source}: [{misplaced[0]}] cannot stand beside [[channel]] tables: put it inside each "
                f"[[channel]] as [channel.{misplaced[0]}]"
                if misplaced[0] in CHANNEL_TABLES
                else f"{source}: unknown table [{misplaced[0]}]; known tables: dataset, image, [[channel]]"
            )
        shared = {table: raw[table] for table in ("dataset", "image") if table in raw}
        channels, names = [], set()
        for number, entry in enumerate(entries, 1):
            name = entry.get("name")
            if not isinstance(name, str) or not name or not name[0].isalpha() or set(name) - _CHANNEL_NAME_CHARS:
                raise ConfigError(
                    f"{source}: channel {number}: name = {name!r}: give each [[channel]] a name of "
                    "letters, digits, '_' or '-', starting with a letter"
                )
            if name in names:
                raise ConfigError(f"{source}: two channels are named {name!r}: give each a name of its own")
            names.add(name)
            where = f"{source}: channel {name!r}"
            unknown = sorted(set(entry) - {"name", "weight", *CHANNEL_TABLES})
            if unknown:
                raise ConfigError(
                    f"{where}: unknown key {unknown[0]!r}; a [[channel]] holds name, weight and the "
                    f"tables {', '.join(CHANNEL_TABLES)}"
                )
            weight = _constrained(_NON_NEGATIVE)(f"{where}: weight", entry.get("weight", 1.0))
            if weight <= 0:
                raise ConfigError(f"{where}: weight = {weight}: expected a number > 0")
            config = PipelineConfig.from_dict(
                {**shared, **{t: entry[t] for t in CHANNEL_TABLES if t in entry}}, source=where
            )
            if config.normalization.method == "minmax":
                raise ConfigError(
                    f"{where}: normalization.method = 'minmax' is fitted on training rows, not "
                    "available in a [[channel]] yet: use a per-vector normalisation (l1, l2, power)"
                )
            channels.append(ChannelConfig(name, weight, config))
        return cls(tuple(channels))

    def to_dict(self, *, semantic_only: bool = False) -> dict[str, Any]:
        """The plain form: ``[dataset]``, ``[image]`` and the list of channels (:meth:`ChannelConfig.to_dict`)."""
        plain = self.channels[0].config.to_dict(semantic_only=semantic_only)
        return {
            "dataset": plain["dataset"],
            "image": plain["image"],
            CHANNEL_TABLE: [channel.to_dict(semantic_only=semantic_only) for channel in self.channels],
        }


def read_any_config(raw: dict[str, Any], *, source: str = "config") -> PipelineConfig | ChannelsConfig:
    """A plain configuration read as :class:`ChannelsConfig` when it has ``[[channel]]`` tables,
    else as :class:`PipelineConfig`."""
    if isinstance(raw, dict) and CHANNEL_TABLE in raw:
        return ChannelsConfig.from_dict(raw, source=source)
    return PipelineConfig.from_dict(raw, source=source)


def validate_config(config: dict[str, Any], *, source: str = "config") -> PipelineConfig:
    """Read ``{table: {key: value}}`` over the defaults (:meth:`PipelineConfig.from_dict`)."""
    return PipelineConfig.from_dict(config, source=source)


#: Bound on a config file's size, checked before it is read (``--config /dev/zero`` would never end).
MAX_CONFIG_BYTES = 2**20


def cap_received_limits(raw: Any, source: str) -> Any:
    """The plain config ``raw`` (``{table: {key: value}}``) read from a file the user received (a
    model): a safety limit it carries may tighten the library's guard, never loosen it —
    ``image.max_pixels`` above :data:`DEFAULT_MAX_PIXELS` becomes the default, with one warning
    line naming the file (a model asking for 10¹² pixels would decode 2 GB images)."""
    image = raw.get("image") if isinstance(raw, dict) else None
    asked = image.get("max_pixels") if isinstance(image, dict) else None
    if not isinstance(asked, int) or isinstance(asked, bool) or asked <= DEFAULT_MAX_PIXELS:
        return raw
    import warnings

    warnings.warn(
        f"{source} raises image.max_pixels to {asked}; the default {DEFAULT_MAX_PIXELS} is kept "
        "(a limit read from a received file cannot lift the guard; larger images are skipped)",
        stacklevel=2,
    )
    return {**raw, "image": {**image, "max_pixels": DEFAULT_MAX_PIXELS}}


def _read_toml(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    file = Path(path)
    if not file.exists():
        shipped = named_configs()
        if str(path) not in shipped:
            names = ", ".join(sorted(shipped))
            raise ConfigError(f"config file {path} does not exist (ready-made configs: {names})")
        file = shipped[str(path)]
    if file.is_dir():
        raise ConfigError(f"config {path} is a folder, not a file: give a TOML file (or a ready-made config by name)")
    try:
        text = read_regular_bytes(file, max_bytes=MAX_CONFIG_BYTES).decode("utf-8")
        return tomllib.loads(text), str(file)
    except NotRegularFileError as exc:
        raise ConfigError(f"config {exc.strerror}: give a TOML file") from None
    except FileTooLargeError as exc:
        raise ConfigError(f"config {exc} (a config is a few lines of TOML)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file} ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: not valid TOML ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise ConfigError(f"{file}: not valid TOML (nested too deeply)") from None


#: The optional table naming the classifier of ``classify-images run`` (not part of the feature set's config).
CLASSIFIER_TABLE = "classifier"


def load_config(
    path: str | os.PathLike | None = None, overrides: dict[str, dict[str, Any]] | None = None
) -> PipelineConfig | ChannelsConfig:
    """Load and check a configuration.

    Parameters
    ----------
    path : path-like or str, optional
        A TOML file, or the name of a ready-made config (``scspm``, ``bof-spm``, …).
        None: the defaults.
    overrides : dict, optional
        ``{table: {key: value}}`` applied after the file (command-line flags); None
        values are ignored.

    Returns
    -------
    PipelineConfig or ChannelsConfig
        The feature pipeline's tables (a :class:`ChannelsConfig` when the file has ``[[channel]]``
        tables); a ``[classifier]`` table is read by :func:`classifier_table`, not here.
    """
    raw, source = _read_toml(path) if path is not None else ({}, "defaults")
    raw.pop(CLASSIFIER_TABLE, None)
    for table, values in (overrides or {}).items():
        if not isinstance(raw.setdefault(table, {}), dict):
            raise ConfigError(f"{source}: [{table}] must be a table of key = value")
        raw[table].update({k: v for k, v in values.items() if v is not None})
    return read_any_config(raw, source=source)


def classifier_table(path: str | os.PathLike | None) -> tuple[str | None, dict[str, Any]]:
    """The ``[classifier]`` table of a config file: ``(name, params)``, or ``(None, {})`` without one.

    The table is ``name = "pmsvm"`` and an optional ``params`` table of the estimator's
    parameters (``[classifier.params]`` or ``params = { p = -8, C = 0.01 }``).

    Raises
    ------
    ConfigError
        An unknown key, a classifier name that is not registered, or a parameter the
        estimator does not have (one line naming it).
    """
    from ...classifiers.registry import CLASSIFIERS, ClassifierParameterError, make_classifier

    if path is None:
        return None, {}
    raw, source = _read_toml(path)
    table = raw.get(CLASSIFIER_TABLE)
    if table is None:
        return None, {}
    if not isinstance(table, dict):
        raise ConfigError(f'{source}: [{CLASSIFIER_TABLE}] must be a table with name = "..." and a params table')
    unknown = sorted(set(table) - {"name", "params"})
    if unknown:
        raise ConfigError(f"{source}: unknown key {CLASSIFIER_TABLE}.{unknown[0]}; known keys: name, params")
    name, params = table.get("name"), table.get("params", {})
    if name not in CLASSIFIERS:
        raise ConfigError(
            f"{source}: {CLASSIFIER_TABLE}.name = {name!r}: expected one of "
            + ", ".join(map(repr, sorted(CLASSIFIERS)))
        )
    if not isinstance(params, dict):
        raise ConfigError(f"{source}: {CLASSIFIER_TABLE}.params must be a table of parameter = value")
    try:
        make_classifier(name, params)
    except ClassifierParameterError as exc:
        raise ConfigError(f"{source}: {CLASSIFIER_TABLE}.params: {exc}") from None
    return name, dict(params)


def stage_hash(config: PipelineConfig, tables: list[str] | tuple[str, ...], *extra: Any) -> str:
    """SHA-1 of the semantic keys of ``tables`` (and ``extra`` values), over the plain form.

    Each stage's cache key includes the tables of every stage upstream of it,
    so an upstream change can never return a stale downstream result.
    """
    plain = config.to_dict(semantic_only=True)
    text = json.dumps(
        [{table: plain[table] for table in tables if table in plain}, list(extra)], sort_keys=True, default=str
    )
    return hashlib.sha1(text.encode()).hexdigest()
