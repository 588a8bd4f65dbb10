"""The ``classify-images`` command line.

Sub-commands::

    classify-images build-features DATASET [--config FILE] [--out DIR] ...
    classify-images train FEATURESET [--classifier NAME] [--param key=value ...] [--out FILE]
                    [--scheduler tcp://HOST:PORT | --cluster local:N | --streaming [--block-rows N]]
    classify-images evaluate FEATURESET MODEL [--out DIR]
    classify-images experiment FEATURESET [--classifier NAME] --repeats R [--param ...]
    classify-images predict MODEL IMAGE_OR_FOLDER... [--top-k K] [--format table|csv|json]
    classify-images run DATASET [--config NAME] [--classifier NAME] [--param ...] [--probability] [--out DIR]
    classify-images cache info|prune|clear
    classify-images demo [--workdir DIR]

Without ``--config`` every command uses the recommended pipeline (:data:`RECOMMENDED_CONFIG`, said
in one log line); without ``--classifier``, the config's ``[classifier]`` table names the classifier.

A user's mistake (missing folder, bad config key, model for another feature
set, …) ends with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

from ...classifiers.registry import CLASSIFIERS, parse_param
from ...errors import ClassifyImagesError
from ..execution.allocator import return_freed_memory, reuse_freed_memory
from ..execution.limits import MAX_BATCH_SIZE, bounded_workers, check_grid_size, check_worker_parameter
from ..execution.progress import tqdm_progress as _tqdm_progress
from ..settings.defaults import RECOMMENDED_CONFIG, config_choice_line, named_configs
from ..storage.atomic import DISK_FULL_ERRNOS

__all__ = ["main", "build_parser"]

_log = logging.getLogger("classify_images.pipeline.interfaces.cli")  # (not __name__: "__main__" under -m)

#: Errors for the user to fix, printed as one line (exit status 2): every error classify-images
#: raises derives from :class:`~classify_images.errors.ClassifyImagesError`.
USER_ERRORS = (ClassifyImagesError,)


class UsageError(ClassifyImagesError, ValueError):
    """A bad command-line value (one-line error)."""


def _params(pairs: list[str] | None) -> dict[str, Any]:
    """``--param key=value`` options as a dict; a key given twice is refused (not silently the last)."""
    params: dict[str, Any] = {}
    for pair in pairs or []:
        key, value = parse_param(pair)
        check_worker_parameter("--param", key, value)
        if key in params:
            raise UsageError(f"--param {key} is given twice ({params[key]!r} and {value!r}): give it once")
        params[key] = value
    return params


def _search(pairs: list[str] | None) -> dict[str, list] | None:
    """``--search C=0.1,1,10,100`` options (repeatable: one per parameter, their product is
    searched) as ``{name: [values]}``; None without any."""
    if not pairs:
        return None
    grid: dict[str, list] = {}
    for pair in pairs:
        if "=" not in pair or not pair.partition("=")[2].strip():
            raise UsageError(f"--search {pair!r}: expected NAME=V1,V2,..., e.g. --search C=0.1,1,10,100")
        key, value = parse_param(pair)
        if key in grid:
            raise UsageError(f"--search {key} is given twice: give its values once, separated by commas")
        values = list(value) if isinstance(value, (tuple, list)) else [value]
        if len(set(map(repr, values))) != len(values):
            raise UsageError(f"--search {pair!r}: a value is repeated")
        for value in values:
            check_worker_parameter("--search", key, value)
        grid[key] = values
    check_grid_size(grid)
    return grid


def _naming(params: dict[str, Any], search: dict[str, list] | str | None) -> dict[str, Any]:
    """What names a default output: the parameters, and the grids ``--search`` chooses from."""
    grids = search if isinstance(search, dict) else {}
    return {**params, **{f"search-{key}": values for key, values in grids.items()}}


def _search_and_params(args: argparse.Namespace, params: dict[str, Any]) -> dict[str, list] | str | None:
    """``--search``, refused for a parameter ``--param`` also sets; without either for ``C``,
    ``"default"``: the training chooses ``C`` (and the use of stored mirrors) by cross-validation
    where that is cheap (:func:`~classify_images.pipeline.training.evaluation.default_search`)."""
    grid = _search(getattr(args, "search", None))
    for key in grid or {}:
        if key in params:
            raise UsageError(f"--search {key}=... and --param {key}=... both set {key}: give one")
    if grid is None and "C" not in params:
        return "default"
    return grid


#: Seeds go to NumPy's ``RandomState`` (scikit-learn's ``random_state``): 0 … 2³² − 1.
MAX_SEED = 2**32 - 1
#: ``experiment --repeats``: at most this many re-splits (each one trains and tests a classifier;
#: the protocols of the papers use 5 to 10).
MAX_REPEATS = 1000


def _check_n_jobs(n_jobs: int) -> int:
    if n_jobs == 0:
        raise UsageError("--n-jobs must be a positive number of workers, or negative (-1: all cores), not 0")
    return n_jobs


def _check_seeds(first: int, count: int = 1) -> None:
    """``--seed`` (and the ``count - 1`` seeds after it) within NumPy's seed range."""
    if first < 0 or first + count - 1 > MAX_SEED:
        last = "" if count == 1 or first < 0 else f" (and --seed + --repeats - 1 = {first + count - 1})"
        raise UsageError(f"--seed must be from 0 to {MAX_SEED}{last}, got {first}")


def _check_split_options(args: argparse.Namespace) -> None:
    """``--train-per-class``, ``--test-per-class`` and ``--seed`` of ``build-features`` / ``run``, refused
    by the option's name (the config validation would name the config file, which does not hold them)."""
    if args.train_per_class is not None and args.train_per_class < 1:
        raise UsageError(f"--train-per-class must be at least 1, not {args.train_per_class}")
    if args.test_per_class is not None and args.test_per_class < 0:
        raise UsageError(
            f"--test-per-class must be at least 1 (or 0: all the remaining images), not {args.test_per_class}"
        )
    if args.seed is not None:
        _check_seeds(args.seed)


def _check_out_file(out: Path, what: str) -> Path:
    """``--out`` naming a file to write: not an existing folder."""
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; give the name of the {what} file to write")
    return out


