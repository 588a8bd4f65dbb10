"""Codebooks (k-means, sparse-coding dictionaries, PCA + GMM), encoders (VQ, sparse coding,
LLC, VLAD, Fisher vectors) as plug-in classes (:mod:`.encoders`), spatial-pyramid pooling,
normalisation.

Names are imported on first use (PEP 562), so importing a submodule such as
:mod:`.encoders` does not load numba, scikit-learn or the other encoders.
"""

from __future__ import annotations

from .._lazy import lazy_names

#: Public name → the submodule it is imported from on first use.
_LAZY = {
    "learn_fisher_model": "codebook",
    "learn_kmeans_codebook": "codebook",
    "learn_sparse_dictionary": "codebook",
    "sample_rows": "codebook",
    "Encoder": "encoders",
    "Pyramid": "encoders",
    "encoder_class": "encoders",
    "encoder_kinds": "encoders",
    "make_encoder": "encoders",
    "register_encoder": "encoders",
    "SparseCoder": "encode",
    "sparse_encode": "encode",
    "vq_encode": "encode",
    "FisherEncoder": "fisher",
    "LlcCoder": "llc",
    "llc_codes": "llc",
    "VladEncoder": "vlad",
    "NORMALIZATIONS": "normalize",
    "Normalizer": "normalize",
    "POOLING_METHODS": "pooling",
    "pooled_dimension": "pooling",
    "pyramid_cells": "pooling",
    "spatial_pyramid_pool": "pooling",
}

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


__getattr__, __dir__ = lazy_names(__name__, globals(), {name: f".{module}" for name, module in _LAZY.items()})
