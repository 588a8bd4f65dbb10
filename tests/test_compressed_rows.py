"""Compressed rows: product quantisation against slow loops, float16, and sharded builds
whose rows are stored float16 or product-quantised and read back as float32 blocks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from classify_images.coding import product_quantizer
from classify_images.coding.product_quantizer import ProductQuantizer, RowCodecError, to_float16
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.interfaces.cli import main
from classify_images.pipeline.storage.feature_store import FeatureSetError, load_feature_set
from classify_images.pipeline.storage.shard_store import ShardedRows

from ._encoder_helpers import small_config
from .conftest import FIXTURE_IMAGES, SMALL_CONFIG


def _reference_nearest(sub: np.ndarray, centroids: np.ndarray) -> int:
    """The nearest centroid by explicit squared distances (float64)."""
    distances = [float(np.sum((sub.astype(np.float64) - c.astype(np.float64)) ** 2)) for c in centroids]
    return int(np.argmin(distances))


def _reference_fit(rows: np.ndarray, sub_dim: int, n_iter: int, seed: int, n_centroids: int) -> np.ndarray:
    """Lloyd's k-means position by position, with loops (the same start rows as the quantiser)."""
    n, d = rows.shape
    m = -(-d // sub_dim)
    padded = np.zeros((n, m * sub_dim))
    padded[:, :d] = rows
    k = min(n_centroids, n)
    start = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
    codebooks = np.zeros((m, k, sub_dim))
    for j in range(m):
        subs = padded[:, j * sub_dim : (j + 1) * sub_dim]
        centroids = subs[start].copy()
        for _ in range(n_iter):
            labels = [_reference_nearest(sub, centroids) for sub in subs]
            for c in range(k):
                members = [subs[i] for i in range(n) if labels[i] == c]
                if members:
                    centroids[c] = np.mean(members, axis=0)
        codebooks[j] = centroids
    return codebooks


@pytest.mark.parametrize("sub_dim", [4, 5])
def test_product_quantizer_matches_slow_loops(sub_dim, monkeypatch):
    rng = np.random.default_rng(sub_dim)
    rows = rng.normal(size=(60, 22)).astype(np.float32)  # 22 = not a multiple of 4 or 5: padding
    quantizer = ProductQuantizer(sub_dim, n_iter=3, seed=1)
    with monkeypatch.context() as patch:  # 20 centroids: the k-means moves them (with 256, every row is one)
        patch.setattr(product_quantizer, "N_CENTROIDS", 20)
        quantizer.fit(rows)
        np.testing.assert_allclose(quantizer.codebooks_, _reference_fit(rows, sub_dim, 3, 1, 20), rtol=1e-4, atol=1e-5)
    fresh = rng.normal(size=(40, 22)).astype(np.float32)
    codes = quantizer.encode(fresh)
    assert codes.dtype == np.uint8 and codes.shape == (40, -(-22 // sub_dim))
    decoded = quantizer.decode(codes)
    assert decoded.dtype == np.float32 and decoded.shape == fresh.shape
    padded = np.zeros((40, codes.shape[1] * sub_dim), np.float32)
    padded[:, :22] = fresh
    for i in range(40):
        for j in range(codes.shape[1]):
            sub = padded[i, j * sub_dim : (j + 1) * sub_dim]
            best = _reference_nearest(sub, quantizer.codebooks_[j])
            distance = lambda k: float(np.sum((sub - quantizer.codebooks_[j, k]) ** 2, dtype=np.float64))  # noqa: E731
            assert distance(codes[i, j]) <= distance(best) + 1e-5  # the nearest, up to rounding ties
            expected = quantizer.codebooks_[j, codes[i, j]][: max(0, min(sub_dim, 22 - j * sub_dim))]
            np.testing.assert_array_equal(decoded[i, j * sub_dim : j * sub_dim + expected.size], expected)
    out = np.full_like(decoded, np.nan)  # decoded in place, as a reader assembling shards does
    assert quantizer.decode(codes, out=out) is out
    np.testing.assert_array_equal(out, decoded)
    # the codebooks reload from their array, and reject what does not fit
    again = ProductQuantizer.from_codebooks(quantizer.codebooks_, 22)
    np.testing.assert_array_equal(again.decode(codes), decoded)
    with pytest.raises(RowCodecError):
        ProductQuantizer.from_codebooks(quantizer.codebooks_, 40)
    with pytest.raises(RowCodecError):
        quantizer.encode(fresh[:, :20])
    with pytest.raises(RowCodecError):
        quantizer.decode(codes.astype(np.int64))


def test_decoding_in_place_without_padding_is_decoding():
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(300, 32)).astype(np.float32)  # 32 = 4 sub-vectors of 8: no padding
    quantizer = ProductQuantizer(8, n_iter=2, seed=0).fit(rows)
    codes = quantizer.encode(rows[:50])
    block = np.full((60, 32), np.nan, np.float32)
    assert quantizer.decode(codes, out=block[5:55]).base is block
    np.testing.assert_array_equal(block[5:55], quantizer.decode(codes))
    assert np.isnan(block[:5]).all() and np.isnan(block[55:]).all()  # nothing written outside
    with pytest.raises(ValueError, match="out must be"):
        quantizer.decode(codes, out=np.empty((50, 32), np.float64))
    with pytest.raises(RowCodecError, match="centroid"):
        ProductQuantizer.from_codebooks(quantizer.codebooks_[:, :10].copy(), 32).decode(codes | np.uint8(16))


def test_product_quantizer_error_falls_with_bytes():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(600, 64)).astype(np.float32)
    errors = [
        np.mean(
            (ProductQuantizer(s, seed=0).fit(rows).decode(ProductQuantizer(s, seed=0).fit(rows).encode(rows)) - rows)
            ** 2
        )
        for s in (16, 8, 2)
    ]
    assert errors[0] > errors[1] > errors[2]


def test_float16_refuses_values_beyond_its_range():
    np.testing.assert_array_equal(
        to_float16(np.array([[0.5, -1e-3]], np.float32)), np.array([[0.5, -1e-3]], np.float16)
    )
    with pytest.raises(RowCodecError, match="float16"):
        to_float16(np.array([[1e6]], np.float32))


FISHER = dict(
    codebook={"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30},
    pooling={"levels": [1, "3x1"]},
    normalization="none",
)


@pytest.fixture(scope="module")
def fisher_sets(tmp_path_factory):
    """The fixture images as Fisher vectors (256 dimensions), stored float32, float16 and pq8."""
    root = tmp_path_factory.mktemp("compressed")
    config = small_config(**FISHER)
    cache = root / "cache"
    for rows in ("float32", "float16", "pq8"):
        build_feature_set(
            FIXTURE_IMAGES, root / rows, config, cache_dir=cache, store="sharded", batch_size=5, rows=rows
        )
    return root


def test_compressed_builds_read_back_as_float32_blocks(fisher_sets):
    exact = load_feature_set(fisher_sets / "float32")
    half = load_feature_set(fisher_sets / "float16")
    pq = load_feature_set(fisher_sets / "pq8")
    assert half.row_encoding == "float16" and pq.row_encoding == "pq8" and exact.row_encoding == "float32"
    assert pq.manifest["store"]["codebooks"]["sub_dim"] == 8 and (fisher_sets / "pq8" / "pq_codebooks.npy").is_file()
    X = np.asarray(exact.X_train)
    np.testing.assert_array_equal(half.X_train, X.astype(np.float16).astype(np.float32))
    quantizer = pq.rows["train"].quantizer
    np.testing.assert_array_equal(pq.X_train, quantizer.decode(quantizer.encode(X)))
    np.testing.assert_array_equal(pq.X_test, quantizer.decode(quantizer.encode(np.asarray(exact.X_test))))
    for feature_set in (half, pq):
        for block, _ in feature_set.iter_row_blocks("train"):
            assert isinstance(block, np.ndarray) and block.dtype == np.float32 and block.shape[1] == 256

    def stored(feature_set):
        return sum(entry["bytes"] for entry in feature_set.manifest["store"]["shards"]["X_train"])

    rows = X.shape[0]
    assert stored(exact) > 4 * 256 * rows > stored(half) > 2 * 256 * rows > stored(pq) >= 32 * rows
    # decoding keeps most of the signal (relative error of the float16 rows is 2^-11)
    assert np.linalg.norm(pq.X_train - X) < 0.6 * np.linalg.norm(X)


def test_tampered_codebooks_are_one_line_errors(fisher_sets, tmp_path):
    import shutil

    copy = tmp_path / "pq8"
    shutil.copytree(fisher_sets / "pq8", copy)
    codebooks = np.load(copy / "pq_codebooks.npy")
    np.save(copy / "pq_codebooks.npy", codebooks * 2)
    with pytest.raises(FeatureSetError, match="pq_codebooks.npy.*SHA-1"):
        load_feature_set(copy)
    (copy / "pq_codebooks.npy").unlink()
    with pytest.raises(FeatureSetError, match="pq_codebooks.npy is missing"):
        load_feature_set(copy)


def test_compressed_rows_are_refused_where_they_do_not_apply(tmp_path, capsys):
    config = json.loads(json.dumps(SMALL_CONFIG))  # k-means histograms: sparse, stored CSR
    from classify_images.pipeline.settings.config import validate_config

    with pytest.raises(RowCodecError, match="CSR"):
        build_feature_set(FIXTURE_IMAGES, tmp_path / "bof", validate_config(config), cache_dir=None, rows="pq8")
    with pytest.raises(RowCodecError, match="--store sharded"):  # (float16 rows are allowed in the npy store)
        build_feature_set(FIXTURE_IMAGES, tmp_path / "bof", validate_config(config), store="npy", rows="pq8")
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--out",
                str(tmp_path / "x"),
                "--store",
                "npy",
                "--rows",
                "pq16",
                "-q",
                "--no-cache",
            ]
        )
        == 2
    )
    assert "--store sharded" in capsys.readouterr().err


