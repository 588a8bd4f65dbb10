"""Feature combination on real channels: each single channel against each combination rule, paired per split.

The channels are feature sets of the *same images* (checked: the same image list; their stored
order may differ, rows are matched by path), e.g. the grey Fisher vectors and the ScSPM codes
of 15-Scenes.  For every seeded split of ``experiment`` (the pooled stored rows re-split by
:func:`~classify_images.pipeline.settings.dataset.split_indices`, seeds ``--seeds``) and every variant —
each channel alone (its rows as stored, as ``experiment`` trains on them), and the rules of
:mod:`~classify_images.classifiers.combination` (``concat``, ``average``; ``mbkl`` over the
non-negative channels when there are two or more) — the classifier's ``C`` is chosen by
``--search`` (stratified 3-fold cross-validation on the split's training rows,
:func:`~classify_images.pipeline.training.evaluation.train_classifier`: no hand-set C) and the mean
per-class accuracy is measured on the split's test rows.  Rows are read from the memory-mapped
feature sets by index, one split's training rows and a block of test rows at a time (never the
pooled multi-channel matrix).

``--method gram`` (the default; the linear SVM only) computes each channel's pooled Gram matrix
``K_c = X_c X_cᵀ`` once (float32 blocks of columns summed in float64; saved under ``--gram-dir``),
and every linear variant's kernel from them — as stored ``K_c``, ``concat``
``Σ w_c² K̂_c``, ``average`` ``Σ β_c K̂_c`` with ``K̂_c(i, j) = K_c(i, j) / √(K_c(i, i) K_c(j, j))``
(:mod:`~classify_images.classifiers.combination`) — then, per split, trains on the training rows
in the eigenbasis of their span (``Z_T = U diag(λ)^{1/2}``, test rows ``K_HT U diag(λ)^{-1/2}``:
:func:`~classify_images.classifiers.model_selection._fold_coordinates`).  The squared-hinge
objective sees ``W`` only through ``‖W‖²`` and ``X W``, so this is the same classifier as on the
rows, and the search's folds are the same (the test checks both methods agree); it saves
computing a 1500 × 1500 Gram matrix of Fisher vectors for every variant and split.
``--method rows`` trains on the combined rows themselves (:func:`train_classifier`)::

    python benchmarks/bench_combination.py --channel fv=feature-sets/scene15-fisher \\
        --channel scspm=feature-sets/scene15-scspm --seeds 0,1,2 --json combination.json

Results: docs/benchmarks/combination.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from dataclasses import dataclass

import numpy as np
from _bench_utils import announce_machine, write_json

from classify_images.classifiers.combination import COMBINE_RULES, Channel, combine_rows
from classify_images.pipeline.settings.dataset import split_indices
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import mean_per_class_accuracy, train_classifier

#: Test rows read, combined and classified at a time.
TEST_BLOCK = 512


@dataclass
class ChannelRows:
    """The pooled rows (stored training rows, then test rows, of the first channel's order) of several
    aligned feature sets, read by index."""

    names: list[str]
    sets: list
    orders: list[np.ndarray]  #: per channel, the stored pooled index of each pooled row
    labels: np.ndarray
    class_names: list[str]
    channels: tuple[Channel, ...]
    train_per_class: int
    test_per_class: int | None

    @classmethod
    def open(cls, specs: list[tuple[str, str, float]]) -> ChannelRows:
        sets = [load_feature_set(path) for _, path, _ in specs]
        pooled = [fs.train_paths + fs.test_paths for fs in sets]
        first = {path: k for k, path in enumerate(pooled[0])}
        orders = []
        for (name, path, _), paths in zip(specs, pooled):
            if sorted(paths) != sorted(pooled[0]) or sets[0].class_names != sets[len(orders)].class_names:
                raise SystemExit(f"error: channel {name} ({path}) holds other images or classes than {specs[0][1]}")
            order = np.empty(len(paths), dtype=np.int64)
            order[[first[p] for p in paths]] = np.arange(len(paths))
            orders.append(order)
        labels = np.concatenate([sets[0].y_train, sets[0].y_test]).astype(np.int64)
        channels, offset = [], 0
        for (name, _, weight), fs in zip(specs, sets):
            sample = np.asarray(fs.X_train[: min(256, fs.X_train.shape[0])])
            channels.append(Channel(name, offset, fs.n_features, bool((sample < 0).any()), weight))
            offset += fs.n_features
        split = sets[0].manifest["split"]
        return cls(
            [s[0] for s in specs],
            sets,
            orders,
            labels,
            sets[0].class_names,
            tuple(channels),
            int(split["train_per_class"]),
            split["test_per_class"],
        )

    def rows(self, index: np.ndarray, names: list[str]) -> np.ndarray:
        """Rows ``index`` (pooled order) of the channels ``names``, side by side (float32)."""
        picked = [k for k, name in enumerate(self.names) if name in names]
        out = np.empty((index.size, sum(self.sets[k].n_features for k in picked)), dtype=np.float32)
        column = 0
        for k in picked:
            fs, stored = self.sets[k], self.orders[k][index]
            n_train, width = fs.X_train.shape[0], fs.n_features
            train, test = stored < n_train, stored >= n_train
            out[train, column : column + width] = fs.X_train[stored[train]]
            out[test, column : column + width] = fs.X_test[stored[test] - n_train]
            column += width
        return out

    def layout(self, names: list[str]) -> tuple[Channel, ...]:
        """The channels ``names`` as a row of their own (offsets from 0)."""
        out, offset = [], 0
        for channel in self.channels:
            if channel.name in names:
                out.append(Channel(channel.name, offset, channel.dims, channel.signed, channel.weight))
                offset += channel.dims
        return tuple(out)


def channel_gram(fs, block: int = 8192) -> np.ndarray:
    """``X Xᵀ`` of a feature set's stored pooled rows (training then test), float64, from float32 column blocks."""
    n_train, n = fs.X_train.shape[0], fs.X_train.shape[0] + fs.X_test.shape[0]
    K = np.zeros((n, n))
    for start in range(0, fs.n_features, block):
        columns = slice(start, start + block)
        B = np.empty((n, min(block, fs.n_features - start)), dtype=np.float32)
        B[:n_train], B[n_train:] = fs.X_train[:, columns], fs.X_test[:, columns]
        K += (B @ B.T).astype(np.float64)
    return K


def pooled_grams(data: ChannelRows, folder: str | None) -> dict[str, np.ndarray]:
    """Each channel's Gram matrix in the pooled order (cached as ``folder/gram-<name>.npy``)."""
    from pathlib import Path

    grams = {}
    for name, fs, order in zip(data.names, data.sets, data.orders):
        path = Path(folder) / f"gram-{name}-{fs.config_hash[:12]}.npy" if folder else None
        if path is not None and path.exists():
            K = np.load(path)
        else:
            started = time.perf_counter()
            K = channel_gram(fs)
            print(f"gram of {name}: {time.perf_counter() - started:.0f} s", flush=True)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                np.save(path, K)
        grams[name] = K[np.ix_(order, order)]
    return grams


def variant_kernel(grams: dict[str, np.ndarray], layout: tuple[Channel, ...], rule: str | None) -> np.ndarray:
    """The linear kernel of a variant's rows (module docstring), from the channels' Gram matrices."""
    if rule is None:
        return grams[layout[0].name]
    weights = np.array([c.weight for c in layout])
    factors = weights**2 if rule == "concat" else weights / weights.sum()
    K = np.zeros_like(grams[layout[0].name])
    for channel, factor in zip(layout, factors):
        G = grams[channel.name]
        norms = np.sqrt(np.diag(G))
        norms[norms == 0] = 1.0
        K += factor * G / np.outer(norms, norms)
    return K


def run_variant_gram(data: ChannelRows, K: np.ndarray, seed: int, grid: dict[str, list]) -> dict:
    """One linear variant on one split, from its kernel (module docstring)."""
    from classify_images.classifiers.model_selection import _fold_coordinates

    train, test = split_indices(data.labels, data.train_per_class, data.test_per_class, seed)
    started = time.perf_counter()
    Z_train, Z_test = _fold_coordinates(K, train, test, K.shape[0])
    training = train_classifier(
        "linear", {}, Z_train, data.labels[train], seed=seed, class_names=data.class_names, search=grid
    )
    index = {name: k for k, name in enumerate(data.class_names)}
    predicted = np.array([index[str(name)] for name in training.estimator.predict(Z_test)])
    return {
        "seed": seed,
        "accuracy": mean_per_class_accuracy(data.labels[test], predicted),
        "chosen": training.search["best"],
        "on_edge": training.search["on_edge"],
        "search_seconds": training.search["seconds"],
        "train_seconds": round(training.train_seconds, 2),
        "total_seconds": round(time.perf_counter() - started, 1),
        "method": "gram",
    }


def variants(data: ChannelRows, classifier: str) -> list[dict]:
    """Each channel alone, then ``concat`` and ``average`` of all, then ``mbkl`` over the non-negative ones."""
    out = [{"label": name, "channels": [name], "rule": None, "classifier": classifier} for name in data.names]
    if len(data.names) > 1:
        out += [
            {
                "label": f"{rule}({'+'.join(data.names)})",
                "channels": list(data.names),
                "rule": rule,
                "classifier": classifier,
            }
            for rule in ("concat", "average")
        ]
    unsigned = [c.name for c in data.channels if not c.signed]
    if len(unsigned) > 1:
        out.append({"label": f"mbkl({'+'.join(unsigned)})", "channels": unsigned, "rule": "mbkl", "classifier": "mbkl"})
    return out


def run_variant(data: ChannelRows, variant: dict, seed: int, grid: dict[str, list]) -> dict:
    """One variant on one split: C searched on the training rows, accuracy on the test rows."""
    train, test = split_indices(data.labels, data.train_per_class, data.test_per_class, seed)
    layout = data.layout(variant["channels"])
    rule, classifier = variant["rule"], variant["classifier"]
    started = time.perf_counter()
    X = data.rows(train, variant["channels"])
    if rule is not None:
        combine_rows(X, layout, rule, classifier, out=X)
    training = train_classifier(
        classifier, {}, X, data.labels[train], seed=seed, class_names=data.class_names, search=grid
    )
    del X
    estimator, predicted = training.estimator, []
    index = {name: k for k, name in enumerate(data.class_names)}
    for start in range(0, test.size, TEST_BLOCK):
        block = data.rows(test[start : start + TEST_BLOCK], variant["channels"])
        if rule is not None:
            combine_rows(block, layout, rule, classifier, out=block)
        predicted += [index[str(name)] for name in estimator.predict(block)]
    result = {
        "seed": seed,
        "accuracy": mean_per_class_accuracy(data.labels[test], np.array(predicted)),
        "chosen": training.search["best"],
        "on_edge": training.search["on_edge"],
        "search_seconds": training.search["seconds"],
        "train_seconds": round(training.train_seconds, 2),
        "total_seconds": round(time.perf_counter() - started, 1),
        "method": "rows",
    }
    if rule == "mbkl":
        from classify_images.classifiers.combination import mbkl_channel_weights

        result["channel_weights"] = mbkl_channel_weights(estimator, layout)
    return result


def _channel_spec(text: str) -> tuple[str, str, float]:
    name, _, rest = text.partition("=")
    path, _, weight = rest.partition(":")
    if not name or not path:
        raise argparse.ArgumentTypeError(f"--channel {text!r}: expected NAME=FEATURESET[:WEIGHT]")
    return name, path, float(weight or 1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--channel",
        type=_channel_spec,
        action="append",
        required=True,
        help="NAME=FEATURESET[:WEIGHT], one per channel (at least one)",
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--search", default="C=0.1,1,10,100", help="the grid of the linear SVM (NAME=v1,v2,...)")
    parser.add_argument("--mbkl-search", default="C=1,10,100", help="the grid of MBKL")
    parser.add_argument("--classifier", default="linear")
    parser.add_argument("--only", default=None, help="comma-separated variant labels to run (default: all)")
    parser.add_argument(
        "--method",
        choices=("gram", "rows"),
        default="gram",
        help="linear variants from the channels' Gram matrices (default) or on the rows",
    )
    parser.add_argument("--gram-dir", default=None, help="where the channels' Gram matrices are kept between runs")
    parser.add_argument(
        "--previous",
        action="append",
        default=[],
        help="a JSON file of an earlier run on the same channels and seeds: its variants are "
        "taken as measured there (the paired gains then span both runs)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    machine = announce_machine()

    def grid_of(text: str) -> dict[str, list]:
        name, _, values = text.partition("=")
        return {name: [float(v) for v in values.split(",")]}

    data = ChannelRows.open(args.channel)
    print("channels:", [c.to_dict() for c in data.channels], flush=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    chosen = variants(data, args.classifier)
    if args.only:
        chosen = [v for v in chosen if v["label"] in args.only.split(",")]
    results = []
    for previous in args.previous:
        earlier = json.loads(open(previous, encoding="utf-8").read())
        if earlier["seeds"] != seeds:
            raise SystemExit(f"error: {previous} measured the seeds {earlier['seeds']}, not {seeds}")
        results += [r for r in earlier["results"] if r["label"] not in {v["label"] for v in chosen}]
    gram = args.method == "gram" and any(v["classifier"] == "linear" for v in chosen)
    grams = pooled_grams(data, args.gram_dir) if gram else None
    for variant in chosen:
        grid = grid_of(args.mbkl_search if variant["classifier"] == "mbkl" else args.search)
        by_gram = gram and variant["classifier"] == "linear"
        K = variant_kernel(grams, data.layout(variant["channels"]), variant["rule"]) if by_gram else None
        runs = []
        for seed in seeds:
            runs.append(run_variant_gram(data, K, seed, grid) if by_gram else run_variant(data, variant, seed, grid))
            print(json.dumps({"variant": variant["label"], **runs[-1]}), flush=True)
        accuracies = 100 * np.array([r["accuracy"] for r in runs])
        results.append(
            {
                **variant,
                "grid": grid,
                "runs": runs,
                "mean": float(accuracies.mean()),
                "std": float(accuracies.std(ddof=1)) if len(runs) > 1 else 0.0,
            }
        )
        print(f"{variant['label']}: {accuracies.mean():.2f} ± {results[-1]['std']:.2f} %", flush=True)
    singles = [r for r in results if r["rule"] is None]
    summary = {}
    if singles:
        best_single = max(singles, key=lambda r: r["mean"])
        for r in results:
            if r["rule"] is not None:
                gain = 100 * (
                    np.array([x["accuracy"] for x in r["runs"]])
                    - np.array([x["accuracy"] for x in best_single["runs"]])
                )
                summary[r["label"]] = {
                    "over": best_single["label"],
                    "paired_gain_points": gain.round(2).tolist(),
                    "mean_gain_points": round(float(gain.mean()), 2),
                }
                print(f"{r['label']} - {best_single['label']}: {gain.round(2).tolist()} (mean {gain.mean():+.2f})")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory: {peak:.0f} MiB")
    write_json(
        args.json,
        {
            "machine": machine,
            "seeds": seeds,
            "channels": [c.to_dict() for c in data.channels],
            "rules": list(COMBINE_RULES),
            "results": results,
            "gains": summary,
            "peak_rss_MiB": round(peak),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
