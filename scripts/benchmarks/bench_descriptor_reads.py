#!/usr/bin/env python
"""What a cached descriptor entry saves the encode stage (issue 27, descriptors computed aside).

CPU milliseconds per image of ``FeatureExtractor.vector`` on test images of a built feature set,
in this process, one BLAS thread, numba warm, in three settings, alternating, fastest of
``--repeats``:

* ``no_cache`` — no stage cache (kernels and Python only);
* ``computed`` — an empty stage cache: the descriptors are computed and written, then the codes
  (what the encode stage does for a test image on ``main``);
* ``read`` — the descriptors already in the stage cache (what the process of
  ``classify_images/pipeline/extraction/descriptors_aside.py`` leaves): read, then the codes computed and written.

``computed - read`` is the CPU the encode stage saves per image the aside process reached.

Example::

    python benchmarks/bench_descriptor_reads.py --feature-set FEATURES --n-images 60 --repeats 6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def measure(feature_set: Path, n_images: int, repeats: int, scratch: Path) -> dict:
    """``{"per_image_ms": {setting: fastest}, "repeats": [...], "n_images": n}``."""
    from threadpoolctl import threadpool_limits

    from classify_images.pipeline.extraction.extractor import FeatureExtractor
    from classify_images.pipeline.extraction.stages import StageCache
    from classify_images.pipeline.settings.dataset import file_fingerprint
    from classify_images.pipeline.storage.feature_store import load_feature_set

    fs = load_feature_set(feature_set)
    root = Path(fs.manifest["dataset"]["root"])
    test = fs.manifest["split"]["test"]
    step = max(1, len(test) // n_images)
    paths = [str(root / p) for p in test[::step][:n_images]]
    fingerprints = [file_fingerprint(p) for p in paths]
    base = FeatureExtractor.from_feature_set(fs)
    sift, max_side = base.config.sift_params(), base.config.image.max_side

    def fresh(name: str) -> FeatureExtractor:
        folder = scratch / name
        shutil.rmtree(folder, ignore_errors=True)
        return base.with_cache(StageCache(folder, cache_descriptors=True))

    def cpu_ms(extractor: FeatureExtractor) -> float:
        start = time.process_time()
        for path, fingerprint in zip(paths, fingerprints):
            extractor.vector(path, fingerprint)
        return 1000 * (time.process_time() - start) / len(paths)

    runs = []
    with threadpool_limits(1):
        base.vector(paths[0], fingerprints[0])  # numba loaded, the coder prepared
        for _ in range(repeats):
            no_cache = cpu_ms(base)
            computed = cpu_ms(fresh("computed"))
            read = fresh("read")
            for path, fingerprint in zip(paths, fingerprints):
                read.cache.image_descriptors(path, fingerprint, max_side, sift)
            runs.append({"no_cache": no_cache, "computed": computed, "read": cpu_ms(read)})
    fastest = {key: round(min(run[key] for run in runs), 2) for key in runs[0]}
    return {
        "per_image_ms": fastest,
        "repeats": [{k: round(v, 2) for k, v in run.items()} for run in runs],
        "n_images": len(paths),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--feature-set", required=True, type=Path)
    parser.add_argument("--n-images", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _bench_utils import announce_machine

    info = announce_machine()
    with tempfile.TemporaryDirectory(prefix="descriptor-reads-") as scratch:
        result = measure(args.feature_set, args.n_images, args.repeats, Path(scratch))
    result |= {"machine": info, "load_average": [round(v, 2) for v in os.getloadavg()]}
    for run in result["repeats"]:
        print("  ".join(f"{key} {value:.2f}" for key, value in run.items()))
    fastest = result["per_image_ms"]
    print(
        f"fastest of {args.repeats} (CPU ms per image, {result['n_images']} images): {fastest}; "
        f"saved per image read: {fastest['computed'] - fastest['read']:.2f} ms; load {result['load_average']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
