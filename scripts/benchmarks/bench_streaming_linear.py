#!/usr/bin/env python
"""Benchmark: the linear SVM trained from row blocks (``fit_streaming``, the streaming default:
L-BFGS over the blocks) against the in-memory fit, on the same rows of an experiment's splits.

    python benchmarks/bench_streaming_linear.py feature-sets/scene15-fisher --seeds 0 1 2 \\
        --block-rows 256 --work WORK --json bench-streaming-linear.json

For every split seed (the experiment's re-splits: :func:`~classify_images.pipeline.settings.dataset.split_indices`
on the pooled rows, as ``classify-images experiment --repeats 3 --seed 0`` draws them) and every
mode, one fresh single-threaded child process (its peak memory is its own, sampled from ``/proc``
by ``bench_peak_memory.measure``; ``VmHWM`` is the kernel's peak resident set of the child):

* ``memory``: the split's training rows gathered into one float32 array
  (``FeatureSet.pooled_rows``, what ``experiment`` does), then ``make_classifier("linear").fit``
  — the default solver (the eigenbasis when ``n`` is small);
* ``streaming``: ``fit_streaming(make_classifier("linear"), blocks)`` where the blocks are read
  from the store (memory-mapped ``.npy`` or shards) by ``FeatureSet.iter_pooled_rows``, about
  ``--block-rows`` of the split's training rows each, never assembled.

Both are scored block by block on the split's test rows (mean per-class accuracy).  Per mode and
seed: training CPU (``time.process_time``) and wall seconds, L-BFGS iterations, the objective of
the model on the training rows (evaluated block by block, float64), peak memory; per seed, the two
models compared: max |w_stream - w_memory| relative to max |w_memory|, agreement of the test
predictions, accuracy difference (streaming - memory, points).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, mean_per_class_accuracy, pin_threads, write_json

MODES = ("memory", "streaming")
#: The issue's criterion: streaming within this many accuracy points of the in-memory solver.
TARGET_POINTS = 0.3


class SplitBlocks:
    """The rows ``indices`` of a feature set's pooled rows as a re-iterable of ``(X_block, y_block)``,
    read from the store block by block (about ``block_rows`` selected rows per block), same blocks
    at every pass."""

    def __init__(self, feature_set, indices: np.ndarray, y: np.ndarray, block_rows: int) -> None:
        self.feature_set, self.indices, self.y = feature_set, np.asarray(indices), np.asarray(y)
        pooled = len(feature_set.y_train) + len(feature_set.y_test)
        stored_rows = max(1, int(round(block_rows * pooled / max(len(self.indices), 1))))
        self.max_block_bytes = stored_rows * 4 * feature_set.n_features

    def __iter__(self):
        for positions, block in self.feature_set.iter_pooled_rows(self.indices, self.max_block_bytes):
            yield block, self.y[positions]


def split_of(feature_set, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training and test indices of the pooled rows and the pooled labels, as ``experiment`` splits."""
    from classify_images.pipeline.settings.dataset import split_indices

    y_all = np.concatenate([feature_set.y_train, feature_set.y_test])
    split = feature_set.manifest["split"]
    train, test = split_indices(y_all, split["train_per_class"], split["test_per_class"], seed)
    return train, test, y_all


def blockwise_objective(model, blocks) -> float:
    """The model's training objective ``1/2 ||W||^2 + C sum sq-hinge`` summed block by block (float64)."""
    W, b = model.coef_.T, model.intercept_
    loss = 0.0
    for X_block, y_block in blocks:
        Y = np.where(np.asarray(y_block)[:, None] == model.classes_[None, :], 1.0, -1.0)
        margins = np.maximum(0.0, 1.0 - Y * (np.asarray(X_block, dtype=np.float64) @ W + b))
        loss += float(np.sum(margins**2))
    return 0.5 * float(np.sum(W * W)) + model.C_ * loss


def run_one(featureset: str, mode: str, seed: int, block_rows: int, save: str | None = None) -> dict:
    """Train one mode on one split, score it; the coefficients and test predictions to ``save`` (npz)."""
    from classify_images.classifiers.registry import make_classifier
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.training.streaming_training import fit_streaming

    feature_set = load_feature_set(featureset)
    train, test, y_all = split_of(feature_set, seed)
    blocks = SplitBlocks(feature_set, train, y_all[train], block_rows)
    gather_seconds = 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    if mode == "memory":
        X = feature_set.pooled_rows(train)
        gather_seconds = time.perf_counter() - wall
        cpu, wall = time.process_time(), time.perf_counter()
        model = make_classifier("linear", {}).fit(X, y_all[train])
        del X
    elif mode == "streaming":
        model = fit_streaming(make_classifier("linear", {}), blocks)
    else:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    predicted = np.empty(len(test), dtype=y_all.dtype)
    for positions, X_block in feature_set.iter_pooled_rows(test):
        predicted[positions] = model.predict(X_block)
    if save:
        np.savez(save, coef=model.coef_, intercept=model.intercept_, predicted=predicted)
    return {
        "mode": mode,
        "seed": int(seed),
        "n_train": int(len(train)),
        "n_test": int(len(test)),
        "n_features": int(feature_set.n_features),
        "block_rows": int(block_rows),
        "train_cpu_s": round(cpu, 2),
        "train_wall_s": round(wall, 2),
        "gather_wall_s": round(gather_seconds, 2),
        "n_iter": int(model.n_iter_),
        "C": float(model.C_),
        "objective": blockwise_objective(model, blocks),
        "accuracy": mean_per_class_accuracy(y_all[test], predicted),
    }


