"""Model files without pickle: one ``.npz`` holding the fitted arrays and a JSON header.

Layout of a model file (a NumPy ``.npz`` zip archive):

``__meta__``
    0-d unicode array holding a JSON document: format name and version,
    registered classifier name, its ``get_params()``, the class labels, the
    identity of the feature set it was trained on (config hash, dimension,
    class names, folder), the training time in seconds and the library
    versions.
``model/<attribute>``
    one plain numeric array per fitted attribute, as returned by the
    estimator's ``_model_arrays()`` and given back to ``_restore_model_arrays()``.

Files are read with ``np.load(..., allow_pickle=False)``: a tampered file can
at worst fail to load, never run code.  Files are written through
:func:`~classify_images.pipeline.atomic.atomic_write`.

The model-to-feature-set check (:func:`check_model_matches`) lives here rather
than with the classifiers: a classifier knows arrays, not feature sets.
"""

from __future__ import annotations

import json
import os
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..classifiers.registry import classifier_class, classifier_name
from .atomic import atomic_write
from .provenance import library_versions

__all__ = ["ModelFileError", "save_model", "load_model", "read_model_meta", "check_model_matches"]

FORMAT_NAME = "classify-images-model"
FORMAT_VERSION = 1
_META_KEY = "__meta__"
_ARRAY_PREFIX = "model/"


class ModelFileError(ValueError):
    """A model file cannot be read, or does not fit the data it is used with."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"parameter value {value!r} cannot be stored in a model file")


def save_model(
    path: str | os.PathLike, estimator: Any, *, feature_set: dict | None = None, train_seconds: float | None = None
) -> Path:
    """Save a fitted classifier to ``path`` (``.npz``) without pickle.

    Parameters
    ----------
    path : path-like
        Destination; ``.npz`` is appended when missing.
    estimator : fitted classifier of :mod:`classify_images.classifiers`
    feature_set : dict, optional
        Identity of the training feature set: ``config_hash``, ``n_features``,
        ``class_names`` (checked again when the model is used), ``path``.
    train_seconds : float, optional
        Time the fit took, recorded in the header (rounded to 0.1 ms).

    Returns
    -------
    path : Path
        The file written.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    classes = np.asarray(estimator.classes_)
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "classifier": classifier_name(estimator),
        "params": _jsonable(estimator.get_params(deep=False)),
        "classes": _jsonable(classes),
        "classes_dtype": classes.dtype.kind,
        "feature_set": _jsonable(feature_set or {}),
        "train_seconds": None if train_seconds is None else round(float(train_seconds), 4),
        "versions": library_versions(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    arrays = {_ARRAY_PREFIX + k: np.asarray(v) for k, v in estimator._model_arrays().items()}
    for key, value in arrays.items():
        if value.dtype.kind == "O":
            raise TypeError(f"fitted attribute {key} is an object array; cannot save without pickle")
    with atomic_write(path, "wb") as handle:
        np.savez(handle, **{_META_KEY: np.array(json.dumps(meta))}, **arrays)
    return path


def read_model_meta(path: str | os.PathLike) -> dict:
    """The JSON header of a model file (see :func:`load_model` for the errors)."""
    return _read(path, arrays=False)[0]


def _read(path, *, arrays: bool) -> tuple[dict, dict[str, np.ndarray]]:
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file {path} does not exist")
    bad = f"model file {path} is not a valid classify-images model"
    try:
        with np.load(path, allow_pickle=False) as archive:
            meta = json.loads(str(archive[_META_KEY][()]))
            loaded = {}
            if arrays:
                for key in archive.files:
                    if key.startswith(_ARRAY_PREFIX):
                        loaded[key[len(_ARRAY_PREFIX):]] = archive[key]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ModelFileError(f"{bad} (truncated, tampered or not a model: {type(exc).__name__}); re-train it") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ModelFileError(f"{bad} (unknown format header)")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(
            f"model file {path} has format version {meta.get('format_version')}; "
            f"this version of classify-images reads version {FORMAT_VERSION}: re-train it"
        )
    return meta, loaded


def load_model(path: str | os.PathLike) -> tuple[Any, dict]:
    """Load a model saved by :func:`save_model`.

    Returns
    -------
    estimator : fitted classifier
    meta : dict
        The file's JSON header (``feature_set`` holds the training feature set's
        identity, ``train_seconds`` the training time or None).

    Raises
    ------
    ModelFileError
        Missing, truncated, tampered or incompatible file (one-line message).
    """
    meta, arrays = _read(path, arrays=True)
    try:
        cls = classifier_class(meta["classifier"])
        estimator = cls().set_params(**meta["params"])
        classes = np.asarray(meta["classes"])
        if meta.get("classes_dtype") == "U":
            classes = classes.astype(str)
        estimator._restore_model_arrays(arrays, classes)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"model file {path} is not a valid classify-images model ({exc}); re-train it") from None
    return estimator, meta


def check_model_matches(meta: dict, *, config_hash: str, n_features: int, source: str = "feature set") -> None:
    """Refuse a model trained on another feature set.

    Parameters
    ----------
    meta : dict
        Header of the model file (:func:`load_model`, :func:`read_model_meta`).
    config_hash, n_features : str, int
        Identity of the features the model is about to be used on.
    source : str
        What those features are, for the message.

    Raises
    ------
    ModelFileError
        The dimension or the pipeline config differs (one-line message).
    """
    trained = meta.get("feature_set", {})
    if trained.get("n_features") is not None and int(trained["n_features"]) != int(n_features):
        raise ModelFileError(
            f"model was trained on {trained['n_features']}-dimensional features but the {source} "
            f"has {n_features} dimensions: use the feature set the model was trained on"
        )
    if trained.get("config_hash") and trained["config_hash"] != config_hash:
        raise ModelFileError(
            f"model was trained on feature set {trained['config_hash'][:12]} but the {source} is "
            f"{config_hash[:12]} (different pipeline config): re-train the model on this feature set"
        )
