#!/usr/bin/env python
"""Benchmark PmSVM / PmSVM-LUT against linear and exact additive-kernel SVMs.

Usage::

    python benchmarks/bench_pmsvm.py --features feature-sets/scene15-bof-spm \\
        --features feature-sets/scene15-scspm [--repeats 3] [--json out.json]

Every method runs in its own fresh Python subprocess, single-threaded
(``OMP_NUM_THREADS=1`` etc.), on the feature set's own train/test split:

* inputs: the features scaled into ``[0, 1]`` by the training maximum of each
  dimension (what PmSVM does internally, done once beforehand for the other
  methods, test values clipped), as float32 CSR (dense for the kernel SVMs'
  Gram computation is never materialised);
* training / testing time: the best of ``--repeats`` runs (wall clock,
  ``time.perf_counter``; training also as process CPU time, less sensitive to
  other jobs on a shared machine) after one warm-up fit on 2 % of the data (numba's
  cached compilation is loaded then, not timed).  The exact-kernel SVMs'
  training time includes computing the Gram matrix, their testing time the
  test-vs-train kernel;
* training memory: the input's size (CSR arrays) plus the peak RSS increase
  during one ``fit`` (``VmHWM`` of ``/proc/self/status``, reset through
  ``/proc/self/clear_refs`` just before the fit, minus ``VmRSS`` then; glibc's
  ``MALLOC_MMAP_THRESHOLD_=65536`` so freed memory is not silently reused), i.e. the
  paper's "memory usage" with the input counted once;
* model size: bytes of the fitted arrays (our classifiers: the ``.npz`` model
  file; kernel SVM: support vectors' rows + dual coefficients);
* accuracy: mean per-class accuracy (DESIGN.md Sec. 3) and overall accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _bench_utils as U
import numpy as np

METHODS = {
    # name: (description, kind, params)
    "pmsvm-chi2": ("PmSVM p=-1 (chi2), C=0.01", "pmsvm", {"p": -1.0}),
    "pmsvm-hi": ("PmSVM p=-8 (HI), C=0.01", "pmsvm", {"p": -8.0}),
    "pmsvm-lut-chi2": ("PmSVM-LUT p=-1, b=1000", "pmsvm", {"p": -1.0, "lut_bins": 1000}),
    "pmsvm-lut-hi": ("PmSVM-LUT p=-8, b=1000", "pmsvm", {"p": -8.0, "lut_bins": 1000}),
    "linear-lbfgs": ("QuadraticHingeSVC (L-BFGS), C=1", "linear", {}),
    "liblinear": ("LinearSVC (LIBLINEAR -s 1), C=1, tol=0.1", "liblinear", {"C": 1.0}),
    "fm-chi2": ("AdditiveChi2Sampler(2) + LinearSVC C=0.01", "fm", {"C": 0.01}),
    "svc-chi2": ("SVC precomputed exact chi2", "svc", {"p": -1.0}),
    "svc-hik": ("SVC precomputed exact HIK", "svc", {"p": -np.inf}),
    "svc-hik-ovr": ("SVC precomputed exact HIK, one-vs-rest", "svc", {"p": -np.inf, "one_vs_rest": True}),
}
SVC_C = (0.01, 1.0)
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


# --------------------------------------------------------------- worker side
def _status_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def _reset_peak() -> int:
    """Reset VmHWM to the current RSS; return the current RSS (KiB)."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS")


def load_split(folder: str):
    """Scaled float32 CSR train/test matrices and labels of a feature set."""
    import scipy.sparse as sp

    fs = U.load_features(folder)
    X_train, X_test, y_train, y_test = fs.X_train, fs.X_test, fs.y_train, fs.y_test
    X_train = np.asarray(X_train, dtype=np.float32)
    X_test = np.asarray(X_test, dtype=np.float32)
    fmax = X_train.max(axis=0)
    inv = np.divide(1.0, fmax, out=np.ones_like(fmax), where=fmax > 0)
    train = sp.csr_matrix(np.minimum(X_train * inv, 1.0).astype(np.float32))
    test = sp.csr_matrix(np.minimum(X_test * inv, 1.0).astype(np.float32))
    return train, test, np.asarray(y_train), np.asarray(y_test)


