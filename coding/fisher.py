"""Improved Fisher vectors (Perronnin, Sánchez & Mensink, ECCV 2010 [1]_).

The descriptors are first PCA-reduced, :math:`x = P(s - m)` (``D`` dims, no whitening;
the decorrelation suits a diagonal GMM), then described by their deviation from a
GMM with ``K`` diagonal components: weights :math:`\\pi_k`, means :math:`\\mu_k`,
variances :math:`\\sigma_k^2` (vectors of ``D``).  With the posteriors ([1]_, Eq. 3)

.. math::  \\gamma_{ik} = \\frac{\\pi_k\\,\\mathcal N(x_i;\\mu_k,\\sigma_k^2)}
                               {\\sum_j \\pi_j\\,\\mathcal N(x_i;\\mu_j,\\sigma_j^2)}

over the ``N`` descriptors of a region, the gradients with respect to the means and
the standard deviations, normalised by the diagonal Fisher information ([1]_,
Eqs. 4–5; operations per dimension):

.. math::  \\mathcal G_{\\mu_k} = \\frac{1}{N\\sqrt{\\pi_k}} \\sum_i \\gamma_{ik}
               \\frac{x_i - \\mu_k}{\\sigma_k},\\qquad
           \\mathcal G_{\\sigma_k} = \\frac{1}{N\\sqrt{2\\pi_k}} \\sum_i \\gamma_{ik}
               \\left[\\frac{(x_i - \\mu_k)^2}{\\sigma_k^2} - 1\\right],

give the vector :math:`[\\mathcal G_{\\mu_1}, …, \\mathcal G_{\\mu_K}, \\mathcal G_{\\sigma_1}, …,
\\mathcal G_{\\sigma_K}]` of ``2KD`` dimensions.  "Improved" ([1]_, §3): the signed
square root of every entry (power normalisation, §3.2, α = 1/2), then the L2 norm
(§3.1).  With a spatial pyramid (§3.3: 1×1 + 2×2 + 3×1) the region is each cell, each
cell vector normalised so, then the concatenation L2-normalised.  An empty cell gives
zeros.  The vectors are signed.

Speed: the Gaussian log-densities of all descriptors come from two BLAS products,
:math:`\\sum_d x_d^2/\\sigma_{kd}^2 - 2x_d\\mu_{kd}/\\sigma_{kd}^2 + \\mu_{kd}^2/\\sigma_{kd}^2`,
the posteriors from a log-sum-exp, and per cell the statistics
:math:`S^0_k = \\sum_i\\gamma_{ik}`, :math:`S^1_k = \\sum_i\\gamma_{ik}x_i`,
:math:`S^2_k = \\sum_i\\gamma_{ik}x_i^2` from two more products, since
:math:`\\sum_i\\gamma_{ik}(x_i-\\mu_k) = S^1_k - \\mu_k S^0_k` and
:math:`\\sum_i\\gamma_{ik}(x_i-\\mu_k)^2 = S^2_k - 2\\mu_k S^1_k + \\mu_k^2 S^0_k`
(all in float64).

The model (PCA and GMM) is a dict of plain arrays, ``FISHER_MODEL_KEYS``, learnt by
:func:`~classify_images.coding.codebook.learn_fisher_model` and stored in the feature
set without pickle.

References
----------
.. [1] F. Perronnin, J. Sánchez and T. Mensink, "Improving the Fisher kernel for
   large-scale image classification", ECCV 2010.
.. [2] K. Chatfield, V. Lempitsky, A. Vedaldi and A. Zisserman, "The devil is in the
   details: an evaluation of recent feature encoding methods", BMVC 2011.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from .vlad import l2_normalize_rows, signed_sqrt

__all__ = ["IMPLEMENTATION_VERSION", "FISHER_MODEL_KEYS", "gmm_posteriors", "FisherEncoder"]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 1

#: The arrays of a Fisher-vector model: PCA mean (P,) and components (D, P); GMM
#: weights (K,), means (K, D) and diagonal variances (K, D).
FISHER_MODEL_KEYS = ("pca_mean", "pca_components", "weights", "means", "variances")


def gmm_posteriors(x: np.ndarray, weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """Posteriors :math:`\\gamma_{ik}` of a diagonal GMM ([1]_, Eq. 3), shape (n, K).

    The quadratic form by BLAS products, normalised by log-sum-exp (no underflow).
    """
    x = np.asarray(x, dtype=np.float64)
    precisions = 1.0 / variances
    log_density = -0.5 * (
        (x * x) @ precisions.T
        - 2.0 * x @ (means * precisions).T
        + np.sum(means * means * precisions, axis=1)
        + np.sum(np.log(variances), axis=1)
        + x.shape[1] * np.log(2.0 * np.pi)
    )
    log_joint = log_density + np.log(weights)
    return np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))


class FisherEncoder:
    """Improved Fisher vector of the descriptors of an image over a spatial pyramid.

    Parameters
    ----------
    model : dict of ndarray
        ``FISHER_MODEL_KEYS``: PCA mean and components, GMM weights, means and variances.
    """

    def __init__(self, model: dict[str, np.ndarray]) -> None:
        missing = [key for key in FISHER_MODEL_KEYS if key not in model]
        if missing:
            raise ValueError(f"Fisher-vector model lacks {', '.join(missing)}")
        self.pca_mean, self.pca_components, self.weights, self.means, self.variances = (
            np.asarray(model[key], dtype=np.float64) for key in FISHER_MODEL_KEYS
        )
        self.n_components, self.n_dims = self.means.shape
        self.std = np.sqrt(self.variances)

    @property
    def cell_dimension(self) -> int:
        """Length of one cell's vector, ``2·K·D``."""
        return 2 * self.n_components * self.n_dims

    def project(self, descriptors: np.ndarray) -> np.ndarray:
        """PCA-reduced descriptors :math:`P(s - m)`, float64 (n, D)."""
        return (np.asarray(descriptors, dtype=np.float64) - self.pca_mean) @ self.pca_components.T

    def encode(self, descriptors: np.ndarray, cells: np.ndarray, n_cells: int) -> np.ndarray:
        """The improved Fisher vector of every pyramid cell, concatenated and L2-normalised.

        The arguments are those of :meth:`~classify_images.coding.vlad.VladEncoder.encode`
        (``descriptors`` before PCA, ``(n, P)``); the result is float32 of
        ``n_cells · 2 · K · D`` entries.
        """
        x = self.project(descriptors)
        posteriors = gmm_posteriors(x, self.weights, self.means, self.variances)
        vectors = np.zeros((n_cells, self.cell_dimension))
        for level_cells in cells:
            for cell in np.unique(level_cells):
                members = level_cells == cell
                vectors[cell] = self._cell_vector(x[members], posteriors[members])
        per_cell = l2_normalize_rows(signed_sqrt(vectors))
        return l2_normalize_rows(per_cell.ravel()).astype(np.float32)

    def _cell_vector(self, x: np.ndarray, posteriors: np.ndarray) -> np.ndarray:
        """``[G_μ, G_σ]`` (unnormalised) of the ``N`` descriptors of one cell."""
        s0 = posteriors.sum(axis=0)[:, None]
        s1 = posteriors.T @ x
        s2 = posteriors.T @ (x * x)
        n = x.shape[0]
        grad_mean = (s1 - self.means * s0) / self.std / (n * np.sqrt(self.weights)[:, None])
        squared = (s2 - 2.0 * self.means * s1 + self.means * self.means * s0) / self.variances
        grad_std = (squared - s0) / (n * np.sqrt(2.0 * self.weights)[:, None])
        return np.concatenate([grad_mean.ravel(), grad_std.ravel()])
