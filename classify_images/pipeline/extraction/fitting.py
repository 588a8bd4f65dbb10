"""Fitting the front half of the pipeline: the descriptor sample, the encoder's codebook.

What a :class:`~classify_images.pipeline.extraction.extractor.FeatureExtractor` learns from training
images, shared by the feature-set build (:func:`~classify_images.pipeline.extraction.build.build_feature_set`)
and the scikit-learn transformer (:class:`~classify_images.pipeline.interfaces.image_features.ImageFeatures`):

1. ``sample`` — ``codebook.n_samples`` dense-SIFT descriptors drawn evenly from the training
   images (at most ``max(ceil(n_samples / 300), 100)`` of them, :func:`sampled_images`), seeded
   per image by its content (:func:`sample_descriptors`);
2. ``codebook`` — the encoder's fitted state learnt from that sample
   (:meth:`~classify_images.coding.encoders.Encoder.learn`, through the stage cache:
   :func:`learn_codebook`).

On a Dask cluster (the :class:`~classify_images.pipeline.extraction.runner.Runner` holds a client) the
sample stays on the workers and one of them learns the codebook (:func:`codebook_from_sample`),
from the same stage-cache entry, so the client receives only the codebook.  A normaliser with
training statistics (``minmax``) is fitted by the caller on the training rows, which it
computes anyway.  Every row is then :func:`image_row` of the fitted extractor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from typing import Any

import joblib
import numpy as np
from joblib import delayed

from ..._log import step_progress
from ..execution.cluster import iter_kept, submit_kept
from ..execution.warm_up import encoder_compiled_aside, warm_descriptors
from ..settings.config import PipelineConfig
from ..settings.dataset import DatasetError
from ..settings.plan import FeaturePlan, feature_plan_of
from .descriptors_aside import descriptors_cached_aside
from .extractor import FeatureExtractor
from .runner import Runner
from .shared_reads import decoded_once
from .stages import StageCache

__all__ = [
    "fit_extractor",
    "fit_channel_extractors",
    "sample_descriptors",
    "sampled_images",
    "codebook_sample",
    "codebook_from_sample",
    "learn_codebook",
    "image_row",
    "image_row_and_mirror",
]

_log = logging.getLogger(__name__)


def fit_extractor(
    paths: list[str],
    fingerprints: list[str],
    train: np.ndarray,
    config: PipelineConfig | FeaturePlan,
    runner: Runner,
    timer: Any = None,
    encoded_next: np.ndarray | None = None,
) -> tuple[int, FeatureExtractor]:
    """``(n_training_descriptors, extractor)``: the sample of the training images ``train``
    (indices into ``paths``), the codebook learnt from it, and the extractor that applies it
    through ``runner``'s stage cache (its normaliser not yet fitted when it needs training rows).

    ``config``: the configuration, or its objects (:class:`~classify_images.pipeline.settings.plan.FeaturePlan`,
    made once by the caller and handed down to every step).

    ``timer`` (``with timer("step"):``, optional) times the ``sample`` and ``codebook`` steps.
    ``encoded_next`` (indices into ``paths``, optional): the other images the caller encodes next,
    in that order; with several workers on this machine and a stage cache that keeps descriptors,
    their descriptors are cached aside while the codebook is learnt
    (:mod:`~classify_images.pipeline.extraction.descriptors_aside`).  No result depends on it.
    """
    plan = feature_plan_of(config)
    timed = timer if timer is not None else (lambda step: contextlib.nullcontext())
    here = runner.parallel_here
    # With several workers on this machine, the encoder's kernels compile aside meanwhile (classify_images/pipeline/execution/warm_up.py).
    aside = encoder_compiled_aside(plan) if here else contextlib.nullcontext()
    with aside as compiling:
        with timed("sample"):
            sample = codebook_sample(paths, fingerprints, train, plan, runner)
        with (
            timed("codebook"),
            _descriptors_aside(paths, fingerprints, encoded_next if here else None, plan, runner.cache),
        ):
            if compiling is not None:  # the online learner's kernels: compiled aside, loaded here
                compiling.wait_for_learner()
            n_descriptors, codebook = codebook_from_sample(sample, plan, runner)
    del sample
    return n_descriptors, FeatureExtractor(plan, codebook, cache=runner.cache)


def _descriptors_aside(
    paths: list[str],
    fingerprints: list[str],
    images: np.ndarray | None,
    config: PipelineConfig | FeaturePlan,
    cache: StageCache,
):
    """:func:`~classify_images.pipeline.extraction.descriptors_aside.descriptors_cached_aside` of ``images``
    when the stage cache keeps descriptors (and the ``[sift]`` table passes through JSON with the
    same cache key); else nothing."""
    if images is None or len(images) == 0 or not cache.caches_descriptors:
        return contextlib.nullcontext()
    plan = feature_plan_of(config)
    sift = plan.sift
    if joblib.hash(json.loads(json.dumps(sift))) != joblib.hash(sift):  # (the aside process would miss the entries)
        return contextlib.nullcontext()
    return descriptors_cached_aside(
        cache.memory.location, [(paths[i], fingerprints[i]) for i in images], plan.max_side, sift
    )


def fit_channel_extractors(
    paths: list[str],
    fingerprints: list[str],
    train: np.ndarray,
    configs: list[PipelineConfig] | list[FeaturePlan],
    runner: Runner,
) -> list[tuple[int, FeatureExtractor]]:
    """:func:`fit_extractor` of each channel's configuration (or its plan), their samples drawn in one pass.

    Each training image's task draws every channel's sample from one decoded image
    (:func:`~classify_images.pipeline.extraction.shared_reads.decoded_once`), through the same cached stage
    calls as :func:`sample_descriptors` (the same cache entries and the same samples, bit for
    bit); then each channel's codebook.  On a cluster, :func:`fit_extractor` per channel.
    """
    plans = [feature_plan_of(config) for config in configs]
    if runner.on_cluster:
        return [fit_extractor(paths, fingerprints, train, plan, runner) for plan in plans]
    with contextlib.ExitStack() as asides:
        compiling = [None] * len(plans)
        if runner.n_jobs != 1:  # the encoders' kernels compile aside; the workers load the descriptors' kernels
            for c, plan in enumerate(plans):
                compiling[c] = asides.enter_context(encoder_compiled_aside(plan))
                warm_descriptors(plan)
        channel_calls = [
            dict(zip(sampled_images(train, plan), _sample_calls(paths, fingerprints, train, plan, runner)))
            for plan in plans
        ]
        images = sorted(set().union(*channel_calls))  # each image once, for the channels that sample it
        tasks = [delayed(_channel_samples)([calls[i] for calls in channel_calls if i in calls]) for i in images]
        per_image = dict(zip(images, runner.map(tasks, "sample descriptors")))
        fitted = []
        for c, plan in enumerate(plans):
            channels_of = {i: [d for d, calls in enumerate(channel_calls) if i in calls] for i in channel_calls[c]}
            samples = [per_image[i][channels_of[i].index(c)] for i in channel_calls[c]]
            sample = _combine_samples(samples, plan.n_samples, plan.sample_seed)
            if compiling[c] is not None:
                compiling[c].wait_for_learner()
            n_descriptors, codebook = codebook_from_sample(sample, plan, runner)
            del sample
            fitted.append((n_descriptors, FeatureExtractor(plan, codebook, cache=runner.cache)))
    return fitted


def _channel_samples(calls: list) -> list[np.ndarray]:
    """One training image's sample of each channel (its :func:`_sample_calls` entries), the image decoded once."""
    with decoded_once():
        return [function(*args, **kwargs) for function, args, kwargs in calls]


