#!/usr/bin/env python
"""PmSVM (χ², HI; with and without LUT) against LIBLINEAR and our linear L-BFGS: training cost.

Usage::

    python benchmarks/bench_pmsvm_liblinear.py --features feature-sets/scene15-bof-spm \\
        --features feature-sets/scene15-scspm [--problems 15,101] [--repeats 1] [--json out.json] \\
        [--baseline main]

``--baseline REV``: every PmSVM method is also run, right after the current code's, with the
package of the git revision ``REV`` (``git archive REV``, assembled as pyproject's
``package-dir`` maps it, first on ``PYTHONPATH``); its rows are marked ``[REV]``.

For every feature set two problems:

* ``15``: the feature set's own train/test split (15-Scenes: 1500 training rows, 15 classes);
* ``101``: the same rows relabelled into 101 classes.  All stored rows (train and test) are
  pooled; the rows of each class are ordered by their score on that class's first principal
  component and cut into equal consecutive parts, 7 per class and 6 for the classes with the
  fewest rows (101 in all for 15-Scenes: 11 × 7 + 4 × 6); then 30 rows per part for training
  (about 3000), the rest for testing (seeded per-class split).

Every method runs in its own fresh Python subprocess, single-threaded (``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, ``NUMBA_NUM_THREADS`` = 1), on the same input:
the features divided by the training maximum of each dimension (what PmSVM does internally;
test values clipped to ``[0, 1]``), float32, as a dense array (``--input dense``, the default:
what the pipeline passes a classifier, feature sets being dense) or CSR (``--input csr``).  The ``-2t`` methods are the same PmSVM with
``n_jobs=2`` (two joblib threads over groups of classes): wall time is their measure.

* training CPU time: ``time.process_time`` of ``fit`` (best of ``--repeats``) after
  :func:`~classify_images.classifiers.base.warm_up` (numba's compilation is not timed);
* training memory: the input's size plus the peak RSS increase during the timed ``fit``
  (``bench_pmsvm``'s measure; the largest over the repeats);
* accuracy: mean per-class accuracy on the test rows;
* ratio: training CPU time over LIBLINEAR's, in the same run.

The settings are each classifier's defaults where it has them, and LIBLINEAR's own: PmSVM
``C="auto"`` (``1 / mean M_p(x, x)``), ``tol=0.1``; ``LinearSVC`` (LIBLINEAR ``-s 1``, the
squared-hinge dual solved by coordinate descent like PmSVM) with ``tol=0.1`` and
``C = 1 / mean ||x||^2`` (SVMlight's default, what ``QuadraticHingeSVC(C="auto")`` uses);
``QuadraticHingeSVC`` defaults; and PmSVM HI at the papers' ``C = 0.01``, and χ²/HI at twice the
automatic C (``pmsvm-chi2-2c``, ``pmsvm-hi-2c``; not run by default).  PmSVM's and LIBLINEAR's stopping rules are the same
(``max PG - min PG <= tol`` on the dual's projected gradient).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _bench_utils as U
import numpy as np
from bench_pmsvm import THREAD_ENV, _csr_bytes, _reset_peak, _status_kib

METHODS = {
    # name: (description, kind, params)
    "pmsvm-chi2": ("PmSVM χ² (p = −1)", "pmsvm", {"p": -1.0}),
    "pmsvm-hi": ("PmSVM HI (p = −8)", "pmsvm", {"p": -8.0}),
    "pmsvm-lut-chi2": ("PmSVM-LUT χ², b = 1000", "pmsvm", {"p": -1.0, "lut_bins": 1000}),
    "pmsvm-lut-hi": ("PmSVM-LUT HI, b = 1000", "pmsvm", {"p": -8.0, "lut_bins": 1000}),
    "pmsvm-hi-c0.01": ("PmSVM HI, C = 0.01 (the papers')", "pmsvm", {"p": -8.0, "C": 0.01}),
    "pmsvm-lut-hi-c0.01": ("PmSVM-LUT HI, C = 0.01", "pmsvm", {"p": -8.0, "lut_bins": 1000, "C": 0.01}),
    "pmsvm-chi2-2c": ("PmSVM χ², C = 2 × auto", "pmsvm", {"p": -1.0, "C_factor": 2.0}),
    "pmsvm-hi-2c": ("PmSVM HI, C = 2 × auto", "pmsvm", {"p": -8.0, "C_factor": 2.0}),
    "liblinear": ("LIBLINEAR (LinearSVC, dual, tol 0.1)", "liblinear", {}),
    "lbfgs": ("QuadraticHingeSVC (L-BFGS)", "linear", {}),
    "pmsvm-hi-2t": ("PmSVM HI, n_jobs = 2", "pmsvm", {"p": -8.0, "n_jobs": 2}),
    "pmsvm-lut-hi-2t": ("PmSVM-LUT HI, n_jobs = 2", "pmsvm", {"p": -8.0, "lut_bins": 1000, "n_jobs": 2}),
}
DEFAULT_METHODS = (
    "liblinear,pmsvm-chi2,pmsvm-hi,pmsvm-lut-chi2,pmsvm-lut-hi,pmsvm-hi-c0.01,pmsvm-lut-hi-c0.01,"
    "lbfgs,pmsvm-hi-2t,pmsvm-lut-hi-2t"
)
TRAIN_PER_SUBCLASS = 30


# --------------------------------------------------------------- problems
def subclass_labels(X: np.ndarray, y: np.ndarray, n_classes: int) -> np.ndarray:
    """Relabel ``y`` into ``n_classes`` classes: each class cut into equal parts along its first PC.

    Every class gets ``n_classes // k`` or one more part (``k`` classes), the classes with
    the fewest rows the fewer parts.
    """
    classes, counts = np.unique(y, return_counts=True)
    base, extra = divmod(n_classes, classes.size)
    parts = np.full(classes.size, base)
    parts[np.argsort(-counts, kind="stable")[:extra]] += 1
    out = np.empty_like(y)
    first = 0
    for label, n_parts in zip(classes, parts):
        rows = np.flatnonzero(y == label)
        centred = np.asarray(X[rows], dtype=np.float64)
        centred -= centred.mean(axis=0)
        # first right singular vector via the small Gram matrix (rows << features)
        _, vectors = np.linalg.eigh(centred @ centred.T)
        score = vectors[:, -1]
        score = score * np.sign(score.sum() or 1.0)  # the eigenvector's sign is arbitrary
        order = rows[np.argsort(score, kind="stable")]
        for k, chunk in enumerate(np.array_split(order, n_parts)):
            out[chunk] = first + k
        first += n_parts
    return out


def load_problem(folder: str, n_classes: int, input_format: str = "dense"):
    """Scaled float32 train/test matrices (dense or CSR) and labels (module docstring)."""
    import scipy.sparse as sp

    fs = U.load_features(folder)
    if n_classes == fs.n_classes:
        X_train, X_test, y_train, y_test = fs.X_train, fs.X_test, fs.y_train, fs.y_test
    else:
        X, y = fs.pooled()
        labels = subclass_labels(X, y, n_classes)
        train, test = U.resplit(labels, TRAIN_PER_SUBCLASS, seed=0)
        X_train, X_test, y_train, y_test = X[train], X[test], labels[train], labels[test]
    X_train = np.asarray(X_train, dtype=np.float32)
    fmax = X_train.max(axis=0)
    inv = np.divide(1.0, fmax, out=np.ones_like(fmax), where=fmax > 0)
    train = np.minimum(X_train * inv, 1.0).astype(np.float32)
    test = np.minimum(np.asarray(X_test, dtype=np.float32) * inv, 1.0).astype(np.float32)
    if input_format == "csr":
        train, test = sp.csr_matrix(train), sp.csr_matrix(test)
    return train, test, np.asarray(y_train), np.asarray(y_test)


def input_bytes(X) -> int:
    return _csr_bytes(X) if hasattr(X, "indptr") else int(X.nbytes)


def density(X) -> float:
    return float((X.nnz if hasattr(X, "nnz") else np.count_nonzero(X)) / np.prod(X.shape))


def make_estimator(kind: str, params: dict, train):
    if kind == "pmsvm":
        from classify_images.classifiers.pmsvm import PmSVM

        params = dict(params)
        factor = params.pop("C_factor", None)
        if factor is not None:  # a multiple of C="auto": 1 / mean M_p(x, x), the input being scaled already
            eps = PmSVM().eps
            if hasattr(train, "indptr"):
                floored = train.astype(np.float64)
                floored.data = np.maximum(floored.data, eps)
                diagonal = np.asarray(floored.sum(axis=1)).ravel() + (train.shape[1] - np.diff(train.indptr)) * eps
            else:
                diagonal = np.maximum(train, eps).sum(axis=1, dtype=np.float64)
            params["C"] = factor / float(np.mean(diagonal))
        return PmSVM(random_state=0, **params)
    if kind == "linear":
        from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC

        return QuadraticHingeSVC(**params)
    from sklearn.svm import LinearSVC

    squared_norms = (
        train.multiply(train).sum(axis=1) if hasattr(train, "multiply") else np.einsum("ij,ij->i", train, train)
    )
    C = 1.0 / float(np.mean(squared_norms))
    return LinearSVC(C=C, loss="squared_hinge", dual=True, tol=0.1, max_iter=1000, random_state=0)


def n_iterations(est) -> list[int]:
    its = np.atleast_1d(np.asarray(est.n_iter_))
    return [int(its.min()), int(its.max())]


# --------------------------------------------------------------- worker side
def run_worker(folder: str, n_classes: int, method: str, repeats: int, input_format: str) -> dict:
    from classify_images.classifiers.base import warm_up

    _, kind, params = METHODS[method]
    train, test, y_train, y_test = load_problem(folder, n_classes, input_format)
    warm_up(make_estimator(kind, params, train), train, y_train)
    cpu, wall, extra_kib = [], [], 0
    for _ in range(repeats):
        est = make_estimator(kind, params, train)
        rss0 = _reset_peak()
        t0, c0 = time.perf_counter(), time.process_time()
        est.fit(train, y_train)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        extra_kib = max(extra_kib, _status_kib("VmHWM") - rss0)
    pred = est.predict(test)
    return {
        "method": method,
        "description": METHODS[method][0],
        "n_train": int(train.shape[0]),
        "n_test": int(test.shape[0]),
        "n_features": int(train.shape[1]),
        "n_classes": int(np.unique(y_train).size),
        "density": density(train),
        "input": input_format,
        "mean_class_accuracy": float(U.mean_per_class_accuracy(y_test, pred)),
        "train_cpu_s": min(cpu),
        "train_wall_s": min(wall),
        "input_mib": input_bytes(train) / 2**20,
        "extra_peak_mib": extra_kib / 1024,
        "outer_iterations": n_iterations(est),
    }


# --------------------------------------------------------------- parent side
def baseline_package(revision: str, folder: Path) -> Path:
    """Unpack the package of git ``revision`` under ``folder`` as pyproject's ``package-dir`` maps it.

    Returns the directory to put first on ``PYTHONPATH``.
    """
    import tarfile
    import tomllib

    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(repo), "archive", revision], capture_output=True, check=True).stdout
    source = folder / "source"
    source.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(source, filter="data")
    mapping = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    root = folder / "packages"
    for package, directory in sorted(mapping.items()):  # parents before children
        target = root.joinpath(*package.split("."))
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.symlink_to(source / directory, target_is_directory=True)
    return root


def run_method(
    folder: str, n_classes: int, method: str, repeats: int, input_format: str, baseline: tuple[str, Path] | None = None
) -> dict:
    env = dict(os.environ, **{name: "1" for name in THREAD_ENV})
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"  # as bench_pmsvm: freed memory is not reused unseen
    description = METHODS[method][0]
    if baseline is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(baseline[1]), env.get("PYTHONPATH")]))
        description = f"{description} [{baseline[0]}]"
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        method,
        "--features",
        folder,
        "--problems",
        str(n_classes),
        "--repeats",
        str(repeats),
        "--input",
        input_format,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"method": method, "description": description, "error": lines[-1] if lines else "failed"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), description=description)


def markdown(title: str, rows: list[dict]) -> str:
    reference = next((r for r in rows if r["method"] == "liblinear" and "error" not in r), None)
    first = next((r for r in rows if "error" not in r), None)
    head = (
        ""
        if first is None
        else (
            f" — {first['n_train']} training × {first['n_features']} features, {first['n_classes']} classes, "
            f"{100 * first['density']:.1f} % non-zero ({first['input']} input), {first['n_test']} test rows"
        )
    )
    lines = [
        f"#### {title}{head}",
        "",
        "| method | train CPU s | ÷ LIBLINEAR | train wall s | mean class acc. % | train memory MiB (input + peak extra) | outer iterations |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['description']} | failed: {r['error']} | | | | | |")
            continue
        ratio = "" if reference is None else f"{r['train_cpu_s'] / reference['train_cpu_s']:.2f}×"
        its = r["outer_iterations"]
        its = f"{its[0]}" if its[0] == its[1] else f"{its[0]}–{its[1]}"
        lines.append(
            f"| {r['description']} | {r['train_cpu_s']:.2f} | {ratio} | {r['train_wall_s']:.2f} | "
            f"{100 * r['mean_class_accuracy']:.2f} | {r['input_mib'] + r['extra_peak_mib']:.0f} "
            f"({r['input_mib']:.0f} + {r['extra_peak_mib']:.0f}) | {its} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", action="append", required=True, help="feature set folder (repeatable)")
    parser.add_argument("--problems", default="15,101", help="numbers of classes: the set's own, and/or relabelled")
    parser.add_argument("--methods", default=DEFAULT_METHODS, help="comma-separated subset of: " + ", ".join(METHODS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--input", choices=("dense", "csr"), default="dense", help="format of the matrices given to fit"
    )
    parser.add_argument(
        "--baseline", metavar="REV", help="also run the PmSVM methods with the package of this git revision"
    )
    parser.add_argument("--wait-minutes", type=float, default=60.0)
    parser.add_argument("--json", help="write all results to this JSON file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args.features[0], int(args.problems), args.worker, args.repeats, args.input)))
        return 0
    unknown = sorted(set(args.methods.split(",")) - set(METHODS))
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    everything: dict = {"machine": U.announce_machine()}
    with tempfile.TemporaryDirectory(prefix="bench-pmsvm-baseline-") as tmp:
        try:
            baseline = None if not args.baseline else (args.baseline, baseline_package(args.baseline, Path(tmp)))
        except subprocess.CalledProcessError as error:
            parser.error(f"--baseline {args.baseline}: git archive failed ({error.stderr.decode().strip()})")
        for folder in args.features:
            U.wait_for(folder, args.wait_minutes)
            for n_classes in (int(v) for v in args.problems.split(",")):
                rows = []
                for method in args.methods.split(","):
                    runs = [None] + ([baseline] if baseline and METHODS[method][1] == "pmsvm" else [])
                    for package in runs:
                        rows.append(run_method(folder, n_classes, method, args.repeats, args.input, package))
                        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                title = f"{Path(folder).name}, {n_classes} classes"
                everything[title] = rows
                print(markdown(title, rows) + "\n", flush=True)
    if args.json:
        U.write_json(args.json, everything)
    return 0


if __name__ == "__main__":
    sys.exit(main())
