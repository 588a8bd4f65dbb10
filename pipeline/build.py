"""Build a feature set from a folder of class folders (``classify-images build-features``).

:func:`build_feature_set` runs these steps, each timed and reported in the manifest:

1. ``discover``  — list classes and images; fingerprint every file (SHA-1).
2. ``check``     — decode every image once; unreadable ones are skipped and listed.
3. ``split``     — seeded per-class train/test split of the readable images.
4. ``sample``    — a seeded sample of dense-SIFT descriptors of the *training* images.
5. ``codebook``  — k-means centres or sparse-coding dictionary from that sample.
6. ``encode+pool`` — per image, with the :class:`~classify_images.pipeline.extractor.FeatureExtractor`:
   descriptors → codes → spatial pyramid (streamed image by image into memory-mapped
   arrays; the descriptors of all images are never in memory together).  A per-vector
   normalisation (``l1``, ``l2``, ``power``, ``none``) is applied here, image by image.
7. ``normalise+write`` — a normalisation with training statistics (``minmax``) is fitted
   on the training rows and applied to all rows; then the feature store is written,
   atomically.

Per-image work runs through :class:`joblib.Parallel` (``n_jobs``) and through
the :class:`~classify_images.pipeline.stages.StageCache`, so re-running with the
same config recomputes nothing, and changing only pooling or normalisation
reuses the cached codes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed

from ..coding.codebook import codebook_size
from ..features.preprocess import ImageReadError
from .config import PipelineConfig, stage_hash
from .dataset import Dataset, DatasetError, dataset_digest, discover_dataset, file_fingerprint, split_indices
from .extractor import FeatureExtractor
from .feature_store import FeatureSetWriter, check_destination, load_feature_set
from .provenance import library_versions
from .stages import StageCache, implementation_versions

__all__ = ["BuildResult", "build_feature_set", "default_cache_dir"]

_PROGRESS = Callable[[Iterable, str, int], Iterable]

#: Rows normalised at a time when a fitted normaliser is applied to the stored rows.
_NORMALISE_CHUNK = 1024


def default_cache_dir() -> Path:
    """``$CLASSIFY_IMAGES_CACHE``, else ``$XDG_CACHE_HOME/classify-images``, else ``~/.cache/classify-images``."""
    env = os.environ.get("CLASSIFY_IMAGES_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME")
    # XDG Base Directory: a relative XDG_CACHE_HOME is invalid and ignored
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return Path(env) if env else base / "classify-images"


def _no_progress(iterable: Iterable, desc: str, total: int) -> Iterable:
    return iterable


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


@dataclass
class _Runner:
    """How per-image work runs: workers, stage cache, progress reporting."""

    n_jobs: int
    cache: StageCache
    progress: _PROGRESS

    def map(self, tasks: list, description: str, **parallel_options) -> list:
        results = Parallel(n_jobs=self.n_jobs, return_as="generator", **parallel_options)(tasks)
        return list(self.progress(results, description, len(tasks)))


def _discover(dataset_dir: str | os.PathLike, config: PipelineConfig, n_jobs: int) -> _Images:
    dataset = discover_dataset(dataset_dir, keep_background=config.dataset.keep_background)
    paths = [str(dataset.absolute(p)) for p in dataset.paths]
    fingerprints = Parallel(n_jobs=n_jobs, prefer="threads")(delayed(_fingerprint_or_reason)(p) for p in paths)
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


def _reuse_if_up_to_date(out: Path, config_hash: str, n_images: int, timings: dict, log) -> BuildResult | None:
    """The existing feature set at ``out`` when it was built with ``config_hash``.

    Any failure to load it (torn, tampered or partial files) means "rebuild it"."""
    if not (out / "manifest.json").exists():
        return None
    try:
        existing = load_feature_set(out)
    except Exception:  # noqa: BLE001 - whatever is wrong with it, the rebuild replaces it
        return None
    if existing.config_hash != config_hash:
        return None
    log(f"feature set {out} is up to date (config hash {config_hash[:12]}); nothing to do")
    return BuildResult(
        path=out, n_images=n_images, n_train=existing.X_train.shape[0], n_test=existing.X_test.shape[0],
        n_skipped=len(existing.manifest["skipped"]), n_features=existing.n_features,
        n_classes=len(existing.class_names), timings={"total": round(sum(timings.values()), 3)}, reused=True,
    )


def _check(images: _Images, config: PipelineConfig, runner: _Runner) -> tuple[np.ndarray, list[dict[str, str]], list]:
    """Indices of the readable images, the skipped ones with their reasons, and the readable
    ones whose decoder warned."""
    max_side, largest_patch, max_pixels = config.image.max_side, max(config.sift.patch_sizes), config.image.max_pixels
    check = delayed(runner.cache.check_image)
    checks = runner.map(
        [check(p, f, max_side, largest_patch, max_pixels) for p, f in zip(images.paths, images.fingerprints)],
        "check images",
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
    train_local, test_local = split_indices(
        dataset.labels[readable], protocol.train_per_class, protocol.test_per_class, protocol.seed
    )
    return _Split(readable[train_local], readable[test_local], skipped)


def _sample_descriptors(images: _Images, train: np.ndarray, config: PipelineConfig, runner: _Runner) -> np.ndarray:
    """``codebook.n_samples`` descriptors (uint8) drawn evenly from the training images, seeded."""
    n_samples, seed = config.codebook.n_samples, config.codebook.seed
    per_image = max(1, math.ceil(n_samples / len(train)))
    sift, max_side = config.sift_params(), config.image.max_side
    sample_of = delayed(runner.cache.descriptor_sample)
    samples = runner.map(
        [sample_of(images.paths[i], images.fingerprints[i], max_side, sift, per_image, seed) for i in train],
        "sample descriptors",
    )
    sample = np.concatenate(samples)
    if sample.shape[0] > n_samples:
        rng = np.random.default_rng(seed)
        sample = sample[np.sort(rng.choice(sample.shape[0], n_samples, replace=False))]
    return sample


def _learn_codebook(sample: np.ndarray, config: PipelineConfig, cache: StageCache, log) -> np.ndarray:
    kind, size = config.codebook.kind, config.codebook.size
    log(f"learning a {kind} codebook of {size} words from {sample.shape[0]} training descriptors")
    if sample.shape[0] < size:
        raise DatasetError(
            f"only {sample.shape[0]} training descriptors for a codebook of {size} words: "
            "use a smaller codebook.size, a denser sift.step, or more training images"
        )
    return cache.learn_codebook(sample, config.to_dict()["codebook"])


def _encode_and_pool(
    extractor: FeatureExtractor, images: _Images, split: _Split, writer: FeatureSetWriter, runner: _Runner
) -> dict[str, np.ndarray]:
    """The rows ``X_train``, ``X_test`` (memory-mapped), normalised when the normaliser is
    per-vector, pooled only when it still has to be fitted."""
    row_of = extractor.vector if extractor.normalizer.is_fitted else extractor.pooled
    X = {"train": writer.open_rows("X_train", len(split.train), extractor.n_features),
         "test": writer.open_rows("X_test", len(split.test), extractor.n_features)}
    rows = [("train", r) for r in range(len(split.train))] + [("test", r) for r in range(len(split.test))]
    order = np.concatenate([split.train, split.test])
    # max_nbytes: the codebook is shipped to the workers once, memory-mapped.
    vectors = Parallel(n_jobs=runner.n_jobs, return_as="generator", max_nbytes="100K")(
        delayed(row_of)(images.paths[i], images.fingerprints[i]) for i in order
    )
    for (part, row), vector in zip(rows, runner.progress(vectors, "encode + pool", len(order))):
        X[part][row] = vector
    return X


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
    for part, index in (("train", split.train), ("test", split.test)):
        rows = X[part]
        for start in range(0, rows.shape[0], _NORMALISE_CHUNK):
            finite = np.isfinite(rows[start : start + _NORMALISE_CHUNK]).all(axis=1)
            bad += [images.dataset.paths[index[start + r]] for r in np.flatnonzero(~finite)]
    if bad:
        raise DatasetError(
            f"the features of {len(bad)} image(s) are not finite (first: {bad[0]}); "
            "check [normalization] and [sift] in the config, or remove those images"
        )


def _store(
    writer: FeatureSetWriter, X: dict[str, np.ndarray], extractor: FeatureExtractor, labels: np.ndarray, split: _Split
) -> None:
    """Flush the rows; save the labels, the codebook and the normaliser's statistics."""
    for part in X.values():
        part.flush()
    writer.save_normalizer(extractor.normalizer)
    writer.save("y_train", labels[split.train])
    writer.save("y_test", labels[split.test])
    writer.save_codebook(extractor.codebook)


def _manifest(
    config: PipelineConfig, config_hash: str, images: _Images, split: _Split, extractor: FeatureExtractor,
    n_training_descriptors: int, timings: dict[str, float],
) -> dict:
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
        "n_features": extractor.n_features,
        "codebook": {
            "kind": config.codebook.kind, "size": codebook_size(extractor.codebook),
            "n_training_descriptors": n_training_descriptors, "digest": extractor.codebook_digest,
        },
        "timings": timings,
        "versions": library_versions(),
        "implementation_versions": implementation_versions(config.codebook.kind),
    }


def build_feature_set(
    dataset_dir: str | os.PathLike,
    out: str | os.PathLike,
    config: PipelineConfig,
    *,
    n_jobs: int = 1,
    cache_dir: str | os.PathLike | None = None,
    progress: _PROGRESS = _no_progress,
    log: Callable[[str], None] = lambda message: None,
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
        joblib workers for the per-image steps (-1: all cores).
    cache_dir : path-like or None
        joblib cache folder (None: no cache).
    progress : callable
        ``progress(iterable, description, total)`` wrapper (e.g. tqdm).
    log : callable
        Receives one-line status messages.

    Returns
    -------
    BuildResult
    """
    out, timer = check_destination(out, dataset_dir), StageTimer()
    with timer("discover"):
        images = _discover(dataset_dir, config, n_jobs)
        config_hash = stage_hash(config, list(config.to_dict()), images.digest, implementation_versions(config.codebook.kind))
    reused = _reuse_if_up_to_date(out, config_hash, len(images.paths), timer.timings, log)
    if reused is not None:
        return reused

    runner = _Runner(n_jobs, StageCache(cache_dir, cache_descriptors=config.sift.cache_descriptors), progress)
    with timer("check"):
        readable, skipped, warned = _check(images, config, runner)
    for entry in warned[:3]:
        log(f"warning: {entry['path']} is damaged but decodable ({entry['warning']}); kept, listed in the manifest")
    with timer("split"):
        split = _split(images, readable, skipped, config)
        split.warnings = warned
    with timer("sample"), _image_errors_as_dataset_errors(images):
        sample = _sample_descriptors(images, split.train, config, runner)
    with timer("codebook"):
        extractor = FeatureExtractor(config, _learn_codebook(sample, config, runner.cache, log), cache=runner.cache)
    with FeatureSetWriter(out, dataset_dir) as writer:
        with timer("encode+pool"), _image_errors_as_dataset_errors(images):
            X = _encode_and_pool(extractor, images, split, writer, runner)
        with timer("normalise+write"):
            _fit_normalizer(extractor, X)
            _check_finite(X, images, split)
            _store(writer, X, extractor, images.dataset.labels, split)
            del X
        writer.commit(_manifest(config, config_hash, images, split, extractor, int(sample.shape[0]), timer.timings))
    return BuildResult(
        path=out, n_images=len(images.paths), n_train=len(split.train), n_test=len(split.test),
        n_skipped=len(split.skipped), n_features=extractor.n_features, n_classes=len(images.dataset.class_names),
        timings=timer.timings, reused=False,
    )
