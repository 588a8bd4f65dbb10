"""The steps of a build that every row layout shares: discover, check, split, encode and pool, store.

:func:`~classify_images.pipeline.extraction.build.build_feature_set` (one channel) and
:func:`~classify_images.pipeline.extraction.channels.build_channel_feature_set` (several channels)
run these steps in the order the build's docstring gives; they live here, below both, so that
neither imports the other's private helpers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from joblib import Parallel, delayed

from ...features.colour import GRAY, skipped_on_grey
from ...features.preprocess import ImageReadError, is_grey_file
from ..execution.cluster import iter_tasks
from ..execution.warm_up import warm_encoding
from ..settings.config import PipelineConfig
from ..settings.dataset import (
    Dataset,
    DatasetError,
    dataset_digest,
    discover_dataset,
    file_fingerprint,
    split_indices,
    train_counts,
)
from ..settings.plan import FeaturePlan, feature_plan_of
from ..settings.protocols import short_classes, small_classes
from ..storage.coded_rows import CodedRows, stored_array
from ..storage.feature_store import (
    FeatureSetWriter,
    load_feature_set,
    release_mapped_pages,
    remove_stale_partials,
    rows_per_block,
)
from ..storage.provenance import library_versions
from ..storage.room import WrittenRowsWatch, describe_rows
from ..storage.row_codecs import RowCodec, codec_for_rows, row_codec
from ..storage.shard_store import write_shard
from .extractor import FeatureExtractor
from .fitting import image_row, image_row_and_mirror
from .runner import DEFAULT_BATCH_SIZE, Runner
from .stages import check_group_of, group_checks, implementation_versions

_log = logging.getLogger(__name__)

#: Rows normalised (or checked) at a time when a fitted normaliser is applied to the stored rows,
#: at most :data:`~classify_images.pipeline.storage.feature_store.POOLED_BLOCK_BYTES` of float32.
_NORMALISE_CHUNK = 1024


def _chunk_rows(rows) -> int:
    """Rows of ``rows`` read at a time: :data:`_NORMALISE_CHUNK`, fewer for long rows (64 Fisher
    vectors of 1 MiB), so that the float32 rows decoded and their masks stay small."""
    return rows_per_block(4 * rows.shape[1], _NORMALISE_CHUNK)


#: Training rows a row codec's state (the product-quantisation codebooks) is learnt from, at
#: most (sent to the client: 1 GiB of 262 144-dimensional Fisher vectors).
PQ_SAMPLE_ROWS = 1024
#: Training shards the sample is drawn from, at most (evenly spaced): without a stage cache they
#: are the images encoded twice (ImageNet-1k: 256 of ~20 000 training shards of 64 images).
PQ_SAMPLE_SHARDS = 256


def pq_sample_shards(n_training_shards: int) -> np.ndarray:
    """Indices of the training shards a row codec's state (the PQ codebooks) is learnt from: at most
    :data:`PQ_SAMPLE_SHARDS`, evenly spaced (the shards hold the classes in turn).  Every image
    of these shards is encoded by the sample pass."""
    return np.unique(np.linspace(0, n_training_shards - 1, min(n_training_shards, PQ_SAMPLE_SHARDS)).astype(int))


@dataclass
class BuildResult:
    """Summary of a build (also in the manifest)."""

    path: Path
    n_images: int
    n_train: int
    n_test: int
    n_skipped: int
    n_features: int
    n_classes: int
    timings: dict[str, float]
    reused: bool


class StageTimer:
    """Wall-clock seconds per named step: ``with timer("check"): ...``."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.timings[step] = round(time.perf_counter() - start, 3)


@dataclass
class _Images:
    """The discovered images: relative and absolute paths, content fingerprints, labels."""

    dataset: Dataset
    paths: list[str]
    fingerprints: list[str]
    digest: str


@dataclass
class _Split:
    """The readable images split for training and testing, and the skipped files."""

    train: np.ndarray
    test: np.ndarray
    skipped: list[dict[str, str]] = field(default_factory=list)
    #: readable images whose decoder warned (a damaged JPEG stream decoded in part)
    warnings: list[dict[str, str]] = field(default_factory=list)


