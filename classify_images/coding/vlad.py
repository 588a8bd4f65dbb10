"""VLAD: vector of locally aggregated descriptors (Jégou et al., CVPR 2010 [1]_).

Each descriptor :math:`x_i` of a region is assigned to its nearest k-means centre
:math:`\\mathrm{NN}(x_i)` (hard assignment), and the residuals are summed per centre
([1]_, Eq. 1):

.. math::  v_k = \\sum_{i:\\,\\mathrm{NN}(x_i) = k} (x_i - \\mu_k) \\in \\mathbb{R}^d,
           \\qquad v = [v_1, …, v_K] \\in \\mathbb{R}^{K d}.

Normalisation, as in the improved recipes: signed square root of every entry,
:math:`v \\leftarrow \\operatorname{sign}(v)\\sqrt{|v|}` (the power law of [1]_ §3 /
[3]_), then *intra-normalisation*, each :math:`v_k` L2-normalised on its own
(Arandjelović & Zisserman 2013 [2]_, §3), then the L2 norm of :math:`v`.  With a
spatial pyramid the region is each cell; the cell vectors are concatenated (level by
level, cells row-major) and the concatenation L2-normalised.  An empty cell (or centre)
gives zeros.  The vectors are signed.

References
----------
.. [1] H. Jégou, M. Douze, C. Schmid and P. Pérez, "Aggregating local descriptors into a
   compact image representation", CVPR 2010.
.. [2] R. Arandjelović and A. Zisserman, "All about VLAD", CVPR 2013.
.. [3] F. Perronnin, J. Sánchez and T. Mensink, "Improving the Fisher kernel for
   large-scale image classification", ECCV 2010.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .encode import vq_encode
from .normalize import l2_normalize_rows, signed_sqrt

__all__ = ["IMPLEMENTATION_VERSION", "signed_sqrt", "l2_normalize_rows", "VladEncoder"]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.  It covers
#: :func:`signed_sqrt` and :func:`l2_normalize_rows`, which the Fisher encoder uses too.
IMPLEMENTATION_VERSION = 1


class VladEncoder:
    """VLAD of the descriptors of an image over a spatial pyramid.

    Parameters
    ----------
    centres : ndarray (K, d)
        k-means centres :math:`\\mu_k`.
    """

    def __init__(self, centres: np.ndarray) -> None:
        self.centres = np.ascontiguousarray(centres, dtype=np.float64)
        self.n_centres, self.n_dims = self.centres.shape

    @property
    def cell_dimension(self) -> int:
        """Length of one cell's vector, ``K·d``."""
        return self.n_centres * self.n_dims

    def encode(self, descriptors: np.ndarray, cells: np.ndarray, n_cells: int) -> np.ndarray:
        """The normalised VLAD of every pyramid cell, concatenated and L2-normalised.

        Parameters
        ----------
        descriptors : ndarray (n, d)
        cells : ndarray of int (n_levels, n)
            Global cell number of each descriptor at each level
            (:func:`~classify_images.coding.pooling.pyramid_cells`).
        n_cells : int
            Total number of cells.

        Returns
        -------
        vector : ndarray of float32, shape (n_cells · K · d,)
        """
        descriptors = np.asarray(descriptors, dtype=np.float64)
        nearest = vq_encode(descriptors, self.centres).astype(np.int64)
        residuals = descriptors - self.centres[nearest]
        n = descriptors.shape[0]
        sums = np.zeros((n_cells * self.n_centres, self.n_dims))
        for level_cells in cells:
            # One row per (cell, centre): a 0/1 matrix times the residuals sums them.
            member = sp.csr_matrix(
                (np.ones(n), (level_cells.astype(np.int64) * self.n_centres + nearest, np.arange(n))),
                shape=(n_cells * self.n_centres, n),
            )
            sums += member @ residuals
        per_centre = l2_normalize_rows(signed_sqrt(sums))  # intra-normalisation
        per_cell = l2_normalize_rows(per_centre.reshape(n_cells, self.cell_dimension))
        return l2_normalize_rows(per_cell.ravel()).astype(np.float32)
