"""Ablations of the HIK nSVM feature setting on 15-Scenes, one change at a time (issue 11).

The reference row is our ``hik-nsvm`` pipeline (dense SIFT 16/24/32/40 px, k-means
1024, 1x1 + 2x2 + 4x4 average-pooled histograms, L1 of the whole vector).  Every other
row changes ONE thing: a dense-SIFT option (:func:`classify_images.features.dense_sift`),
the image size, the codebook learning, or the pooling / normalisation of the histograms.

Affordable protocol (the full build takes ~30 min of 2 cores; this has to fit in about
an hour of one shared core), stated in every result:

* **Images**: per class, a fixed random pool of ``--per-class`` images (seed 0) and
  ``--codebook-per-class`` *other* images used only to learn the codebook.  Splits
  ``0 .. --splits - 1`` divide each class's pool into 100 training and the rest test
  images.  The codebook never sees a pool image, so one codebook per descriptor variant
  serves all splits without leaking test images.
* **Grid**: ``--step`` (6 by default, a proxy for the paper's 3: a quarter of the
  descriptors) — a proxy, labelled so in the output.
* **Codebook**: k-means (1024 words) on ``--n-samples`` random descriptors of the
  codebook images, ``--kmeans-iter`` Lloyd iterations, one k-means++ start (seed 0).
  Every descriptor row learns its own codebook, so the rows "reference, k-means seed 1/2"
  (same descriptors, another k-means seed) measure the noise floor of those rows.
* **Classifier** (``--classifier``): PmSVM with p = -8 (the histogram-intersection
  kernel), C = 0.01, close to the paper's HIK classifiers and cheaper than nSVM; it
  scales each dimension by its training maximum, so it is blind to per-level weights
  and per-level normalisation: run the pooling rows again with ``--classifier nsvm``
  (HIK nSVM defaults, the paper's classifier).
* Rows that change only pooling/normalisation re-use the reference's VQ indices; a
  descriptor variant's VQ indices are saved under ``--work-dir`` (not in the repository)
  and re-used when the script runs again.

Accuracy is the mean per-class accuracy; each row gives mean ± std over the splits and
the mean paired difference to the reference (same splits, same test images) ± its std.

Usage::

    nice -n 10 python studies/ablate_features.py --dataset ../shared/datasets/scene15 \\
        --work-dir ablate-work --out ablate.json [--classifier nsvm] [--rows 'name|name|...']

**The real setting** (``--real``): the rows of ``REAL_ROWS``, each the ``--config``
(``hik-nsvm``: step 3, 2·10⁵ k-means samples, 100 iterations) with ONE table of overrides,
built by the pipeline itself (:func:`~classify_images.pipeline.extraction.build.build_feature_set`) on
the stage cache ``--cache-dir`` of a full build — a row that changes only ``[pooling]`` or
``[normalization]`` re-uses its cached VQ indices; a ``[sift]`` row needs its own cache
(``--cache-dir`` of that build) — then evaluated with the protocol of
``bench_config_table.py`` (its ``run_cell``: the stored rows re-split with seeds 0, 1, 2,
100 training images per class, the rest for testing; ``--classifiers``).  Paired
differences are taken against the ``reference`` row of the same ``--out`` file::

    nice -n 10 python studies/ablate_features.py --real --dataset ../shared/datasets/scene15 \\
        --cache-dir scene15-hik.cache --work-dir ablate-real --out ablate-real.json \\
        --rows 'reference|per-level L1' --classifiers nsvm pmsvm-hi

The descriptor-side rows at step 3 (``5e5 samples ...``: the paper's codebook sample, images
at their original size, ``vl_phow``'s dense SIFT) each need a cold build of their own
(``bench_build_features.py`` with the row's configuration) whose cache is their
``--cache-dir``; ``--table`` pairs each of them against the rows in ``REAL_BASELINES`` (same
pooling).  ``--classifiers nsvm-m0.02`` is the ``nsvm`` cell at the paper's margin.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' helpers

import argparse
import hashlib
import json
import time

import _bench_utils as U
import numpy as np
from bench_config_table import PMSVM_C_GRID

from classify_images.classifiers.hik_nsvm import HIKnSVM
from classify_images.classifiers.pmsvm import PmSVM
from classify_images.coding.codebook import learn_kmeans_codebook
from classify_images.coding.encode import vq_encode
from classify_images.coding.pooling import pyramid_cells
from classify_images.features import load_grayscale
from classify_images.features.dsift import dense_sift, dequantize_descriptors, quantize_descriptors
from classify_images.pipeline.training.evaluation import mean_per_class_accuracy

PATCH_SIZES = (16, 24, 32, 40)
N_WORDS = 1024

# Descriptor variants: (dense_sift options, max_side).  The reference is our default.
REFERENCE = {}
DESCRIPTOR_VARIANTS: dict[str, tuple[dict, int | None]] = {
    "reference": (REFERENCE, 300),
    "low-contrast zero (thr 1.0)": ({"low_contrast": "zero"}, 300),
    "contrast threshold 0.1 (keep)": ({"contrast_threshold": 0.1}, 300),
    "contrast threshold 0 (normalise every patch)": ({"contrast_threshold": 0.0}, 300),
    "contrast threshold 2 (keep)": ({"contrast_threshold": 2.0}, 300),
    "window 1.5 (vl_phow)": ({"window_size": 1.5}, 300),
    "smoothing sigma = s/6 (vl_phow)": ({"smoothing": "phow"}, 300),
    "grids centre-aligned": ({"grid_alignment": "centre"}, 300),
    "integer bin centres": ({"bin_centres": "integer"}, 300),
    "RootSIFT": ({"root": True}, 300),
    "image original size": (REFERENCE, None),
    "vl_phow-like (all of window, smoothing, alignment, integer centres, zero < 0.1)": (
        {
            "window_size": 1.5,
            "smoothing": "phow",
            "grid_alignment": "centre",
            "bin_centres": "integer",
            "low_contrast": "zero",
            "contrast_threshold": 0.1,
        },
        300,
    ),
}

# Pooling / normalisation variants on the reference VQ indices:
# (levels, level weights or None, per-level L1, power)
POOLING_VARIANTS: dict[str, tuple[tuple[int, ...], tuple[float, ...] | None, bool, float]] = {
    "levels 1,2,4; L1 per level (each level 1/3, as counts + global L1)": ((1, 2, 4), None, True, 1.0),
    "levels 1,2,4; per-level L1, SPM weights 1/4,1/4,1/2": ((1, 2, 4), (0.25, 0.25, 0.5), True, 1.0),
    "levels 1,2 (global L1)": ((1, 2), None, False, 1.0),
    "levels 2,4 (global L1)": ((2, 4), None, False, 1.0),
    "power 0.5 then L1": ((1, 2, 4), None, False, 0.5),
}

CODEBOOK_VARIANTS = {
    # same descriptors, another k-means seed: the noise floor of every row that learns its
    # own codebook (all descriptor rows do)
    "reference, k-means seed 1": {"kmeans_seed": 1},
    "reference, k-means seed 2": {"kmeans_seed": 2},
    "RootSIFT, k-means seed 1": {"kmeans_seed": 1, "options": {"root": True}},
    "k-means 100 iterations": {"kmeans_iter": 100},
    "codebook sample x2": {"n_samples_factor": 2},
}


def _pick_images(dataset: Path, per_class: int, codebook_per_class: int, seed: int = 0):
    classes = sorted(p.name for p in dataset.iterdir() if p.is_dir())
    rng = np.random.default_rng(seed)
    pool, labels, codebook_images = [], [], []
    for label, name in enumerate(classes):
        files = sorted(str(f) for f in (dataset / name).iterdir() if f.is_file())
        order = rng.permutation(len(files))
        pool += [files[i] for i in order[:per_class]]
        labels += [label] * min(per_class, len(files))
        codebook_images += [files[i] for i in order[per_class : per_class + codebook_per_class]]
    return classes, pool, np.asarray(labels), codebook_images


def _descriptors(path: str, options: dict, max_side: int | None, step: int):
    image = load_grayscale(path, max_side=max_side)
    ds = dense_sift(image, PATCH_SIZES, step, **options)
    # the pipeline stores uint8 descriptors: reproduce the round trip
    return dequantize_descriptors(quantize_descriptors(ds.descriptors)), ds.x, ds.y, image.shape


def _encode_variant(name, options, max_side, pool, codebook_images, args, codebook_opts=None):
    codebook_opts = codebook_opts or {}
    n_samples = args.n_samples * codebook_opts.get("n_samples_factor", 1)
    kmeans_iter = codebook_opts.get("kmeans_iter", args.kmeans_iter)
    kmeans_seed = codebook_opts.get("kmeans_seed", 0)
    key = [options, max_side, args.step, n_samples, kmeans_iter, args.per_class, args.codebook_per_class]
    if kmeans_seed:
        key.append(kmeans_seed)
    key = json.dumps(key, sort_keys=True)
    path = Path(args.work_dir) / f"vq-{hashlib.sha1(key.encode()).hexdigest()[:12]}.npz"
    if path.exists():
        data = np.load(path, allow_pickle=False)
        return {k: data[k] for k in data.files}, 0.0
    t0 = time.process_time()
    rng = np.random.default_rng(0)
    per_image = int(np.ceil(n_samples / len(codebook_images)))
    sample = []
    for p in codebook_images:
        d, _, _, _ = _descriptors(p, options, max_side, args.step)
        rows = rng.choice(d.shape[0], size=min(per_image, d.shape[0]), replace=False)
        sample.append(d[rows])
    sample = np.concatenate(sample)[:n_samples]
    centres = learn_kmeans_codebook(sample, N_WORDS, max_iter=kmeans_iter, random_state=kmeans_seed)
    index, xs, ys, counts, shapes = [], [], [], [], []
    for p in pool:
        d, x, y, shape = _descriptors(p, options, max_side, args.step)
        index.append(vq_encode(d, centres))
        xs.append(x)
        ys.append(y)
        counts.append(d.shape[0])
        shapes.append(shape)
    out = {
        "index": np.concatenate(index),
        "x": np.concatenate(xs),
        "y": np.concatenate(ys),
        "counts": np.asarray(counts),
        "shapes": np.asarray(shapes),
    }
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    return out, time.process_time() - t0


def _histograms(vq, levels=(1, 2, 4), weights=None, per_level_l1=False, power=1.0):
    """Average-pooled pyramid histograms, normalised as the row asks (float32 rows)."""
    n_cells = sum(lv * lv for lv in levels)
    starts = np.concatenate([[0], np.cumsum(vq["counts"])])
    X = np.zeros((len(vq["counts"]), n_cells * N_WORDS), dtype=np.float64)
    bounds = np.cumsum([0] + [lv * lv * N_WORDS for lv in levels])
    for i in range(len(vq["counts"])):
        a, b = starts[i], starts[i + 1]
        cells = pyramid_cells(vq["x"][a:b], vq["y"][a:b], tuple(vq["shapes"][i]), levels)
        flat = (cells.astype(np.int64) * N_WORDS + vq["index"][a:b].astype(np.int64)).ravel()
        h = np.bincount(flat, minlength=n_cells * N_WORDS).reshape(n_cells, N_WORDS).astype(np.float64)
        h /= np.maximum(h.sum(axis=1, keepdims=True), 1.0)  # average pooling per cell
        h = h.ravel() ** power
        if per_level_l1:
            for j in range(len(levels)):
                blk = h[bounds[j] : bounds[j + 1]]
                blk /= max(blk.sum(), 1e-30)
                if weights is not None:
                    blk *= weights[j]
        h /= max(h.sum(), 1e-30)
        X[i] = h
    return X.astype(np.float32)


def _splits(labels, n_splits, n_train=100):
    out = []
    for seed in range(n_splits):
        rng = np.random.default_rng(1000 + seed)
        train = np.zeros(labels.shape[0], dtype=bool)
        for c in np.unique(labels):
            idx = np.flatnonzero(labels == c)
            train[rng.choice(idx, size=n_train, replace=False)] = True
        out.append(train)
    return out


CLASSIFIERS = {
    # PmSVM scales every dimension by its training maximum: it cannot see per-level
    # weights or per-level normalisation, so those rows need nSVM (the paper's classifier).
    "pmsvm": lambda seed: PmSVM(p=-8.0, C=0.01, random_state=seed),
    "nsvm": lambda seed: HIKnSVM(random_state=seed),
}


def _evaluate(X, labels, splits, classifier="pmsvm"):
    accs = []
    for seed, train in enumerate(splits):
        clf = CLASSIFIERS[classifier](seed).fit(X[train], labels[train])
        accs.append(100.0 * mean_per_class_accuracy(labels[~train], clf.predict(X[~train])))
    return accs


def print_table(results: dict) -> None:
    """The rows of ``results`` as a Markdown table (BENCHMARKS.md)."""
    print("| row | classifier | split 0 | split 1 | split 2 | mean ± std | paired diff to reference ± std | CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, row in results["rows"].items():
        accs = " | ".join(f"{a:.2f}" for a in row["accs"])
        diff = f"{row['diff_mean']:+.2f} ± {row['diff_std']:.2f}" if "diff_mean" in row else "—"
        print(
            f"| {name} | {row.get('classifier', 'pmsvm')} | {accs} | {row['mean']:.2f} ± {row['std']:.2f} "
            f"| {diff} | {row['cpu_s']:.0f} |"
        )


def metric_check(folder: str, n_splits: int) -> dict:
    """Mean per-class vs overall accuracy of PmSVM-HI on a stored 15-Scenes feature set.

    15-Scenes' test sets are unbalanced (the rest of each class after 100 training
    images): a paper reporting overall accuracy is not comparable with our metric.
    """
    from _bench_utils import load_features, resplit

    X, y = load_features(folder).pooled()
    out = {"per_class": [], "overall": []}
    for seed in range(n_splits):
        train, test = resplit(y, 100, seed)
        pred = CLASSIFIERS["pmsvm"](seed).fit(X[train], y[train]).predict(X[test])
        out["per_class"].append(100.0 * mean_per_class_accuracy(y[test], pred))
        out["overall"].append(100.0 * float(np.mean(pred == y[test])))
        print(f"split {seed}: mean per-class {out['per_class'][-1]:.2f}, overall {out['overall'][-1]:.2f}", flush=True)
    return out


#: Rows at the real setting: overrides of ``--config``, one table each (``--real``).
REAL_ROWS: dict[str, dict[str, dict]] = {
    "reference": {},
    "per-level L1": {"pooling": {"level_normalization": "l1"}},
    "per-level L1, SPM weights 1/4 1/4 1/2": {
        "pooling": {"level_normalization": "l1", "level_weights": [0.25, 0.25, 0.5]}
    },
    "power 0.5 (sqrt pooling), then L1": {"pooling": {"method": "sqrt"}},
    "power 0.5 (sqrt pooling), per-level L1": {"pooling": {"method": "sqrt", "level_normalization": "l1"}},
    "power 0.5 (sqrt pooling), per-level L1, SPM weights 1/4 1/4 1/2": {
        "pooling": {"method": "sqrt", "level_normalization": "l1", "level_weights": [0.25, 0.25, 0.5]}
    },
    "RootSIFT": {"sift": {"root_sift": True}},
    "RootSIFT, per-level L1": {"sift": {"root_sift": True}, "pooling": {"level_normalization": "l1"}},
    "RootSIFT, per-level L1, SPM weights 1/4 1/4 1/2": {
        "sift": {"root_sift": True},
        "pooling": {"level_normalization": "l1", "level_weights": [0.25, 0.25, 0.5]},
    },
}


def merged_overrides(*overrides: dict[str, dict]) -> dict[str, dict]:
    """Tables of overrides combined (later keys win), e.g. a descriptor change plus a pooling change."""
    out: dict[str, dict] = {}
    for tables in overrides:
        for table, keys in tables.items():
            out.setdefault(table, {}).update(keys)
    return out


#: The paper's codebook sample (Sharma & Jurie, sec. 3.1: k-means on 5·10⁵ descriptors).
PAPER_CODEBOOK_SAMPLE = {"codebook": {"n_samples": 500_000}}
#: Images at their original size: a cap above every image's longer side never shrinks one.
ORIGINAL_IMAGE_SIZE = {"image": {"max_side": 100_000}}
#: Dense SIFT as ``vl_phow`` computes it, as far as the ``[sift]`` options go (each option's
#: match to VLFeat: docs/benchmarks/dense-sift.md, "Dense SIFT vs VLFeat dsift").  vl_phow zeroes descriptors
#: whose VLFeat norm is below 0.005, a raw-norm threshold in our units that differs per patch
#: size; ``contrast_threshold`` is one value for all sizes: the 24-px one (the choice is
#: measured in docs/benchmarks/hik-setting.md, "Image size and VLFeat's dense-SIFT choices at step 3").
VL_PHOW_SIFT = {
    "sift": {
        "smoothing": "phow",
        "window_size": 1.5,
        "bin_centres": "integer",
        "grid_alignment": "centre",
        "low_contrast": "zero",
        "contrast_threshold": 0.27,
    }
}
#: The paper's pyramid (every level weighs the same): L1 per level.
PER_LEVEL_L1 = {"pooling": {"level_normalization": "l1"}}

#: Descriptor-side rows at step 3 (issue 11), each a cold build of its own (own stage cache,
#: own codebook), and the rows each is paired against (same pooling).
_STEP3_DESCRIPTOR_ROWS = {
    "5e5 samples": (PAPER_CODEBOOK_SAMPLE, ()),
    "5e5 samples, original image size": (
        merged_overrides(PAPER_CODEBOOK_SAMPLE, ORIGINAL_IMAGE_SIZE),
        ("5e5 samples",),
    ),
    "5e5 samples, original image size, vl_phow dense SIFT": (
        merged_overrides(PAPER_CODEBOOK_SAMPLE, ORIGINAL_IMAGE_SIZE, VL_PHOW_SIFT),
        ("5e5 samples", "5e5 samples, original image size"),
    ),
}
#: Rows paired against rows other than ``reference`` (``--table``): row -> its baselines.
REAL_BASELINES: dict[str, tuple[str, ...]] = {}
for _name, (_overrides, _baselines) in _STEP3_DESCRIPTOR_ROWS.items():
    for _suffix, _pooling in (("", {}), (", per-level L1", PER_LEVEL_L1)):
        REAL_ROWS[_name + _suffix] = merged_overrides(_overrides, _pooling)
        REAL_BASELINES[_name + _suffix] = tuple(b + _suffix for b in _baselines)

#: ``--classifiers`` cells beyond bench_config_table's: ``nsvm-m<margin>`` is its ``nsvm`` cell
#: with that fixed hinge margin (the paper's m = 0.02: ``nsvm-m0.02``).
NSVM_MARGIN_CELL = "nsvm-m"


def check_real_classifiers(names: list[str]) -> None:
    """One-line error (SystemExit) for a ``--classifiers`` name ``real_cell`` cannot run."""
    from bench_config_table import CLASSIFIERS as TABLE_CELLS

    for name in names:
        if name.startswith(NSVM_MARGIN_CELL):
            try:
                float(name.removeprefix(NSVM_MARGIN_CELL))
                continue
            except ValueError:
                pass
        elif name in TABLE_CELLS:
            continue
        raise SystemExit(
            f"error: --classifiers: unknown cell {name!r}; choose from {list(TABLE_CELLS)} "
            f"or {NSVM_MARGIN_CELL}<margin> (e.g. {NSVM_MARGIN_CELL}0.02)"
        )


def real_cell(name: str, X: np.ndarray, y: np.ndarray, n_classes: int, args) -> dict:
    """bench_config_table's ``run_cell`` for ``name`` (``nsvm-m<margin>``: ``nsvm`` at that margin)."""
    from bench_config_table import nsvm_margin, run_cell

    if name.startswith(NSVM_MARGIN_CELL):
        with nsvm_margin(float(name.removeprefix(NSVM_MARGIN_CELL))):
            return run_cell("nsvm", X, y, n_classes, args.splits, args.train_per_class, 1e-4, args.pmsvm_grid)
    return run_cell(name, X, y, n_classes, args.splits, args.train_per_class, 1e-4, args.pmsvm_grid)


