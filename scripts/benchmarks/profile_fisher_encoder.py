#!/usr/bin/env python
"""Where the Fisher encoder's time goes: CPU per image of each step, its FLOP rate, and the BLAS's.

One thread (``threadpoolctl``), CPU time (``time.process_time``: what a busy shared machine
still measures), on the dense SIFT of ``--n-images`` images of a dataset (every ``k``-th file),
with the PCA + GMM model of a feature set (``--feature-set``: its ``codebook.npz``).  Prints,
per image: dense SIFT of the mirror (what a flipped row adds before encoding), then the
encoder's steps as :meth:`~classify_images.coding.fisher.FisherEncoder.encode` runs them
(grouping by atom, gather, PCA projection, ``[x, x², 1]``, the log-density product, the
compiled pass from the densities to the statistics), the whole ``encode``, the GFLOP per image
of its two products and their rate, the components kept a descriptor, and the rate of one large
single-precision product of the same shapes by the machine's BLAS (the attainable peak of the
products).  ``--posterior-threshold`` sets the encoder's (0: the dense path, every posterior).

Example::

    python scripts/benchmarks/profile_fisher_encoder.py --dataset ../shared/datasets/scene15 \
        --feature-set feature-sets/scene15-fisher-flip-rootsift --n-images 12
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time

import numpy as np
from _bench_utils import announce_machine
from threadpoolctl import threadpool_limits

from classify_images.coding import fisher as F
from classify_images.coding._fisher_kernels import accumulate_posterior_statistics
from classify_images.coding.pooling import n_pyramid_cells, pyramid_cells
from classify_images.features.descriptors import make_descriptor
from classify_images.features.dsift import dequantize_descriptors, quantize_descriptors
from classify_images.features.preprocess import load_grayscale_checked
from classify_images.pipeline.storage.feature_store import load_feature_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--feature-set", required=True, help="a Fisher feature set (its model and config)")
    parser.add_argument("--n-images", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--posterior-threshold", type=float, default=F.POSTERIOR_THRESHOLD)
    parser.add_argument("--json")
    args = parser.parse_args()
    machine = announce_machine()

    fs = load_feature_set(args.feature_set)
    config = fs.config
    encoder = F.FisherEncoder(fs.codebook(), posterior_threshold=args.posterior_threshold)
    levels = list(config.pooling.levels)
    n_cells = n_pyramid_cells(levels)
    descriptor = make_descriptor(config.sift_params())
    paths = sorted(glob.glob(os.path.join(args.dataset, "*", "*")))
    paths = paths[:: max(1, len(paths) // args.n_images)][: args.n_images]
    images = [load_grayscale_checked(p, max_side=config.image.max_side)[0] for p in paths]
    items = []
    for image in images:
        result = descriptor.compute(image)
        descriptors = dequantize_descriptors(quantize_descriptors(result.descriptors))
        items.append((image, descriptors, pyramid_cells(result.x, result.y, image.shape, levels)))
    K, D = encoder.n_components, encoder.n_dims
    totals: dict[str, float] = {}

    def timed(step, work):
        start = time.process_time()
        out = work()
        totals[step] = totals.get(step, 0.0) + time.process_time() - start
        return out

    kept = []
    with threadpool_limits(1):
        encoder.encode(items[0][1], items[0][2], n_cells)  # numba and BLAS warm
        for _ in range(args.repeats):
            for image, descriptors, cells in items:
                timed("dense SIFT of the mirror", lambda: descriptor.compute(np.ascontiguousarray(image[:, ::-1])))
                order, bounds, _ = timed("group by atom", lambda: F.pyramid_atoms(cells, n_cells))
                gathered = timed("gather", lambda: descriptors[order])
                x = timed("PCA projection (product)", lambda: encoder.project(gathered))

                def moments():
                    m = np.empty((x.shape[0], 2 * D + 1), np.float32)
                    m[:, :D] = x
                    np.multiply(x, x, out=m[:, D : 2 * D])
                    m[:, 2 * D] = 1.0
                    return m

                m = timed("[x, x^2, 1]", moments)
                statistics = np.zeros((len(bounds) - 1, K, 2 * D + 1))
                for atom in range(len(bounds) - 1):
                    for start in range(bounds[atom], bounds[atom + 1], F.POSTERIOR_CHUNK):
                        chunk = m[start : min(start + F.POSTERIOR_CHUNK, bounds[atom + 1])]
                        lj = timed("log-densities (product)", lambda: chunk @ encoder._augmented_terms)
                        if encoder.posterior_threshold > 0:
                            kept.append(float((lj >= lj.max(axis=1, keepdims=True) + encoder._log_cut).sum(1).mean()))
                            timed(
                                "posteriors + statistics (compiled)",
                                lambda: accumulate_posterior_statistics(lj, chunk, encoder._log_cut, statistics[atom]),
                            )
                        else:
                            timed(
                                "posteriors + statistics (dense)",
                                lambda: statistics[atom].__iadd__(F._normalise_log_joint(lj).T @ chunk),
                            )
                timed("encode (whole)", lambda: encoder.encode(descriptors, cells, n_cells))
    n = args.repeats * len(items)
    per_image = {step: 1000 * seconds / n for step, seconds in totals.items()}
    n_desc = float(np.mean([d.shape[0] for _, d, _ in items]))
    P = items[0][1].shape[1]
    flop = n_desc * 2 * (P * D + (2 * D + 1) * K)  # the two products
    rng = np.random.default_rng(0)
    A = rng.standard_normal((16384, 2 * D + 1)).astype(np.float32)
    B = rng.standard_normal((2 * D + 1, K)).astype(np.float32)
    with threadpool_limits(1):
        A @ B
        start = time.process_time()
        for _ in range(20):
            A @ B
        blas = 20 * 2 * A.shape[0] * A.shape[1] * K / (time.process_time() - start) / 1e9
    report = {
        "machine": machine,
        "ms_per_image": {k: round(v, 2) for k, v in per_image.items()},
        "descriptors_per_image": round(n_desc),
        "gflop_per_image": round(flop / 1e9, 3),
        "products_gflops": round(
            flop / 1e6 / (per_image["PCA projection (product)"] + per_image["log-densities (product)"]), 1
        ),
        "encode_gflops": round(flop / 1e6 / per_image["encode (whole)"], 1),
        "kept_components_per_descriptor": round(float(np.mean(kept)), 1) if kept else encoder.n_components,
        "posterior_threshold": encoder.posterior_threshold,
        "blas_sgemm_gflops_same_shapes": round(blas, 1),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "numba_cpu": os.environ.get("NUMBA_CPU_NAME", "native"),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "native"),
    }
    for step, ms in report["ms_per_image"].items():
        print(f"{step:<28}{ms:>8.2f} ms")
    print(json.dumps({k: v for k, v in report.items() if k != "ms_per_image"}))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