def _check_folder_option(option: str, folder: Path, what: str) -> Path:
    """``option`` naming a folder to write into: neither an existing file nor inside one."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {folder} is a file, not a folder; give a folder for the {what}")
    for ancestor in folder.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise UsageError(
                    f"{option} {folder} is not a folder: {ancestor} is a file; give a folder for the {what}"
                )
            break
    return folder


def _check_out_folder(out: Path, what: str) -> Path:
    """``--out`` naming a folder to write into: not an existing file."""
    return _check_folder_option("--out", out, what)


@contextlib.contextmanager
def _writing(option: str, path: Path, what: str):
    """The system's refusal to write ``path`` (given by ``option``) as one line naming the option and
    the path as the user gave it (a full disk keeps its own message: free space, nothing replaced)."""
    try:
        yield
    except OSError as exc:
        # ``path`` itself, a file in it (a report), or ``path`` + ``.npz`` (a model)
        inside = exc.filename is not None and os.fsdecode(exc.filename).startswith(os.fspath(path))
        if exc.errno in DISK_FULL_ERRNOS or not inside:
            raise
        reason = exc.strerror or type(exc).__name__
        raise UsageError(
            f"{option} {path}: cannot write the {what} there ({reason}); give a path in a folder you can write to"
        ) from None


def _cluster_spec(args: argparse.Namespace):
    """``--scheduler`` / ``--cluster`` parsed, and Dask's presence checked, before any work."""
    from ..execution.cluster import parse_cluster_option, require_distributed

    spec = parse_cluster_option(args.scheduler, args.cluster)
    if spec is not None:
        require_distributed()
    return spec


def _default_feature_out(dataset: Path, config_name: str) -> Path:
    return Path("feature-sets") / f"{dataset.resolve().name}-{config_name}"


def _build_options(args: argparse.Namespace, out: Path | None = None):
    """``build-features``' (and ``run``'s) options, checked before any work: ``(config, out,
    cache_dir, execution)``."""
    from ..extraction.runner import Execution
    from ..settings.config import load_config
    from ..storage.cache_folder import default_cache_dir

    overrides = {
        "dataset": {
            "train_per_class": args.train_per_class,
            "test_per_class": args.test_per_class,
            "seed": args.seed,
            "keep_background": True if args.keep_background else None,
        }
    }
    _apply_protocol(args, overrides["dataset"])
    _check_n_jobs(args.n_jobs)
    _check_split_options(args)
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1 image per task, not {args.batch_size}")
    _cluster_spec(args)
    execution = Execution.from_options(
        n_jobs=args.n_jobs, scheduler=args.scheduler, cluster=args.cluster, batch_size=args.batch_size
    )
    config = load_config(_config_argument(args), overrides)
    config_name = Path(_config_argument(args)).stem
    if out is None:
        out = Path(args.out) if args.out else _default_feature_out(Path(args.dataset), config_name)
    cache_dir = None if args.no_cache else (args.cache_dir or default_cache_dir())
    return config, out, cache_dir, execution


def _log_config_choice(args: argparse.Namespace) -> None:
    """The one line naming the config (and whether it is the recommended one), once the command's
    checks have passed: a refused command stays the one line of its error."""
    _log.info("%s", config_choice_line(Path(_config_argument(args)).stem, chosen=args.config is not None))


@contextlib.contextmanager
def _before_the_first_step(say):
    """Call ``say`` (which logs a line) just before the first record the command shows, while the
    block runs: a command refused before any work (an output it may not write, an unreachable
    scheduler) stays the one line of its error."""
    from ..._log import PACKAGE_LOGGER

    said = False

    def first(record: logging.LogRecord) -> bool:
        nonlocal said
        if not said:
            said = True
            say()  # (re-enters the handler: said is already set)
        return True

    handlers = list(logging.getLogger(PACKAGE_LOGGER).handlers)
    for handler in handlers:
        handler.addFilter(first)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(first)


def _config_argument(args: argparse.Namespace) -> str:
    """``--config``, or the recommended pipeline's name without one (the one default of every entry point)."""
    return args.config if args.config else RECOMMENDED_CONFIG


def _apply_protocol(args: argparse.Namespace, split: dict[str, Any]) -> None:
    """``--protocol NAME``: its training and test counts per class in ``split`` where
    ``--train-per-class`` / ``--test-per-class`` do not set them (``half`` counts the dataset's classes)."""
    name = getattr(args, "protocol", None)
    if name is None:
        return
    from ..settings.dataset import discover_dataset
    from ..settings.protocols import PROTOCOLS, protocol_split

    counts = [1]
    if PROTOCOLS[name].train_per_class is None and split["train_per_class"] is None:
        dataset = discover_dataset(args.dataset, keep_background=bool(args.keep_background))
        labels = dataset.labels.tolist()
        counts = [labels.count(c) for c in range(len(dataset.class_names))]
    train, test = protocol_split(name, counts)
    if split["train_per_class"] is None:
        split["train_per_class"] = train
        split["train_fraction"] = PROTOCOLS[name].train_fraction  # (None: a count, the same in every class)
    if split["test_per_class"] is None:
        split["test_per_class"] = 0 if test is None else test  # 0: all the rest


def _print_build(result, cache_dir) -> None:
    from ..storage.feature_store import load_feature_set
    from .report import build_text

    manifest = load_feature_set(result.path).manifest
    print(build_text(result, manifest["skipped"], result.timings if result.reused else manifest["timings"]))
    if cache_dir is not None:
        print(_cache_text(cache_dir))


def cmd_build_features(args: argparse.Namespace) -> int:
    from ..extraction.build import build_feature_set

    config, out, cache_dir, execution = _build_options(args)
    with _before_the_first_step(lambda: _log_config_choice(args)):
        result = build_feature_set(
            args.dataset,
            out,
            config,
            cache_dir=cache_dir,
            progress=_tqdm_progress(not args.quiet),
            store=args.store,
            execution=execution,
            force=args.force,
            rows=args.rows,
        )
    _print_build(result, cache_dir)
    return 0


def _cache_text(cache_dir) -> str:
    from ..storage.cache_folder import cache_usage, format_bytes

    usage = cache_usage(cache_dir)
    if not usage.exists:
        return f"stage cache: {usage.path} (empty: the folder does not exist yet)"
    text = (
        f"stage cache: {usage.path} ({format_bytes(usage.n_bytes)} in {usage.n_files} files; "
        "classify-images cache clear empties it)"
    )
    if usage.n_stale:
        text += (
            f"\nstage cache: {usage.n_stale} temporary files ({format_bytes(usage.stale_bytes)}) left by writers "
            "killed in the middle of a write; classify-images cache prune removes them"
        )
    return text


def cmd_cache(args: argparse.Namespace) -> int:
    from ..extraction.build import default_cache_dir
    from ..storage.cache_folder import clear_cache, format_bytes, prune_cache

    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    source = (
        "--cache-dir"
        if args.cache_dir
        else ("$CLASSIFY_IMAGES_CACHE" if os.environ.get("CLASSIFY_IMAGES_CACHE") else "the default stage cache")
    )
    _check_folder_option(source, cache_dir, "stage cache")
    if args.action == "info":
        print(_cache_text(cache_dir))
        return 0
    if args.action == "prune":
        usage = prune_cache(cache_dir)
        print(
            f"stage cache: {cache_dir}: deleted {usage.n_files} temporary files ({format_bytes(usage.n_bytes)}) "
            "left by killed writers"
        )
        return 0
    usage = clear_cache(cache_dir)
    print(f"stage cache: {cache_dir}: deleted {format_bytes(usage.n_bytes)} in {usage.n_files} files")
    return 0


def _default_model_out(feature_set: Path, classifier: str, params: dict[str, Any]) -> Path:
    """``<featureset>-<classifier>[-<params>].npz`` beside the feature set: another ``--param`` is another file."""
    from ..storage.output_guard import params_suffix

    return feature_set.parent / f"{feature_set.name}-{classifier}{params_suffix(params)}.npz"


def _default_experiment_out(feature_set: Path, classifier: str, params: dict[str, Any]) -> Path:
    from ..storage.output_guard import params_suffix

    return feature_set.parent / f"{feature_set.name}-{classifier}{params_suffix(params)}-experiment"


@contextlib.contextmanager
def _classifier_errors_as_usage_errors(name: str, featureset: str, encoder: str | None = None):
    """Errors of a classifier that are the user's to fix, as one line instead of a traceback:
    a ``--param`` value outside the estimator's constraints, or signed features given to an
    additive-kernel classifier (PmSVM, HIK nSVM; signed features come from max pooling of
    signed sparse codes, for example)."""
    from ...classifiers._compat import InvalidParameterError
    from ...classifiers.base import NegativeFeaturesError

    try:
        yield
    except InvalidParameterError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    except NegativeFeaturesError:
        from ...coding.encoders import encoder_class

        if (
            encoder is not None and encoder_class(encoder).signed
        ):  # no pooling or normalisation makes these non-negative
            raise UsageError(
                f"classifier {name!r} needs non-negative features, but {featureset} holds {encoder} vectors, "
                "which are signed by construction: use --classifier linear (or mbkl)"
            ) from None
        raise UsageError(
            f"classifier {name!r} needs non-negative features, but {featureset} has negative values: "
            "rebuild it with pooling method 'abs' or 'average', or use --classifier linear"
        ) from None
    except USER_ERRORS:  # already one line naming what to fix (unknown parameter, lost cluster, …)
        raise
    except ValueError as exc:  # a parameter the estimator refuses at fit time (n_jobs=0, class_weight, …)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"classifier {name!r}: {first}") from None


#: ``train --streaming``: rows per block by default.
DEFAULT_BLOCK_ROWS = 1024


def _training_mode(args: argparse.Namespace):
    """``train``'s cluster (``--scheduler`` / ``--cluster``) or streaming (``--streaming``) options,
    checked before any work: the :class:`~.cluster.ClusterSpec` (or None)."""
    from ...classifiers.registry import classifier_class
    from ..execution.cluster import ClusterError, parse_cluster_option

    try:
        spec = parse_cluster_option(getattr(args, "scheduler", None), getattr(args, "cluster", None))
    except ClusterError as exc:
        raise UsageError(str(exc)) from None
    streaming = getattr(args, "streaming", False)
    block_rows = getattr(args, "block_rows", None)
    if block_rows is not None and not streaming:
        raise UsageError("--block-rows sets the blocks of --streaming; add --streaming or drop --block-rows")
    if block_rows is not None and block_rows < 1:
        raise UsageError(f"--block-rows must be at least 1, not {block_rows}")
    if streaming and spec is not None:
        raise UsageError(f"--streaming trains on this machine from row blocks; drop {spec.option} (or --streaming)")
    estimator_class = classifier_class(args.classifier)
    if streaming and not hasattr(estimator_class, "partial_fit"):
        raise UsageError(
            f"--streaming needs a classifier that learns from row blocks (partial_fit): only nsvm and linear do, "
            f"not {args.classifier}; train {args.classifier} without --streaming"
        )
    if spec is not None:
        from ..training.distributed_training import DistributedTrainingError, check_distributable

        try:
            check_distributable(estimator_class)
        except DistributedTrainingError as exc:
            raise UsageError(f"{spec.option}: classifier {args.classifier!r}: {exc}") from None
    return spec


def _default_classifier_of(args: argparse.Namespace) -> dict[str, Any]:
    """Without ``--classifier`` (``train``, ``experiment``): set ``args.classifier`` to the classifier of
    the feature set's config (:func:`~..settings.recommendation.default_classifier`), logged in one line,
    and return its ``[classifier]`` parameters ({} when ``--classifier`` is given)."""
    if getattr(args, "classifier", None) is not None:
        return {}
    from ..settings.recommendation import default_classifier
    from ..storage.feature_store import load_feature_set

    name, params, why = default_classifier(load_feature_set(args.featureset).config)
    _log.info("classifier: %s (%s; --classifier to choose another)", name, why)
    args.classifier = name
    return params


def cmd_train(args: argparse.Namespace) -> int:
    from ..extraction.runner import Execution
    from ..storage.feature_store import load_feature_set
    from ..storage.output_guard import check_output_file
    from .report import training_text
    from .workflows import train_model

    _check_seeds(args.seed)
    table_params = _default_classifier_of(args)
    spec = _training_mode(args)
    params = getattr(args, "params", None) or {**table_params, **_params(args.param)}
    search = _search_and_params(args, params)
    if isinstance(search, dict) and (spec is not None or getattr(args, "streaming", False)):
        raise UsageError(
            "--search runs the cross-validation on this machine with the rows in memory: "
            "drop --scheduler/--cluster/--streaming, or choose the value first and give --param"
        )
    out = (
        Path(args.out)
        if args.out
        else _default_model_out(Path(args.featureset), args.classifier, _naming(params, search))
    )
    _check_out_file(out, "model")
    check_output_file(out, "model file", force=args.force)
    feature_set = load_feature_set(args.featureset)
    block_rows = (
        (getattr(args, "block_rows", None) or DEFAULT_BLOCK_ROWS) if getattr(args, "streaming", False) else None
    )
    folds = _probability_folds(args, spec)
    if args.combine is not None and (spec is not None or block_rows is not None):
        raise UsageError(
            "--combine combines the rows on this machine in memory: drop --scheduler/--cluster/--streaming"
        )
    with (
        _classifier_errors_as_usage_errors(args.classifier, args.featureset, _encoder_kind(feature_set.config)),
        _writing("--out", out, "model file"),
    ):
        training, path = train_model(
            feature_set,
            args.classifier,
            params,
            out=out,
            seed=args.seed,
            execution=Execution(cluster=spec),
            block_rows=block_rows,
            probability_folds=folds,
            search=search,
            combine=args.combine,
        )
    print(training_text(training, path))
    _warn_pairing(feature_set.config, args.classifier)  # (after the work: an error stays the one line)
    if folds is not None:
        print(
            f"  calibrated probabilities: Platt scaling on the decision values of {folds} held-out folds "
            "(predict --proba)"
        )
    return 0


