"""Self-contained model files without pickle: one ``.npz`` holding the fitted arrays and a JSON header.

A model file holds everything needed to classify an image — the classifier, the fitted
feature extractor (configuration, codebook, normaliser statistics), the class names — and
the provenance of the model (the training feature set's identity, the training time, the
library versions).  Moved alone to another machine, it classifies images
(:func:`~classify_images.pipeline.interfaces.image_features.load_image_model`, ``classify-images predict``).

Layout (a NumPy ``.npz`` zip archive, members stored uncompressed):

``__meta__``
    0-d unicode array holding a JSON document: format name and version, registered
    classifier name, its ``get_params()``, the class labels (class *names* for models
    trained by the command line), the identity of the feature set it was trained on
    (``config_hash``, ``n_features``, ``class_names``, ``path``), the extractor's
    configuration (``extractor.config``, the plain form of
    :class:`~classify_images.pipeline.settings.config.PipelineConfig`, with the image-size guard
    ``image.max_pixels`` that classifying new images applies; a file without that key gets
    the default), the training time in seconds and the library versions.
``model/<attribute>``
    one plain numeric array per fitted attribute of the classifier, as returned by the
    estimator's ``_model_arrays()`` and given back to ``_restore_model_arrays()``.
``model/platt_``, ``model/platt_folds_``
    only in a model trained with calibrated probabilities (``train --probability``,
    :mod:`~classify_images.classifiers.calibration`): Platt's ``(A, B)`` per one-vs-rest
    problem (float64, n_problems × 2) and the number of folds their held-out decision values
    came from; the header's ``probability`` says so (``null`` otherwise).
``extractor/state/<name>``, ``extractor/normalizer``
    the encoder's fitted state as the named arrays it declares
    (:meth:`~classify_images.coding.encoders.Encoder.to_arrays`: ``codebook``, K × 128
    float32, for k-means, sparse coding, LLC and VLAD; the PCA + GMM arrays of Fisher
    vectors; a plug-in's own) and, for a normalisation fitted on training rows (``minmax``),
    its statistics (2 × d float32).  Files of format version 2 hold ``extractor/codebook``
    (a single array) instead: they are read as the state ``{"codebook": …}``.

Reading is defensive, because model files are shared: before any array is loaded, the
``.npy`` header of every member is read (:func:`numpy.lib.format.read_array_header_1_0`)
and the bytes it announces must be exactly the bytes the member holds — a header
announcing a 74 GiB array in a small file is refused without allocating anything, and
compressed members (which this module never writes) are refused, so memory use is bounded
by the file's size.  Arrays are then read with ``np.load(..., allow_pickle=False)`` (a
tampered file can at worst fail to load, never run code), and the header and arrays are
validated: known classifier and valid parameters, at least two classes, the shape of every
fitted array against the class count and the feature dimension
(the classifier's ``_fitted_shapes``), finite values, the encoder's arrays against what the
encoder declares (:meth:`~classify_images.coding.encoders.Encoder.from_arrays`), a
normaliser consistent with the configuration, and the identity of the training feature set.
The loader names no classifier and no encoder: it asks them.  Every failure is a
:class:`ModelFileError` with a one-line message.

Files are written through :func:`~classify_images.pipeline.storage.atomic.atomic_write`.

Files of format version 1 (before models held their extractor) are refused with a
one-line message saying to re-train: they cannot classify an image on their own, and
re-training from the feature set is quick and reproducible (the seed is recorded).

The model-to-feature-set check (:func:`check_model_matches`) lives here rather than with
the classifiers: a classifier knows arrays, not feature sets.
"""

from __future__ import annotations

import json
import os
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ...classifiers.registry import classifier_class, classifier_name
from ...errors import ClassifyImagesError
from ...files import JsonBoundsError, NotRegularFileError, load_npz_checked, loads_bounded_json
from ..storage.atomic import atomic_write
from ..storage.feature_store import NPY_READ_ERRORS
from ..storage.output_guard import MODEL_FORMAT_NAME
from ..storage.provenance import library_versions

