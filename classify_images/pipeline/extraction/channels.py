"""Multi-channel feature sets: several descriptor + encoder + pyramid channels in one row.

A configuration with ``[[channel]]`` tables (:class:`~classify_images.pipeline.settings.config.ChannelsConfig`)
declares the channels; :func:`build_channel_feature_set` builds them into one feature set:

1. ``discover``, ``check``, ``split`` — once, for every channel (one list of images, one
   seeded split; an image is checked against the largest patch of all channels);
2. ``sample`` — one pass over the training images, each image's descriptor sample of every
   channel (:func:`~classify_images.pipeline.extraction.fitting.fit_channel_extractors`), then ``codebook``
   per channel, each with its own configuration;
3. ``encode+pool`` — per image, the rows of its channels, side by side
   (:class:`ChannelExtractor`), written like a single-channel row.

Each channel is an ordinary :class:`~classify_images.pipeline.extraction.extractor.FeatureExtractor` of
its own :class:`~classify_images.pipeline.settings.config.PipelineConfig` (the shared ``[dataset]`` and
``[image]`` with its own tables), so its stage-cache entries (image checks, descriptors, descriptor
samples, codebook, encodings) are keyed by its own settings only: a channel equal to a
single-channel configuration reuses that configuration's cached entries, and two channels with the
same ``[sift]`` share their cached descriptors.  The stages are cached per channel, not fused,
but each pass's per-image task runs all the channels on one decoded image
(:func:`~classify_images.pipeline.extraction.shared_reads.decoded_once`): on a cold cache an image is
decoded once per pass that reads it (sample, encode+pool), as in a single-channel build, not
once per channel and pass (on a cluster the sample is still drawn per channel).

The manifest records the layout (``channels``: name, offset, dims, signed, weight, and the
channel's codebook), which the combination rules read
(:mod:`~classify_images.classifiers.combination`); the channels' fitted states are stored together
in ``codebook.npz`` under ``channel<k>.<name>`` keys.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...classifiers.combination import Channel, combine_rows
from ...coding.normalize import Normalizer
from ..settings.config import CHANNEL_TABLE, ChannelsConfig, ConfigError, PipelineConfig
from ..settings.plan import FeaturePlan, feature_plan_of, make_feature_plan
from .extractor import FeatureExtractor, check_image
from .shared_reads import decoded_once
from .stages import StageCache, implementation_versions

_log = logging.getLogger(__name__)

__all__ = [
    "ChannelExtractor",
    "extractor_of",
    "check_config_of",
    "channel_is_signed",
    "channels_config_hash",
    "build_channel_feature_set",
    "channel_state_arrays",
    "channel_states",
]


def channel_is_signed(config: PipelineConfig | FeaturePlan) -> bool:
    """Whether a channel's rows can be negative: a signed encoder (Fisher vectors, VLAD), or signed
    codes (sparse coding, LLC) pooled by a method that keeps their sign (``average``, ``signed_max``)."""
    plan = feature_plan_of(config)
    if plan.encoder.signed:
        return True
    return not plan.encoder.non_negative_codes and plan.pyramid.method in ("average", "signed_max")


def check_config_of(config: PipelineConfig | ChannelsConfig) -> PipelineConfig:
    """The configuration images are checked with: ``config`` itself, or for ``[[channel]]`` tables the
    channel whose largest patch is the largest (an image smaller than it has no row in some channel)."""
    if isinstance(config, PipelineConfig):
        return config
    return max((channel.config for channel in config.channels), key=lambda c: c.smallest_image_side())


class ChannelExtractor(FeatureExtractor):
    """Image → the rows of its channels side by side (each its own :class:`FeatureExtractor`).

    Parameters
    ----------
    config : ChannelsConfig
    extractors : list of FeatureExtractor
        One per channel, in the configuration's order, each with a per-vector normaliser.
    combine : (rule, classifier), optional
        The rows are combined by this rule for this classifier
        (:func:`~classify_images.classifiers.combination.combine_rows`): the extractor of a model
        trained with ``--combine`` (:mod:`~classify_images.pipeline.training.model_file`).

    Attributes
    ----------
    layout : tuple of Channel
        Name, offset, dims, signed, weight of each channel (:mod:`~classify_images.classifiers.combination`).
    n_features : int
        The sum of the channels' dimensions.
    """

    def __init__(
        self, config: ChannelsConfig, extractors: list[FeatureExtractor], *, combine: tuple[str, str] | None = None
    ) -> None:
        self.config, self.extractors, self.combine = config, list(extractors), combine
        self.cache = self.extractors[0].cache
        self.normalizer = Normalizer("none")
        layout, offset = [], 0
        for channel, extractor in zip(config.channels, self.extractors):
            layout.append(
                Channel(channel.name, offset, extractor.n_features, channel_is_signed(extractor.plan), channel.weight)
            )
            offset += extractor.n_features
        self.layout, self.n_features = tuple(layout), offset
        self.codebook_digest = hashlib.sha1(" ".join(e.codebook_digest for e in self.extractors).encode()).hexdigest()
        # images are checked against the channel of the largest patch (check_config_of)
        self._check_plan = max((e.plan for e in self.extractors), key=lambda plan: plan.smallest_image_side)

    @property
    def codebook(self) -> dict[str, np.ndarray]:
        """The channels' fitted states as the named arrays a multi-channel feature set stores
        (:func:`channel_state_arrays`)."""
        return channel_state_arrays(self)

    def with_cache(self, cache: StageCache) -> ChannelExtractor:
        """The same channels (and combination) reading and filling ``cache``."""
        return ChannelExtractor.from_states(
            self.config,
            [e.codebook for e in self.extractors],
            cache=cache,
            combine=self.combine,
            plans=[e.plan for e in self.extractors],
        )

    def check(self, path: str, fingerprint: str) -> dict[str, Any]:
        """:func:`~classify_images.pipeline.extraction.extractor.check_image` against the largest patch of all channels."""
        return check_image(self.cache, self._check_plan, path, fingerprint)

    def pooled(self, path: str, fingerprint: str, *, flip: bool = False) -> np.ndarray:
        """The channels' rows (each normalised by its own ``[normalization]``), side by side."""
        return self.vector(path, fingerprint, flip=flip)

    def vector(self, path: str, fingerprint: str, *, flip: bool = False) -> np.ndarray:
        """The feature vector of a readable image: its channels' vectors concatenated (float32), combined
        by :attr:`combine` when set."""
        with (
            decoded_once()
        ):  # the image decoded once for all the channels (classify_images/pipeline/extraction/shared_reads.py)
            row = np.concatenate(
                [extractor.vector(path, fingerprint, flip=flip) for extractor in self.extractors]
            ).astype(np.float32, copy=False)
        if self.combine is None:
            return row
        return combine_rows(row[None, :], self.layout, *self.combine)[0]

    @classmethod
    def from_states(
        cls,
        config: ChannelsConfig,
        states: list,
        *,
        cache: StageCache | None = None,
        combine: tuple[str, str] | None = None,
        plans: list[FeaturePlan] | None = None,
    ) -> ChannelExtractor:
        """The extractor of fitted channel states (one codebook per channel, in order; ``plans``: the
        channels' objects when the caller made them already)."""
        plans = plans or [make_feature_plan(channel.config) for channel in config.channels]
        return cls(
            config,
            [FeatureExtractor(plan, state, cache=cache) for plan, state in zip(plans, states)],
            combine=combine,
        )

    @classmethod
    def from_feature_set(cls, feature_set: Any, *, cache_dir: str | os.PathLike | None = None) -> ChannelExtractor:
        """The extractor a multi-channel feature set was built with."""
        config = feature_set.config
        plans = [make_feature_plan(channel.config) for channel in config.channels]
        states = channel_states(config, feature_set.codebook(), plans=plans)
        return cls.from_states(config, states, cache=StageCache(cache_dir, cache_descriptors=False), plans=plans)


