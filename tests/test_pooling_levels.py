"""Per-level normalisation and level weights of the pyramid (``[pooling] level_normalization``,
``level_weights``), checked against explicit loops over the levels."""

import json

import numpy as np
import pytest

from classify_images.coding.pooling import pyramid_grids, weight_pyramid_levels
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.extraction.extractor import FeatureExtractor
from classify_images.pipeline.settings.config import TABLES, load_config, stage_hash, validate_config
from classify_images.pipeline.settings.dataset import file_fingerprint
from classify_images.pipeline.storage.feature_store import load_feature_set

from .conftest import SMALL_CONFIG
from .test_config import assert_one_line_config_error


def _reference(row, cell_dimension, levels, normalization, weights):
    """The obvious loop: cut the vector into its levels, divide each by its norm, weigh it."""
    out, start = [], 0
    for j, (rows, cols) in enumerate(pyramid_grids(levels)):
        block = [float(v) for v in row[start : start + cell_dimension * rows * cols]]
        start += cell_dimension * rows * cols
        if normalization == "l1":
            norm = sum(abs(v) for v in block)
        elif normalization == "l2":
            norm = sum(v * v for v in block) ** 0.5
        else:
            norm = 1.0
        weight = 1.0 if weights is None else weights[j]
        out += [weight * v / (norm if norm > 0 else 1.0) for v in block]
    return np.asarray(out, dtype=np.float32)


@pytest.mark.parametrize("normalization", ["none", "l1", "l2"])
@pytest.mark.parametrize("weights", [None, (0.25, 0.25, 0.5)])
@pytest.mark.parametrize("levels", [(1, 2, 4), (1, 2, "3x1")])
def test_matches_the_loop_over_levels(normalization, weights, levels):
    rng = np.random.default_rng(0)
    cell_dimension = 7
    d = cell_dimension * sum(r * c for r, c in pyramid_grids(levels))
    X = (rng.random((5, d)) * (rng.random((5, d)) < 0.3)).astype(np.float32)
    X[1] -= 0.1  # signed values (ℓ1 takes their absolute values)
    X[2, cell_dimension : 5 * cell_dimension] = 0.0  # an empty level stays zero
    got = weight_pyramid_levels(X, cell_dimension, levels, normalization, weights)
    assert got.dtype == np.float32 and got.shape == X.shape
    for row, expected in zip(got, X):
        np.testing.assert_allclose(
            row, _reference(expected, cell_dimension, levels, normalization, weights), rtol=1e-6, atol=1e-9
        )
    assert not np.any(got[2, cell_dimension : 5 * cell_dimension])
    single = weight_pyramid_levels(X[0], cell_dimension, levels, normalization, weights)
    assert single.shape == (d,)
    np.testing.assert_array_equal(single, got[0])


def test_pyramid_match_kernel():
    """Per-level ℓ1 with weights ¼ ¼ ½: the intersection of two vectors is Lazebnik et al.'s
    Eq. (3), Σ_ℓ w_ℓ I(H_ℓ(X), H_ℓ(Y)) over histograms normalised per level."""
    rng = np.random.default_rng(1)
    counts = rng.integers(0, 4, size=(2, 3 * 21)).astype(np.float32)
    a, b = (weight_pyramid_levels(c, 3, (1, 2, 4), "l1", (0.25, 0.25, 0.5)) for c in counts)
    kernel = 0.0
    for j, (start, stop) in enumerate([(0, 3), (3, 15), (15, 63)]):
        ha, hb = (c[start:stop] / c[start:stop].sum() for c in counts)
        kernel += (0.25, 0.25, 0.5)[j] * np.minimum(ha, hb).sum()
    assert np.minimum(a, b).sum() == pytest.approx(kernel, rel=1e-6)
    assert a.sum() == pytest.approx(1.0, rel=1e-6)


