"""Soft assignment to k-means codewords (coding/soft_assignment.py) and its pipeline option."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from classify_images.coding import encode as encode_module
from classify_images.coding.encode import vq_encode
from classify_images.coding.encoders import make_encoder
from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells, spatial_pyramid_pool
from classify_images.coding.soft_assignment import (
    DEFAULT_BETA,
    DEFAULT_N_NEIGHBORS,
    POOLING_STATISTICS,
    SoftAssignmentCoder,
    cell_statistics,
    cell_statistics_of_neighbors,
    codebook_scale,
    nearest_sq_distances,
    pool_cell_statistics,
    soft_assignment_codes,
)
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.extraction.stages import implementation_versions
from classify_images.pipeline.settings.config import ConfigError, load_config, stage_hash, validate_config
from classify_images.pipeline.storage.feature_store import load_feature_set

from ._encoder_helpers import assert_new_images_match_rows, random_layout, small_config
from .conftest import SMALL_CONFIG


def reference_codes(X, B, k, beta):
    """Slow, obvious Eq. 5-6 of Liu et al.: explicit distances, a stable sort, exp, normalise."""
    X = np.asarray(X, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    codes = np.zeros((X.shape[0], B.shape[0]))
    for i, x in enumerate(X):
        d2 = np.array([np.sum((x - b) ** 2) for b in B])
        nearest = np.argsort(d2, kind="stable")[:k]
        weights = np.exp(-beta * (d2[nearest] - d2[nearest].min()))
        codes[i, nearest] = weights / weights.sum()
    return codes


def reference_scale(B):
    B = np.asarray(B, dtype=np.float64)
    return np.mean([min(np.sum((B[k] - B[j]) ** 2) for j in range(len(B)) if j != k) for k in range(len(B))])


def _data(seed=0, n=80, K=12, d=16):
    rng = np.random.default_rng(seed)
    return rng.random((n, d)), rng.random((K, d)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 2, 5, 12])
@pytest.mark.parametrize("beta_rel", [0.5, 3.0, 30.0])
def test_codes_match_the_slow_reference(k, beta_rel):
    X, B = _data()
    coder = SoftAssignmentCoder(B, k, beta_rel)
    assert coder.scale == pytest.approx(reference_scale(B), rel=1e-6)
    assert coder.beta == pytest.approx(beta_rel / reference_scale(B), rel=1e-6)
    got = coder.encode(X)
    assert isinstance(got, sp.csr_matrix) and got.dtype == np.float32 and got.nnz == k * X.shape[0]
    np.testing.assert_allclose(got.toarray(), reference_codes(X, B, k, coder.beta), rtol=1e-4, atol=1e-6)


def test_codes_are_non_negative_and_sum_to_one():
    X, B = _data(1, n=300)
    for k in (3, 12):
        codes = soft_assignment_codes(X, B, k, beta=5.0)
        assert (codes.data >= 0).all()
        np.testing.assert_allclose(np.asarray(codes.sum(axis=1)).ravel(), 1.0, rtol=1e-6)
        assert (np.diff(codes.indptr) == k).all()


def test_one_neighbour_is_hard_vq():
    X, B = _data(2, n=500)
    codes = soft_assignment_codes(X, B, 1, beta=7.0)
    np.testing.assert_array_equal(codes.indices, vq_encode(X, B))
    np.testing.assert_array_equal(codes.data, 1.0)
    # and pooled: the same histograms as hard VQ's
    x, y, shape = random_layout(np.random.default_rng(2), X.shape[0])
    levels = [1, 2]
    cells = pyramid_cells(x, y, shape, levels)
    stats = cell_statistics(X, cells, n_pyramid_cells(levels), B, 1, 7.0)
    for method in ("average", "sqrt", "max"):
        if POOLING_STATISTICS[method] == "max":
            stats = cell_statistics(X, cells, n_pyramid_cells(levels), B, 1, 7.0, "max")
        np.testing.assert_allclose(
            pool_cell_statistics(stats, method),
            spatial_pyramid_pool(vq_encode(X, B), x, y, shape, B.shape[0], levels, method),
            rtol=1e-6,
        )


def test_huge_beta_is_hard_vq_without_overflow():
    X, B = _data(3)
    codes = SoftAssignmentCoder(B, 5, 1e9).encode(X)
    assert np.isfinite(codes.data).all()
    np.testing.assert_array_equal(codes.toarray().argmax(axis=1), vq_encode(X, B))
    np.testing.assert_allclose(codes.toarray().max(axis=1), 1.0)


def test_relative_beta_makes_codes_scale_free():
    X, B = _data(4)
    a = SoftAssignmentCoder(B, 4, 2.0).encode(X).toarray()
    b = SoftAssignmentCoder(B * np.float32(8.0), 4, 2.0).encode(X * 8.0).toarray()
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_nearest_are_sorted_and_prefixes_are_the_smaller_k():
    X, B = _data(5)
    ((_, neighbors, sq),) = list(nearest_sq_distances(X, B, 6))
    d2 = ((X[:, None, :] - B[None].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_array_equal(neighbors, np.argsort(d2, axis=1, kind="stable")[:, :6])
    norms = (X**2).sum(1)[:, None]
    np.testing.assert_allclose(sq + norms, np.take_along_axis(d2, neighbors, 1), rtol=1e-5)
    x, y, shape = random_layout(np.random.default_rng(5), X.shape[0])
    cells = pyramid_cells(x, y, shape, [1, 2])
    for k in (1, 3, 6):
        from_prefix = cell_statistics_of_neighbors(neighbors[:, :k], sq[:, :k], cells, 5, B.shape[0], 3.0)
        direct = cell_statistics(X, cells, 5, B, k, 3.0)
        for name in direct:
            np.testing.assert_allclose(from_prefix[name], direct[name], rtol=1e-6)


@pytest.mark.parametrize("method", ["average", "abs", "sqrt", "max", "signed_max"])
def test_cell_statistics_pool_like_the_pooling_module(method):
    """Pooling the cached per-cell statistics equals pooling.py's functions on the codes."""
    X, B = _data(6, n=200)
    levels = [1, 2, "3x1"]
    x, y, shape = random_layout(np.random.default_rng(6), X.shape[0])
    cells = pyramid_cells(x, y, shape, levels)
    coder = SoftAssignmentCoder(B, 4, 3.0)
    stats = coder.cell_statistics(X, cells, n_pyramid_cells(levels), POOLING_STATISTICS[method])
    expected = spatial_pyramid_pool(coder.encode(X), x, y, shape, B.shape[0], levels, method)
    np.testing.assert_allclose(pool_cell_statistics(stats, method), expected, rtol=1e-5, atol=1e-7)


