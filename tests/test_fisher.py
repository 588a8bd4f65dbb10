"""Improved Fisher vectors against the formulas with explicit loops; the PCA + GMM model;
a small build storing the model without pickle; the linear SVM on long signed vectors."""

import numpy as np
import pytest

from classify_images.classifiers.registry import make_classifier
from classify_images.coding import FisherEncoder, learn_fisher_model
from classify_images.coding.fisher import FISHER_MODEL_KEYS, POSTERIOR_THRESHOLD, gmm_posteriors, pyramid_atoms
from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.storage.feature_store import load_feature_set

from ._encoder_helpers import assert_new_images_match_rows, random_layout, reference_cells, small_config


def _random_model(rng, K=4, D=3, P=6):
    weights = rng.random(K) + 0.2
    return {
        "pca_mean": rng.normal(size=P),
        "pca_components": np.linalg.qr(rng.normal(size=(P, D)))[0].T,
        "weights": weights / weights.sum(),
        "means": rng.normal(size=(K, D)),
        "variances": rng.random((K, D)) + 0.3,
    }


def thresholded(gamma, threshold):
    """Posteriors (n, K) with those below ``threshold`` times their row's largest set to 0 and
    the rest renormalised (the encoder's ``posterior_threshold``)."""
    gamma = np.where(gamma >= threshold * gamma.max(axis=1, keepdims=True), gamma, 0.0)
    return gamma / gamma.sum(axis=1, keepdims=True)


def _reference_fisher(S, model, cells, extra=None, threshold=0.0):
    """G_μk and G_σk per cell by loops over descriptors, components and dimensions
    (DESIGN.md §6), then signed sqrt and L2 per cell, then L2 of the concatenation;
    ``extra`` (n, e): columns appended to each projected descriptor (spatial coordinates);
    ``threshold``: the encoder's ``posterior_threshold`` (:func:`thresholded`)."""
    m, P = model["pca_mean"], model["pca_components"]
    pi, mu, var = model["weights"], model["means"], model["variances"]
    K, D = mu.shape
    X = np.array([np.concatenate([P @ (s - m), [] if extra is None else extra[i]]) for i, s in enumerate(S)])
    gamma = np.zeros((len(X), K))
    for i, x in enumerate(X):
        likelihood = [
            pi[k]
            * np.prod(
                [np.exp(-((x[d] - mu[k, d]) ** 2) / (2 * var[k, d])) / np.sqrt(2 * np.pi * var[k, d]) for d in range(D)]
            )
            for k in range(K)
        ]
        gamma[i] = np.array(likelihood) / np.sum(likelihood)
    gamma = thresholded(gamma, threshold)
    out = []
    for members in cells:
        g_mu, g_sigma = np.zeros((K, D)), np.zeros((K, D))
        for k in range(K):
            for d in range(D):
                sigma = np.sqrt(var[k, d])
                for i in members:
                    g_mu[k, d] += gamma[i, k] * (X[i, d] - mu[k, d]) / sigma
                    g_sigma[k, d] += gamma[i, k] * ((X[i, d] - mu[k, d]) ** 2 / var[k, d] - 1)
        N = max(len(members), 1)
        g_mu /= N * np.sqrt(pi)[:, None]
        g_sigma /= N * np.sqrt(2 * pi)[:, None]
        v = np.concatenate([g_mu.ravel(), g_sigma.ravel()])
        v = np.sign(v) * np.sqrt(np.abs(v))
        out.append(v / np.linalg.norm(v) if np.linalg.norm(v) > 0 else v)
    out = np.concatenate(out)
    return out / np.linalg.norm(out)


def test_fisher_vector_matches_formulas():
    rng = np.random.default_rng(0)
    model = _random_model(rng)
    n = 60
    x, y, shape = random_layout(rng, n)
    x[:] = np.minimum(x, 35.0)  # nothing in the right column of the 2x2 level: empty cells zero
    S = rng.normal(size=(n, 6))
    levels, grids = (1, 2, "3x1"), [(1, 1), (2, 2), (3, 1)]
    encoder = FisherEncoder(model)
    assert encoder.posterior_threshold == POSTERIOR_THRESHOLD == 1e-4
    got = encoder.encode(S, pyramid_cells(x, y, shape, levels), n_pyramid_cells(levels))
    expected = _reference_fisher(S, model, reference_cells(x, y, shape, grids), threshold=1e-4)
    assert got.dtype == np.float32 and got.shape == (8 * 2 * 4 * 3,) == (8 * encoder.cell_dimension,)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # threshold 0 (the dense path): every posterior, Perronnin et al.'s formulas exactly
    every_posterior = _reference_fisher(S, model, reference_cells(x, y, shape, grids))
    dense = FisherEncoder(model, posterior_threshold=0.0).encode(
        S, pyramid_cells(x, y, shape, levels), n_pyramid_cells(levels)
    )
    np.testing.assert_allclose(dense, every_posterior, rtol=1e-5, atol=1e-6)
    assert not np.allclose(every_posterior, expected, rtol=1e-5, atol=1e-6)  # the threshold shows
    cell_vectors = got.reshape(8, -1)
    assert not cell_vectors[[2, 4]].any() and (got < 0).any()
    np.testing.assert_array_equal(got, encoder.encode(S, pyramid_cells(x, y, shape, levels), 8))


