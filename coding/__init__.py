"""Codebooks (k-means, sparse-coding dictionaries, PCA + GMM), encoders (VQ, sparse coding,
LLC, VLAD, Fisher vectors) as plug-in classes (:mod:`.encoders`), spatial-pyramid pooling,
normalisation."""

from .codebook import learn_fisher_model, learn_kmeans_codebook, learn_sparse_dictionary, sample_rows
from .encoders import Encoder, Pyramid, encoder_class, encoder_kinds, make_encoder, register_encoder
from .encode import SparseCoder, sparse_encode, vq_encode
from .fisher import FisherEncoder
from .llc import LlcCoder, llc_codes
from .vlad import VladEncoder
from .normalize import NORMALIZATIONS, Normalizer
from .pooling import POOLING_METHODS, pooled_dimension, pyramid_cells, spatial_pyramid_pool

__all__ = [
    "Encoder",
    "Pyramid",
    "encoder_class",
    "encoder_kinds",
    "make_encoder",
    "register_encoder",
    "learn_fisher_model",
    "learn_kmeans_codebook",
    "learn_sparse_dictionary",
    "sample_rows",
    "SparseCoder",
    "sparse_encode",
    "vq_encode",
    "FisherEncoder",
    "LlcCoder",
    "llc_codes",
    "VladEncoder",
    "NORMALIZATIONS",
    "Normalizer",
    "POOLING_METHODS",
    "pooled_dimension",
    "pyramid_cells",
    "spatial_pyramid_pool",
]