def real_setting(args) -> None:
    """The ``REAL_ROWS`` named by ``--rows``: build each on the stage cache, evaluate its cells."""
    from _bench_utils import load_features, write_json

    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.settings.config import load_config

    names = list(REAL_ROWS) if args.rows == "all" else args.rows.split("|")
    unknown = [name for name in names if name not in REAL_ROWS]
    if unknown:
        raise SystemExit(f"error: --rows: unknown real-setting row(s) {unknown}; choose from {list(REAL_ROWS)}")
    check_real_classifiers(args.classifiers)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    results["protocol real"] = {
        "config": args.config,
        "cache_dir": args.cache_dir,
        "repeats": args.splits,
        "classifiers": args.classifiers,
        "pmsvm_grid": args.pmsvm_grid,
        "train_per_class": args.train_per_class,
    }
    rows = results.setdefault("real rows", {})
    for name in names:
        overrides = REAL_ROWS[name]
        config = load_config(args.config, overrides)
        folder = (
            Path(args.work_dir)
            / hashlib.sha1(json.dumps([args.config, overrides], sort_keys=True).encode()).hexdigest()[:12]
        )
        start = time.perf_counter()
        build_feature_set(args.dataset, folder, config, n_jobs=args.n_jobs, cache_dir=args.cache_dir)
        build_seconds = time.perf_counter() - start
        feats = load_features(folder)
        X, y = feats.pooled()
        row = rows.setdefault(name, {"cells": {}})
        row.update(
            overrides=overrides,
            folder=str(folder),
            cache_dir=args.cache_dir,
            config_hash=feats.config_hash,
            dims=int(X.shape[1]),
            build_seconds=round(build_seconds, 1),
        )
        print(f"{name}: built in {build_seconds:.0f} s ({folder})", flush=True)
        for clf in args.classifiers:
            row["cells"][clf] = real_cell(clf, X, y, feats.n_classes, args)
            write_json(out, results)
            print(f"  {clf}: {row['cells'][clf]['mean']:.2f} ± {row['cells'][clf]['std']:.2f}", flush=True)
        del X