def extractor_of(
    feature_set: Any, *, cache_dir: str | os.PathLike | None = None, combine: tuple[str, str] | None = None
):
    """The extractor a feature set was built with: a :class:`ChannelExtractor` (rows combined by
    ``combine``, if given) for a multi-channel set, else a :class:`FeatureExtractor`."""
    if not feature_set.channels:
        return FeatureExtractor.from_feature_set(feature_set, cache_dir=cache_dir)
    extractor = ChannelExtractor.from_feature_set(feature_set, cache_dir=cache_dir)
    extractor.combine = combine
    return extractor


def channel_state_arrays(extractor: ChannelExtractor) -> dict[str, np.ndarray]:
    """The channels' fitted states as named arrays ``channel<k>.<name>`` (one ``codebook.npz``)."""
    return {
        f"channel{k}.{name}": np.asarray(array)
        for k, channel in enumerate(extractor.extractors)
        for name, array in channel.encoder.to_arrays(channel.codebook).items()
    }


def channel_states(
    config: ChannelsConfig, arrays: dict[str, np.ndarray], *, plans: list[FeaturePlan] | None = None
) -> list:
    """The channels' fitted states back from :func:`channel_state_arrays` (checked by each encoder;
    ``plans``: the channels' objects when the caller made them already)."""
    plans = plans or [make_feature_plan(channel.config) for channel in config.channels]
    states = []
    for k, plan in enumerate(plans):
        prefix = f"channel{k}."
        own = {key[len(prefix) :]: value for key, value in arrays.items() if key.startswith(prefix)}
        states.append(plan.encoder.from_arrays(own, plan.descriptor_length))
    return states


