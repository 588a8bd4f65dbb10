"""Codebooks (k-means, sparse-coding dictionaries), encoders, spatial-pyramid pooling, normalisation."""

from .codebook import learn_kmeans_codebook, learn_sparse_dictionary, sample_rows
from .encode import SparseCoder, sparse_encode, vq_encode
from .normalize import NORMALIZATIONS, apply_minmax, fit_minmax, normalize_rows
from .pooling import POOLING_METHODS, pooled_dimension, pyramid_cells, spatial_pyramid_pool

__all__ = [
    "learn_kmeans_codebook",
    "learn_sparse_dictionary",
    "sample_rows",
    "SparseCoder",
    "sparse_encode",
    "vq_encode",
    "NORMALIZATIONS",
    "normalize_rows",
    "fit_minmax",
    "apply_minmax",
    "POOLING_METHODS",
    "pooled_dimension",
    "pyramid_cells",
    "spatial_pyramid_pool",
]