__all__ = [
    "ModelFileError",
    "save_model",
    "load_model",
    "load_model_parts",
    "read_model_meta",
    "check_model_matches",
]

FORMAT_NAME = MODEL_FORMAT_NAME
FORMAT_VERSION = 3
#: Format versions this module reads (2: the encoder's state as one ``extractor/codebook`` array).
READABLE_VERSIONS = (2, 3)
_META_KEY = "__meta__"
#: Bound on the JSON header's length (ours are a few kB; a model of 10 000 classes names them all).
MAX_HEADER_BYTES = 64 * 2**20
_ARRAY_PREFIX = "model/"
_STATE_PREFIX = "extractor/state/"
_LEGACY_CODEBOOK_KEY = "extractor/codebook"
_NORMALIZER_KEY = "extractor/normalizer"


class ModelFileError(ClassifyImagesError, ValueError):
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


# ------------------------------------------------------------------------- write
def _split_pipeline(estimator: Any, extractor: Any) -> tuple[Any, Any]:
    """``(classifier, extractor)`` from a fitted ``make_pipeline(ImageFeatures(...), classifier)``
    (its first step is recognised by the fitted extractor it holds, ``extractor_``)."""
    from sklearn.pipeline import Pipeline

    if not isinstance(estimator, Pipeline):
        return estimator, extractor
    steps = [step for _, step in estimator.steps if step not in (None, "passthrough")]
    if len(steps) != 2 or not hasattr(steps[0], "extractor_"):
        raise TypeError("save_model saves a classifier, or a pipeline of ImageFeatures followed by a classifier")
    return steps[1], steps[0].extractor_