def channels_config_hash(config: ChannelsConfig, dataset_digest: str, *, plans: list[FeaturePlan] | None = None) -> str:
    """SHA-1 of the semantic keys of every channel, the images and the implementation versions
    (a multi-channel feature set's ``config_hash``; ``plans``: the channels' objects, if made already)."""
    plans = plans or [make_feature_plan(channel.config) for channel in config.channels]
    versions = [implementation_versions(plan.encoder) for plan in plans]
    text = json.dumps([config.to_dict(semantic_only=True), dataset_digest, versions], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()


def build_channel_feature_set(
    dataset_dir, out: Path, config: ChannelsConfig, *, n_jobs: int, cache_dir, progress, force: bool = False
):
    """Build the multi-channel feature set of ``dataset_dir`` into ``out`` (module docstring).

    Called by :func:`~classify_images.pipeline.extraction.build.build_feature_set` for a
    :class:`~classify_images.pipeline.settings.config.ChannelsConfig`, on this machine, into the ``npy``
    row layout.  Returns a :class:`~classify_images.pipeline.extraction.build_steps.BuildResult`.
    """
    from ..storage.feature_store import FeatureSetWriter
    from . import build_steps
    from .fitting import fit_channel_extractors
    from .runner import DEFAULT_BATCH_SIZE, Runner

    timer = build_steps.StageTimer()
    plans = [make_feature_plan(channel.config) for channel in config.channels]  # made once, handed down
    # images are checked with the channel whose descriptor needs the largest image (check_config_of)
    check_plan = max(plans, key=lambda plan: plan.smallest_image_side)
    check_config = check_plan.config
    with timer("discover"):
        images = build_steps.discover_images(dataset_dir, check_config, n_jobs)
        config_hash = channels_config_hash(config, images.digest, plans=plans)
    reused = build_steps.reuse_if_up_to_date(out, config_hash, len(images.paths), timer.timings)
    if reused is not None:
        return reused
    cache = StageCache(cache_dir, cache_descriptors=all(plan.cache_descriptors for plan in plans))
    runner = Runner(n_jobs, cache, progress, None, DEFAULT_BATCH_SIZE)
    with timer("check"):
        readable, skipped, warned = build_steps.check_images(images, check_plan, runner)
    note = build_steps.grey_images_note(
        [images.paths[i] for i in readable], [channel.config.sift.color for channel in config.channels]
    )
    if note:
        _log.info("%s", note)
    with timer("split"):
        split = build_steps.split_images(images, readable, skipped, check_config)
        split.warnings = warned
    with build_steps.image_errors_as_dataset_errors(images):
        fitted = fit_channel_extractors(images.paths, images.fingerprints, split.train, plans, runner)
    n_descriptors = {channel.name: n for channel, (n, _) in zip(config.channels, fitted)}
    extractors = [extractor for _, extractor in fitted]
    extractor = ChannelExtractor(config, extractors)
    with FeatureSetWriter(out, dataset_dir, force=force) as writer:
        with timer("encode+pool"), build_steps.image_errors_as_dataset_errors(images):
            X = build_steps.encode_and_pool(extractor, images, split, writer, runner)
        with timer("normalise+write"):
            build_steps.check_finite(X, images, split)
            for part in X.values():
                part.flush()
            del X
            writer.save("y_train", images.dataset.labels[split.train])
            writer.save("y_test", images.dataset.labels[split.test])
            writer.save_codebook(channel_state_arrays(extractor))
        manifest = {
            **build_steps.images_manifest(config, config_hash, images, split, timer.timings),
            "n_features": extractor.n_features,
            "codebook": {
                "kind": CHANNEL_TABLE,
                "digest": extractor.codebook_digest,
                "n_training_descriptors": n_descriptors,
            },
            "channels": [
                {
                    **channel.to_dict(),
                    "codebook": {
                        "kind": e.encoder.kind,
                        "size": e.encoder.n_words(e.codebook),
                        "digest": e.codebook_digest,
                    },
                }
                for channel, e in zip(extractor.layout, extractors)
            ],
            "implementation_versions": {
                channel.name: implementation_versions(e.encoder) for channel, e in zip(extractor.layout, extractors)
            },
        }
        writer.commit(manifest)
    return build_steps.BuildResult(
        path=out,
        n_images=len(images.paths),
        n_train=len(split.train),
        n_test=len(split.test),
        n_skipped=len(split.skipped),
        n_features=extractor.n_features,
        n_classes=len(images.dataset.class_names),
        timings=timer.timings,
        reused=False,
    )


def refuse_channels(option: str) -> ConfigError:
    """The one line for an option a multi-channel build does not take yet."""
    return ConfigError(
        f"{option} is not available with [[channel]] tables yet: build a multi-channel "
        "feature set on this machine, rows stored as float32 in the npy layout"
    )