def test_bad_arguments():
    X = np.ones(5 * 3, dtype=np.float32)
    with pytest.raises(ValueError, match="level normalisation 'l3'"):
        weight_pyramid_levels(X, 3, (1, 2), "l3")
    with pytest.raises(ValueError, match="3 level weights for 2 pyramid levels"):
        weight_pyramid_levels(X, 3, (1, 2), "l1", (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="length 15, expected 63"):
        weight_pyramid_levels(X, 3, (1, 2, 4), "l1")


def test_config_keys_hashed_only_when_set():
    base = load_config("hik-nsvm")
    explicit = load_config("hik-nsvm", {"pooling": {"level_normalization": "none"}})
    assert "level_normalization" not in base.to_dict(semantic_only=True)["pooling"]
    assert stage_hash(base, list(TABLES)) == stage_hash(explicit, list(TABLES))
    hashes = {stage_hash(base, list(TABLES))}
    for pooling in (
        {"level_normalization": "l1"},
        {"level_weights": [0.25, 0.25, 0.5]},
        {"level_normalization": "l1", "level_weights": [0.25, 0.25, 0.5]},
    ):
        changed = load_config("hik-nsvm", {"pooling": pooling})
        hashes.add(stage_hash(changed, list(TABLES)))
        assert type(changed).from_dict(changed.to_dict()) == changed  # the manifest's round trip
    assert len(hashes) == 4
    # the stage caches upstream of pooling keep their keys: the VQ indices are reused
    assert stage_hash(changed, ["image", "sift", "codebook"]) == stage_hash(base, ["image", "sift", "codebook"])


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '[pooling]\nlevel_normalization = "l3"\n',
            "pooling.level_normalization = 'l3': expected one of 'none', 'l1', 'l2'",
        ),
        (
            "[pooling]\nlevel_weights = [0.25, -1, 0.5]\n",
            r"pooling.level_weights = \[0.25, -1, 0.5\]: expected .*> 0.*got -1",
        ),
        ('[pooling]\nlevel_weights = "half"\n', "pooling.level_weights = 'half': expected a non-empty list"),
        ("[pooling]\nlevel_weights = []\n", r"pooling.level_weights = \[\]: expected a non-empty list"),
        (
            "[pooling]\nlevels = [1, 2]\nlevel_weights = [1, 1, 2]\n",
            "pooling.level_weights has 3 values for 2 pooling.levels: give one weight per level",
        ),
    ],
)
def test_bad_config_values_are_one_line_errors(tmp_path, text, message):
    assert_one_line_config_error(tmp_path, text, message)


def test_build_uses_the_options_on_the_cached_codes(tmp_path, small_dataset):
    """A feature set built with per-level ℓ1 and weights: its rows are the default build's
    pooled vectors, normalised level by level with explicit loops, then ℓ1 as a whole."""
    weights = [1.0, 3.0]
    raw = json.loads(json.dumps(SMALL_CONFIG))
    plain_out, levels_out = tmp_path / "plain", tmp_path / "levels"
    build_feature_set(small_dataset, plain_out, validate_config(raw), cache_dir=tmp_path / "cache")
    raw["pooling"].update(level_normalization="l1", level_weights=weights)
    build_feature_set(small_dataset, levels_out, validate_config(raw), cache_dir=tmp_path / "cache")
    plain, levelled = load_feature_set(plain_out), load_feature_set(levels_out)
    assert levelled.config.pooling.level_weights == (1.0, 3.0)
    assert levelled.config_hash != plain.config_hash
    extractor = FeatureExtractor.from_feature_set(plain)
    n_words = SMALL_CONFIG["codebook"]["size"]
    for path, row in zip(plain.train_paths[:4], np.asarray(levelled.X_train[:4])):
        full = str(small_dataset / path)
        pooled = extractor.pooled(full, file_fingerprint(full))
        expected = _reference(pooled, n_words, (1, 2), "l1", weights)
        expected /= expected.sum()
        np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-8)
        # level 1 (4 cells) holds 3/4 of the mass, level 0 a quarter
        assert row[n_words:].sum() == pytest.approx(0.75, rel=1e-5)


def test_improved_hik_config_changes_only_the_pooling():
    base, improved = load_config("hik-nsvm"), load_config("hik-nsvm-improved")
    assert improved.pooling.method == "sqrt" and improved.pooling.level_normalization == "l1"
    for table in ("dataset", "image", "sift", "codebook", "normalization"):
        assert getattr(improved, table) == getattr(base, table)
    # the stage cache of hik-nsvm (descriptor sample, codebook, VQ indices) serves it
    assert stage_hash(improved, ["image", "sift", "codebook"]) == stage_hash(base, ["image", "sift", "codebook"])
