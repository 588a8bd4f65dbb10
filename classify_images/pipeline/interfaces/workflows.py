"""What the commands do, as library functions a Python user can call.

The command line (:mod:`~classify_images.pipeline.interfaces.cli`) parses options, calls one of these
and prints what it returns; everything between — training on a cluster or from row blocks,
experiments spread over a cluster, finding and classifying images, chaining build, train and
evaluate — is here:

* :func:`train_model` — ``classify-images train``: a classifier trained on a feature set,
  here, from row blocks (``streaming``), or on a Dask cluster, saved with its extractor;
* :func:`run_experiment_on` — ``classify-images experiment``: repeated splits, here or one
  task per seed on a cluster;
* :func:`find_images`, :func:`predict_images` — ``classify-images predict``;
* :func:`run_pipeline` — ``classify-images run``: build-features, train and evaluate into
  one folder.

Where the per-image work or the training runs is one argument, ``execution``
(:class:`~classify_images.pipeline.extraction.runner.Execution`: joblib workers on this machine, or a
Dask cluster), resolved once by the caller.  Errors are
:class:`~classify_images.errors.ClassifyImagesError` subclasses with one-line messages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..extraction.runner import Execution, Progress
from ..settings.config import ConfigError
from ..storage.feature_store import FeatureSet, load_feature_set

__all__ = [
    "train_model",
    "run_experiment_on",
    "find_images",
    "predict_images",
    "top_classes",
    "RunResult",
    "run_pipeline",
]

_log = logging.getLogger(__name__)


# ------------------------------------------------------------------------- training
def train_model(
    feature_set: FeatureSet | str | os.PathLike,
    classifier: str,
    params: dict[str, Any] | None = None,
    *,
    out: str | os.PathLike,
    seed: int = 0,
    execution: Execution | None = None,
    block_rows: int | None = None,
    probability_folds: int | None = None,
    search: dict[str, list] | None = None,
    combine: str | None = None,
) -> tuple[Any, Path]:
    """Train ``classifier`` on the training rows of ``feature_set`` and save it, with the feature
    extractor, as a self-contained model file.

    Parameters
    ----------
    feature_set : FeatureSet or path-like
    classifier : str
        Registered name (``linear``, ``pmsvm``, ``mbkl``, ``nsvm``).
    params : dict, optional
        Estimator parameters.
    out : path-like
        Model file to write (``.npz``).
    seed : int
        ``random_state`` of a randomised classifier unless ``params`` gives one.
    execution : Execution, optional
        With a cluster, the one-vs-rest problems are trained on its workers
        (:mod:`~classify_images.pipeline.training.distributed_training`); default: this machine.
    block_rows : int, optional
        Train by ``partial_fit`` over blocks of this many rows (:mod:`~classify_images.pipeline.training.streaming_training`;
        the classifier must have ``partial_fit``), never holding the whole matrix.
    probability_folds : int, optional
        Also calibrate class probabilities (Platt scaling on the decision values of this many
        held-out folds of the training rows: :func:`~classify_images.classifiers.calibration.calibrate`),
        stored in the model file (``predict_proba``, ``predict --proba``); on this machine, in memory.
    search : dict, optional
        Parameters to choose by cross-validation on the training rows first (``{"C": [0.1, 1, 10]}``;
        :func:`~classify_images.pipeline.training.evaluation.train_classifier`), recorded in the model file.
    combine : {"concat", "average", "mbkl"}, optional
        Combine the channels of a multi-channel feature set by this rule
        (:mod:`~classify_images.classifiers.combination`), on this machine with the rows in memory;
        recorded in the model file, whose extractor then gives combined rows.

    Returns
    -------
    training : Training
        The fitted estimator and its timings (:func:`~classify_images.pipeline.training.evaluation.train_classifier`).
    path : Path
        The model file written.
    """
    from ...classifiers.combination import check_combination, combine_rows
    from ..extraction.augment import augment_settings, rows_and_mirrors
    from ..extraction.channels import extractor_of
    from ..training.evaluation import combination_record, rows_by_columns, train_classifier
    from ..training.model_file import save_model

    if not isinstance(feature_set, FeatureSet):
        feature_set = load_feature_set(feature_set)
    if combine is not None:
        check_combination(combine, feature_set.channels, classifier)
    with contextlib.ExitStack() as stack:
        wrapper = None
        if execution is not None and execution.cluster is not None:
            from ..execution.cluster import scheduler_errors
            from ..training.distributed_training import FeatureSetRows, ParallelProblems

            client = stack.enter_context(execution.client())
            stack.enter_context(scheduler_errors(execution.cluster))
            # the workers read the rows from the feature set's path (a shared file system)
            wrapper = functools.partial(ParallelProblems, client=client, rows=FeatureSetRows.of(feature_set))
        elif block_rows is not None:
            from ..training.streaming_training import Incremental

            wrapper = functools.partial(Incremental, block_rows=block_rows, seed=seed)
        # on a cluster or streaming, a sharded set is never assembled here (the rows are read lazily)
        augment = augment_settings(feature_set)
        # with a search, the stored mirrors are loaded so that it chooses how to use them
        mirrored = augment.flip_train or (bool(search) and augment.mirrors and wrapper is None)
        if mirrored and wrapper is not None:
            raise ConfigError(
                "[augment] flip_train = true trains in memory on this machine: leave out the "
                "cluster options and --block-rows"
            )
        everything = np.arange(len(feature_set.y_train))
        # the linear SVM's span solver reads the rows a block of columns at a time: left in the store
        X = (
            None
            if wrapper or combine
            else rows_by_columns(feature_set, everything, classifier, params or {}, search, mirrored=mirrored)
        )
        if X is None and mirrored:  # the rows then their mirrors, in one array filled block by block
            X = rows_and_mirrors(feature_set, everything)
        elif X is None:
            X = (
                feature_set.rows["train"]
                if wrapper is not None and feature_set.layout == "sharded"
                else np.asarray(feature_set.X_train)
            )
        if combine is not None:
            X = combine_rows(X, feature_set.channels, combine, classifier, out=X if mirrored else None)
        training = train_classifier(
            classifier,
            params or {},
            X,
            feature_set.y_train,
            seed=seed,
            class_names=feature_set.class_names,
            wrapper=wrapper,
            search=search,
            mirrored=mirrored,
            choose_flips=augment.mirrors,
            flip_train=augment.flip_train,
        )
        mirrored = training.n_mirrors > 0
        if probability_folds is not None:
            from ...classifiers.calibration import calibrate

            names = np.asarray(feature_set.class_names, dtype=str)[np.asarray(feature_set.y_train)]
            calibrate(
                training.estimator, np.asarray(X[: len(names)] if mirrored else X), names, folds=probability_folds
            )
    path = save_model(
        out,
        training.estimator,
        extractor=_with_flips(
            extractor_of(feature_set, combine=None if combine is None else (combine, classifier)), training
        ),
        feature_set=feature_set.identity(),
        train_seconds=training.train_seconds,
        search=training.search,
        combine=combination_record(feature_set, combine),
    )
    return training, path


def _with_flips(extractor, training):
    """``extractor`` whose config's ``[augment]`` says how the model uses mirrors: the search's choice
    (``flips``), so that ``predict`` and ``evaluate`` average with the mirror only where it won."""
    flips = (training.search or {}).get("flips")
    if flips is None:
        return extractor
    from ..settings.config import AugmentConfig

    extractor.config = dataclasses.replace(
        extractor.config, augment=AugmentConfig(flip_train=flips["flip_train"], flip_test=flips["flip_test"])
    )
    return extractor


# ---------------------------------------------------------------------- experiments
def _experiment_repeat(featureset: str, name: str, params: dict[str, Any], seed: int, search=None, combine=None):
    """One repeat of an experiment, on a cluster worker: the worker reads the feature set itself."""
    from ..training.evaluation import run_experiment

    return run_experiment(
        load_feature_set(featureset), name, params, 1, first_seed=seed, search=search, combine=combine
    )


def run_experiment_on(
    feature_set: FeatureSet,
    classifier: str,
    params: dict[str, Any],
    repeats: int,
    first_seed: int = 0,
    execution: Execution | None = None,
    search: dict[str, list] | None = None,
    combine: str | None = None,
):
    """:func:`~classify_images.pipeline.training.evaluation.run_experiment` here, or its repeats as cluster
    tasks (one per seed), gathered into one ``Experiment`` (the same runs, in seed order)."""
    from joblib import delayed

    from ..execution.cluster import run_tasks, scheduler_errors
    from ..training.evaluation import Experiment, combination_record, run_experiment

    if execution is None or execution.cluster is None:
        return run_experiment(
            feature_set, classifier, params, repeats, first_seed=first_seed, search=search, combine=combine
        )
    where = os.fspath(Path(feature_set.path).resolve())
    calls = [
        delayed(_experiment_repeat)(where, classifier, params, seed, search, combine)
        for seed in range(first_seed, first_seed + repeats)
    ]
    with execution.client() as client, scheduler_errors(execution.cluster):
        parts = run_tasks(client, calls, "experiment", batch_size=1)
    first = dataclasses.replace(parts[0].first, feature_set=str(feature_set.path))
    return Experiment(
        classifier,
        params,
        str(feature_set.path),
        feature_set.config_hash,
        tuple(run for part in parts for run in part.runs),
        first,
        combination_record(feature_set, combine),
    )


# ------------------------------------------------------------------------ prediction
def find_images(arguments: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    """Image files named by ``arguments`` (files, and folders searched recursively for files with
    an image extension, hidden ones excepted: :func:`~..settings.dataset.walk_image_files`), and the
    arguments and files in the folders that cannot be images, with why."""
    from ..settings.dataset import (
        IMAGE_EXTENSIONS,
        UNSUPPORTED_IMAGE_EXTENSIONS,
        unsupported_format_reason,
        walk_image_files,
    )

    extensions = ", ".join(sorted(IMAGE_EXTENSIONS))
    files, skipped = [], []
    for argument in arguments:
        if os.path.isdir(argument):
            found, passed_over = walk_image_files(argument)  # the rule of build-features' class folders
            skipped += [{**entry, "path": os.path.join(argument, entry["path"])} for entry in passed_over]
            if not found:
                skipped.append({"path": argument, "reason": f"folder holds no image file ({extensions})"})
            files += [os.path.join(argument, os.path.relpath(f, argument)) for f in found]
        elif os.path.isfile(argument):
            suffix = os.path.splitext(argument)[1].lower()
            if suffix in IMAGE_EXTENSIONS:
                files.append(argument)
            elif suffix in UNSUPPORTED_IMAGE_EXTENSIONS:
                skipped.append({"path": argument, "reason": unsupported_format_reason(suffix)})
            else:
                skipped.append({"path": argument, "reason": f"not an image file extension ({extensions})"})
        else:
            skipped.append({"path": argument, "reason": _not_a_file_reason(argument)})
    listed: set[str] = set()  # a file named and also found in a folder given: listed once
    skipped = [entry for entry in skipped if not (entry["path"] in listed or listed.add(entry["path"]))]
    return files, skipped


def _not_a_file_reason(path: str) -> str:
    """Why ``path``, neither a regular file nor a folder, is skipped: what it is (a FIFO or a
    device is never opened: reading one would wait or never end)."""
    import errno

    from ...files import describe_file_kind

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if os.path.islink(path):
            return "symbolic link loop" if exc.errno == errno.ELOOP else "dangling symbolic link"
        return "file or folder does not exist" if exc.errno == errno.ENOENT else f"cannot be read ({exc.strerror})"
    return f"{describe_file_kind(mode)}, not a regular file: skipped (only files and folders of images are read)"


def _image_row(path: str, *, extractor, mirrored: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """The row (``mirrored``: of its mirror) and the status of one image (a cluster task's call)."""
    X, status = extractor.transform_images([path], mirrored=mirrored)
    return X, status[0]


def _transform_in_parallel(
    execution: Execution, extractor, files: list[str], progress: Progress | None = None, *, mirrored: bool = False
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """``extractor.transform_images(files, mirrored=mirrored)`` as joblib calls or cluster tasks (the
    extractor sent to each worker once), results in input order."""
    from joblib import delayed

    # Absolute paths: a cluster's workers do not share this process's current folder.
    with execution.runner(extractor.cache, progress, cached=False) as runner:
        results = runner.map(
            [delayed(_image_row)(os.path.abspath(path), mirrored=mirrored) for path in files],
            "predict" if not mirrored else "predict (mirrors)",
            shared={"extractor": extractor},
        )
    results = [(X, {**status, "path": path}) for (X, status), path in zip(results, files)]  # the paths as given
    rows = [X for X, status in results if status["ok"]]
    X = np.concatenate(rows) if rows else np.zeros((0, extractor.n_features), dtype=np.float32)
    return X, [status for _, status in results]


def top_classes(scores: np.ndarray, classes: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
    """The ``k`` classes of largest decision value of each row of ``scores``, with their values."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return [[(str(classes[j]), float(row[j])) for j in ranks] for row, ranks in zip(scores, order)]


def predict_images(
    model,
    files: list[str],
    top_k: int,
    execution: Execution | None = None,
    *,
    probability: bool = False,
    progress: Progress | None = None,
) -> tuple[list[tuple[str, list[tuple[str, float]]]], list[dict[str, str]]]:
    """The ``top_k`` classes of every readable image of ``files`` under ``model``.

    Parameters
    ----------
    model : Pipeline
        A loaded image model (:func:`~classify_images.pipeline.interfaces.image_features.load_image_model`).
    files : list of str
        Image files (:func:`find_images`).
    top_k : int
    execution : Execution, optional
        Where the images are encoded: joblib workers (``n_jobs``) or a cluster's workers;
        default this process.
    probability : bool
        Rank by the calibrated probabilities (the model must hold them: ``predict_proba``)
        instead of the decision values.  A model whose config says ``[augment] flip_test =
        "average"`` also encodes the mirror of every image and averages the two images'
        decision values (or probabilities) (:mod:`~classify_images.pipeline.extraction.augment`).
    progress : callable, optional
        ``progress(iterable, description, total)`` wrapper over the images (a tqdm bar, say);
        the step is logged (INFO) whatever it is.

    Returns
    -------
    rows : list of (path, [(class, decision value or probability), …])
        The readable images, in input order.
    skipped : list of dict
        ``{"path", "reason"}`` of the images that could not be read.
    """
    classifier, extractor = model[-1], model[0].extractor_

    def transform(files: list[str], mirrored: bool = False) -> tuple[np.ndarray, list[dict[str, Any]]]:
        if execution is None or (execution.cluster is None and execution.n_jobs == 1):
            if files:
                _log.info("predict: %d images%s", len(files), " (mirrors)" if mirrored else "")
            shown = files if progress is None else progress(files, "predict", len(files))
            return extractor.transform_images(shown, mirrored=mirrored)
        return _transform_in_parallel(execution, extractor, files, progress, mirrored=mirrored)

    X, status = transform(files)
    read = [entry["path"] for entry in status if entry["ok"]]
    skipped = [{"path": entry["path"], "reason": entry["reason"]} for entry in status if not entry["ok"]]
    if not read:
        return [], skipped
    X_mirror = None
    if extractor.config.augment.flip_test == "average":  # the images were read once already: all readable
        X_mirror, _ = transform([entry["path"] for entry in status if entry["ok"]], mirrored=True)
    if probability:
        scores = classifier.predict_proba(X)
        if X_mirror is not None:
            scores = 0.5 * (scores + classifier.predict_proba(X_mirror))
    else:
        from ..extraction.augment import averaged_decision_function

        scores = averaged_decision_function(classifier, X, X_mirror)
    if scores.ndim == 1:  # two classes: one problem, positive for classes_[1]
        scores = np.stack([-scores, scores], axis=1)
    return list(zip(read, top_classes(scores, classifier.classes_, top_k))), skipped


# ----------------------------------------------------------------------------- run
@dataclass(frozen=True)
class RunResult:
    """What :func:`run_pipeline` wrote: the feature set, the model file and the report folder."""

    build: Any
    training: Any
    evaluation: Any
    features: Path
    model: Path
    report: Path


def run_pipeline(
    dataset: str | os.PathLike,
    out: str | os.PathLike,
    config: Any,
    classifier: str,
    params: dict[str, Any] | None = None,
    *,
    seed: int = 0,
    execution: Execution | None = None,
    cache_dir: str | os.PathLike | None = None,
    store: str | None = None,
    rows: str | None = None,
    progress: Callable | None = None,
    verbose: int | bool = False,
    step: Callable[[str], None] = lambda name: None,
    force: bool = False,
    search: dict[str, list] | None = None,
    combine: str | None = None,
    probability_folds: int | None = None,
) -> RunResult:
    """Build the feature set of ``dataset``, train ``classifier`` on it and evaluate it, into
    ``out``: ``out/features/``, ``out/model.npz``, ``out/report/`` (VLFeat's ``phow_caltech101``
    as one call).

    Parameters
    ----------
    dataset : path-like
        Folder of class folders.
    out : path-like
        The run's folder.
    config : PipelineConfig or ChannelsConfig
    classifier, params, seed, search, combine
        As :func:`train_model` (``combine``: a config with ``[[channel]]`` tables).
    probability_folds : int, optional
        Also calibrate probabilities (Platt scaling on this many held-out folds), as
        :func:`train_model`.
    execution : Execution, optional
        Where the per-image work and the training run (default: this machine, one process).
    cache_dir, store, progress, verbose
        As :func:`~classify_images.pipeline.extraction.build.build_feature_set` (``verbose`` covers the
        three steps).
    step : callable
        Called with ``"build-features"``, ``"train"``, ``"evaluate"`` as each begins (each
        is logged too, INFO).
    force : bool
        Replace outputs in ``out`` that cannot be proven ours, by their names only
        (:mod:`~classify_images.pipeline.storage.output_guard`).

    Raises
    ------
    OutputRefusedError, FeatureSetError
        Before any work, when ``out`` (or its ``features/``, ``model.npz``, ``report/``) holds what
        classify-images did not write, or another run's outputs (without ``force``).
    """
    import hashlib
    import json

    from ..._log import verbose_output
    from ..extraction.build import build_feature_set
    from ..storage.feature_store import check_destination
    from ..storage.output_guard import OutputFolder, check_output_file
    from ..training.evaluation import evaluate_model
    from ..training.model_file import load_model
    from .report import report_folder, write_report

    def begin(name: str) -> None:
        _log.info("== %s", name)
        step(name)

    out = Path(out)
    config_digest = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True, default=str).encode()).hexdigest()
    run = {
        "command": "run",
        "dataset": os.path.abspath(dataset),
        "config": config_digest[:16],
        "classifier": classifier,
        "params": params or {},
        "search": search,
        "seed": seed,
        **({"combine": combine} if combine is not None else {}),
        **({"probability_folds": probability_folds} if probability_folds is not None else {}),
    }
    names = ("features", "model.npz", "report")
    folder = OutputFolder(out, names, "run", parts=names, run=run)
    report = report_folder(out / "report", run=run)
    folder.check(force)  # every output checked before any work
    check_destination(out / "features", dataset, force=force)
    check_output_file(out / "model.npz", "model file", force=force)
    report.check(force)
    folder.claim(force, until_finished=True)  # a failure before finish() never blocks its own retry
    with verbose_output(verbose):
        begin("build-features")
        built = build_feature_set(
            dataset,
            out / "features",
            config,
            cache_dir=cache_dir,
            progress=progress,
            verbose=verbose,
            store=store,
            rows=rows,
            execution=execution,
            force=force,
        )
        begin("train")
        feature_set = load_feature_set(built.path)
        training, model_path = train_model(
            feature_set,
            classifier,
            params,
            out=out / "model.npz",
            seed=seed,
            execution=execution,
            search=search,
            combine=combine,
            probability_folds=probability_folds,
        )
        begin("evaluate")
        model, meta = load_model(model_path)
        evaluation = evaluate_model(model, meta, feature_set)
        report.check(force)
        with report.claim(force):
            write_report(evaluation, out / "report")
    folder.finish()
    return RunResult(built, training, evaluation, built.path, model_path, out / "report")