#: Images per Dask task of the cheap stages (fingerprint, check), in units of the batch size:
#: reading or decoding an image costs a small fraction of sampling or encoding it, so their
#: tasks hold more images for the same share of scheduler overhead (docs/benchmarks/cluster-and-scale.md: "Dask
#: scheduler overhead per task").
_CHEAP_STAGE_BATCHES = 8


def discover_images(
    dataset_dir: str | os.PathLike,
    config: PipelineConfig,
    n_jobs: int,
    client=None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> _Images:
    dataset = discover_dataset(dataset_dir, keep_background=config.dataset.keep_background)
    paths = [str(dataset.absolute(p)) for p in dataset.paths]
    calls = [delayed(_fingerprint_or_reason)(p) for p in paths]
    if client is None:
        fingerprints = Parallel(n_jobs=n_jobs, prefer="threads")(calls)
    else:  # the workers read the files (on a file system they share), the client only lists them
        fingerprints = [None] * len(calls)
        for index, result in iter_tasks(client, calls, "fingerprint", batch_size=batch_size * _CHEAP_STAGE_BATCHES):
            fingerprints[index] = result
    unreadable = [i for i, (_, reason) in enumerate(fingerprints) if reason is not None]
    if unreadable:  # listed as skipped, like every file that cannot be used
        keep = [i for i in range(len(paths)) if i not in set(unreadable)]
        dataset = dataclasses.replace(
            dataset,
            paths=[dataset.paths[i] for i in keep],
            labels=dataset.labels[keep],
            unusable=dataset.unusable + [{"path": dataset.paths[i], "reason": fingerprints[i][1]} for i in unreadable],
        )
        paths, fingerprints = [paths[i] for i in keep], [fingerprints[i] for i in keep]
    fingerprints = [digest for digest, _ in fingerprints]
    return _Images(dataset, paths, fingerprints, dataset_digest(dataset.paths, fingerprints))


def _fingerprint_or_reason(path: str) -> tuple[str | None, str | None]:
    try:
        return file_fingerprint(path), None
    except OSError as exc:
        return None, f"cannot read file ({exc.strerror or exc})"


def reuse_if_up_to_date(
    out: Path, config_hash: str, n_images: int, timings: dict, store: str = "npy", encoding: str = "float32"
) -> BuildResult | None:
    """The existing feature set at ``out`` when it was built with ``config_hash`` into the ``store`` layout,
    its rows stored as ``encoding``.

    Any failure to load it (torn, tampered or partial files) means "rebuild it"."""
    if not (out / "manifest.json").exists():
        return None
    try:
        existing = load_feature_set(out)
    except Exception:
        return None
    if existing.config_hash != config_hash or existing.layout != store or existing.row_encoding != encoding:
        return None
    remove_stale_partials(out)  # (what a build killed at its final rename left beside it)
    _log.info("feature set %s is up to date (config hash %s); nothing to do", out, config_hash[:12])
    return BuildResult(
        path=out,
        n_images=n_images,
        n_train=existing.rows["train"].shape[0],
        n_test=existing.rows["test"].shape[0],
        n_skipped=len(existing.manifest["skipped"]),
        n_features=existing.n_features,
        n_classes=len(existing.class_names),
        timings={"total": round(sum(timings.values()), 3)},
        reused=True,
    )


def check_images(
    images: _Images, config: PipelineConfig | FeaturePlan, runner: Runner
) -> tuple[np.ndarray, list[dict[str, str]], list]:
    """Indices of the readable images, the skipped ones with their reasons, and the readable
    ones whose decoder warned (checked with the plan's ``[image]`` limits and largest patch)."""
    plan = feature_plan_of(config)
    max_side, largest_patch, max_pixels = plan.max_side, plan.smallest_image_side, plan.max_pixels
    # one cache entry per group of images (stages.check_image_group), each image checked once
    # (its first path; an identical file elsewhere has the same result)
    groups: dict[str, dict[str, str]] = {}  # group -> {fingerprint: its first path}
    for path, fingerprint in zip(images.paths, images.fingerprints, strict=True):
        groups.setdefault(check_group_of(fingerprint), {}).setdefault(fingerprint, path)
    members = [sorted(groups[name].items()) for name in sorted(groups)]  # (fingerprint, path), by fingerprint
    check = delayed(runner.cache.check_image_group)
    results = runner.map(
        [check([p for _, p in m], [f for f, _ in m], max_side, largest_patch, max_pixels) for m in members],
        "check images",
        sizes=[len(m) for m in members],
        batch_size=1,
    )
    by_fingerprint = {}
    for member, result in zip(members, results, strict=True):
        by_fingerprint.update(zip((f for f, _ in member), group_checks(result), strict=True))
    checks = [by_fingerprint[f] for f in images.fingerprints]
    skipped = list(images.dataset.unusable)
    skipped += [{"path": images.dataset.paths[i], "reason": c["reason"]} for i, c in enumerate(checks) if not c["ok"]]
    warned = [
        {"path": images.dataset.paths[i], "warning": c["warning"]} for i, c in enumerate(checks) if c.get("warning")
    ]
    readable = np.flatnonzero([c["ok"] for c in checks])
    if readable.size == 0:
        raise DatasetError(f"no readable image in {images.dataset.root} ({len(skipped)} skipped)")
    return readable, skipped, warned


def grey_images_note(paths: list[str], colour_spaces: list[str]) -> str | None:
    """The one log line of a colour build on grey images: how many of ``paths`` are stored grey
    (Pillow mode, header only) and which colour channels their descriptors skip (zero or a copy of
    another channel, :meth:`~classify_images.features.descriptors.DenseSift.compute`); None when no
    colour space is configured or no image is grey."""
    spaces = sorted({space for space in colour_spaces if space != GRAY})
    if not spaces:
        return None
    grey = sum(is_grey_file(path) for path in paths)
    if grey == 0:
        return None
    skipped = "; ".join(f"{space}: {skipped_on_grey(space)}" for space in spaces)
    if grey == len(paths):
        return (
            f"all {grey} images are grey: their colour channels are skipped ({skipped}), "
            "so colour descriptors cost about as much as grey ones here"
        )
    return f"{grey} of {len(paths)} images are grey: their colour channels are skipped ({skipped})"


@contextlib.contextmanager
def image_errors_as_dataset_errors(images: _Images) -> Iterator[None]:
    """An image that passed the check but fails later (it changed on disk meanwhile): one line."""
    try:
        yield
    except ImageReadError as exc:
        where = exc.path or images.dataset.root
        raise DatasetError(f"{where}: {exc.reason}") from None


def split_images(images: _Images, readable: np.ndarray, skipped: list, config: PipelineConfig) -> _Split:
    """Seeded per-class split of the readable images (every class needs a test image)."""
    dataset, protocol = images.dataset, config.dataset
    readable_per_class = np.bincount(dataset.labels[readable], minlength=len(dataset.class_names))
    needed = 1 if protocol.train_fraction is not None else protocol.train_per_class  # training images per class
    short = [n for n, k in zip(dataset.class_names, readable_per_class) if k < needed + 1]
    if short:
        smallest = int(readable_per_class.min())
        classes = f"class(es) {', '.join(short[:5])}{' …' if len(short) > 5 else ''}"
        if smallest < 2:  # no --train-per-class can help: a class needs a training and a test image
            raise DatasetError(
                f"{classes} have fewer than 2 readable images (smallest: {smallest}; each class needs one "
                "training and one test image): add readable images or remove those class folders"
            )
        raise DatasetError(
            f"{classes} have fewer than {protocol.train_per_class + 1} readable images (smallest: {smallest}); "
            f"use --protocol half (half of each class for training) or lower --train-per-class to at most "
            f"{smallest - 1}"
        )
    if protocol.train_fraction is not None:
        per_class = train_counts(readable_per_class, protocol.train_fraction)
        warning = small_classes(dataset.class_names, per_class)
    else:
        warning = short_classes(
            dataset.class_names, readable_per_class, protocol.train_per_class, protocol.test_per_class
        )
    if warning is not None:
        warnings.warn(warning, UserWarning, stacklevel=2)
    train_local, test_local = split_indices(
        dataset.labels[readable],
        protocol.train_per_class,
        protocol.test_per_class,
        protocol.seed,
        train_fraction=protocol.train_fraction,
    )
    return _Split(readable[train_local], readable[test_local], skipped)


def encode_and_pool(
    extractor: FeatureExtractor,
    images: _Images,
    split: _Split,
    writer: FeatureSetWriter,
    runner: Runner,
    encoding: str = "float32",
) -> dict[str, np.ndarray]:
    """The rows ``X_train``, ``X_test`` (memory-mapped, stored as ``encoding``: float32, float16, or
    8- or 4-bit codes read and written through a :class:`~classify_images.pipeline.storage.coded_rows.CodedRows`),
    normalised when the normaliser is per-vector, pooled only when it still has to be fitted.

    The rows written are flushed to the file and dropped from this process's memory every
    :data:`RELEASE_ROWS_EVERY` rows: written pages of a memory-mapped file count in the resident
    memory until then, and a Fisher-vector build's rows are gigabytes."""
    normalized = extractor.normalizer.is_fitted
    X = {
        "train": writer.open_rows("X_train", len(split.train), extractor.n_features, encoding),
        "test": writer.open_rows("X_test", len(split.test), extractor.n_features, encoding),
    }
    rows = [("train", r) for r in range(len(split.train))] + [("test", r) for r in range(len(split.test))]
    order = np.concatenate([split.train, split.test])
    mirrors = extractor.config.augment.mirrors
    if mirrors:  # and the mirror of every image, row for row (feature_store.MIRROR_ARRAYS), in the image's task
        X |= {
            f"{part}_flip": writer.open_rows(f"X_{part}_flip", len(X[part]), extractor.n_features, encoding)
            for part in ("train", "test")
        }
        tasks = [
            delayed(image_row_and_mirror)(images.paths[i], images.fingerprints[i], normalized=normalized) for i in order
        ]
    else:
        tasks = [delayed(image_row)(images.paths[i], images.fingerprints[i], normalized=normalized) for i in order]
    if runner.parallel_here:  # the workers load the kernels the parent compiled
        for channel in getattr(extractor, "extractors", [extractor]):  # (a multi-channel extractor: each channel)
            warm_encoding(channel)
    warm_row_codec(X["train"], extractor.n_features)
    watch = written_rows_watch(writer, X, describe_rows(len(order), extractor.n_features, encoding, mirrors))
    # The extractor (its codebook) goes to each worker once: shared with a cluster's workers,
    # memory-mapped by joblib (max_nbytes) on this machine.
    vectors = runner.imap(tasks, "encode + pool", shared={"extractor": extractor}, max_nbytes="100K")
    sizes = [2] * len(tasks) if mirrors else len(tasks)
    for done, (index, vector) in enumerate(runner.progress_of(vectors, "encode + pool", sizes), start=1):
        part, row = rows[index]
        if mirrors:
            X[part][row], X[f"{part}_flip"][row] = vector
        else:
            X[part][row] = vector
        if done % RELEASE_ROWS_EVERY == 0:
            release_written_rows(X)
        if watch is not None and done % DISK_CHECK_EVERY == 0:
            watch.check(done * (2 if mirrors else 1))
    release_written_rows(X)
    return X


#: Images encoded between two checks of the disk that rows written as prefixes will need.
DISK_CHECK_EVERY = 32


def written_rows_watch(writer: FeatureSetWriter, X: dict[str, Any], what: str) -> WrittenRowsWatch | None:
    """A :class:`~classify_images.pipeline.storage.room.WrittenRowsWatch` of the row files whose
    bytes are known only as their rows are written (packed 8-bit codes); None for the others
    (their files are allocated before the first row, and checked before the encoding)."""
    coded = [rows for rows in X.values() if isinstance(rows, CodedRows) and rows.path is not None]
    if not coded:
        return None
    n_rows = sum(len(rows) for rows in X.values())
    return WrittenRowsWatch(writer.out, [rows.path for rows in coded], n_rows, coded[0].n_features, what)


def warm_row_codec(rows, n_features: int) -> None:
    """Compile the kernels that code the rows (packed 8-bit codes: a few seconds the first time)
    by coding one row of zeros, before the workers start: rows arriving while the building
    process compiles wait in its memory (2 MB an image with its mirror; +0.6 GB measured on a
    cold two-worker build)."""
    if isinstance(rows, CodedRows):
        rows.codec.encode(np.zeros((1, n_features), dtype=np.float32), None)


#: Rows written into the memory-mapped row files between two :func:`release_written_rows`
#: (256 Fisher vectors: 128 MiB in float16, 256 MiB in float32).
RELEASE_ROWS_EVERY = 256


def release_written_rows(X: dict[str, np.ndarray]) -> None:
    """Write the rows' dirty pages to their files and drop every mapped page from this process's
    resident memory (read back from the page cache or the disk if needed again)."""
    for rows in X.values():
        if isinstance(stored_array(rows), np.memmap):
            rows.flush()
            release_mapped_pages(rows)


def _encode_shard(
    images: list[tuple[str, str]],
    folder: str,
    part: str,
    index: int,
    codec: RowCodec,
    *,
    extractor: FeatureExtractor,
    normalized: bool,
    statistics_only: bool = False,
    sample_rows: int = 0,
    codec_state: Any = None,
) -> dict[str, Any]:
    """One task of a sharded build: the rows of ``images``, written by the worker as shard
    ``index`` of ``part`` in ``folder`` by ``codec`` (with its learnt ``codec_state``, if any).

    Returns ``{"entry": …}`` (the shard's manifest entry), ``{"non_finite": [local rows]}``
    (nothing written), with ``statistics_only`` the column minima and maxima of the
    pooled rows (``{"minima", "maxima"}``, nothing written) for fitting a normaliser, or with
    ``sample_rows`` that many of its finite rows, evenly spaced (``{"sample"}``, nothing written)
    for learning the codec's state (product-quantisation codebooks).
    """
    rows = np.stack(
        [image_row(path, fingerprint, extractor=extractor, normalized=normalized) for path, fingerprint in images]
    ).astype(np.float32, copy=False)
    if statistics_only:
        return {"minima": rows.min(axis=0), "maxima": rows.max(axis=0)}
    finite = np.isfinite(rows).all(axis=1)
    if sample_rows:
        rows = rows[finite]
        return {
            "sample": rows[np.unique(np.linspace(0, rows.shape[0] - 1, min(sample_rows, rows.shape[0])).astype(int))]
            if rows.shape[0]
            else rows
        }
    if not finite.all():
        return {"non_finite": np.flatnonzero(~finite).tolist()}
    return {"entry": write_shard(folder, part, index, rows, codec, codec_state)}


@dataclass
class _Shards:
    """The shards of a sharded build: which images each holds, then their manifest entries."""

    codec: RowCodec
    rows_per_shard: int
    #: (part, index of the shard in its part, positions of its images in ``split.train`` / ``split.test``)
    plan: list[tuple[str, int, np.ndarray]]
    entries: dict[str, list[dict]] = field(default_factory=dict)
    #: how dense rows are stored (``--rows``), and the entry of the codec's learnt state, if any
    encoding: str = "float32"
    codebooks: dict | None = None

    def manifest(self, n_features: int) -> dict[str, Any]:
        n_values = sum(entry["rows"] for entries in self.entries.values() for entry in entries) * n_features
        nnz = sum(entry["nnz"] for entries in self.entries.values() for entry in entries)
        compressed = {} if self.codebooks is None else {"codebooks": self.codebooks}
        return {
            "layout": "sharded",
            "format": self.codec.format,
            "rows": self.encoding,
            "rows_per_shard": self.rows_per_shard,
            "density": round(nnz / max(n_values, 1), 6),
            "shards": self.entries,
            **compressed,
        }


def write_shards(
    extractor: FeatureExtractor,
    images: _Images,
    split: _Split,
    writer: FeatureSetWriter,
    runner: Runner,
    encoding: str = "float32",
) -> _Shards:
    """Every row of the feature set, written by the workers as shards of ``runner.batch_size`` rows.

    A normaliser with training statistics (``minmax``) is fitted first from the column
    minima and maxima of the training shards' pooled rows (combined exactly), then every
    shard is computed again, normalised, from the stage cache.  Product-quantised rows
    (``encoding`` ``pq8`` / ``pq16``) likewise first learn their codebooks from a sample of
    the training rows (module docstring); so does any row codec with a learnt state.
    """
    size = runner.batch_size
    shards = _Shards(codec_for_rows(extractor.encoder.sparse_rows, encoding), size, [], encoding=encoding)
    for part, index in (("X_train", split.train), ("X_test", split.test)):
        shards.plan += [
            (part, k, np.arange(start, min(start + size, len(index))))
            for k, start in enumerate(range(0, len(index), size))
        ]
    split_index = {"X_train": split.train, "X_test": split.test}

    def tasks(plan, **options):
        return [
            delayed(_encode_shard)(
                [(images.paths[i], images.fingerprints[i]) for i in split_index[part][rows]],
                os.fspath(writer.shard_folder),
                part,
                k,
                shards.codec,
                **options,
            )
            for part, k, rows in plan
        ]

    def run(plan, description, extractor, codec_state=None, **options):
        # the codebooks (as large as 256 rows) travel to each worker once, as the extractor does
        shared = {"extractor": extractor}
        if codec_state is not None:
            shared["codec_state"] = codec_state
        return runner.map(
            tasks(plan, **options),
            description,
            sizes=[len(rows) for _, _, rows in plan],
            shared=shared,
            batch_size=1,
            max_nbytes="100K",
        )

    if not extractor.normalizer.is_fitted:
        training = [step for step in shards.plan if step[0] == "X_train"]
        statistics = run(training, "pool (statistics)", extractor, normalized=False, statistics_only=True)
        minima = np.minimum.reduce([result["minima"] for result in statistics])
        maxima = np.maximum.reduce([result["maxima"] for result in statistics])
        extractor.normalizer = type(extractor.normalizer).from_statistics(
            extractor.normalizer.method, np.stack([minima, maxima])
        )
    codec_state = None
    if shards.codec.state_file is not None:
        training = [step for step in shards.plan if step[0] == "X_train"]
        # at most PQ_SAMPLE_SHARDS evenly spaced shards (the shards hold the classes in turn)
        picked = pq_sample_shards(len(training))
        per_shard = -(-PQ_SAMPLE_ROWS // len(picked))
        samples = run(
            [training[k] for k in picked], "pool (codebook sample)", extractor, normalized=True, sample_rows=per_shard
        )
        codec_state = shards.codec.fit(np.concatenate([result["sample"] for result in samples]))
        shards.codebooks = writer.save_codec_state(shards.codec, codec_state)
    results = run(shards.plan, "encode + pool", extractor, normalized=True, codec_state=codec_state)
    bad = [
        images.dataset.paths[split_index[part][rows[r]]]
        for (part, _, rows), result in zip(shards.plan, results)
        for r in result.get("non_finite", [])
    ]
    if bad:
        raise _non_finite_error(bad)
    shards.entries = {
        part: [result["entry"] for (p, _, _), result in zip(shards.plan, results) if p == part]
        for part in ("X_train", "X_test")
    }
    return shards


def fit_normalizer(extractor: FeatureExtractor, X: dict[str, np.ndarray]) -> None:
    """Fit a normaliser with training statistics on the training rows and apply it to all rows."""
    if extractor.normalizer.is_fitted:
        return
    normalizer = extractor.normalizer.fit(np.asarray(X["train"]))
    for part in X.values():
        step = _chunk_rows(part)
        for start in range(0, part.shape[0], step):
            rows = slice(start, start + step)
            part[rows] = normalizer.transform(np.asarray(part[rows]))


def check_finite(X: dict[str, np.ndarray], images: _Images, split: _Split) -> None:
    """Refuse to write rows holding NaN or ±inf (a classifier would fail on them later); the
    memory-mapped rows read are released from this process chunk by chunk."""
    bad = []
    for part, index in (
        ("train", split.train),
        ("test", split.test),
        ("train_flip", split.train),
        ("test_flip", split.test),
    ):
        if part not in X:
            continue
        rows, step = X[part], _chunk_rows(X[part])
        for start in range(0, rows.shape[0], step):
            finite = np.isfinite(np.asarray(rows[start : start + step])).all(axis=1)
            bad += [images.dataset.paths[index[start + r]] for r in np.flatnonzero(~finite)]
            # the pages read stay resident in this process until released: the whole set otherwise
            release_mapped_pages(rows)
    if bad:
        raise _non_finite_error(bad)


def _non_finite_error(bad: list[str]) -> DatasetError:
    return DatasetError(
        f"the features of {len(bad)} image(s) are not finite (first: {bad[0]}); "
        "check [normalization] and [sift] in the config, or remove those images"
    )


def store_rows(
    writer: FeatureSetWriter, X: dict[str, np.ndarray], extractor: FeatureExtractor, labels: np.ndarray, split: _Split
) -> None:
    """Flush the rows; save the labels, the codebook and the normaliser's statistics."""
    for part in X.values():
        part.flush()
    store_labels_and_codebook(writer, extractor, labels, split)


def store_labels_and_codebook(
    writer: FeatureSetWriter, extractor: FeatureExtractor, labels: np.ndarray, split: _Split
) -> None:
    writer.save_normalizer(extractor.normalizer)
    writer.save("y_train", labels[split.train])
    writer.save("y_test", labels[split.test])
    writer.save_codebook(extractor.codebook)


def build_manifest(
    config: PipelineConfig,
    config_hash: str,
    images: _Images,
    split: _Split,
    extractor: FeatureExtractor,
    n_training_descriptors: int,
    timings: dict[str, float],
    shards: _Shards | None = None,
    encoding: str = "float32",
) -> dict:
    store = {} if shards is None else {"store": shards.manifest(extractor.n_features)}
    if shards is None and row_codec(encoding).compressed:  # npy row files of another dtype (absent: float32)
        store["rows"] = encoding
    if config.augment.mirrors:
        store["augment"] = {
            "mirrors": True,
            "arrays": {"train": "X_train_flip", "test": "X_test_flip"},
            "aligned": "row i of X_<split>_flip is the mirrored image of row i of X_<split>",
        }
    return {
        **images_manifest(config, config_hash, images, split, timings),
        "n_features": extractor.n_features,
        "codebook": {
            "kind": extractor.encoder.kind,
            "size": extractor.encoder.n_words(extractor.codebook),
            "n_training_descriptors": n_training_descriptors,
            "digest": extractor.codebook_digest,
        },
        "implementation_versions": implementation_versions(extractor.encoder),
        **store,
    }


def images_manifest(config: Any, config_hash: str, images: _Images, split: _Split, timings: dict[str, float]) -> dict:
    """The manifest entries of any feature set: config, images, split, skipped files, timings, versions."""
    dataset = images.dataset
    return {
        "config": config.to_dict(),
        "config_hash": config_hash,
        "dataset": {"root": str(dataset.root.resolve()), "digest": images.digest, "n_images": len(images.paths)},
        "class_names": dataset.class_names,
        "split": {
            "seed": config.dataset.seed,
            "train_per_class": config.dataset.train_per_class,
            **({"train_fraction": config.dataset.train_fraction} if config.dataset.train_fraction else {}),
            "test_per_class": config.dataset.test_per_class,
            "train": [dataset.paths[i] for i in split.train],
            "test": [dataset.paths[i] for i in split.test],
        },
        "skipped": split.skipped,
        "decoder_warnings": split.warnings,
        "timings": timings,
        "versions": library_versions(),
    }