def _probability_folds(args: argparse.Namespace, spec) -> int | None:
    """``train --probability [--calibration-folds K]``: the folds of the calibration (None: none), checked."""
    folds = getattr(args, "calibration_folds", None)
    if not getattr(args, "probability", False):
        if folds is not None:
            raise UsageError("--calibration-folds sets the folds of --probability; add --probability or drop it")
        return None
    from ...classifiers.calibration import DEFAULT_FOLDS

    folds = DEFAULT_FOLDS if folds is None else folds
    if folds < 2:
        raise UsageError(f"--calibration-folds must be at least 2, not {folds}")
    if spec is not None or getattr(args, "streaming", False):
        where = spec.option if spec is not None else "--streaming"
        raise UsageError(
            f"--probability calibrates on this machine with all rows in memory; drop {where} (or --probability)"
        )
    return folds


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..storage.feature_store import load_feature_set
    from ..training.evaluation import evaluate_model
    from ..training.model_file import load_model
    from .report import evaluation_text, report_folder, write_report

    out = Path(args.out) if args.out else Path(args.model).with_suffix("").with_name(Path(args.model).stem + "-report")
    _check_out_folder(out, "report")
    guard = report_folder(
        out,
        run={
            "command": "evaluate",
            "featureset": os.path.abspath(args.featureset),
            "model": os.path.abspath(args.model),
        },
    )
    guard.check(args.force)
    feature_set = load_feature_set(args.featureset)
    model, meta = load_model(args.model)
    with _classifier_errors_as_usage_errors(meta.get("classifier", "model"), args.featureset):
        evaluation = evaluate_model(model, meta, feature_set)
    with _writing("--out", out, "report"):
        guard.check(args.force)
        with guard.claim(args.force):
            write_report(evaluation, out)
    print(evaluation_text(evaluation, out))
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from ..extraction.runner import Execution
    from ..storage.feature_store import load_feature_set
    from .report import experiment_text, report_folder, write_experiment, write_report
    from .workflows import run_experiment_on

    if not 1 <= args.repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats must be from 1 to {MAX_REPEATS}, not {args.repeats}")
    _check_seeds(args.seed, args.repeats)
    table_params = _default_classifier_of(args)
    spec = _cluster_spec(args)
    params = {**table_params, **_params(args.param)}
    search = _search_and_params(args, params)
    out = (
        Path(args.out)
        if args.out
        else _default_experiment_out(Path(args.featureset), args.classifier, _naming(params, search))
    )
    _check_out_folder(out, "experiment")
    guard = report_folder(
        out,
        experiment=True,
        run={
            "command": "experiment",
            "featureset": os.path.abspath(args.featureset),
            "classifier": args.classifier,
            "params": params,
            "search": search,
            "seed": args.seed,
            "repeats": args.repeats,
        },
    )
    guard.check(args.force)
    feature_set = load_feature_set(args.featureset)
    with _classifier_errors_as_usage_errors(args.classifier, args.featureset, _encoder_kind(feature_set.config)):
        experiment = run_experiment_on(
            feature_set,
            args.classifier,
            params,
            args.repeats,
            args.seed,
            Execution(cluster=spec),
            search=search,
            combine=args.combine,
        )
    with _writing("--out", out, "report"):
        guard.check(args.force)
        with guard.claim(args.force):
            write_experiment(experiment, out)
            write_report(experiment.first, out, experiment=experiment)
    print(experiment_text(experiment))
    print(f"  report: {out / 'report.html'}")
    _warn_pairing(feature_set.config, args.classifier)
    return 0


