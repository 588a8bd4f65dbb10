"""CPU cost of each colour space of dense colour SIFT on the same images, side by side in one run.

For every colour space (``[sift] color``) times, in CPU seconds of this process, the colour
conversion alone (:func:`~classify_images.features.colour.colour_channels`) and the whole
descriptor (:meth:`~classify_images.features.descriptors.DenseSift.compute`: conversion and
dense SIFT of the three channels) on the same decoded images.  The spaces are measured in turns,
round after round (A B C A B C ...), and each space's best round is kept, so that a change of
the machine's load hits every space alike; ratios are to the first space::

    python scripts/benchmarks/bench_colour_spaces.py /work/shared/datasets/flowers17 \\
        --images 20 --rounds 3 --spaces opponent c lab --json bench-colour/spaces.json

Results: docs/colour-spaces.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _bench_utils import announce_machine, write_json

from classify_images.features.colour import colour_channels
from classify_images.features.descriptors import make_descriptor
from classify_images.features.preprocess import load_colour

#: The Fisher configs' dense SIFT grid (4 patch sizes every 4 px).
SIFT = {"patch_sizes": [16, 24, 32, 40], "step": 4, "smooth": True, "contrast_threshold": 1.0}
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".pgm", ".bmp")


def first_images(dataset: Path, n: int) -> list[Path]:
    """``n`` images of ``dataset`` taken round-robin over its class folders (sorted)."""
    folders = sorted(p for p in dataset.iterdir() if p.is_dir())
    per_class = [sorted(p for p in f.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES) for f in folders]
    chosen = [files[i] for i in range(max(map(len, per_class), default=0)) for files in per_class if i < len(files)]
    return chosen[:n]


def cpu_seconds(fn, images) -> float:
    start = time.process_time()
    for image in images:
        fn(image)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--spaces", nargs="+", default=["opponent", "c", "lab"])
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--max-side", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    machine = announce_machine()
    images = [load_colour(path, args.max_side) for path in first_images(args.dataset, args.images)]
    if not images:
        print(f"{args.dataset}: no images in its class folders", file=sys.stderr)
        return 2
    descriptors = {space: make_descriptor({**SIFT, "color": space}) for space in args.spaces}
    for descriptor in descriptors.values():  # compile and warm caches outside the timings
        descriptor.compute(images[0])
    best = {space: {"conversion": float("inf"), "descriptor": float("inf")} for space in args.spaces}
    for _ in range(args.rounds):
        for space in args.spaces:
            conversion = cpu_seconds(lambda image, s=space: colour_channels(image, s), images)
            descriptor = cpu_seconds(descriptors[space].compute, images)
            best[space]["conversion"] = min(best[space]["conversion"], conversion)
            best[space]["descriptor"] = min(best[space]["descriptor"], descriptor)
    reference = args.spaces[0]
    print(f"{len(images)} images, longer side <= {args.max_side} px, best of {args.rounds} rounds, CPU s")
    for space in args.spaces:
        seconds = best[space]
        print(
            f"{space:>9}: conversion {seconds['conversion']:.3f} s, descriptor {seconds['descriptor']:.3f} s "
            f"(x{seconds['descriptor'] / best[reference]['descriptor']:.2f} of {reference}; conversion "
            f"{100 * seconds['conversion'] / seconds['descriptor']:.1f} % of it)",
            flush=True,
        )
    write_json(
        args.json,
        {
            "machine": machine,
            "images": len(images),
            "max_side": args.max_side,
            "rounds": args.rounds,
            "cpu_seconds": best,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
