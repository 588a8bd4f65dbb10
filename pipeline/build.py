"""Build a feature set from a folder of class folders (``classify-images build-features``).

:func:`build_feature_set` runs these steps, each timed and reported in the manifest:

1. ``discover``  — list classes and images; fingerprint every file (SHA-1).
2. ``check``     — decode every image once; unreadable ones are skipped and listed.
3. ``split``     — seeded per-class train/test split of the readable images.
4. ``sample``    — a seeded sample of descriptors of the *training* images, and
5. ``codebook``  — the encoder's codebook learnt from it: the fitted extractor
   (:func:`~classify_images.pipeline.fitting.fit_extractor`, shared with ``ImageFeatures.fit``).
6. ``encode+pool`` — per image, with the :class:`~classify_images.pipeline.extractor.FeatureExtractor`:
   descriptors → the encoder's vector over the spatial pyramid (streamed image by image into memory-mapped
   arrays; the descriptors of all images are never in memory together).  A per-vector
   normalisation (``l1``, ``l2``, ``power``, ``none``) is applied here, image by image.
7. ``normalise+write`` — a normalisation with training statistics (``minmax``) is fitted
   on the training rows and applied to all rows; then the feature store is written,
   atomically.

Per-image work runs through :class:`joblib.Parallel` (``n_jobs``) and through
the :class:`~classify_images.pipeline.stages.StageCache`, so re-running with the
same config recomputes nothing, and changing only pooling or normalisation
reuses the cached codes.

On a Dask cluster (``scheduler`` / ``cluster``, :mod:`~classify_images.pipeline.cluster`)
the same calls run as tasks of ``batch_size`` images each; the descriptor sample stays on
the workers and the codebook is learnt by one of them
(:func:`~classify_images.pipeline.fitting.codebook_from_sample`; the client receives only the codebook); the fitted extractor (its codebook) is sent to every
worker once, the workers read and write the stage cache
themselves (a folder they share), and the numbers are the same as on one machine: every
row is computed by the same function of the image and the codebook, and per-image seeds
derive from the image's content.  With ``store="sharded"`` the workers also write the rows,
one shard per task (:mod:`~classify_images.pipeline.shard_store`); the client receives
only each shard's name, size and checksum, and commits them with the manifest.

Compressed rows (``rows="float16"``, ``"pq8"``, ``"pq16"``, sharded store, dense rows only):
the workers write each shard compressed.  Product quantisation first needs its codebooks:
a pass over at most :data:`PQ_SAMPLE_SHARDS` training shards (evenly spaced) returns a sample
of at most :data:`PQ_SAMPLE_ROWS` training rows (spread evenly over those shards; their
vectors come from the stage cache when it is on, else these images are encoded twice), the client learns the codebooks from it
(:class:`~classify_images.coding.product_quantizer.ProductQuantizer`) and sends them to every
worker once, and every shard is then computed again from the stage cache and written as codes.
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

from .._log import verbose_output
from ..coding.encoders import make_encoder
from ..coding.product_quantizer import ROW_ENCODINGS, ProductQuantizer, RowCodecError, pq_sub_dim
from ..features.preprocess import ImageReadError
from .config import ConfigError, PipelineConfig, stage_hash
from .dataset import Dataset, DatasetError, dataset_digest, discover_dataset, file_fingerprint, split_indices
from .protocols import short_classes
from .cache_folder import default_cache_dir
from .cluster import ClusterError, iter_tasks, scheduler_errors
from .extractor import FeatureExtractor
from .fitting import fit_extractor, image_row
from .feature_store import STORE_LAYOUTS, FeatureSetWriter, check_destination, load_feature_set
from .provenance import library_versions
from .progress import tqdm_progress
from .runner import DEFAULT_BATCH_SIZE, Execution, Progress, Runner
from .shard_store import shard_format, write_shard
from .stages import StageCache, implementation_versions
from .warm_up import warm_encoding

__all__ = ["BuildResult", "build_feature_set", "default_cache_dir", "DEFAULT_BATCH_SIZE", "image_row"]

_log = logging.getLogger(__name__)

#: Rows normalised at a time when a fitted normaliser is applied to the stored rows.
_NORMALISE_CHUNK = 1024
#: Training rows the product-quantisation codebooks are learnt from, at most (sent to the client:
#: 1 GiB of 262 144-dimensional Fisher vectors).
PQ_SAMPLE_ROWS = 1024
#: Training shards the sample is drawn from, at most (evenly spaced): without a stage cache they
#: are the images encoded twice (ImageNet-1k: 256 of ~20 000 training shards of 64 images).
PQ_SAMPLE_SHARDS = 256


def pq_sample_shards(n_training_shards: int) -> np.ndarray:
    """Indices of the training shards the PQ codebook sample is drawn from: at most
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


