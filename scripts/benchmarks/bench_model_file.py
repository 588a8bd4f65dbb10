#!/usr/bin/env python
"""Cost of reading a self-contained model file safely, side by side with a bare ``np.load``.

Usage::

    python benchmarks/bench_model_file.py [--features 21504] [--classes 15] [--repeats 7]

Fits each classifier on random non-negative data of the ScSPM dimension (21 504 = 1024 words x
21 cells) and ``--classes`` classes, saves it with a 1024 x 128 codebook, then times, best of
``--repeats``, in the same process:

* ``np.load`` of every member (``allow_pickle=False``): what reading costs with no checks;
* :func:`~classify_images.pipeline.training.model_file.load_model`: the ``.npy`` header checks, the
  header and shape validation, finite-value scans and the estimator's restoration;
* :func:`~classify_images.pipeline.interfaces.image_features.load_image_model`: the same plus the extractor.

Prints one line per classifier: file size, the three times and the ratio load_model / np.load.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, best_time, pin_threads


def main() -> None:
    pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=21504)
    parser.add_argument("--classes", type=int, default=15)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    announce_machine()

    from classify_images.classifiers.registry import make_classifier
    from classify_images.pipeline.extraction.extractor import FeatureExtractor
    from classify_images.pipeline.interfaces.image_features import load_image_model
    from classify_images.pipeline.settings.config import load_config
    from classify_images.pipeline.training.model_file import load_model, save_model

    rng = np.random.default_rng(0)
    X = rng.random((args.samples, args.features), dtype=np.float32) ** 4
    y = np.asarray([f"class{i:02d}" for i in range(args.classes)])[np.arange(args.samples) % args.classes]
    config = load_config("scspm", {"pooling": {"levels": [1, 2, 4]}})
    extractor = FeatureExtractor(config, rng.random((1024, 128), dtype=np.float32))
    assert extractor.n_features == args.features, "--features must be 1024 x 21 for the scspm extractor"
    runs = {
        "linear": {},
        "pmsvm": {"random_state": 0},
        "mbkl": {"random_state": 0, "n_stumps": 20000},
        "nsvm": {"random_state": 0, "n_epochs": 2},
    }
    print(f"{args.samples} samples x {args.features} features, {args.classes} classes; best of {args.repeats}")
    print("classifier  file MB  np.load ms  load_model ms  load_image_model ms  load_model/np.load")
    with tempfile.TemporaryDirectory() as tmp:
        for name, params in runs.items():
            classifier = make_classifier(name, params).fit(X, y)
            path = save_model(
                Path(tmp) / name,
                classifier,
                extractor=extractor,
                feature_set={"config_hash": "0" * 40, "n_features": args.features, "class_names": sorted(set(y))},
            )

            def bare():
                with np.load(path, allow_pickle=False) as archive:
                    return {key: archive[key] for key in archive.files}

            t_bare = best_time(bare, args.repeats)
            t_load = best_time(lambda: load_model(path), args.repeats)
            t_image = best_time(lambda: load_image_model(path), args.repeats)
            print(
                f"{name:<10}  {path.stat().st_size / 1e6:7.2f}  {1e3 * t_bare:10.1f}  {1e3 * t_load:13.1f}  "
                f"{1e3 * t_image:19.1f}  {t_load / t_bare:18.2f}"
            )


if __name__ == "__main__":
    main()
