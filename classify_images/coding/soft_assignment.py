"""Soft assignment of descriptors to k-means codewords (localized soft-assignment coding).

Hard vector quantisation gives a descriptor :math:`x` the one-hot code of its nearest
codeword.  Localized soft-assignment coding (Liu, Wang & Liu, ICCV 2011 [1]_, Eq. 5–6)
spreads it over the ``k`` nearest codewords :math:`\\mathcal N_k(x)` of the codebook
:math:`b_1, …, b_K`:

.. math::  u_j = \\frac{\\exp(-\\beta\\, \\hat d(x, b_j))}
                   {\\sum_{l \\in \\mathcal N_k(x)} \\exp(-\\beta\\, \\hat d(x, b_l))}
           \\quad (j \\in \\mathcal N_k(x)), \\qquad u_j = 0 \\text{ otherwise},

with :math:`\\hat d(x, b) = \\lVert x - b\\rVert_2^2`.  With ``k = K`` (every codeword) it
is the kernel codebook of van Gemert et al. [2]_ (its "codeword uncertainty", Eq. 8, with a
Gaussian kernel of width :math:`\\sigma^2 = 1/(2\\beta)`); with ``k = 1`` it is hard VQ,
whatever :math:`\\beta`.  Codes are non-negative and sum to one per descriptor, so
average pooling gives histograms (each non-empty cell sums to one), which the
additive-kernel classifiers (PmSVM, HIK nSVM, MBKL) accept like hard-VQ histograms.

**The scale of β (a deviation from the paper).**  :math:`\\beta` has units of
1/distance²; [1]_ sets it by hand for its descriptors (unit-norm SIFT).  Our descriptors
are not unit-norm (low-contrast patches keep a small norm; RootSIFT changes the scale), so
β is given *relative to the codebook*:

.. math::  \\beta = \\beta_{\\text{rel}} / s^2,\\qquad
           s^2 = \\frac1K \\sum_{k=1}^{K} \\min_{l \\ne k} \\lVert b_k - b_l\\rVert_2^2,

the mean squared distance from a codeword to its nearest other codeword.  It is a
function of the codebook alone, so it needs no storage beyond the codebook and the same
codebook always gives the same codes (in feature sets, model files and ``predict``).
``codebook.soft_beta`` is :math:`\\beta_{\\text{rel}}`, ``codebook.soft_neighbors`` is ``k``.

**Pooling soft codes.**  Per-descriptor codes are not stored (``n · k`` floats per image,
too many at dense grids); an image's cached item is, per pyramid cell :math:`c` with
:math:`M_c` descriptors, the statistics the pooling needs (:func:`cell_statistics`): the
sums :math:`S_c = \\sum_{i \\in c} u_i` and :math:`Q_c = \\sum_{i \\in c} u_i^2` for
``average`` / ``abs`` / ``sqrt`` pooling, or the maxima for ``max`` / ``signed_max``.
:func:`pool_cell_statistics` then gives exactly the pooling functions of
:mod:`~classify_images.coding.pooling` applied to the codes:

* ``average`` (= ``abs``, the codes being non-negative): :math:`z_c = S_c / M_c`, the soft
  histogram of the cell;
* ``sqrt``: :math:`z_c = \\sqrt{Q_c / M_c}`, the root mean *square* of the codes — the
  pooling module's definition.  For hard VQ (:math:`u_{ij} \\in \\{0, 1\\}`) it is the
  square root of the histogram (power normalisation, exponent ½); for soft codes it is
  *not* :math:`\\sqrt{S_c / M_c}`: it lies between the histogram and its square root
  (:math:`S_c/M_c \\le \\sqrt{Q_c/M_c} \\le \\sqrt{S_c/M_c}`, as :math:`u^2 \\le u`),
  weighting each descriptor's strongest assignments more;
* ``max`` (= ``signed_max``): :math:`z_{cj} = \\max_{i \\in c} u_{ij}` ([1]_'s pooling).

An empty cell pools to zeros.  Per-level normalisation and level weights follow
(:func:`~classify_images.coding.pooling.weight_pyramid_levels`).

Speed: the ``k`` nearest codewords come from the hard-VQ distance blocks
(:func:`~classify_images.coding.encode.half_sq_distance_blocks`, float32 BLAS) and LLC's
one-pass selection kernel (:func:`~classify_images.coding._llc_kernels.k_smallest`); the
weights and the per-cell sums are numba loops (:mod:`._soft_assignment_kernels`) over
blocks of descriptors, so the ``n × K`` code matrix is never formed.

References
----------
.. [1] L. Liu, L. Wang and X. Liu, "In defense of soft-assignment coding", ICCV 2011.
.. [2] J. C. van Gemert, C. J. Veenman, A. W. M. Smeulders and J.-M. Geusebroek,
   "Visual word ambiguity", IEEE TPAMI 32(7), 2010.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from ._llc_kernels import k_smallest
from ._soft_assignment_kernels import accumulate_cells, soft_weights
from .encode import half_sq_distance_blocks

__all__ = [
    "IMPLEMENTATION_VERSION",
    "ASSIGNMENTS",
    "DEFAULT_N_NEIGHBORS",
    "DEFAULT_BETA",
    "POOLING_STATISTICS",
    "codebook_scale",
    "nearest_sq_distances",
    "soft_assignment_codes",
    "cell_statistics",
    "cell_statistics_of_neighbors",
    "pool_cell_statistics",
    "SoftAssignmentCoder",
]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces (its defaults included): it is part of the stage-cache keys and of
#: the feature sets' config hash of soft-assignment configurations.
IMPLEMENTATION_VERSION = 1

#: ``codebook.assignment`` of a k-means codebook: one-hot codes, or soft assignment.
ASSIGNMENTS = ("hard", "soft")

#: ``k``, the nearest codewords a descriptor is spread over (unset ``codebook.soft_neighbors``;
#: chosen on training images only, docs/benchmarks/hik-setting.md, "Soft assignment at the HIK setting").
DEFAULT_N_NEIGHBORS = 3
#: :math:`\\beta_{\\text{rel}}` (unset ``codebook.soft_beta``; chosen likewise).
DEFAULT_BETA = 10.0

#: The per-cell statistics each pooling method needs: first and second moments, or maxima.
POOLING_STATISTICS = {"average": "moments", "abs": "moments", "sqrt": "moments", "max": "max", "signed_max": "max"}


def codebook_scale(codebook: np.ndarray) -> float:
    """:math:`s^2`, the mean squared distance from a codeword to its nearest other codeword.

    Parameters
    ----------
    codebook : ndarray (K, d), K ≥ 2

    Returns
    -------
    float
        Positive (ValueError when all codewords coincide).
    """
    words = np.asarray(codebook, dtype=np.float64)
    if words.shape[0] < 2:
        raise ValueError("soft assignment needs a codebook of at least 2 words")
    sq_norms = np.einsum("kd,kd->k", words, words)
    sq_distances = sq_norms[:, None] + sq_norms[None, :] - 2.0 * (words @ words.T)
    np.fill_diagonal(sq_distances, np.inf)
    scale = float(np.maximum(sq_distances.min(axis=1), 0.0).mean())
    if not scale > 0:
        raise ValueError("the codewords all coincide: soft assignment has no distance scale")
    return scale


def nearest_sq_distances(
    descriptors: np.ndarray, codebook: np.ndarray, n_neighbors: int
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """The ``k`` nearest codewords of every descriptor and their squared distances, by blocks.

    Yields ``(start, neighbors, sq_distances)`` for the descriptors ``start …``:
    ``neighbors`` (m, k) int64, nearest first, ties to the smaller index (as
    :func:`~classify_images.coding.encode.vq_encode`, so ``neighbors[:, 0]`` is the hard-VQ
    index); ``sq_distances`` (m, k) float32, :math:`\\lVert x - b\\rVert^2 - \\lVert x\\rVert^2`
    (the per-descriptor constant :math:`\\lVert x\\rVert^2` cancels in the weights).
    With ``k = K`` every codeword is kept, in index order.
    """
    n_words = np.shape(codebook)[0]
    if not 1 <= n_neighbors <= n_words:
        raise ValueError(f"n_neighbors must be in [1, {n_words}] (the codebook size), got {n_neighbors}")
    for start, half in half_sq_distance_blocks(descriptors, codebook):
        if n_neighbors == n_words:
            neighbors = np.broadcast_to(np.arange(n_words, dtype=np.int64), half.shape)
        else:
            neighbors = k_smallest(half, n_neighbors)
        yield start, np.ascontiguousarray(neighbors), 2.0 * np.take_along_axis(half, neighbors, axis=1)


def soft_assignment_codes(
    descriptors: np.ndarray, codebook: np.ndarray, n_neighbors: int = DEFAULT_N_NEIGHBORS, beta: float = DEFAULT_BETA
) -> sp.csr_matrix:
    """Localized soft-assignment codes ([1]_ Eq. 5–6) as a sparse matrix.

    Parameters
    ----------
    descriptors : ndarray (n, d)
    codebook : ndarray (K, d)
        k-means centres as rows.
    n_neighbors : int
        ``k``, codewords per code (``K``: the kernel codebook [2]_).
    beta : float
        :math:`\\beta` in 1/distance² (absolute; :class:`SoftAssignmentCoder` takes it
        relative to :func:`codebook_scale`).

    Returns
    -------
    codes : csr_matrix of float32, shape (n, K)
        ``k`` non-negative entries per row summing to one, in index order.
    """
    n = np.shape(descriptors)[0]
    neighbors = np.empty((n, n_neighbors), dtype=np.int64)
    weights = np.empty((n, n_neighbors), dtype=np.float64)
    for start, block_neighbors, sq_distances in nearest_sq_distances(descriptors, codebook, n_neighbors):
        block_weights = soft_weights(sq_distances, float(beta))
        rows = slice(start, start + block_neighbors.shape[0])
        order = np.argsort(block_neighbors, axis=1)
        neighbors[rows] = np.take_along_axis(block_neighbors, order, axis=1)
        weights[rows] = np.take_along_axis(block_weights, order, axis=1)
    indptr = np.arange(0, n * n_neighbors + 1, n_neighbors, dtype=np.int64)
    return sp.csr_matrix(
        (weights.astype(np.float32).ravel(), neighbors.ravel(), indptr), shape=(n, np.shape(codebook)[0])
    )


def _statistics_arrays(n_cells: int, n_words: int, statistics: str) -> dict[str, np.ndarray]:
    if statistics not in ("moments", "max"):
        raise ValueError(f"statistics must be 'moments' or 'max', not {statistics!r}")
    names = ("sums", "sums_of_squares") if statistics == "moments" else ("maxima",)
    return {name: np.zeros((n_cells, n_words), dtype=np.float64) for name in names}


def _accumulate(
    arrays: dict[str, np.ndarray], neighbors: np.ndarray, sq_distances: np.ndarray, cells: np.ndarray, beta: float
) -> None:
    weights = soft_weights(np.ascontiguousarray(sq_distances), float(beta))
    neighbors = np.ascontiguousarray(neighbors, dtype=np.int64)
    cells = np.ascontiguousarray(cells, dtype=np.int64)
    if "maxima" in arrays:
        accumulate_cells(neighbors, weights, cells, arrays["maxima"], arrays["maxima"], True)
    else:
        accumulate_cells(neighbors, weights, cells, arrays["sums"], arrays["sums_of_squares"], False)


def _finish(arrays: dict[str, np.ndarray], cells: np.ndarray, n_cells: int) -> dict[str, np.ndarray]:
    out = {name: array.astype(np.float32) for name, array in arrays.items()}
    out["counts"] = np.bincount(np.asarray(cells, dtype=np.int64).ravel(), minlength=n_cells).astype(np.int64)
    return out


def cell_statistics(
    descriptors: np.ndarray,
    cells: np.ndarray,
    n_cells: int,
    codebook: np.ndarray,
    n_neighbors: int,
    beta: float,
    statistics: str = "moments",
) -> dict[str, np.ndarray]:
    """Per-pyramid-cell statistics of the soft codes of one image (module docstring).

    Parameters
    ----------
    descriptors : ndarray (n, d)
    cells : ndarray of int (n_levels, n)
        Cell of every descriptor at every level
        (:func:`~classify_images.coding.pooling.pyramid_cells`).
    n_cells : int
    codebook : ndarray (K, d)
    n_neighbors, beta
        As :func:`soft_assignment_codes` (β absolute).
    statistics : {"moments", "max"}
        :data:`POOLING_STATISTICS` of the pooling method.

    Returns
    -------
    dict of ndarray
        ``counts`` (n_cells,) int64 :math:`M_c`, and ``sums``, ``sums_of_squares`` (n_cells, K)
        float32 (``"moments"``) or ``maxima`` (n_cells, K) float32 (``"max"``).
    """
    arrays = _statistics_arrays(n_cells, np.shape(codebook)[0], statistics)
    for start, neighbors, sq_distances in nearest_sq_distances(descriptors, codebook, n_neighbors):
        _accumulate(arrays, neighbors, sq_distances, cells[:, start : start + neighbors.shape[0]], beta)
    return _finish(arrays, cells, n_cells)


def cell_statistics_of_neighbors(
    neighbors: np.ndarray,
    sq_distances: np.ndarray,
    cells: np.ndarray,
    n_cells: int,
    n_words: int,
    beta: float,
    statistics: str = "moments",
) -> dict[str, np.ndarray]:
    """:func:`cell_statistics` from nearest codewords already found (:func:`nearest_sq_distances`).

    The first ``k`` columns of the ``k_max`` nearest are the ``k`` nearest, so one search
    serves every ``k ≤ k_max`` (parameter studies).
    """
    arrays = _statistics_arrays(n_cells, n_words, statistics)
    _accumulate(arrays, neighbors, sq_distances, cells, beta)
    return _finish(arrays, cells, n_cells)


def pool_cell_statistics(statistics: dict[str, np.ndarray], method: str) -> np.ndarray:
    """The pooled vector (float32, cells concatenated) of :func:`cell_statistics`' output.

    ``average`` / ``abs``: :math:`S_c / M_c`; ``sqrt``: :math:`\\sqrt{Q_c / M_c}`;
    ``max`` / ``signed_max``: the maxima; empty cells give zeros.
    """
    needed = POOLING_STATISTICS.get(method)
    if needed is None:
        raise ValueError(f"pooling method {method!r} is not one of {tuple(POOLING_STATISTICS)}")
    if needed == "max":
        if "maxima" not in statistics:
            raise ValueError(f"pooling method {method!r} needs the cells' maxima")
        return np.asarray(statistics["maxima"], dtype=np.float32).ravel()
    if "sums" not in statistics:
        raise ValueError(f"pooling method {method!r} needs the cells' sums")
    counts = np.maximum(np.asarray(statistics["counts"], dtype=np.float64), 1.0)[:, None]
    if method == "sqrt":
        pooled = np.sqrt(np.asarray(statistics["sums_of_squares"], dtype=np.float64) / counts)
    else:
        pooled = np.asarray(statistics["sums"], dtype=np.float64) / counts
    return pooled.astype(np.float32).ravel()


class SoftAssignmentCoder:
    """Soft assignment over a fixed k-means codebook, β relative to :func:`codebook_scale`.

    Parameters
    ----------
    codebook : ndarray (K, d)
    n_neighbors : int
        ``k`` (at most ``K``).
    beta_relative : float
        :math:`\\beta_{\\text{rel}} > 0`; the coder uses :math:`\\beta = \\beta_{\\text{rel}} / s^2`.

    Attributes
    ----------
    scale : float
        :math:`s^2` of the codebook.
    beta : float
        The absolute :math:`\\beta`.
    """

    def __init__(
        self, codebook: np.ndarray, n_neighbors: int = DEFAULT_N_NEIGHBORS, beta_relative: float = DEFAULT_BETA
    ) -> None:
        self.codebook = np.ascontiguousarray(codebook, dtype=np.float32)
        if not 1 <= int(n_neighbors) <= self.codebook.shape[0]:
            raise ValueError(
                f"n_neighbors must be in [1, {self.codebook.shape[0]}] (the codebook size), got {n_neighbors}"
            )
        if not (np.isfinite(beta_relative) and beta_relative > 0):
            raise ValueError(f"beta_relative must be a finite number > 0, got {beta_relative!r}")
        self.n_neighbors = int(n_neighbors)
        self.scale = codebook_scale(self.codebook)
        self.beta = float(beta_relative) / self.scale

    def encode(self, descriptors: np.ndarray) -> sp.csr_matrix:
        """Soft codes, CSR float32 of shape (n, K)."""
        return soft_assignment_codes(descriptors, self.codebook, self.n_neighbors, self.beta)

    def cell_statistics(
        self, descriptors: np.ndarray, cells: np.ndarray, n_cells: int, statistics: str = "moments"
    ) -> dict[str, np.ndarray]:
        """:func:`cell_statistics` with this coder's codebook, ``k`` and β."""
        return cell_statistics(descriptors, cells, n_cells, self.codebook, self.n_neighbors, self.beta, statistics)
