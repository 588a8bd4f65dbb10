"""Hostile model files (issue 14 section 6): wrong shapes, wrong class counts, NaN weights, a header
announcing a huge array, no feature-set identity, and a fuzz over headers — one line each, never a
traceback, never an allocation the file's size does not justify."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from classify_images.pipeline.interfaces.image_features import load_image_model
from classify_images.pipeline.settings.config import PipelineConfig
from classify_images.pipeline.training.model_file import (
    ModelFileError,
    check_model_matches,
    load_model,
    save_model,
)

from ._fuzz import fuzz_settings
from .conftest import FIXTURE_IMAGES, SMALL_CONFIG

CLASSIFIERS = {
    "linear": {},
    "pmsvm": {"random_state": 0},
    "mbkl": {"random_state": 0, "n_stumps": 200},
    "nsvm": {"random_state": 0, "n_epochs": 5},
}
IMAGE = str(FIXTURE_IMAGES / "flower" / "11.jpg")


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    from classify_images import ImageFeatures

    paths = sorted(str(p) for p in FIXTURE_IMAGES.glob("*/*.jpg"))
    labels = [p.split("/")[-2] for p in paths]
    cache = tmp_path_factory.mktemp("cache")
    features = ImageFeatures(PipelineConfig.from_dict(SMALL_CONFIG), cache_dir=cache).fit(paths)
    return features, features.transform(paths), np.asarray(labels)


@pytest.fixture(scope="module")
def model_files(tmp_path_factory, training):
    """One self-contained model file per classifier (saved from a fitted image pipeline)."""
    from sklearn.pipeline import make_pipeline

    from classify_images.classifiers.registry import make_classifier

    features, X, y = training
    folder = tmp_path_factory.mktemp("models")
    identity = {"config_hash": "f" * 40, "n_features": int(X.shape[1]), "class_names": sorted(set(y))}
    files = {}
    for name, params in CLASSIFIERS.items():
        classifier = make_classifier(name, params).fit(X, y)
        pipeline = make_pipeline(features, classifier)  # fitted steps: save_model takes the pipeline
        files[name] = save_model(folder / name, pipeline, feature_set=identity)
    return files


def _members(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def _write(path, members: dict[str, np.ndarray], *, raw: dict[str, bytes] | None = None, compress=False) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as archive:
        for name, array in members.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
            archive.writestr(name + ".npy", buffer.getvalue())
        for name, data in (raw or {}).items():
            archive.writestr(name, data)


def _meta(members) -> dict:
    return json.loads(str(members["__meta__"][()]))


def _set_meta(members, meta) -> None:
    members["__meta__"] = np.array(json.dumps(meta))


def _one_line(call, match: str = "") -> str:
    with pytest.raises(ModelFileError) as info:
        call()
    message = str(info.value)
    assert message and "\n" not in message and match in message, message
    return message


def _copy(tmp_path, model_files, name):
    path = tmp_path / f"{name}.npz"
    path.write_bytes(model_files[name].read_bytes())
    return path


# ------------------------------------------------------------------ round trip
@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_pipeline_round_trip_every_classifier(model_files, training, name):
    features, X, y = training
    model = load_image_model(model_files[name])
    classifier, _ = load_model(model_files[name])
    np.testing.assert_array_equal(model[0].transform([IMAGE]), features.transform([IMAGE]))
    np.testing.assert_array_equal(
        model.decision_function([IMAGE]), classifier.decision_function(features.transform([IMAGE]))
    )
    assert model.predict([IMAGE])[0] in set(y)


# --------------------------------------------------------------- wrong shapes
@pytest.mark.parametrize(
    "name, key",
    [
        ("linear", "coef_"),
        ("linear", "intercept_"),
        ("pmsvm", "coef_"),
        ("pmsvm", "feature_max_"),
        ("mbkl", "stump_thresholds_"),
        ("mbkl", "coef_"),
        ("nsvm", "coef_"),
        ("nsvm", "intercept_"),
    ],
)
@pytest.mark.parametrize("change", ["drop-last", "add-axis", "transpose"])
def test_wrong_shapes_are_one_line(tmp_path, model_files, name, key, change):
    path = _copy(tmp_path, model_files, name)
    members = _members(path)
    array = members["model/" + key]
    members["model/" + key] = {
        "drop-last": lambda a: a[..., :-1],
        "add-axis": lambda a: a[None],
        "transpose": lambda a: a.T if a.ndim > 1 and a.shape[0] != a.shape[-1] else a[..., :-1],
    }[change](array)
    _write(path, members)
    _one_line(lambda: load_model(path), "shape")


def test_every_fitted_array_of_every_classifier_has_a_shape_rule(model_files):
    """The arrays a model file holds are the ones each classifier declares in ``_fitted_shapes``
    (``_fitted_arrays`` is derived from it), and every rule is written in symbols the loader
    resolves, so that no array reaches the classifier unchecked."""
    from classify_images.classifiers.registry import CLASSIFIERS as REGISTERED
    from classify_images.classifiers.registry import classifier_class

    for name in REGISTERED:
        cls = classifier_class(name)
        assert cls._fitted_shapes, name
        assert cls._fitted_arrays == tuple(cls._fitted_shapes), name
        with np.load(model_files[name]) as archive:
            arrays = {key.split("/", 1)[1]: archive[key] for key in archive.files if key.startswith("model/")}
        symbols = {"d": 8, "P": 3, **cls._shape_symbols(arrays, {"m": 2})}
        for key, dims in cls._fitted_shapes.items():
            assert all(symbol in symbols for symbol in dims), (name, key, dims)


@pytest.mark.parametrize("name", ["linear", "pmsvm"])
@pytest.mark.parametrize("value", [np.nan, np.array([1.0, 2.0]), np.array([[0.5]])])
def test_tampered_loss_weight_is_one_line(tmp_path, model_files, name, value):
    """``C_`` (the resolved loss weight) is a finite scalar like every other fitted array is checked."""
    path = _copy(tmp_path, model_files, name)
    members = _members(path)
    members["model/C_"] = np.asarray(value)
    _write(path, members)
    _one_line(lambda: load_model(path), "C_")


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_wrong_class_count_is_one_line(tmp_path, model_files, name):
    path = _copy(tmp_path, model_files, name)
    members = _members(path)
    meta = _meta(members)
    meta["classes"] = meta["classes"] + ["extra"]
    meta["feature_set"]["class_names"] = meta["classes"]
    _set_meta(members, meta)
    _write(path, members)
    _one_line(lambda: load_model(path), "re-train")


def test_class_names_differing_from_the_feature_set_are_one_line(tmp_path, model_files):
    path = _copy(tmp_path, model_files, "linear")
    members = _members(path)
    meta = _meta(members)
    meta["feature_set"]["class_names"] = ["a", "b", "c", "d"]
    _set_meta(members, meta)
    _write(path, members)
    _one_line(lambda: load_model(path), "class names")


@pytest.mark.parametrize(
    "name, key",
    [("linear", "coef_"), ("pmsvm", "coef_"), ("mbkl", "theta_"), ("nsvm", "coef_"), ("linear", "intercept_")],
)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_one_line(tmp_path, model_files, name, key, value):
    path = _copy(tmp_path, model_files, name)
    members = _members(path)
    array = members["model/" + key].copy()
    array.flat[0] = value
    members["model/" + key] = array
    _write(path, members)
    _one_line(lambda: load_model(path), "NaN or infinite")


def test_stump_index_outside_the_features_is_one_line(tmp_path, model_files):
    path = _copy(tmp_path, model_files, "mbkl")
    members = _members(path)
    members["model/stump_features_"] = members["model/stump_features_"] + 10_000
    _write(path, members)
    _one_line(lambda: load_model(path), "stump_features_")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m: m.__setitem__("extractor/state/codebook", m["extractor/state/codebook"][:-1]), "codebook"),
        (
            lambda m: m.__setitem__("extractor/state/codebook", np.full_like(m["extractor/state/codebook"], np.nan)),
            "codebook",
        ),
        (lambda m: m.pop("extractor/state/codebook"), "codebook"),
    ],
)
def test_damaged_extractor_is_one_line(tmp_path, model_files, edit, match):
    path = _copy(tmp_path, model_files, "linear")
    members = _members(path)
    edit(members)
    _write(path, members)
    _one_line(lambda: load_image_model(path), match)


def test_extractor_config_for_other_dimensions_is_one_line(tmp_path, model_files):
    path = _copy(tmp_path, model_files, "linear")
    members = _members(path)
    meta = _meta(members)
    meta["extractor"]["config"]["pooling"]["levels"] = [1, 2, 4]
    _set_meta(members, meta)
    _write(path, members)
    _one_line(lambda: load_image_model(path), "dimensional")


# ------------------------------------------------------- announced huge arrays
def _huge_member(shape, dtype="<f8") -> bytes:
    """An .npy member whose header announces ``shape`` but whose body is a few bytes."""
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + b"\0" * 64


@pytest.mark.parametrize("key", ["model/coef_", "extractor/state/codebook", "__meta__"])
def test_header_announcing_74_gib_is_refused_before_loading(tmp_path, model_files, key, monkeypatch):
    path = _copy(tmp_path, model_files, "linear")
    members = _members(path)
    members.pop(key)
    dtype = "<U10" if key == "__meta__" else "<f8"
    shape = (100_000, 24_800) if key != "__meta__" else (2_000_000_000,)
    _write(path, members, raw={key + ".npy": _huge_member(shape, dtype)})
    calls = []
    original = np.lib.format.read_array
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: calls.append(1) or original(*a, **k))
    message = _one_line(lambda: load_model(path), "GiB")
    assert "74" in message or "74.5" in message or key == "__meta__"
    assert not calls  # refused from the header: no array was read


def test_member_header_that_breaks_numpys_tokenizer_is_one_line(tmp_path, model_files):
    """An .npy header cut inside its dict and followed by NUL bytes makes NumPy's header parser
    raise ``tokenize.TokenError`` (not a ``ValueError``): still the model file's one-line error."""
    path = _copy(tmp_path, model_files, "linear")
    members = _members(path)
    coef = members.pop("model/coef_")
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, coef, allow_pickle=False)
    data = buffer.getvalue()
    _write(path, members, raw={"model/coef_.npy": data[:60] + b"\x00\x00\x00\x00{" + b" " * (len(data) - 65)})
    _one_line(lambda: load_model(path), "not a valid classify-images model")


