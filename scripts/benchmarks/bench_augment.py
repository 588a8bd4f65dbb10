"""Flips (``[augment]``, issue 23 point 3): gain and cost, paired per split.

Reads a feature set built with ``[augment]`` (its mirrored rows stored beside the rows) and, for
each seed, re-splits the stored rows as ``experiment`` does
(:func:`~classify_images.pipeline.settings.dataset.split_indices` under the feature set's protocol; each
image's mirror follows it: :meth:`FeatureSet.pooled_rows`), then compares,
on the same split and with the same C:

* ``off``         — trained on the training rows, tested on the test rows;
* ``train``       — trained on the training rows and their mirrors (``flip_train = true``);
* ``train+test``  — the same model, the decision values of each test image and of its mirror
  averaged (``flip_test = "average"``).

C is chosen by ``--search`` (3-fold CV, :func:`~classify_images.pipeline.training.evaluation.train_classifier`)
on the unflipped training rows, as ``train`` / ``experiment`` do with ``[augment]``, so one search
per split serves all three.  The build's cost (the mirrors' encoding) is read from the two
feature sets' manifests (``--plain``: the feature set without mirrors, for its timings and bytes).
With ``--check-product`` the ``train+test`` accuracies are checked against ``run_experiment`` on the
feature set (the product's path) — cheap only on small feature sets.

::

    python benchmarks/bench_augment.py FEATURESET --plain PLAIN_FEATURESET --seeds 0 1 2 --json out.json

Results: docs/benchmarks/augmentation.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, write_json

from classify_images.pipeline.extraction.augment import averaged_decision_function
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import (
    experiment_split,
    mean_per_class_accuracy,
    run_experiment,
    train_classifier,
)

#: The C grid searched (``--search C=...``).
DEFAULT_GRID = [0.1, 1.0, 10.0, 100.0]
#: Test rows scored at a time (bounded memory on 1 MB rows).
TEST_BLOCK = 512


def _scores(estimator, fs, index: np.ndarray, average: bool) -> np.ndarray:
    """Decision values of the pooled rows ``index`` (averaged with their mirrors'), block by block."""
    blocks = []
    for start in range(0, index.size, TEST_BLOCK):
        part = index[start : start + TEST_BLOCK]
        mirrors = fs.pooled_rows(part, mirrored=True) if average else None
        blocks.append(averaged_decision_function(estimator, fs.pooled_rows(part), mirrors))
    return np.concatenate(blocks)


def _accuracy(estimator, scores: np.ndarray, class_names: list[str], y: np.ndarray) -> float:
    columns = np.array([class_names.index(str(c)) for c in estimator.classes_])
    return float(mean_per_class_accuracy(y, columns[np.argmax(scores, axis=1)]))


def run_split(fs, seed: int, grid: list[float]) -> dict:
    """The three variants on the split of ``seed``: accuracies, C, train and test seconds."""
    y_all = np.concatenate([fs.y_train, fs.y_test])
    train, test = experiment_split(fs, seed)  # the split `experiment` draws for this seed
    names = fs.class_names
    X = fs.pooled_rows(train)
    cpu = time.process_time()
    plain = train_classifier("linear", {}, X, y_all[train], seed=seed, class_names=names, search={"C": grid})
    plain_cpu = time.process_time() - cpu
    C = plain.search["best"]["C"]
    # the rows and their mirrors in one array, as train_classifier(..., mirrored=True) takes them, so that
    # the unstacked copies are freed before the fit (1.5 GB each on 15-Scenes Fisher vectors)
    X = np.concatenate([X, fs.pooled_rows(train, mirrored=True)])
    cpu = time.process_time()
    flipped = train_classifier(
        "linear", {"C": C}, X, np.concatenate([y_all[train], y_all[train]]), seed=seed, class_names=names
    )
    flipped_cpu = time.process_time() - cpu
    del X
    result = {
        "seed": seed,
        "C": C,
        "search_seconds": plain.search["seconds"],
        "n_train": int(train.size),
        "n_test": int(test.size),
    }
    for name, training, average, train_cpu in (
        ("off", plain, False, plain_cpu),
        ("train", flipped, False, flipped_cpu),
        ("train+test", flipped, True, flipped_cpu),
    ):
        start, cpu = time.perf_counter(), time.process_time()
        scores = _scores(training.estimator, fs, test, average)
        result[name] = {
            "accuracy": _accuracy(training.estimator, scores, names, y_all[test]),
            "train_seconds": training.train_seconds,
            "train_cpu_seconds_with_search": train_cpu,
            "test_seconds": time.perf_counter() - start,
            "test_cpu_seconds": time.process_time() - cpu,
        }
    return result


def _build_cost(fs, plain_path: str | None) -> dict:
    """Bytes of the rows and mirrors; the build's timings (and the plain build's, when given)."""
    folder = Path(fs.path)
    cost = {
        "rows_bytes": sum((folder / f"X_{p}.npy").stat().st_size for p in ("train", "test")),
        "mirror_bytes": sum((folder / f"X_{p}_flip.npy").stat().st_size for p in ("train", "test")),
        "timings": fs.manifest["timings"],
    }
    if plain_path:
        cost["plain_timings"] = load_feature_set(plain_path).manifest["timings"]
    return cost


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("featureset", help="a feature set built with [augment] (mirrored rows stored)")
    parser.add_argument("--json")
    parser.add_argument("--plain", help="the same feature set built without [augment] (its build timings)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--grid", type=float, nargs="+", default=DEFAULT_GRID)
    parser.add_argument(
        "--check-product",
        action="store_true",
        help="also run run_experiment (the product's path) and compare its accuracies",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    machine = announce_machine()
    fs = load_feature_set(args.featureset)
    fs.mirrors("train", "bench_augment")  # a one-line error without mirrors
    runs = []
    for seed in args.seeds:
        run = run_split(fs, seed, args.grid)
        runs.append(run)
        print(
            f"seed {seed}: C = {run['C']:g}; "
            + ", ".join(
                f"{name} {100 * run[name]['accuracy']:.2f} % (train {run[name]['train_seconds']:.1f} s, "
                f"test {run[name]['test_seconds']:.1f} s)"
                for name in ("off", "train", "train+test")
            ),
            flush=True,
        )
    summary = {}
    for name in ("off", "train", "train+test"):
        accuracies = np.array([run[name]["accuracy"] for run in runs])
        gains = accuracies - np.array([run["off"]["accuracy"] for run in runs])
        summary[name] = {
            "mean": float(accuracies.mean()),
            "std": float(accuracies.std()),
            "paired_gain_mean": float(gains.mean()),
            "paired_gains": gains.tolist(),
        }
        print(
            f"{name:>10}: {100 * accuracies.mean():.2f} ± {100 * accuracies.std():.2f} %, paired gain "
            f"{100 * gains.mean():+.2f} points ({', '.join(f'{100 * g:+.2f}' for g in gains)})"
        )
    if args.check_product:
        experiment = run_experiment(
            fs, "linear", {}, 1, first_seed=args.seeds[0], search={"C": args.grid}, choose_flips=False
        )
        product = experiment.runs[0].mean_per_class_accuracy
        expected = runs[0]["train+test" if fs.config.augment.flip_test == "average" else "train"]["accuracy"]
        summary["product_check"] = {"run_experiment": product, "bench": expected}
        print(
            f"run_experiment (the feature set's [augment]) on seed {args.seeds[0]}: {100 * product:.2f} % "
            f"(bench {100 * expected:.2f} %)"
        )
    cost = _build_cost(fs, args.plain)
    print(
        f"stored: rows {cost['rows_bytes'] / 1e9:.2f} GB + mirrors {cost['mirror_bytes'] / 1e9:.2f} GB; "
        f"build timings {cost['timings']}"
    )
    payload = {
        "command": ["python", *sys.argv],
        "machine": machine,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "featureset": args.featureset,
        "runs": runs,
        "summary": summary,
        "cost": cost,
    }
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