def _discover(dataset_dir: str | os.PathLike, config: PipelineConfig, n_jobs: int, client=None,
              batch_size: int = DEFAULT_BATCH_SIZE) -> _Images:
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
            dataset, paths=[dataset.paths[i] for i in keep], labels=dataset.labels[keep],
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


def _reuse_if_up_to_date(out: Path, config_hash: str, n_images: int, timings: dict,
                         store: str = "npy", encoding: str = "float32") -> BuildResult | None:
    """The existing feature set at ``out`` when it was built with ``config_hash`` into the ``store`` layout,
    its rows stored as ``encoding``.

    Any failure to load it (torn, tampered or partial files) means "rebuild it"."""
    if not (out / "manifest.json").exists():
        return None
    try:
        existing = load_feature_set(out)
    except Exception:  # noqa: BLE001 - whatever is wrong with it, the rebuild replaces it
        return None
    if existing.config_hash != config_hash or existing.layout != store or existing.row_encoding != encoding:
        return None
    _log.info("feature set %s is up to date (config hash %s); nothing to do", out, config_hash[:12])
    return BuildResult(
        path=out, n_images=n_images, n_train=existing.rows["train"].shape[0], n_test=existing.rows["test"].shape[0],
        n_skipped=len(existing.manifest["skipped"]), n_features=existing.n_features,
        n_classes=len(existing.class_names), timings={"total": round(sum(timings.values()), 3)}, reused=True,
    )


def _check(images: _Images, config: PipelineConfig, runner: Runner) -> tuple[np.ndarray, list[dict[str, str]], list]:
    """Indices of the readable images, the skipped ones with their reasons, and the readable
    ones whose decoder warned."""
    max_side, largest_patch, max_pixels = config.image.max_side, max(config.sift.patch_sizes), config.image.max_pixels
    check = delayed(runner.cache.check_image)
    checks = runner.map(
        [check(p, f, max_side, largest_patch, max_pixels) for p, f in zip(images.paths, images.fingerprints)],
        "check images", batch_size=runner.batch_size * _CHEAP_STAGE_BATCHES,
    )
    skipped = list(images.dataset.unusable)
    skipped += [{"path": images.dataset.paths[i], "reason": c["reason"]} for i, c in enumerate(checks) if not c["ok"]]
    warned = [{"path": images.dataset.paths[i], "warning": c["warning"]} for i, c in enumerate(checks) if c.get("warning")]
    readable = np.flatnonzero([c["ok"] for c in checks])
    if readable.size == 0:
        raise DatasetError(f"no readable image in {images.dataset.root} ({len(skipped)} skipped)")
    return readable, skipped, warned


@contextlib.contextmanager
def _image_errors_as_dataset_errors(images: _Images) -> Iterator[None]:
    """An image that passed the check but fails later (it changed on disk meanwhile): one line."""
    try:
        yield
    except ImageReadError as exc:
        where = exc.path or images.dataset.root
        raise DatasetError(f"{where}: {exc.reason}") from None


def _split(images: _Images, readable: np.ndarray, skipped: list, config: PipelineConfig) -> _Split:
    """Seeded per-class split of the readable images (every class needs a test image)."""
    dataset, protocol = images.dataset, config.dataset
    readable_per_class = np.bincount(dataset.labels[readable], minlength=len(dataset.class_names))
    short = [n for n, k in zip(dataset.class_names, readable_per_class) if k < protocol.train_per_class + 1]
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
            f"lower --train-per-class to at most {smallest - 1}"
        )
    warning = short_classes(dataset.class_names, readable_per_class, protocol.train_per_class, protocol.test_per_class)
    if warning is not None:
        warnings.warn(warning, UserWarning, stacklevel=2)
    train_local, test_local = split_indices(
        dataset.labels[readable], protocol.train_per_class, protocol.test_per_class, protocol.seed
    )
    return _Split(readable[train_local], readable[test_local], skipped)