def _display(path: str) -> str:
    """A path or class (folder) name as printable text, whatever its bytes (undecodable ones as ``\\xNN``)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


#: Classes ``predict`` shows per image unless ``--top-k`` says otherwise (fewer when the model has fewer).
DEFAULT_TOP_K = 3


def _print_predictions(
    rows: list[tuple[str, list]], skipped: list[dict[str, str]], k: int, fmt: str, probability: bool = False
) -> None:
    """The top-``k`` classes of each image on stdout in format ``fmt`` with their decision values
    (or calibrated ``probability``); the skipped inputs, and their count, on stderr in every
    format (the JSON document lists them too)."""
    column = "probability" if probability else "decision_value"
    import csv
    import json

    for entry in skipped:  # one line per entry: line breaks in a name are escaped (\\n)
        print(f"skipped {_one_line(_display(entry['path']))}: {_one_line(entry['reason'])}", file=sys.stderr)
    if skipped:
        print(
            f"{len(skipped)} input{'s' if len(skipped) > 1 else ''} skipped, "
            f"{len(rows)} image{'s' if len(rows) > 1 else ''} classified",
            file=sys.stderr,
        )
    if fmt == "json":
        document = {
            "scores": "calibrated probabilities (Platt scaling, normalised over the classes)"
            if probability
            else "decision values of the one-vs-rest classifiers (larger = more likely; not probabilities)",
            "top_k": k,
            "predictions": [
                {"path": _display(path), "top": [{"class": c, column: round(v, 6)} for c, v in top]}
                for path, top in rows
            ],
            "skipped": [{"path": _display(s["path"]), "reason": s["reason"]} for s in skipped],
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["path", "rank", "class", column])
        for path, top in rows:
            for rank, (name, value) in enumerate(top, 1):
                writer.writerow([_display(path), rank, name, f"{value:.6f}"])
        return
    if probability:
        print(f"# top {k} classes per image with their calibrated probabilities (Platt scaling)")
    else:
        print(
            f"# top {k} classes per image with their decision values "
            "(one-vs-rest classifier scores, larger = more likely; not probabilities)"
        )
    shown = "{:.3f}" if probability else "{:+.3f}"
    for path, top in rows:  # one line per image (JSON and CSV quote line breaks themselves)
        print(
            f"{_one_line(_display(path))}: "
            + ", ".join(f"{_one_line(str(name))} ({shown.format(score)})" for name, score in top)
        )


def cmd_predict(args: argparse.Namespace) -> int:
    from ..extraction.runner import Execution
    from ..storage.feature_store import load_feature_set
    from ..training.model_file import check_model_matches, read_model_meta
    from .image_features import load_image_model
    from .workflows import find_images, predict_images

    spec = _cluster_spec(args)
    model = load_image_model(args.model)
    classifier = model[-1]
    if args.feature_set:
        feature_set = load_feature_set(args.feature_set)
        check_model_matches(
            read_model_meta(args.model), config_hash=feature_set.config_hash, n_features=feature_set.n_features
        )
    n_classes = len(classifier.classes_)
    if args.top_k is None:  # the default: 3, or every class of a model with fewer
        args.top_k = min(DEFAULT_TOP_K, n_classes)
    if args.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, not {args.top_k}")
    asked, args.top_k = args.top_k, min(args.top_k, n_classes)
    _check_n_jobs(args.n_jobs)
    if args.proba and not hasattr(classifier, "predict_proba"):
        raise UsageError(
            f"--proba: model {args.model} holds no calibrated probabilities; re-train it with "
            "classify-images train --probability (or drop --proba for decision values)"
        )
    files, skipped = find_images(args.images)
    rows, unread = predict_images(
        model,
        files,
        args.top_k,
        Execution(n_jobs=args.n_jobs, cluster=spec),
        probability=args.proba,
        progress=_tqdm_progress(not args.quiet),
    )
    skipped += unread
    if not rows:
        first = f" ({_display(skipped[0]['path'])}: {skipped[0]['reason']})" if skipped else ""
        raise UsageError(
            f"no readable image among the {len(args.images)} input(s){first}; "
            f"{len(skipped)} skipped; give image files or folders of images"
        )
    if asked > n_classes:
        print(
            f"note: --top-k {asked} is more than the model's {n_classes} classes; showing all {n_classes}",
            file=sys.stderr,
        )
    rows = [(path, [(_display(name), value) for name, value in top]) for path, top in rows]
    _print_predictions(rows, skipped, args.top_k, args.format, probability=args.proba)
    return 1 if skipped else 0  # something asked for was not classified (listed on stderr)


def _run_classifier(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """``run``'s classifier and parameters: ``--classifier``, else the config's ``[classifier]`` table
    (the recommended pipeline's without ``--config``); ``--param`` over them. Logged in one line."""
    from ..settings.config import classifier_table

    name, params = classifier_table(_config_argument(args))
    if args.classifier is not None and args.classifier != name:
        name, params = args.classifier, {}  # the table's parameters belong to the table's classifier
    if name is None:
        raise UsageError(
            "name the classifier: --classifier NAME, or a [classifier] table in the config "
            '(name = "pmsvm", params = { ... })'
        )
    return name, {**params, **_params(args.param)}


def _warn_pairing(config: Any, classifier: str) -> None:
    """One warning line when ``classifier`` suits the rows of ``config`` poorly (the report says it too)."""
    from ..settings.recommendation import pairing_warning

    advice = pairing_warning(config, classifier)
    if advice is not None:
        _log.warning("%s", advice)


def _default_run_out(args: argparse.Namespace, name: str, params: dict[str, Any], search) -> Path:
    """``runs/<dataset>-<config>-<classifier>[-<params>]``: readable, parameters rather than hashes."""
    from ..storage.output_guard import params_suffix

    config_name = Path(_config_argument(args)).stem
    return Path("runs") / (
        f"{Path(args.dataset).resolve().name}-{config_name}-{name}{params_suffix(_naming(params, search))}"
    )


def cmd_run(args: argparse.Namespace) -> int:
    """build-features, train and evaluate in one command, into one folder."""
    from .report import evaluation_text, training_text
    from .workflows import run_pipeline

    name, params = _run_classifier(args)
    search = _search_and_params(args, params)
    out = Path(args.out) if args.out else _default_run_out(args, name, params, search)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for the run (features/, model.npz, report/)")
    config, _, cache_dir, execution = _build_options(args, out / "features")
    _check_combine_before_build(args.combine, config, name, args.config)

    def begin(step: str) -> None:  # the config and classifier lines once every output is checked
        if step == "build-features":
            _log_config_choice(args)
            if args.classifier is None:
                _log.info("classifier: %s (the config's [classifier]; --classifier to choose another)", name)

    _check_seeds(0 if args.seed is None else args.seed)
    folds = _probability_folds(args, None)
    with (
        _classifier_errors_as_usage_errors(name, str(out / "features"), _encoder_kind(config)),
        _writing("--out", out, "run folder"),
    ):
        result = run_pipeline(
            args.dataset,
            out,
            config,
            name,
            params,
            seed=0 if args.seed is None else args.seed,
            execution=execution,
            cache_dir=cache_dir,
            store=args.store,
            rows=args.rows,
            progress=_tqdm_progress(not args.quiet),
            force=args.force,
            search=search,
            combine=args.combine,
            probability_folds=folds,
            step=begin,
        )
    _print_build(result.build, cache_dir)
    print(training_text(result.training, result.model))
    print(evaluation_text(result.evaluation, result.report))
    print(f"run folder: {out} (features/, model.npz, report/)")
    _warn_pairing(config, name)  # (after the work: an error stays the one line; the report says it too)
    proba = " --proba" if folds is not None else ""
    print(
        f"next, to classify new photos: classify-images predict {_shell_word(str(result.model))} PHOTO_OR_FOLDER{proba}"
    )
    return 0


def _shell_word(text: str) -> str:
    """``text`` quoted for a POSIX shell when it needs to be (a command the user can paste)."""
    import shlex

    return shlex.quote(text)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    _check_n_jobs(args.n_jobs)
    workdir = _check_folder_option("--workdir", Path(args.workdir), "demo's images, features, model and report")
    return run_demo(workdir, n_jobs=args.n_jobs, quiet=args.quiet, force=args.force)


def _add_build_features_parser(sub: argparse._SubParsersAction) -> None:
    from ..settings.defaults import DEFAULT_BATCH_SIZE
    from ..settings.protocols import PROTOCOLS

    parser = sub.add_parser(
        "build-features",
        help="folder of class folders -> cached feature set",
        description="Build a feature set (dense SIFT, codebook, spatial pyramid, normalisation) "
        "from a folder of class folders. Every stage is cached: re-running recomputes nothing, "
        "changing only pooling or normalisation reuses the codes.",
    )
    parser.add_argument("dataset", help="folder with one sub-folder of images per class")
    parser.add_argument(
        "--config",
        help=f"TOML config file, or a ready-made one by name (default: {RECOMMENDED_CONFIG}, the recommended "
        "pipeline): " + ", ".join(sorted(named_configs())),
    )
    parser.add_argument("--out", help="feature-set folder (default: feature-sets/<dataset>-<config>)")
    parser.add_argument(
        "--protocol",
        choices=sorted(PROTOCOLS),
        help="train/test split by name (overrides the config's; --train-per-class and "
        "--test-per-class override it): " + "; ".join(f"{name}: {p.description}" for name, p in PROTOCOLS.items()),
    )
    parser.add_argument(
        "--train-per-class", type=int, metavar="N", help="training images per class (overrides the config)"
    )
    parser.add_argument(
        "--test-per-class", type=int, metavar="M", help="cap on test images per class (0: all the rest)"
    )
    parser.add_argument("--seed", type=int, help="seed of the train/test split")
    parser.add_argument("--keep-background", action="store_true", help="keep Caltech-101's BACKGROUND_Google class")
    parser.add_argument(
        "--n-jobs", type=int, default=1, metavar="J", help="parallel workers for per-image stages (-1: all cores)"
    )
    parser.add_argument(
        "--cache-dir",
        help="cache folder (default: $CLASSIFY_IMAGES_CACHE, else "
        "$XDG_CACHE_HOME/classify-images, else ~/.cache/classify-images)",
    )
    parser.add_argument("--no-cache", action="store_true", help="do not cache intermediate stages")
    _add_cluster_arguments(parser)
    parser.add_argument(
        "--store",
        choices=("npy", "sharded"),
        default=None,
        help="row layout: npy (one memory-mapped file per split; the default on this machine) or "
        "sharded (row blocks the workers write themselves; the default with --scheduler/--cluster)",
    )
    parser.add_argument(
        "--rows",
        metavar="CODEC",
        default=None,
        help="how dense rows (Fisher vectors, VLAD, ...) are stored: float32 (exact), float16 "
        "(half the bytes), int8 or int4 (8- or 4-bit codes, one step per 4096 values: about 4x / 8x smaller), "
        "product-quantised with 8 or 16 dimensions per byte (32x / 64x smaller, in shards), "
        "or a registered row codec (checked by the build: the codecs load with it, not with the CLI); decoded to "
        "float32 on reading (default: int8 for Fisher vectors, whose accuracy it keeps, float32 otherwise)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="B",
        help=f"images per cluster task and rows per shard (default: {DEFAULT_BATCH_SIZE})",
    )
    _add_force_argument(parser)
    parser.set_defaults(func=cmd_build_features)


def _add_force_argument(parser: argparse.ArgumentParser, what: str = "--out") -> None:
    """``--force``: what the output guard (:mod:`.output_guard`) may replace beyond what it can prove is ours."""
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace files at {what} that classify-images cannot prove it wrote, but only those of "
        "the names this command writes: other files are never deleted, links never followed "
        "(docs/reliability.md, 'What a command may write over')",
    )


