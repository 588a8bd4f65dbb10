"""The feature store: one folder per feature set, readable without pickle.

Layout::

    manifest.json     config, config hash, versions, class names, the split
                      (paths of training and test images), skipped files with
                      their reasons, timings per stage
    X_train.npy       float32 (n_train, d)     memory-mappable
    X_test.npy        float32 (n_test, d)
    y_train.npy       int64 class indices
    y_test.npy        int64
    codebook.npy      float32 (K, 128)         to featurise new images
    codebook.npz      instead of codebook.npy for Fisher vectors: the named arrays of
                      the PCA + GMM model (``np.savez``, loaded without pickle)
    minmax.npy        float32 (2, d)           training minima and maxima, only with
                                               min-max normalisation (the fitted
                                               :class:`~classify_images.coding.normalize.Normalizer`)

The folder is assembled under a temporary name and renamed into place, and the
manifest is written last: a folder with a manifest is complete.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..coding.normalize import Normalizer
from .atomic import atomic_write_json
from .config import PipelineConfig

__all__ = ["FeatureSetError", "FeatureSet", "load_feature_set", "FeatureSetWriter"]

MANIFEST = "manifest.json"
#: The codebook: ``codebook.npy`` (one array) or ``codebook.npz`` (named arrays).
CODEBOOK = "codebook"
#: The fitted normaliser's statistics (``[minima; maxima]``), when it has any.
NORMALIZER_STATISTICS = "minmax"
FORMAT_NAME = "classify-images-feature-set"
FORMAT_VERSION = 1


class FeatureSetError(ValueError):
    """A feature-set folder is missing, incomplete or corrupt (user-facing, one line)."""


@dataclass
class FeatureSet:
    """A loaded feature set (arrays memory-mapped, read-only)."""

    path: Path
    manifest: dict
    X_train: np.ndarray
    X_test: np.ndarray
    y_train: np.ndarray
    y_test: np.ndarray
    _codebook: np.ndarray | None = field(default=None, repr=False)

    @property
    def class_names(self) -> list[str]:
        return list(self.manifest["class_names"])

    @property
    def config_hash(self) -> str:
        return str(self.manifest["config_hash"])

    @property
    def config(self) -> PipelineConfig:
        """The configuration the feature set was built with."""
        return PipelineConfig.from_dict(self.manifest["config"], source=str(self.path / MANIFEST))

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])

    @property
    def train_paths(self) -> list[str]:
        return list(self.manifest["split"]["train"])

    @property
    def test_paths(self) -> list[str]:
        return list(self.manifest["split"]["test"])

    def codebook(self) -> np.ndarray | dict[str, np.ndarray]:
        """The codebook the features were encoded with (a dict of arrays for a Fisher model)."""
        if self._codebook is None:
            if (self.path / f"{CODEBOOK}.npz").exists():
                self._codebook = _load_arrays(self.path, f"{CODEBOOK}.npz")
            else:
                self._codebook = _load_array(self.path, f"{CODEBOOK}.npy")
        return self._codebook

    def normalizer(self) -> Normalizer:
        """The normaliser the rows were normalised with, fitted on the training rows."""
        method = self.manifest["config"]["normalization"]["method"]
        statistics = None
        if not Normalizer(method).per_vector:
            statistics = _load_array(self.path, f"{NORMALIZER_STATISTICS}.npy")
        return Normalizer.from_statistics(method, statistics)

    def identity(self) -> dict:
        """What a model records of the feature set it was trained on."""
        return {
            "config_hash": self.config_hash,
            "n_features": self.n_features,
            "class_names": self.class_names,
            "path": str(self.path.resolve()),
        }


def _load_array(folder: Path, name: str, mmap: bool = False) -> np.ndarray:
    path = folder / name
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise FeatureSetError(f"feature set {folder} is incomplete: {name} is missing; rebuild it") from None
    except (OSError, ValueError) as exc:
        raise FeatureSetError(f"feature set {folder}: {name} is corrupt ({exc}); rebuild it") from None


def _load_arrays(folder: Path, name: str) -> dict[str, np.ndarray]:
    """The named arrays of an ``.npz`` file, read into memory, without pickle."""
    try:
        with np.load(folder / name, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as exc:
        raise FeatureSetError(f"feature set {folder}: {name} is corrupt ({exc}); rebuild it") from None


def load_feature_set(path: str | os.PathLike) -> FeatureSet:
    """Open a feature set folder written by ``classify-images build-features``.

    Raises
    ------
    FeatureSetError
        Missing folder, no manifest (incomplete build), corrupt arrays, or
        arrays whose shapes disagree with the manifest.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FeatureSetError(f"feature set {folder} does not exist (build it with: classify-images build-features DATASET --out {folder})")
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        raise FeatureSetError(f"{folder} is not a complete feature set (no {MANIFEST}); rebuild it")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FeatureSetError(f"{manifest_path} is not valid JSON ({exc}); rebuild the feature set") from None
    if manifest.get("format") != FORMAT_NAME:
        raise FeatureSetError(f"{folder} is not a classify-images feature set")
    arrays = {name: _load_array(folder, f"{name}.npy", mmap=True) for name in ("X_train", "X_test", "y_train", "y_test")}
    n_train, n_test = len(manifest["split"]["train"]), len(manifest["split"]["test"])
    if arrays["X_train"].shape[0] != n_train or arrays["X_test"].shape[0] != n_test:
        raise FeatureSetError(f"feature set {folder}: array shapes disagree with the manifest; rebuild it")
    return FeatureSet(path=folder, manifest=manifest, **arrays)


class FeatureSetWriter:
    """Assemble a feature set in a temporary folder, then move it into place.

    Usage::

        with FeatureSetWriter(out) as writer:
            X_train = writer.open_rows("X_train", n, d)    # memory-mapped .npy
            ...
            writer.save("y_train", y)
            writer.commit(manifest)                        # manifest last, then rename
    """

    def __init__(self, out: str | os.PathLike) -> None:
        self.out = Path(out)
        self.tmp = self.out.with_name(f".{self.out.name}.partial-{os.getpid()}")

    def __enter__(self) -> "FeatureSetWriter":
        self.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir()
        return self

    def open_rows(self, name: str, n_rows: int, n_cols: int) -> np.ndarray:
        return np.lib.format.open_memmap(self.tmp / f"{name}.npy", mode="w+", dtype=np.float32, shape=(n_rows, n_cols))

    def save(self, name: str, array: np.ndarray) -> None:
        np.save(self.tmp / f"{name}.npy", np.asarray(array), allow_pickle=False)

    def save_codebook(self, codebook: np.ndarray | dict[str, np.ndarray]) -> None:
        """Store the codebook: one array as ``codebook.npy``, named arrays as ``codebook.npz``."""
        if isinstance(codebook, dict):
            np.savez(self.tmp / f"{CODEBOOK}.npz", **{key: np.asarray(value) for key, value in codebook.items()})
        else:
            self.save(CODEBOOK, codebook)

    def save_normalizer(self, normalizer: Normalizer) -> None:
        """Store the fitted normaliser's statistics (nothing for per-vector methods)."""
        statistics = normalizer.statistics()
        if statistics is not None:
            self.save(NORMALIZER_STATISTICS, statistics)

    def commit(self, manifest: dict) -> Path:
        manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **manifest}
        atomic_write_json(self.tmp / MANIFEST, manifest)
        old = None
        if self.out.exists():
            old = self.out.with_name(f".{self.out.name}.old-{os.getpid()}")
            os.replace(self.out, old)
        os.replace(self.tmp, self.out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.out

    def __exit__(self, *exc_info) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