def test_posteriors_are_sklearns_and_survive_far_points():
    from sklearn.mixture import GaussianMixture

    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(size=(300, 5)), rng.normal(3.0, 0.5, size=(300, 5))])
    gmm = GaussianMixture(3, covariance_type="diag", random_state=0).fit(X)
    got = gmm_posteriors(X, gmm.weights_, gmm.means_, gmm.covariances_)
    np.testing.assert_allclose(got, gmm.predict_proba(X), rtol=1e-7, atol=1e-10)
    far = gmm_posteriors(np.full((1, 5), 1e3), gmm.weights_, gmm.means_, gmm.covariances_)
    assert np.isfinite(far).all() and np.isclose(far.sum(), 1.0)  # log-sum-exp: no 0/0


def test_learn_fisher_model_shapes_determinism_and_errors():
    rng = np.random.default_rng(2)
    S = rng.random((2000, 16)).astype(np.float32)
    model = learn_fisher_model(S, 5, pca_dims=4, max_iter=20, random_state=0)
    assert tuple(model) == FISHER_MODEL_KEYS
    assert model["pca_components"].shape == (4, 16) and model["means"].shape == (5, 4)
    assert model["variances"].shape == (5, 4) and np.isclose(model["weights"].sum(), 1.0)
    np.testing.assert_allclose(
        model["pca_components"] @ model["pca_components"].T, np.eye(4), atol=1e-10
    )  # no whitening
    again = learn_fisher_model(S, 5, pca_dims=4, max_iter=20, random_state=0)
    for key in FISHER_MODEL_KEYS:
        np.testing.assert_array_equal(model[key], again[key])
    with pytest.raises(ValueError, match="pca_dims must be in"):
        learn_fisher_model(S, 5, pca_dims=17)


def test_the_models_pca_is_the_principal_axes_of_a_full_svd():
    # the covariance eigendecomposition (svd_solver="covariance_eigh") against the obvious full SVD of
    # the centred samples: the same axes, signs (largest entry positive) and mean
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(4)
    S = (rng.random((5000, 48)) ** 3 @ rng.random((48, 48))).astype(np.float32)
    model = learn_fisher_model(S, 3, pca_dims=12, max_iter=5, random_state=0)
    reference = PCA(n_components=12, svd_solver="full").fit(S.astype(np.float64))
    np.testing.assert_allclose(model["pca_mean"], reference.mean_, rtol=1e-12)
    np.testing.assert_allclose(model["pca_components"], reference.components_, atol=1e-9)


def test_fisher_build_end_to_end(tmp_path, small_dataset):
    config = small_config(
        {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 3000, "n_iter": 30},
        {"levels": [1, "3x1"]},
        "none",
    )
    # float32 rows: the encoder's own numbers (the default, float16, is tests/test_light_build.py's)
    result = build_feature_set(small_dataset, tmp_path / "fs", config, cache_dir=tmp_path / "cache", rows="float32")
    fs = load_feature_set(tmp_path / "fs")
    assert result.n_features == 4 * 2 * 4 * 8
    assert not (tmp_path / "fs" / "codebook.npy").exists() and (tmp_path / "fs" / "codebook.npz").exists()
    model = fs.codebook()
    assert set(model) == set(FISHER_MODEL_KEYS) and model["means"].shape == (4, 8)
    assert fs.manifest["codebook"]["size"] == 4 and fs.manifest["implementation_versions"]["fisher"] >= 1
    X = np.asarray(fs.X_train)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, rtol=1e-5)
    build_feature_set(small_dataset, tmp_path / "fs2", config, cache_dir=None, rows="float32")
    np.testing.assert_array_equal(np.asarray(load_feature_set(tmp_path / "fs2").X_train), X)
    assert_new_images_match_rows(fs, [str(small_dataset / p) for p in fs.test_paths[:3]])
    linear = make_classifier("linear", {}).fit(X, np.asarray(fs.y_train))
    assert linear.score(np.asarray(fs.X_test), np.asarray(fs.y_test)) > 0.5


