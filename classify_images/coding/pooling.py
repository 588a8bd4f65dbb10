"""Spatial-pyramid pooling of codes (Lazebnik et al. 2006; ScSPM, Yang et al. 2009).

The image is divided at level ``L`` into an ``L × L`` grid of cells; with the
default levels (1, 2, 4) that is 1 + 4 + 16 = 21 cells.  A level may also be a
non-square grid written ``"RxC"`` (``R`` rows, ``C`` columns): ``"3x1"`` is the three
horizontal strips of the Fisher-vector pyramid 1×1 + 2×2 + 3×1 (Perronnin, Sánchez &
Mensink 2010 [1]_, §4.1).  Within each cell the
codes :math:`u_i` (rows of the code matrix :math:`U`) of the descriptors whose
centre lies in the cell are pooled, and the cell vectors are concatenated
(level by level, cells row-major) into a vector of ``21·K`` dimensions.

Pooling functions (ScSPM §3.2 and its Table 6), over the ``M`` codes of a cell:

``average``  :math:`z = \\frac1M\\sum_i u_i` — with one-hot VQ codes, the
             normalised BoF histogram of the cell.
``max``      :math:`z_j = \\max_i |u_{ij}|` (ScSPM Eq. 5).
``sqrt``     :math:`z_j = \\sqrt{\\frac1M\\sum_i u_{ij}^2}`.
``abs``      :math:`z_j = \\frac1M\\sum_i |u_{ij}|`.
``signed_max`` :math:`z_j = \\max_i u_{ij}` — the max of the signed codes, entries
             outside a code's support counting as 0: LLC's pooling (Wang et al.
             2010 [2]_, Eq. 5 as in the authors' released ``LLC_pooling.m``).

An empty cell pools to zeros.  Codes are given either as VQ indices (int
array) or as a dense / CSR matrix.

Per-level normalisation and level weights (:func:`weight_pyramid_levels`), applied to
the pooled vector before the normalisation of the whole vector
(:mod:`~classify_images.coding.normalize`): writing :math:`z_\\ell` for the block of
level :math:`\\ell` (its cells concatenated),

.. math:: z_\\ell \\leftarrow w_\\ell \\, \\frac{z_\\ell}{\\lVert z_\\ell\\rVert}

with the ℓ1 or ℓ2 norm (or no division), and weights :math:`w_\\ell` (default 1).  With
average-pooled VQ codes every non-empty cell sums to one, so the whole-vector ℓ1 alone
gives every *cell* the same mass and a level the share of its cells (1/21, 4/21, 16/21
for levels 1, 2, 4); per-level ℓ1 gives every *level* the same mass, as the count
histograms of Lazebnik et al. [3]_ and VLFeat's ``phow`` do once the whole vector is
ℓ1-normalised.  With per-level ℓ1 and the weights :math:`w_\\ell = 2^{-L}` for the
coarsest level and :math:`2^{-(L-\\ell+1)}` for the others (¼, ¼, ½ for three levels),
the intersection kernel of two such vectors is the pyramid match kernel of [3]_, Eq. (3).

References
----------
.. [1] F. Perronnin, J. Sánchez and T. Mensink, "Improving the Fisher kernel for
   large-scale image classification", ECCV 2010.
.. [2] J. Wang, J. Yang, K. Yu, F. Lv, T. Huang and Y. Gong, "Locality-constrained
   linear coding for image classification", CVPR 2010.
.. [3] S. Lazebnik, C. Schmid and J. Ponce, "Beyond bags of features: spatial pyramid
   matching for recognizing natural scene categories", CVPR 2006.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ._pooling_kernels import max_abs_pool_csr

__all__ = [
    "IMPLEMENTATION_VERSION",
    "LEVEL_NORMALIZATIONS",
    "POOLING_METHODS",
    "pyramid_grids",
    "validate_levels",
    "n_pyramid_cells",
    "pyramid_cells",
    "spatial_pyramid_pool",
    "pooled_dimension",
    "validate_level_weights",
    "weight_pyramid_levels",
]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 1


POOLING_METHODS = ("average", "max", "sqrt", "abs", "signed_max")

#: Normalisations of each pyramid level's block on its own (:func:`weight_pyramid_levels`).
LEVEL_NORMALIZATIONS = ("none", "l1", "l2")

#: A pyramid level: ``L`` (an ``L × L`` grid) or ``"RxC"`` (``R`` rows, ``C`` columns).
Level = int | str


#: Largest number of rows or columns of a pyramid level (a guard against runaway configs:
#: 32 × 32 cells of 4-pixel bins is already finer than a dense-SIFT grid).
MAX_PYRAMID_LEVEL = 32
_LEVELS_RULE = (
    f"expected a non-empty list of integers ≥ 1 and ≤ {MAX_PYRAMID_LEVEL} (L × L cells) "
    'or "RxC" strings (R rows, C columns, e.g. "3x1")'
)


def _grid(level: Level) -> tuple[int, int]:
    if isinstance(level, int) and not isinstance(level, bool) and 1 <= level <= MAX_PYRAMID_LEVEL:
        return level, level
    if isinstance(level, str):
        parts = level.lower().replace("×", "x").split("x")
        if len(parts) == 2 and all(p.strip().isdigit() and 1 <= int(p) <= MAX_PYRAMID_LEVEL for p in parts):
            return int(parts[0]), int(parts[1])
    raise ValueError(f"{_LEVELS_RULE}; got the level {level!r}")


def pyramid_grids(levels: Sequence[Level]) -> list[tuple[int, int]]:
    """``(rows, columns)`` of every level: ``L`` → ``(L, L)``, ``"RxC"`` → ``(R, C)``."""
    return [_grid(level) for level in levels]


def validate_levels(levels: Sequence[Level] | Level) -> tuple[Level, ...]:
    """The levels as a tuple, each an integer ≥ 1 or an ``"RxC"`` string (ValueError otherwise)."""
    if isinstance(levels, (int, str)) and not isinstance(levels, bool):
        levels = [levels]
    if not isinstance(levels, (list, tuple)) or not levels:
        raise ValueError(_LEVELS_RULE)
    pyramid_grids(levels)
    return tuple(levels)


def n_pyramid_cells(levels: Sequence[Level]) -> int:
    """Number of cells of the pyramid: ``Σ R·C`` over its levels."""
    return int(sum(rows * cols for rows, cols in pyramid_grids(levels)))


def pooled_dimension(n_words: int, levels: Sequence[Level]) -> int:
    """Length of the pooled vector: ``n_words · Σ_L L²`` (``n_words · Σ R·C`` in general)."""
    return int(n_words * n_pyramid_cells(levels))


def pyramid_cells(x: np.ndarray, y: np.ndarray, image_shape: tuple[int, int], levels: Sequence[Level]) -> np.ndarray:
    """Cell index of every descriptor at every pyramid level.

    Parameters
    ----------
    x, y : ndarray (n,)
        Descriptor centres in pixels (column, row).
    image_shape : (height, width)
    levels : sequence of int or "RxC"
        Grid sizes, e.g. (1, 2, 4) or (1, 2, "3x1").

    Returns
    -------
    cells : ndarray of int32, shape (len(levels), n)
        Global cell number (``offset(level) + row·C + col``) of each descriptor.
    """
    height, width = image_shape
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    cells = np.empty((len(levels), x.shape[0]), dtype=np.int32)
    offset = 0
    for row, (n_rows, n_cols) in enumerate(pyramid_grids(levels)):
        col_bin = np.clip((x * n_cols / width).astype(np.int64), 0, n_cols - 1)
        row_bin = np.clip((y * n_rows / height).astype(np.int64), 0, n_rows - 1)
        cells[row] = offset + row_bin * n_cols + col_bin
        offset += n_rows * n_cols
    return cells


def spatial_pyramid_pool(
    codes: np.ndarray | sp.spmatrix,
    x: np.ndarray,
    y: np.ndarray,
    image_shape: tuple[int, int],
    n_words: int,
    levels: Sequence[Level] = (1, 2, 4),
    method: str = "average",
) -> np.ndarray:
    """Pool the codes of one image over a spatial pyramid.

    Parameters
    ----------
    codes : ndarray of int (n,) — VQ indices — or matrix (n, n_words), dense or sparse
    x, y : ndarray (n,)
        Descriptor centres.
    image_shape : (height, width)
    n_words : int
        Codebook size ``K``.
    levels : sequence of int or "RxC"
        Pyramid grid sizes.
    method : {"average", "max", "sqrt", "abs", "signed_max"}

    Returns
    -------
    z : ndarray of float32, shape (K · Σ L²,)
    """
    if method not in POOLING_METHODS:
        raise ValueError(f"pooling method {method!r} is not one of {POOLING_METHODS}")
    n_cells = n_pyramid_cells(levels)
    cells = pyramid_cells(x, y, image_shape, levels)
    counts = np.bincount(cells.ravel(), minlength=n_cells).astype(np.float64)
    safe_counts = np.maximum(counts, 1.0)[:, None]
    codes_array = np.asarray(codes) if not sp.issparse(codes) else None

    if codes_array is not None and codes_array.ndim == 1:  # VQ indices: one-hot codes
        if method in ("max", "signed_max"):
            pooled = np.zeros(n_cells * n_words, dtype=np.float64)
            pooled[(cells * n_words + codes_array.astype(np.int64)).ravel()] = 1.0
            return pooled.astype(np.float32)
        flat = (cells.astype(np.int64) * n_words + codes_array.astype(np.int64)).ravel()
        pooled = np.bincount(flat, minlength=n_cells * n_words).reshape(n_cells, n_words)
        pooled = pooled / safe_counts
        if method == "sqrt":
            pooled = np.sqrt(pooled)
        return pooled.astype(np.float32).ravel()

    if method == "max":
        # in the codes' own dtype, straight into float32: rounding is monotonic, so the
        # float32 of the maximum is the maximum of the float32 values
        matrix = sp.csr_matrix(codes)
        pooled = np.zeros((n_cells, n_words), dtype=np.float32)
        max_abs_pool_csr(matrix.data, matrix.indices, matrix.indptr, cells, pooled)
        return pooled.ravel()
    matrix = sp.csr_matrix(codes, dtype=np.float64)
    if method == "signed_max":
        return _signed_max_pool(matrix, cells, counts, n_cells, n_words)
    if method == "sqrt":
        values = matrix.multiply(matrix)
    elif method == "abs":
        values = abs(matrix)
    else:
        values = matrix
    pooled = np.zeros((n_cells, n_words), dtype=np.float64)
    for level_cells in cells:
        assign = sp.csr_matrix(
            (np.ones(level_cells.shape[0]), (level_cells, np.arange(level_cells.shape[0]))),
            shape=(n_cells, level_cells.shape[0]),
        )
        pooled += np.asarray((assign @ values).todense())
    pooled /= safe_counts
    if method == "sqrt":
        pooled = np.sqrt(pooled)
    return pooled.astype(np.float32).ravel()


def _signed_max_pool(
    matrix: sp.csr_matrix, cells: np.ndarray, counts: np.ndarray, n_cells: int, n_words: int
) -> np.ndarray:
    """:math:`z_j = \\max_i u_{ij}` per cell, a code's implicit zeros included; empty cells 0."""
    coo = matrix.tocoo()
    pooled = np.full((n_cells, n_words), -np.inf)
    stored = np.zeros((n_cells, n_words), dtype=np.int64)
    for level_cells in cells:
        where = (level_cells[coo.row], coo.col)
        np.maximum.at(pooled, where, coo.data)
        np.add.at(stored, where, 1)
    # A cell where some descriptor does not use word j holds a zero for j.
    has_zero = stored < counts[:, None]
    pooled[has_zero] = np.maximum(pooled[has_zero], 0.0)
    pooled[counts == 0] = 0.0
    return pooled.astype(np.float32).ravel()


