#!/usr/bin/env python
"""Ablation of the k-means codebook at the HIK paper setting (issue 11): VLFeat's k-means
against scikit-learn's, on the SAME descriptor sample, with everything else fixed.

The paper (Sharma & Jurie, BMVC 2016, section 3.1) learns its 1024 words with VLFeat's
k-means on 5·10⁵ random training descriptors; our pipeline uses scikit-learn's
:class:`~sklearn.cluster.KMeans` (:func:`classify_images.coding.codebook.learn_kmeans_codebook`:
one k-means++ start, at most 100 Lloyd iterations, ``tol=1e-4``).  Subcommands:

``learn``
    Draws the pipeline's own descriptor sample of a reference feature set
    (:func:`~classify_images.pipeline.extraction.fitting.sample_descriptors` on its config, its split and
    the stage cache ``--cache-dir``; ``--n-samples`` overrides the sample size) and learns a
    codebook from it by ``--method``:

    * ``sklearn`` — exactly ``learn_kmeans_codebook`` (tol 1e-4), recording the Lloyd
      iterations it ran (``n_iter_``); with ``--continue-to 100`` it then runs the remaining
      iterations with ``tol=0`` from those centres (Lloyd is memoryless given the centres,
      so this is the tol=0 run of the same start) and saves that codebook too;
    * ``vlfeat-phow`` — VLFeat's ``vl_kmeans`` as ``phow_caltech101.m`` calls it
      (``'Algorithm', 'Elkan', 'MaxNumIterations', 50``, k-means++ initialisation: the
      MEX's default);
    * ``vlfeat-default`` — ``vl_kmeans`` with its MEX defaults (Lloyd, k-means++, at most
      100 iterations, stop when the relative energy decrease is below 1e-4).

    VLFeat is a reference only (``cyvlfeat`` built against Debian's ``libvlfeat-dev``),
    never a dependency of the package.  The record (JSON) holds the objective
    :math:`\\frac1n\\sum_i \\min_k \\lVert x_i - c_k\\rVert^2` of every codebook on the sample,
    computed the same way for all (:func:`kmeans_objective`), and the CPU seconds.

``check``
    For given codebooks, the objective on the same sample and one more Lloyd step from each
    (:func:`lloyd_step`: how much the objective falls, how many descriptors change word):
    how far each codebook is from a k-means fixed point.

``rows``
    Encodes every image of the reference feature set, in its row order (``X_train`` then
    ``X_test``), with a given codebook (``--codebook FILE.npy``) through the pipeline's
    :class:`~classify_images.pipeline.extraction.extractor.FeatureExtractor` and
    :class:`~classify_images.pipeline.extraction.runner.Runner`: its VQ indices go to the stage cache
    (keyed by the codebook's digest), so every further pooling (``--pooling``) reuses them.
    Without ``--codebook`` the reference's own codebook is used (a pooling-only rebuild).
    The rows are saved as ``X.npy`` / ``y.npy`` in ``--out``.

``evaluate``
    The cells of ``bench_config_table.run_cell`` on rows (3 splits, seeds 0, 1, 2, 100
    training images per class): nSVM with ``margin="auto"`` and ``margin=0.02`` (the
    paper's m), PmSVM-HI at ``C=0.01``; with ``--reference-result`` the paired differences
    (same split, same test images) to the reference rows' results.  ``--rows`` may also be a
    feature set (its stored rows).

``table``
    ``evaluate`` results as the Markdown table of BENCHMARKS.md.

Usage (docs/benchmarks/hik-setting.md, "The HIK setting: VLFeat's k-means against scikit-learn's at step 3")::

    nice -n 5 python studies/ablate_codebook.py learn --reference scene15-hik5e5 \\
        --cache-dir hik5e5.cache --method vlfeat-phow --out work/vlfeat-phow-5e5
    nice -n 5 python studies/ablate_codebook.py rows --reference scene15-hik5e5 \\
        --cache-dir hik5e5.cache --codebook work/vlfeat-phow-5e5/codebook.npy \\
        --pooling faithful --n-jobs 2 --out work/rows-vlfeat-faithful
    python studies/ablate_codebook.py evaluate --rows work/rows-vlfeat-faithful \\
        --reference-result work/eval-sklearn-faithful.json --out work/eval-vlfeat-faithful.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' helpers

import argparse
import contextlib
import json
import os
import time

import _bench_utils as U
import numpy as np
from bench_build_features import _process_tree

from classify_images.coding.codebook import codebook_digest
from classify_images.coding.encode import vq_encode
from classify_images.features.dsift import dequantize_descriptors
from classify_images.pipeline.extraction.extractor import FeatureExtractor
from classify_images.pipeline.extraction.fitting import image_row, sample_descriptors
from classify_images.pipeline.extraction.runner import Runner, no_progress
from classify_images.pipeline.extraction.stages import StageCache
from classify_images.pipeline.settings.config import PipelineConfig
from classify_images.pipeline.settings.dataset import file_fingerprint
from classify_images.pipeline.storage.feature_store import load_feature_set

#: Pooling / normalisation of the rows: the ``[pooling]`` and ``[normalization]`` overrides.
POOLINGS = {
    # hik-nsvm as it is: average pooling, L1 of the whole vector (levels weigh 1/21 : 4/21 : 16/21)
    "whole-l1": {
        "pooling": {"method": "average", "level_normalization": "none", "level_weights": None},
        "normalization": {"method": "l1"},
    },
    # the paper's standard pyramid: every level L1-normalised (each level weighs the same)
    "faithful": {
        "pooling": {"method": "average", "level_normalization": "l1", "level_weights": None},
        "normalization": {"method": "l1"},
    },
}

METHODS = ("sklearn", "vlfeat-phow", "vlfeat-default")

#: ``evaluate``'s cells: (name, bench_config_table cell, nSVM margin or None, PmSVM C grid).
CELLS = (
    ("nsvm auto", "nsvm", "auto", None),
    ("nsvm m=0.02", "nsvm", 0.02, None),
    ("pmsvm-hi C=0.01", "pmsvm-hi", None, [0.01]),
)


class Reference:
    """A reference feature set: its config, images in row order, labels, split and codebook."""

    def __init__(self, folder: str | Path) -> None:
        self.feature_set = load_feature_set(folder)
        manifest = self.feature_set.manifest
        self.config_dict = manifest["config"]
        root = Path(manifest["dataset"]["root"])
        names = manifest["split"]["train"] + manifest["split"]["test"]
        self.paths = [str(root / name) for name in names]
        self.n_train = len(manifest["split"]["train"])
        self.labels = np.concatenate([np.asarray(self.feature_set.y_train), np.asarray(self.feature_set.y_test)])
        self._fingerprints: list[str] | None = None

    @property
    def fingerprints(self) -> list[str]:
        if self._fingerprints is None:
            self._fingerprints = [file_fingerprint(p) for p in self.paths]
        return self._fingerprints

    def config(self, overrides: dict | None = None) -> PipelineConfig:
        raw = json.loads(json.dumps(self.config_dict))
        for table, values in (overrides or {}).items():
            raw[table].update(values)
        return PipelineConfig.from_dict(raw, source="reference manifest")


def kmeans_objective(descriptors: np.ndarray, centres: np.ndarray) -> float:
    """Mean squared distance of the descriptors to their nearest centre (the k-means energy / n)."""
    index = vq_encode(descriptors, centres)
    total = 0.0
    for start in range(0, descriptors.shape[0], 65536):
        block = descriptors[start : start + 65536].astype(np.float64)
        total += float(((block - centres[index[start : start + 65536]].astype(np.float64)) ** 2).sum())
    return total / descriptors.shape[0]


def learn_vlfeat(descriptors: np.ndarray, n_words: int, method: str) -> np.ndarray:
    """VLFeat's k-means (``cyvlfeat``): the phow_caltech101 call or the vl_kmeans MEX defaults."""
    from cyvlfeat.kmeans import kmeans

    options = (
        {"algorithm": "ELKAN", "max_num_iterations": 50}
        if method == "vlfeat-phow"
        else {"algorithm": "LLOYD", "max_num_iterations": 100, "min_energy_variation": 1e-4}
    )
    centres = kmeans(np.ascontiguousarray(descriptors, dtype=np.float32), n_words, initialization="PLUSPLUS", **options)
    return np.ascontiguousarray(centres, dtype=np.float32)


