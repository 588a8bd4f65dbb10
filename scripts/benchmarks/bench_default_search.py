"""What choosing C (and the use of the mirrors) costs when C is not given, against one fit at one C.

On a feature set's training rows (with their mirrors when it stores them), alternating in one
process (A B A B …, ``--rounds`` times): A = ``train_classifier("linear", {"C": c})``, one fit on
the rows the config says (the Gram matrix computed by the fit); B = ``train_classifier("linear", {},
search="default", choose_flips=…)``: the default grid of 5 values of C × the 4 uses of the mirrors,
3 folds, all from one Gram matrix, then the final fit reusing it.  Prints wall seconds of each and
the ratio B / A per round, and the load average::

    python scripts/benchmarks/bench_default_search.py FEATURESET --rounds 2

Results: docs/colour-and-defaults.md.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _bench_utils import announce_machine

from classify_images.pipeline.extraction.augment import augment_settings, rows_and_mirrors
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import train_classifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("featureset")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--C", type=float, default=100.0, help="the one C of side A")
    args = parser.parse_args()
    announce_machine()
    feature_set = load_feature_set(args.featureset)
    augment = augment_settings(feature_set)
    n = len(feature_set.y_train)
    X = rows_and_mirrors(feature_set, np.arange(n)) if augment.mirrors else np.asarray(feature_set.X_train)
    y = np.asarray(feature_set.y_train)
    print(f"{feature_set.path}: {n} training images, {X.shape[0]} rows x {X.shape[1]} dims", flush=True)
    for round_ in range(args.rounds):
        load = os.getloadavg()[0]
        start = time.perf_counter()
        one = train_classifier(
            "linear", {"C": args.C}, X if augment.flip_train else X[:n], y, mirrored=augment.flip_train
        )
        a = time.perf_counter() - start
        start = time.perf_counter()
        chosen = train_classifier(
            "linear",
            {},
            X,
            y,
            search="default",
            mirrored=augment.mirrors,
            choose_flips=augment.mirrors,
            flip_train=augment.flip_train,
        )
        b = time.perf_counter() - start
        search = chosen.search or {}
        print(
            f"round {round_ + 1}: one fit at C = {args.C:g}: {a:.1f} s (fit {one.train_seconds:.1f} s); "
            f"default search + fit: {b:.1f} s (search {search.get('seconds', 0):.1f} s, fit {chosen.train_seconds:.1f} s; "
            f"chose {search.get('best')} {search.get('flips')}); ratio {b / a:.2f}; load {load:.1f} -> {os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