def sample_descriptors(
    paths: list[str], fingerprints: list[str], train: np.ndarray, config: PipelineConfig | FeaturePlan, runner: Runner
) -> np.ndarray:
    """``codebook.n_samples`` descriptors (uint8) drawn evenly from the training images, seeded.

    Parameters
    ----------
    paths, fingerprints : list of str
        Every image's path and content fingerprint.
    train : ndarray of int
        Indices of the training images in ``paths``.
    config : PipelineConfig or FeaturePlan
    runner : Runner
        Where the per-image sampling runs (and the stage cache it reads and fills).
    """
    plan = feature_plan_of(config)
    if (
        runner.n_jobs != 1
    ):  # the workers load the kernels the parent compiled (classify_images/pipeline/execution/warm_up.py)
        warm_descriptors(plan)
    samples = runner.map(_sample_calls(paths, fingerprints, train, plan, runner), "sample descriptors")
    return _combine_samples(samples, plan.n_samples, plan.sample_seed)


#: Descriptors drawn from each sampled training image, at least: the codebook's sample comes from
#: ``max(ceil(n_samples / SAMPLE_PER_IMAGE), MIN_SAMPLED_IMAGES)`` training images at most (334
#: for 100 000 descriptors).
SAMPLE_PER_IMAGE = 300
#: Training images the sample is drawn from, at least (all of them when fewer): a small sample
#: still comes from many images.
MIN_SAMPLED_IMAGES = 100