def test_compressed_members_are_refused(tmp_path, model_files):
    path = _copy(tmp_path, model_files, "linear")
    _write(path, _members(path), compress=True)
    _one_line(lambda: load_model(path), "compressed")


def test_foreign_member_and_object_dtype_are_refused(tmp_path, model_files):
    path = _copy(tmp_path, model_files, "linear")
    _write(path, _members(path), raw={"payload.pkl": b"\x80\x04."})
    _one_line(lambda: load_model(path), "unexpected member")
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    members = _members(model_files["linear"])
    members.pop("model/coef_")
    _write(path, members, raw={"model/coef_.npy": header.getvalue() + b"\x80\x04N."})
    _one_line(lambda: load_model(path), "object")


def test_a_hundred_thousand_extra_members_are_refused_before_any_is_read(tmp_path, model_files, monkeypatch):
    """A model of 100 000 empty extra ``.npy`` members took predict a minute of member reads: the
    member count is checked first, against a ceiling far above what any model holds."""
    import classify_images.files as files_module
    from classify_images.pipeline.training.model_file import MAX_MEMBERS

    assert max(len(_members(path)) for path in model_files.values()) * 10 < MAX_MEMBERS
    path = _copy(tmp_path, model_files, "linear")
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.zeros(0), allow_pickle=False)
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as archive:
        for index in range(100_000):
            archive.writestr(f"extra{index}.npy", buffer.getvalue())
    reads = []
    real = files_module.read_npy_header
    monkeypatch.setattr(files_module, "read_npy_header", lambda *a: reads.append(1) or real(*a))
    n_members = len(_members(model_files["linear"])) + 100_000
    _one_line(lambda: load_model(path), f"{n_members} members, more than the {MAX_MEMBERS}")
    assert reads == []


