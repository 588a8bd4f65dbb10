"""Row codecs are plug-ins: the shard store, the feature store, the build and the CLI ask the
codec, and a new one is one class (here: defined in this test) and one registration — it then
goes end to end: build with ``--rows``, train, evaluate and predict."""

from __future__ import annotations

import ast
import json
import pathlib

import numpy as np
import pytest

from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.storage import row_codecs as row_codecs_module
from classify_images.pipeline.storage.feature_store import (
    FeatureSetError,
    is_feature_set_folder,
    load_feature_set,
)
from classify_images.pipeline.storage.row_codecs import (
    RowCodec,
    RowCodecError,
    codec_for_rows,
    codec_of_format,
    register_row_codec,
    row_codec,
    row_codec_names,
)

from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml

#: Dense rows (Fisher vectors, 256 dimensions): a compressed codec applies to them.
FISHER_CONFIG = {
    **SMALL_CONFIG,
    "codebook": {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30},
    "pooling": {"levels": [1, "3x1"]},
    "normalization": {"method": "none"},
}


def test_the_built_in_codecs_are_found_not_listed():
    assert set(row_codec_names()) >= {"float32", "float16", "pq8", "pq16"}
    assert row_codec_names(sparse=True) == ("csr",)
    for name in row_codec_names():
        assert row_codec(name).name == name and codec_of_format(row_codec(name).format).format == row_codec(name).format
    assert codec_for_rows(True).name == "csr" and codec_for_rows(False, "pq16").name == "pq16"
    with pytest.raises(
        RowCodecError, match="--rows must be one of float32, float16, int8, int4, pq8, pq16, not 'nope'"
    ):
        row_codec("nope")
    with pytest.raises(RowCodecError, match="stored CSR"):
        codec_for_rows(True, "float16")
    with pytest.raises(ValueError, match="taken by"):

        class _Impostor(RowCodec):
            name, format = "float16", "impostor"

        register_row_codec(_Impostor)


# ------------------------------------------------------------- a new row codec, from a test
class _ScaledInt8Rows(RowCodec):
    """A toy codec with a learnt state: each column scaled by the largest |value| of the
    training sample and rounded to int8 (4 times smaller than float32)."""

    name, format, state_file = "test-int8", "test-int8", "test_int8_scales"

    def fit(self, sample):
        scale = np.abs(sample).max(axis=0).astype(np.float32)
        return np.where(scale > 0, scale, np.float32(1))

    def state_to_array(self, state):
        return state

    def state_from_array(self, array, n_features):
        if array.dtype != np.float32 or array.shape != (n_features,) or not (array > 0).all():
            raise RowCodecError(f"holds {array.dtype} {array.shape}, not {n_features} positive float32 scales")
        return array

    def encode(self, rows, state):
        return np.clip(np.rint(rows / state * 127), -127, 127).astype(np.int8)

    def stored_form(self, n_features, state):
        return np.dtype(np.int8), n_features

    def decode(self, stored, state, out=None):
        rows = stored.astype(np.float32) * (state / np.float32(127))
        if out is None:
            return rows
        out[...] = rows
        return out


@pytest.fixture
def toy_codec():
    register_row_codec(_ScaledInt8Rows)
    try:
        yield row_codec(_ScaledInt8Rows.name)
    finally:
        row_codecs_module._REGISTERED.pop(_ScaledInt8Rows.name, None)


def test_a_new_row_codec_is_one_class_and_one_registration(toy_codec, tmp_path, capsys):
    config = write_config_toml(tmp_path / "fisher.toml", FISHER_CONFIG)
    cache = tmp_path / "cache"
    built = {}
    for rows in ("float32", toy_codec.name):
        built[rows] = tmp_path / rows
        argv = ["build-features", str(FIXTURE_IMAGES), "--config", str(config), "--out", str(built[rows])]
        assert main([*argv, "--store", "sharded", "--rows", rows, "--cache-dir", str(cache), "-q"]) == 0
    exact, toy = load_feature_set(built["float32"]), load_feature_set(built[toy_codec.name])
    store = toy.manifest["store"]
    assert toy.row_encoding == toy_codec.name and store["format"] == toy_codec.format
    assert store["codebooks"]["file"] == "test_int8_scales.npy" and is_feature_set_folder(toy.path)
    assert all(entry["file"].endswith(".npy") for entry in store["shards"]["X_train"])
    shard = np.load(toy.path / store["shards"]["X_train"][0]["file"])
    assert shard.dtype == np.int8  # stored by the codec ...
    scales = np.load(toy.path / "test_int8_scales.npy")
    for split in ("X_train", "X_test"):  # ... and read back decoded, as float32
        X = np.asarray(getattr(exact, split))
        np.testing.assert_array_equal(getattr(toy, split), toy_codec.decode(toy_codec.encode(X, scales), scales))
    for block, _ in toy.iter_row_blocks("train", rows_per_block=4):
        assert isinstance(block, np.ndarray) and block.dtype == np.float32 and block.shape == (4, exact.n_features)

    model = tmp_path / "model.npz"
    assert main(["train", str(toy.path), "--classifier", "linear", "--out", str(model), "-q"]) == 0
    assert main(["evaluate", str(toy.path), str(model), "--out", str(tmp_path / "report"), "-q"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert np.asarray(report["confusion"]).sum() == len(toy.y_test)
    images = [str(FIXTURE_IMAGES / path) for path in toy.test_paths[:3]]
    capsys.readouterr()
    assert main(["predict", str(model), *images, "--top-k", "1"]) == 0
    printed = capsys.readouterr().out
    assert all(image in printed for image in images), printed

    # Without the codec registered, the feature set is a one-line error naming it.
    row_codecs_module._REGISTERED.pop(toy_codec.name)
    with pytest.raises(FeatureSetError, match="format among"):
        load_feature_set(toy.path)


def test_no_storage_or_build_module_names_a_row_codec():
    """The pipeline asks the codec: outside row_codecs.py no module of pipeline/ compares a
    value with a codec's name or shard format."""
    import classify_images.pipeline as pipeline

    names = {"float32", "float16", "pq8", "pq16", "pq", "csr", "dense"}
    offenders = []
    for path in sorted(pathlib.Path(pipeline.__file__).parent.rglob("*.py")):
        if path.name == "row_codecs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                constants = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
                if names & {c for c in constants if isinstance(c, str)}:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders
