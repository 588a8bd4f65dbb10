"""What choosing C (and the use of the mirrors) costs when C is not given, against one fit at one C.

On a feature set's training rows (with their mirrors when it stores them), alternating in one
process (A B A B …, ``--rounds`` times): A = ``train_classifier("linear", {"C": c})``, one fit on
the rows the config says (the Gram matrix computed by the fit); B = ``train_classifier("linear", {},
search="default", choose_flips=…)``: the default grid of 5 values of C × the 4 uses of the mirrors,
3 folds, all from one Gram matrix, then the final fit reusing it.  Prints wall seconds of each and
the ratio B / A per round, the CPU seconds of each (this process, all its threads) and their
ratio, and the load average::

    python scripts/benchmarks/bench_default_search.py FEATURESET --rounds 2

``--reference-tol 1e-6`` then runs the same search once more with the solver's ``tol`` that
small (every fold's fits near their optimum; minutes) and prints, beside its choice, how far the
default search's held-out scores lie from it: how much the default ``tol = 1e-4`` (and the search's
way of reaching it, e.g. warm starts along C) moves the scores and the choice.  ``--json PATH``
writes the rounds and that comparison.

Results: docs/colour-and-defaults.md.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _bench_utils import announce_machine, write_json

from classify_images.classifiers import QuadraticHingeSVC
from classify_images.classifiers.model_selection import default_grid, search_parameters
from classify_images.pipeline.extraction.augment import augment_settings, rows_and_mirrors
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import train_classifier


def _table(scores: list[dict]) -> dict[str, float]:
    """``{"C=100, flip_train=True, flip_test=average": score, …}`` of a search's scores."""
    table = {}
    for entry in scores:
        flips = "".join(f", {key}={entry[key]}" for key in ("flip_train", "flip_test") if key in entry)
        table[f"C={entry['params']['C']:g}{flips}"] = entry["score"]
    return table


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("featureset")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--C", type=float, default=100.0, help="the one C of side A")
    parser.add_argument(
        "--reference-tol", type=float, default=0.0, help="also search with this solver tol and compare (0: no)"
    )
    parser.add_argument("--json", help="write the rounds (and the comparison) here")
    args = parser.parse_args(argv)
    machine = announce_machine()
    feature_set = load_feature_set(args.featureset)
    augment = augment_settings(feature_set)
    n = len(feature_set.y_train)
    X = rows_and_mirrors(feature_set, np.arange(n)) if augment.mirrors else np.asarray(feature_set.X_train)
    y = np.asarray(feature_set.y_train)
    print(f"{feature_set.path}: {n} training images, {X.shape[0]} rows x {X.shape[1]} dims", flush=True)
    payload: dict = {"machine": machine, "featureset": str(feature_set.path), "rows": list(X.shape), "rounds": []}
    search: dict = {}
    for round_ in range(args.rounds):
        load = os.getloadavg()[0]
        start, cpu = time.perf_counter(), time.process_time()
        one = train_classifier(
            "linear", {"C": args.C}, X if augment.flip_train else X[:n], y, mirrored=augment.flip_train
        )
        a, a_cpu = time.perf_counter() - start, time.process_time() - cpu
        start, cpu = time.perf_counter(), time.process_time()
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
        b, b_cpu = time.perf_counter() - start, time.process_time() - cpu
        search = chosen.search or {}
        print(
            f"round {round_ + 1}: one fit at C = {args.C:g}: {a:.1f} s (fit {one.train_seconds:.1f} s); "
            f"default search + fit: {b:.1f} s (search {search.get('seconds', 0):.1f} s, fit {chosen.train_seconds:.1f} s; "
            f"chose {search.get('best')} {search.get('flips')}); ratio {b / a:.2f}; CPU {a_cpu:.1f} s vs {b_cpu:.1f} s, "
            f"ratio {b_cpu / a_cpu:.2f}; load {load:.1f} -> {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        payload["rounds"].append(
            {
                "one_fit_seconds": a,
                "search_and_fit_seconds": b,
                "search_seconds": search.get("seconds"),
                "ratio": b / a,
                "one_fit_cpu_seconds": a_cpu,
                "search_and_fit_cpu_seconds": b_cpu,
                "cpu_ratio": b_cpu / a_cpu,
                "chose": {"best": search.get("best"), "flips": search.get("flips")},
                "scores": _table(search.get("scores", [])),
                "load": [load, os.getloadavg()[0]],
            }
        )
    if args.reference_tol > 0 and search.get("scores"):
        start = time.perf_counter()
        reference = search_parameters(
            QuadraticHingeSVC(tol=args.reference_tol),
            X,
            y,
            default_grid(X, n),
            mirrored=augment.mirrors,
            choose_flips=augment.mirrors,
        ).to_dict()
        seconds = time.perf_counter() - start
        got, exact = _table(search["scores"]), _table(reference["scores"])
        worst = max(exact, key=lambda key: abs(got[key] - exact[key]))
        print(
            f"reference search at tol = {args.reference_tol:g} ({seconds:.0f} s): chose {reference['best']} "
            f"{reference.get('flips')}; the default search's scores differ from it by at most "
            f"{100 * abs(got[worst] - exact[worst]):.2f} points ({worst}: {100 * got[worst]:.2f} % vs "
            f"{100 * exact[worst]:.2f} %)",
            flush=True,
        )
        payload["reference"] = {
            "tol": args.reference_tol,
            "chose": {"best": reference["best"], "flips": reference.get("flips")},
            "scores": exact,
            "default_scores": got,
            "largest_difference": abs(got[worst] - exact[worst]),
        }
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
