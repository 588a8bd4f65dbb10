"""Grey against colour channels, alone and combined, on one multi-channel feature set over seeded splits.

Reads a feature set built from ``[[channel]]`` tables (one channel per descriptor and encoder, say
Fisher vectors of grey, opponent, RGB and HSV RootSIFT and k-means histograms of grey and opponent
RootSIFT: ``docs/colour-and-defaults.md`` gives the config), and for every variant (one channel, or
several combined by ``concat`` / ``average`` for the linear SVM, or by ``mbkl``) trains and tests on
``--repeats`` seeded re-splits of its rows under its protocol, C chosen as the commands choose it
when none is given (3-fold CV on the training rows, :func:`default_search`).  Prints one row per
variant: mean ± std of the mean per-class accuracy, dimensions and float32 bytes per image, and the
descriptor CPU seconds per image of its colour spaces (``DenseSift.compute`` timed on
``--time-images`` images of the dataset, best of 2), and writes them to ``--json``::

    python scripts/studies/colour_channels_survey.py FEATURESET DATASET --repeats 3 --json survey.json

Results: docs/colour-and-defaults.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from classify_images.classifiers.combination import Channel, combine_rows
from classify_images.features.descriptors import make_descriptor
from classify_images.features.preprocess import load_colour, load_grayscale
from classify_images.pipeline.settings.dataset import split_indices
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import mean_per_class_accuracy, train_classifier


def sub_layout(channels: list[Channel]) -> tuple[list[np.ndarray], tuple[Channel, ...]]:
    """The column ranges of ``channels`` and their layout once placed side by side from column 0."""
    columns, layout, offset = [], [], 0
    for channel in channels:
        columns.append(np.arange(channel.offset, channel.offset + channel.dims))
        layout.append(Channel(channel.name, offset, channel.dims, channel.signed, channel.weight))
        offset += channel.dims
    return columns, tuple(layout)


def parse_variant(variant: str) -> tuple[list[str], str, str]:
    """``"NAME[+NAME...][:RULE[:CLASSIFIER]]"`` as ``(names, rule, classifier)``; the rule defaults to
    ``concat`` and the classifier to ``linear``."""
    names, *rest = variant.split(":")
    if len(rest) > 2:
        raise ValueError(f"variant {variant!r}: expected NAME[+NAME...][:RULE[:CLASSIFIER]]")
    rule = rest[0] if rest else "concat"
    classifier = rest[1] if len(rest) > 1 else "linear"
    return names.split("+"), rule, classifier


def descriptor_seconds(config, dataset: Path, n_images: int) -> dict[str, float]:
    """CPU seconds per image of each channel's descriptor (best of 2 passes over ``n_images`` images)."""
    images = sorted(p for p in dataset.rglob("*.jpg"))[:: max(1, len(list(dataset.rglob("*.jpg"))) // n_images)]
    images = images[:n_images]
    seconds = {}
    for channel in config.channels:
        sift = channel.config.sift_params()
        descriptor = make_descriptor(sift)
        load = load_colour if descriptor.needs_colour else load_grayscale
        pixels = [load(str(p), channel.config.image.max_side) for p in images]
        descriptor.compute(pixels[0])
        best = np.inf
        for _ in range(2):
            start = time.process_time()
            for image in pixels:
                descriptor.compute(image)
            best = min(best, time.process_time() - start)
        seconds[channel.name] = best / len(images)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("featureset")
    parser.add_argument("dataset")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-images", type=int, default=10)
    parser.add_argument(
        "--variants", nargs="*", help="NAME[+NAME...][:RULE[:CLASSIFIER]] (default: every channel alone)"
    )
    parser.add_argument("--json")
    args = parser.parse_args()

    feature_set = load_feature_set(args.featureset)
    by_name = {channel.name: channel for channel in feature_set.channels}
    split = feature_set.manifest["split"]
    y_all = np.concatenate([feature_set.y_train, feature_set.y_test])
    X_all = np.concatenate([np.asarray(feature_set.X_train), np.asarray(feature_set.X_test)])
    seconds = descriptor_seconds(feature_set.config, Path(args.dataset), args.time_images)
    variants = args.variants or list(by_name)
    results = []
    for variant in variants:
        names, rule, classifier = parse_variant(variant)
        channels = [by_name[name] for name in names]
        columns, layout = sub_layout(channels)
        X = X_all[:, np.concatenate(columns)]
        if len(channels) > 1 or rule != "concat":
            X = combine_rows(X, layout, rule, classifier)
        accuracies, chosen = [], []
        for seed in range(args.repeats):
            train, test = split_indices(y_all, split["train_per_class"], split["test_per_class"], seed)
            training = train_classifier(
                classifier,
                {},
                np.ascontiguousarray(X[train]),
                y_all[train],
                seed=seed,
                search="default",
            )
            accuracies.append(mean_per_class_accuracy(y_all[test], training.estimator.predict(X[test])))
            chosen.append((training.search or {}).get("best"))
        dims = int(sum(c.dims for c in channels))
        row = {
            "variant": variant,
            "accuracy_mean": float(np.mean(accuracies)),
            "accuracy_std": float(np.std(accuracies)),
            "accuracies": [float(a) for a in accuracies],
            "chosen": chosen,
            "dims": dims,
            "bytes_per_image": 4 * dims,
            "descriptor_cpu_s_per_image": float(sum(seconds[c.name] for c in channels)),
        }
        results.append(row)
        print(
            f"{variant:40s} {100 * row['accuracy_mean']:6.2f} ± {100 * row['accuracy_std']:4.2f} %  "
            f"{dims:7d} dims  {row['bytes_per_image'] / 1024:7.1f} KiB  "
            f"desc {row['descriptor_cpu_s_per_image']:.3f} CPU-s/img  C {chosen}",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"featureset": args.featureset, "results": results}, indent=1))


if __name__ == "__main__":
    main()
