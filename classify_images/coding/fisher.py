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

Speed: every descriptor is visited once, whatever the pyramid.  The descriptors are
grouped by their *atom*, the set of cells they fall in at every level (for 1×1 + 2×2 +
3×1 the 8 regions cut by the 2×2 and 3×1 grids together); the statistics

.. math::  S^0_k = \\sum_i\\gamma_{ik},\\qquad S^1_k = \\sum_i\\gamma_{ik}x_i,\\qquad
           S^2_k = \\sum_i\\gamma_{ik}x_i^2

are accumulated per atom (the column of ones gives :math:`S^0`), and those of a cell are the
sums over its atoms (the statistics are additive, the formulas above depend on nothing else)
since :math:`\\sum_i\\gamma_{ik}(x_i-\\mu_k) = S^1_k - \\mu_k S^0_k` and
:math:`\\sum_i\\gamma_{ik}(x_i-\\mu_k)^2 = S^2_k - 2\\mu_k S^1_k + \\mu_k^2 S^0_k`.
The log-joint densities :math:`l_{ik} = \\log\\pi_k + \\log\\mathcal N(x_i;\\mu_k,\\sigma_k^2)` come from
one BLAS product of :math:`[x, x^2, 1]` with
:math:`\\sum_d x_d^2/\\sigma_{kd}^2 - 2x_d\\mu_{kd}/\\sigma_{kd}^2 + \\mu_{kd}^2/\\sigma_{kd}^2` and the
constant (by the column of ones); a compiled pass over each row then keeps the components whose
joint density is at least ``posterior_threshold`` times the row's largest, normalises their
posteriors over them (a log-sum-exp over the kept ones) and adds each kept
:math:`\\gamma_{ik}[x_i, x_i^2, 1]` to component ``k``'s statistics
(:func:`~classify_images.coding._fisher_kernels.accumulate_posterior_statistics`).

Deviation from [1]_ (which sums every posterior): posteriors below ``posterior_threshold``
(default :data:`POSTERIOR_THRESHOLD` = 10⁻⁴) times the descriptor's most likely component's are
0, the kept ones renormalised, as the development version of VLFeat's ``vl_fisher`` does with
its ``Fast`` option at 10⁻³ [5]_ (VLFeat 0.9.21, the release, skips posteriors below 10⁻⁶ and
its ``Fast`` keeps only the largest, a hard assignment).  A 64-dimensional descriptor keeps
about 11 of 256 components (on Flowers-17 and 15-Scenes; about 215 have a joint density above
:math:`e^{-80}` of the largest), so the statistics cost about 11 rather than 256 multiply-adds
of ``2D + 1`` per descriptor and the exponential runs on the kept entries only; the posteriors left out carry at most ``K · posterior_threshold`` of
the mass (docs/light-pipeline.md for the effect on accuracy).  ``posterior_threshold = 0`` keeps
every posterior above :math:`e^{-80}` of the largest (float32's smallest normal number; the
others underflow), the formulas of [1]_ to rounding, and computes the statistics by one dense
BLAS product :math:`\\gamma^\\top[x, x^2, 1]` per chunk (faster than the sparse pass when most
posteriors are kept).

