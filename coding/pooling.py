"""Spatial-pyramid pooling of codes (Lazebnik et al. 2006; ScSPM, Yang et al. 2009).

The image is divided at level ``L`` into an ``L × L`` grid of cells; with the
default levels (1, 2, 4) that is 1 + 4 + 16 = 21 cells.  Within each cell the
codes :math:`u_i` (rows of the code matrix :math:`U`) of the descriptors whose
centre lies in the cell are pooled, and the cell vectors are concatenated
(level by level, cells row-major) into a vector of ``21·K`` dimensions.

Pooling functions (ScSPM §3.2 and its Table 6), over the ``M`` codes of a cell:

``average``  :math:`z = \\frac1M\\sum_i u_i` — with one-hot VQ codes, the
             normalised BoF histogram of the cell.
``max``      :math:`z_j = \\max_i |u_{ij}|` (ScSPM Eq. 5).
``sqrt``     :math:`z_j = \\sqrt{\\frac1M\\sum_i u_{ij}^2}`.
``abs``      :math:`z_j = \\frac1M\\sum_i |u_{ij}|`.

An empty cell pools to zeros.  Codes are given either as VQ indices (int
array) or as a dense / CSR matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["IMPLEMENTATION_VERSION", "POOLING_METHODS", "pyramid_cells", "spatial_pyramid_pool", "pooled_dimension"]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 1


POOLING_METHODS = ("average", "max", "sqrt", "abs")


def pooled_dimension(n_words: int, levels: Sequence[int]) -> int:
    """Length of the pooled vector: ``n_words · Σ_L L²``."""
    return int(n_words * sum(level * level for level in levels))


def pyramid_cells(
    x: np.ndarray, y: np.ndarray, image_shape: tuple[int, int], levels: Sequence[int]
) -> np.ndarray:
    """Cell index of every descriptor at every pyramid level.

    Parameters
    ----------
    x, y : ndarray (n,)
        Descriptor centres in pixels (column, row).
    image_shape : (height, width)
    levels : sequence of int
        Grid sizes, e.g. (1, 2, 4).

    Returns
    -------
    cells : ndarray of int32, shape (len(levels), n)
        Global cell number (``offset(level) + row·L + col``) of each descriptor.
    """
    height, width = image_shape
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    cells = np.empty((len(levels), x.shape[0]), dtype=np.int32)
    offset = 0
    for row, level in enumerate(levels):
        col_bin = np.clip((x * level / width).astype(np.int64), 0, level - 1)
        row_bin = np.clip((y * level / height).astype(np.int64), 0, level - 1)
        cells[row] = offset + row_bin * level + col_bin
        offset += level * level
    return cells


def spatial_pyramid_pool(
    codes: np.ndarray | sp.spmatrix,
    x: np.ndarray,
    y: np.ndarray,
    image_shape: tuple[int, int],
    n_words: int,
    levels: Sequence[int] = (1, 2, 4),
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
    levels : sequence of int
        Pyramid grid sizes.
    method : {"average", "max", "sqrt", "abs"}

    Returns
    -------
    z : ndarray of float32, shape (K · Σ L²,)
    """
    if method not in POOLING_METHODS:
        raise ValueError(f"pooling method {method!r} is not one of {POOLING_METHODS}")
    n_cells = sum(level * level for level in levels)
    cells = pyramid_cells(x, y, image_shape, levels)
    counts = np.bincount(cells.ravel(), minlength=n_cells).astype(np.float64)
    safe_counts = np.maximum(counts, 1.0)[:, None]
    codes_array = np.asarray(codes) if not sp.issparse(codes) else None

    if codes_array is not None and codes_array.ndim == 1:  # VQ indices: one-hot codes
        if method == "max":
            pooled = np.zeros(n_cells * n_words, dtype=np.float64)
            pooled[(cells * n_words + codes_array.astype(np.int64)).ravel()] = 1.0
            return pooled.astype(np.float32)
        flat = (cells.astype(np.int64) * n_words + codes_array.astype(np.int64)).ravel()
        pooled = np.bincount(flat, minlength=n_cells * n_words).reshape(n_cells, n_words)
        pooled = pooled / safe_counts
        if method == "sqrt":
            pooled = np.sqrt(pooled)
        return pooled.astype(np.float32).ravel()

    matrix = sp.csr_matrix(codes, dtype=np.float64)
    if method == "max":
        magnitude = abs(matrix).tocoo()
        pooled = np.zeros((n_cells, n_words), dtype=np.float64)
        for level_cells in cells:
            np.maximum.at(pooled, (level_cells[magnitude.row], magnitude.col), magnitude.data)
        return pooled.astype(np.float32).ravel()
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