def _encode_and_pool(
    extractor: FeatureExtractor, images: _Images, split: _Split, writer: FeatureSetWriter, runner: Runner
) -> dict[str, np.ndarray]:
    """The rows ``X_train``, ``X_test`` (memory-mapped), normalised when the normaliser is
    per-vector, pooled only when it still has to be fitted."""
    normalized = extractor.normalizer.is_fitted
    X = {"train": writer.open_rows("X_train", len(split.train), extractor.n_features),
         "test": writer.open_rows("X_test", len(split.test), extractor.n_features)}
    rows = [("train", r) for r in range(len(split.train))] + [("test", r) for r in range(len(split.test))]
    order = np.concatenate([split.train, split.test])
    tasks = [delayed(image_row)(images.paths[i], images.fingerprints[i], normalized=normalized) for i in order]
    if extractor.config.augment.mirrors:  # then the mirror of every image, row for row (feature_store.MIRROR_ARRAYS)
        X |= {f"{part}_flip": writer.open_rows(f"X_{part}_flip", len(X[part]), extractor.n_features)
              for part in ("train", "test")}
        rows += [(f"{part}_flip", row) for part, row in rows]
        tasks += [delayed(image_row)(images.paths[i], images.fingerprints[i], normalized=normalized, flip=True)
                  for i in order]
    if runner.client is None and runner.n_jobs != 1:  # the workers load the kernels the parent compiled
        for channel in getattr(extractor, "extractors", [extractor]):  # (a multi-channel extractor: each channel)
            warm_encoding(channel)
    # The extractor (its codebook) goes to each worker once: shared with a cluster's workers,
    # memory-mapped by joblib (max_nbytes) on this machine.
    vectors = runner.imap(tasks, "encode + pool", shared={"extractor": extractor}, max_nbytes="100K")
    for index, vector in runner.progress_of(vectors, "encode + pool", len(tasks)):
        part, row = rows[index]
        X[part][row] = vector
    return X


def _encode_shard(
    images: list[tuple[str, str]], folder: str, part: str, index: int, fmt: str, *,
    extractor: FeatureExtractor, normalized: bool, statistics_only: bool = False, sample_rows: int = 0,
    quantizer: ProductQuantizer | None = None,
) -> dict[str, Any]:
    """One task of a sharded build: the rows of ``images``, written by the worker as shard
    ``index`` of ``part`` in ``folder`` (compressed by ``quantizer`` for format ``pq``).

    Returns ``{"entry": …}`` (the shard's manifest entry), ``{"non_finite": [local rows]}``
    (nothing written), with ``statistics_only`` the column minima and maxima of the
    pooled rows (``{"minima", "maxima"}``, nothing written) for fitting a normaliser, or with
    ``sample_rows`` that many of its finite rows, evenly spaced (``{"sample"}``, nothing written)
    for learning product-quantisation codebooks.
    """
    rows = np.stack([image_row(path, fingerprint, extractor=extractor, normalized=normalized)
                     for path, fingerprint in images]).astype(np.float32, copy=False)
    if statistics_only:
        return {"minima": rows.min(axis=0), "maxima": rows.max(axis=0)}
    finite = np.isfinite(rows).all(axis=1)
    if sample_rows:
        rows = rows[finite]
        return {"sample": rows[np.unique(np.linspace(0, rows.shape[0] - 1, min(sample_rows, rows.shape[0])).astype(int))]
                if rows.shape[0] else rows}
    if not finite.all():
        return {"non_finite": np.flatnonzero(~finite).tolist()}
    return {"entry": write_shard(folder, part, index, rows, fmt, quantizer)}


@dataclass
class _Shards:
    """The shards of a sharded build: which images each holds, then their manifest entries."""

    fmt: str
    rows_per_shard: int
    #: (part, index of the shard in its part, positions of its images in ``split.train`` / ``split.test``)
    plan: list[tuple[str, int, np.ndarray]]
    entries: dict[str, list[dict]] = field(default_factory=dict)
    #: how dense rows are stored (``--rows``), and the codebooks' entry when product-quantised
    encoding: str = "float32"
    codebooks: dict | None = None

    def manifest(self, n_features: int) -> dict[str, Any]:
        n_values = sum(entry["rows"] for entries in self.entries.values() for entry in entries) * n_features
        nnz = sum(entry["nnz"] for entries in self.entries.values() for entry in entries)
        compressed = {} if self.codebooks is None else {"codebooks": self.codebooks}
        return {"layout": "sharded", "format": self.fmt, "rows": self.encoding, "rows_per_shard": self.rows_per_shard,
                "density": round(nnz / max(n_values, 1), 6), "shards": self.entries, **compressed}