def mean_class_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    classes = np.unique(y_true)
    return float(np.mean([np.mean(y_pred[y_true == c] == c) for c in classes]))


def _csr_bytes(X) -> int:
    return int(X.data.nbytes + X.indices.nbytes + X.indptr.nbytes)


class KernelSVC:
    """``SVC(kernel="precomputed")`` on the exact power mean kernel (Gram computed in ``fit``).

    libsvm's multi-class scheme is one-vs-one; ``one_vs_rest=True`` trains one SVC per
    class against the rest instead, as PmSVM does.
    """

    def __init__(self, p: float, C: float, one_vs_rest: bool = False):
        self.p, self.C, self.one_vs_rest = p, C, one_vs_rest

    def fit(self, X, y):
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.svm import SVC

        from classify_images.classifiers.pmsvm import power_mean_kernel

        self.X_ = X
        svc = SVC(kernel="precomputed", C=self.C)
        self.svc_ = (OneVsRestClassifier(svc) if self.one_vs_rest else svc).fit(
            power_mean_kernel(X, X, p=self.p, eps=0.0), y
        )
        return self

    def predict(self, X):
        from classify_images.classifiers.pmsvm import power_mean_kernel

        return self.svc_.predict(power_mean_kernel(X, self.X_, p=self.p, eps=0.0))

    def model_bytes(self) -> int:
        svcs = self.svc_.estimators_ if self.one_vs_rest else [self.svc_]
        support = np.unique(np.concatenate([svc.support_ for svc in svcs]))
        coefs = sum(svc.dual_coef_.nbytes + svc.intercept_.nbytes for svc in svcs)
        return _csr_bytes(self.X_[support]) + coefs


def make_estimator(kind: str, params: dict, C: float | None = None):
    from sklearn.svm import LinearSVC

    if kind == "pmsvm":
        from classify_images.classifiers.pmsvm import PmSVM

        return PmSVM(random_state=0, **params)
    if kind == "linear":
        from classify_images.classifiers.quadratic_hinge import QuadraticHingeSVC

        return QuadraticHingeSVC(**params)
    if kind == "liblinear":
        return LinearSVC(loss="squared_hinge", dual=True, tol=0.1, max_iter=1000, random_state=0, **params)
    if kind == "fm":
        from sklearn.kernel_approximation import AdditiveChi2Sampler
        from sklearn.pipeline import make_pipeline

        svm = LinearSVC(loss="squared_hinge", dual=True, tol=0.1, max_iter=1000, random_state=0, **params)
        return make_pipeline(AdditiveChi2Sampler(sample_steps=2), svm)
    if kind == "svc":
        return KernelSVC(params["p"], C, params.get("one_vs_rest", False))
    raise ValueError(kind)


def model_bytes(est, kind: str) -> int:
    if kind in ("pmsvm", "linear"):
        from classify_images.pipeline.training.model_file import save_model

        with tempfile.TemporaryDirectory() as tmp:
            return save_model(Path(tmp) / "model", est).stat().st_size
    if kind == "svc":
        return est.model_bytes()
    svm = est[-1] if kind == "fm" else est
    return int(svm.coef_.nbytes + svm.intercept_.nbytes)


def n_iterations(est, kind: str):
    if kind == "pmsvm":
        return [int(est.n_iter_.min()), int(est.n_iter_.max())]
    if kind == "linear":
        return [int(est.n_iter_)] * 2
    if kind in ("liblinear", "fm"):
        svm = est[-1] if kind == "fm" else est
        return [int(np.min(svm.n_iter_)), int(np.max(svm.n_iter_))]
    return None