def _add_cluster_arguments(parser: argparse.ArgumentParser, shared: str = "the dataset, --out and the cache") -> None:
    """``--scheduler`` / ``--cluster``: run on a Dask cluster (needs classify-images[distributed]);
    ``shared``: what the workers must see on a shared file system."""
    parser.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="run on the Dask cluster of this scheduler (install the 'distributed' extra, e.g. "
        "pip install '.[distributed]' in a checkout); "
        f"{shared} must be on a file system every worker shares",
    )
    parser.add_argument(
        "--cluster",
        metavar="local:N",
        help="start a Dask cluster of N worker processes on this machine for this command",
    )


def _add_classifier_arguments(parser: argparse.ArgumentParser) -> None:
    """The feature set, the classifier and its parameters (``train``, ``experiment``)."""
    parser.add_argument("featureset", help="feature-set folder written by build-features")
    parser.add_argument(
        "--classifier",
        choices=sorted(CLASSIFIERS),
        help="default: the [classifier] table of the shipped config the feature set was built with "
        "(else the classifier its features call for: pmsvm for L1 histograms, linear otherwise)",
    )
    parser.add_argument(
        "--param", action="append", metavar="KEY=VALUE", help="classifier parameter, repeatable (e.g. --param C=0.01)"
    )
    _add_search_argument(parser)
    _add_combine_argument(parser)


def _add_combine_argument(parser: argparse.ArgumentParser) -> None:
    from ...classifiers.registry import COMBINE_RULES

    parser.add_argument(
        "--combine",
        choices=COMBINE_RULES,
        help="combine the channels of a multi-channel feature set ([[channel]] tables): concat "
        "(weighted, each block normalised), average (the average of the channels' kernels), "
        "mbkl (weights learnt by MBKL, non-negative channels); recorded in the model and report",
    )


def _encoder_kind(config: Any) -> str | None:
    """The encoder kind of a single-channel config (None for [[channel]] tables: several)."""
    return getattr(getattr(config, "codebook", None), "kind", None)


def _add_search_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--search",
        action="append",
        metavar="NAME=V1,V2,...",
        help="choose a classifier parameter by 3-fold stratified cross-validation on the training "
        "rows only (e.g. --search C=0.1,1,10,100; repeatable: the grids' product); the choice "
        "is recorded in the model and the report, with a warning when it is on the grid's edge",
    )


def _add_train_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "train",
        help="train a classifier on a feature set",
        description="Train a classifier on the training rows of a feature set and save it "
        "(.npz + JSON header, no pickle).",
    )
    _add_classifier_arguments(parser)
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random_state of a randomised classifier (pmsvm, mbkl, nsvm) unless --param sets it",
    )
    parser.add_argument(
        "--out",
        help="model file (default: <featureset>-<classifier>[-<params>].npz beside the "
        "feature set); an existing file is replaced only if it is a model file of ours (else --force)",
    )
    where = parser.add_argument_group("where to train (default: this machine, all rows in memory)")
    where.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="train the one-vs-rest problems in groups on a running Dask cluster (pmsvm, nsvm, linear); the "
        "workers read the feature set from its path, which they must see (a shared filesystem)",
    )
    where.add_argument("--cluster", metavar="local:N", help="the same on a local Dask cluster of N worker processes")
    where.add_argument(
        "--streaming",
        action="store_true",
        help="learn from blocks of training rows, one block in memory at a time (nsvm, linear)",
    )
    where.add_argument(
        "--block-rows", type=int, metavar="N", help=f"rows per block with --streaming (default {DEFAULT_BLOCK_ROWS})"
    )
    _add_force_argument(parser)
    proba = parser.add_argument_group("calibrated probabilities")
    proba.add_argument(
        "--probability",
        action="store_true",
        help="also fit Platt's sigmoids on held-out decision values (as LIBSVM's -b 1 and "
        "scikit-learn's CalibratedClassifierCV) and store them in the model: predict --proba, "
        "predict_proba; costs K more fits on (K-1)/K of the rows",
    )
    proba.add_argument(
        "--calibration-folds",
        type=int,
        metavar="K",
        help="folds of the held-out decision values (default 5; each class needs K training images)",
    )
    parser.set_defaults(func=cmd_train)


