#!/usr/bin/env python
"""Benchmark the numba LARS-lasso encoder against ``spams.lasso`` (mode 2), one thread each.

Encoders: ``lars_screened`` (default: paths on a screened candidate set,
checked by the full KKT condition), ``lars_full`` (``n_candidates=None``:
every path on all atoms, the solver before screening), ``spams`` and, as the
bound, ``blas_product_f32``: the bare correlation product ``X Dᵀ`` alone.

Data: dense SIFT (16-px patches, step 6, ScSPM setting) of ``--n-images``
random 15-Scenes images (loaded with ``load_grayscale``, longer side <= 300).
Dictionary: 1024 atoms, either learnt by ``learn_sparse_dictionary(X, 1024,
n_iter=200)`` on the descriptors of ``--n-train-images`` *other* images
(``--dictionary learnt``, default) or random training descriptors
normalised to unit length (``--dictionary random``).  λ = 0.15.

Both encoders get the same descriptors and the same float64 Gram matrix; both
timings include the correlation product (``X Dᵀ``).  Each is run
``--repeats`` times alternately; the fastest pass is reported, as wall time
and thread CPU time (the machine is shared: compare the ratios).  The codes
are compared (max |difference|, support differences, objective, KKT).

Example::

    python scripts/bench_sparse_coding.py --n-images 20 --seed 0
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("CLASSIFY_IMAGES_DATASETS", REPO.parent / "shared" / "datasets")) / "scene15"


def _timed(fn):
    w, c = time.perf_counter(), time.thread_time()
    out = fn()
    return out, time.perf_counter() - w, time.thread_time() - c


def _same_csr(a, b) -> bool:
    return (
        np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices) and np.array_equal(a.data, b.data)
    )


def main(argv=None) -> dict:
    import spams

    from classify_images.coding import learn_sparse_dictionary
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
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    paths = sorted(args.data.glob("*/*.jpg"))
    random.Random(args.seed).shuffle(paths)
    X = np.concatenate([dense_sift(load_grayscale(q), 16, 6).descriptors for q in paths[: args.n_images]])
    train = np.concatenate(
        [dense_sift(load_grayscale(q), 16, 6).descriptors for q in paths[args.n_images : args.n_images + args.n_train_images]]
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

    runs = {
        "lars_screened": lambda: lasso_lars_codes(X, D, lam, gram=G),
        "lars_full": lambda: lasso_lars_codes(X, D, lam, gram=G, n_candidates=None),
        "spams": run_spams,
        "blas_product_f32": run_blas,
    }
    if args.float64:
        runs["lars_screened_f64corr"] = lambda: lasso_lars_codes(X, D, lam, gram=G, correlation_dtype=np.float64)
    for warm in ({}, {"n_candidates": None}, {"correlation_dtype": np.float64}):
        lasso_lars_codes(X[:50], D, lam, gram=G, **warm)  # numba compile / cache load, untimed
    times = {k: [] for k in runs}
    codes = {}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            codes[name], wall, cpu = _timed(fn)
            times[name].append((wall, cpu))

    n = X.shape[0]
    R = codes["spams"].toarray().astype(np.float64)
    fr = lasso_objective(X64, D, R, lam)
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "loadavg": os.getloadavg()},
        "data": {"images": args.n_images, "descriptors": n, "dsift": "16 px, step 6",
                 "dictionary": args.dictionary, "atoms": args.atoms, "lambda1": lam,
                 "dictionary_seconds": round(t_dict, 1)},
        "spams_version": getattr(spams, "__version__", "unknown"),
        "encoders": {},
    }
    F = codes["lars_full"].toarray().astype(np.float64)
    ff = lasso_objective(X64, D, F, lam)
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
        result["encoders"][name] = {
            "desc_per_s_wall": round(n / wall),
            "desc_per_s_cpu": round(n / cpu),
            "nnz_per_code": round(float(on.sum(1).mean()), 2),
            "empty_codes": round(float((on.sum(1) == 0).mean()), 4),
            "max_abs_diff_vs_spams": float(np.abs(A - R).max()),
            "support_diffs_vs_spams": int((on != (R != 0)).sum()),
            "max_rel_objective_diff_vs_spams": float(np.max(np.abs(fo - fr) / np.maximum(fr, 1e-12))),
            "max_abs_diff_vs_lars_full": float(np.abs(A - F).max()),
            "support_diffs_vs_lars_full": int((on != (F != 0)).sum()),
            "max_rel_objective_diff_vs_lars_full": float(np.max(np.abs(fo - ff) / np.maximum(ff, 1e-12))),
            "bit_identical_to_lars_full": bool(name != "spams" and _same_csr(codes[name], codes["lars_full"])),
            "kkt_max_violation": float(max(np.abs(corr).max() - lam,
                                           np.abs(corr[on] - lam * np.sign(A[on])).max() if on.any() else 0.0)),
        }
    for name in runs:
        e, s = result["encoders"][name], result["encoders"]["spams"]
        e["speedup_wall"] = round(e["desc_per_s_wall"] / s["desc_per_s_wall"], 2)
        e["speedup_cpu"] = round(e["desc_per_s_cpu"] / s["desc_per_s_cpu"], 2)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
