#!/usr/bin/env python
"""Is ``spams.trainDL``'s dictionary reproducible, and is it the same with two threads?

On a saved descriptor sample (a ``.npy`` of rows: the ``scspm`` build's 2·10⁵ uint8
descriptors, or any float descriptors):

1. learns the dictionary ``--repeats`` times in this process with
   :func:`~classify_images.coding.codebook.learn_sparse_dictionary` and once in a fresh
   process, and prints their SHA-1 (all must be equal);
2. runs ``spams.trainDL`` on the same initial atoms with ``numThreads`` 1, 2, 1, 2, ...
   (wall and CPU seconds, SHA-1, largest difference to the one-thread dictionary).

Example (issue 15, items 2 and 4)::

    python benchmarks/bench_dictionary_threads.py --sample sample.npy --iterations 100 \\
        --json dictionary-threads.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np


def _descriptors(path: str) -> np.ndarray:
    from classify_images.features.dsift import dequantize_descriptors

    sample = np.load(path)
    return dequantize_descriptors(sample) if sample.dtype == np.uint8 else sample.astype(np.float32)


def _sha1(array: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", required=True, help=".npy of descriptors as rows")
    parser.add_argument("--atoms", type=int, default=1024)
    parser.add_argument("--iterations", type=int, default=100, help="mini-batches of 512")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--fresh-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import spams

    from classify_images.coding.codebook import initial_atoms, learn_sparse_dictionary

    X = _descriptors(args.sample)
    learn = dict(n_iter=args.iterations, batch_size=512, lambda1=0.15, random_state=0, solver="spams")
    if args.fresh_only:
        print(_sha1(learn_sparse_dictionary(X, args.atoms, **learn)))
        return 0
    from _bench_utils import announce_machine

    machine = announce_machine()

    in_process = [_sha1(learn_sparse_dictionary(X, args.atoms, **learn)) for _ in range(args.repeats)]
    fresh = subprocess.run(
        [
            sys.executable,
            __file__,
            "--sample",
            args.sample,
            "--atoms",
            str(args.atoms),
            "--iterations",
            str(args.iterations),
            "--fresh-only",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    result = {
        "machine": machine,
        "in_process": in_process,
        "fresh_process": fresh,
        "reproducible": len(set(in_process + [fresh])) == 1,
    }
    print(json.dumps(result), flush=True)

    Xf = np.asfortranarray(X.T, dtype=np.float64)
    init = initial_atoms(Xf, args.atoms, 0)
    runs, one_thread = [], None
    for threads in (1, 2) * args.repeats:
        wall, cpu = time.perf_counter(), time.process_time()
        D = spams.trainDL(
            Xf, D=init, lambda1=0.15, mode=2, iter=args.iterations, batchsize=512, numThreads=threads, verbose=False
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        one_thread = D if one_thread is None else one_thread
        runs.append(
            {
                "threads": threads,
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "sha1": _sha1(D),
                "max_abs_diff_to_one_thread": float(np.abs(D - one_thread).max()),
                "load_average": os.getloadavg()[0],
            }
        )
        print(json.dumps(runs[-1]), flush=True)
    result["threads"] = runs
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