def sampled_images(train: np.ndarray, plan: FeaturePlan) -> np.ndarray:
    """The training images the codebook's descriptors are drawn from, in ``train``'s order.

    All of them when they are at most ``max(ceil(n_samples / SAMPLE_PER_IMAGE), MIN_SAMPLED_IMAGES)``;
    otherwise that many, chosen at random (seeded by ``plan.sample_seed``).  Running dense SIFT on
    every training image to keep a hundred of its thousands of descriptors cost, on Flowers-17's
    1 020 training images, three quarters of the SIFT of encoding all 1 360 images; VLFeat's
    ``phow_caltech101`` learns its vocabulary from 30 training images.  334 images of 300
    descriptors each still span every class of a typical dataset.
    """
    train = np.asarray(train)
    most = max(math.ceil(plan.n_samples / SAMPLE_PER_IMAGE), MIN_SAMPLED_IMAGES)
    if train.size <= most:
        return train
    chosen = np.random.default_rng(plan.sample_seed).choice(train.size, most, replace=False)
    return train[np.sort(chosen)]


def _sample_calls(
    paths: list[str], fingerprints: list[str], train: np.ndarray, plan: FeaturePlan, runner: Runner
) -> list:
    """The per-image calls of :func:`sample_descriptors`: ``ceil(n_samples / n)`` descriptors of each
    of the ``n`` :func:`sampled_images`."""
    images = sampled_images(train, plan)
    per_image = max(1, math.ceil(plan.n_samples / len(images)))
    sift, max_side = plan.sift, plan.max_side
    positioned = plan.encoder.learns_from_positions  # the sample carries coordinates
    sample_of = delayed(runner.cache.positioned_descriptor_sample if positioned else runner.cache.descriptor_sample)
    return [sample_of(paths[i], fingerprints[i], max_side, sift, per_image, plan.sample_seed) for i in images]


def _combine_samples(samples: list[np.ndarray], n_samples: int, seed: int) -> np.ndarray:
    """The per-image samples joined in image order, then ``n_samples`` of them kept (seeded) when more."""
    sample = np.concatenate(samples)
    if sample.shape[0] > n_samples:
        rng = np.random.default_rng(seed)
        sample = sample[np.sort(rng.choice(sample.shape[0], n_samples, replace=False))]
    return sample


def _combine_sample_batches(batches: list[list[np.ndarray]], n_samples: int, seed: int) -> np.ndarray:
    """:func:`_combine_samples` of the results of the sampling tasks (a list per task, in order), on a worker."""
    return _combine_samples([sample for batch in batches for sample in batch], n_samples, seed)


def _sample_on_cluster(paths: list[str], fingerprints: list[str], train: np.ndarray, plan: FeaturePlan, runner: Runner):
    """:func:`sample_descriptors` as Dask tasks whose result stays on the cluster: a future of
    the same sample, which the codebook task reads without it passing through the client."""
    client = runner.client
    calls = _sample_calls(paths, fingerprints, train, plan, runner)
    submitted = submit_kept(client, calls, "sample descriptors", batch_size=runner.batch_size)
    for _ in runner.progress_of(iter_kept(client, submitted), "sample descriptors", len(calls)):
        pass
    return client.submit(
        _combine_sample_batches,
        [future for _, future in submitted],
        plan.n_samples,
        plan.sample_seed,
        pure=False,
    )


def _check_sample_size(n_descriptors: int, plan: FeaturePlan) -> None:
    size = plan.codebook_size
    if n_descriptors < size:
        raise DatasetError(
            f"only {n_descriptors} training descriptors for a codebook of {size} words: "
            "use a smaller codebook.size, a denser sift.step, or more training images"
        )


def _announce(n_descriptors: int, plan: FeaturePlan, cached: bool) -> None:
    """The codebook step's INFO line: reused from the stage cache, or learnt (the long step)."""
    kind, size = plan.kind, plan.codebook_size
    if cached:
        _log.info(
            "reusing the cached %s codebook of %d words (learnt from the same %d training descriptors)",
            kind,
            size,
            n_descriptors,
        )
    else:
        _log.info("learning a %s codebook of %d words from %d training descriptors", kind, size, n_descriptors)