def test_empty_cells_pool_to_zero():
    X, B = _data(7, n=10)
    cells = np.zeros((1, 10), dtype=np.int64)  # every descriptor in cell 0 of 3
    stats = cell_statistics(X, cells, 3, B, 3, 1.0)
    pooled = pool_cell_statistics(stats, "sqrt").reshape(3, -1)
    assert (pooled[1:] == 0).all() and pooled[0].sum() > 0


def test_deterministic_and_chunking_free(monkeypatch):
    X, B = _data(8, n=1000)
    cells = pyramid_cells(*random_layout(np.random.default_rng(8), X.shape[0]), [1, 2])
    first = cell_statistics(X, cells, 5, B, 5, 2.0)
    again = cell_statistics(X, cells, 5, B, 5, 2.0)
    monkeypatch.setattr(encode_module, "_VQ_CHUNK", 37)
    chunked = cell_statistics(X, cells, 5, B, 5, 2.0)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
        np.testing.assert_allclose(chunked[name], first[name], rtol=1e-6)


def test_coder_rejects_bad_parameters():
    _, B = _data()
    with pytest.raises(ValueError, match="n_neighbors"):
        SoftAssignmentCoder(B, 13, 1.0)
    with pytest.raises(ValueError, match="beta_relative"):
        SoftAssignmentCoder(B, 3, 0.0)
    with pytest.raises(ValueError, match="coincide"):
        codebook_scale(np.ones((4, 3)))


# --- the pipeline option ---------------------------------------------------------------------

SOFT = {"kind": "kmeans", "size": 16, "n_samples": 3000, "n_iter": 20, "assignment": "soft", "soft_neighbors": 3}


