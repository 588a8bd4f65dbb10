#!/usr/bin/env python
"""Encode cost of the spatial coordinates in Fisher vectors (``codebook.spatial_coordinates``).

The same images' dense SIFT (``configs/fisher-flip-xy.toml``'s ``[sift]``: 4 patch sizes every
4 px, longer side <= 300, uint8 round trip) encoded by a ``FisherEncoder`` with ``D = 64`` PCA
dimensions and by one with ``D = 64 + 2`` coordinates (random models of the same sizes, K = 256:
the cost does not depend on the values), alternately, ``--repeats`` passes, the fastest reported
in thread CPU time on one BLAS thread; pyramid 1×1 + 2×2 + 3×1 as the pipeline calls it::

    python benchmarks/bench_fisher_spatial.py --n-images 8 --repeats 3

Results: docs/benchmarks/augmentation.md ("Spatial coordinates").
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, pin_threads, write_json
from bench_encoders import DEFAULT_DATA, REPO


def _model(rng: np.random.Generator, gmm_dims: int, components: int) -> dict[str, np.ndarray]:
    weights = rng.random(components) + 0.2
    return {
        "pca_mean": rng.random(128) * 0.1,
        "pca_components": np.linalg.qr(rng.normal(size=(128, 64)))[0].T,
        "weights": weights / weights.sum(),
        "means": rng.normal(0, 0.1, (components, gmm_dims)),
        "variances": rng.random((components, gmm_dims)) * 0.01 + 0.005,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--n-images", type=int, default=8)
    parser.add_argument("--components", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    pin_threads()
    machine = announce_machine()
    from classify_images.coding.fisher import FisherEncoder, spatial_coordinates
    from classify_images.coding.pooling import pyramid_cells
    from classify_images.features.dsift import dequantize_descriptors
    from classify_images.pipeline.extraction.stages import compute_descriptors
    from classify_images.pipeline.settings.config import load_config

    config = load_config(REPO / "classify_images" / "configs" / "fisher-flip-xy.toml")
    paths = sorted(p for p in args.data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    paths = random.Random(0).sample(paths, min(args.n_images, len(paths)))
    images = []
    for path in paths:
        data = compute_descriptors(str(path), config.image.max_side, config.sift_params())
        shape = tuple(int(v) for v in data["shape"])
        images.append(
            (
                dequantize_descriptors(data["descriptors"]),
                pyramid_cells(data["x"], data["y"], shape, [1, 2, "3x1"]),
                spatial_coordinates(data["x"], data["y"], shape),
            )
        )
    rng = np.random.default_rng(0)
    encoders = {
        False: FisherEncoder(_model(rng, 64, args.components)),
        True: FisherEncoder(_model(rng, 66, args.components), spatial_coordinates=True),
    }
    best = {False: float("inf"), True: float("inf")}
    for _ in range(args.repeats):
        for spatial, encoder in encoders.items():
            start = time.thread_time()
            for descriptors, cells, coordinates in images:
                encoder.encode(descriptors, cells, 8, **({"coordinates": coordinates} if spatial else {}))
            best[spatial] = min(best[spatial], time.thread_time() - start)
    n_descriptors = float(np.mean([d.shape[0] for d, _, _ in images]))
    ratio = best[True] / best[False]
    print(
        f"{len(images)} images, {n_descriptors:.0f} descriptors each, K = {args.components}: "
        f"D = 64 {best[False]:.3f} s, D = 64 + 2 coordinates {best[True]:.3f} s thread CPU (best of {args.repeats}); "
        f"ratio {ratio:.3f}"
    )
    write_json(
        args.json,
        {
            "machine": machine,
            "images": len(images),
            "descriptors_per_image": n_descriptors,
            "components": args.components,
            "cpu_s_plain": best[False],
            "cpu_s_spatial": best[True],
            "ratio": round(ratio, 4),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