def run_worker(folder: str, method: str, repeats: int) -> list[dict]:
    _, kind, params = METHODS[method]
    train, test, y_train, y_test = load_split(folder)
    settings = [(None, {})] if kind != "svc" else [(C, {"C": C}) for C in SVC_C]
    results = []
    for C, _extra in settings:
        # warm-up: numba's cached compilation, imports, first-touch of the data
        warm = np.arange(0, train.shape[0], 50)
        make_estimator(kind, params, C).fit(train[warm], y_train[warm]).predict(test[:10])
        rss0 = _reset_peak()
        est = make_estimator(kind, params, C).fit(train, y_train)
        extra_kib = _status_kib("VmHWM") - rss0
        fit_times, fit_cpu, test_times = [], [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            est = make_estimator(kind, params, C).fit(train, y_train)
            fit_times.append(time.perf_counter() - t0)
            fit_cpu.append(time.process_time() - c0)
            t0 = time.perf_counter()
            pred = est.predict(test)
            test_times.append(time.perf_counter() - t0)
            if kind == "svc":  # the Gram matrices take seconds: one timing is enough
                break
        results.append(
            {
                "method": method if C is None else f"{method} C={C:g}",
                "description": METHODS[method][0] + ("" if C is None else f", C={C:g}"),
                "n_train": int(train.shape[0]),
                "n_test": int(test.shape[0]),
                "n_features": int(train.shape[1]),
                "density": float(train.nnz / np.prod(train.shape)),
                "mean_class_accuracy": mean_class_accuracy(y_test, pred),
                "accuracy": float(np.mean(pred == y_test)),
                "train_s": min(fit_times),
                "train_cpu_s": min(fit_cpu),
                "test_s": min(test_times),
                "input_mib": _csr_bytes(train) / 2**20,
                "extra_peak_mib": extra_kib / 1024,
                "train_memory_mib": _csr_bytes(train) / 2**20 + extra_kib / 1024,
                "model_mib": model_bytes(est, kind) / 2**20,
                "outer_iterations": n_iterations(est, kind),
            }
        )
    return results


# --------------------------------------------------------------- parent side
def run_method(folder: str, method: str, repeats: int) -> list[dict]:
    env = dict(os.environ, **{name: "1" for name in THREAD_ENV})
    # every allocation above 64 KiB is a fresh mmap (no dynamic threshold), so that
    # memory freed by the warm-up is not silently reused and missed by VmHWM
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    cmd = [sys.executable, __file__, "--worker", method, "--features", folder, "--repeats", str(repeats)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return [{"method": method, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown(folder: str, rows: list[dict]) -> str:
    lines = [
        f"### {Path(folder).name}",
        "",
        "| method | mean class acc. % | acc. % | train s (CPU s) | test s | train memory MiB (input + peak extra) | model MiB | outer iterations |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['method']} | failed: {r['error']} | | | | | | |")
            continue
        its = r["outer_iterations"]
        its = "" if its is None else (f"{its[0]}" if its[0] == its[1] else f"{its[0]}-{its[1]}")
        lines.append(
            f"| {r['description']} | {100 * r['mean_class_accuracy']:.2f} | {100 * r['accuracy']:.2f} | "
            f"{r['train_s']:.3f} ({r['train_cpu_s']:.3f}) | {r['test_s']:.3f} | {r['train_memory_mib']:.1f} "
            f"({r['input_mib']:.1f} + {r['extra_peak_mib']:.1f}) | {r['model_mib']:.2f} | {its} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    U.pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", action="append", required=True, help="feature set folder (repeatable)")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of: " + ", ".join(METHODS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wait-minutes", type=float, default=60.0)
    parser.add_argument("--json", help="write all results to this JSON file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args.features[0], args.worker, args.repeats)))
        return 0
    everything: dict = {"machine": U.announce_machine()}
    for folder in args.features:
        U.wait_for(folder, args.wait_minutes)
        rows = []
        for method in args.methods.split(","):
            rows.extend(run_method(folder, method, args.repeats))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        everything[folder] = rows
        print(markdown(folder, rows) + "\n", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
