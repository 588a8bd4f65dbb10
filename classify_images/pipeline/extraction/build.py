"""Build a feature set from a folder of class folders (``classify-images build-features``).

:func:`build_feature_set` runs these steps, each timed and reported in the manifest:

1. ``discover``  — list classes and images; fingerprint every file (SHA-1).
2. ``check``     — decode every image once; unreadable ones are skipped and listed.
3. ``split``     — seeded per-class train/test split of the readable images.
4. ``sample``    — a seeded sample of descriptors of the *training* images, and
5. ``codebook``  — the encoder's codebook learnt from it: the fitted extractor
   (:func:`~classify_images.pipeline.extraction.fitting.fit_extractor`, shared with ``ImageFeatures.fit``).
6. ``encode+pool`` — per image, with the :class:`~classify_images.pipeline.extraction.extractor.FeatureExtractor`:
   descriptors → the encoder's vector over the spatial pyramid (streamed image by image into memory-mapped
   arrays; the descriptors of all images are never in memory together).  A per-vector
   normalisation (``l1``, ``l2``, ``power``, ``none``) is applied here, image by image.
7. ``normalise+write`` — a normalisation with training statistics (``minmax``) is fitted
   on the training rows and applied to all rows; then the feature store is written,
   atomically.

Per-image work runs through :class:`joblib.Parallel` (``n_jobs``) and through
the :class:`~classify_images.pipeline.extraction.stages.StageCache`, so re-running with the
same config recomputes nothing, and changing only pooling or normalisation
reuses the cached codes.

On a Dask cluster (``scheduler`` / ``cluster``, :mod:`~classify_images.pipeline.execution.cluster`)
the same calls run as tasks of ``batch_size`` images each; the descriptor sample stays on
the workers and the codebook is learnt by one of them
(:func:`~classify_images.pipeline.extraction.fitting.codebook_from_sample`; the client receives only the codebook); the fitted extractor (its codebook) is sent to every
worker once, the workers read and write the stage cache
themselves (a folder they share), and the numbers are the same as on one machine: every
row is computed by the same function of the image and the codebook, and per-image seeds
derive from the image's content.  With ``store="sharded"`` the workers also write the rows,
one shard per task (:mod:`~classify_images.pipeline.storage.shard_store`); the client receives
only each shard's name, size and checksum, and commits them with the manifest.

Compressed rows (``rows="float16"``, ``"pq8"``, ``"pq16"`` or any registered row codec,
:mod:`~classify_images.pipeline.storage.row_codecs`; sharded store, dense rows only): the
workers write each shard compressed.  A codec with a learnt state, such as product
quantisation, first needs it (PQ: its codebooks):
a pass over at most :data:`PQ_SAMPLE_SHARDS` training shards (evenly spaced) returns a sample
of at most :data:`PQ_SAMPLE_ROWS` training rows (spread evenly over those shards; their
vectors come from the stage cache when it is on, else these images are encoded twice), the client learns the codebooks from it
(:class:`~classify_images.coding.product_quantizer.ProductQuantizer`) and sends them to every
worker once, and every shard is then computed again from the stage cache and written as codes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..._log import verbose_output
from ..execution.cluster import ClusterError, scheduler_errors
from ..execution.progress import tqdm_progress
from ..settings.config import ConfigError, PipelineConfig, stage_hash
from ..settings.plan import make_feature_plan
from ..storage.cache_folder import default_cache_dir
from ..storage.feature_store import NPY_ROW_ENCODINGS, STORE_LAYOUTS, FeatureSetWriter, check_destination
from ..storage.room import build_memory_bytes, check_disk_room, check_memory_room, describe_rows, feature_set_bytes
from ..storage.row_codecs import RowCodecError, codec_for_rows, row_codec
from .build_steps import (
    RELEASE_ROWS_EVERY,
    BuildResult,
    StageTimer,
    build_manifest,
    check_finite,
    check_images,
    discover_images,
    encode_and_pool,
    fit_normalizer,
    grey_images_note,
    image_errors_as_dataset_errors,
    reuse_if_up_to_date,
    split_images,
    store_labels_and_codebook,
    store_rows,
    write_shards,
)
from .fitting import fit_extractor, image_row
from .runner import DEFAULT_BATCH_SIZE, Execution, Progress, Runner
from .stages import StageCache, implementation_versions

__all__ = ["BuildResult", "build_feature_set", "default_cache_dir", "DEFAULT_BATCH_SIZE", "image_row"]

_log = logging.getLogger(__name__)


def build_feature_set(
    dataset_dir: str | os.PathLike,
    out: str | os.PathLike,
    config: PipelineConfig,
    *,
    n_jobs: int = 1,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    verbose: int | bool = False,
    scheduler: str | None = None,
    cluster: str | None = None,
    store: str | None = None,
    batch_size: int | None = None,
    execution: Execution | None = None,
    force: bool = False,
    rows: str | None = None,
) -> BuildResult:
    """Build (or reuse) the feature set of ``dataset_dir`` under ``config`` into ``out``.

    Parameters
    ----------
    dataset_dir : path-like
        Folder of class folders.
    out : path-like
        Feature-set folder to write: absent, empty, or a feature set this project wrote
        (replaced atomically); anything else is refused before any work
        (:func:`~classify_images.pipeline.storage.feature_store.check_destination`).
    config : PipelineConfig
        The configuration (:func:`~classify_images.pipeline.settings.config.load_config`).
    n_jobs : int
        joblib workers for the per-image steps (-1: all cores); not used on a cluster.
    cache_dir : path-like or None
        joblib cache folder (None: no cache).  On a cluster, a folder every worker can
        read and write at the same path (docs/reliability.md, "The stage cache on a shared
        file system").
    progress : callable, optional
        ``progress(iterable, description, total)`` wrapper of the per-image steps
        (default: tqdm bars on a terminal's stderr with ``verbose``, else none).
    verbose : bool or int, default=False
        Show the steps on stderr while the build runs (``2``: with details and their times),
        as scikit-learn's ``verbose`` (:func:`classify_images._log.verbose_output`); the steps
        are logged to the ``classify_images`` loggers whatever its value.
    scheduler : str, optional
        ``tcp://HOST:PORT`` of a running Dask scheduler: the per-image steps run there.
    cluster : str, optional
        ``local:N``: start a Dask ``LocalCluster`` of N worker processes for this build.
    store : {"npy", "sharded"}, optional
        Row layout: one memory-mapped ``.npy`` per split filled by this process, or shards
        written by the workers (:mod:`~classify_images.pipeline.storage.shard_store`).  Default:
        ``"npy"`` on this machine, ``"sharded"`` on a cluster (where the client should not
        receive and hold every row).
    batch_size : int, optional
        Images per Dask task and rows per shard (default :data:`DEFAULT_BATCH_SIZE`).
    execution : Execution, optional
        Where the per-image steps run, resolved once by the caller
        (:class:`~classify_images.pipeline.extraction.runner.Execution`); when given, ``n_jobs``,
        ``scheduler``, ``cluster`` and ``batch_size`` (its pieces, kept for convenience) are not used.
    force : bool
        Also replace a folder holding nothing but files of a feature set's names that no manifest
        of ours lists (``--force``; files of other names are refused all the same).
    rows : {"float32", "float16", "int8", "int4", "pq8", "pq16"} or another registered row codec, optional
        How dense rows are stored (module docstring).  Default: the encoder's
        :attr:`~classify_images.coding.encoders.Encoder.default_rows` (``int8`` for Fisher
        vectors, float32 otherwise) in the layout ``store`` gives (``npy`` on one machine).
        ``float16``, ``int8`` and ``int4`` fit either layout (default ``npy``); ``pq8`` and
        ``pq16`` need the sharded store (the default ``store`` is then ``"sharded"``).  The
        compressed forms need dense rows and are decoded to float32 blocks on reading.

    Returns
    -------
    BuildResult

    Raises
    ------
    ClusterError
        Bad ``scheduler`` / ``cluster``, Dask not installed, the scheduler unreachable or
        lost during the build (finished work stays in the stage cache: the same call resumes).
    """
    if execution is None:
        execution = Execution.from_options(n_jobs=n_jobs, scheduler=scheduler, cluster=cluster, batch_size=batch_size)
    n_jobs, spec, batch_size = execution.n_jobs, execution.cluster, execution.batch_size
    # rows None: the encoder's light default, chosen where the plan is made (channels store float32)
    # RowCodecError naming the known codecs; float16, int8 and int4 rows fit the npy store too
    needs_shards = rows is not None and not row_codec(rows).in_npy_store
    if store is None:
        store = "npy" if spec is None and not needs_shards else "sharded"
    if store not in STORE_LAYOUTS:
        raise ValueError(f"store must be one of {', '.join(STORE_LAYOUTS)}, not {store!r}")
    if store == "npy" and rows is not None and rows not in NPY_ROW_ENCODINGS:
        raise RowCodecError(
            f"--rows {rows} stores the rows compressed in shards: use --store sharded (or leave --store out)"
        )
    out = check_destination(out, dataset_dir, force=force)
    with verbose_output(verbose) as bars:
        progress = progress or tqdm_progress(bars)
        if not isinstance(
            config, PipelineConfig
        ):  # [[channel]] tables (classify_images/pipeline/extraction/channels.py)
            from .channels import build_channel_feature_set, refuse_channels

            if spec is not None or store != "npy":
                raise refuse_channels("a cluster, --store sharded or compressed --rows")
            return build_channel_feature_set(
                dataset_dir, out, config, n_jobs=n_jobs, cache_dir=cache_dir, progress=progress, force=force
            )
        if spec is None:
            return _build(dataset_dir, out, config, n_jobs, cache_dir, progress, None, store, batch_size, force, rows)
        return _build_on_cluster(
            execution, dataset_dir, out, config, n_jobs, cache_dir, progress, store, batch_size, force, rows
        )


def _build_on_cluster(
    execution: Execution,
    dataset_dir,
    out: Path,
    config: PipelineConfig,
    n_jobs: int,
    cache_dir,
    progress: Progress,
    store: str,
    batch_size: int,
    force: bool,
    rows: str | None,
) -> BuildResult:
    """:func:`_build` with a Dask client of ``execution`` (the per-image steps run on its workers)."""
    spec = execution.cluster
    # The workers do not share this process's current folder: they get absolute paths.
    dataset_dir = os.path.abspath(dataset_dir)
    cache_dir = None if cache_dir is None else os.path.abspath(os.path.expanduser(cache_dir))
    with execution.client() as client, scheduler_errors(spec, cached=cache_dir is not None):
        _log.info("running the per-image steps on %s", spec)
        if os.path.isdir(dataset_dir):  # (a missing one is the dataset step's one-line error)
            _check_workers_see(client, Path(dataset_dir), "the dataset")
        return _build(dataset_dir, out, config, n_jobs, cache_dir, progress, client, store, batch_size, force, rows)


def _check_workers_see(client, folder: Path, what: str) -> None:
    """Refuse to start when a worker cannot see ``folder`` (it is not on a file system they share).

    Raises
    ------
    ClusterError
    """
    seen = client.run(os.path.isdir, os.fspath(folder))
    blind = sorted(worker for worker, ok in seen.items() if not ok)
    if blind:
        raise ClusterError(
            f"worker {blind[0]} (and {len(blind) - 1} more) cannot see {folder}: "
            f"put {what} on a file system every worker mounts at the same path"
        )


def _build(
    dataset_dir,
    out: Path,
    config: PipelineConfig,
    n_jobs: int,
    cache_dir,
    progress: Progress,
    client,
    store: str,
    batch_size: int,
    force: bool = False,
    encoding: str | None = None,
) -> BuildResult:
    timer = StageTimer()
    plan = make_feature_plan(config)  # the configuration's objects, made once and handed down
    if encoding is None:  # the encoder's light default: int8 for Fisher vectors (Encoder.default_rows)
        encoding = plan.encoder.default_rows
    with timer("discover"):
        images = discover_images(dataset_dir, config, n_jobs, client, batch_size)
        config_hash = stage_hash(config, list(config.to_dict()), images.digest, implementation_versions(plan.encoder))
    if store == "sharded":  # a compressed encoding of sparse rows is refused before any work
        codec_for_rows(plan.sparse_rows, encoding)
        if plan.augment.mirrors:
            raise ConfigError(
                "[augment] (mirrored rows) needs the npy store: leave out --store sharded, --rows "
                "and the cluster options, or remove [augment] from the config"
            )
    reused = reuse_if_up_to_date(out, config_hash, len(images.paths), timer.timings, store, encoding)
    if reused is not None:
        return reused

    cache = StageCache(cache_dir, cache_descriptors=plan.cache_descriptors)
    runner = Runner(n_jobs, cache, progress, client, batch_size)
    with timer("check"):
        readable, skipped, warned = check_images(images, plan, runner)
    note = grey_images_note([images.paths[i] for i in readable], [config.sift.color])
    if note:
        _log.info("%s", note)
    for entry in warned[:3]:
        # INFO, not a warning: the image is kept and listed in the manifest (-q shows only what went wrong)
        _log.info("%s is damaged but decodable (%s); kept, listed in the manifest", entry["path"], entry["warning"])
    with timer("split"):
        split = split_images(images, readable, skipped, config)
        split.warnings = warned
    with image_errors_as_dataset_errors(images):
        n_descriptors, extractor = fit_extractor(
            images.paths, images.fingerprints, split.train, plan, runner, timer=timer, encoded_next=split.test
        )
    n_rows = len(split.train) + len(split.test)
    warning = check_disk_room(
        out,
        feature_set_bytes(n_rows, extractor.n_features, encoding, config.augment.mirrors),
        describe_rows(n_rows, extractor.n_features, encoding, config.augment.mirrors),
        at_most=store == "npy" and row_codec(encoding).writes_prefix,  # their bytes are known as they are written
    )
    if warning:
        _log.warning("%s", warning)
    # joblib's count: -1 every core, -2 all but one, ...; a cluster's workers are elsewhere
    workers = 0 if client is not None else (n_jobs if n_jobs > 0 else max(1, (os.cpu_count() or 1) + 1 + n_jobs))
    check_memory_room(
        build_memory_bytes(workers, extractor.n_features, RELEASE_ROWS_EVERY),
        f"encoding {n_rows} images with {workers} worker{'s' if workers != 1 else ''} on this machine",
    )
    shards = None
    with FeatureSetWriter(out, dataset_dir, force=force) as writer:
        if store == "sharded":
            if client is not None:
                _check_workers_see(client, writer.shard_folder, "the feature set (--out)")
            with timer("encode+pool"), image_errors_as_dataset_errors(images):
                shards = write_shards(extractor, images, split, writer, runner, encoding)
            with timer("normalise+write"):
                store_labels_and_codebook(writer, extractor, images.dataset.labels, split)
        else:
            with timer("encode+pool"), image_errors_as_dataset_errors(images):
                X = encode_and_pool(extractor, images, split, writer, runner, encoding)
            with timer("normalise+write"):
                fit_normalizer(extractor, X)
                check_finite(X, images, split)
                store_rows(writer, X, extractor, images.dataset.labels, split)
                del X
        writer.commit(
            build_manifest(
                config, config_hash, images, split, extractor, int(n_descriptors), timer.timings, shards, encoding
            )
        )
    return BuildResult(
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
