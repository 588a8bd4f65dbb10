"""Horizontal flips (``[augment]``): mirrored training rows and test-time averaging.

Chatfield et al. [1]_ (section 2.1.3, "data augmentation") add the left-right mirror of
every training image as another training sample, and at test time average the classifier's
scores over an image and its mirror.  With the decision values :math:`f_c(x)` of class
:math:`c`, the test-time rule (``flip_test = "average"``) is

.. math::

    \\hat f_c(I) = \\tfrac12 \\big( f_c(x(I)) + f_c(x(\\mathrm{flip}(I))) \\big), \\qquad
    \\hat y(I) = \\arg\\max_c \\hat f_c(I),

where :math:`x(\\cdot)` is the feature vector of an image (the same extractor: codebook and
normaliser are learnt from the unflipped training images only).  Training
(``flip_train = true``) fits the classifier on the rows :math:`\\{x(I_i)\\} \\cup
\\{x(\\mathrm{flip}(I_i))\\}` of the training images, each mirror with its image's label.

A feature set built with ``[augment]`` stores the mirror of *every* image (training and
test), aligned row for row with the rows (:data:`~classify_images.pipeline.storage.feature_store.MIRROR_ARRAYS`):
the re-splits of ``experiment`` choose images, and an image's mirror always follows it, so the
mirror of a test image is never a training row.

References
----------
.. [1] K. Chatfield, K. Simonyan, A. Vedaldi and A. Zisserman, "Return of the Devil in the
   Details: Delving Deep into Convolutional Nets", BMVC 2014.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..settings.config import AugmentConfig, PipelineConfig
from ..storage.feature_store import FeatureSet

__all__ = ["augment_settings", "rows_and_mirrors", "averaged_decision_function"]


def augment_settings(feature_set: FeatureSet) -> AugmentConfig:
    """The ``[augment]`` table a feature set was built with (its manifest's config; the defaults when
    that records none, as older feature sets and those assembled in memory).  Only that table is read."""
    config = feature_set.manifest.get("config")
    table = config.get("augment") if isinstance(config, dict) else None
    if not table:
        return AugmentConfig()
    return PipelineConfig.from_dict({"augment": table}, source=str(feature_set.path / "manifest.json")).augment


def rows_and_mirrors(feature_set: FeatureSet, indices: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """The pooled rows ``indices`` (:meth:`~classify_images.pipeline.storage.feature_store.FeatureSet.pooled_rows`)
    followed by their mirrors in the same order: one array of ``dtype`` (float32, or float16 for
    rows stored float16) of shape ``(2 n, d)``, row
    ``n + i`` the mirror of row ``i``, filled block by block from the store (the one copy a
    fit with ``flip_train`` needs; the rows and the mirrors are never held apart as well)."""
    n = len(indices)
    stacked = np.empty((2 * n, feature_set.n_features), dtype=dtype)
    feature_set.pooled_rows(indices, out=stacked[:n])
    feature_set.pooled_rows(indices, mirrored=True, needed_by="[augment] flip_train = true", out=stacked[n:])
    return stacked


def averaged_decision_function(estimator: Any, X: np.ndarray, X_mirror: np.ndarray | None) -> np.ndarray:
    """``estimator.decision_function(X)``, averaged with that of the mirrored rows when given
    (row ``i`` of ``X_mirror`` is the mirror of the image of row ``i`` of ``X``)."""
    scores = np.asarray(estimator.decision_function(X), dtype=np.float64)
    if X_mirror is None:
        return scores
    if len(X_mirror) != len(X):
        raise ValueError(f"{len(X_mirror)} mirrored rows for {len(X)} rows")
    return 0.5 * (scores + np.asarray(estimator.decision_function(X_mirror), dtype=np.float64))