def test_soft_build_end_to_end(tmp_path, small_dataset, monkeypatch):

    cache = tmp_path / "cache"
    hard = small_config(
        {k: v for k, v in SOFT.items() if not k.startswith(("assignment", "soft"))},
        {"method": "average", "levels": [1, 2]},
        "l1",
    )
    build_feature_set(small_dataset, tmp_path / "hard", hard, cache_dir=cache)
    config = small_config(SOFT, {"method": "average", "levels": [1, 2], "level_normalization": "l1"}, "l1")
    learnt = []
    from classify_images.coding import codebook as codebook_module

    original_learn = codebook_module.learn_kmeans_codebook
    monkeypatch.setattr(
        codebook_module, "learn_kmeans_codebook", lambda *a, **k: learnt.append(1) or original_learn(*a, **k)
    )
    result = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=cache)
    assert not learnt  # the hard build's codebook is reused: assignment does not change it
    fs, fs_hard = load_feature_set(tmp_path / "fs"), load_feature_set(tmp_path / "hard")
    np.testing.assert_array_equal(fs.codebook(), fs_hard.codebook())
    assert result.n_features == 16 * 5
    assert fs.manifest["implementation_versions"]["soft_assignment"] >= 1
    assert fs.config_hash != fs_hard.config_hash
    X, X_hard = np.asarray(fs.X_train), np.asarray(fs_hard.X_train)
    assert (X >= 0).all()
    np.testing.assert_allclose(X.reshape(-1, 5, 16)[:, 0].sum(1), 0.5, rtol=1e-5)  # per-level L1, then L1
    assert (X > 0).sum() > (X_hard > 0).sum()  # soft histograms have more non-zeros
    # Without the cache: the same numbers; new images get the rows they have in the feature set.
    build_feature_set(small_dataset, tmp_path / "fs2", config, cache_dir=None)
    np.testing.assert_array_equal(np.asarray(load_feature_set(tmp_path / "fs2").X_train), X)
    assert_new_images_match_rows(fs, [str(small_dataset / p) for p in fs.test_paths[:3]])
    # sqrt pooling re-uses the cached statistics (one item serves average and sqrt)
    calls = []
    from classify_images.coding.soft_assignment import SoftAssignmentCoder

    original = SoftAssignmentCoder.cell_statistics
    monkeypatch.setattr(
        SoftAssignmentCoder, "cell_statistics", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    build_feature_set(
        small_dataset, tmp_path / "fs3", small_config(SOFT, {"method": "sqrt", "levels": [1, 2]}, "l1"), cache_dir=cache
    )
    assert not calls
    # another β is another cache entry
    build_feature_set(
        small_dataset,
        tmp_path / "fs4",
        small_config(dict(SOFT, soft_beta=1.0), {"method": "sqrt", "levels": [1, 2]}, "l1"),
        cache_dir=cache,
    )
    assert len(calls) == result.n_train + result.n_test


@pytest.mark.parametrize(
    "codebook, message",
    [
        ({"assignment": "fuzzy"}, "codebook.assignment = 'fuzzy': expected one of 'hard', 'soft'"),
        ({"assignment": "soft", "soft_beta": 0}, "codebook.soft_beta = 0: expected a finite number > 0"),
        ({"assignment": "soft", "soft_beta": -2.0}, "codebook.soft_beta = -2.0: expected a finite number > 0"),
        ({"assignment": "soft", "soft_beta": "big"}, "codebook.soft_beta = 'big': expected a finite number > 0"),
        ({"assignment": "soft", "soft_beta": float("inf")}, "codebook.soft_beta = inf: expected a finite number > 0"),
        ({"assignment": "soft", "soft_neighbors": 0}, "codebook.soft_neighbors = 0: expected an integer ≥ 1"),
        (
            {"assignment": "soft", "soft_neighbors": 17},
            "codebook.soft_neighbors = 17: expected at most codebook.size = 16",
        ),
        ({"soft_beta": 2.0}, "codebook.soft_beta applies to codebook.assignment = 'soft' only"),
        ({"soft_neighbors": 4}, "codebook.soft_neighbors applies to codebook.assignment = 'soft' only"),
        ({"kind": "llc", "assignment": "soft"}, "codebook.assignment applies to codebook.kind = 'kmeans' only"),
    ],
)
def test_config_errors_are_one_line(codebook, message):
    raw = {table: dict(values) for table, values in SMALL_CONFIG.items()}
    raw["codebook"].update(codebook)
    with pytest.raises(ConfigError) as error:
        validate_config(raw, source="my.toml")
    assert message in str(error.value) and str(error.value).startswith("my.toml: ")
    assert "\n" not in str(error.value)


def test_cli_reports_a_bad_soft_beta_in_one_line(tmp_path, capsys):
    from classify_images.pipeline.interfaces.cli import main

    from .conftest import FIXTURE_IMAGES, write_config_toml

    raw = {table: dict(values) for table, values in SMALL_CONFIG.items()}
    raw["codebook"].update(assignment="soft", soft_beta=-1)
    config = write_config_toml(tmp_path / "bad.toml", raw)
    assert main(["build-features", str(FIXTURE_IMAGES), "--config", str(config), "--out", str(tmp_path / "fs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "codebook.soft_beta = -1" in err and "bad.toml" in err


#: Config hashes of the shipped configs as computed by the code before soft assignment existed
#: (``fisher`` since: its GMM learnt by coding/gmm.py, whose IMPLEMENTATION_VERSION is in the key).
HASHES_BEFORE = {
    "bof-spm": "ac871025364b79927f4ab4e0687bb032049b1587",
    "digits": "36a51cdf52a92bd68cb3f76af97a734e6c85779e",
    # changed on purpose: coding.fisher IMPLEMENTATION_VERSION 3 -> 4 (posteriors below 1e-4 of the largest
    # skipped, rows within 1.2e-3 relative L2; 2 -> 3 was the encoder in cache-sized chunks)
    "fisher": "4cd70aabf9a04b9d59d5a8f387781187b41c031b",
    "hik-nsvm": "5b4082216645e5eee9310b683bbfc21ec8b0bd8d",
    "hik-nsvm-improved": "ca6d6e1d3650b8ceea9d97eda3311eff36cce463",
    "llc": "50f8e34cef0d203cb50100d1e5172ecd869b6680",
    "lspm": "7b4bac78a5fbb19bb65bbfdfc4afbcfc42782322",
    # changed on purpose (2026-11-28): the default dictionary learner became ours, whose
    # IMPLEMENTATION_VERSION now keys the sparse configs' stages (was f4317364f748…)
    "scspm": "b6c0b4e948b0dd68a6513798d6c9168c34034b16",
    "vlad": "a97a7d1734e4978e7e0a6d5c31f59057f6d15a96",
    "vlad-rootsift": "c4d9c2ebd585b8f3a96d0994956b4af5918872b7",
}


@pytest.mark.parametrize("name", sorted(HASHES_BEFORE))
def test_existing_configs_keep_their_hashes_and_stage_keys(name):
    config = load_config(name)
    versions = implementation_versions(make_encoder(config.codebook_params()))
    assert stage_hash(config, list(config.to_dict()), versions) == HASHES_BEFORE[name]
    # the cached stages receive the [codebook] table they received before (their cache keys)
    params = config.codebook_params()
    assert not {"assignment", "soft_neighbors", "soft_beta"} & set(params)
    assert params == config.codebook_params(learning=True)


def test_soft_keys_are_hashed_only_when_set():
    raw = {table: dict(values) for table, values in SMALL_CONFIG.items()}
    hard = validate_config(raw)
    raw["codebook"]["assignment"] = "soft"
    soft = validate_config(raw)
    raw["codebook"].update(soft_neighbors=DEFAULT_N_NEIGHBORS, soft_beta=DEFAULT_BETA)
    explicit = validate_config(raw)
    hashes = {stage_hash(c, ["codebook"]) for c in (hard, soft, explicit)}
    assert len(hashes) == 3  # unset parameters are the module's defaults, keyed by its version
    assert soft.codebook_params(learning=True) == hard.codebook_params(learning=True) == hard.codebook_params()
    assert make_encoder(soft.codebook_params()).soft and not make_encoder(hard.codebook_params()).soft
    assert "soft_assignment" in implementation_versions(make_encoder(soft.codebook_params()))
    assert "soft_assignment" not in implementation_versions(make_encoder(hard.codebook_params()))