def validate_level_weights(weights: Sequence[float] | None) -> tuple[float, ...] | None:
    """The level weights as a tuple of finite positive floats, or None (ValueError otherwise)."""
    if weights is None:
        return None
    rule = "expected a non-empty list of finite numbers > 0, one per pyramid level"
    if not isinstance(weights, (list, tuple)) or not weights:
        raise ValueError(rule)
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not np.isfinite(weight) or weight <= 0:
            raise ValueError(f"{rule}; got {weight!r}")
    return tuple(float(weight) for weight in weights)


def weight_pyramid_levels(
    pooled: np.ndarray,
    cell_dimension: int,
    levels: Sequence[Level],
    normalization: str = "none",
    weights: Sequence[float] | None = None,
) -> np.ndarray:
    """Normalise each pyramid level's block on its own, then weight it.

    :math:`z_\\ell \\leftarrow w_\\ell\\, z_\\ell / \\lVert z_\\ell\\rVert` for every
    level :math:`\\ell` (module docstring; Lazebnik et al. [3]_, Eq. 3, for the weights).
    A block that is all zeros stays zero.

    Parameters
    ----------
    pooled : ndarray, shape (d,) or (n, d)
        Pooled vectors, ``d = cell_dimension · Σ R·C``, levels in the order of ``levels``.
    cell_dimension : int
        Length of one cell's vector (``K`` for pooled codes).
    levels : sequence of int or "RxC"
        The pyramid the vectors were pooled over.
    normalization : {"none", "l1", "l2"}
        Norm each level's block is divided by (norms summed in float64).
    weights : sequence of float, optional
        One positive weight per level (default: all 1).

    Returns
    -------
    z : ndarray of float32, the shape of ``pooled``
    """
    if normalization not in LEVEL_NORMALIZATIONS:
        raise ValueError(f"level normalisation {normalization!r} is not one of {LEVEL_NORMALIZATIONS}")
    sizes = [cell_dimension * rows * cols for rows, cols in pyramid_grids(levels)]
    weights = validate_level_weights(weights)
    if weights is not None and len(weights) != len(sizes):
        raise ValueError(f"{len(weights)} level weights for {len(sizes)} pyramid levels")
    X = np.asarray(pooled)
    rows = np.atleast_2d(X).astype(np.float64)
    if rows.shape[1] != sum(sizes):
        raise ValueError(f"pooled vectors of length {rows.shape[1]}, expected {sum(sizes)} for these levels")
    scale = np.ones((rows.shape[0], len(sizes)))
    if normalization != "none":
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        values = np.abs(rows) if normalization == "l1" else rows * rows
        norms = np.add.reduceat(values, starts, axis=1)
        norms = norms if normalization == "l1" else np.sqrt(norms)
        scale = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 1.0)
    if weights is not None:
        scale = scale * np.asarray(weights)
    out = (rows * np.repeat(scale, sizes, axis=1)).astype(np.float32)
    return out.reshape(X.shape)
