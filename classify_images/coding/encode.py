"""Encoders: descriptors to codes over a codebook.

* :func:`vq_encode` — hard vector quantisation (BoF/SPM): each descriptor is
  assigned its nearest centre, :math:`k^*(x) = \\arg\\min_k \\lVert x - c_k\\rVert_2^2`;
  the code is the one-hot vector of :math:`k^*`, stored as the index alone.
* :func:`sparse_encode` — sparse coding (ScSPM, Eq. 3 with the dictionary fixed):
  :math:`u = \\arg\\min_u \\tfrac12\\lVert x - V^\\top u\\rVert_2^2 + \\lambda\\lVert u\\rVert_1`,
  solved exactly by feature-sign search on KKT-checked pools of atoms, with the LARS-lasso
  homotopy as reference (:func:`classify_images.coding.lars.lasso_lars_codes`, numba; the
  same problem and solution as ``spams.lasso`` mode 2), stored as a CSR matrix.

Soft assignment to k-means codewords (localized soft-assignment coding, kernel codebook)
is :mod:`classify_images.coding.soft_assignment`; it shares :func:`half_sq_distance_blocks`
with :func:`vq_encode`, so that its ``k = 1`` case is exactly hard VQ.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from .lars import LassoDictionary, lasso_lars_codes

__all__ = ["IMPLEMENTATION_VERSION", "half_sq_distance_blocks", "vq_encode", "sparse_encode", "SparseCoder"]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.  It covers the
#: LARS-lasso solver of :mod:`.lars` as well.
IMPLEMENTATION_VERSION = 1


_VQ_CHUNK = 8192


def half_sq_distance_blocks(descriptors: np.ndarray, centres: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Half squared distances to every centre, up to a per-descriptor constant, by blocks.

    Yields ``(start, h)`` with :math:`h_{ik} = \\tfrac12\\lVert c_k\\rVert^2 - x_i^\\top c_k
    = \\tfrac12(\\lVert x_i - c_k\\rVert^2 - \\lVert x_i\\rVert^2)` for the descriptors
    ``start … start + len(h) - 1``: one float32 BLAS product per block of 8192
    descriptors, so memory stays bounded.  Differences :math:`h_{ik} - h_{il}` are half
    the differences of squared distances.

    Parameters
    ----------
    descriptors : ndarray (n, d)
    centres : ndarray (K, d)
    """
    centres = np.asarray(centres, dtype=np.float32)
    descriptors = np.asarray(descriptors, dtype=np.float32)
    half_sq_norms = 0.5 * np.einsum("kd,kd->k", centres, centres)
    for start in range(0, descriptors.shape[0], _VQ_CHUNK):
        block = descriptors[start : start + _VQ_CHUNK]
        yield start, half_sq_norms - block @ centres.T


def vq_encode(descriptors: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Index of the nearest centre of each descriptor.

    Uses :math:`\\lVert x-c\\rVert^2 = \\lVert c\\rVert^2 - 2x^\\top c + \\lVert x\\rVert^2`
    (the last term does not change the arg-min), one BLAS product per chunk of
    8192 descriptors so memory stays bounded (:func:`half_sq_distance_blocks`).

    Parameters
    ----------
    descriptors : ndarray (n, d)
    centres : ndarray (K, d)

    Returns
    -------
    index : ndarray of int16 (K ≤ 32767) or int32, shape (n,)
    """
    dtype = np.int16 if np.shape(centres)[0] <= np.iinfo(np.int16).max else np.int32
    index = np.empty(np.shape(descriptors)[0], dtype=dtype)
    for start, distances in half_sq_distance_blocks(descriptors, centres):
        index[start : start + distances.shape[0]] = np.argmin(distances, axis=1)
    return index


class SparseCoder:
    """Sparse coding over a fixed dictionary (ScSPM Eq. 3, :math:`V` fixed).

    The Gram matrix :math:`V V^\\top` is computed once and shared by every
    call, so encoding an image costs one product :math:`X V^\\top` plus the
    feature-sign search of :func:`~classify_images.coding.lars.lasso_lars_codes`
    (on a few screened atoms, grown until the full KKT check holds; exact
    solutions, equal to ``spams.lasso(..., mode=2)``'s).

    Parameters
    ----------
    dictionary : ndarray (K, d)
        Atoms as rows.
    lambda1 : float
        :math:`\\lambda` of the ℓ1 penalty (0.15 in the ScSPM reference code).
    """

    def __init__(self, dictionary: np.ndarray, lambda1: float = 0.15) -> None:
        self.dictionary = np.ascontiguousarray(np.asarray(dictionary, dtype=np.float64))
        # the Gram matrix, its float32 copy and Dᵀ, computed once for every image's call
        self.products = LassoDictionary(self.dictionary)
        self.gram = self.products.gram
        self.lambda1 = float(lambda1)

    def encode(self, descriptors: np.ndarray) -> sp.csr_matrix:
        """Sparse codes, CSR float32 of shape (n, K)."""
        return lasso_lars_codes(np.asarray(descriptors), self.products, self.lambda1)


def sparse_encode(descriptors: np.ndarray, dictionary: np.ndarray, lambda1: float = 0.15) -> sp.csr_matrix:
    """Sparse codes of ``descriptors`` (one-off form of :class:`SparseCoder`)."""
    return SparseCoder(dictionary, lambda1).encode(descriptors)
