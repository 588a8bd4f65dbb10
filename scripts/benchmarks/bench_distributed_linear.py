#!/usr/bin/env python
"""Benchmark: the linear SVM's one-vs-rest problems trained in groups on a Dask LocalCluster
against the joint L-BFGS on one machine, at 101 classes of real rows.

    python benchmarks/bench_distributed_linear.py feature-sets/scene15-fisher --classes 101 \\
        --workers 2 --tols 1e-4 --json bench-distributed-linear.json

The problem: the feature set's rows relabelled into ``--classes`` classes as the PmSVM benchmark
relabels them (``bench_pmsvm_liblinear.subclass_labels``: all stored rows pooled, each class's
rows ordered by their score on that class's first principal component and cut into equal
consecutive parts, 7 per class and 6 for the classes with the fewest rows — 101 for 15-Scenes).
The training rows are the feature set's own training rows with their new labels, so that the
workers read them from the feature set's folder (``FeatureSetRows``: memory-mapped, nothing sent
through the client), as ``train --cluster`` does; the test rows are its test rows.

For each ``tol``: ``QuadraticHingeSVC(tol=tol)`` (otherwise its defaults: ``C="auto"``, solver
``"auto"``) fitted here on the rows in memory (one thread: training CPU and wall seconds), then
``fit_distributed`` on a LocalCluster of ``--workers`` single-threaded processes (wall seconds;
the workers' CPU from ``client.run(time.process_time)`` before and after; the client's own CPU;
the cluster's start-up timed apart, and the first call — the workers opening the rows — reported
as such).  Bytes moved: the scheduler's counters (``_cluster_metrics``: graphs submitted,
scheduler-to-worker messages, result bytes) plus the labels scattered to every worker and the
groups' coefficient arrays gathered by the client.  The two
models compared: max |w_cluster - w_local| relative to max |w_local|, max |b_cluster - b_local|,
objectives (float64, on the training rows), agreement of the test predictions, accuracies.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from _bench_utils import announce_machine, mean_per_class_accuracy, pin_threads, write_json


class PooledView:
    """``view[rows]``: rows of a feature set's pooled rows (training, then test), gathered on demand."""

    def __init__(self, feature_set) -> None:
        self.feature_set = feature_set

    def __getitem__(self, rows) -> np.ndarray:
        return self.feature_set.pooled_rows(np.asarray(rows))


