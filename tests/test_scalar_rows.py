"""8- and 4-bit rows (``int8``, ``int4``): the quantiser against explicit loops, the stored row's
self-described length, refusals of bad steps, and feature sets stored so in the ``npy`` layout
(rows and mirrors) read back within half a step of the float32 build's rows."""

import json

import numpy as np
import pytest

from classify_images.coding.packed_codes import pack_rows, packed_row_bytes
from classify_images.coding.product_quantizer import RowCodecError
from classify_images.coding.scalar_quantizer import (
    GROUP_VALUES,
    check_steps,
    dequantize_rows,
    quantize_rows,
    row_bytes,
)


def _reference(rows: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes and steps by the module docstring's formula, one group and one value at a time."""
    top = 2 ** (bits - 1) - 1
    n, d = rows.shape
    groups = -(-d // GROUP_VALUES)
    codes, steps = np.zeros((n, d), np.int64), np.zeros((n, groups), np.float32)
    for i in range(n):
        for g in range(groups):
            values = rows[i, g * GROUP_VALUES : (g + 1) * GROUP_VALUES]
            step = np.float32(max(abs(float(v)) for v in values)) / np.float32(top)
            steps[i, g] = step
            for j, v in enumerate(values):
                codes[i, g * GROUP_VALUES + j] = (
                    0 if step == 0 else round(float(np.float32(v) * (np.float32(1) / step)))
                )
    return codes, steps


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("d", [1, 2, 7, 4095, 4096, 4097, 9001])
def test_codes_and_steps_match_the_formula_and_decode_within_half_a_step(bits, d):
    rng = np.random.default_rng(d + bits)
    rows = (rng.standard_normal((3, d)) * rng.uniform(1e-4, 10, size=(3, 1))).astype(np.float32)
    rows[1, : d // 2] = 0  # a group of zeros (when d >= 2 * GROUP_VALUES) has step 0
    stored = quantize_rows(rows, bits)
    assert stored.dtype == np.uint8 and stored.shape == (3, row_bytes(d, bits))
    codes, steps = _reference(rows, bits)
    decoded = dequantize_rows(stored, bits)  # the length read from the stored rows themselves
    assert decoded.shape == rows.shape and decoded.dtype == np.float32
    per_value_step = np.repeat(steps, GROUP_VALUES, axis=1)[:, :d]
    np.testing.assert_array_equal(decoded, (codes * per_value_step).astype(np.float32))
    assert np.all(np.abs(decoded - rows) <= per_value_step / 2 * (1 + 1e-6) + 1e-30)
    assert np.abs(codes).max() <= 2 ** (bits - 1) - 1
    out = np.full_like(rows, np.nan)
    assert dequantize_rows(stored, bits, out=out) is out
    np.testing.assert_array_equal(out, decoded)


def test_row_bytes():
    assert row_bytes(262144, 8) == 262144 + 4 * 64
    assert row_bytes(262144, 4) == 131072 + 4 * 64
    assert row_bytes(4097, 4) == 2049 + 8
    with pytest.raises(ValueError, match="bits must be one of"):
        row_bytes(10, 3)


def test_non_finite_rows_decode_to_nan_and_bad_steps_are_refused():
    rows = np.ones((2, 10), np.float32)
    rows[1, 3] = np.inf
    stored = quantize_rows(rows, 8)
    assert np.isnan(dequantize_rows(stored, 8)[1]).all() and np.isfinite(dequantize_rows(stored, 8)[0]).all()
    with pytest.raises(RowCodecError, match="NaN, infinite or negative quantisation steps"):
        check_steps(stored, 8)
    good = quantize_rows(np.ones((2, 10), np.float32), 4)
    assert check_steps(good, 4) is good
    negative = good.copy()
    negative[0, -4:] = np.array([-1.0], np.float32).view(np.uint8)
    with pytest.raises(RowCodecError, match="negative"):
        check_steps(negative, 4)
    with pytest.raises(RowCodecError, match="not 8-bit rows of 11 values"):
        dequantize_rows(good, 8, n_features=11)


FISHER = {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30}


def fisher_builds_with_mirrors(root, encodings) -> dict:
    """The same small Fisher-vector build with mirrors, its rows stored in each of ``encodings``
    (npy layout), under ``root``: ``{encoding: feature-set path}``."""
    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.settings.config import validate_config

    from ._encoder_helpers import small_config
    from .conftest import FIXTURE_IMAGES

    raw = small_config(FISHER, {"levels": [1, "3x1"]}, "none").to_dict()
    raw["augment"] = {"flip_train": True, "flip_test": "average"}
    config = validate_config(raw)
    return {
        rows: build_feature_set(FIXTURE_IMAGES, root / rows, config, cache_dir=root / "cache", rows=rows).path
        for rows in encodings
    }


@pytest.fixture(scope="module")
def fisher_builds(tmp_path_factory):
    """The same Fisher-vector build with mirrors, rows stored float32, int8 and int4 (npy layout)."""
    return fisher_builds_with_mirrors(tmp_path_factory.mktemp("scalar-rows"), ("float32", "int8", "int4"))


@pytest.mark.parametrize("rows", ["int8", "int4"])
def test_a_feature_set_stored_coded_reads_back_within_half_a_step(fisher_builds, rows):
    from classify_images.pipeline.extraction.augment import rows_and_mirrors
    from classify_images.pipeline.storage.feature_store import load_feature_set

    bits = int(rows[3:])
    fs, reference = load_feature_set(fisher_builds[rows]), load_feature_set(fisher_builds["float32"])
    assert fs.row_encoding == rows and fs.layout == "npy" and fs.has_mirrors
    assert json.loads((fisher_builds[rows] / "manifest.json").read_text())["rows"] == rows
    d = reference.n_features
    for name in ("X_train", "X_test", "X_train_flip", "X_test_flip"):
        stored = np.load(fisher_builds[rows] / f"{name}.npy", mmap_mode="r")
        width = packed_row_bytes(d) if rows == "int8" else row_bytes(d, bits)  # int8: packed by blocks
        assert stored.dtype == np.uint8 and stored.shape[1] == width
    for split in ("train", "test"):
        for got, want in ((fs._dense(split), reference._dense(split)), (fs.mirrors(split), reference.mirrors(split))):
            got, want = np.asarray(got), np.asarray(want)
            assert got.dtype == np.float32 and got.shape == want.shape
            # what the codec makes of the float32 build's rows, bit for bit
            np.testing.assert_array_equal(got, dequantize_rows(quantize_rows(want, bits), bits))
    blocks = [block for block, _ in fs.iter_row_blocks("test", 2)]
    assert all(isinstance(block, np.ndarray) and block.dtype == np.float32 for block in blocks)
    np.testing.assert_array_equal(np.concatenate(blocks), fs.X_test)
    both = rows_and_mirrors(fs, np.arange(len(fs.y_train)))
    np.testing.assert_array_equal(both[: len(fs.y_train)], fs.X_train)
    np.testing.assert_array_equal(both[len(fs.y_train) :], np.asarray(fs.mirrors("train")))
    stored_test = fs.rows["test"]  # a CodedRows: indexed as the float32 array it stands for
    assert stored_test.shape == fs.X_test.shape and len(stored_test) == len(fs.y_test)
    np.testing.assert_array_equal(stored_test[1:3, 5:9], fs.X_test[1:3, 5:9])
    np.testing.assert_array_equal(stored_test[2, 5:9], fs.X_test[2, 5:9])
    np.testing.assert_array_equal(stored_test[[2, 0]], fs.X_test[[2, 0]])
    picked = np.array([3, 0, len(fs.y_train) + 1])  # pooled rows: training, then test
    np.testing.assert_array_equal(
        fs.pooled_rows(picked, dtype=np.float16), np.vstack([fs.X_train, fs.X_test])[picked].astype(np.float16)
    )


def test_an_experiment_on_coded_rows_gathers_float16_and_runs(fisher_builds, tmp_path):
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.training.evaluation import training_dtype

    from ._fuzz import run_cli

    assert training_dtype(load_feature_set(fisher_builds["int4"]), "linear") == np.float16
    assert training_dtype(load_feature_set(fisher_builds["int4"]), "pmsvm") == np.float32
    status, out, err = run_cli(
        ["experiment", fisher_builds["int4"], "--classifier", "linear", "--repeats", "1", "--out", tmp_path / "e"]
    )
    assert status == 0, err
    assert "mean per-class accuracy" in out


@pytest.mark.parametrize("name", ["X_train", "X_test_flip"])
def test_a_tampered_step_is_a_one_line_error(fisher_builds, tmp_path, name):
    import shutil

    from ._fuzz import run_cli

    copy = tmp_path / "fs"
    shutil.copytree(fisher_builds["int8"], copy)
    stored = np.load(copy / f"{name}.npy", mmap_mode="r+")
    stored[0, 4:8] = np.array([np.nan], np.float32).view(np.uint8)  # a packed row's first step
    stored.flush()
    del stored
    status, _, err = run_cli(["experiment", copy, "--repeats", "1", "--out", tmp_path / "e"])
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert f"{name}.npy holds NaN, infinite or negative quantisation steps; rebuild it" in err


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="reads /proc/self/status (Linux)")
def test_loading_coded_rows_checks_every_step_and_leaves_their_pages_unmapped(tmp_path):
    """The load reads each row's steps (their pages, and the kernel maps the pages around them)
    a few rows at a time and releases them: a whole row file mapped at once was 0.6 GB resident
    on 15-Scenes.  (Rows of one byte a code, the form of ``int8`` sets built before packing:
    read as they are.)"""
    from classify_images.pipeline.storage import feature_store
    from classify_images.pipeline.storage.coded_rows import CodedRows

    from .test_experiment_memory import _resident_file_kib

    d, n = 16384, 3000
    rows = np.random.default_rng(3).standard_normal((8, d)).astype(np.float32)
    stored = np.lib.format.open_memmap(tmp_path / "X_train.npy", mode="w+", dtype=np.uint8, shape=(n, row_bytes(d, 8)))
    stored[:] = np.tile(quantize_rows(rows, 8), (n // 8, 1))
    stored.flush()
    del stored
    mapped = np.load(tmp_path / "X_train.npy", mmap_mode="r")
    manifest = {"rows": "int8", "n_features": d}
    feature_store._npy_rows(tmp_path, manifest, "X_train", mapped[:8], 8)  # imports and first calls
    feature_store.release_mapped_pages(mapped)
    before = _resident_file_kib()
    loaded = feature_store._npy_rows(tmp_path, manifest, "X_train", mapped, n)
    assert _resident_file_kib() - before < mapped.nbytes / 1024 / 8
    assert isinstance(loaded, CodedRows) and loaded.shape == (n, d)
    np.testing.assert_array_equal(loaded[8:16], dequantize_rows(quantize_rows(rows, 8), 8))


def test_the_build_checks_coded_rows_in_small_chunks_and_names_non_finite_images(tmp_path):
    from types import SimpleNamespace

    from classify_images.pipeline.extraction import build_steps
    from classify_images.pipeline.settings.dataset import DatasetError
    from classify_images.pipeline.storage.coded_rows import CodedRows
    from classify_images.pipeline.storage.row_codecs import row_codec

    assert build_steps._chunk_rows(np.empty((10, 262144))) == 64  # 64 MiB of float32 rows at a time
    assert build_steps._chunk_rows(np.empty((10, 100))) == build_steps._NORMALISE_CHUNK
    rows = np.ones((70, 262144), np.float32)
    rows[66, 5] = np.nan
    coded = CodedRows(pack_rows(rows), row_codec("int8"), 262144)
    images = SimpleNamespace(dataset=SimpleNamespace(paths=[f"img{i}.jpg" for i in range(70)]))
    split = SimpleNamespace(train=np.arange(70), test=np.arange(0))
    with pytest.raises(DatasetError, match=r"the features of 1 image\(s\) are not finite \(first: img66.jpg\)"):
        build_steps.check_finite({"train": coded}, images, split)
