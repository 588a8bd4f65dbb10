"""Build a feature set from a folder of class folders (``classify-images build-features``).

Stages (DESIGN.md §1), each timed and reported in the manifest:

1. ``discover``  — list classes and images; fingerprint every file (SHA-1).
2. ``check``     — decode every image once; unreadable ones are skipped and listed.
3. ``split``     — seeded per-class train/test split of the readable images.
4. ``sample``    — a seeded sample of dense-SIFT descriptors of the *training* images.
5. ``codebook``  — k-means centres or sparse-coding dictionary from that sample.
6. ``encode+pool`` — per image: descriptors → codes → spatial pyramid (streamed
   image by image into memory-mapped arrays; the descriptors of all images are
   never in memory together).
7. ``normalise`` and ``write`` — normalisation, then the feature store, atomically.

Per-image work runs through :class:`joblib.Parallel` (``n_jobs``) and through
the :class:`~classify_images.pipeline.stages.StageCache`, so re-running with the
same config recomputes nothing, and changing only pooling or normalisation
reuses the cached codes.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from joblib import Parallel, delayed

from ..coding.normalize import apply_minmax, fit_minmax, normalize_rows
from ..coding.pooling import pooled_dimension, spatial_pyramid_pool
from .config import stage_hash
from .dataset import DatasetError, discover_dataset, file_fingerprint, split_indices
from .feature_store import FeatureSetWriter, load_feature_set
from .stages import StageCache, codes_matrix, implementation_versions

__all__ = ["BuildResult", "build_feature_set", "featurize_images", "default_cache_dir"]

_PROGRESS = Callable[[Iterable, str, int], Iterable]


def default_cache_dir() -> Path:
    """``$CLASSIFY_IMAGES_CACHE`` or ``~/.cache/classify-images``."""
    env = os.environ.get("CLASSIFY_IMAGES_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "classify-images"


def _no_progress(iterable: Iterable, desc: str, total: int) -> Iterable:
    return iterable


def _sift_params(config: dict) -> dict[str, Any]:
    return {k: v for k, v in config["sift"].items() if k != "cache_descriptors"}


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


def _pool_one(cache: StageCache, path: str, fingerprint: str, config: dict, codebook: np.ndarray, digest: str) -> np.ndarray:
    codes = cache.image_codes(
        path, fingerprint, config["image"]["max_side"], _sift_params(config), config["codebook"], digest, codebook
    )
    matrix = codes_matrix(codes, codebook.shape[0])
    pooled = spatial_pyramid_pool(
        matrix,
        codes["x"],
        codes["y"],
        tuple(int(v) for v in codes["shape"]),
        codebook.shape[0],
        levels=config["pooling"]["levels"],
        method=config["pooling"]["method"],
    )
    if config["normalization"]["method"] != "minmax":
        pooled = normalize_rows(pooled, config["normalization"]["method"])[0]
    return pooled


def build_feature_set(
    dataset_dir: str | os.PathLike,
    out: str | os.PathLike,
    config: dict,
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
        Feature-set folder to write (replaced atomically when it exists).
    config : dict
        Validated configuration (:func:`~classify_images.pipeline.config.load_config`).
    n_jobs : int
        joblib workers for the per-image stages (-1: all cores).
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
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[stage] = round(now - clock, 3)
        clock = now

    dataset = discover_dataset(dataset_dir, keep_background=config["dataset"]["keep_background"])
    paths = [str(dataset.absolute(p)) for p in dataset.paths]
    fingerprints = Parallel(n_jobs=n_jobs, prefer="threads")(delayed(file_fingerprint)(p) for p in paths)
    dataset_digest = hashlib.sha1("\n".join(f"{r}:{f}" for r, f in zip(dataset.paths, fingerprints)).encode()).hexdigest()
    config_hash = stage_hash(config, list(config), dataset_digest, implementation_versions())
    lap("discover")

    out = Path(out)
    if (out / "manifest.json").exists():
        try:
            existing = load_feature_set(out)
        except ValueError:
            existing = None
        if existing is not None and existing.config_hash == config_hash:
            manifest = existing.manifest
            log(f"feature set {out} is up to date (config hash {config_hash[:12]}); nothing to do")
            return BuildResult(
                path=out, n_images=len(paths), n_train=existing.X_train.shape[0], n_test=existing.X_test.shape[0],
                n_skipped=len(manifest["skipped"]), n_features=existing.n_features,
                n_classes=len(existing.class_names), timings={"total": round(sum(timings.values()), 3)}, reused=True,
            )

    cache = StageCache(cache_dir, cache_descriptors=config["sift"]["cache_descriptors"])
    max_side = config["image"]["max_side"]
    largest_patch = max(config["sift"]["patch_sizes"])
    checks = list(progress(
        Parallel(n_jobs=n_jobs, return_as="generator")(
            delayed(cache.check_image)(p, f, max_side, largest_patch) for p, f in zip(paths, fingerprints)
        ),
        "check images", len(paths),
    ))
    skipped = [{"path": dataset.paths[i], "reason": c["reason"]} for i, c in enumerate(checks) if not c["ok"]]
    readable = np.flatnonzero([c["ok"] for c in checks])
    lap("check")
    if readable.size == 0:
        raise DatasetError(f"no readable image in {dataset.root} ({len(skipped)} skipped)")

    ds_cfg = config["dataset"]
    readable_per_class = np.bincount(dataset.labels[readable], minlength=len(dataset.class_names))
    short = [n for n, k in zip(dataset.class_names, readable_per_class) if k < ds_cfg["train_per_class"] + 1]
    if short:
        smallest = int(readable_per_class.min())
        raise DatasetError(
            f"class(es) {', '.join(short[:5])}{' …' if len(short) > 5 else ''} have fewer than "
            f"{ds_cfg['train_per_class'] + 1} readable images (smallest: {smallest}); "
            f"lower --train-per-class to at most {smallest - 1}"
            + (" or remove the classes whose images are all unreadable" if smallest == 0 else "")
        )
    train_local, test_local = split_indices(
        dataset.labels[readable], ds_cfg["train_per_class"], ds_cfg["test_per_class"], ds_cfg["seed"]
    )
    train_index, test_index = readable[train_local], readable[test_local]
    lap("split")

    cb_cfg = config["codebook"]
    per_image = max(1, math.ceil(cb_cfg["n_samples"] / len(train_index)))
    sift = _sift_params(config)
    samples = list(progress(
        Parallel(n_jobs=n_jobs, return_as="generator")(
            delayed(cache.descriptor_sample)(paths[i], fingerprints[i], max_side, sift, per_image, cb_cfg["seed"])
            for i in train_index
        ),
        "sample descriptors", len(train_index),
    ))
    sample = np.concatenate(samples)
    if sample.shape[0] > cb_cfg["n_samples"]:
        rng = np.random.default_rng(cb_cfg["seed"])
        sample = sample[np.sort(rng.choice(sample.shape[0], cb_cfg["n_samples"], replace=False))]
    lap("sample")

    log(f"learning a {cb_cfg['kind']} codebook of {cb_cfg['size']} words from {sample.shape[0]} training descriptors")
    if sample.shape[0] < cb_cfg["size"]:
        raise DatasetError(
            f"only {sample.shape[0]} training descriptors for a codebook of {cb_cfg['size']} words: "
            "use a smaller codebook.size, a denser sift.step, or more training images"
        )
    codebook = cache.learn_codebook(sample, cb_cfg)
    digest = hashlib.sha1(np.ascontiguousarray(codebook).tobytes()).hexdigest()
    lap("codebook")

    dim = pooled_dimension(codebook.shape[0], config["pooling"]["levels"])
    order = np.concatenate([train_index, test_index])
    with FeatureSetWriter(out) as writer:
        X = {"train": writer.open_rows("X_train", len(train_index), dim), "test": writer.open_rows("X_test", len(test_index), dim)}
        rows = [("train", r) for r in range(len(train_index))] + [("test", r) for r in range(len(test_index))]
        # max_nbytes: the codebook is shipped to the workers once, memory-mapped.
        pooled_iter = Parallel(n_jobs=n_jobs, return_as="generator", max_nbytes="100K")(
            delayed(_pool_one)(cache, paths[i], fingerprints[i], config, codebook, digest) for i in order
        )
        for (part, row), vector in zip(rows, progress(pooled_iter, "encode + pool", len(order))):
            X[part][row] = vector
        lap("encode+pool")

        if config["normalization"]["method"] == "minmax":
            minima, maxima = fit_minmax(X["train"])
            for part in X.values():
                for start in range(0, part.shape[0], 1024):
                    part[start : start + 1024] = apply_minmax(part[start : start + 1024], minima, maxima)
            writer.save("minmax", np.stack([minima, maxima]))
        for part in X.values():
            part.flush()
        writer.save("y_train", dataset.labels[train_index])
        writer.save("y_test", dataset.labels[test_index])
        writer.save("codebook", codebook)
        del X
        lap("normalise+write")
        from ..classifiers.persistence import library_versions

        manifest = {
            "config": config,
            "config_hash": config_hash,
            "dataset": {"root": str(dataset.root.resolve()), "digest": dataset_digest, "n_images": len(paths)},
            "class_names": dataset.class_names,
            "split": {
                "seed": ds_cfg["seed"],
                "train_per_class": ds_cfg["train_per_class"],
                "test_per_class": ds_cfg["test_per_class"],
                "train": [dataset.paths[i] for i in train_index],
                "test": [dataset.paths[i] for i in test_index],
            },
            "skipped": skipped,
            "n_features": dim,
            "codebook": {"kind": cb_cfg["kind"], "size": int(codebook.shape[0]), "n_training_descriptors": int(sample.shape[0]), "digest": digest},
            "timings": timings,
            "versions": library_versions(),
            "implementation_versions": implementation_versions(),
        }
        writer.commit(manifest)
    return BuildResult(
        path=out, n_images=len(paths), n_train=len(train_index), n_test=len(test_index), n_skipped=len(skipped),
        n_features=dim, n_classes=len(dataset.class_names), timings=timings, reused=False,
    )


def featurize_images(paths: list[str], feature_set, *, cache_dir: str | os.PathLike | None = None) -> tuple[np.ndarray, list[dict]]:
    """Feature vectors of new images, with the feature set's recorded pipeline and codebook.

    Returns
    -------
    X : ndarray float32 (n_ok, d)
        Rows of the images that could be read.
    status : list of dict
        Per input path: ``{"path", "ok", "reason"?}``.
    """
    config = feature_set.config
    codebook = feature_set.codebook()
    digest = feature_set.manifest["codebook"]["digest"]
    cache = StageCache(cache_dir, cache_descriptors=False)
    rows, status = [], []
    for path in paths:
        fingerprint = file_fingerprint(path) if os.path.isfile(path) else ""
        check = cache.check_image(path, fingerprint, config["image"]["max_side"], max(config["sift"]["patch_sizes"])) if fingerprint else {"ok": False, "reason": "file does not exist"}
        status.append({"path": path, **check})
        if check["ok"]:
            rows.append(_pool_one(cache, path, fingerprint, config, codebook, digest))
    X = np.asarray(rows, dtype=np.float32).reshape(len(rows), -1)
    minmax = feature_set.minmax()
    if minmax is not None and X.shape[0]:
        X = apply_minmax(X, minmax[0], minmax[1])
    return X, status