def paired_difference(cell: dict, baseline: dict) -> tuple[float, float]:
    """Mean and standard deviation (ddof 1) over the splits of ``cell``'s accuracy minus
    ``baseline``'s on the same split, in points."""
    paired = U.paired_differences(cell, baseline)
    return float(paired.mean()), float(paired.std(ddof=1))


def print_real_table(results: dict) -> None:
    """The real-setting rows of ``results`` as a Markdown table (BENCHMARKS.md), with the paired
    difference of every cell to the same classifier's cell of its baselines (``REAL_BASELINES``,
    by default the ``reference`` row; same splits)."""
    rows = results.get("real rows", {})
    print(
        "| row | classifier | split 0 | split 1 | split 2 | mean ± std | paired diff ± std | overall acc. | final fit s |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for name, row in rows.items():
        for clf, cell in row["cells"].items():
            accs = " | ".join(f"{100 * r['accuracy']:.2f}" for r in cell["runs"])
            diffs = []
            for baseline in REAL_BASELINES.get(name, () if name == "reference" else ("reference",)):
                reference = rows.get(baseline, {}).get("cells", {}).get(clf)
                if reference is not None:
                    mean, std = paired_difference(cell, reference)
                    diffs.append(f"{mean:+.2f} ± {std:.2f}" + ("" if baseline == "reference" else f" vs {baseline}"))
            overall = f"{cell['overall_mean']:.2f} ± {cell['overall_std']:.2f}" if "overall_mean" in cell else "—"
            print(
                f"| {name} | {clf} | {accs} | {cell['mean']:.2f} ± {cell['std']:.2f} | {'; '.join(diffs) or '—'} "
                f"| {overall} | {cell['train_seconds']:.1f} |"
            )


def main() -> None:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, type=Path)
    ap.add_argument(
        "--work-dir",
        default="ablate-work",
        help="folder for the cached VQ indices of each descriptor variant (default: ./ablate-work)",
    )
    ap.add_argument("--out", default="ablate.json")
    ap.add_argument("--per-class", type=int, default=150)
    ap.add_argument("--codebook-per-class", type=int, default=20)
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--step", type=int, default=6)
    ap.add_argument("--n-samples", type=int, default=100_000)
    ap.add_argument("--kmeans-iter", type=int, default=30)
    ap.add_argument(
        "--classifier",
        choices=sorted(CLASSIFIERS),
        default="pmsvm",
        help="nsvm: the pooling rows' evaluator (PmSVM is blind to per-level weights)",
    )
    ap.add_argument(
        "--metric-check",
        metavar="FEATURES",
        help="only compare mean per-class and overall accuracy (PmSVM-HI) on a stored feature set",
    )
    ap.add_argument("--table", action="store_true", help="print the rows of --out as a Markdown table and exit")
    ap.add_argument("--rows", default="all", help="row names separated by '|', or 'all'")
    ap.add_argument("--real", action="store_true", help="the REAL_ROWS at the real setting (see the docstring)")
    ap.add_argument("--config", default="hik-nsvm", help="--real: the configuration the rows override")
    ap.add_argument("--cache-dir", help="--real: the stage cache of the full build")
    ap.add_argument("--n-jobs", type=int, default=1, help="--real: workers of each build")
    ap.add_argument(
        "--classifiers",
        nargs="+",
        default=["nsvm", "pmsvm-hi"],
        help="--real: cells of bench_config_table.py, or nsvm-m<margin> (nsvm at a fixed margin)",
    )
    ap.add_argument(
        "--pmsvm-grid", type=float, nargs="+", default=PMSVM_C_GRID, help="--real: PmSVM's C grid (one value: no CV)"
    )
    ap.add_argument("--train-per-class", type=int, default=100, help="--real: training images per class of a split")
    ap.add_argument("--merge", nargs="*", default=[], help="--table: real-setting rows of other --out files too")
    args = ap.parse_args()
    if args.table:
        results = json.loads(Path(args.out).read_text())
        for path in args.merge:  # real-setting rows run by other processes
            results.setdefault("real rows", {}).update(json.loads(Path(path).read_text())["real rows"])
        (print_real_table if "real rows" in results else print_table)(results)
        return
    if args.real:
        real_setting(args)
        return
    if args.metric_check:
        results = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
        results[f"metric check {args.metric_check}"] = metric_check(args.metric_check, args.splits)
        Path(args.out).write_text(json.dumps(results, indent=1))
        return

    classes, pool, labels, codebook_images = _pick_images(args.dataset, args.per_class, args.codebook_per_class)
    splits = _splits(labels, args.splits)
    wanted = None if args.rows == "all" else set(args.rows.split("|"))
    results = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    results[f"protocol {args.classifier}"] = {k: str(v) for k, v in vars(args).items()} | {
        "pool_images": len(pool),
        "codebook_images": len(codebook_images),
        "proxy": f"step {args.step} (paper 3), {args.n_samples} k-means samples, {args.kmeans_iter} iterations",
    }
    rows = results.setdefault("rows", {})

    tag = "" if args.classifier == "pmsvm" else f" [{args.classifier}]"

    def record(name, accs, cpu, ref):
        name += tag
        row = {
            "classifier": args.classifier,
            "accs": accs,
            "mean": float(np.mean(accs)),
            "std": float(np.std(accs)),
            "cpu_s": cpu,
        }
        if ref is not None:
            diff = np.asarray(accs) - np.asarray(ref)
            row.update(diff_mean=float(diff.mean()), diff_std=float(diff.std()))
        rows[name] = row
        Path(args.out).write_text(json.dumps(results, indent=1))
        d = f"  diff {row['diff_mean']:+.2f} ± {row['diff_std']:.2f}" if ref is not None else ""
        print(f"{name:70s} {row['mean']:.2f} ± {row['std']:.2f}{d}  ({cpu:.0f} s CPU)", flush=True)

    ref_vq, cpu = _encode_variant("reference", REFERENCE, 300, pool, codebook_images, args)
    t0 = time.process_time()
    ref_accs = _evaluate(_histograms(ref_vq), labels, splits, args.classifier)
    record("reference", ref_accs, cpu + time.process_time() - t0, None)

    for name, (levels, weights, per_level, power) in POOLING_VARIANTS.items():
        if wanted is not None and name not in wanted:
            continue
        t0 = time.process_time()
        accs = _evaluate(_histograms(ref_vq, levels, weights, per_level, power), labels, splits, args.classifier)
        record(name, accs, time.process_time() - t0, ref_accs)

    for name, (options, max_side) in DESCRIPTOR_VARIANTS.items():
        if name == "reference" or (wanted is not None and name not in wanted):
            continue
        vq, cpu = _encode_variant(name, options, max_side, pool, codebook_images, args)
        t0 = time.process_time()
        accs = _evaluate(_histograms(vq), labels, splits, args.classifier)
        record(name, accs, cpu + time.process_time() - t0, ref_accs)

    for name, opts in CODEBOOK_VARIANTS.items():
        if wanted is None or name not in wanted:  # costly: only on request
            continue
        vq, cpu = _encode_variant(name, opts.get("options", REFERENCE), 300, pool, codebook_images, args, opts)
        t0 = time.process_time()
        accs = _evaluate(_histograms(vq), labels, splits, args.classifier)
        record(name, accs, cpu + time.process_time() - t0, ref_accs)


if __name__ == "__main__":
    main()
