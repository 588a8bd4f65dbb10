"""What the progress reporting costs: codebook learning with nobody listening (the Python
default) against the command line's default (INFO shown: scikit-learn's verbose lines turned
into log records, the heartbeat thread) and ``-v`` (DEBUG: every iteration on stderr), and
the stage-cache check that says "reusing the cached codebook" (one more hash of the sample).

CPU time of the process (the machine is shared), best of ``--repeats``, side by side in one
run; the learnt codebooks are compared too (the verbose mode must change no number)::

    python benchmarks/bench_logging_overhead.py --samples 100000 --words 256 --repeats 3
"""

from __future__ import annotations

import argparse
import io
import logging
import tempfile
import time

import numpy as np
from _bench_utils import announce_machine, pin_threads


def _cpu_best(fn, repeats: int) -> tuple[float, object]:
    best, result = np.inf, None
    for _ in range(repeats):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--words", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    pin_threads()

    from classify_images import _log
    from classify_images.coding.codebook import learn_kmeans_codebook
    from classify_images.pipeline.extraction.stages import StageCache

    announce_machine()
    rng = np.random.default_rng(0)
    X = rng.random((args.samples, 128), dtype=np.float32)
    logger = logging.getLogger(_log.PACKAGE_LOGGER)
    sink = logging.StreamHandler(io.StringIO())  # a handler that costs what formatting costs
    logger.addHandler(sink)

    def learn():
        return learn_kmeans_codebook(X, args.words, max_iter=args.iterations)

    rows = {}
    for name, level in (
        ("nobody listening (Python default)", logging.WARNING),
        ("INFO (CLI default)", logging.INFO),
        ("DEBUG (CLI -v)", logging.DEBUG),
    ):
        logger.setLevel(level)
        rows[name] = _cpu_best(learn, args.repeats)
    logger.setLevel(logging.NOTSET)
    logger.removeHandler(sink)
    base_time, base = rows["nobody listening (Python default)"]
    for name, (seconds, codebook) in rows.items():
        same = np.array_equal(codebook, base)
        print(
            f"k-means {args.samples}x128 -> {args.words} words, {args.iterations} iterations, {name}: "
            f"{seconds:.3f} s CPU ({seconds / base_time:.3f}x), same codebook: {same}"
        )

    sample = (X * 255).astype(np.uint8)
    with tempfile.TemporaryDirectory() as folder:
        cache = StageCache(folder)
        params = {"kind": "kmeans", "size": args.words}
        seconds, _ = _cpu_best(lambda: cache.has_codebook(sample, params), args.repeats)
    print(f"has_codebook on a {sample.nbytes / 1e6:.1f} MB sample: {seconds * 1e3:.1f} ms CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
