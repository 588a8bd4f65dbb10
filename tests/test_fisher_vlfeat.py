"""Our Fisher encoder against VLFeat's own ``vl_fisher`` (issue 24).

VLFeat is a test reference only (marker ``vlfeat``, deselected by default, run by
``.ci/run`` after it builds cyvlfeat against Debian's libvlfeat-dev 0.9.21).

What VLFeat 0.9.21 computes (``vl/fisher.c``), and what these tests pin down:

* the layout is ``[G_mu_1, ..., G_mu_K, G_sigma_1, ..., G_sigma_K]`` (all mean gradients,
  then all standard-deviation gradients, ``D`` entries each), the same as ours; a
  per-component ``[G_mu_k, G_sigma_k]`` interleaving would not match;
* the posterior terms below ``1e-6`` are skipped (absolute threshold), ours drops those
  below ``e^-80`` times the descriptor's largest; in double precision VLFeat equals the
  obvious formula with posteriors below 1e-6 set to 0 to rounding, and differs from it
  without that threshold;
* ``improved=True`` is the signed square root then the L2 norm, like one cell of ours.
"""

from __future__ import annotations

import numpy as np
import pytest

from classify_images.coding import FisherEncoder, learn_fisher_model
from classify_images.coding.fisher import gmm_posteriors
from classify_images.features import load_grayscale
from classify_images.features.dsift import dense_sift

from .conftest import FIXTURE_PHOTO

pytestmark = pytest.mark.vlfeat


def _vl_fisher():
    try:
        from cyvlfeat.fisher import fisher
    except ImportError:
        pytest.fail("the vlfeat tests need cyvlfeat built against libvlfeat-dev (see .ci/run)")
    return fisher


def _model_and_descriptors(n_components=16, pca_dims=16):
    image = load_grayscale(FIXTURE_PHOTO, max_side=200)
    descriptors = dense_sift(image, (16, 24), 4).descriptors
    model = learn_fisher_model(descriptors[::2], n_components, pca_dims=pca_dims, max_iter=10, random_state=0)
    return model, descriptors[1::2]


def _obvious_fisher(x, model, threshold):
    """Unnormalised ``[G_mu, G_sigma]`` (float64) with posteriors below ``threshold`` set to 0."""
    w, mu, var = model["weights"], model["means"], model["variances"]
    posteriors = gmm_posteriors(x, w, mu, var)
    posteriors[posteriors < threshold] = 0.0
    z = (x[:, None, :] - mu[None]) / np.sqrt(var)[None]
    n = x.shape[0]
    g_mu = np.einsum("nk,nkd->kd", posteriors, z) / (n * np.sqrt(w))[:, None]
    g_sigma = np.einsum("nk,nkd->kd", posteriors, z * z - 1.0) / (n * np.sqrt(2.0 * w))[:, None]
    return g_mu, g_sigma


def _gmm_args(model, dtype):
    return [np.ascontiguousarray(model[key], dtype=dtype) for key in ("means", "variances", "weights")]


def test_one_cell_equals_vl_fisher_improved():
    """Same descriptors and GMM: our improved FV of one cell = VLFeat's within float32 rounding,
    every posterior kept (``posterior_threshold=0``; VLFeat skips those below 1e-6, which moves
    no float32 entry here)."""
    fisher = _vl_fisher()
    model, descriptors = _model_and_descriptors()
    encoder = FisherEncoder(model, posterior_threshold=0.0)
    n = descriptors.shape[0]
    ours = encoder.encode(descriptors, np.zeros((1, n), dtype=np.int64), 1)
    projected = np.ascontiguousarray(encoder.project(descriptors), dtype=np.float32)
    theirs = np.ravel(fisher(projected, *_gmm_args(model, np.float32), improved=True))
    assert ours.shape == theirs.shape == (encoder.cell_dimension,)
    assert np.abs(ours - theirs).max() < 1e-4
    # both in float32 (the signed square root magnifies the rounding of small entries)
    assert np.linalg.norm(ours - theirs) < 5e-4 * np.linalg.norm(theirs)
    # the layout matters: the per-component interleaved order is far off
    K, D = encoder.n_components, encoder.n_dims
    interleaved = ours.reshape(2, K, D).transpose(1, 0, 2).ravel()
    assert np.abs(interleaved - theirs).max() > 1e-2


def test_vl_fisher_is_the_formula_with_its_posterior_threshold():
    """Double precision: VLFeat = [G_mu (all k), G_sigma (all k)] with posteriors < 1e-6 skipped."""
    fisher = _vl_fisher()
    rng = np.random.default_rng(1)
    K, D, n = 8, 2, 4000
    model = {"means": rng.normal(size=(K, D)) * 3, "variances": np.full((K, D), 0.3), "weights": np.full(K, 1.0 / K)}
    x = rng.normal(size=(n, D)) * 4  # spread out: many posteriors between 1e-8 and 1e-5
    theirs = np.ravel(fisher(np.ascontiguousarray(x), *_gmm_args(model, np.float64)))
    with_threshold = np.concatenate([g.ravel() for g in _obvious_fisher(x, model, 1e-6)])
    without = np.concatenate([g.ravel() for g in _obvious_fisher(x, model, 0.0)])
    assert np.abs(theirs - with_threshold).max() < 1e-12
    assert np.abs(theirs - without).max() > 1e-7