# ---------------------------------------------------------- feature-set identity
def test_model_without_feature_set_identity_is_refused_by_the_check(tmp_path, model_files):
    classifier, _ = load_model(model_files["linear"])
    bare = save_model(tmp_path / "bare", classifier)
    _, meta = load_model(bare)
    _one_line(
        lambda: check_model_matches(meta, config_hash="f" * 40, n_features=classifier.n_features_in_),
        "does not record the feature set",
    )


def test_cli_evaluate_refuses_model_without_identity(tmp_path, capsys):
    from classify_images.pipeline.interfaces.cli import main

    from .conftest import write_config_toml

    config = write_config_toml(tmp_path / "c.toml")
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(config),
                "--out",
                str(tmp_path / "fs"),
                "--cache-dir",
                str(tmp_path / "cache"),
                "-q",
            ]
        )
        == 0
    )
    assert main(["train", str(tmp_path / "fs"), "--classifier", "linear", "--out", str(tmp_path / "m.npz")]) == 0
    classifier, _ = load_model(tmp_path / "m.npz")
    save_model(tmp_path / "bare.npz", classifier)
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "fs"), str(tmp_path / "bare.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not record the feature set" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "identity", [{"config_hash": ""}, {"n_features": "many"}, {"class_names": "abc"}, {"n_features": -1}]
)
def test_malformed_identity_is_one_line(tmp_path, model_files, identity):
    path = _copy(tmp_path, model_files, "linear")
    members = _members(path)
    meta = _meta(members)
    meta["feature_set"].update(identity)
    _set_meta(members, meta)
    _write(path, members)
    _one_line(lambda: load_model(path))