def _add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "evaluate",
        help="mean per-class accuracy, confusion, timings",
        description="Evaluate a model on the test rows of its feature set; writes report.html, "
        "report.json, predictions.csv, report.md and confusion.png.",
    )
    parser.add_argument("featureset", help="feature-set folder written by build-features")
    parser.add_argument("model", help="model file (.npz) written by train")
    parser.add_argument(
        "--out",
        help="report folder: report.html, report.json, predictions.csv, report.md, "
        "confusion.png (default: <model>-report)",
    )
    _add_force_argument(parser)
    parser.set_defaults(func=cmd_evaluate)


def _add_experiment_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "experiment",
        help="mean ± std over random re-splits",
        description="Re-split the stored rows with R seeds under the feature set's protocol, "
        "train and test each time, and report mean ± std of the mean per-class accuracy.",
    )
    _add_classifier_arguments(parser)
    parser.add_argument(
        "--repeats", type=int, default=5, metavar="R", help=f"number of random re-splits, 1 … {MAX_REPEATS} (default 5)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="first split seed; each run's seed is also the classifier's random_state unless --param sets it",
    )
    parser.add_argument(
        "--out",
        help="report folder: report.html, report.json, predictions.csv, experiment.json "
        "(default: <featureset>-<classifier>[-<params>]-experiment beside the feature set)",
    )
    _add_cluster_arguments(parser)
    _add_force_argument(parser)
    parser.set_defaults(func=cmd_experiment)


def _add_predict_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "predict",
        help="top-k classes of new images",
        description="Classify images with a model file alone (it holds the classifier, the "
        "codebook, the normaliser and the pipeline config). Folders are searched recursively "
        "for image files; unreadable inputs are skipped, and listed with the reason and counted on "
        "stderr (stdout holds the results only). Exit status 0 when every input was classified, "
        "1 when some could not be (the rest are printed), 2 on an error.",
    )
    parser.add_argument("model", help="model file (.npz) written by train or run")
    parser.add_argument(
        "images",
        nargs="+",
        metavar="IMAGE_OR_FOLDER",
        help="image files, or folders searched recursively for image files",
    )
    parser.add_argument("--feature-set", help="also check that the model was trained on this feature set")
    parser.add_argument("--n-jobs", type=int, default=1, help="processes for the images (-1: all cores; default 1)")
    parser.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help=f"classes shown per image (1 … n_classes; default {DEFAULT_TOP_K}, or n_classes when fewer)",
    )
    parser.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table (default), csv (path,rank,class,decision_value or probability) or json",
    )
    parser.add_argument(
        "--proba",
        action="store_true",
        help="rank by calibrated probabilities instead of decision values (a model trained with train --probability)",
    )
    _add_cluster_arguments(parser, shared="the model file and the images")
    parser.set_defaults(func=cmd_predict)


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run",
        help="build-features + train + evaluate in one command",
        description="From a folder of class folders to a report in one command: build the "
        "feature set, train the classifier and evaluate it, into OUT/features, OUT/model.npz "
        "and OUT/report. With no --config, the recommended pipeline ("
        + RECOMMENDED_CONFIG
        + "). The classifier comes from --classifier/--param or from the [classifier] "
        'table of the config (name = "pmsvm", params = { p = -8 }); --param overrides it.',
    )
    # every build-features option (the same argparse actions, so the two commands never drift apart)
    for action in sub.choices["build-features"]._actions:
        if action.dest not in ("help", "out", "seed"):
            parser._add_action(action)
    parser.add_argument("--classifier", choices=sorted(CLASSIFIERS), help="default: the config's [classifier] table")
    parser.add_argument("--param", action="append", metavar="KEY=VALUE", help="classifier parameter, repeatable")
    _add_search_argument(parser)
    _add_combine_argument(parser)
    parser.add_argument(
        "--seed", type=int, help="seed of the split (default: the config's) and of a randomised classifier (default: 0)"
    )
    parser.add_argument("--out", help="run folder (default: runs/<dataset>-<config>-<classifier>[-<params>])")
    parser.add_argument(
        "--probability",
        action="store_true",
        help="also calibrate probabilities (as train --probability), for predict --proba",
    )
    parser.add_argument(
        "--calibration-folds", type=int, metavar="K", help="folds of --probability's calibration (default 5)"
    )
    parser.set_defaults(func=cmd_run)


def _add_cache_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "cache",
        help="where the stage cache is, its size; prune or clear it",
        description="The stage cache: $CLASSIFY_IMAGES_CACHE, else $XDG_CACHE_HOME/classify-images, "
        "else ~/.cache/classify-images. 'info' prints its place and size (and the temporary files "
        "writers killed in the middle of a write left); 'prune' deletes those temporary files only "
        "(a live writer's are kept); 'clear' deletes what classify-images cached there (nothing else).",
    )
    parser.add_argument("action", choices=("info", "prune", "clear"))
    parser.add_argument("--cache-dir", help="cache folder (default: as above)")
    parser.set_defaults(func=cmd_cache)


def _add_demo_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "demo",
        help="build, train and evaluate on scikit-learn's bundled digits",
        description="Write scikit-learn's handwritten digits as an image folder and run "
        "build-features -> train -> evaluate on it (about a minute).",
    )
    parser.add_argument(
        "--workdir", default="classify-images-demo", help="where to write images, features, model, report"
    )
    parser.add_argument("--n-jobs", type=int, default=2)
    _add_force_argument(parser, "--workdir")
    parser.set_defaults(func=cmd_demo)


_QUIET_HELP = "warnings and errors only on stderr: no steps, no progress bars"
_VERBOSE_HELP = (
    "details on stderr too (iterations, timings); the steps and progress bars (on a terminal) are shown by default"
)
_THREADS_HELP = (
    "threads of the BLAS / OpenMP pools of this process (default: the libraries' own; "
    "1 is often fastest on a machine busy with other jobs). Parallel workers: --n-jobs, --param n_jobs="
)


