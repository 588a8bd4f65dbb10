"""Study: PmSVM's automatic loss weight ``C="auto"`` (SVMlight's ``1 / mean_i M_p(x_i, x_i)``).

Each grid value is a multiple ``k`` of the automatic C of the rows the model is trained on
(``k = 1`` is today's default: ``4 / mean_i M_p(x_i, x_i)`` since the study this script was
written for, SVMlight's ``1 / mean_i M_p(x_i, x_i)`` before it), for one power ``p`` (``-1``: chi-square, ``-8``: histogram
intersection); with ``--cv``, ``k`` chosen by 3-fold CV on each split's training rows (the
ceiling of a C picked from this grid).  Splits, score and CV: ``study_hik_nsvm_margin.grid_study``
(the protocol of ``bench_config_table.py``).  docs/benchmarks/defaults.md, "Classifier defaults by
cross-validation".

Usage::

    OMP_NUM_THREADS=1 python studies/study_pmsvm_auto_c.py NAME=FOLDER [NAME=FOLDER ...] \\
        --p -8 [--multiples 0.5 1 2 4 8 16] [--cv] [--out study.json]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' helpers

import _bench_utils as U
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from study_hik_nsvm_margin import feature_sets, run_study

from classify_images.classifiers.pmsvm import PmSVM

#: Default grid of multiples of the automatic C.
MULTIPLES = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]


def auto_C(p: float, X: np.ndarray, y: np.ndarray) -> float:
    """The ``C_`` that ``PmSVM(p=p, C="auto")`` resolves on ``(X, y)``.

    ``fit`` resolves it from the pre-computed kernel diagonal before the solver starts, so a
    fit of one outer iteration gives the same value as a full one.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return PmSVM(p=p, C="auto", max_iter=1, random_state=0).fit(X, y).C_


def main(argv: list[str] | None = None) -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("features", nargs="+", help="NAME=FOLDER (or FOLDER) of each feature set")
    parser.add_argument("--p", type=float, required=True, help="power of the kernel: -1 chi-square, -8 HI")
    parser.add_argument(
        "--multiples", type=float, nargs="+", default=MULTIPLES, help="k of C = k * auto C (1 = C='auto')"
    )
    parser.add_argument("--cv", action="store_true", help="also choose k by 3-fold CV on each split")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="JSON results (rewritten after each feature set)")
    args = parser.parse_args(argv)
    if args.p > 0:
        parser.error(f"--p {args.p:g}: PmSVM needs p <= 0 (-1 chi-square, -8 histogram intersection)")
    folders = feature_sets(parser, args.features)
    run_study(
        args,
        folders,
        lambda X, y: auto_C(args.p, X, y),
        lambda k, C: PmSVM(p=args.p, C=k * C, random_state=0),
        args.multiples,
        value_label=lambda k: f"{float(k):g} × auto",
    )


if __name__ == "__main__":
    main()
