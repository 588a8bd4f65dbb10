"""``ImageFeatures``: the feature pipeline as a scikit-learn transformer (image paths → vectors).

``ImageFeatures(config)`` is the front half of the pipeline — dense SIFT, a codebook
learnt from the training images, spatial-pyramid pooling and normalisation — with
scikit-learn's ``fit`` / ``transform``, so that images can be classified with any
scikit-learn tool::

    from sklearn.model_selection import GridSearchCV, cross_val_score
    from sklearn.pipeline import make_pipeline
    from classify_images import ImageFeatures, PmSVM

    model = make_pipeline(ImageFeatures("scspm"), PmSVM())
    cross_val_score(model, paths, labels, cv=3)
    GridSearchCV(model, {"pmsvm__C": [0.01, 0.1]}).fit(paths, labels).predict(new_paths)

``fit(paths)`` does what ``build-features`` does to the training images (steps 4–5 and 7
of :mod:`~classify_images.pipeline.extraction.build`): a seeded sample of their descriptors, the
codebook learnt from it, and — for ``minmax`` — the normaliser fitted on their pooled
vectors.  ``transform(paths)`` gives each image the vector of
:class:`~classify_images.pipeline.extraction.extractor.FeatureExtractor`, the same code that computes
the rows of a feature set.  Both go through the stage cache
(:class:`~classify_images.pipeline.extraction.stages.StageCache`), keyed by image *content*: the folds
of a cross-validation share the cached descriptors, and a codebook learnt once from the
same sample is reused by every candidate of a grid search.

The ``[dataset]`` table of the configuration is not used: the caller splits the data.

Flips (``[augment]``, :mod:`~classify_images.pipeline.extraction.augment`): ``transform_mirrored(paths)``
gives the vectors of the mirrored images (row ``i``: the mirror of ``paths[i]``), to add as
training rows or to average decision values with; :func:`load_image_model` of a model whose
config says ``flip_test = "average"`` returns a pipeline that averages them itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import numpy as np
from joblib import delayed
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from ..._log import verbose_output
from ...errors import ClassifyImagesError
from ..extraction.extractor import FeatureExtractor, check_image, readable_fingerprint
from ..extraction.stages import StageCache
from ..settings.config import ChannelsConfig, PipelineConfig, load_config
from ..settings.defaults import RECOMMENDED_CONFIG, config_choice_line

__all__ = ["ImageFeatures", "UnreadableImagesError", "load_image_model", "MirrorAveragedPipeline"]

_log = logging.getLogger(__name__)

#: Unreadable images named in an error message (the rest are counted).
_NAMED_IN_ERRORS = 3


class UnreadableImagesError(ClassifyImagesError, ValueError):
    """Some of the images given to :class:`ImageFeatures` cannot be read (one-line message)."""


def _image_paths(X: Any) -> list[str]:
    """Image paths as a list of ``str``: a sequence or 1-D array of paths, or one column."""
    array = np.asarray(X, dtype=object)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1 or not all(isinstance(p, (str, os.PathLike)) for p in array):
        raise ValueError("ImageFeatures takes a list of image file paths (str or path-like)")
    return [os.fspath(p) for p in array]


class ImageFeatures(TransformerMixin, BaseEstimator):
    """Image files → feature vectors: dense SIFT, codebook, spatial pyramid, normalisation.

    Parameters
    ----------
    config : str, path-like or PipelineConfig, default=RECOMMENDED_CONFIG
        The pipeline configuration; by default the recommended pipeline,
        :data:`~classify_images.pipeline.settings.defaults.RECOMMENDED_CONFIG`
        (``"fisher-flip-rootsift"``, the command line's default too).  A ready-made config by name (``"scspm"``,
        ``"bof-spm"``, … — :func:`~classify_images.pipeline.settings.config.named_configs`), a TOML
        file, or a :class:`~classify_images.pipeline.settings.config.PipelineConfig`.  Its
        ``[dataset]`` table is ignored.
    cache_dir : path-like, None or False, default=None
        Stage cache folder; ``None``: the default cache (``$CLASSIFY_IMAGES_CACHE``,
        else ``$XDG_CACHE_HOME/classify-images``, else ``~/.cache/classify-images``);
        ``False``: no cache (every call recomputes).
    n_jobs : int, default=1
        joblib workers for the per-image work (-1: all cores).  The vectors do not
        depend on it.
    scheduler : str or None, default=None
        ``tcp://HOST:PORT`` of a running Dask scheduler: ``fit`` and ``transform`` run
        their per-image work there (needs ``classify-images[distributed]``; the images and
        the cache folder must be visible to every worker).  The vectors do not depend on it.
    cluster : str or None, default=None
        ``local:N``: a Dask ``LocalCluster`` of N worker processes, started for each
        ``fit`` / ``transform`` call (:mod:`~classify_images.pipeline.execution.cluster`).
    verbose : bool or int, default=False
        Show the steps of ``fit`` / ``transform`` on stderr while they run, with progress bars
        on a terminal (``2``: with details and their times); as scikit-learn's ``verbose``
        (:func:`classify_images._log.verbose_output`).  The steps are logged to the
        ``classify_images`` loggers whatever its value.

    Attributes
    ----------
    config_ : PipelineConfig
        The configuration read from ``config``.
    codebook_ : ndarray of float32, shape (K, 128)
        Codebook learnt from the training images' descriptors.
    extractor_ : FeatureExtractor
        Codebook, fitted normaliser and configuration: what ``transform`` applies.
    n_features_out_ : int
        Length of the vectors, ``K · Σ_L L²`` over the pyramid levels.

    Raises
    ------
    UnreadableImagesError
        ``fit`` or ``transform`` given images that cannot be read (missing, not an image,
        smaller than a patch): a transformer returns one row per input, so it cannot skip
        them; the message names them.

    See Also
    --------
    classify_images.pipeline.extraction.build.build_feature_set : the same pipeline over a dataset
        folder, stored as a feature set.
    """

    _parameter_constraints: dict = {
        "config": [str, os.PathLike, PipelineConfig],
        "cache_dir": [str, os.PathLike, None, "boolean"],
        "n_jobs": [int],
        "scheduler": [str, None],
        "cluster": [str, None],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        config: str | os.PathLike | PipelineConfig = RECOMMENDED_CONFIG,
        *,
        cache_dir: str | os.PathLike | bool | None = None,
        n_jobs: int = 1,
        scheduler: str | None = None,
        cluster: str | None = None,
        verbose: int | bool = False,
    ) -> None:
        self.config = config
        self.cache_dir = cache_dir
        self.n_jobs = n_jobs
        self.scheduler = scheduler
        self.cluster = cluster
        self.verbose = verbose

    # ------------------------------------------------------------ helpers
    def _read_config(self) -> PipelineConfig:
        if isinstance(self.config, (PipelineConfig, ChannelsConfig)):
            return self.config
        return load_config(self.config)

    def _stage_cache(self, config: PipelineConfig) -> StageCache:
        if self.cache_dir is False:
            folder = None
        elif self.cache_dir is None or self.cache_dir is True:
            from ..storage.cache_folder import default_cache_dir

            folder = default_cache_dir()
        else:
            folder = self.cache_dir
        channels = getattr(config, "channels", None) or [config]  # ([[channel]] tables: each channel's config)
        return StageCache(
            folder, cache_descriptors=all(getattr(c, "config", c).sift.cache_descriptors for c in channels)
        )

    @contextlib.contextmanager
    def _runner(self, cache: StageCache):
        """The per-image runner: joblib workers, or a Dask client while the block runs (its steps
        shown on stderr with ``verbose``)."""
        from ..execution.progress import tqdm_progress
        from ..extraction.runner import Execution

        if self.n_jobs == 0:
            raise ValueError("ImageFeatures: n_jobs must be a positive number of workers or -1 (all cores), not 0")
        execution = Execution.from_options(n_jobs=self.n_jobs, scheduler=self.scheduler, cluster=self.cluster)
        with verbose_output(self.verbose) as bars, execution.runner(cache, tqdm_progress(bars)) as runner:
            yield runner

    @staticmethod
    def _readable(paths: list[str], extractor_check, runner) -> list[str]:
        """The fingerprints of ``paths``; raises :class:`UnreadableImagesError` naming unreadable ones."""
        pairs = [readable_fingerprint(p) for p in paths]
        fingerprints, reasons = [f for f, _ in pairs], [r for _, r in pairs]
        checks = runner.map([delayed(extractor_check)(p, f) for p, f in zip(paths, fingerprints) if f], "check images")
        checks = iter(checks)
        problems = []
        for path, fingerprint, reason in zip(paths, fingerprints, reasons):
            check = next(checks) if fingerprint else {"ok": False, "reason": reason}
            if not check["ok"]:
                problems.append(f"{path} ({check['reason']})")
        if problems:
            named = "; ".join(problems[:_NAMED_IN_ERRORS])
            more = f"; and {len(problems) - _NAMED_IN_ERRORS} more" if len(problems) > _NAMED_IN_ERRORS else ""
            raise UnreadableImagesError(
                f"{len(problems)} of {len(paths)} images cannot be read: {named}{more}; remove them from the input"
            )
        return fingerprints

    # ---------------------------------------------------------------- API
    def fit(self, X: Any, y: Any = None) -> ImageFeatures:
        """Learn the codebook (and the normaliser's statistics) from the training images ``X``.

        Parameters
        ----------
        X : sequence of path-like, shape (n_images,)
            Training image files.
        y : ignored

        Returns
        -------
        self : ImageFeatures
        """
        from ..extraction.fitting import fit_extractor

        self._validate_params()
        paths = _image_paths(X)
        if not paths:
            raise ValueError("ImageFeatures.fit needs at least one image")
        from ..extraction.channels import ChannelExtractor, check_config_of

        if isinstance(self.config, str) and self.config == RECOMMENDED_CONFIG:
            _log.info("%s", config_choice_line(RECOMMENDED_CONFIG, chosen=False, how="ImageFeatures(config=...)"))
        config = self._read_config()
        cache = self._stage_cache(config)
        checked = check_config_of(config)  # ([[channel]] tables: the channel of the largest patch)

        def check(path, fingerprint):
            return check_image(cache, checked, path, fingerprint)

        with self._runner(cache) as runner:
            fingerprints = self._readable(paths, check, runner)
            if isinstance(config, PipelineConfig):
                _, extractor = fit_extractor(paths, fingerprints, np.arange(len(paths)), config, runner)
            else:  # one extractor per channel, each with a per-vector normaliser (ChannelsConfig refuses minmax)
                extractor = ChannelExtractor(
                    config,
                    [
                        fit_extractor(paths, fingerprints, np.arange(len(paths)), channel.config, runner)[1]
                        for channel in config.channels
                    ],
                )
            if not extractor.normalizer.is_fitted:
                pooled = self._rows(runner, extractor, paths, fingerprints, normalized=False)
                extractor.normalizer.fit(np.asarray(pooled, dtype=np.float32))
        self._set_fitted(extractor)
        return self

    def _set_fitted(self, extractor: FeatureExtractor) -> None:
        self.config_ = extractor.config
        self.extractor_ = extractor
        self.codebook_ = extractor.codebook
        self.n_features_out_ = extractor.n_features

    @classmethod
    def from_extractor(
        cls, extractor: FeatureExtractor, *, cache_dir: str | os.PathLike | bool | None = False, n_jobs: int = 1
    ) -> ImageFeatures:
        """A fitted transformer applying ``extractor`` (e.g. the one stored in a model file)."""
        features = cls(extractor.config, cache_dir=cache_dir, n_jobs=n_jobs)
        features._set_fitted(extractor.with_cache(features._stage_cache(extractor.config)))
        return features

    def transform(self, X: Any, *, flip: bool = False) -> np.ndarray:
        """Feature vectors of the images ``X`` (``flip``: of their mirrors, :meth:`transform_mirrored`).

        Returns
        -------
        vectors : ndarray of float32, shape (n_images, n_features_out_)
            Row ``i`` is the vector of ``X[i]``, exactly as a feature set built with the
            same configuration and codebook holds it.
        """
        check_is_fitted(self, "extractor_")
        paths = _image_paths(X)
        extractor = self.extractor_
        with self._runner(extractor.cache) as runner:
            fingerprints = self._readable(paths, extractor.check, runner)
            rows = self._rows(runner, extractor, paths, fingerprints, normalized=True, flip=flip)
        return np.asarray(rows, dtype=np.float32).reshape(len(paths), extractor.n_features)

    def transform_mirrored(self, X: Any) -> np.ndarray:
        """Feature vectors of the left-right mirrors of the images ``X`` (row ``i``: the mirror of
        ``X[i]``, as a feature set built with ``[augment]`` stores it)."""
        return self.transform(X, flip=True)

    @staticmethod
    def _rows(
        runner,
        extractor: FeatureExtractor,
        paths: list[str],
        fingerprints: list[str],
        *,
        normalized: bool,
        flip: bool = False,
    ):
        """The vectors of the images (``flip``: of their mirrors), the extractor sent to each worker once."""
        from ..extraction.fitting import image_row

        calls = [delayed(image_row)(p, f, normalized=normalized, flip=flip) for p, f in zip(paths, fingerprints)]
        return runner.map(calls, "encode + pool", shared={"extractor": extractor})

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """``imagefeatures0 … imagefeatures{d-1}``."""
        check_is_fitted(self, "extractor_")
        return np.asarray([f"imagefeatures{i}" for i in range(self.n_features_out_)], dtype=object)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.requires_fit = True
        return tags


def load_image_model(path: str | os.PathLike):
    """A model file as an estimator on image files: ``load_image_model(p).predict(["a.jpg"])``.

    Returns
    -------
    model : sklearn.pipeline.Pipeline
        ``make_pipeline(ImageFeatures, classifier)``, fitted: ``predict(paths)`` gives class
        names (for models trained by the command line), ``decision_function(paths)`` the
        one-vs-rest decision values, ``classes_`` the classes.  New images are not cached.
        A :class:`MirrorAveragedPipeline` when the model's config says ``[augment] flip_test = "average"``.

    Raises
    ------
    ModelFileError
        The file cannot be read (:func:`~classify_images.pipeline.training.model_file.load_model`), or
        holds no feature extractor (saved from a classifier alone).
    """
    from ..training.model_file import ModelFileError, load_model_parts

    estimator, extractor, _ = load_model_parts(path)
    if extractor is None:
        raise ModelFileError(
            f"model file {path} holds no feature extractor (it classifies feature vectors only): "
            "re-train it with classify-images train, or save it with save_model(..., extractor=...)"
        )
    steps = [("features", ImageFeatures.from_extractor(extractor)), ("classifier", estimator)]
    if extractor.config.augment.flip_test == "average":
        return MirrorAveragedPipeline(steps)
    return Pipeline(steps)


class MirrorAveragedPipeline(Pipeline):
    """A fitted ``(ImageFeatures, classifier)`` pipeline whose decision values are those of each
    image and of its mirror, averaged (``[augment] flip_test = "average"``:
    :func:`~classify_images.pipeline.extraction.augment.averaged_decision_function`); ``predict`` is the class
    of the largest averaged value (two classes: its sign)."""

    def decision_function(self, X, **params):
        from ..extraction.augment import averaged_decision_function

        features, classifier = self.steps[0][1], self.steps[-1][1]
        return averaged_decision_function(classifier, features.transform(X), features.transform_mirrored(X))

    def predict(self, X, **params):
        scores = self.decision_function(X)
        classes = self.steps[-1][1].classes_
        return classes[(scores > 0).astype(int)] if scores.ndim == 1 else classes[np.argmax(scores, axis=1)]