def relabelled(feature_set, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """New labels of the stored training rows and test rows (``subclass_labels`` on the pooled rows)."""
    from bench_pmsvm_liblinear import subclass_labels

    y_all = np.concatenate([feature_set.y_train, feature_set.y_test])
    labels = subclass_labels(PooledView(feature_set), y_all, n_classes)
    n_train = len(feature_set.y_train)
    return labels[:n_train], labels[n_train:]


def compare_models(local, cluster, X_train, y_train, X_test, y_test) -> dict:
    """The cluster's model against the local one (same classes, same ``C_``)."""
    scale = float(np.max(np.abs(local.coef_))) or 1.0
    local_pred, cluster_pred = local.predict(X_test), cluster.predict(X_test)
    objective_local, objective_cluster = local.objective(X_train, y_train), cluster.objective(X_train, y_train)
    return {
        "same_classes": bool(np.array_equal(local.classes_, cluster.classes_)),
        "max_abs_dw_relative": float(np.max(np.abs(cluster.coef_ - local.coef_)) / scale),
        "max_abs_db": float(np.max(np.abs(cluster.intercept_ - local.intercept_))),
        "objective_local": objective_local,
        "objective_cluster": objective_cluster,
        "objective_gap_relative": (objective_cluster - objective_local) / objective_local,
        "prediction_agreement": float(np.mean(local_pred == cluster_pred)),
        "accuracy_local": mean_per_class_accuracy(y_test, local_pred),
        "accuracy_cluster": mean_per_class_accuracy(y_test, cluster_pred),
        "n_iter_local": int(local.n_iter_),
        "n_iter_cluster": int(cluster.n_iter_),
    }


def fit_on_cluster(client, estimator, rows, y) -> tuple[object, dict]:
    """``fit_distributed`` timed: wall, the workers' and the client's CPU seconds."""
    from classify_images.pipeline.training.distributed_training import fit_distributed

    before, client_before, start = client.run(time.process_time), time.process_time(), time.perf_counter()
    model = fit_distributed(client, estimator, rows, y)
    wall = time.perf_counter() - start
    client_cpu = time.process_time() - client_before
    after = client.run(time.process_time)
    workers = sorted(after[w] - before[w] for w in after)
    return model, {
        "wall_s": round(wall, 2),
        "worker_cpu_s": [round(c, 2) for c in workers],
        "cpu_s": round(sum(workers) + client_cpu, 2),
        "client_cpu_s": round(client_cpu, 2),
    }


def main() -> int:
    pin_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("featureset")
    parser.add_argument("--classes", type=int, default=101)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tols", type=float, nargs="+", default=[1e-4])
    parser.add_argument("--json")
    args = parser.parse_args()
    machine = announce_machine()

    import _cluster_metrics
    import dask

    from classify_images.classifiers import QuadraticHingeSVC
    from classify_images.pipeline.execution.cluster import ClusterSpec, open_client
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.training.distributed_training import FeatureSetRows

    feature_set = load_feature_set(args.featureset)
    start = time.perf_counter()
    y_train, y_test = relabelled(feature_set, args.classes)
    counts = np.bincount(y_train, minlength=args.classes)
    print(
        f"relabelled into {len(np.unique(y_train))} classes in {time.perf_counter() - start:.0f} s: "
        f"{len(y_train)} training rows ({counts.min()}–{counts.max()} per class), {len(y_test)} test rows",
        flush=True,
    )
    X_train = np.asarray(feature_set.X_train)
    report = {
        "machine": machine,
        "featureset": str(args.featureset),
        "classes": int(len(np.unique(y_train))),
        "n_train": int(len(y_train)),
        "n_test": int(len(y_test)),
        "n_features": int(X_train.shape[1]),
        "training_rows_per_class": [int(counts.min()), int(counts.max())],
        "workers": args.workers,
        "load_average_at_start": list(os.getloadavg()),
        "runs": [],
    }
    local_models = {}
    for tol in args.tols:
        cpu, wall = time.process_time(), time.perf_counter()
        local_models[tol] = QuadraticHingeSVC(tol=tol).fit(X_train, y_train)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        report["runs"].append({"tol": tol, "local": {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}})
        print(
            f"tol {tol:g} local: CPU {cpu:.1f} s, wall {wall:.1f} s, {local_models[tol].n_iter_} iterations", flush=True
        )

    rows = FeatureSetRows.of(feature_set)
    with dask.config.set({"distributed.scheduler.preload": ["_cluster_metrics"]}):
        started = time.perf_counter()
        with open_client(ClusterSpec(n_workers=args.workers)) as client:
            report["cluster_start_wall_s"] = round(time.perf_counter() - started, 2)
            for index, tol in enumerate(args.tols):
                _cluster_metrics._reset()
                model, timing = fit_on_cluster(client, QuadraticHingeSVC(tol=tol), rows, y_train)
                metrics = _cluster_metrics.snapshot()
                moved = {
                    "graph_bytes": metrics["graph_bytes"],
                    "scheduler_to_worker_bytes": metrics["scheduler_to_worker_bytes"],
                    "result_bytes": metrics["result_bytes"],
                    "labels_scattered_bytes": int(y_train.nbytes) * args.workers,
                    "training_rows_bytes_read_by_each_worker": int(X_train.nbytes),
                    # the groups' coefficients gathered by the client (the scheduler's result_bytes
                    # counts what dask's sizeof sees of the estimators: not their arrays)
                    "models_returned_bytes": int(model.coef_.nbytes + model.intercept_.nbytes),
                }
                moved["total_through_network_bytes"] = (
                    moved["graph_bytes"]
                    + moved["scheduler_to_worker_bytes"]
                    + moved["result_bytes"]
                    + moved["labels_scattered_bytes"]
                    + moved["models_returned_bytes"]
                )
                run = report["runs"][index]
                run["cluster"] = {
                    **timing,
                    "first_call_opens_rows": index == 0,
                    "tasks": metrics["tasks"],
                    "bytes": moved,
                }
                run["comparison"] = compare_models(
                    local_models[tol], model, X_train, y_train, np.asarray(feature_set.X_test), y_test
                )
                comparison = run["comparison"]
                print(
                    f"tol {tol:g} cluster ({args.workers} workers): wall {timing['wall_s']:.1f} s, CPU {timing['cpu_s']:.1f} s "
                    f"(workers {timing['worker_cpu_s']}); max |dw| {comparison['max_abs_dw_relative']:.2e} relative, "
                    f"objective gap {comparison['objective_gap_relative']:+.2e}, predictions agree "
                    f"{100 * comparison['prediction_agreement']:.2f} %, accuracy local "
                    f"{100 * comparison['accuracy_local']:.2f} % / cluster {100 * comparison['accuracy_cluster']:.2f} %; "
                    f"moved {moved['total_through_network_bytes'] / 2**20:.1f} MiB",
                    flush=True,
                )
    report["load_average_at_end"] = list(os.getloadavg())
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