def _write_shards(
    extractor: FeatureExtractor, images: _Images, split: _Split, writer: FeatureSetWriter, runner: Runner,
    encoding: str = "float32",
) -> _Shards:
    """Every row of the feature set, written by the workers as shards of ``runner.batch_size`` rows.

    A normaliser with training statistics (``minmax``) is fitted first from the column
    minima and maxima of the training shards' pooled rows (combined exactly), then every
    shard is computed again, normalised, from the stage cache.  Product-quantised rows
    (``encoding`` ``pq8`` / ``pq16``) likewise first learn their codebooks from a sample of
    the training rows (module docstring).
    """
    size = runner.batch_size
    shards = _Shards(shard_format(extractor.encoder.sparse_rows, encoding), size, [], encoding=encoding)
    for part, index in (("X_train", split.train), ("X_test", split.test)):
        shards.plan += [(part, k, np.arange(start, min(start + size, len(index))))
                        for k, start in enumerate(range(0, len(index), size))]
    split_index = {"X_train": split.train, "X_test": split.test}

    def tasks(plan, **options):
        return [delayed(_encode_shard)([(images.paths[i], images.fingerprints[i]) for i in split_index[part][rows]],
                                       os.fspath(writer.shard_folder), part, k, shards.fmt, **options)
                for part, k, rows in plan]

    def run(plan, description, extractor, quantizer=None, **options):
        # the codebooks (as large as 256 rows) travel to each worker once, as the extractor does
        shared = {"extractor": extractor} if quantizer is None else {"extractor": extractor, "quantizer": quantizer}
        return runner.map(tasks(plan, **options), description, sizes=[len(rows) for _, _, rows in plan],
                          shared=shared, batch_size=1, max_nbytes="100K")

    if not extractor.normalizer.is_fitted:
        training = [step for step in shards.plan if step[0] == "X_train"]
        statistics = run(training, "pool (statistics)", extractor, normalized=False, statistics_only=True)
        minima = np.minimum.reduce([result["minima"] for result in statistics])
        maxima = np.maximum.reduce([result["maxima"] for result in statistics])
        extractor.normalizer = type(extractor.normalizer).from_statistics(
            extractor.normalizer.method, np.stack([minima, maxima]))
    quantizer = None
    if shards.fmt == "pq":
        training = [step for step in shards.plan if step[0] == "X_train"]
        # at most PQ_SAMPLE_SHARDS evenly spaced shards (the shards hold the classes in turn)
        picked = pq_sample_shards(len(training))
        per_shard = -(-PQ_SAMPLE_ROWS // len(picked))
        samples = run([training[k] for k in picked], "pool (codebook sample)", extractor, normalized=True,
                      sample_rows=per_shard)
        quantizer = ProductQuantizer(pq_sub_dim(encoding)).fit(np.concatenate([result["sample"] for result in samples]))
        shards.codebooks = writer.save_quantizer(quantizer)
    results = run(shards.plan, "encode + pool", extractor, normalized=True, quantizer=quantizer)
    bad = [images.dataset.paths[split_index[part][rows[r]]]
           for (part, _, rows), result in zip(shards.plan, results) for r in result.get("non_finite", [])]
    if bad:
        raise _non_finite_error(bad)
    shards.entries = {part: [result["entry"] for (p, _, _), result in zip(shards.plan, results) if p == part]
                      for part in ("X_train", "X_test")}
    return shards


def _fit_normalizer(extractor: FeatureExtractor, X: dict[str, np.ndarray]) -> None:
    """Fit a normaliser with training statistics on the training rows and apply it to all rows."""
    if extractor.normalizer.is_fitted:
        return
    normalizer = extractor.normalizer.fit(X["train"])
    for part in X.values():
        for start in range(0, part.shape[0], _NORMALISE_CHUNK):
            rows = slice(start, start + _NORMALISE_CHUNK)
            part[rows] = normalizer.transform(part[rows])


def _check_finite(X: dict[str, np.ndarray], images: _Images, split: _Split) -> None:
    """Refuse to write rows holding NaN or ±inf (a classifier would fail on them later)."""
    bad = []
    for part, index in (("train", split.train), ("test", split.test), ("train_flip", split.train),
                        ("test_flip", split.test)):
        if part not in X:
            continue
        rows = X[part]
        for start in range(0, rows.shape[0], _NORMALISE_CHUNK):
            finite = np.isfinite(rows[start : start + _NORMALISE_CHUNK]).all(axis=1)
            bad += [images.dataset.paths[index[start + r]] for r in np.flatnonzero(~finite)]
    if bad:
        raise _non_finite_error(bad)


def _non_finite_error(bad: list[str]) -> DatasetError:
    return DatasetError(
        f"the features of {len(bad)} image(s) are not finite (first: {bad[0]}); "
        "check [normalization] and [sift] in the config, or remove those images"
    )


def _store(
    writer: FeatureSetWriter, X: dict[str, np.ndarray], extractor: FeatureExtractor, labels: np.ndarray, split: _Split
) -> None:
    """Flush the rows; save the labels, the codebook and the normaliser's statistics."""
    for part in X.values():
        part.flush()
    _store_labels_and_codebook(writer, extractor, labels, split)


def _store_labels_and_codebook(writer: FeatureSetWriter, extractor: FeatureExtractor, labels: np.ndarray,
                               split: _Split) -> None:
    writer.save_normalizer(extractor.normalizer)
    writer.save("y_train", labels[split.train])
    writer.save("y_test", labels[split.test])
    writer.save_codebook(extractor.codebook)


def _manifest(
    config: PipelineConfig, config_hash: str, images: _Images, split: _Split, extractor: FeatureExtractor,
    n_training_descriptors: int, timings: dict[str, float], shards: _Shards | None = None,
) -> dict:
    store = {} if shards is None else {"store": shards.manifest(extractor.n_features)}
    if config.augment.mirrors:
        store["augment"] = {"mirrors": True, "arrays": {"train": "X_train_flip", "test": "X_test_flip"},
                            "aligned": "row i of X_<split>_flip is the mirrored image of row i of X_<split>"}
    return {
        **_images_manifest(config, config_hash, images, split, timings),
        "n_features": extractor.n_features,
        "codebook": {
            "kind": config.codebook.kind, "size": extractor.encoder.n_words(extractor.codebook),
            "n_training_descriptors": n_training_descriptors, "digest": extractor.codebook_digest,
        },
        "implementation_versions": implementation_versions(extractor.encoder),
        **store,
    }


def _images_manifest(config: Any, config_hash: str, images: _Images, split: _Split, timings: dict[str, float]) -> dict:
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
            "test_per_class": config.dataset.test_per_class,
            "train": [dataset.paths[i] for i in split.train],
            "test": [dataset.paths[i] for i in split.test],
        },
        "skipped": split.skipped,
        "decoder_warnings": split.warnings,
        "timings": timings,
        "versions": library_versions(),
    }


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
    rows: str = "float32",
) -> BuildResult:
    """Build (or reuse) the feature set of ``dataset_dir`` under ``config`` into ``out``.

    Parameters
    ----------
    dataset_dir : path-like
        Folder of class folders.
    out : path-like
        Feature-set folder to write: absent, empty, or a feature set this project wrote
        (replaced atomically); anything else is refused before any work
        (:func:`~classify_images.pipeline.feature_store.check_destination`).
    config : PipelineConfig
        The configuration (:func:`~classify_images.pipeline.config.load_config`).
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
        written by the workers (:mod:`~classify_images.pipeline.shard_store`).  Default:
        ``"npy"`` on this machine, ``"sharded"`` on a cluster (where the client should not
        receive and hold every row).
    batch_size : int, optional
        Images per Dask task and rows per shard (default :data:`DEFAULT_BATCH_SIZE`).
    execution : Execution, optional
        Where the per-image steps run, resolved once by the caller
        (:class:`~classify_images.pipeline.runner.Execution`); when given, ``n_jobs``,
        ``scheduler``, ``cluster`` and ``batch_size`` (its pieces, kept for convenience) are not used.
    force : bool
        Also replace a folder holding nothing but files of a feature set's names that no manifest
        of ours lists (``--force``; files of other names are refused all the same).
    rows : {"float32", "float16", "pq8", "pq16"}, default="float32"
        How dense rows are stored (module docstring): compressed forms need the sharded
        store (the default ``store`` is then ``"sharded"``) and dense rows; they are decoded
        to float32 blocks on reading.

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
    if rows not in ROW_ENCODINGS:
        raise RowCodecError(f"--rows must be one of {', '.join(ROW_ENCODINGS)}, not {rows!r}")
    if store is None:
        store = "npy" if spec is None and rows == "float32" else "sharded"
    if store not in STORE_LAYOUTS:
        raise ValueError(f"store must be one of {', '.join(STORE_LAYOUTS)}, not {store!r}")
    if rows != "float32" and store != "sharded":
        raise RowCodecError(f"--rows {rows} stores the rows compressed in shards: use --store sharded (or leave --store out)")
    out = check_destination(out, dataset_dir, force=force)
    with verbose_output(verbose) as bars:
        progress = progress or tqdm_progress(bars)
        if not isinstance(config, PipelineConfig):  # [[channel]] tables (pipeline/channels.py)
            from .channels import build_channel_feature_set, refuse_channels

            if spec is not None or store != "npy":
                raise refuse_channels("a cluster, --store sharded or compressed --rows")
            return build_channel_feature_set(dataset_dir, out, config, n_jobs=n_jobs, cache_dir=cache_dir,
                                             progress=progress, force=force)
        if spec is None:
            return _build(dataset_dir, out, config, n_jobs, cache_dir, progress, None, store, batch_size, force, rows)
        return _build_on_cluster(execution, dataset_dir, out, config, n_jobs, cache_dir, progress, store, batch_size,
                                 force, rows)


def _build_on_cluster(execution: Execution, dataset_dir, out: Path, config: PipelineConfig, n_jobs: int, cache_dir,
                      progress: Progress, store: str, batch_size: int, force: bool,
                      rows: str) -> BuildResult:
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
        raise ClusterError(f"worker {blind[0]} (and {len(blind) - 1} more) cannot see {folder}: "
                           f"put {what} on a file system every worker mounts at the same path")


def _build(
    dataset_dir, out: Path, config: PipelineConfig, n_jobs: int, cache_dir, progress: Progress, client,
    store: str, batch_size: int, force: bool = False, encoding: str = "float32",
) -> BuildResult:
    timer = StageTimer()
    with timer("discover"):
        images = _discover(dataset_dir, config, n_jobs, client, batch_size)
        config_hash = stage_hash(config, list(config.to_dict()), images.digest,
                                 implementation_versions(make_encoder(config.codebook_params())))
    if store == "sharded":  # a compressed encoding of sparse rows is refused before any work
        shard_format(make_encoder(config.codebook_params()).sparse_rows, encoding)
        if config.augment.mirrors:
            raise ConfigError("[augment] (mirrored rows) needs the npy store: leave out --store sharded, --rows "
                              "and the cluster options, or remove [augment] from the config")
    reused = _reuse_if_up_to_date(out, config_hash, len(images.paths), timer.timings, store, encoding)
    if reused is not None:
        return reused

    cache = StageCache(cache_dir, cache_descriptors=config.sift.cache_descriptors)
    runner = Runner(n_jobs, cache, progress, client, batch_size)
    with timer("check"):
        readable, skipped, warned = _check(images, config, runner)
    for entry in warned[:3]:
        # INFO, not a warning: the image is kept and listed in the manifest (-q shows only what went wrong)
        _log.info("%s is damaged but decodable (%s); kept, listed in the manifest", entry["path"], entry["warning"])
    with timer("split"):
        split = _split(images, readable, skipped, config)
        split.warnings = warned
    with _image_errors_as_dataset_errors(images):
        n_descriptors, extractor = fit_extractor(images.paths, images.fingerprints, split.train, config, runner,
                                                 timer=timer, encoded_next=split.test)
    shards = None
    with FeatureSetWriter(out, dataset_dir, force=force) as writer:
        if store == "sharded":
            if client is not None:
                _check_workers_see(client, writer.shard_folder, "the feature set (--out)")
            with timer("encode+pool"), _image_errors_as_dataset_errors(images):
                shards = _write_shards(extractor, images, split, writer, runner, encoding)
            with timer("normalise+write"):
                _store_labels_and_codebook(writer, extractor, images.dataset.labels, split)
        else:
            with timer("encode+pool"), _image_errors_as_dataset_errors(images):
                X = _encode_and_pool(extractor, images, split, writer, runner)
            with timer("normalise+write"):
                _fit_normalizer(extractor, X)
                _check_finite(X, images, split)
                _store(writer, X, extractor, images.dataset.labels, split)
                del X
        writer.commit(_manifest(config, config_hash, images, split, extractor, int(n_descriptors), timer.timings,
                                shards))
    return BuildResult(
        path=out, n_images=len(images.paths), n_train=len(split.train), n_test=len(split.test),
        n_skipped=len(split.skipped), n_features=extractor.n_features, n_classes=len(images.dataset.class_names),
        timings=timer.timings, reused=False,
    )
