#!/usr/bin/env python
"""Our online dictionary learner against ``spams.trainDL``, side by side in one process.

On a saved descriptor sample (a ``.npy`` of rows: the ``scspm`` build's 2·10⁵ descriptors,
uint8 or float), split at random (seeded) into a training part and a held-out part:

* both learners start from the same initial atoms
  (:func:`~classify_images.coding.codebook.initial_atoms`), with the same λ, mini-batch count
  and size (default: ``configs/scspm.toml``'s 250 mini-batches of 512, λ = 0.15);
* ours runs on each of ``--threads`` (default 1 and 2), ``spams.trainDL`` on each of
  ``--spams-threads`` (default 1: its threads change the bits, so the build uses one);
* for each run: wall seconds, CPU seconds of the process (every thread), the SHA-1 of the
  dictionary, and the held-out objective :math:`f(D)` (the mean lasso cost, exact codes:
  :func:`~classify_images.coding.dictionary.mean_lasso_cost`) with its ratio to spams' first run.

The machine is shared: compare the ratios and CPU seconds of one run, not wall seconds across runs.

Example (issue 27)::

    python benchmarks/bench_dictionary_learning.py --sample sample.npy --json dictionary-learning.json
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np
from _bench_utils import announce_machine, pin_threads, write_json


def _descriptors(path: str) -> np.ndarray:
    from classify_images.features.dsift import dequantize_descriptors

    sample = np.load(path)
    return dequantize_descriptors(sample) if sample.dtype == np.uint8 else sample.astype(np.float32)


def _sha1(array: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(array, dtype=np.float32).tobytes()).hexdigest()


def split(X: np.ndarray, held_out: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(training rows, held-out rows)``: ``held_out`` rows drawn at random (seeded), the rest in order."""
    order = np.random.default_rng(seed).permutation(X.shape[0])
    return X[np.sort(order[held_out:])], X[order[:held_out]]


def run(name: str, learn, held_out: np.ndarray, lam: float) -> dict:
    """One timed learner call: wall, process CPU, SHA-1 and held-out objective."""
    from classify_images.coding.dictionary import mean_lasso_cost

    wall, cpu = time.perf_counter(), time.process_time()
    D = learn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    result = {
        "name": name,
        "wall_s": wall,
        "cpu_s": cpu,
        "sha1": _sha1(D),
        "objective": mean_lasso_cost(held_out, D, lam),
    }
    print(
        f"{name:>14}: wall {wall:7.2f} s  CPU {cpu:7.2f} s  objective {result['objective']:.6f}  "
        f"sha1 {result['sha1'][:8]}",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", required=True, help=".npy of descriptors as rows")
    parser.add_argument("--atoms", type=int, default=1024)
    parser.add_argument("--iterations", type=int, default=250, help="mini-batches")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lambda", dest="lam", type=float, default=0.15)
    parser.add_argument("--held-out", type=int, default=20_000, help="rows kept out of training")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="our learner's thread counts")
    parser.add_argument("--spams-threads", type=int, nargs="*", default=[1])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    pin_threads()
    machine = announce_machine()

    from classify_images.coding.codebook import initial_atoms
    from classify_images.coding.dictionary import learn_online_dictionary, mean_lasso_cost

    train, held_out = split(_descriptors(args.sample), args.held_out, 0)
    Xf = np.asfortranarray(train.T, dtype=np.float64)
    init = initial_atoms(Xf, args.atoms, 0)
    print(
        f"{train.shape[0]} training / {held_out.shape[0]} held-out descriptors of {train.shape[1]} dims, "
        f"{args.atoms} atoms, {args.iterations} mini-batches of {args.batch_size}, lambda {args.lam}",
        flush=True,
    )
    runs = [{"name": "initial atoms", "objective": mean_lasso_cost(held_out, init.T, args.lam)}]
    for threads in args.spams_threads:
        import spams

        runs.append(
            run(
                f"spams {threads} thr",
                lambda: (
                    np.asarray(
                        spams.trainDL(
                            Xf,
                            D=init,
                            lambda1=args.lam,
                            mode=2,
                            iter=args.iterations,
                            batchsize=args.batch_size,
                            numThreads=threads,
                            verbose=False,
                        )
                    ).T
                ),
                held_out,
                args.lam,
            )
        )
    for threads in args.threads:
        runs.append(
            run(
                f"ours {threads} thr",
                lambda: learn_online_dictionary(
                    train, init.T, args.lam, n_iter=args.iterations, batch_size=args.batch_size, n_threads=threads
                ),
                held_out,
                args.lam,
            )
        )
    ours = [r for r in runs if r["name"].startswith("ours")]
    spams_runs = [r for r in runs if r["name"].startswith("spams")]
    summary = {"ours_same_bits_on_every_thread_count": len({r["sha1"] for r in ours}) == 1}
    if spams_runs:
        reference = spams_runs[0]
        for r in ours:
            r["objective_vs_spams"] = r["objective"] / reference["objective"] - 1
            r["cpu_ratio_to_spams"] = r["cpu_s"] / max(reference["cpu_s"], 1e-9)
            r["wall_ratio_to_spams"] = r["wall_s"] / max(reference["wall_s"], 1e-9)
            print(
                f"{r['name']:>14}: objective {100 * r['objective_vs_spams']:+.3f} % vs {reference['name']}, "
                f"CPU {r['cpu_ratio_to_spams']:.2f}x, wall {r['wall_ratio_to_spams']:.2f}x",
                flush=True,
            )
    print(f"ours, same bits on {args.threads} threads: {summary['ours_same_bits_on_every_thread_count']}")
    write_json(args.json, {"machine": machine, "args": vars(args), "runs": runs, **summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