def _version() -> str:
    from ... import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="classify-images",
        description="Classic image classification: dense SIFT -> codebook -> spatial pyramid -> "
        "PmSVM / MBKL / HIK nSVM / linear L-BFGS SVM.",
        epilog="Run 'classify-images demo' for a complete example on bundled data.",
    )
    parser.add_argument("--version", action="version", version=f"classify-images {_version()}")
    parser.add_argument("--threads", type=int, metavar="T", help=_THREADS_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=_QUIET_HELP)
    parser.add_argument("-v", "--verbose", action="count", default=0, help=_VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    _add_build_features_parser(sub)
    _add_train_parser(sub)
    _add_evaluate_parser(sub)
    _add_experiment_parser(sub)
    _add_predict_parser(sub)
    _add_run_parser(sub)
    _add_cache_parser(sub)
    _add_demo_parser(sub)
    for command in sub.choices.values():  # --threads, -q, -v before or after the command
        command.add_argument("--threads", type=int, metavar="T", default=argparse.SUPPRESS, help=_THREADS_HELP)
        command.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=_QUIET_HELP)
        command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=_VERBOSE_HELP)
    return parser


def _thread_limits(threads: int | None):
    """Context limiting the BLAS / OpenMP thread pools to ``threads`` (no limit: ``None``)."""
    if threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads)


@contextlib.contextmanager
def _one_line_warnings(command: str):
    """Warnings printed as one line each, ``classify-images COMMAND: warning: …`` (no file path or
    source line of a library's internals), while the command runs."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"classify-images {command}: warning: {_one_line(str(message))}", file=file or sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _one_line(message: str) -> str:
    """``message`` with line breaks and other unprintable characters escaped (a value read
    from a file may hold any of them)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def _os_error_text(exc: OSError) -> str:
    """One line for an error of the operating system, with what to do about a full disk."""
    what = exc.strerror or str(exc).splitlines()[0] or type(exc).__name__
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in DISK_FULL_ERRNOS:
        return (
            f"{what}{where}: free some space (or choose another --out / --cache-dir) and re-run; nothing was replaced"
        )
    return f"{what}{where}"


#: The commands that encode images one after another, whose per-image buffers glibc should keep
#: for the next image (:func:`~classify_images.pipeline.execution.allocator.reuse_freed_memory`).
#: The others (``train``, ``evaluate``, ``experiment``, ``cache``) hold feature rows and Gram
#: matrices and return their freed blocks instead
#: (:func:`~classify_images.pipeline.execution.allocator.return_freed_memory`).
ENCODING_COMMANDS = frozenset({"build-features", "predict", "run", "demo"})


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``classify-images`` console script."""
    for stream in (sys.stdout, sys.stderr):  # file names that are not valid UTF-8 print escaped
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        print(f"classify-images: error: --threads must be at least 1, not {args.threads}", file=sys.stderr)
        return 2
    from ..._log import cli_logging

    try:
        with (
            _one_line_warnings(args.command),
            cli_logging(-1 if args.quiet else args.verbose, args.command),
        ):
            _bound_resources(args)
            if args.command in ENCODING_COMMANDS:
                reuse_freed_memory()  # per-image buffers reused, not re-mapped (execution/allocator.py)
            else:
                return_freed_memory()  # freed blocks returned, not kept beside the rows
            with _thread_limits(args.threads):
                status = int(args.func(args) or 0)
            sys.stdout.flush()  # a reader gone (``| head``) is met here, not in the interpreter's exit
            return status
    except BrokenPipeError:  # the reader of the output stopped reading: as a shell tool, end quietly
        _silence_stdout()
        return 128 + 13  # (the status of a process SIGPIPE ends)
    except USER_ERRORS as exc:
        print(f"classify-images {args.command}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:  # the system's refusal (full disk, permissions, …): one line, no traceback
        print(f"classify-images {args.command}: error: {_one_line(_os_error_text(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"classify-images {args.command}: interrupted (completed stages are cached; re-run to resume)",
            file=sys.stderr,
        )
        return 130
    except Exception:
        import traceback

        traceback.print_exc()
        print(
            f"classify-images {args.command}: internal error: this is a bug in classify-images "
            f"{_package_version()}; please report it with the traceback above",
            file=sys.stderr,
        )
        return 1


def _check_combine_before_build(rule: str | None, config, classifier: str, config_path: str | None) -> None:
    """``run --combine``: what can be refused from the config alone (one channel, an unknown rule,
    ``mbkl`` with another classifier), refused before the build rather than after it."""
    if rule is None:
        return
    from ...classifiers.combination import COMBINE_RULES
    from ..settings.config import ChannelsConfig

    if rule not in COMBINE_RULES:
        raise UsageError(f"--combine {rule!r}: allowed values are {', '.join(COMBINE_RULES)}")
    if not isinstance(config, ChannelsConfig):
        raise UsageError(
            f"--combine {rule}: the config {config_path or '(default)'} has a single channel; give a config "
            "with [[channel]] tables, or drop --combine"
        )
    if rule == "mbkl" and classifier != "mbkl":
        raise UsageError(
            f"--combine mbkl learns the channel weights with MBKL: use --classifier mbkl, not {classifier!r}"
        )


def _silence_stdout() -> None:
    """Point standard output at ``/dev/null``: what is still buffered for a reader that is gone is
    dropped, instead of a second broken pipe when the interpreter flushes it at exit."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _bound_resources(args: argparse.Namespace) -> None:
    """Every count of workers, threads and images per task the options give, bounded by the cores
    this process may use (:mod:`~classify_images.pipeline.execution.limits`) before any work: clamped
    with one warning line.  (``--param`` / ``--search n_jobs=`` are refused where they are parsed.)"""
    if getattr(args, "n_jobs", None) is not None:
        args.n_jobs = bounded_workers(args.n_jobs, "--n-jobs")
    if getattr(args, "threads", None) is not None:
        args.threads = bounded_workers(args.threads, "--threads")
    cluster = getattr(args, "cluster", None)
    if isinstance(cluster, str) and cluster.strip().startswith("local:") and cluster.strip()[6:].isdigit():
        args.cluster = f"local:{bounded_workers(int(cluster.strip()[6:]), '--cluster local:N, N =')}"
    if getattr(args, "batch_size", None) is not None and args.batch_size > MAX_BATCH_SIZE:
        import warnings

        warnings.warn(
            f"--batch-size {args.batch_size} is more than {MAX_BATCH_SIZE} images per task: using that", stacklevel=2
        )
        args.batch_size = MAX_BATCH_SIZE


def _package_version() -> str:
    from ... import __version__

    return __version__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
