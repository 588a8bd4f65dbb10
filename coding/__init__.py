"""Codebooks (k-means, sparse-coding dictionaries), encoders, spatial-pyramid pooling, normalisation."""

from .codebook import CODEBOOK_KINDS, learn_kmeans_codebook, learn_sparse_dictionary, sample_rows
from .encode import SparseCoder, sparse_encode, vq_encode
from .normalize import NORMALIZATIONS, Normalizer
from .pooling import POOLING_METHODS, pooled_dimension, pyramid_cells, spatial_pyramid_pool

__all__ = [
    "CODEBOOK_KINDS",
    "learn_kmeans_codebook",
    "learn_sparse_dictionary",
    "sample_rows",
    "SparseCoder",
    "sparse_encode",
    "vq_encode",
    "NORMALIZATIONS",
    "Normalizer",
    "POOLING_METHODS",
    "pooled_dimension",
    "pyramid_cells",
    "spatial_pyramid_pool",
]
