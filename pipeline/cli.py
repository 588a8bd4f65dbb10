"""The ``classify-images`` command line.

Sub-commands::

    classify-images build-features DATASET [--config FILE] [--out DIR] ...
    classify-images train FEATURESET --classifier NAME [--param key=value ...] [--out FILE]
    classify-images evaluate FEATURESET MODEL [--out DIR]
    classify-images experiment FEATURESET --classifier NAME --repeats R [--param ...]
    classify-images predict MODEL IMAGE... [--top-k K]
    classify-images demo [--workdir DIR]

A user's mistake (missing folder, bad config key, model for another feature
set, …) ends with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from ..classifiers.base import NegativeFeaturesError
from ..classifiers.registry import CLASSIFIERS, ClassifierParameterError, parse_param
from .config import ConfigError, load_config, named_configs
from .dataset import DatasetError
from .feature_store import FeatureSetError, load_feature_set
from .model_file import ModelFileError, check_model_matches, load_model, save_model
from .progress import tqdm_progress as _tqdm_progress

__all__ = ["main", "build_parser"]

USER_ERRORS = (ConfigError, DatasetError, FeatureSetError, ModelFileError, ClassifierParameterError)


class UsageError(ValueError):
    """A bad command-line value (one-line error)."""


def _params(pairs: list[str] | None) -> dict[str, Any]:
    return dict(parse_param(pair) for pair in pairs or [])


def _default_feature_out(dataset: Path, config_name: str) -> Path:
    return Path("feature-sets") / f"{dataset.resolve().name}-{config_name}"


def cmd_build_features(args: argparse.Namespace) -> int:
    from .build import build_feature_set, default_cache_dir
    from .report import build_text

    overrides = {
        "dataset": {
            "train_per_class": args.train_per_class,
            "test_per_class": args.test_per_class,
            "seed": args.seed,
            "keep_background": True if args.keep_background else None,
        }
    }
    config = load_config(args.config, overrides)
    config_name = Path(args.config).stem if args.config else "default"
    out = Path(args.out) if args.out else _default_feature_out(Path(args.dataset), config_name)
    cache_dir = None if args.no_cache else (args.cache_dir or default_cache_dir())
    result = build_feature_set(
        args.dataset, out, config, n_jobs=args.n_jobs, cache_dir=cache_dir,
        progress=_tqdm_progress(not args.quiet), log=lambda m: print(m, file=sys.stderr) if not args.quiet else None,
    )
    manifest = load_feature_set(result.path).manifest
    print(build_text(result, manifest["skipped"], result.timings if result.reused else manifest["timings"]))
    return 0


def _default_model_out(feature_set: Path, classifier: str) -> Path:
    return feature_set.parent / f"{feature_set.name}-{classifier}.npz"


def _default_experiment_out(feature_set: Path, classifier: str) -> Path:
    return feature_set.parent / f"{feature_set.name}-{classifier}-experiment"


@contextlib.contextmanager
def _classifier_errors_as_usage_errors(name: str, featureset: str):
    """Errors of a classifier that are the user's to fix, as one line instead of a traceback:
    a ``--param`` value outside the estimator's constraints, or signed features given to an
    additive-kernel classifier (PmSVM, HIK nSVM; signed features come from max pooling of
    signed sparse codes, for example)."""
    from ..classifiers._compat import InvalidParameterError

    try:
        yield
    except InvalidParameterError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    except NegativeFeaturesError:
        raise UsageError(
            f"classifier {name!r} needs non-negative features, but {featureset} has negative values: "
            "rebuild it with pooling method 'abs' or 'average', or use --classifier linear"
        ) from None


def cmd_train(args: argparse.Namespace) -> int:
    import numpy as np

    from .evaluation import train_classifier
    from .report import training_text

    feature_set = load_feature_set(args.featureset)
    params = _params(args.param)
    with _classifier_errors_as_usage_errors(args.classifier, args.featureset):
        training = train_classifier(
            args.classifier, params, np.asarray(feature_set.X_train), feature_set.y_train, seed=args.seed
        )
    out = Path(args.out) if args.out else _default_model_out(Path(args.featureset), args.classifier)
    path = save_model(out, training.estimator, feature_set=feature_set.identity(), train_seconds=training.train_seconds)
    print(training_text(training, path))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluation import evaluate_model
    from .report import evaluation_text, write_report

    feature_set = load_feature_set(args.featureset)
    model, meta = load_model(args.model)
    evaluation = evaluate_model(model, meta, feature_set)
    out = Path(args.out) if args.out else Path(args.model).with_suffix("").with_name(Path(args.model).stem + "-report")
    write_report(evaluation, out)
    print(evaluation_text(evaluation, out))
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from .evaluation import run_experiment
    from .report import experiment_text, write_experiment, write_report

    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    feature_set = load_feature_set(args.featureset)
    params = _params(args.param)
    with _classifier_errors_as_usage_errors(args.classifier, args.featureset):
        experiment = run_experiment(feature_set, args.classifier, params, args.repeats, first_seed=args.seed)
    out = Path(args.out) if args.out else _default_experiment_out(Path(args.featureset), args.classifier)
    write_experiment(experiment, out)
    write_report(experiment.first, out, experiment=experiment)
    print(experiment_text(experiment))
    print(f"  report: {out / 'report.html'}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    import numpy as np

    from .extractor import FeatureExtractor

    model, meta = load_model(args.model)
    fs_path = args.feature_set or meta.get("feature_set", {}).get("path")
    if not fs_path:
        raise UsageError("the model does not record its feature set: pass --feature-set DIR")
    feature_set = load_feature_set(fs_path)
    check_model_matches(meta, config_hash=feature_set.config_hash, n_features=feature_set.n_features)
    X, status = FeatureExtractor.from_feature_set(feature_set).transform_images(args.images)
    scores = model.decision_function(X) if X.shape[0] else np.zeros((0, len(model.classes_)))
    if scores.ndim == 1:
        scores = np.stack([-scores, scores], axis=1)
    names = feature_set.class_names
    row = 0
    for entry in status:
        if not entry["ok"]:
            print(f"{entry['path']}: skipped ({entry['reason']})")
            continue
        order = np.argsort(-scores[row])[: args.top_k]
        ranked = ", ".join(f"{names[int(model.classes_[k])]} ({scores[row, k]:+.3f})" for k in order)
        print(f"{entry['path']}: {ranked}")
        row += 1
    return 0 if row else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(Path(args.workdir), n_jobs=args.n_jobs, quiet=args.quiet)


def _add_build_features_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("build-features", help="folder of class folders -> cached feature set",
                            description="Build a feature set (dense SIFT, codebook, spatial pyramid, normalisation) "
                            "from a folder of class folders. Every stage is cached: re-running recomputes nothing, "
                            "changing only pooling or normalisation reuses the codes.")
    parser.add_argument("dataset", help="folder with one sub-folder of images per class")
    parser.add_argument("--config", help="TOML config file, or a ready-made one by name: " + ", ".join(sorted(named_configs())))
    parser.add_argument("--out", help="feature-set folder (default: feature-sets/<dataset>-<config>)")
    parser.add_argument("--train-per-class", type=int, metavar="N", help="training images per class (overrides the config)")
    parser.add_argument("--test-per-class", type=int, metavar="M", help="cap on test images per class (0: all the rest)")
    parser.add_argument("--seed", type=int, help="seed of the train/test split")
    parser.add_argument("--keep-background", action="store_true", help="keep Caltech-101's BACKGROUND_Google class")
    parser.add_argument("--n-jobs", type=int, default=1, metavar="J", help="parallel workers for per-image stages (-1: all cores)")
    parser.add_argument("--cache-dir", help="cache folder (default: $CLASSIFY_IMAGES_CACHE or ~/.cache/classify-images)")
    parser.add_argument("--no-cache", action="store_true", help="do not cache intermediate stages")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=cmd_build_features)


def _add_classifier_arguments(parser: argparse.ArgumentParser) -> None:
    """The feature set, the classifier and its parameters (``train``, ``experiment``)."""
    parser.add_argument("featureset")
    parser.add_argument("--classifier", required=True, choices=sorted(CLASSIFIERS))
    parser.add_argument("--param", action="append", metavar="KEY=VALUE", help="classifier parameter, repeatable (e.g. --param C=0.01)")


def _add_train_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("train", help="train a classifier on a feature set",
                            description="Train a classifier on the training rows of a feature set and save it "
                            "(.npz + JSON header, no pickle).")
    _add_classifier_arguments(parser)
    parser.add_argument("--seed", type=int, default=0,
                        help="random_state of a randomised classifier (pmsvm, mbkl, nsvm) unless --param sets it")
    parser.add_argument("--out", help="model file (default: <featureset>-<classifier>.npz beside the feature set)")
    parser.set_defaults(func=cmd_train)


def _add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("evaluate", help="mean per-class accuracy, confusion, timings",
                            description="Evaluate a model on the test rows of its feature set; writes report.json, "
                            "report.md and confusion.png.")
    parser.add_argument("featureset")
    parser.add_argument("model")
    parser.add_argument("--out", help="report folder: report.html, report.json, predictions.csv, report.md, "
                        "confusion.png (default: <model>-report)")
    parser.set_defaults(func=cmd_evaluate)


def _add_experiment_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("experiment", help="mean ± std over random re-splits",
                            description="Re-split the stored rows with R seeds under the feature set's protocol, "
                            "train and test each time, and report mean ± std of the mean per-class accuracy.")
    _add_classifier_arguments(parser)
    parser.add_argument("--repeats", type=int, default=5, metavar="R")
    parser.add_argument("--seed", type=int, default=0,
                        help="first split seed; each run's seed is also the classifier's random_state unless --param sets it")
    parser.add_argument("--out", help="report folder: report.html, report.json, predictions.csv, experiment.json "
                        "(default: <featureset>-<classifier>-experiment beside the feature set)")
    parser.set_defaults(func=cmd_experiment)


def _add_predict_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("predict", help="top-k classes of new images",
                            description="Classify new images with a model, using the preprocessing and codebook "
                            "recorded with its feature set.")
    parser.add_argument("model")
    parser.add_argument("images", nargs="+", metavar="IMAGE")
    parser.add_argument("--feature-set", help="feature set the model was trained on (default: the path it recorded)")
    parser.add_argument("--top-k", type=int, default=3)
    parser.set_defaults(func=cmd_predict)


def _add_demo_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="build, train and evaluate on scikit-learn's bundled digits",
                            description="Write scikit-learn's handwritten digits as an image folder and run "
                            "build-features -> train -> evaluate on it (about a minute).")
    parser.add_argument("--workdir", default="classify-images-demo", help="where to write images, features, model, report")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.set_defaults(func=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="classify-images",
        description="Classic image classification: dense SIFT -> codebook -> spatial pyramid -> "
        "PmSVM / MBKL / HIK nSVM / linear L-BFGS SVM.",
        epilog="Run 'classify-images demo' for a complete example on bundled data.",
    )
    parser.add_argument(
        "--threads", type=int, metavar="T",
        help="threads of the BLAS / OpenMP pools of this process (default: the libraries' own; "
        "1 is often fastest on a machine busy with other jobs). Parallel workers: --n-jobs, --param n_jobs=",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    _add_build_features_parser(sub)
    _add_train_parser(sub)
    _add_evaluate_parser(sub)
    _add_experiment_parser(sub)
    _add_predict_parser(sub)
    _add_demo_parser(sub)
    return parser


def _thread_limits(threads: int | None):
    """Context limiting the BLAS / OpenMP thread pools to ``threads`` (no limit: ``None``)."""
    if threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``classify-images`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        print(f"classify-images: error: --threads must be at least 1, not {args.threads}", file=sys.stderr)
        return 2
    try:
        with _thread_limits(args.threads):
            return int(args.func(args) or 0)
    except (*USER_ERRORS, UsageError) as exc:
        print(f"classify-images {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"classify-images {args.command}: interrupted (completed stages are cached; re-run to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