def _peak_kib() -> dict:
    values = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0])
    return values


def compare_pair(memory: dict, streaming: dict, memory_npz, streaming_npz) -> dict:
    """The two models of one split side by side (``*_npz``: what :func:`run_one` saved)."""
    w_m, w_s = memory_npz["coef"], streaming_npz["coef"]
    scale = float(np.max(np.abs(w_m))) or 1.0
    difference = 100.0 * (streaming["accuracy"] - memory["accuracy"])
    return {
        "seed": memory["seed"],
        "accuracy_memory": memory["accuracy"],
        "accuracy_streaming": streaming["accuracy"],
        "difference_points": round(difference, 3),
        "within_target": bool(abs(difference) <= TARGET_POINTS),
        "max_abs_dw_relative": float(np.max(np.abs(w_s - w_m)) / scale),
        "max_abs_db": float(np.max(np.abs(streaming_npz["intercept"] - memory_npz["intercept"]))),
        "prediction_agreement": float(np.mean(streaming_npz["predicted"] == memory_npz["predicted"])),
        "objective_gap_relative": (streaming["objective"] - memory["objective"]) / memory["objective"],
        "cpu_ratio": streaming["train_cpu_s"] / max(memory["train_cpu_s"], 1e-9),
        "wall_ratio": streaming["train_wall_s"] / max(memory["train_wall_s"], 1e-9),
    }


def main() -> int:
    pin_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("featureset")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--block-rows", type=int, default=256)
    parser.add_argument("--work", default="bench-streaming-linear", help="folder of the children's results")
    parser.add_argument("--json")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="take a mode and seed whose results are already in --work instead of running it again",
    )
    parser.add_argument("--child", nargs=2, metavar=("MODE", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = Path(args.work)
    if args.child:  # one measured run, in its own process
        mode, seed = args.child[0], int(args.child[1])
        result = run_one(args.featureset, mode, seed, args.block_rows, save=str(work / f"{mode}-{seed}.npz"))
        result["peak_kib"] = _peak_kib()
        write_json(work / f"{mode}-{seed}.json", result)
        return 0
    from bench_peak_memory import measure

    machine = announce_machine()
    work.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine,
        "featureset": str(args.featureset),
        "block_rows": args.block_rows,
        "load_average_at_start": list(os.getloadavg()),
        "runs": [],
        "pairs": [],
    }
    for seed in args.seeds:
        for mode in args.modes:
            done = work / f"{mode}-{seed}.json"
            if args.reuse and done.exists() and (work / f"{mode}-{seed}.npz").exists():
                result = json.loads(done.read_text())
                print(f"seed {seed} {mode}: reusing {done}", flush=True)
            else:
                command = [
                    sys.executable,
                    __file__,
                    args.featureset,
                    "--block-rows",
                    str(args.block_rows),
                    "--work",
                    str(work),
                    "--child",
                    mode,
                    str(seed),
                ]
                process = measure(command, interval=0.2)
                if process["returncode"] != 0:
                    raise SystemExit(f"{mode} seed {seed} failed (exit {process['returncode']})")
                result = json.loads(done.read_text())
                result.update(
                    {
                        key: process[key]
                        for key in (
                            "wall_s",
                            "sampled_peak_rss_mib",
                            "sampled_peak_anonymous_mib",
                            "sampled_peak_file_mib",
                        )
                    }
                )
            if "peak_kib" in result:  # the kernel's peak resident set of the child (VmHWM)
                result["peak_rss_mib"] = round(result.pop("peak_kib")["VmHWM"] / 1024, 1)
            write_json(done, result)
            report["runs"].append(result)
            print(
                f"seed {seed} {mode}: {100 * result['accuracy']:.2f} %, train CPU {result['train_cpu_s']:.1f} s, "
                f"wall {result['train_wall_s']:.1f} s, {result['n_iter']} iterations, peak RSS "
                f"{result['peak_rss_mib']:.0f} MiB (sampled anonymous peak {result.get('sampled_peak_anonymous_mib')})",
                flush=True,
            )
        if set(args.modes) == set(MODES):
            runs = {r["mode"]: r for r in report["runs"] if r["seed"] == seed}
            pair = compare_pair(
                runs["memory"],
                runs["streaming"],
                np.load(work / f"memory-{seed}.npz"),
                np.load(work / f"streaming-{seed}.npz"),
            )
            report["pairs"].append(pair)
            print(
                f"seed {seed}: streaming - memory {pair['difference_points']:+.2f} points, max |dw| "
                f"{pair['max_abs_dw_relative']:.2e} (relative), predictions agree {100 * pair['prediction_agreement']:.2f} %",
                flush=True,
            )
        write_json(args.json, report)  # after every split: a cut run keeps what it measured
    report["load_average_at_end"] = list(os.getloadavg())
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