def save_model(
    path: str | os.PathLike,
    estimator: Any,
    *,
    extractor: Any = None,
    feature_set: dict | None = None,
    train_seconds: float | None = None,
    search: dict | None = None,
    combine: dict | None = None,
) -> Path:
    """Save a fitted classifier, with the extractor that makes its features, to ``path`` (``.npz``).

    Parameters
    ----------
    path : path-like
        Destination; ``.npz`` is appended when missing.
    estimator : fitted classifier of :mod:`classify_images.classifiers`, or Pipeline
        A fitted ``make_pipeline(ImageFeatures(...), classifier)`` gives both the
        classifier and the extractor.
    extractor : FeatureExtractor, optional
        The fitted front half (config, codebook, normaliser) that makes the classifier's
        input from an image (:meth:`FeatureExtractor.from_feature_set`).  Without it the
        file classifies feature vectors only, not images.
    feature_set : dict, optional
        Identity of the training feature set: ``config_hash``, ``n_features``,
        ``class_names`` (checked again when the model is used), ``path``.
    train_seconds : float, optional
        Time the fit took, recorded in the header (rounded to 0.1 ms).
    search : dict, optional
        The cross-validated choice of parameters (``SearchResult.to_dict()``), recorded in the
        header as ``search`` (grid, chosen values, scores, folds, seed).
    combine : dict, optional
        The channel combination of a multi-channel model (``{"rule", "channels"}``:
        :func:`~classify_images.pipeline.training.evaluation.combination_record`), recorded as ``combine``;
        the stored extractor (a :class:`~classify_images.pipeline.extraction.channels.ChannelExtractor`) then
        gives combined rows.

    Returns
    -------
    path : Path
        The file written.
    """
    estimator, extractor = _split_pipeline(estimator, extractor)
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    classes = np.asarray(estimator.classes_)
    arrays = {_ARRAY_PREFIX + k: np.asarray(v) for k, v in estimator._model_arrays().items()}
    extractor_meta = None
    if extractor is not None:
        extractor_meta = {
            "config": extractor.config.to_dict(),
            "n_features": int(extractor.n_features),
            "codebook_digest": extractor.codebook_digest,
        }
        if hasattr(extractor, "extractors"):  # several channels (classify_images/pipeline/extraction/channels.py)
            from ..extraction.channels import channel_state_arrays

            state = channel_state_arrays(extractor)
        else:
            state = extractor.encoder.to_arrays(extractor.codebook)
        arrays.update({_STATE_PREFIX + name: np.asarray(array) for name, array in state.items()})
        statistics = extractor.normalizer.statistics()
        if statistics is not None:
            arrays[_NORMALIZER_KEY] = np.asarray(statistics, dtype=np.float32)
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "classifier": classifier_name(estimator),
        "params": _jsonable(estimator.get_params(deep=False)),
        "classes": _jsonable(classes),
        "classes_dtype": classes.dtype.kind,
        "feature_set": _jsonable(feature_set or {}),
        "extractor": extractor_meta,
        "train_seconds": None if train_seconds is None else round(float(train_seconds), 4),
        "probability": None
        if not hasattr(estimator, "platt_")
        else {"method": "Platt scaling (sigmoid) on held-out decision values", "folds": int(estimator.platt_folds_)},
        **({"search": _jsonable(search)} if search is not None else {}),
        **({"combine": _jsonable(combine)} if combine is not None else {}),
        "versions": library_versions(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    for key, value in arrays.items():
        if value.dtype.kind == "O":
            raise TypeError(f"fitted attribute {key} is an object array; cannot save without pickle")
    with atomic_write(path, "wb") as handle:
        np.savez(handle, **{_META_KEY: np.array(json.dumps(meta))}, **arrays)
    return path


# -------------------------------------------------------------------------- read
def read_model_meta(path: str | os.PathLike) -> dict:
    """The JSON header of a model file (see :func:`load_model` for the errors)."""
    return _read(path, arrays=False)[0]


def _read_members(path: Path, *, arrays: bool) -> tuple[str, dict[str, np.ndarray]]:
    """The JSON header's text and (``arrays``) the other members of a model file: a regular file
    whose zip directory and ``.npy`` headers announce exactly the bytes it holds
    (:func:`~classify_images.files.check_npz_members`), checked before anything is allocated."""
    loaded = load_npz_checked(path, keep=lambda key: arrays or key == _META_KEY)
    meta = loaded.pop(_META_KEY)
    if meta.dtype.kind != "U" or meta.ndim != 0:
        raise ValueError("its header is not a text")
    return str(meta[()]), loaded


def _read(path, *, arrays: bool) -> tuple[dict, dict[str, np.ndarray]]:
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file {path} does not exist")
    bad = f"model file {path} is not a valid classify-images model"
    try:
        text, loaded = _read_members(path, arrays=arrays)
        meta = loads_bounded_json(text, what=f"model file {path}'s header", max_bytes=MAX_HEADER_BYTES)
    except PermissionError:
        raise ModelFileError(
            f"model file {path}: permission denied; give yourself read access (chmod u+r) — the file itself may be fine"
        ) from None
    except NotRegularFileError as exc:
        raise ModelFileError(f"model file {exc.strerror}") from None
    except JsonBoundsError as exc:
        raise ModelFileError(f"{bad} ({exc}); re-train it") from None
    except (*NPY_READ_ERRORS, KeyError, zipfile.BadZipFile, NotImplementedError, RecursionError) as exc:
        # (zipfile raises NotImplementedError for a tampered "version needed" or compression field)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelFileError(f"{bad} (truncated, tampered or not a model: {reason}); re-train it") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ModelFileError(f"{bad} (unknown format header)")
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise ModelFileError(
            f"model file {path} has format version {meta.get('format_version')!r}; this version of "
            f"classify-images reads version {FORMAT_VERSION} (self-contained models): re-train it with "
            "classify-images train"
        )
    return meta, loaded


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _check_meta(meta: dict) -> None:
    """The header's fields have the types and values this module writes."""
    _expect(isinstance(meta.get("classifier"), str), "no classifier name")
    _expect(isinstance(meta.get("params"), dict), "no classifier parameters")
    classes = meta.get("classes")
    _expect(isinstance(classes, list) and len(classes) >= 2, "fewer than two classes")
    _expect(
        all(isinstance(c, str) for c in classes) or all(type(c) is int for c in classes),
        "class labels must be all names or all integers",
    )
    _expect(
        len(set(classes)) == len(classes) and classes == sorted(classes), "class labels must be sorted and distinct"
    )
    feature_set = meta.get("feature_set")
    _expect(isinstance(feature_set, dict), "no feature-set identity")
    # Each recorded part of the identity must be well formed; a missing part is refused where the
    # identity is needed (check_model_matches), not here: a classifier saved from Python may record none.
    if "config_hash" in feature_set:
        _expect(
            isinstance(feature_set["config_hash"], str) and feature_set["config_hash"] != "",
            "feature-set identity has an empty config hash",
        )
    if "n_features" in feature_set:
        n_features = feature_set["n_features"]
        _expect(type(n_features) is int and n_features > 0, "feature-set identity has no valid dimension")
    if "class_names" in feature_set:
        names = feature_set["class_names"]
        _expect(
            isinstance(names, list) and len(names) == len(classes) and all(isinstance(c, str) for c in names),
            "feature-set class names do not match the classes",
        )
    extractor = meta.get("extractor")
    _expect(
        extractor is None or (isinstance(extractor, dict) and isinstance(extractor.get("config"), dict)),
        "extractor header without a configuration",
    )


def _check_fitted_arrays(name: str, arrays: dict[str, np.ndarray], n_classes: int, params: dict) -> None:
    """The arrays the classifier restores (its ``_fitted_arrays``): present, shapes against the class
    count and dimension (the classifier's ``_fitted_shapes``), numeric dtypes, finite values."""
    _expect(
        "n_features_in_" in arrays
        and arrays["n_features_in_"].shape == ()
        and arrays["n_features_in_"].dtype.kind in "iu",
        "no feature dimension",
    )
    n_features = int(arrays["n_features_in_"])
    _expect(n_features > 0, "feature dimension is not positive")
    cls = classifier_class(name)
    shapes = cls._fitted_shapes
    missing = [key for key in shapes if key not in arrays]
    _expect(not missing, f"fitted array {missing[0] if missing else ''} is missing")
    symbols = {"d": n_features, "P": 1 if n_classes == 2 else n_classes, **cls._shape_symbols(arrays, params)}
    for key, dims in shapes.items():
        array = arrays[key]
        _expect(all(s in symbols for s in dims), f"fitted array {key} has an unreadable shape")
        shape = tuple(symbols[s] for s in dims)
        _expect(
            array.shape == shape,
            f"fitted array {key} has shape {array.shape}, expected {shape} "
            f"for {n_classes} classes and {n_features} features",
        )
        _expect(array.dtype.kind in "biuf", f"fitted array {key} is not numeric")
        if array.dtype.kind == "f":
            _expect(bool(np.isfinite(array).all()), f"fitted array {key} holds NaN or infinite values")
    cls._check_fitted_values(arrays, n_features)
    _check_calibration(arrays, n_classes)


def _check_calibration(arrays: dict[str, np.ndarray], n_classes: int) -> None:
    """The calibrated probabilities' arrays (``platt_``, ``platt_folds_``), when the model has them:
    both, Platt's ``(A, B)`` per problem, finite, and a fold count of at least 2."""
    present = [key for key in ("platt_", "platt_folds_") if key in arrays]
    if not present:
        return
    _expect(len(present) == 2, f"calibration array {present[0]} without its companion")
    platt, folds = arrays["platt_"], arrays["platt_folds_"]
    shape = (1 if n_classes == 2 else n_classes, 2)
    _expect(
        platt.shape == shape and platt.dtype.kind == "f",
        f"calibration array platt_ has shape {platt.shape}, expected {shape} for {n_classes} classes",
    )
    _expect(bool(np.isfinite(platt).all()), "calibration array platt_ holds NaN or infinite values")
    _expect(folds.shape == () and folds.dtype.kind in "iu" and int(folds) >= 2, "calibration fold count is not valid")


def _cap_workers(estimator: Any) -> None:
    """A thread count read from a file is at most this machine's cores (``n_jobs=100000`` in a
    received model would start that many threads)."""
    n_jobs = estimator.get_params(deep=False).get("n_jobs")
    cores = os.cpu_count() or 1
    if isinstance(n_jobs, int) and not isinstance(n_jobs, bool) and abs(n_jobs) > cores:
        estimator.set_params(n_jobs=cores if n_jobs > 0 else -1)


def _restore_classifier(meta: dict, arrays: dict[str, np.ndarray]) -> Any:
    name = meta["classifier"]
    cls = classifier_class(name)
    estimator = cls().set_params(**meta["params"])
    estimator._validate_params()  # the parameters' constraints, as fit would check them
    _cap_workers(estimator)
    classes = np.asarray(meta["classes"])
    model_arrays = {key[len(_ARRAY_PREFIX) :]: value for key, value in arrays.items() if key.startswith(_ARRAY_PREFIX)}
    _check_fitted_arrays(name, model_arrays, len(classes), meta["params"])
    estimator._restore_model_arrays(model_arrays, classes)
    return estimator


def _restore_extractor(meta: dict, arrays: dict[str, np.ndarray], n_features: int) -> Any:
    """The :class:`FeatureExtractor` stored in the file, checked against the classifier's dimension."""
    from ...coding.encoders import make_encoder
    from ...coding.normalize import Normalizer
    from ...features.descriptors import make_descriptor
    from ..extraction.extractor import FeatureExtractor
    from ..settings.config import CHANNEL_TABLE, PipelineConfig, cap_received_limits

    raw = cap_received_limits(meta["extractor"]["config"], "the model file's config")
    state = {key[len(_STATE_PREFIX) :]: value for key, value in arrays.items() if key.startswith(_STATE_PREFIX)}
    if isinstance(raw, dict) and CHANNEL_TABLE in raw:
        return _restore_channel_extractor(meta, raw, state, n_features)
    config = PipelineConfig.from_dict(raw, source="model file's extractor config")
    encoder = make_encoder(config.codebook_params())
    if meta["format_version"] == 2 and _LEGACY_CODEBOOK_KEY in arrays:
        state = {"codebook": arrays[_LEGACY_CODEBOOK_KEY]}
    _expect(bool(state), "the extractor's encoder state (codebook) is missing")
    codebook = encoder.from_arrays(state, make_descriptor(config.descriptor_params()).length)
    normalizer = Normalizer(config.normalization.method)
    statistics = None
    if not normalizer.per_vector:
        _expect(_NORMALIZER_KEY in arrays, "the normaliser's statistics are missing")
        statistics = arrays[_NORMALIZER_KEY]
        _expect(
            statistics.shape == (2, n_features)
            and statistics.dtype == np.float32
            and bool(np.isfinite(statistics).all()),
            "the normaliser's statistics do not fit the features",
        )
    extractor = FeatureExtractor(config, codebook, Normalizer.from_statistics(config.normalization.method, statistics))
    _expect(
        extractor.n_features == n_features,
        f"the extractor makes {extractor.n_features}-dimensional vectors but the classifier takes {n_features}",
    )
    return extractor


def _restore_channel_extractor(meta: dict, raw: dict, state: dict[str, np.ndarray], n_features: int) -> Any:
    """The :class:`~classify_images.pipeline.extraction.channels.ChannelExtractor` of a multi-channel model, its
    rows combined as the header's ``combine`` says (checked against the layout)."""
    from ...classifiers.combination import channels_from_dicts, check_combination
    from ..extraction.channels import ChannelExtractor, channel_states
    from ..settings.config import ChannelsConfig

    config = ChannelsConfig.from_dict(raw, source="model file's extractor config")
    combine = meta.get("combine")
    if combine is not None:
        _expect(
            isinstance(combine, dict) and isinstance(combine.get("channels"), list), "its combine entry is malformed"
        )
        layout = channels_from_dicts(combine["channels"], n_features, source="the model file's combine entry")
        check_combination(combine.get("rule"), layout, meta["classifier"])
    extractor = ChannelExtractor.from_states(
        config,
        channel_states(config, state),
        combine=None if combine is None else (combine["rule"], meta["classifier"]),
    )
    _expect(
        extractor.n_features == n_features,
        f"the extractor makes {extractor.n_features}-dimensional vectors but the classifier takes {n_features}",
    )
    if combine is not None:
        _expect(
            [c.to_dict() for c in extractor.layout] == [c.to_dict() for c in layout],
            "its combine entry's channels differ from its extractor's",
        )
    return extractor


def load_model_parts(path: str | os.PathLike) -> tuple[Any, Any, dict]:
    """``(classifier, extractor, meta)`` of a model file: the classifier, its
    :class:`~classify_images.pipeline.extraction.extractor.FeatureExtractor` (None when saved without
    one) and the JSON header (errors: :func:`load_model`)."""
    return _load(path)


def _load(path: str | os.PathLike) -> tuple[Any, Any, dict]:
    meta, arrays = _read(path, arrays=True)
    try:
        _check_meta(meta)
        estimator = _restore_classifier(meta, arrays)
        extractor = None
        if meta.get("extractor") is not None:
            extractor = _restore_extractor(meta, arrays, estimator.n_features_in_)
        trained = meta["feature_set"]
        if "n_features" in trained:
            _expect(
                trained["n_features"] == estimator.n_features_in_,
                "the feature-set identity's dimension differs from the classifier's",
            )
        if "class_names" in trained and estimator.classes_.dtype.kind == "U":
            _expect(
                trained["class_names"] == estimator.classes_.tolist(), "the class names differ from the feature set's"
            )
    except ModelFileError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelFileError(
            f"model file {path} is not a valid classify-images model ({reason}); re-train it"
        ) from None
    return estimator, extractor, meta


def load_model(path: str | os.PathLike) -> tuple[Any, dict]:
    """Load the classifier of a model file saved by :func:`save_model` (input: feature vectors).

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
    estimator, _, meta = _load(path)
    return estimator, meta


def check_model_matches(
    meta: dict, *, config_hash: str, n_features: int, source: str = "feature set", class_names: list[str] | None = None
) -> None:
    """Refuse a model trained on another feature set, or one that does not say which.

    Parameters
    ----------
    meta : dict
        Header of the model file (:func:`load_model`, :func:`read_model_meta`).
    config_hash, n_features : str, int
        Identity of the features the model is about to be used on.
    class_names : list of str, optional
        The classes those features are labelled with: a model naming other classes is refused
        (a manifest whose class names were changed keeps its config hash).
    source : str
        What those features are, for the message.

    Raises
    ------
    ModelFileError
        No recorded feature set, or the dimension or the feature set's identity (the hash of the
        pipeline config and of the images) differs (one-line message).
    """
    trained = meta.get("feature_set") or {}
    if not trained.get("config_hash") or trained.get("n_features") is None:
        raise ModelFileError(
            f"the model does not record the feature set it was trained on, so it cannot be checked against the "
            f"{source}: re-train it with classify-images train"
        )
    if int(trained["n_features"]) != int(n_features):
        raise ModelFileError(
            f"model was trained on {trained['n_features']}-dimensional features but the {source} "
            f"has {n_features} dimensions: use the feature set the model was trained on"
        )
    if trained["config_hash"] != config_hash:
        raise ModelFileError(
            f"model was trained on feature set {trained['config_hash'][:12]} but the {source} is "
            f"{config_hash[:12]} (another pipeline config, or other images: the identity covers both): "
            "re-train the model on this feature set"
        )
    classes = meta.get("classes")
    if (
        class_names is not None
        and isinstance(classes, list)
        and all(isinstance(c, str) for c in classes)
        and sorted(classes) != sorted(class_names)
    ):
        raise ModelFileError(
            f"model was trained on the classes {_names_text(classes)} but the {source} has the classes "
            f"{_names_text(class_names)}: use the feature set the model was trained on"
        )


def _names_text(names: list[str], shown: int = 4) -> str:
    """A few class names for a one-line message (repr: a crafted name cannot break the line)."""
    text = ", ".join(repr(name) for name in names[:shown])
    return text + (f", … ({len(names)} in all)" if len(names) > shown else "")
