"""VLAD against literal NumPy loops; a small build; PmSVM and HIK nSVM refuse it, the linear SVM learns."""

import numpy as np
import pytest

from classify_images.classifiers import NegativeFeaturesError
from classify_images.classifiers.registry import make_classifier
from classify_images.coding import VladEncoder
from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.storage.feature_store import load_feature_set

from ._encoder_helpers import assert_new_images_match_rows, random_layout, reference_cells, small_config


def _reference_vlad(X, centres, cells):
    """Σ(x − μ_k) per centre and cell, signed sqrt, each centre L2, each cell L2, all L2: loops."""
    K, d = centres.shape
    out = []
    for members in cells:
        v = np.zeros((K, d))
        for i in members:
            k = int(np.argmin([np.sum((X[i] - c) ** 2) for c in centres]))
            v[k] += X[i] - centres[k]
        v = np.sign(v) * np.sqrt(np.abs(v))
        for k in range(K):
            norm = np.linalg.norm(v[k])
            if norm > 0:
                v[k] /= norm
        v = v.ravel()
        if np.linalg.norm(v) > 0:
            v /= np.linalg.norm(v)
        out.append(v)
    out = np.concatenate(out)
    return out / np.linalg.norm(out)


def test_vlad_matches_reference_loops():
    rng = np.random.default_rng(0)
    n, K, d = 80, 6, 5
    x, y, shape = random_layout(rng, n)
    y[:] = np.minimum(y, 20.0)  # nothing in the bottom row of cells: empty cells give zeros
    X, centres = rng.normal(size=(n, d)), rng.normal(size=(K, d))
    levels, grids = (1, 2, "3x1"), [(1, 1), (2, 2), (3, 1)]
    encoder = VladEncoder(centres)
    got = encoder.encode(X, pyramid_cells(x, y, shape, levels), n_pyramid_cells(levels))
    expected = _reference_vlad(X, centres, reference_cells(x, y, shape, grids))
    assert got.dtype == np.float32 and got.shape == (8 * K * d,) == (n_pyramid_cells(levels) * encoder.cell_dimension,)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert (got < 0).any() and not got.reshape(8, -1)[[4, 7]].any()  # signed; empty cells zero
    np.testing.assert_array_equal(got, encoder.encode(X, pyramid_cells(x, y, shape, levels), 8))  # deterministic


def test_vlad_build_end_to_end_and_additive_kernels_refuse_it(tmp_path, small_dataset):
    config = small_config({"kind": "vlad", "size": 8, "n_samples": 3000, "n_iter": 20}, {"levels": [1, 2]}, "none")
    result = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=tmp_path / "cache")
    fs = load_feature_set(tmp_path / "fs")
    assert result.n_features == 8 * 128 * 5 and fs.codebook().shape == (8, 128)
    assert (
        fs.manifest["implementation_versions"]["vlad"] >= 1 and "fisher" not in fs.manifest["implementation_versions"]
    )
    X = np.asarray(fs.X_train)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-5)
    assert (X < 0).any()
    # Cached rebuild under another name and a build without cache: the same numbers.
    build_feature_set(small_dataset, tmp_path / "fs2", config, cache_dir=tmp_path / "cache")
    build_feature_set(small_dataset, tmp_path / "fs3", config, cache_dir=None)
    for other in ("fs2", "fs3"):
        np.testing.assert_array_equal(np.asarray(load_feature_set(tmp_path / other).X_train), X)
    assert_new_images_match_rows(fs, [str(small_dataset / p) for p in fs.test_paths[:3]])
    for name in ("pmsvm", "nsvm"):  # additive kernels on histograms: signed vectors refused
        with pytest.raises(NegativeFeaturesError):
            make_classifier(name, {}).fit(X, np.asarray(fs.y_train))
    linear = make_classifier("linear", {}).fit(X, np.asarray(fs.y_train))
    assert linear.score(np.asarray(fs.X_test), np.asarray(fs.y_test)) > 0.5