The encoder computes the projection, the log-joint densities in float32 (single-precision
BLAS: twice the throughput, half the memory traffic), the posteriors and the statistics in
float64; :func:`gmm_posteriors` is the float64 version of the posteriors, every one kept (the
GMM's training).  The log-density product runs on :data:`POSTERIOR_CHUNK` descriptors at a time,
each chunk's densities used while they are still in the processor's cache.

Cost (``n`` descriptors, ``P`` their length, ``K`` components, ``D`` dimensions, ``k̄`` kept
components a descriptor): the two products take :math:`2n(PD + (2D+1)K)` floating-point
operations, 1.0 GFLOP for a 15-Scenes image at ``P = 128, D = 64, K = 256`` (13 500
descriptors); the statistics :math:`2n\\bar k(2D+1)` and the compiled pass about ``3nK``
comparisons (see docs/light-pipeline.md for the share of each).

Spatial coordinates (optional; Sánchez, Perronnin & de Campos, 2012 [3]_, §3; also
Chatfield et al. 2014 [4]_): each PCA-reduced descriptor is extended with the relative
position of its keypoint in the image,

.. math::  \\tilde x_i = \\left[x_i,\\ \\frac{u_i}{w} - \\tfrac12,\\ \\frac{v_i}{h} - \\tfrac12\\right]
           \\qquad (D + 2 \\text{ dimensions}),

``(u_i, v_i)`` the keypoint's centre in pixels (column, row) and ``w × h`` the image the
descriptors were computed on (a mirror's own coordinates for a mirror); the GMM is learnt on
the :math:`\\tilde x` of the training sample and every formula above applies to
:math:`\\tilde x` unchanged, so each Gaussian models appearance and location jointly ([3]_)
and the vector has ``2K(D + 2)`` dimensions per cell.  :func:`spatial_coordinates`
is the one function that computes the two columns, for the sample the GMM is learnt from and
for every encoded image.  Deviations from [3]_: the coordinates are appended as they are,
neither whitened nor rescaled against the descriptors, and they are added to the spatial
pyramid rather than replacing it ([3]_ proposes them as a compact alternative to the
pyramid; [4]_ uses both, with VLFeat's ``extendDescriptorsWithGeometry``).

The model (PCA and GMM) is a dict of plain arrays, ``FISHER_MODEL_KEYS``, learnt by
:func:`~classify_images.coding.codebook.learn_fisher_model` and stored in the feature
set without pickle.

References
----------
.. [1] F. Perronnin, J. Sánchez and T. Mensink, "Improving the Fisher kernel for
   large-scale image classification", ECCV 2010.
.. [2] K. Chatfield, V. Lempitsky, A. Vedaldi and A. Zisserman, "The devil is in the
   details: an evaluation of recent feature encoding methods", BMVC 2011.
.. [3] J. Sánchez, F. Perronnin and T. de Campos, "Modeling the spatial layout of images
   beyond spatial pyramids", Pattern Recognition Letters 33(16), 2012.
.. [4] K. Chatfield, K. Simonyan, A. Vedaldi and A. Zisserman, "Return of the devil in
   the details: delving deep into convolutional nets", BMVC 2014.
.. [5] A. Vedaldi and B. Fulkerson, "VLFeat: an open and portable library of computer vision
   algorithms", 2008, ``vl/fisher.c`` (``VL_FISHER_FLAG_FAST``).
"""

from __future__ import annotations

import numpy as np

from .gmm import log_joint_terms, moments
from .normalize import l2_normalize_rows, signed_sqrt

__all__ = [
    "IMPLEMENTATION_VERSION",
    "FISHER_MODEL_KEYS",
    "N_SPATIAL_COORDINATES",
    "spatial_coordinates",
    "gmm_posteriors",
    "pyramid_atoms",
    "POSTERIOR_THRESHOLD",
    "FisherEncoder",
]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 4

#: The arrays of a Fisher-vector model: PCA mean (P,) and components (D, P); GMM
#: weights (K,), means (K, D) and diagonal variances (K, D).
FISHER_MODEL_KEYS = ("pca_mean", "pca_components", "weights", "means", "variances")

#: Descriptors whose log-joint densities are computed and used at a time by
#: :meth:`FisherEncoder.encode`: 1024 × K = 256 float32 densities are 1 MiB, which stays in a
#: core's L2 cache between the product that makes them and the pass that uses them.
POSTERIOR_CHUNK = 1024

#: Default ``posterior_threshold`` of :class:`FisherEncoder`: a descriptor's posteriors below this
#: fraction of its largest are 0, the others renormalised (module docstring).
POSTERIOR_THRESHOLD = 1e-4


#: Columns :func:`spatial_coordinates` appends to each PCA-reduced descriptor.
N_SPATIAL_COORDINATES = 2


def spatial_coordinates(x: np.ndarray, y: np.ndarray, image_shape: tuple[int, int]) -> np.ndarray:
    """The relative keypoint coordinates :math:`(u/w - 1/2,\\ v/h - 1/2)` ([3]_, §3), (n, 2) float32.

    Parameters
    ----------
    x, y : ndarray (n,)
        Keypoint centres in pixels (column, row) in the image the descriptors came from.
    image_shape : (height, width)
        That image's size.
    """
    height, width = image_shape
    return np.stack(
        [np.asarray(x, dtype=np.float64) / width - 0.5, np.asarray(y, dtype=np.float64) / height - 0.5], axis=1
    ).astype(np.float32)


def _posteriors(moments: np.ndarray, terms: np.ndarray, constant: np.ndarray) -> np.ndarray:
    """Posteriors from the moments ``[x, x^2]`` (n, 2D) and the terms of
    :func:`log_joint_terms`, in the dtype of the arguments: one BLAS product, then a
    log-sum-exp per row (:func:`_normalise_log_joint`)."""
    log_joint = moments @ terms
    log_joint += constant
    return _normalise_log_joint(log_joint)


#: Log-posteriors below this (relative to the row's largest) give a posterior of exactly 0: e^-87
#: is float32's smallest normal number, and products with subnormal numbers are many times slower.
_LOG_POSTERIOR_CUT = -80.0


def _normalise_log_joint(log_joint: np.ndarray) -> np.ndarray:
    """Posteriors from log-joint densities (n, K), in place: a log-sum-exp per row (no
    underflow); posteriors below :math:`e^{-80}` times the row's largest are exactly 0."""
    log_joint -= log_joint.max(axis=1, keepdims=True)
    log_joint[log_joint < _LOG_POSTERIOR_CUT] = -np.inf
    np.exp(log_joint, out=log_joint)
    log_joint /= log_joint.sum(axis=1, keepdims=True)
    return log_joint


def gmm_posteriors(x: np.ndarray, weights: np.ndarray, means: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """Posteriors :math:`\\gamma_{ik}` of a diagonal GMM ([1]_, Eq. 3), shape (n, K), float64.

    The quadratic form by one BLAS product, normalised by log-sum-exp (no underflow).
    """
    x = np.asarray(x, dtype=np.float64)
    return _posteriors(
        moments(x),
        *log_joint_terms(
            np.asarray(weights, dtype=np.float64),
            np.asarray(means, dtype=np.float64),
            np.asarray(variances, dtype=np.float64),
        ),
    )


def pyramid_atoms(cells: np.ndarray, n_cells: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group descriptors by the cells they fall in at every level.

    Parameters
    ----------
    cells : ndarray of int (n_levels, n)
        Global cell number of each descriptor at each level.
    n_cells : int
        Total number of cells.

    Returns
    -------
    order : ndarray of int (n,)
        The descriptors sorted by atom (stable: the original order within an atom).
    bounds : ndarray of int (n_atoms + 1,)
        Atom ``a`` is ``order[bounds[a]:bounds[a + 1]]``.
    atom_cells : ndarray of int (n_levels, n_atoms)
        The cell of each atom at each level.
    """
    cells = np.atleast_2d(np.asarray(cells, dtype=np.int64))
    key = np.zeros(cells.shape[1], dtype=np.int64)
    for level_cells in cells:
        key = key * n_cells + level_cells
    _, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return order, bounds, cells[:, first]


class FisherEncoder:
    """Improved Fisher vector of the descriptors of an image over a spatial pyramid.

    Parameters
    ----------
    model : dict of ndarray
        ``FISHER_MODEL_KEYS``: PCA mean and components, GMM weights, means and variances.
    spatial_coordinates : bool
        The GMM models each PCA-reduced descriptor extended with its keypoint's relative
        coordinates (:func:`spatial_coordinates`): its means have ``D + 2`` columns for
        ``D`` PCA components, and :meth:`encode` needs the coordinates.
    posterior_threshold : float in [0, 1)
        A descriptor's posterior of a component whose joint density is below this fraction of
        the most likely component's is 0, the others renormalised (module docstring); 0 keeps
        every posterior above :math:`e^{-80}` of the largest (a dense product, slower).
    """

    #: Precision of the projection and of the log-joint densities' BLAS product.
    compute_dtype = np.float32

    def __init__(
        self,
        model: dict[str, np.ndarray],
        spatial_coordinates: bool = False,
        posterior_threshold: float = POSTERIOR_THRESHOLD,
    ) -> None:
        missing = [key for key in FISHER_MODEL_KEYS if key not in model]
        if missing:
            raise ValueError(f"Fisher-vector model lacks {', '.join(missing)}")
        self.pca_mean, self.pca_components, self.weights, self.means, self.variances = (
            np.asarray(model[key], dtype=np.float64) for key in FISHER_MODEL_KEYS
        )
        self.n_components, self.n_dims = self.means.shape
        self.spatial_coordinates = bool(spatial_coordinates)
        if not 0.0 <= posterior_threshold < 1.0:
            raise ValueError(f"posterior_threshold must be in [0, 1), got {posterior_threshold!r}")
        self.posterior_threshold = float(posterior_threshold)
        self._log_cut = self.compute_dtype(np.log(posterior_threshold)) if posterior_threshold > 0 else None
        expected = self.pca_components.shape[0] + (N_SPATIAL_COORDINATES if self.spatial_coordinates else 0)
        if self.n_dims != expected:
            raise ValueError(
                f"Fisher-vector model: the GMM has {self.n_dims} dimensions, expected {expected} "
                f"({self.pca_components.shape[0]} PCA components"
                + (" + 2 spatial coordinates)" if self.spatial_coordinates else ")")
            )
        self.std = np.sqrt(self.variances)
        dtype = self.compute_dtype
        # x = s·Pᵀ - m·Pᵀ: the mean's projection subtracted after the product.
        self._projection_t = np.ascontiguousarray(self.pca_components.T, dtype=dtype)
        self._projected_mean = (self.pca_mean @ self.pca_components.T).astype(dtype)
        terms, constant = log_joint_terms(self.weights, self.means, self.variances)
        # [x, x², 1] · [terms; constant]: the log-joint densities, constant included, by one product.
        self._augmented_terms = np.ascontiguousarray(np.concatenate([terms, constant[None, :]]), dtype=dtype)

    @property
    def cell_dimension(self) -> int:
        """Length of one cell's vector, ``2·K·D``."""
        return 2 * self.n_components * self.n_dims

    def project(self, descriptors: np.ndarray) -> np.ndarray:
        """PCA-reduced descriptors :math:`P(s - m)`, (n, D) in :attr:`compute_dtype`."""
        projected = np.asarray(descriptors, dtype=self.compute_dtype) @ self._projection_t
        projected -= self._projected_mean
        return projected

    def encode(
        self, descriptors: np.ndarray, cells: np.ndarray, n_cells: int, coordinates: np.ndarray | None = None
    ) -> np.ndarray:
        """The improved Fisher vector of every pyramid cell, concatenated and L2-normalised.

        The first three arguments are those of :meth:`~classify_images.coding.vlad.VladEncoder.encode`
        (``descriptors`` before PCA, ``(n, P)``); ``coordinates`` (n, 2), the descriptors'
        :func:`spatial_coordinates`, when the model has them (and only then).  The result is
        float32 of ``n_cells · 2 · K · D`` entries (``D`` the GMM's dimensions).
        """
        if (coordinates is not None) != self.spatial_coordinates:
            raise ValueError(
                "Fisher-vector model "
                + (
                    "needs the descriptors' spatial coordinates"
                    if self.spatial_coordinates
                    else "has no spatial coordinates"
                )
            )
        from ._fisher_kernels import accumulate_posterior_statistics

        K, D = self.n_components, self.n_dims
        order, bounds, atom_cells = pyramid_atoms(cells, n_cells)
        x = self.project(descriptors)[order]  # projected, then sorted: D columns moved, not P
        if coordinates is not None:
            x = np.concatenate([x, np.asarray(coordinates, dtype=self.compute_dtype)[order]], axis=1)
        # [x, x², 1]: the moments, and the column of ones that gives S⁰ and the constant.
        moments = np.empty((x.shape[0], 2 * D + 1), dtype=self.compute_dtype)
        moments[:, :D] = x
        np.multiply(x, x, out=moments[:, D : 2 * D])
        moments[:, 2 * D] = 1.0
        n_atoms = bounds.shape[0] - 1
        atom_statistics = np.zeros((n_atoms, K, 2 * D + 1))
        for atom in range(n_atoms):
            for start in range(bounds[atom], bounds[atom + 1], POSTERIOR_CHUNK):
                chunk = moments[start : min(start + POSTERIOR_CHUNK, bounds[atom + 1])]
                log_joint = chunk @ self._augmented_terms
                if self.posterior_threshold > 0.0:  # a few kept a row: the compiled sparse pass
                    accumulate_posterior_statistics(log_joint, chunk, self._log_cut, atom_statistics[atom])
                else:  # most kept: dense posteriors, one BLAS product
                    atom_statistics[atom] += _normalise_log_joint(log_joint).T @ chunk
        # A cell's statistics are the sums of its atoms': one product with the (cells × atoms)
        # membership matrix (each atom lies in one cell per level).
        membership = np.zeros((n_cells, n_atoms))
        for level_atoms in atom_cells:
            membership[level_atoms, np.arange(n_atoms)] = 1.0
        counts = membership @ np.diff(bounds).astype(np.float64)
        statistics = (membership @ atom_statistics.reshape(n_atoms, K * (2 * D + 1))).reshape(n_cells, K, 2 * D + 1)
        vectors = self._cell_vectors(
            counts, statistics[:, :, 2 * D :], statistics[:, :, :D], statistics[:, :, D : 2 * D]
        )
        per_cell = l2_normalize_rows(signed_sqrt(vectors))
        return l2_normalize_rows(per_cell.ravel()).astype(np.float32)

    def _cell_vectors(self, counts: np.ndarray, s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
        """``[G_μ, G_σ]`` (unnormalised) of every cell from its statistics (n_cells, K, ·);
        empty cells give zeros."""
        n = np.maximum(counts, 1.0)[:, None, None]
        grad_mean = (s1 - self.means * s0) / self.std / (n * np.sqrt(self.weights)[:, None])
        squared = (s2 - 2.0 * self.means * s1 + self.means * self.means * s0) / self.variances
        grad_std = (squared - s0) / (n * np.sqrt(2.0 * self.weights)[:, None])
        return np.concatenate([grad_mean.reshape(counts.shape[0], -1), grad_std.reshape(counts.shape[0], -1)], axis=1)