def learn_sklearn(
    descriptors: np.ndarray, n_words: int, seed: int, max_iter: int, tol: float, init: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """scikit-learn's KMeans with the settings of ``learn_kmeans_codebook`` (or from ``init``):
    the centres and the Lloyd iterations run."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    # one thread, as learn_kmeans_codebook: OpenMP's partial sums differ with the thread count
    with threadpool_limits(limits=1):
        kmeans = KMeans(
            n_clusters=n_words,
            n_init=1,
            max_iter=max_iter,
            tol=tol,
            random_state=seed,
            init="k-means++" if init is None else init,
        ).fit(descriptors)
    return np.ascontiguousarray(kmeans.cluster_centers_, dtype=np.float32), int(kmeans.n_iter_)


def _runner(cache_dir: str | None, n_jobs: int) -> Runner:
    return Runner(n_jobs, StageCache(cache_dir, cache_descriptors=False), no_progress)


def cmd_learn(args) -> dict:
    reference = Reference(args.reference)
    overrides = {"codebook": {"n_samples": args.n_samples}} if args.n_samples else None
    config = reference.config(overrides)
    runner = _runner(args.cache_dir, args.n_jobs)
    start = time.process_time()
    sample = sample_descriptors(reference.paths, reference.fingerprints, np.arange(reference.n_train), config, runner)
    descriptors = dequantize_descriptors(sample)
    record = {
        "reference": str(args.reference),
        "method": args.method,
        "n_samples": int(sample.shape[0]),
        "n_words": config.codebook.size,
        "sample_cpu_s": round(time.process_time() - start, 1),
        "codebooks": {},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def keep(name: str, centres: np.ndarray, cpu: float, **extra) -> None:
        np.save(out / f"{name}.npy", centres)
        entry = {
            "objective": kmeans_objective(descriptors, centres),
            "cpu_s": round(cpu, 1),
            "digest": codebook_digest(centres),
            **extra,
        }
        record["codebooks"][name] = entry
        print(f"{name}: {json.dumps(entry)}", flush=True)

    start = time.process_time()
    if args.method == "sklearn":
        centres, n_iter = learn_sklearn(
            descriptors, config.codebook.size, config.codebook.seed, config.codebook.n_iter, 1e-4
        )
        extra = {"n_iter": n_iter, "tol": 1e-4}
        stored = reference.feature_set.codebook()
        if stored.shape == centres.shape and not args.n_samples:
            extra["max_abs_diff_to_reference_codebook"] = float(np.abs(stored - centres).max())
        keep("codebook", centres, time.process_time() - start, **extra)
        if args.continue_to and args.continue_to > n_iter:
            start = time.process_time()
            more, more_iter = learn_sklearn(
                descriptors, config.codebook.size, config.codebook.seed, args.continue_to - n_iter, 0.0, init=centres
            )
            keep(
                "codebook-tol0",
                more,
                time.process_time() - start,
                n_iter=n_iter + more_iter,
                tol=0.0,
                note=f"continued from the tol=1e-4 centres for {more_iter} more Lloyd iterations",
            )
    else:
        centres = learn_vlfeat(descriptors, config.codebook.size, args.method)
        keep(
            "codebook",
            centres,
            time.process_time() - start,
            vl_kmeans=(
                "'Algorithm','Elkan','MaxNumIterations',50, k-means++"
                if args.method == "vlfeat-phow"
                else "'Algorithm','Lloyd','MaxNumIterations',100,'MinEnergyVariation',1e-4, k-means++"
            ),
        )
    U.write_json(out / "record.json", record)
    return record


def lloyd_step(descriptors: np.ndarray, centres: np.ndarray) -> dict:
    """One more Lloyd iteration from ``centres``: how far they are from a fixed point.

    Returns the objective before and after the step (assign, then move every centre to the
    mean of its descriptors), the relative decrease, and the share of descriptors whose
    nearest centre changes after the move (0 at a fixed point)."""
    index = vq_encode(descriptors, centres)
    sums = np.zeros(centres.shape, dtype=np.float64)
    np.add.at(sums, index, descriptors)
    counts = np.bincount(index, minlength=centres.shape[0])
    moved = centres.astype(np.float64).copy()
    moved[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
    moved = moved.astype(np.float32)
    before, after = kmeans_objective(descriptors, centres), kmeans_objective(descriptors, moved)
    return {
        "objective": before,
        "objective_after_one_step": after,
        "relative_decrease": (before - after) / before,
        "reassigned_share": float(np.mean(vq_encode(descriptors, moved) != index)),
        "empty_words": int(np.sum(counts == 0)),
    }


def cmd_check(args) -> dict:
    reference = Reference(args.reference)
    overrides = {"codebook": {"n_samples": args.n_samples}} if args.n_samples else None
    sample = sample_descriptors(
        reference.paths,
        reference.fingerprints,
        np.arange(reference.n_train),
        reference.config(overrides),
        _runner(args.cache_dir, args.n_jobs),
    )
    descriptors = dequantize_descriptors(sample)
    result = {"n_samples": int(sample.shape[0]), "codebooks": {}}
    for spec in args.codebooks:
        name, _, path = spec.partition("=")
        result["codebooks"][name] = {"file": path, **lloyd_step(descriptors, np.load(path))}
        print(f"{name}: {json.dumps(result['codebooks'][name])}", flush=True)
    U.write_json(args.out, result)
    return result


def cmd_rows(args) -> None:
    from joblib import delayed

    reference = Reference(args.reference)
    config = reference.config(POOLINGS[args.pooling])
    codebook = np.load(args.codebook) if args.codebook else reference.feature_set.codebook()
    runner = _runner(args.cache_dir, args.n_jobs)
    extractor = FeatureExtractor(config, np.ascontiguousarray(codebook, dtype=np.float32), cache=runner.cache)
    if not extractor.normalizer.is_fitted:
        sys.exit(f"error: --pooling {args.pooling}: its normalisation needs training statistics; not supported here")
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    tree_cpu_before = sum(cpu for _, _, cpu in _process_tree(os.getpid()))
    tasks = [delayed(image_row)(p, f, normalized=True) for p, f in zip(reference.paths, reference.fingerprints)]
    X = np.zeros((len(tasks), extractor.n_features), dtype=np.float32)
    for index, vector in runner.imap(tasks, "encode + pool", shared={"extractor": extractor}, max_nbytes="100K"):
        X[index] = vector
        if args.verbose and index % 500 == 0:
            print(f"  row {index}/{len(tasks)}", flush=True)
    # CPU of this process and of its joblib workers (still alive: loky keeps them for reuse)
    tree_cpu = sum(cpu for _, _, cpu in _process_tree(os.getpid())) - tree_cpu_before
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "X.npy", X)
    np.save(out / "y.npy", reference.labels)
    info = {
        "reference": str(args.reference),
        "codebook": args.codebook or "reference",
        "codebook_digest": extractor.codebook_digest,
        "pooling": args.pooling,
        "config": config.to_dict(),
        "n_jobs": args.n_jobs,
        "wall_s": round(time.perf_counter() - start_wall, 1),
        "parent_cpu_s": round(time.process_time() - start_cpu, 1),
        "tree_cpu_s": round(tree_cpu, 1),
    }
    U.write_json(out / "rows.json", info)
    print(json.dumps({k: info[k] for k in ("codebook_digest", "pooling", "wall_s", "tree_cpu_s")}), flush=True)


def cmd_evaluate(args) -> dict:
    import bench_config_table as table

    def rows(folder):
        if (Path(folder) / "manifest.json").is_file():  # a feature set: its stored rows
            return U.load_features(folder).pooled()
        return np.load(Path(folder) / "X.npy"), np.load(Path(folder) / "y.npy")

    X, y = rows(args.rows)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {"rows": str(args.rows), "cells": {}}
    reference = json.loads(Path(args.reference_result).read_text())["cells"] if args.reference_result else {}
    n_classes = int(y.max()) + 1
    for name, cell_name, margin, grid in CELLS:
        if name in result["cells"]:
            continue
        print(f"{name}:", flush=True)
        with table.nsvm_margin(margin) if margin is not None else contextlib.nullcontext():
            cell = table.run_cell(cell_name, X, y, n_classes, args.repeats, 100, 1e-4, grid or table.PMSVM_C_GRID)
        if name in reference:
            diffs = U.paired_differences(cell, reference[name])
            cell.update(
                diff_mean=float(diffs.mean()), diff_std=float(diffs.std(ddof=1)), diffs=[float(d) for d in diffs]
            )
        result["cells"][name] = cell
        U.write_json(out, result)
        print(
            f"{name}: {cell['mean']:.2f} ± {cell['std']:.2f}"
            + (f"  paired {cell['diff_mean']:+.2f} ± {cell['diff_std']:.2f}" if "diff_mean" in cell else ""),
            flush=True,
        )
    return result


def cmd_table(args) -> None:
    """The ``evaluate`` results as Markdown rows (BENCHMARKS.md)."""
    print("| rows | classifier | split 0 | split 1 | split 2 | mean ± std | paired diff ± std | cell CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for spec in args.results:
        name, _, path = spec.partition("=")
        for cell_name, cell in json.loads(Path(path).read_text())["cells"].items():
            splits = " | ".join(f"{100 * run['accuracy']:.2f}" for run in cell["runs"])
            diff = f"{cell['diff_mean']:+.2f} ± {cell['diff_std']:.2f}" if "diff_mean" in cell else "—"
            print(
                f"| {name} | {cell_name} | {splits} | {cell['mean']:.2f} ± {cell['std']:.2f} | {diff} "
                f"| {cell['cell_cpu_seconds']:.0f} |"
            )


def main(argv: list[str] | None = None) -> int:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    learn = sub.add_parser("learn", help="learn a codebook on the pipeline's descriptor sample")
    learn.add_argument("--reference", required=True, help="reference feature set (its config and split)")
    learn.add_argument("--cache-dir", help="stage cache of the reference build (the descriptor sample)")
    learn.add_argument("--method", choices=METHODS, required=True)
    learn.add_argument("--n-samples", type=int, help="sample size (default: the reference config's)")
    learn.add_argument(
        "--continue-to", type=int, default=0, help="sklearn: also the tol=0 codebook of this many iterations"
    )
    learn.add_argument("--n-jobs", type=int, default=1)
    learn.add_argument("--out", required=True, help="folder for codebook*.npy and record.json")
    rows = sub.add_parser("rows", help="feature rows of the reference's images with a given codebook")
    rows.add_argument("--reference", required=True)
    rows.add_argument("--cache-dir", help="stage cache (VQ indices are stored there, keyed by the codebook)")
    rows.add_argument("--codebook", help="(K, 128) .npy codebook (default: the reference's)")
    rows.add_argument("--pooling", choices=sorted(POOLINGS), required=True)
    rows.add_argument("--n-jobs", type=int, default=1)
    rows.add_argument("--verbose", action="store_true")
    rows.add_argument("--out", required=True, help="folder for X.npy, y.npy, rows.json")
    check = sub.add_parser("check", help="objective of codebooks on the sample, and one more Lloyd step from each")
    check.add_argument("--reference", required=True)
    check.add_argument("--cache-dir")
    check.add_argument("--n-samples", type=int)
    check.add_argument("--n-jobs", type=int, default=1)
    check.add_argument("--codebooks", nargs="+", required=True, help="NAME=FILE.npy")
    check.add_argument("--out", required=True, help="JSON results")
    evaluate = sub.add_parser("evaluate", help="nSVM (auto, 0.02) and PmSVM-HI (C=0.01) on rows, 3 splits")
    evaluate.add_argument("--rows", required=True, help="folder written by `rows`, or a feature set")
    evaluate.add_argument("--reference-result", help="the `evaluate` JSON of the reference rows (paired differences)")
    evaluate.add_argument("--repeats", type=int, default=3)
    evaluate.add_argument("--out", required=True, help="JSON results (cells already there are kept)")
    table = sub.add_parser("table", help="print `evaluate` results as a Markdown table")
    table.add_argument("results", nargs="+", help="NAME=evaluate JSON")
    args = parser.parse_args(argv)
    for option in ("reference", "rows"):
        folder = getattr(args, option, None)
        marker = "manifest.json" if option == "reference" else "X.npy"
        if folder is not None and not any((Path(folder) / name).is_file() for name in (marker, "manifest.json")):
            parser.error(
                f"--{option} {folder}: no {marker} there; give a "
                + ("feature set (build-features output)" if option == "reference" else "`rows` output folder")
            )
    if getattr(args, "codebook", None) and not Path(args.codebook).is_file():
        parser.error(f"--codebook {args.codebook}: no such file")
    for spec in getattr(args, "codebooks", None) or getattr(args, "results", None) or []:
        name, sep, path = spec.partition("=")
        if not (sep and name and Path(path).is_file()):
            parser.error(f"{spec!r}: expected NAME=FILE with an existing file")
    {"learn": cmd_learn, "check": cmd_check, "rows": cmd_rows, "evaluate": cmd_evaluate, "table": cmd_table}[
        args.command
    ](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
