"""Packed 8-bit codes (``int8`` rows): the packing against a slow, obvious reference, the decode
against the one-byte codes' (bit for bit), the header's checks, rows written as slot prefixes
leaving holes on disk, and feature sets of the earlier one-byte form still read."""

import os

import numpy as np
import pytest

from classify_images.coding.packed_codes import (
    BLOCK_VALUES,
    check_packed,
    pack_codes,
    pack_rows,
    packed_row_bytes,
    stored_n_features,
    unpack_columns,
    used_bytes,
)
from classify_images.coding.product_quantizer import RowCodecError
from classify_images.coding.scalar_quantizer import GROUP_VALUES, dequantize_rows, quantize_rows


def _reference_pack(rows: np.ndarray) -> np.ndarray:
    """The module docstring's slot, built one block and one bit at a time in Python."""
    n, d = rows.shape
    stored8 = quantize_rows(rows, 8)
    codes, steps = stored8[:, :d].view(np.int8).astype(np.int64), stored8[:, d:]
    groups, blocks = -(-d // GROUP_VALUES), -(-d // BLOCK_VALUES)
    header = 4 + 4 * groups + 4 * (groups + 1) + (blocks + 1) // 2
    payload_at = -(-header // 8) * 8
    out = np.zeros((n, payload_at + 64 * blocks), np.uint8)
    for i in range(n):
        bits, offsets, widths = [], [], []
        for block in range(blocks):
            if block % (GROUP_VALUES // BLOCK_VALUES) == 0:
                offsets.append(len(bits) // 8)
            values = list(codes[i, block * 64 : (block + 1) * 64])
            largest = max(abs(v) for v in values)
            width = 0 if largest == 0 else next(w for w in range(2, 9) if 2 ** (w - 1) - 1 >= largest)
            widths.append(width)
            for value in values:
                u = value + (2 ** (width - 1) - 1 if width else 0)
                bits.extend((u >> b) & 1 for b in range(width))  # least significant first
            bits.extend([0] * (64 - len(values)) * width)  # a last, partial block: zeros beyond d
        offsets.append(len(bits) // 8)
        payload = np.packbits(np.array(bits, np.uint8), bitorder="little") if bits else np.zeros(0, np.uint8)
        row = out[i]
        row[:4] = np.array([d], "<u4").view(np.uint8)
        row[4 : 4 + 4 * groups] = steps[i]
        row[4 + 4 * groups : 8 + 8 * groups] = np.array(offsets, "<u4").view(np.uint8)
        for block, width in enumerate(widths):
            row[8 + 8 * groups + block // 2] |= width << (4 * (block % 2))
        row[payload_at : payload_at + payload.size] = payload
    return out


def _rows(d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.laplace(size=(6, d)).astype(np.float32) * rng.random((6, 1)).astype(np.float32)
    rows[1, : d // 2] = 0.0  # whole blocks of zeros
    rows[2] = 0.0  # a zero row
    rows[3, ::64] *= 1000.0  # one large value a block: every other code small
    rows[4, 0] = -rows[4].max() * 3  # a code of -127
    return rows


@pytest.mark.parametrize("d", [1, 63, 64, 65, 130, 4095, 4096, 4097, 8292])
def test_packing_is_the_reference_slot_byte_for_byte_and_decodes_to_the_one_byte_codes(d):
    rows = _rows(d, d)
    packed = pack_rows(rows)
    assert packed.dtype == np.uint8 and packed.shape == (6, packed_row_bytes(d))
    np.testing.assert_array_equal(packed, _reference_pack(rows))
    want = dequantize_rows(quantize_rows(rows, 8), 8, n_features=d)
    got = unpack_columns(packed, None, 0, d, d)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # bit for bit, signs of zeros too
    for start, stop in [(0, 1), (d // 3, d // 2 + 1), (d - 1, d), (d // 2, d // 2), (min(64, d), d)]:
        picked = np.array([4, 0, 4])
        np.testing.assert_array_equal(unpack_columns(packed, picked, start, stop, d), want[picked, start:stop])
    assert (used_bytes(packed, d) <= packed.shape[1]).all()
    assert used_bytes(packed, d)[2] == packed_row_bytes(d) - 64 * -(-d // 64)  # a zero row: the header only
    assert not any(packed[i, used:].any() for i, used in enumerate(used_bytes(packed, d)))  # nothing past the prefix
    assert stored_n_features(packed) == d and check_packed(packed, d) is packed


def test_a_non_finite_row_decodes_to_nan_and_is_refused():
    rows = _rows(4096 + 64)
    rows[5, 4100] = np.inf
    packed = pack_rows(rows)
    decoded = unpack_columns(packed, None, 0, rows.shape[1], rows.shape[1])
    assert np.isnan(decoded[5, GROUP_VALUES:]).all() and np.isfinite(decoded[:5]).all()
    with pytest.raises(RowCodecError, match="holds NaN, infinite or negative quantisation steps"):
        check_packed(packed, rows.shape[1])


@pytest.mark.parametrize(
    "damage",
    [
        lambda row, d: row.__setitem__(slice(4, 8), np.array([-1.0], "<f4").view(np.uint8)),  # a negative step
        lambda row, d: row.__setitem__(slice(0, 4), np.array([d + 1], "<u4").view(np.uint8)),  # another length
        lambda row, d: row.__setitem__(16 + 8 * 2 + 3, 0x91),  # widths 1 and 9
        lambda row, d: row.__setitem__(12, row[12] + 8),  # the second group's offset
    ],
)
def test_a_damaged_header_is_refused_in_one_line(damage):
    d = 4096 + 128
    packed = pack_rows(_rows(d))
    damage(packed[3], d)
    with pytest.raises(RowCodecError) as caught:
        check_packed(packed, d)
    assert "\n" not in str(caught.value)


def test_the_length_is_read_from_the_rows_or_guessed_from_the_width():
    assert stored_n_features(pack_rows(_rows(262144)[:1])) == 262144
    assert stored_n_features(np.zeros((0, packed_row_bytes(262144)), np.uint8)) == 262144
    with pytest.raises(RowCodecError, match="not packed rows"):
        stored_n_features(np.zeros((2, 100), np.uint8))
    with pytest.raises(RowCodecError, match="not 8-bit rows"):
        pack_codes(np.zeros((2, 10), np.uint8), 100)


def _holes_supported(folder) -> bool:
    probe = folder / "probe"
    with open(probe, "wb") as handle:
        handle.truncate(1 << 24)
    supported = os.stat(probe).st_blocks * 512 < (1 << 20)
    probe.unlink()
    return supported


def test_rows_written_by_the_feature_set_writer_leave_the_slots_tails_as_holes(tmp_path):
    from classify_images.pipeline.storage.coded_rows import CodedRows
    from classify_images.pipeline.storage.feature_store import FeatureSetWriter

    if not _holes_supported(tmp_path):
        pytest.skip("this file system allocates the holes of sparse files")
    d, n = 262144, 24
    rng = np.random.default_rng(5)
    rows = np.zeros((n, d), np.float32)
    rows[:, : d // 8] = rng.laplace(size=(n, d // 8))  # 1/8 of the blocks hold values
    with FeatureSetWriter(tmp_path / "fs") as writer:
        stored = writer.open_rows("X_train", n, d, "int8")
        assert isinstance(stored, CodedRows)
        for i in range(n):
            stored[i] = rows[i]
        stored[[3, 5]] = rows[[3, 5]]  # assigned again: the same bytes
        stored.flush()
        path = writer.tmp / "X_train.npy"
        apparent, allocated = os.stat(path).st_size, os.stat(path).st_blocks * 512
        assert apparent >= n * packed_row_bytes(d)
        assert allocated < apparent / 4  # 1/8 of the codes (at most 8 bits) and the headers, in 4 KiB pages
        decoded = np.load(path, mmap_mode="r")
        want = dequantize_rows(quantize_rows(rows, 8), 8, n_features=d)
        np.testing.assert_array_equal(unpack_columns(decoded, None, 0, d, d), want)
        np.testing.assert_array_equal(stored[[7, 2]], want[[7, 2]])


def test_a_feature_set_of_one_byte_codes_is_still_read(tmp_path):
    """``int8`` sets built before the packing: the loader reads the one-byte form as it is."""
    from classify_images.pipeline.storage import feature_store
    from classify_images.pipeline.storage.row_codecs import codec_of_format, row_codec

    d, n = 300, 5
    rows = _rows(d)[:n]
    np.save(tmp_path / "X_train.npy", quantize_rows(rows, 8))
    mapped = np.load(tmp_path / "X_train.npy", mmap_mode="r")
    loaded = feature_store._npy_rows(tmp_path, {"rows": "int8", "n_features": d}, "X_train", mapped, n)
    np.testing.assert_array_equal(np.asarray(loaded), dequantize_rows(quantize_rows(rows, 8), 8, n_features=d))
    assert codec_of_format("int8") is row_codec("int8").earlier  # shards of that form too
    with pytest.raises(feature_store.FeatureSetError, match=r"X_train.npy is uint8 \(5, 20\).*rebuild it"):
        feature_store._npy_rows(tmp_path, {"rows": "int8", "n_features": d}, "X_train", mapped[:, :20], n)


def test_the_build_codes_a_row_before_its_workers_start_sending_rows():
    """A cold numba cache compiles the packing in the building process at its first row; rows
    arriving meanwhile wait in its memory, so the build codes a row of zeros first."""
    from classify_images.pipeline.extraction.build_steps import warm_row_codec
    from classify_images.pipeline.storage.coded_rows import CodedRows
    from classify_images.pipeline.storage.row_codecs import row_codec

    coded = []

    class Recording(type(row_codec("int8"))):
        def encode(self, rows, state):
            coded.append(rows.copy())
            return super().encode(rows, state)

    d = 300
    warm_row_codec(CodedRows(np.zeros((2, packed_row_bytes(d)), np.uint8), Recording(), d), d)
    assert len(coded) == 1 and coded[0].shape == (1, d) and not coded[0].any()
    warm_row_codec(np.zeros((2, d), np.float32), d)  # float rows: nothing to compile
    assert len(coded) == 1


def test_a_sharded_build_stores_packed_shards_that_read_back_as_the_one_byte_values(tmp_path):
    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.storage.feature_store import load_feature_set

    from ._encoder_helpers import small_config
    from .conftest import FIXTURE_IMAGES

    config = small_config(
        {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 5}, {"levels": [1]}, "none"
    )
    exact = build_feature_set(FIXTURE_IMAGES, tmp_path / "exact", config, cache_dir=tmp_path / "cache", rows="float32")
    packed = build_feature_set(
        FIXTURE_IMAGES,
        tmp_path / "packed",
        config,
        cache_dir=tmp_path / "cache",
        store="sharded",
        batch_size=5,
        rows="int8",
    )
    fs, reference = load_feature_set(packed.path), load_feature_set(exact.path)
    assert fs.layout == "sharded" and fs.row_encoding == "int8" and fs.manifest["store"]["format"] == "int8-packed"
    for split in ("train", "test"):
        want = np.asarray(reference._dense(split))
        np.testing.assert_array_equal(np.asarray(fs._dense(split)), dequantize_rows(quantize_rows(want, 8), 8))
