"""Fuzzing the command line with ``hypothesis``: no input ends in a traceback (issue 14).

Config files, ``--param`` values, feature-set manifests and ``.npy`` headers are generated
(bounded numbers of examples, derandomised: the same examples on every run; settings in
tests/_fuzz.py); each run calls :func:`classify_images.pipeline.interfaces.cli.main` and asserts exit
status 0 or 2 and, on 2, exactly one line on stderr and no traceback.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.settings.config import TABLES

from ._fuzz import fuzz_settings, run_cli
from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    dataset = root / "data"
    for name in ("china", "digit_1", "flower"):
        shutil.copytree(FIXTURE_IMAGES / name, dataset / name)
    config = write_config_toml(root / "small.toml")
    assert (
        main(
            [
                "build-features",
                str(dataset),
                "--out",
                str(root / "fs"),
                "--config",
                str(config),
                "--cache-dir",
                str(root / "cache"),
                "-q",
            ]
        )
        == 0
    )
    return root


def _assert_clean(status: int, err: str) -> str:
    assert status in (0, 2), (status, err)
    assert "Traceback" not in err, err
    if status == 2:
        assert len(err.strip().splitlines()) == 1, err
    return err


# --- config files ---------------------------------------------------------------------------

_toml_scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=12),
)
_toml_values = st.recursive(
    _toml_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from("abc"), inner, max_size=2)),
    max_leaves=6,
)
_known_keys = sorted(
    {key for table in SMALL_CONFIG.values() for key in table} | {"max_pixels", "lambda", "kind", "n_iter"}
)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"


_tables = st.dictionaries(
    st.sampled_from([*TABLES, "extra"]),
    st.dictionaries(st.sampled_from([*_known_keys, "unknown"]), _toml_values, max_size=3),
    max_size=3,
)


@fuzz_settings(60)
@given(tables=_tables, garbage=st.one_of(st.none(), st.text(max_size=20), st.binary(max_size=20)))
def test_config_files_never_end_in_a_traceback(built, tables, garbage):
    with tempfile.TemporaryDirectory() as folder:
        _check_config_file(built, Path(folder), tables, garbage)


def _check_config_file(built: Path, tmp_path: Path, tables, garbage) -> None:
    config = tmp_path / "fuzz.toml"
    text = "".join(f"[{t}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in kv.items()) for t, kv in tables.items())
    if isinstance(garbage, bytes):
        config.write_bytes(text.encode() + garbage)
    else:
        config.write_text(text + (garbage or ""), encoding="utf-8", errors="surrogateescape")
    # a dataset that does not exist: a valid config gets as far as discovery (one line, exit 2)
    status, _, err = run_cli(
        ["build-features", built / "no-such-dataset", "--config", config, "--out", tmp_path / "fs", "-q", "--no-cache"]
    )
    _assert_clean(status, err)
    assert status == 2 and ("config" in err or "fuzz.toml" in err or "does not exist" in err), err


# --- --param values -------------------------------------------------------------------------

_param_keys = st.one_of(
    st.sampled_from(["C", "tol", "n_jobs", "class_weight", "random_state", "max_iter", "p", "verbose"]),
    st.text(min_size=0, max_size=8),
)
_param_values = st.one_of(
    st.sampled_from(
        [
            "0",
            "-1",
            "nan",
            "inf",
            "-inf",
            "1e309",
            "None",
            "true",
            "{99: 2}",
            "{0: -1}",
            "[1, 2]",
            "balanced",
            "'x'",
            "{",
            "1e-300",
            str(2**64),
        ]
    ),
    st.integers(min_value=-(2**40), max_value=2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=10),
)


@fuzz_settings(60)
@example(pairs=[("n_jobs", "0")], equals=True, classifier="pmsvm")
@example(pairs=[("class_weight", "{99: 2}")], equals=True, classifier="linear")
@given(
    pairs=st.lists(st.tuples(_param_keys, _param_values), min_size=1, max_size=3),
    equals=st.booleans(),
    classifier=st.sampled_from(["linear", "pmsvm"]),
)
def test_param_values_never_end_in_a_traceback(built, pairs, equals, classifier):
    keys = [k for k, _ in pairs]
    if "max_iter" in keys:  # a valid huge max_iter is slow, not wrong: keep it small
        pairs = [(k, v if k != "max_iter" else "5") for k, v in pairs]
    with tempfile.TemporaryDirectory() as folder:
        argv = ["train", built / "fs", "--classifier", classifier, "--out", Path(folder) / "model.npz"]
        for key, value in pairs:
            argv += ["--param", f"{key}={value}" if equals else f"{key}{value}"]
        status, _, err = run_cli(argv)
    _assert_clean(status, err)


# --- feature-set manifests and array headers --------------------------------------------------

_json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=5,
)
_manifest_keys = [
    "format",
    "format_version",
    "config",
    "config_hash",
    "class_names",
    "split",
    "skipped",
    "n_features",
    "timings",
    "codebook",
    "dataset",
]


_nested_keys = [
    "split.train",
    "split.test",
    "split.train_per_class",
    "split.test_per_class",
    "config.pooling",
    "config.dataset",
    "config.codebook",
    "config.normalization",
]


def _fresh_copy(built: Path, tmp_path: Path) -> Path:
    fs = tmp_path / "fs"
    shutil.rmtree(fs, ignore_errors=True)
    shutil.copytree(built / "fs", fs)
    return fs


def _every_command(fs: Path, tmp_path: Path) -> None:
    for argv in (
        ["train", fs, "--classifier", "linear", "--out", tmp_path / "model.npz"],
        ["experiment", fs, "--classifier", "linear", "--repeats", "1", "--out", tmp_path / "experiment"],
    ):
        status, _, err = run_cli(argv)
        _assert_clean(status, err)


@pytest.mark.parametrize("key", _manifest_keys)
def test_a_manifest_without_a_key_is_one_line(built, tmp_path, key):
    fs = _fresh_copy(built, tmp_path)
    manifest = json.loads((fs / "manifest.json").read_text())
    del manifest[key]
    (fs / "manifest.json").write_text(json.dumps(manifest))
    _every_command(fs, tmp_path)


@fuzz_settings(150)
@given(key=st.sampled_from(_manifest_keys + _nested_keys), value=_json_values)
def test_tampered_manifests_never_end_in_a_traceback(built, key, value):
    with tempfile.TemporaryDirectory() as folder:
        _check_tampered_manifest(built, Path(folder), key, value)


def _check_tampered_manifest(built: Path, tmp_path: Path, key: str, value) -> None:
    fs = _fresh_copy(built, tmp_path)
    manifest = json.loads((fs / "manifest.json").read_text())
    outer, _, inner = key.partition(".")
    if inner:
        manifest[outer][inner] = value
    else:
        manifest[key] = value
    (fs / "manifest.json").write_text(json.dumps(manifest))
    _every_command(fs, tmp_path)


def test_array_header_that_breaks_numpys_tokenizer_is_one_line(built, tmp_path):
    """A header cut inside its dict and followed by NUL bytes: NumPy's header parser ends in
    ``tokenize.TokenError`` (not a ``ValueError``); found by the fuzz test below."""
    fs = _fresh_copy(built, tmp_path)
    head = (fs / "X_train.npy").read_bytes()[:123]
    (fs / "X_train.npy").write_bytes(head + b"\x00\x00\x00\x00{")
    _every_command(fs, tmp_path)


@fuzz_settings(60)
@given(
    name=st.sampled_from(["X_train", "X_test", "y_train", "y_test"]),
    keep=st.integers(0, 140),
    tail=st.binary(max_size=140),
)
def test_tampered_array_headers_never_end_in_a_traceback(built, name, keep, tail):
    with tempfile.TemporaryDirectory() as folder:
        fs = _fresh_copy(built, Path(folder))
        head = (fs / f"{name}.npy").read_bytes()[:keep]  # part of the real header, then garbage
        (fs / f"{name}.npy").write_bytes(head + tail)
        _every_command(fs, Path(folder))
