"""classify-images: the classic image-classification pipeline as scikit-learn estimators.

The public API, importable from the top-level package::

    from classify_images import ImageFeatures, PmSVM, HIKnSVM, MBKL, QuadraticHingeSVC
    from classify_images import load_model, save_model, build_feature_set, __version__

``ImageFeatures``
    scikit-learn transformer: image paths → feature vectors (dense SIFT, codebook,
    spatial pyramid, normalisation), for ``make_pipeline(ImageFeatures("scspm"), PmSVM())``.
``PmSVM``, ``HIKnSVM``, ``MBKL``, ``QuadraticHingeSVC``
    the classifiers (scikit-learn estimators on feature matrices).
``load_model(path)``
    a model file written by ``classify-images train`` as an estimator whose ``predict``
    takes image paths and returns class names.
``save_model(path, pipeline)``
    a fitted ``make_pipeline(ImageFeatures(...), classifier)`` as a model file (``.npz`` and a JSON
    header, no pickle) that ``load_model`` and ``classify-images predict`` read.
``build_feature_set(dataset, out, config)``
    what ``classify-images build-features`` does.

Names are imported on first use, so ``import classify_images`` stays cheap (no numba,
OpenCV or scikit-learn until they are needed).  This file lives in the repository's
``api/`` folder, which ``pyproject.toml`` maps to the package ``classify_images``.
"""

from __future__ import annotations

import importlib.metadata

from ._lazy import lazy_names

try:
    __version__: str = importlib.metadata.version("classify-images")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "unknown"

#: Public name → ``module:attribute`` it is imported from on first use.
_LAZY = {
    "ImageFeatures": "classify_images.pipeline.interfaces.image_features:ImageFeatures",
    "PmSVM": "classify_images.classifiers.pmsvm:PmSVM",
    "HIKnSVM": "classify_images.classifiers.hik_nsvm:HIKnSVM",
    "MBKL": "classify_images.classifiers.mbkl:MBKL",
    "QuadraticHingeSVC": "classify_images.classifiers.quadratic_hinge:QuadraticHingeSVC",
    "load_model": "classify_images.pipeline.interfaces.image_features:load_image_model",
    "save_model": "classify_images.pipeline.training.model_file:save_model",
    "build_feature_set": "classify_images.pipeline.extraction.build:build_feature_set",
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)

# A library's logging stays silent until its user (or the command line) configures handlers
# (the logging HOWTO, "Configuring Logging for a Library"; classify_images._log).
import logging as _logging  # noqa: E402

_logging.getLogger(__name__).addHandler(_logging.NullHandler())
