"""Soft against hard assignment at the HIK setting (step 3), paired per split (issue 11).

Each ``--row NAME=FEATURE_SET`` is a built feature set; ``--pair SOFT=HARD`` names the
hard-assignment row a soft row is compared with (same pooling, same codebook).  Every row
is evaluated with the protocol of ``bench_config_table.py`` (its ``run_cell``: the stored
rows re-split with seeds 0, 1, 2, 100 training images per class, the rest for testing,
mean per-class accuracy), in the same run, cells:

* ``nsvm``       HIK nSVM, ``margin="auto"`` (today's default);
* ``nsvm-m0.02`` HIK nSVM, ``margin=0.02`` (the paper's m);
* ``pmsvm-hi``   PmSVM p = −8 at a fixed C (``--pmsvm-c``, 0.01);
* ``linear``     the squared-hinge linear SVM (C by CV, as the table does).

The soft rows are built by ``bench_build_features.py`` (cold build: CPU seconds, peak memory,
cache sizes) through this script's ``build`` mode, which gives the build the codebook of the
hard feature set ``--codebook-of`` instead of learning it again, so that soft and hard rows
share the codebook exactly (checked: same ``[sift]``, ``[image]`` and k-means settings, same
dense-SIFT and preprocessing versions; the stage cache's k-means entry predates
``coding/codebook.py``'s version 2, which changed only the sparse dictionary)::

    nice -n 5 python benchmarks/bench_soft_assignment.py build --codebook-of HARD_FS -- \
        --dataset DATASET --config SOFT.toml --out SOFT_FS --cache-dir CACHE --keep-cache --n-jobs 2 --json build.json

Usage::

    nice -n 10 python benchmarks/bench_soft_assignment.py \\
        --row hard-faithful=HARD_FS --row soft-faithful=SOFT_FS --pair soft-faithful=hard-faithful \\
        --out soft-vs-hard.json [--cells nsvm pmsvm-hi]
    python benchmarks/bench_soft_assignment.py --table --out soft-vs-hard.json --merge other.json \
        --pair soft-faithful=hard-faithful
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _bench_utils as U
import bench_config_table as table
import numpy as np

CELLS = ("nsvm", "nsvm-m0.02", "pmsvm-hi", "linear")


def run_named_cell(cell: str, X, y, pmsvm_c: float) -> dict:
    """One cell of ``CELLS`` (``nsvm-m0.02``: the ``nsvm`` cell with ``HIKnSVM(margin=0.02)``)."""
    n_classes = int(y.max()) + 1
    if cell != "nsvm-m0.02":
        return table.run_cell(cell, X, y, n_classes, 3, 100, 1e-4, [pmsvm_c])
    with table.nsvm_margin(0.02):
        return table.run_cell("nsvm", X, y, n_classes, 3, 100, 1e-4, [pmsvm_c])


def print_table(results: dict) -> None:
    """Markdown: every soft row against its hard pair, per cell, paired differences per split."""
    print(
        "| pooling | classifier | hard: per split | hard mean ± std | soft: per split | soft mean ± std | paired diff ± std |"
    )
    print("|---|---|---|---:|---|---:|---:|")
    for soft, hard in results.get("pairs", {}).items():
        for cell in CELLS:
            a, b = results["rows"].get(hard, {}).get(cell), results["rows"].get(soft, {}).get(cell)
            if a is None or b is None:
                continue
            accs_a = 100 * np.array([r["accuracy"] for r in a["runs"]])
            accs_b = 100 * np.array([r["accuracy"] for r in b["runs"]])
            diff = U.paired_differences(b, a)
            print(
                f"| {soft} | {cell} | {', '.join(f'{v:.2f}' for v in accs_a)} | {a['mean']:.2f} ± {a['std']:.2f} "
                f"| {', '.join(f'{v:.2f}' for v in accs_b)} | {b['mean']:.2f} ± {b['std']:.2f} "
                f"| {diff.mean():+.2f} ± {diff.std(ddof=1):.2f} |"
            )


def build_with_codebook_of(argv: list[str]) -> None:
    """``bench_build_features.py`` with the codebook of the hard feature set ``--codebook-of``."""
    import sys

    import bench_build_features

    from classify_images.pipeline.extraction import fitting
    from classify_images.pipeline.extraction.stages import implementation_versions
    from classify_images.pipeline.settings.config import load_config
    from classify_images.pipeline.storage.feature_store import load_feature_set

    ap = argparse.ArgumentParser(prog="bench_soft_assignment.py build")
    ap.add_argument("--codebook-of", required=True, type=Path)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    hard = load_feature_set(args.codebook_of)
    config = load_config(rest[rest.index("--config") + 1])
    same = {
        "image": hard.config.image == config.image,
        "sift": hard.config.sift_params() == config.sift_params(),
        "k-means": hard.config.codebook_params(learning=True) == config.codebook_params(learning=True),
        "versions": all(
            hard.manifest["implementation_versions"][m] == v
            for m, v in implementation_versions().items()
            if m in ("preprocess", "dense_sift")
        ),
    }
    if not all(same.values()):
        raise SystemExit(f"error: {args.codebook_of} was not built with the same descriptors and k-means: {same}")
    codebook = hard.codebook()

    def learn_codebook(sample, config, cache):
        print(f"codebook of {args.codebook_of} (digest {hard.manifest['codebook']['digest'][:12]})", file=sys.stderr)
        return codebook

    fitting.learn_codebook = learn_codebook
    sys.argv = ["bench_build_features.py", *rest]
    bench_build_features.main()


def main() -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    import sys

    if sys.argv[1:2] == ["build"]:
        build_with_codebook_of(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--row", action="append", default=[], help="NAME=FEATURE_SET (repeatable)")
    ap.add_argument("--pair", action="append", default=[], help="SOFT=HARD row names compared per split")
    ap.add_argument("--cells", nargs="+", choices=CELLS, default=list(CELLS))
    ap.add_argument("--pmsvm-c", type=float, default=0.01)
    ap.add_argument("--out", default="soft-vs-hard.json")
    ap.add_argument("--table", action="store_true", help="print --out as a Markdown table and exit")
    ap.add_argument("--merge", nargs="*", default=[], help="--table: the rows of other --out files too")
    args = ap.parse_args()
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {"rows": {}, "pairs": {}, "folders": {}}
    for pair in args.pair:
        soft, _, hard = pair.partition("=")
        results["pairs"][soft] = hard
    if args.table:
        for path in args.merge:  # rows evaluated by other processes
            other = json.loads(Path(path).read_text())
            for cells_name, cells in other["rows"].items():
                results["rows"].setdefault(cells_name, {}).update(cells)
        print_table(results)
        return
    results["machine"] = U.announce_machine()
    for spec in args.row:
        name, _, folder = spec.partition("=")
        if not (Path(folder) / "manifest.json").is_file():
            ap.error(f"--row {spec}: {folder} is not a feature set (no manifest.json)")
        X, y = U.load_features(folder).pooled()
        results["folders"][name] = folder
        for cell in args.cells:
            print(f"{name}: {cell}", flush=True)
            results["rows"].setdefault(name, {})[cell] = run_named_cell(cell, X, y, args.pmsvm_c)
            U.write_json(out, results)
            print(f"  {results['rows'][name][cell]['mean']:.2f} ± {results['rows'][name][cell]['std']:.2f}", flush=True)
        del X
    print_table(results)


if __name__ == "__main__":
    main()
