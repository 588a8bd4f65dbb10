"""Grey against colour dense SIFT (``[sift] color``) on one split, side by side in one run.

Builds one feature set per colour space from the same config and split (cold: one new stage cache
whose image checks, the same for every colour space, are computed by the first build only),
timing each build (wall and CPU seconds of this process; the descriptor-dependent steps sample +
codebook + encode from the build's own timings, compared across colour spaces), then trains the
linear squared-hinge SVM with C chosen by 3-fold stratified CV on the training rows and reports
the mean per-class accuracy on the test rows::

    python benchmarks/bench_colour.py ../shared/datasets/scene15 --config fisher \\
        --train-per-class 30 --test-per-class 30 --size 64 --colors gray opponent \\
        --workdir bench-colour --json docs/benchmarks/colour-subset.json

Results: docs/benchmarks/colour.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from _bench_utils import LINEAR_C_GRID, announce_machine, scaled_C_grid, select_by_cv, write_json

from classify_images.classifiers import QuadraticHingeSVC
from classify_images.pipeline.extraction.build import build_feature_set
from classify_images.pipeline.settings.config import load_config
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import mean_per_class_accuracy

#: The build steps that compute descriptors (compared across colour spaces; the image checks are shared).
DESCRIPTOR_STEPS = ("sample", "codebook", "encode+pool")


def overrides(args: argparse.Namespace, color: str) -> dict:
    """The command line's changes to the config for one colour space."""
    codebook = {"size": args.size, "n_samples": args.n_samples}
    if args.pca_dims is not None:
        codebook["pca_dims"] = args.pca_dims
    sift = {"color": color} if args.step is None else {"color": color, "step": args.step}
    return {
        "dataset": {"train_per_class": args.train_per_class, "test_per_class": args.test_per_class, "seed": args.seed},
        "sift": sift,
        "codebook": {k: v for k, v in codebook.items() if v is not None},
    }


def classify(feature_set, seed: int) -> dict:
    """Linear SVM, C by 3-fold CV on the training rows; accuracy on the test rows."""
    X_train, y_train = np.asarray(feature_set.X_train), np.asarray(feature_set.y_train)
    X_test, y_test = np.asarray(feature_set.X_test), np.asarray(feature_set.y_test)
    grid = scaled_C_grid(X_train, LINEAR_C_GRID)

    def fit_score(C, train, valid):
        model = QuadraticHingeSVC(C=C).fit(X_train[train], y_train[train])
        return mean_per_class_accuracy(y_train[valid], model.predict(X_train[valid]))

    start = time.perf_counter()
    C, scores = select_by_cv(fit_score, grid, y_train, folds=3, seed=seed)
    model = QuadraticHingeSVC(C=C).fit(X_train, y_train)
    accuracy = mean_per_class_accuracy(y_test, model.predict(X_test))
    return {
        "C": C,
        "C_on_grid_edge": C in (grid[0], grid[-1]),
        "cv_scores": {str(k): v for k, v in scores.items()},
        "accuracy": float(accuracy),
        "classify_seconds": time.perf_counter() - start,
        "n_train": int(X_train.shape[0]),
        "n_test": int(X_test.shape[0]),
        "n_features": int(X_train.shape[1]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--config", default="fisher")
    parser.add_argument("--colors", nargs="+", default=["gray", "opponent"])
    parser.add_argument("--train-per-class", type=int, default=30)
    parser.add_argument("--test-per-class", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, help="codebook.size (default: the config's)")
    parser.add_argument("--n-samples", type=int, help="codebook.n_samples (default: the config's)")
    parser.add_argument("--pca-dims", type=int, help="codebook.pca_dims (Fisher; default: the config's)")
    parser.add_argument("--step", type=int, help="sift.step (default: the config's)")
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--workdir", default="bench-colour", help="feature sets and the stage cache (replaced)")
    parser.add_argument(
        "--reuse-checks",
        action="store_true",
        help="keep WORKDIR/cache from an earlier run (its image checks; delete its other stages first)",
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    machine = announce_machine()
    print(f"n_jobs={args.n_jobs}", flush=True)
    work = Path(args.workdir)
    # One stage cache for every colour space: the image checks (which do not depend on the
    # descriptor) are computed once; every descriptor-dependent stage has its own entries.
    cache = work / "cache"
    if not args.reuse_checks:
        shutil.rmtree(cache, ignore_errors=True)
    results = {}
    for color in args.colors:
        config = load_config(args.config, overrides(args, color))
        out = work / f"fs-{color}"
        shutil.rmtree(out, ignore_errors=True)
        wall, cpu = time.perf_counter(), time.process_time()
        built = build_feature_set(args.dataset, out, config, n_jobs=args.n_jobs, cache_dir=cache)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        descriptor_stages = sum(built.timings.get(step, 0.0) for step in DESCRIPTOR_STEPS)
        result = {
            "build_wall_seconds": wall,
            "build_cpu_seconds_this_process": cpu,
            "timings": built.timings,
            "descriptor_stages_seconds": descriptor_stages,
            **classify(load_feature_set(out), args.seed),
        }
        results[color] = result
        print(
            f"{color:>9}: {100 * result['accuracy']:.2f} % (C = {result['C']:.3g}{', grid edge' if result['C_on_grid_edge'] else ''}), "
            f"build {wall:.0f} s wall / {cpu:.0f} s CPU (sample + codebook + encode {descriptor_stages:.0f} s), "
            f"{result['n_features']} dims, {result['n_train']} train / {result['n_test']} test rows",
            flush=True,
        )
    if "gray" in results:
        for color, result in results.items():
            if color != "gray":
                print(
                    f"{color} - gray: {100 * (result['accuracy'] - results['gray']['accuracy']):+.2f} points; "
                    f"sample + codebook + encode time x"
                    f"{result['descriptor_stages_seconds'] / results['gray']['descriptor_stages_seconds']:.2f}"
                )
    write_json(
        args.json,
        {
            "command": sys.argv,
            "machine": machine,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "args": vars(args),
            "results": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
