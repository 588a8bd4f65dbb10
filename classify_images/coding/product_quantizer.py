"""Compressed row codecs: float16, and product quantisation of signed dense vectors.

A Fisher-vector row of 262 144 float32 takes 1 MB.  Sánchez & Perronnin [1]_ store such
signatures compressed and decompress them on the fly while training a linear SVM:

* ``float16`` halves the bytes (IEEE half precision, 11 significant bits; a row of
  unit L2 norm has entries far inside its range, ``|x| <= 1 < 65504``).
* Product quantisation (PQ) [1]_ [2]_ cuts a row of ``d`` dimensions into ``m = ceil(d / s)``
  sub-vectors of ``s`` consecutive dimensions (the last one padded with zeros), learns one
  codebook of ``K = 256`` centroids per sub-vector position by k-means on training rows,
  and stores for each sub-vector the index of its nearest centroid — one byte:

  .. math::

      q_j(x) = \\arg\\min_{k < K} \\| x_{[j]} - c_{jk} \\|_2^2, \\qquad
      \\hat x = [\\, c_{1 q_1(x)}, \\dots, c_{m q_m(x)} \\,]       \\qquad ([1]_, Sec. 3.2)

  so a row costs ``m`` bytes instead of ``4 d``: ``s = 8`` is 32 times smaller, ``s = 16``
  64 times.  The codebooks take ``m K s`` float32 (the size of 256 rows), once per feature set.

The k-means runs Lloyd's iterations [3]_ on every sub-vector position, with compiled kernels
(:mod:`._pq_kernels`) that read the rows in place: the nearest centroid minimises
``||c||^2 - 2 x^T c`` (``||x||^2`` is the same for all), then each centroid becomes the mean
of its sub-vectors; centroids start at ``K`` distinct training rows drawn with
a seed (the same rows for every position), an empty cluster keeps its centroid.
Encoding uses the same distances; decoding is a table look-up.

References
----------
.. [1] J. Sánchez and F. Perronnin, "High-dimensional signature compression for
   large-scale image classification", CVPR 2011.
.. [2] H. Jégou, M. Douze and C. Schmid, "Product quantization for nearest neighbor
   search", IEEE TPAMI 33(1), 2011.
.. [3] S. Lloyd, "Least squares quantization in PCM", IEEE Trans. Inf. Theory 28(2), 1982.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ClassifyImagesError
from ._pq_kernels import centroid_sums, nearest_centroids

__all__ = ["ROW_ENCODINGS", "RowCodecError", "ProductQuantizer", "to_float16", "pq_sub_dim"]

#: The stored forms of dense rows: float32 (as computed), float16, PQ with 8 or 16 dimensions per byte.
ROW_ENCODINGS = ("float32", "float16", "pq8", "pq16")
#: Centroids per sub-vector codebook (one byte per code).
N_CENTROIDS = 256


class RowCodecError(ClassifyImagesError, ValueError):
    """Rows that the chosen encoding cannot hold, or codebooks that do not fit the rows (one line)."""


def pq_sub_dim(encoding: str) -> int:
    """Dimensions per byte of a ``pqS`` encoding (``"pq8"`` -> 8)."""
    if not encoding.startswith("pq") or encoding not in ROW_ENCODINGS:
        raise ValueError(f"{encoding!r} is not a product-quantisation encoding ({', '.join(ROW_ENCODINGS[2:])})")
    return int(encoding[2:])


def to_float16(rows: np.ndarray) -> np.ndarray:
    """``rows`` as float16, refusing values outside its range (they would become infinite).

    Raises
    ------
    RowCodecError
    """
    rows = np.asarray(rows)
    with np.errstate(over="ignore"):  # reported below, as one line
        half = rows.astype(np.float16)
    if not np.isfinite(half).all():
        raise RowCodecError(
            f"rows hold values beyond float16's range (largest |x| {float(np.abs(rows).max()):.4g} > 65504): "
            "store them as float32 (--rows float32)"
        )
    return half


def max_centroid_magnitude(n_features: int) -> float:
    """The largest centroid value for which every decoded row's squared norm — and so every inner
    product, distance and kernel value of two decoded rows — is finite in float32:
    ``sqrt(float32 max / n_features)`` (1.8e16 for a million dimensions)."""
    return math.sqrt(float(np.finfo(np.float32).max) / max(int(n_features), 1))


class ProductQuantizer:
    """Product quantiser of ``d``-dimensional rows, ``sub_dim`` dimensions per byte [1]_.

    Parameters
    ----------
    sub_dim : int
        Dimensions per sub-vector (``s``); ``m = ceil(d / s)`` bytes per row.
    n_iter : int, default=10
        Lloyd iterations of the k-means of every sub-vector position.
    seed : int, default=0
        Seed of the rows the centroids start from.

    Attributes
    ----------
    codebooks_ : ndarray of float32, shape (m, K, sub_dim)
        Centroid ``k`` of position ``j`` is ``codebooks_[j, k]`` (``K <= 256``: the number
        of training rows when there are fewer).
    n_features_ : int
        ``d`` (the padding of the last sub-vector is dropped on decoding).
    """

    def __init__(self, sub_dim: int, *, n_iter: int = 10, seed: int = 0) -> None:
        if sub_dim < 1:
            raise ValueError(f"sub_dim must be at least 1, not {sub_dim}")
        self.sub_dim, self.n_iter, self.seed = int(sub_dim), int(n_iter), int(seed)

    # ----------------------------------------------------------------- shapes
    def _sub_vectors(self, rows: np.ndarray) -> np.ndarray:
        """``(m, n, s)`` float32 copy of (a few) rows cut into sub-vectors (the last one zero-padded)."""
        n, d = rows.shape
        m = -(-d // self.sub_dim)
        padded = np.zeros((n, m * self.sub_dim), dtype=np.float32)
        padded[:, :d] = rows
        return padded.reshape(n, m, self.sub_dim).transpose(1, 0, 2)

    @staticmethod
    def _nearest(rows: np.ndarray, codebooks: np.ndarray) -> np.ndarray:
        """``(n, m)`` int32 index of the nearest centroid of every sub-vector of ``rows`` (compiled kernel)."""
        squared = np.einsum("pks,pks->pk", codebooks, codebooks)
        return nearest_centroids(rows, np.ascontiguousarray(codebooks.transpose(0, 2, 1)), squared)

    # -------------------------------------------------------------------- fit
    def fit(self, rows: np.ndarray) -> ProductQuantizer:
        """Learn the codebooks from training rows ``(n, d)`` (k-means per sub-vector position).

        The rows are read in place (float32 C-ordered rows are not copied)."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] < 1:
            raise RowCodecError(f"product quantisation needs a matrix of training rows, not shape {rows.shape}")
        n = rows.shape[0]
        k = min(N_CENTROIDS, n)
        start = np.sort(np.random.default_rng(self.seed).choice(n, size=k, replace=False))
        codebooks = np.ascontiguousarray(self._sub_vectors(rows[start]))  # (m, K, s)
        for _ in range(self.n_iter):
            sums, counts = centroid_sums(rows, self._nearest(rows, codebooks), self.sub_dim, k)
            filled = counts > 0  # an empty cluster keeps its centroid
            codebooks[filled] = (sums[filled] / counts[filled][:, None]).astype(np.float32)
        self.codebooks_, self.n_features_ = codebooks, int(rows.shape[1])
        return self

    # --------------------------------------------------------- encode, decode
    def encode(self, rows: np.ndarray) -> np.ndarray:
        """The codes ``(n, m)`` uint8 of rows ``(n, d)``: the nearest centroid of each sub-vector."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.n_features_:
            raise RowCodecError(f"rows of shape {rows.shape} do not fit codebooks of {self.n_features_} dimensions")
        return self._nearest(rows, self.codebooks_).astype(np.uint8)

    def check_codes(self, codes: np.ndarray) -> np.ndarray:
        """``codes`` as an array, if they are uint8 codes ``(n, m)`` of these codebooks.

        Raises
        ------
        RowCodecError
            Another dtype or shape, or a code past the last centroid.
        """
        codes = np.asarray(codes)
        m = self.codebooks_.shape[0]
        if codes.ndim != 2 or codes.shape[1] != m or codes.dtype != np.uint8:
            raise RowCodecError(f"codes of shape {codes.shape} ({codes.dtype}) are not uint8 codes of {m} sub-vectors")
        if codes.size and int(codes.max()) >= self.codebooks_.shape[1]:
            raise RowCodecError(f"codes index centroid {int(codes.max())} of codebooks of {self.codebooks_.shape[1]}")
        return codes

    def decode(self, codes: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Float32 rows ``(n, d)`` of codes ``(n, m)``: each sub-vector replaced by its centroid.

        ``out``, a C-contiguous float32 array ``(n, d)``, receives the rows (a reader
        assembling many blocks writes each into its place, without a new array per block).
        """
        codes = self.check_codes(codes)
        m, n_centroids, sub_dim = self.codebooks_.shape
        n = codes.shape[0]
        if out is not None and (
            out.shape != (n, self.n_features_) or out.dtype != np.float32 or not out.flags.c_contiguous
        ):
            raise ValueError(f"out must be a C-contiguous float32 array of shape ({n}, {self.n_features_})")
        # centroid k of sub-vector j is row j * K + k of the (m * K, s) table
        flat_index = codes + (np.arange(m, dtype=np.intp) * n_centroids)
        table = self.codebooks_.reshape(m * n_centroids, sub_dim)
        if out is not None and m * sub_dim == self.n_features_:
            np.take(table, flat_index, axis=0, out=out.reshape(n, m, sub_dim), mode="clip")
            return out
        decoded = np.take(table, flat_index, axis=0, mode="clip").reshape(n, m * sub_dim)[:, : self.n_features_]
        if out is None:
            return decoded
        out[...] = decoded
        return out

    @classmethod
    def from_codebooks(cls, codebooks: np.ndarray, n_features: int) -> ProductQuantizer:
        """A fitted quantiser from stored codebooks ``(m, K, s)`` (as :attr:`codebooks_`).

        Raises
        ------
        RowCodecError
            Codebooks of the wrong type or shape for ``n_features``.
        """
        codebooks = np.asarray(codebooks)
        if (
            codebooks.ndim != 3
            or codebooks.dtype != np.float32
            or not 1 <= codebooks.shape[1] <= N_CENTROIDS
            or codebooks.shape[0] != -(-n_features // max(codebooks.shape[2], 1))
            or not np.isfinite(codebooks).all()
        ):
            raise RowCodecError(
                f"codebooks of shape {codebooks.shape} ({codebooks.dtype}) are not finite float32 "
                f"codebooks (m, K <= {N_CENTROIDS}, s) of {n_features}-dimensional rows"
            )
        largest, limit = float(np.abs(codebooks).max(initial=0.0)), max_centroid_magnitude(n_features)
        if largest > limit:  # finite, but a decoded row's squared norm would overflow float32
            raise RowCodecError(
                f"codebooks hold a value of magnitude {largest:.3g}, beyond the {limit:.3g} at which the "
                f"squared norm of a {n_features}-dimensional decoded row overflows float32"
            )
        quantizer = cls(int(codebooks.shape[2]))
        quantizer.codebooks_, quantizer.n_features_ = codebooks, int(n_features)
        return quantizer
