"""Locality-constrained linear coding (LLC; Wang et al., CVPR 2010 [1]_), approximated form.

LLC codes a descriptor :math:`x \\in \\mathbb{R}^d` over a k-means codebook
:math:`B = [b_1, …, b_K]` by the locality-constrained least squares of [1]_, Eq. 3,

.. math::  \\min_c \\lVert x - B c\\rVert^2 + \\lambda \\lVert d \\odot c\\rVert^2
           \\quad\\text{s.t.}\\quad \\mathbf 1^\\top c = 1,

in the *approximated* form of §3 (Eq. 7), which the authors' released code
(``LLC_coding_appr.m``) implements: only the ``k`` nearest codewords
:math:`B_x` (``k × d``, ``k = 5``) take part, and the code on them solves

.. math::  \\min_w \\lVert x - B_x^\\top w\\rVert^2 + \\lambda\\lVert w\\rVert^2
           \\quad\\text{s.t.}\\quad \\mathbf 1^\\top w = 1,
           \\qquad \\lambda = \\beta\\,\\operatorname{tr}(C),

with the local covariance :math:`C = (B_x - \\mathbf 1 x^\\top)(B_x - \\mathbf 1 x^\\top)^\\top`
(``k × k``).  Because :math:`\\mathbf 1^\\top w = 1`, :math:`x - B_x^\\top w = -(B_x - \\mathbf 1x^\\top)^\\top w`,
so the objective is :math:`w^\\top (C + \\lambda I) w` and its constrained minimiser is the
analytic solution ([1]_, Eq. 4)

.. math::  \\tilde w = (C + \\beta\\operatorname{tr}(C) I)^{-1}\\mathbf 1,\\qquad
           w = \\tilde w / \\mathbf 1^\\top \\tilde w,

with :math:`\\beta = 10^{-4}`.  The code :math:`c` has those ``k`` non-zeros (they can be
negative) and zeros elsewhere.  Codes are max-pooled over the pyramid (pooling method
``"signed_max"``) and the whole vector L2-normalised.

Speed: the ``k`` nearest codewords come from one BLAS product per chunk
(:math:`\\lVert b\\rVert^2 - 2 b^\\top x`, the ``‖x‖²`` term does not change the order) and
a one-pass selection of the ``k`` smallest per row (numba, :mod:`._llc_kernels`); the ``n``
small ``k × k`` systems are solved in one batched :func:`numpy.linalg.solve`.

References
----------
.. [1] J. Wang, J. Yang, K. Yu, F. Lv, T. Huang and Y. Gong, "Locality-constrained linear
   coding for image classification", CVPR 2010.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._llc_kernels import k_smallest

__all__ = [
    "IMPLEMENTATION_VERSION",
    "DEFAULT_N_NEIGHBORS",
    "DEFAULT_BETA",
    "nearest_codewords",
    "llc_codes",
    "LlcCoder",
]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 1

#: ``k``, the nearest codewords a descriptor is coded on ([1]_, §4: 5).
DEFAULT_N_NEIGHBORS = 5
#: ``β``, the regulariser of the local covariance (the released code's ``beta = 1e-4``).
DEFAULT_BETA = 1e-4

_CHUNK = 4096


def nearest_codewords(descriptors: np.ndarray, codebook: np.ndarray, n_neighbors: int) -> np.ndarray:
    """Indices of the ``n_neighbors`` nearest codewords of every descriptor, nearest first.

    Parameters
    ----------
    descriptors : ndarray (n, d)
    codebook : ndarray (K, d)
    n_neighbors : int
        ``k ≤ K``.

    Returns
    -------
    neighbors : ndarray of int64, shape (n, k)
        Sorted by distance; ties broken by the codeword index.
    """
    descriptors = np.asarray(descriptors, dtype=np.float64)
    codebook = np.asarray(codebook, dtype=np.float64)
    n_words = codebook.shape[0]
    if not 1 <= n_neighbors <= n_words:
        raise ValueError(f"n_neighbors must be in [1, {n_words}] (the codebook size), got {n_neighbors}")
    sq_norms = np.einsum("kd,kd->k", codebook, codebook)
    neighbors = np.empty((descriptors.shape[0], n_neighbors), dtype=np.int64)
    for start in range(0, descriptors.shape[0], _CHUNK):
        block = descriptors[start : start + _CHUNK]
        distances = sq_norms - 2.0 * (block @ codebook.T)
        neighbors[start : start + block.shape[0]] = k_smallest(distances, n_neighbors)
    return neighbors


def llc_codes(
    descriptors: np.ndarray,
    codebook: np.ndarray,
    n_neighbors: int = DEFAULT_N_NEIGHBORS,
    beta: float = DEFAULT_BETA,
) -> sp.csr_matrix:
    """LLC codes of descriptors (approximated LLC, [1]_ Eq. 4 on the ``k`` nearest codewords).

    Parameters
    ----------
    descriptors : ndarray (n, d)
    codebook : ndarray (K, d)
        k-means centres as rows.
    n_neighbors : int
        ``k``, codewords per code.
    beta : float
        ``β`` of :math:`C + \\beta\\operatorname{tr}(C) I`.

    Returns
    -------
    codes : csr_matrix of float32, shape (n, K)
        ``k`` entries per row (on the nearest codewords, in index order), summing to 1.
    """
    descriptors = np.asarray(descriptors, dtype=np.float64)
    codebook = np.asarray(codebook, dtype=np.float64)
    n = descriptors.shape[0]
    neighbors = np.sort(nearest_codewords(descriptors, codebook, n_neighbors), axis=1)
    weights = np.empty((n, n_neighbors), dtype=np.float64)
    eye = np.eye(n_neighbors)
    for start in range(0, n, _CHUNK):
        rows = slice(start, start + _CHUNK)
        shifted = codebook[neighbors[rows]] - descriptors[rows, None, :]  # B_x − 1xᵀ, (m, k, d)
        covariance = np.einsum("mkd,mjd->mkj", shifted, shifted)
        trace = np.trace(covariance, axis1=1, axis2=2)
        covariance += (beta * trace)[:, None, None] * eye
        solved = np.linalg.solve(covariance, np.ones((covariance.shape[0], n_neighbors, 1)))[..., 0]
        weights[rows] = solved / solved.sum(axis=1, keepdims=True)
    indptr = np.arange(0, n * n_neighbors + 1, n_neighbors, dtype=np.int64)
    return sp.csr_matrix((weights.astype(np.float32).ravel(), neighbors.ravel(), indptr), shape=(n, codebook.shape[0]))


class LlcCoder:
    """LLC over a fixed k-means codebook (:func:`llc_codes` with the codebook held).

    Parameters
    ----------
    codebook : ndarray (K, d)
    n_neighbors : int
    beta : float
    """

    def __init__(
        self, codebook: np.ndarray, n_neighbors: int = DEFAULT_N_NEIGHBORS, beta: float = DEFAULT_BETA
    ) -> None:
        self.codebook = np.ascontiguousarray(codebook, dtype=np.float64)
        self.n_neighbors = int(n_neighbors)
        self.beta = float(beta)

    def encode(self, descriptors: np.ndarray) -> sp.csr_matrix:
        """LLC codes, CSR float32 of shape (n, K)."""
        return llc_codes(descriptors, self.codebook, self.n_neighbors, self.beta)
