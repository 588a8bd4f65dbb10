"""Study: HIK nSVM's hinge margin m (Sharma & Jurie, Eq. 7a) on a stored feature set.

Runs the ``nsvm`` cell of ``bench_config_table.py`` (its 3 splits, mean per-class accuracy)
twice: with m = 0.02, the default until commit ``bfb9066``, and with today's ``margin="auto"``
(0.05 times the mean l1 norm of the training rows). BENCHMARKS.md, "The nSVM drift since
2026-11-21".

Usage::

    OMP_NUM_THREADS=1 python scripts/study_hik_nsvm_margin.py FEATURE_SET [--margins 0.02 auto]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_utils as U  # noqa: E402
import bench_config_table as table  # noqa: E402

from classify_images.classifiers.hik_nsvm import HIKnSVM  # noqa: E402


def _margin(text: str) -> float | str:
    return text if text == "auto" else float(text)


@contextmanager
def nsvm_margin(margin: float | str) -> Iterator[None]:
    """Inside the block, ``bench_config_table``'s ``nsvm`` cell fits HIK nSVM with this
    hinge margin (its other cells are unchanged)."""
    default_estimator = table._estimator
    table._estimator = lambda name: HIKnSVM(random_state=0, margin=margin) if name == "nsvm" else default_estimator(name)
    try:
        yield
    finally:
        table._estimator = default_estimator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("features", type=Path, help="feature set folder")
    parser.add_argument("--margins", type=_margin, nargs="+", default=[0.02, "auto"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if not (args.features / "manifest.json").is_file():
        parser.error(f"{args.features}: not a feature set (no manifest.json); give a build-features output folder")
    X, y = U.load_features(args.features).pooled()
    n_classes = int(y.max()) + 1
    for margin in args.margins:
        with nsvm_margin(margin):
            cell = table.run_cell("nsvm", X, y, n_classes, args.repeats, 100, 1e-3)
        splits = ", ".join(f"{100 * run['accuracy']:.2f}" for run in cell["runs"])
        print(f"margin {margin}: {splits}  ->  {cell['mean']:.2f} ± {cell['std']:.2f}", flush=True)


if __name__ == "__main__":
    main()