def test_codes_past_the_codebooks_are_a_one_line_error_at_load(fisher_sets, tmp_path):
    import shutil

    copy = tmp_path / "pq8"
    shutil.copytree(fisher_sets / "pq8", copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    n_centroids = manifest["store"]["codebooks"]["n_centroids"]
    assert n_centroids < 256  # the fixture's few training rows: a code can point past the last centroid
    shard = copy / manifest["store"]["shards"]["X_test"][0]["file"]
    codes = np.load(shard)
    codes[0, 0] = 255
    np.save(shard, codes)
    with pytest.raises(FeatureSetError, match=f"codes index centroid 255 of codebooks of {n_centroids}"):
        load_feature_set(copy)


def test_sharded_rows_of_compressed_shards_decode_by_index(fisher_sets):
    rows = load_feature_set(fisher_sets / "pq8").rows["test"]
    assert isinstance(rows, ShardedRows) and rows.format == "pq"
    dense = rows.toarray()
    pick = np.array([len(rows) - 1, 0, 2])
    np.testing.assert_array_equal(rows[pick], dense[pick])


def test_pq_codebooks_learn_from_a_bounded_sample(tmp_path, monkeypatch):
    from classify_images.pipeline.extraction import build_steps as build

    monkeypatch.setattr(build, "PQ_SAMPLE_SHARDS", 2)
    monkeypatch.setattr(build, "PQ_SAMPLE_ROWS", 6)
    build_feature_set(
        FIXTURE_IMAGES,
        tmp_path / "pq",
        small_config(**FISHER),
        cache_dir=tmp_path / "cache",
        store="sharded",
        batch_size=5,
        rows="pq16",
    )
    feature_set = load_feature_set(tmp_path / "pq")
    codebooks = np.load(tmp_path / "pq" / "pq_codebooks.npy")
    assert codebooks.shape == (256 // 16, 6, 16)  # 3 rows from each of 2 shards: 6 centroids per position
    assert feature_set.row_encoding == "pq16" and feature_set.X_train.shape[1] == 256


def test_nearest_centroid_kernel_is_the_argmin_of_explicit_distances():
    """The compiled nearest-centroid search against float64 distances, with 256 centroids and
    a last sub-vector cut short (d = 8 m - 3): the chosen centroid is the nearest up to rounding."""
    from classify_images.coding._pq_kernels import centroid_sums, nearest_centroids

    rng = np.random.default_rng(5)
    rows = rng.normal(size=(30, 37)).astype(np.float32)
    codebooks = rng.normal(size=(5, 256, 8)).astype(np.float32)
    labels = nearest_centroids(
        rows, np.ascontiguousarray(codebooks.transpose(0, 2, 1)), np.einsum("pks,pks->pk", codebooks, codebooks)
    )
    padded = np.zeros((30, 40))
    padded[:, :37] = rows
    sums = np.zeros((5, 256, 8))
    for i in range(30):
        for j in range(5):
            distances = np.sum((padded[i, 8 * j : 8 * j + 8] - codebooks[j].astype(np.float64)) ** 2, axis=1)
            assert distances[labels[i, j]] <= distances.min() + 1e-4
            sums[j, labels[i, j]] += padded[i, 8 * j : 8 * j + 8]
    got_sums, counts = centroid_sums(rows, labels, 8, 256)
    np.testing.assert_allclose(got_sums, sums, atol=1e-5)
    assert counts.sum() == 30 * 5 and (counts.sum(axis=1) == 30).all()


def test_a_product_quantised_feature_set_is_recognised_as_ours(fisher_sets, tmp_path):
    """Its codebooks file is listed (store.codebooks), so a rebuild may replace it without --force."""
    import shutil

    from classify_images.pipeline.storage.feature_store import check_destination, is_feature_set_folder

    copy = tmp_path / "pq8"
    shutil.copytree(fisher_sets / "pq8", copy)
    assert is_feature_set_folder(copy)
    check_destination(copy)  # no error: ours to replace
    (copy / "pq_codebooks.npy").unlink()
    assert not is_feature_set_folder(copy)
