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

The k-means runs on every sub-vector position at once (Lloyd's iterations [3]_, one
batched matrix product per chunk of positions for the distances
``||x||^2 - 2 x^T c + ||c||^2``); centroids start at ``K`` distinct training rows drawn with
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

import numpy as np

from ..errors import ClassifyImagesError

__all__ = ["ROW_ENCODINGS", "RowCodecError", "ProductQuantizer", "to_float16", "pq_sub_dim"]

#: The stored forms of dense rows: float32 (as computed), float16, PQ with 8 or 16 dimensions per byte.
ROW_ENCODINGS = ("float32", "float16", "pq8", "pq16")
#: Centroids per sub-vector codebook (one byte per code).
N_CENTROIDS = 256
#: Bytes of the ``(positions, rows, centroids)`` float32 distance block computed at a time.
_DISTANCE_BLOCK_BYTES = 1 << 27


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
        raise RowCodecError(f"rows hold values beyond float16's range (largest |x| {float(np.abs(rows).max()):.4g} > 65504): "
                            "store them as float32 (--rows float32)")
    return half


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
    def _positions(self, rows: np.ndarray) -> np.ndarray:
        """``(m, n, s)`` float32 view of the rows cut into sub-vectors (the last one zero-padded)."""
        n, d = rows.shape
        m = -(-d // self.sub_dim)
        padded = np.zeros((n, m * self.sub_dim), dtype=np.float32)
        padded[:, :d] = rows
        return padded.reshape(n, m, self.sub_dim).transpose(1, 0, 2)

    def _chunk(self, n_rows: int, n_centroids: int) -> int:
        return max(1, _DISTANCE_BLOCK_BYTES // (4 * max(n_rows, 1) * n_centroids))

    @staticmethod
    def _nearest(sub: np.ndarray, centroids: np.ndarray) -> np.ndarray:
        """Index of the nearest centroid, ``(p, n)``, of sub-vectors ``(p, n, s)`` among ``(p, K, s)``."""
        cross = np.matmul(sub, centroids.transpose(0, 2, 1))  # (p, n, K)
        squared = np.einsum("pks,pks->pk", centroids, centroids)
        # ||x||^2 is the same for every centroid: argmin of ||c||^2 - 2 x.c
        return np.argmin(squared[:, None, :] - 2.0 * cross, axis=2)

    # -------------------------------------------------------------------- fit
    def fit(self, rows: np.ndarray) -> "ProductQuantizer":
        """Learn the codebooks from training rows ``(n, d)`` (k-means per sub-vector position)."""
        rows = np.asarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] < 1:
            raise RowCodecError(f"product quantisation needs a matrix of training rows, not shape {rows.shape}")
        n = rows.shape[0]
        k = min(N_CENTROIDS, n)
        start = np.sort(np.random.default_rng(self.seed).choice(n, size=k, replace=False))
        positions = self._positions(rows)  # (m, n, s)
        codebooks = np.ascontiguousarray(positions[:, start, :])  # (m, K, s)
        chunk = self._chunk(n, k)
        for _ in range(self.n_iter):
            for first in range(0, positions.shape[0], chunk):
                sub, centroids = positions[first:first + chunk], codebooks[first:first + chunk]
                labels = self._nearest(sub, centroids)  # (p, n)
                p = sub.shape[0]
                flat = (labels + k * np.arange(p)[:, None]).ravel()
                counts = np.bincount(flat, minlength=p * k).reshape(p, k)
                for dim in range(self.sub_dim):
                    sums = np.bincount(flat, weights=sub[:, :, dim].ravel(), minlength=p * k).reshape(p, k)
                    filled = counts > 0
                    centroids[:, :, dim][filled] = (sums[filled] / counts[filled]).astype(np.float32)
        self.codebooks_, self.n_features_ = codebooks, int(rows.shape[1])
        return self

    # --------------------------------------------------------- encode, decode
    def encode(self, rows: np.ndarray) -> np.ndarray:
        """The codes ``(n, m)`` uint8 of rows ``(n, d)``: the nearest centroid of each sub-vector."""
        rows = np.asarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.n_features_:
            raise RowCodecError(f"rows of shape {rows.shape} do not fit codebooks of {self.n_features_} dimensions")
        positions = self._positions(rows)
        codes = np.empty((rows.shape[0], positions.shape[0]), dtype=np.uint8)
        chunk = self._chunk(rows.shape[0], self.codebooks_.shape[1])
        for first in range(0, positions.shape[0], chunk):
            codes[:, first:first + chunk] = self._nearest(positions[first:first + chunk],
                                                          self.codebooks_[first:first + chunk]).T
        return codes

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Float32 rows ``(n, d)`` of codes ``(n, m)``: each sub-vector replaced by its centroid."""
        codes = np.asarray(codes)
        m = self.codebooks_.shape[0]
        if codes.ndim != 2 or codes.shape[1] != m or codes.dtype != np.uint8:
            raise RowCodecError(f"codes of shape {codes.shape} ({codes.dtype}) are not uint8 codes of {m} sub-vectors")
        if codes.size and int(codes.max()) >= self.codebooks_.shape[1]:
            raise RowCodecError(f"codes index centroid {int(codes.max())} of codebooks of {self.codebooks_.shape[1]}")
        decoded = self.codebooks_[np.arange(m), codes]  # (n, m, s)
        return decoded.reshape(codes.shape[0], m * self.sub_dim)[:, :self.n_features_]

    @classmethod
    def from_codebooks(cls, codebooks: np.ndarray, n_features: int) -> "ProductQuantizer":
        """A fitted quantiser from stored codebooks ``(m, K, s)`` (as :attr:`codebooks_`).

        Raises
        ------
        RowCodecError
            Codebooks of the wrong type or shape for ``n_features``.
        """
        codebooks = np.asarray(codebooks)
        if codebooks.ndim != 3 or codebooks.dtype != np.float32 or not 1 <= codebooks.shape[1] <= N_CENTROIDS \
                or codebooks.shape[0] != -(-n_features // max(codebooks.shape[2], 1)) or not np.isfinite(codebooks).all():
            raise RowCodecError(f"codebooks of shape {codebooks.shape} ({codebooks.dtype}) are not finite float32 "
                                f"codebooks (m, K <= {N_CENTROIDS}, s) of {n_features}-dimensional rows")
        quantizer = cls(int(codebooks.shape[2]))
        quantizer.codebooks_, quantizer.n_features_ = codebooks, int(n_features)
        return quantizer
