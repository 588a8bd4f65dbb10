"""Model files without pickle (classify_images/pipeline/training/model_file.py) and provenance (classify_images/pipeline/storage/provenance.py)."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification

from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC
from classify_images.pipeline.training import model_file as model_file_module
from classify_images.pipeline.training.model_file import (
    ModelFileError,
    check_model_matches,
    load_model,
    read_model_meta,
    save_model,
)

FEATURE_SET = {"config_hash": "a" * 40, "n_features": 12, "class_names": ["c0", "c1", "c2"]}


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=60, n_features=12, n_informative=5, n_classes=3, random_state=0)
    return X.astype(np.float32), y


@pytest.fixture(scope="module")
def model(data):
    X, y = data
    return QuadraticHingeSVC(C=2.0, penalize_intercept=True, intercept_scaling=3.0, tol=1e-6).fit(X, y)


@pytest.fixture()
def model_file(tmp_path, model):
    return save_model(tmp_path / "model", model, feature_set=FEATURE_SET)


def _one_line_error(call) -> str:
    with pytest.raises(ModelFileError) as info:
        call()
    message = str(info.value)
    assert message and "\n" not in message
    return message


def _rewrite(path, members: dict[str, np.ndarray]) -> None:
    """Write an .npz with exactly ``members`` (object arrays pickled, as an attacker would)."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in members.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=True)
            archive.writestr(name + ".npy", buffer.getvalue())


def _members(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


# ------------------------------------------------------------------ round trip
def test_round_trip_gives_identical_decision_values(data, model, model_file):
    X, _ = data
    assert model_file.suffix == ".npz" and model_file.exists()
    assert not list(model_file.parent.glob(".*.tmp"))  # atomic write leaves nothing behind
    loaded, meta = load_model(model_file)
    assert type(loaded) is QuadraticHingeSVC
    assert loaded.get_params() == model.get_params()
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))
    np.testing.assert_array_equal(loaded.decision_function(sp.csr_matrix(X)), model.decision_function(sp.csr_matrix(X)))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert loaded.n_iter_ == model.n_iter_ and loaded.objective_ == model.objective_
    assert meta["classifier"] == "linear" and meta["feature_set"] == FEATURE_SET
    assert read_model_meta(model_file)["params"]["C"] == 2.0


def test_round_trip_string_labels_two_classes(tmp_path):
    X, y = make_classification(n_samples=40, n_features=5, random_state=1)
    labels = np.array(["forest", "street"])[y]
    model = QuadraticHingeSVC().fit(X, labels)
    loaded, _ = load_model(save_model(tmp_path / "m.npz", model))
    assert loaded.classes_.tolist() == ["forest", "street"]
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert loaded.decision_function(X).shape == (40,)


def test_file_holds_no_object_arrays(model_file):
    for key, array in _members(model_file).items():
        assert array.dtype.kind != "O", key


# ---------------------------------------------------------- tampered files
@pytest.mark.parametrize("position", [0.05, 0.5, 0.95])
def test_flipped_bytes_raise_model_file_error(model_file, position):
    raw = bytearray(model_file.read_bytes())
    start = int(position * len(raw))
    for k in range(start, min(start + 16, len(raw))):
        raw[k] ^= 0xFF
    model_file.write_bytes(bytes(raw))
    _one_line_error(lambda: load_model(model_file))


@pytest.mark.parametrize("keep", [0, 10, 0.5])
def test_truncated_file_raises_model_file_error(model_file, keep):
    raw = model_file.read_bytes()
    model_file.write_bytes(raw[: int(keep * len(raw)) if isinstance(keep, float) else keep])
    _one_line_error(lambda: load_model(model_file))


def test_object_array_is_never_unpickled(tmp_path, model_file):
    """A pickled payload that would create a file when unpickled: loading refuses it untouched."""
    marker = tmp_path / "unpickled"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    members = _members(model_file)
    members["model/coef_"] = np.array([Payload()], dtype=object)
    _rewrite(model_file, members)
    message = _one_line_error(lambda: load_model(model_file))
    assert not marker.exists()
    assert "re-train" in message
    members["__meta__"] = np.array([Payload()], dtype=object)
    _rewrite(model_file, members)
    _one_line_error(lambda: load_model(model_file))
    _one_line_error(lambda: read_model_meta(model_file))
    assert not marker.exists()
    with np.load(model_file, allow_pickle=True) as archive:  # the payload is live: pickle would run it
        archive["model/coef_"]
    assert marker.exists()


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.pop("__meta__"),  # no header
        lambda m: m.pop("model/coef_"),  # missing fitted array
        lambda m: m.__setitem__("__meta__", np.array("not json")),  # header not JSON
        lambda m: m.__setitem__("__meta__", np.array("[1, 2]")),  # header not an object
    ],
    ids=["no-meta", "no-coef", "meta-not-json", "meta-not-dict"],
)
def test_incomplete_or_foreign_npz_raises(model_file, edit):
    members = _members(model_file)
    edit(members)
    _rewrite(model_file, members)
    _one_line_error(lambda: load_model(model_file))


@pytest.mark.parametrize(
    "change,match",
    [
        ({"format": "something-else"}, "format"),
        ({"format_version": 99}, "version"),
        ({"classifier": "no-such-classifier"}, "not a valid"),
        ({"params": {"C": 1.0, "gamma": 3}}, "not a valid"),
    ],
)
def test_bad_header_fields_raise(model_file, change, match):
    members = _members(model_file)
    meta = json.loads(str(members["__meta__"][()]))
    meta.update(change)
    members["__meta__"] = np.array(json.dumps(meta))
    _rewrite(model_file, members)
    assert match in _one_line_error(lambda: load_model(model_file))


def test_missing_file(tmp_path):
    assert "does not exist" in _one_line_error(lambda: load_model(tmp_path / "none.npz"))


# ------------------------------------------------------- feature-set check
def test_check_model_matches(model_file):
    meta = read_model_meta(model_file)
    check_model_matches(meta, config_hash="a" * 40, n_features=12)
    assert "config" in _one_line_error(lambda: check_model_matches(meta, config_hash="b" * 40, n_features=12))
    assert "12-dimensional" in _one_line_error(lambda: check_model_matches(meta, config_hash="a" * 40, n_features=13))


def test_loaded_model_refuses_wrong_dimension(data, model_file):
    X, _ = data
    loaded, _ = load_model(model_file)
    with pytest.raises(ValueError, match="features"):
        loaded.decision_function(X[:, :5])


def test_model_file_exports():
    assert set(model_file_module.__all__) >= {"ModelFileError", "save_model", "load_model", "check_model_matches"}


def test_header_records_training_time_and_library_versions(tmp_path, model):
    from classify_images.pipeline.storage.provenance import library_versions

    meta = read_model_meta(save_model(tmp_path / "t", model, feature_set=FEATURE_SET, train_seconds=1.234567))
    assert meta["train_seconds"] == 1.2346 and meta["feature_set"] == FEATURE_SET
    assert meta["versions"] == library_versions() and set(meta["versions"]) >= {"python", "numpy", "scikit-learn"}
    assert read_model_meta(save_model(tmp_path / "u", model))["train_seconds"] is None
