"""Benchmark: one-vs-rest training on a Dask LocalCluster (1 and 2 workers) against one machine,
and the streaming HIK nSVM fit against the in-memory fit.

    python benchmarks/bench_distributed_training.py feature-sets/scene15-bof-spm --repeats 2 \
        --out bench-distributed-training.json

For PmSVM and HIK nSVM (default parameters, ``random_state=0``): the wall time of ``fit`` on
this machine (one thread), and of :func:`fit_distributed` on a LocalCluster of 1 and of 2
worker processes (one thread each; the workers read the feature set from its path; the
cluster is started and the rows opened on the workers by a first, untimed call), best of
``--repeats``, measured side by side in one run; the cluster models are checked to be the
local model bit for bit.  Streaming: :func:`fit_streaming` over blocks of ``--block-rows``
rows of the memory-mapped training rows (seeded permutation, :class:`RowBlocks`) against
``fit`` on the rows in memory: test accuracy (mean per class), wall time and the peak of
traced (Python + NumPy) memory during the call; and the time of the same streaming fit over the
blocks stored as CSR (as a sparse sharded store yields them; held in memory here).
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np
import scipy.sparse as sp
from _bench_utils import announce_machine, mean_per_class_accuracy, pin_threads, write_json

from classify_images.classifiers import HIKnSVM, PmSVM
from classify_images.classifiers.base import warm_up
from classify_images.pipeline.execution.cluster import ClusterSpec, open_client
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.distributed_training import FeatureSetRows, fit_distributed
from classify_images.pipeline.training.streaming_training import RowBlocks, fit_streaming

CLASSIFIERS = {"pmsvm": lambda: PmSVM(random_state=0), "nsvm": lambda: HIKnSVM(random_state=0)}


def timed(call):
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def traced(call):
    """``call()``, its wall time and the peak traced memory during it (bytes)."""
    tracemalloc.start()
    try:
        result, seconds = timed(call)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, seconds, peak


def main() -> None:
    pin_threads()  # one thread (BLAS, OpenMP, numba), for this process and its children
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("featureset")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--block-rows", type=int, default=150)
    parser.add_argument("--out", default="bench-distributed-training.json")
    parser.add_argument("--skip-streaming", action="store_true", help="measure the cluster training only")
    args = parser.parse_args()
    machine = announce_machine()

    feature_set = load_feature_set(args.featureset)
    X, y = np.asarray(feature_set.X_train), feature_set.y_train
    X_test, y_test = np.asarray(feature_set.X_test), feature_set.y_test
    rows = FeatureSetRows.of(feature_set)
    results: dict = {
        "machine": machine,
        "load_average_at_start": list(os.getloadavg()),
        "featureset": str(args.featureset),
        "shape": list(X.shape),
        "density": float(np.count_nonzero(X) / X.size),
        "training": {},
        "streaming": {},
    }

    local_models = {}
    for name, make in CLASSIFIERS.items():
        warm_up(make(), X, y)
        times, cpu = [], []
        for _ in range(args.repeats):
            before = time.process_time()
            model, seconds = timed(lambda: make().fit(X, y))
            cpu.append(time.process_time() - before)
            times.append(seconds)
        local_models[name] = model
        results["training"][name] = {
            "local": {
                "seconds": min(times),
                "all": times,
                "cpu_seconds": cpu[int(np.argmin(times))],
                "accuracy": mean_per_class_accuracy(y_test, model.predict(X_test)),
            }
        }
        print(f"{name} local: {min(times):.2f} s (CPU {cpu[int(np.argmin(times))]:.2f} s)", flush=True)

    for n_workers in (1, 2):
        start = time.perf_counter()
        with open_client(ClusterSpec(n_workers=n_workers)) as client:
            started = time.perf_counter() - start
            for name, make in CLASSIFIERS.items():
                _, first = timed(lambda: fit_distributed(client, make(), rows, y))  # opens the rows, loads kernels
                times, cpu = [], []
                for _ in range(args.repeats):
                    before = client.run(time.process_time)
                    model, seconds = timed(lambda: fit_distributed(client, make(), rows, y))
                    after = client.run(time.process_time)
                    times.append(seconds)
                    cpu.append(sorted(after[w] - before[w] for w in after))
                local = local_models[name]
                identical = all(
                    np.array_equal(getattr(model, a), getattr(local, a)) for a in type(local)._fitted_arrays
                )
                identical &= bool(np.array_equal(model.predict(X_test), local.predict(X_test)))
                results["training"][name][f"cluster{n_workers}"] = {
                    "seconds": min(times),
                    "all": times,
                    "first_call_seconds": first,
                    "worker_cpu_seconds": cpu[int(np.argmin(times))],
                    "cluster_start_seconds": started,
                    "identical_to_local": identical,
                }
                print(
                    f"{name} LocalCluster({n_workers}): {min(times):.2f} s (first call {first:.2f} s, "
                    f"start {started:.2f} s, worker CPU {cpu[int(np.argmin(times))]}), identical: {identical}",
                    flush=True,
                )

    if args.skip_streaming:
        write_json(args.out, results)
        return
    # streaming HIK nSVM against the in-memory fit
    blocks = RowBlocks(feature_set.X_train, y, args.block_rows, seed=0)
    memory_model, memory_seconds, memory_peak = traced(lambda: HIKnSVM(random_state=0).fit(X, y))
    stream_model, stream_seconds, stream_peak = traced(lambda: fit_streaming(HIKnSVM(random_state=0), blocks))
    # the same blocks as CSR (what a sparse sharded store yields), held in memory: time only
    csr_blocks = [(sp.csr_matrix(np.asarray(X_block)), y_block) for X_block, y_block in blocks]
    csr_model, csr_seconds = timed(lambda: fit_streaming(HIKnSVM(random_state=0), csr_blocks))
    exact_stream = fit_streaming(HIKnSVM(random_state=0, shuffle=False), blocks)
    exact_memory = HIKnSVM(random_state=0, shuffle=False).fit(X[blocks.order], y[blocks.order])
    results["streaming"] = {
        "block_rows": args.block_rows,
        "block_bytes": int(args.block_rows * X.shape[1] * 4),
        "data_bytes": int(X.nbytes),
        "in_memory": {
            "seconds": memory_seconds,
            "peak_traced_bytes": memory_peak,
            "accuracy": mean_per_class_accuracy(y_test, memory_model.predict(X_test)),
        },
        "streaming": {
            "seconds": stream_seconds,
            "peak_traced_bytes": stream_peak,
            "accuracy": mean_per_class_accuracy(y_test, stream_model.predict(X_test)),
        },
        "streaming_csr_blocks": {
            "seconds": csr_seconds,
            "identical_to_dense_blocks": bool(np.array_equal(csr_model.coef_, stream_model.coef_)),
        },
        "shuffle_false_identical": bool(np.array_equal(exact_stream.coef_, exact_memory.coef_)),
        "shuffle_false_accuracy": mean_per_class_accuracy(y_test, exact_stream.predict(X_test)),
    }
    print(results["streaming"], flush=True)
    results["load_average_at_end"] = list(os.getloadavg())
    write_json(args.out, results)


if __name__ == "__main__":
    main()