def learn_codebook(sample: np.ndarray, config: PipelineConfig | FeaturePlan, cache: StageCache) -> np.ndarray:
    """The codebook of ``config.codebook`` (or of the plan's encoder) learnt from ``sample`` (through the stage cache).

    Raises :class:`DatasetError` (one line) when the sample holds fewer descriptors than words.
    """
    plan = feature_plan_of(config)
    _check_sample_size(sample.shape[0], plan)
    params, positioned = plan.learning_table, plan.encoder.learns_from_positions
    if _log.isEnabledFor(logging.INFO):  # (hashing the sample once more costs a few ms per MB)
        _announce(sample.shape[0], plan, cache.has_codebook(sample, params, positioned=positioned))
    return cache.learn_codebook(sample, params, positioned=positioned)


def _n_rows(array: np.ndarray) -> int:
    return int(array.shape[0])


def _learn_codebook_on_cluster(sample, plan: FeaturePlan, runner: Runner):
    """``(n_descriptors, codebook)``: :func:`learn_codebook` run by a worker on the sample
    :func:`_sample_on_cluster` left there (same function, same arguments, same stage-cache
    entry: the same codebook bit for bit as on this machine)."""
    client = runner.client
    n_descriptors = client.submit(_n_rows, sample, pure=False).result()
    _check_sample_size(n_descriptors, plan)
    params, positioned = plan.learning_table, plan.encoder.learns_from_positions
    if _log.isEnabledFor(logging.INFO):
        cached = client.submit(_has_codebook_task, runner.cache, sample, params, positioned, pure=False).result()
        _announce(n_descriptors, plan, cached)
    codebook = client.submit(_learn_codebook_task, runner.cache, sample, params, positioned, pure=False)
    with step_progress(_log, f"{plan.kind} codebook on a worker"):  # (the worker's own lines stay there)
        return n_descriptors, codebook.result()


def _has_codebook_task(cache: StageCache, sample: np.ndarray, codebook_params: dict, positioned: bool) -> bool:
    return cache.has_codebook(sample, codebook_params, positioned=positioned)


def _learn_codebook_task(cache: StageCache, sample: np.ndarray, codebook_params: dict, positioned: bool) -> Any:
    return cache.learn_codebook(sample, codebook_params, positioned=positioned)


def codebook_sample(
    paths: list[str], fingerprints: list[str], train: np.ndarray, config: PipelineConfig | FeaturePlan, runner: Runner
):
    """The descriptor sample the codebook is learnt from: :func:`sample_descriptors` on this
    machine; on a cluster (``runner.client``) a future of the same sample, left on the workers."""
    plan = feature_plan_of(config)
    if not runner.on_cluster:
        return sample_descriptors(paths, fingerprints, train, plan, runner)
    return _sample_on_cluster(paths, fingerprints, train, plan, runner)


def codebook_from_sample(sample, config: PipelineConfig | FeaturePlan, runner: Runner) -> tuple[int, Any]:
    """``(n_descriptors, codebook)`` from :func:`codebook_sample`'s sample: learnt here
    (:func:`learn_codebook`) or, on a cluster, by a worker (the same numbers bit for bit)."""
    plan = feature_plan_of(config)
    if not runner.on_cluster:
        return int(sample.shape[0]), learn_codebook(sample, plan, runner.cache)
    return _learn_codebook_on_cluster(sample, plan, runner)


def image_row_and_mirror(
    path: str, fingerprint: str, *, extractor: FeatureExtractor, normalized: bool
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`image_row` of an image and of its mirror, in one task: the image is decoded once and
    its descriptors computed once (the mirror's are a permutation of them,
    :func:`~classify_images.pipeline.extraction.stages.mirrored_descriptors`)."""
    with decoded_once():
        return (
            image_row(path, fingerprint, extractor=extractor, normalized=normalized),
            image_row(path, fingerprint, extractor=extractor, normalized=normalized, flip=True),
        )


def image_row(
    path: str, fingerprint: str, *, extractor: FeatureExtractor, normalized: bool, flip: bool = False
) -> np.ndarray:
    """The vector of one image (``flip``: of its mirror): normalised (:meth:`FeatureExtractor.vector`) or only pooled."""
    if flip:
        return (
            extractor.vector(path, fingerprint, flip=True)
            if normalized
            else extractor.pooled(path, fingerprint, flip=True)
        )
    return extractor.vector(path, fingerprint) if normalized else extractor.pooled(path, fingerprint)
