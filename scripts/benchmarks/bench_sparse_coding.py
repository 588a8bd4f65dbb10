#!/usr/bin/env python
"""Benchmark the numba lasso encoder against ``spams.lasso`` (mode 2), one thread each.

Encoders: ``feature_sign`` (default ``lasso_lars_codes``: feature-sign search
on pools of atoms grown by the full KKT check), ``lars_full``
(``n_candidates=None``: the LARS-lasso homotopy on all atoms, the reference),
``previous`` (the solver of another git revision, ``--baseline-rev``,
default ``main``: its ``coding/lars.py`` and ``coding/_lars_kernels.py`` loaded
from ``git show``), ``spams`` and, as the bound, ``blas_product_f32``: the
bare correlation product ``X Dᵀ`` alone.  ``feature_sign_per_image`` and
``previous_per_image`` code each image's descriptors in a call of their own, as a
build does (``SparseCoder.encode`` once per image; the previous revision given the
shared Gram matrix as its ``SparseCoder`` did), so that the per-call work counts.

Data: dense SIFT (16-px patches, step 6, ScSPM setting) of ``--n-images``
random 15-Scenes images (loaded with ``load_grayscale``, longer side <= 300).
Dictionary: 1024 atoms, either learnt by ``learn_sparse_dictionary(X, 1024,
n_iter=200)`` on the descriptors of ``--n-train-images`` *other* images
(``--dictionary learnt``, default) or random training descriptors
normalised to unit length (``--dictionary random``).  λ = 0.15.

All encoders get the same descriptors and the same float64 Gram matrix; all
timings include the correlation product (``X Dᵀ``).  Each is run
``--repeats`` times alternately; the fastest pass is reported, as wall time
and thread CPU time (the machine is shared: compare the ratios).  The codes
are compared (max |difference|, support differences, objective, KKT) with
``spams``, ``lars_full`` and ``previous``.

Example::

    python benchmarks/bench_sparse_coding.py --n-images 20 --seed 0
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, pin_threads

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = Path(os.environ.get("CLASSIFY_IMAGES_DATASETS", REPO.parent / "shared" / "datasets")) / "scene15"


def _timed(fn):
    w, c = time.perf_counter(), time.thread_time()
    out = fn()
    return out, time.perf_counter() - w, time.thread_time() - c


def _same_csr(a, b) -> bool:
    return (
        np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices) and np.array_equal(a.data, b.data)
    )


def _solver_of_revision(rev: str):
    """``lasso_lars_codes`` of git revision ``rev`` (its two modules copied into a temporary package)."""
    import importlib

    package = Path(tempfile.mkdtemp(prefix="lars_baseline_")) / "_baseline_lars"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("lars.py", "_lars_kernels.py"):
        src = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{rev}:coding/{name}"], check=True, capture_output=True
        ).stdout
        (package / name).write_bytes(src)
    sys.path.insert(0, str(package.parent))
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    return importlib.import_module("_baseline_lars.lars").lasso_lars_codes, commit


def main(argv=None) -> dict:
    pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    import scipy.sparse as sp
    import spams

    from classify_images.coding import SparseCoder, learn_sparse_dictionary
    from classify_images.coding.lars import lasso_lars_codes, lasso_objective
    from classify_images.features.dsift import dense_sift
    from classify_images.features.preprocess import load_grayscale

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--n-images", type=int, default=20)
    p.add_argument("--n-train-images", type=int, default=40)
    p.add_argument("--dictionary", choices=("learnt", "random"), default="learnt")
    p.add_argument("--atoms", type=int, default=1024)
    p.add_argument("--lambda1", type=float, default=0.15)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--float64", action="store_true", help="also time float64 correlations")
    p.add_argument("--baseline-rev", default="main", help="git revision of the 'previous' solver ('none': skip)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    machine = announce_machine()

    paths = sorted(args.data.glob("*/*.jpg"))
    if len(paths) < args.n_images + args.n_train_images:
        p.error(
            f"--data {args.data}: {len(paths)} JPEG images in class folders, need "
            f"{args.n_images + args.n_train_images} (give the 15-Scenes folder)"
        )
    random.Random(args.seed).shuffle(paths)
    per_image = [dense_sift(load_grayscale(q), 16, 6).descriptors for q in paths[: args.n_images]]
    X = np.concatenate(per_image)
    bounds = np.cumsum([0] + [len(x) for x in per_image])
    train = np.concatenate(
        [
            dense_sift(load_grayscale(q), 16, 6).descriptors
            for q in paths[args.n_images : args.n_images + args.n_train_images]
        ]
    )
    t0 = time.perf_counter()
    if args.dictionary == "learnt":
        D = learn_sparse_dictionary(train, args.atoms, n_iter=200, random_state=args.seed)
    else:
        rng = np.random.default_rng(args.seed)
        keep = train[np.linalg.norm(train, axis=1) > 0.5]
        D = keep[rng.choice(len(keep), args.atoms, replace=False)]
    D = np.asarray(D, dtype=np.float64)
    D /= np.maximum(np.linalg.norm(D, axis=1, keepdims=True), 1e-12)
    t_dict = time.perf_counter() - t0
    G = D @ D.T
    Gf = np.asfortranarray(G)
    lam = args.lambda1
    X64 = X.astype(np.float64)

    def run_spams():
        Xf = np.asfortranarray(X64.T)
        q = np.asfortranarray(D @ Xf)
        return spams.lasso(Xf, Q=Gf, q=q, lambda1=lam, mode=2, numThreads=1).T.tocsr()

    D32 = D.astype(np.float32)

    def run_blas():  # the bare correlation product of the default encoder (float32)
        return np.ascontiguousarray(np.asarray(X, dtype=np.float32) @ D32.T)

    def per_image_calls(code_one_image):  # one call per image, as SparseCoder.encode in a build
        return sp.vstack([code_one_image(X[a:b]) for a, b in zip(bounds[:-1], bounds[1:])], format="csr")

    coder = SparseCoder(D, lam)
    runs = {
        "feature_sign": lambda: lasso_lars_codes(X, D, lam, gram=G),
        "feature_sign_per_image": lambda: per_image_calls(coder.encode),
        "lars_full": lambda: lasso_lars_codes(X, D, lam, gram=G, n_candidates=None),
    }
    baseline_commit = None
    if args.baseline_rev != "none":
        previous_codes, baseline_commit = _solver_of_revision(args.baseline_rev)
        runs["previous"] = lambda: previous_codes(X, D, lam, gram=G)
        # the previous SparseCoder.encode: the shared float64 Gram matrix, the rest per call
        runs["previous_per_image"] = lambda: per_image_calls(lambda x: previous_codes(x, D, lam, gram=G))
        previous_codes(X[:50], D, lam, gram=G)  # numba compile / cache load, untimed
    runs["spams"] = run_spams
    runs["blas_product_f32"] = run_blas
    if args.float64:
        runs["feature_sign_f64corr"] = lambda: lasso_lars_codes(X, D, lam, gram=G, correlation_dtype=np.float64)
    for warm in ({}, {"n_candidates": None}, {"correlation_dtype": np.float64}):
        lasso_lars_codes(X[:50], D, lam, gram=G, **warm)  # numba compile / cache load, untimed
    times = {k: [] for k in runs}
    codes = {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            codes[name], wall, cpu = _timed(fn)
            times[name].append((wall, cpu))

    n = X.shape[0]
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {**machine, "loadavg": os.getloadavg()},
        "data": {
            "images": args.n_images,
            "descriptors": n,
            "dsift": "16 px, step 6",
            "dictionary": args.dictionary,
            "atoms": args.atoms,
            "lambda1": lam,
            "dictionary_seconds": round(t_dict, 1),
        },
        "spams_version": getattr(spams, "__version__", "unknown"),
        "previous": {"rev": args.baseline_rev, "commit": baseline_commit},
        "encoders": {},
    }
    peers = {}
    for peer in ("spams", "lars_full", "previous", "previous_per_image"):
        if peer in codes:
            P = codes[peer].toarray().astype(np.float64)
            peers[peer] = (P, lasso_objective(X64, D, P, lam))
    for name in runs:
        wall = min(t[0] for t in times[name])
        cpu = min(t[1] for t in times[name])
        if name == "blas_product_f32":
            result["encoders"][name] = {"desc_per_s_wall": round(n / wall), "desc_per_s_cpu": round(n / cpu)}
            continue
        A = codes[name].toarray().astype(np.float64)
        fo = lasso_objective(X64, D, A, lam)
        corr = (X64 - A @ D) @ D.T
        on = A != 0
        entry = result["encoders"][name] = {
            "desc_per_s_wall": round(n / wall),
            "desc_per_s_cpu": round(n / cpu),
            "nnz_per_code": round(float(on.sum(1).mean()), 2),
            "empty_codes": round(float((on.sum(1) == 0).mean()), 4),
        }
        for peer, (P, fp) in peers.items():
            if peer == name:
                continue
            entry[f"max_abs_diff_vs_{peer}"] = float(np.abs(A - P).max())
            entry[f"support_diffs_vs_{peer}"] = int((on != (P != 0)).sum())
            entry[f"max_rel_objective_diff_vs_{peer}"] = float(np.max(np.abs(fo - fp) / np.maximum(fp, 1e-12)))
            if peer != "spams" and name != "spams":
                entry[f"bit_identical_to_{peer}"] = _same_csr(codes[name], codes[peer])
        entry["kkt_max_violation"] = float(
            max(np.abs(corr).max() - lam, np.abs(corr[on] - lam * np.sign(A[on])).max() if on.any() else 0.0)
        )
    for name in runs:
        e, s = result["encoders"][name], result["encoders"]["spams"]
        e["speedup_wall"] = round(e["desc_per_s_wall"] / s["desc_per_s_wall"], 2)
        e["speedup_cpu"] = round(e["desc_per_s_cpu"] / s["desc_per_s_cpu"], 2)
        for peer in ("previous", "previous_per_image"):
            if peer in result["encoders"]:
                e[f"speedup_cpu_vs_{peer}"] = round(e["desc_per_s_cpu"] / result["encoders"][peer]["desc_per_s_cpu"], 3)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