def test_format_1_files_say_to_retrain(tmp_path, model_files):
    path = _copy(tmp_path, model_files, "linear")
    members = _members(path)
    meta = _meta(members)
    meta["format_version"] = 1
    _set_meta(members, meta)
    _write(path, members)
    _one_line(lambda: load_model(path), "re-train it")


# ------------------------------------------------------------------------ fuzz
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_META_PATHS = [
    ("classifier",),
    ("params",),
    ("params", "C"),
    ("params", "p"),
    ("params", "m"),
    ("classes",),
    ("classes_dtype",),
    ("feature_set",),
    ("feature_set", "n_features"),
    ("feature_set", "class_names"),
    ("feature_set", "config_hash"),
    ("extractor",),
    ("extractor", "config"),
    ("extractor", "config", "codebook"),
    ("extractor", "config", "codebook", "size"),
    ("extractor", "config", "pooling", "levels"),
    ("extractor", "config", "normalization", "method"),
    ("format_version",),
    ("format",),
]


def _edit(meta: dict, path: tuple, value) -> dict:
    target = meta
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = value
    return meta


def _load_and_use(path) -> None:
    """Load as both APIs and classify an image: a ModelFileError is fine, anything else is a bug."""
    try:
        model = load_image_model(path)
    except ModelFileError as exc:
        assert "\n" not in str(exc)
        return
    model.decision_function([IMAGE])


@fuzz_settings(60)
@given(
    name=st.sampled_from(sorted(CLASSIFIERS)),
    edits=st.lists(st.tuples(st.sampled_from(_META_PATHS), _json), min_size=1, max_size=3),
)
def test_fuzzed_headers_never_end_in_a_traceback(tmp_path_factory, model_files, name, edits):
    members = _members(model_files[name])
    meta = _meta(members)
    for path, value in edits:
        _edit(meta, path, value)
    _set_meta(members, meta)
    path = tmp_path_factory.mktemp("fuzz") / "m.npz"
    _write(path, members)
    _load_and_use(path)


_shapes = st.lists(st.integers(0, 40), max_size=3).map(tuple)


@fuzz_settings(60)
@given(
    name=st.sampled_from(sorted(CLASSIFIERS)),
    key_index=st.integers(0, 20),
    shape=_shapes,
    dtype=st.sampled_from(["<f8", "<f4", "<i4", "<i8", "|b1", "<U3", "|u1"]),
    fill=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**31), 2**31 - 1),
)
def test_fuzzed_arrays_never_end_in_a_traceback(tmp_path_factory, model_files, name, key_index, shape, dtype, fill):
    members = _members(model_files[name])
    keys = sorted(k for k in members if k != "__meta__")
    key = keys[key_index % len(keys)]
    try:
        array = np.full(shape, fill).astype(dtype)
    except (ValueError, OverflowError):
        array = np.zeros(shape, dtype=dtype)
    members[key] = array
    path = tmp_path_factory.mktemp("fuzz") / "m.npz"
    _write(path, members)
    _load_and_use(path)


@pytest.mark.parametrize("value", [1e308, -1e308, 1e13])
def test_platt_values_no_fit_gives_are_refused(tmp_path, model_files, value):
    """Finite but huge Platt values (±1e308) overflowed ``A f + B`` and collapsed every probability."""
    path = _copy(tmp_path, model_files, "linear")
    members = _members(path)
    n_classes = len(_meta(members)["class_names"]) if "class_names" in _meta(members) else None
    n_problems = members["model/coef_"].shape[0] if members["model/coef_"].ndim == 2 else 1
    assert n_classes is None or n_problems in (1, n_classes)
    members["model/platt_folds_"] = np.array(3)
    members["model/platt_"] = np.tile([[-1.5, 0.2]], (n_problems, 1))
    _write(path, members)
    load_model(path)  # a calibration like a fit's: loads
    members["model/platt_"] = np.tile([[value, 0.2]], (n_problems, 1))
    _write(path, members)
    _one_line(lambda: load_model(path), "beyond ±1e+12")
