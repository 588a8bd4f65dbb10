#!/usr/bin/env python
"""Product-quantisation codebook learning and encoding: the compiled kernels
(coding/_pq_kernels.py) against the NumPy form they replaced (batched matrix products per
chunk of positions, kept here as the peer), same rows, same start, one thread, same run.

    python benchmarks/bench_pq_fit.py --rows 1024 --dims 16384 --sub-dim 8 --n-iter 2 --json pq-fit.json

Prints the processor model, CPU seconds of each, and whether both learnt the same codebooks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from _bench_utils import announce_machine, pin_threads, write_json


def numpy_fit(rows: np.ndarray, sub_dim: int, n_iter: int, seed: int) -> np.ndarray:
    """The NumPy k-means of every position (the quantiser's code before the kernels)."""
    n, d = rows.shape
    m = -(-d // sub_dim)
    padded = np.zeros((n, m * sub_dim), dtype=np.float32)
    padded[:, :d] = rows
    positions = padded.reshape(n, m, sub_dim).transpose(1, 0, 2)
    k = min(256, n)
    start = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
    codebooks = np.ascontiguousarray(positions[:, start, :])
    chunk = max(1, (1 << 27) // (4 * n * k))
    for _ in range(n_iter):
        for first in range(0, m, chunk):
            sub, centroids = positions[first : first + chunk], codebooks[first : first + chunk]
            cross = np.matmul(sub, centroids.transpose(0, 2, 1))
            squared = np.einsum("pks,pks->pk", centroids, centroids)
            labels = np.argmin(squared[:, None, :] - 2.0 * cross, axis=2)
            p = sub.shape[0]
            flat = (labels + k * np.arange(p)[:, None]).ravel()
            counts = np.bincount(flat, minlength=p * k).reshape(p, k)
            for dim in range(sub_dim):
                sums = np.bincount(flat, weights=sub[:, :, dim].ravel(), minlength=p * k).reshape(p, k)
                filled = counts > 0
                centroids[:, :, dim][filled] = (sums[filled] / counts[filled]).astype(np.float32)
    return codebooks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--dims", type=int, default=16384)
    parser.add_argument("--sub-dim", type=int, default=8)
    parser.add_argument("--n-iter", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    pin_threads()
    machine = announce_machine()
    from classify_images.coding.product_quantizer import ProductQuantizer

    rows = np.random.default_rng(0).normal(size=(args.rows, args.dims)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    ProductQuantizer(args.sub_dim, n_iter=1).fit(rows[:300, :64])  # compile (or load) the kernels
    start = time.process_time()
    kernels = ProductQuantizer(args.sub_dim, n_iter=args.n_iter, seed=0).fit(rows)
    kernel_s = time.process_time() - start
    start = time.process_time()
    codes = kernels.encode(rows)
    encode_s = time.process_time() - start
    start = time.process_time()
    reference = numpy_fit(rows, args.sub_dim, args.n_iter, 0)
    numpy_s = time.process_time() - start
    report = {
        "machine": machine,
        "rows": args.rows,
        "dims": args.dims,
        "sub_dim": args.sub_dim,
        "n_iter": args.n_iter,
        "kernels_fit_cpu_s": round(kernel_s, 2),
        "numpy_fit_cpu_s": round(numpy_s, 2),
        "speed_up": round(numpy_s / max(kernel_s, 1e-9), 1),
        "kernels_encode_ms_per_row": round(1000 * encode_s / args.rows, 3),
        "codebooks_max_abs_difference": float(np.max(np.abs(reference - kernels.codebooks_))),
        "codes": int(codes.size),
    }
    print(json.dumps(report, indent=2))
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