def test_pyramid_atoms_partition_descriptors_by_their_cells():
    rng = np.random.default_rng(3)
    x, y, shape = random_layout(rng, 500)
    levels = (1, 2, "3x1")
    cells = pyramid_cells(x, y, shape, levels)
    order, bounds, atom_cells = pyramid_atoms(cells, n_pyramid_cells(levels))
    assert sorted(order.tolist()) == list(range(500)) and bounds[0] == 0 and bounds[-1] == 500
    assert atom_cells.shape == (3, 8)  # 2x2 and 3x1 together cut the image into 8 regions
    assert len({tuple(column) for column in atom_cells.T}) == 8
    for atom in range(len(bounds) - 1):
        members = order[bounds[atom] : bounds[atom + 1]]
        assert members.size and np.all(np.diff(members) > 0)  # the original order within an atom
        np.testing.assert_array_equal(cells[:, members], np.repeat(atom_cells[:, [atom]], members.size, axis=1))


def test_far_components_get_exact_zero_posteriors_not_subnormals():
    model = _random_model(np.random.default_rng(4), K=3, D=2, P=2)
    model["pca_components"], model["pca_mean"] = np.eye(2), np.zeros(2)
    model["means"] = np.array([[0.0, 0.0], [0.5, 0.0], [60.0, 0.0]])
    model["variances"] = np.full((3, 2), 0.5)
    encoder = FisherEncoder(model)
    points = np.array([[0.1, 0.2], [0.4, -0.1], [59.0, 0.3]])
    posteriors = gmm_posteriors(
        encoder.project(points).astype(np.float64), model["weights"], model["means"], model["variances"]
    )
    np.testing.assert_allclose(posteriors.sum(axis=1), 1.0)
    assert posteriors[0, 2] == 0.0 and posteriors[2, 0] == 0.0 and posteriors[2, 2] > 0.99
    tiny = posteriors[(posteriors > 0) & (posteriors < np.finfo(np.float32).tiny)]
    assert tiny.size == 0


def test_no_descriptors_give_zeros_and_one_descriptor_a_unit_vector():
    encoder = FisherEncoder(_random_model(np.random.default_rng(5)))
    empty = encoder.encode(np.zeros((0, 6), np.float32), np.zeros((3, 0), np.int32), 8)
    assert empty.shape == (8 * encoder.cell_dimension,) and not empty.any()
    one = encoder.encode(np.ones((1, 6)), np.array([[0], [1], [5]]), 8)
    assert np.isclose(np.linalg.norm(one), 1.0)
    assert not one.reshape(8, -1)[[2, 3, 4, 6, 7]].any()  # only the cells of the descriptor


def test_an_unconverged_gmm_is_one_line_of_ours(tmp_path, capsys):
    """scikit-learn's ConvergenceWarning (a site-packages path and its internals' words) becomes one
    line that names our key, printed once by the command line."""
    from classify_images.pipeline.interfaces.cli import main

    from .conftest import FIXTURE_IMAGES, SMALL_CONFIG, write_config_toml

    config = {**SMALL_CONFIG, "codebook": {"kind": "fisher", "size": 4, "pca_dims": 8, "n_samples": 2000, "n_iter": 1}}
    toml = write_config_toml(tmp_path / "fisher.toml", config)
    assert (
        main(
            [
                "build-features",
                str(FIXTURE_IMAGES),
                "--config",
                str(toml),
                "--out",
                str(tmp_path / "fs"),
                "--no-cache",
                "-q",
            ]
        )
        == 0
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line.lower()]
    assert warnings == [
        "classify-images build-features: warning: Fisher-vector GMM: EM stopped at codebook.n_iter = 1 "
        "iterations before its change fell below 0.001; the model is used as it is (raise "
        "codebook.n_iter for a closer fit)"
    ], warnings


def test_the_configs_posterior_threshold_reaches_the_encoder():
    from classify_images.coding.encoders import make_encoder

    rng = np.random.default_rng(3)
    model = _random_model(rng)
    table = {"kind": "fisher", "size": 4, "pca_dims": 3, "n_samples": 100, "n_iter": 5, "seed": 0}
    assert make_encoder(table).prepare(model).posterior_threshold == POSTERIOR_THRESHOLD
    assert make_encoder({**table, "posterior_threshold": 0.0}).prepare(model).posterior_threshold == 0.0
    assert make_encoder({**table, "posterior_threshold": 0.25}).prepare(model).posterior_threshold == 0.25
