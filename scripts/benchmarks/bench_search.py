"""``--search C=...`` on a feature set: the Gram-matrix path against GridSearchCV, time and memory.

Runs :func:`~classify_images.classifiers.model_selection.search_parameters` for the linear SVM
on the training rows of a feature set, by the one-Gram-matrix path (``gram``) or by scikit-learn's
``GridSearchCV`` refitting every fold and value on the fold's rows, copied by indexing
(``refit``; the eigenbasis solver, one eigendecomposition per fit), one method per process so
that the peak resident memory (``ru_maxrss``) is the method's::

    python benchmarks/bench_search.py bench-colour/s15/fs-gray --method gram
    python benchmarks/bench_search.py bench-colour/s15/fs-gray --method refit

Results: docs/benchmarks/colour.md ("--search").
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np
from _bench_utils import announce_machine
from sklearn.model_selection import GridSearchCV, StratifiedKFold

from classify_images.classifiers import QuadraticHingeSVC
from classify_images.classifiers.model_selection import search_parameters
from classify_images.pipeline.storage.feature_store import load_feature_set


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("featureset")
    parser.add_argument("--method", choices=("gram", "refit"), required=True)
    parser.add_argument("--grid", default="0.1,1,10,100")
    args = parser.parse_args(argv)
    machine = announce_machine()
    fs = load_feature_set(args.featureset)
    X, y = np.asarray(fs.X_train), np.asarray(fs.y_train)
    grid = {"C": [float(v) for v in args.grid.split(",")]}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wall, cpu = time.perf_counter(), time.process_time()
    if args.method == "gram":
        result = search_parameters(QuadraticHingeSVC(), X, y, grid)
        assert result.method == "gram"
        scores = [s["score"] for s in result.scores]
    else:
        splitter = StratifiedKFold(n_splits=3, shuffle=True, random_state=0)
        search = GridSearchCV(
            QuadraticHingeSVC(solver="eigen"),
            grid,
            scoring="balanced_accuracy",
            cv=splitter,
            refit=False,
            error_score="raise",
        ).fit(X, y)
        scores = list(search.cv_results_["mean_test_score"])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "machine": machine,
                "method": args.method,
                "rows": list(X.shape),
                "rows_MiB": round(X.nbytes / 2**20, 1),
                "grid": grid,
                "scores": [round(s, 6) for s in scores],
                "wall_seconds": round(wall, 1),
                "cpu_seconds": round(cpu, 1),
                "peak_rss_MiB": round(peak / 1024, 1),
                "peak_rss_before_search_MiB": round(before / 1024, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
