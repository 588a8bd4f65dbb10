"""Compressed feature rows: accuracy and bytes of float32 / float16 / product-quantised rows, and
the linear SVM trained in memory (L-BFGS) against streaming over row blocks (L-BFGS block by
block, the default, and averaged SGD).

Usage::

    python benchmarks/bench_compressed_rows.py FEATURE_SET [--epochs 10 20] [--json out.json]

``FEATURE_SET`` is a float32 feature set (``npy`` or ``sharded`` layout), e.g. 15-Scenes
Fisher vectors.  Each encoding is applied to its rows as ``build-features --rows`` stores
them (the same :class:`~classify_images.coding.product_quantizer.ProductQuantizer`, codebooks
learnt on the training rows), and ``QuadraticHingeSVC`` (``C="auto"``) is trained on the
decoded rows and scored on the decoded test rows.  Streaming reads the rows in blocks of
``--block-rows`` (the codes decoded block by block, as a ``pq`` store is read); its peak
memory is the ``tracemalloc`` peak of the training call (NumPy reports its buffers), beside
the in-memory solver's.  One thread (BLAS pinned); times are CPU seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from _bench_utils import announce_machine, mean_per_class_accuracy, pin_threads, write_json

# The package's classifiers and codecs are imported by the functions that use them, after
# main() has pinned the thread pools (importing this script leaves them as they were).

ENCODINGS = ("float32", "float16", "pq16", "pq8")


class CodeBlocks:
    """Row blocks decoded from stored codes (or float16 / float32 rows) one block at a time."""

    def __init__(self, stored: np.ndarray, y: np.ndarray, decode, rows_per_block: int, seed: int = 0) -> None:
        self.stored, self.y, self.decode, self.rows = stored, y, decode, rows_per_block
        self.order = np.random.default_rng(seed).permutation(stored.shape[0])

    def __iter__(self):
        for start in range(0, self.order.size, self.rows):
            rows = np.sort(self.order[start : start + self.rows])
            yield self.decode(self.stored[rows]), self.y[rows]


def codec(encoding: str, X_train: np.ndarray):
    """``(encode, decode, codebook_bytes, fit_seconds)`` of an encoding, codebooks learnt on ``X_train``."""
    if encoding == "float32":
        return (lambda X: X), (lambda S: np.asarray(S, dtype=np.float32)), 0, 0.0
    if encoding == "float16":
        return (lambda X: X.astype(np.float16)), (lambda S: S.astype(np.float32)), 0, 0.0
    from classify_images.coding.product_quantizer import ProductQuantizer, pq_sub_dim

    start = time.process_time()
    quantizer = ProductQuantizer(pq_sub_dim(encoding)).fit(X_train)
    return quantizer.encode, quantizer.decode, quantizer.codebooks_.nbytes, time.process_time() - start


def score(model, X: np.ndarray, y: np.ndarray) -> dict:
    predicted = model.predict(X)
    return {
        "accuracy": round(float(np.mean(predicted == y)), 4),
        "mean_per_class_accuracy": round(float(mean_per_class_accuracy(y, predicted)), 4),
    }


def measure(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    *,
    encodings=ENCODINGS,
    epochs=(10, 20),
    streamed=("float32", "pq8"),
    block_rows: int = 256,
) -> dict:
    """The compression table and the streaming comparison (module docstring)."""
    from classify_images.classifiers import QuadraticHingeSVC
    from classify_images.pipeline.training.streaming_training import fit_streaming

    d = X_train.shape[1]
    results: dict = {
        "n_train": int(X_train.shape[0]),
        "n_test": int(X_test.shape[0]),
        "n_features": int(d),
        "encodings": {},
        "streaming": {},
    }
    for encoding in encodings:
        encode, decode, codebook_bytes, fit_seconds = codec(encoding, X_train)
        start = time.process_time()
        stored_train, stored_test = encode(X_train), encode(X_test)
        encode_seconds = time.process_time() - start
        start = time.process_time()
        train, test = decode(stored_train), decode(test_stored := stored_test)
        decode_seconds = time.process_time() - start
        row_bytes = stored_train[:1].nbytes
        error = float(np.linalg.norm(test - X_test) / np.linalg.norm(X_test))  # rows the codebooks never saw
        tracemalloc.start()
        start = time.process_time()
        model = QuadraticHingeSVC().fit(train, y_train)
        train_seconds = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        entry = {
            "bytes_per_image": int(row_bytes),
            "ratio_to_float32": round(4 * d / row_bytes, 1),
            "codebook_bytes": int(codebook_bytes),
            "relative_l2_error_test": round(error, 4),
            "codebook_fit_cpu_s": round(fit_seconds, 2),
            "encode_cpu_ms_per_image": round(1e3 * encode_seconds / (len(X_train) + len(X_test)), 3),
            "decode_cpu_ms_per_image": round(1e3 * decode_seconds / (len(X_train) + len(X_test)), 3),
            "lbfgs": {
                **score(model, test, y_test),
                "cpu_s": round(train_seconds, 2),
                "peak_mib": round(peak / 2**20, 1),
                "train_rows_mib": round(train.nbytes / 2**20, 1),
            },
        }
        results["encodings"][encoding] = entry
        print(
            f"{encoding:8s} {row_bytes:>9d} B/image  x{entry['ratio_to_float32']:<6} err {error:.3f}  "
            f"L-BFGS acc {entry['lbfgs']['accuracy']:.4f}  {train_seconds:.1f} s  peak {entry['lbfgs']['peak_mib']} MiB",
            flush=True,
        )
        if encoding in streamed:
            blocks = CodeBlocks(stored_train, y_train, decode, block_rows)
            tracemalloc.start()
            start = time.process_time()
            stream = fit_streaming(QuadraticHingeSVC(), blocks)  # streaming="lbfgs"
            seconds = time.process_time() - start
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            row = {
                **score(stream, test, y_test),
                "cpu_s": round(seconds, 2),
                "peak_mib": round(peak / 2**20, 1),
                "lbfgs_iterations": int(stream.n_iter_),
                "stored_train_mib": round(stored_train.nbytes / 2**20, 1),
                "objective_gap": round(stream.objective(train, y_train) / model.objective(train, y_train) - 1, 6),
            }
            results["streaming"][f"{encoding}/lbfgs-blocks"] = row
            print(
                f"   streamed L-BFGS: acc {row['accuracy']:.4f}  {seconds:.1f} s  peak {row['peak_mib']} MiB  "
                f"objective +{100 * row['objective_gap']:.4f} %  ({stream.n_iter_} iterations)",
                flush=True,
            )
            for n_epochs in epochs:
                blocks = CodeBlocks(stored_train, y_train, decode, block_rows)
                tracemalloc.start()
                start = time.process_time()
                stream = fit_streaming(QuadraticHingeSVC(streaming="sgd"), blocks, n_epochs=n_epochs)
                seconds = time.process_time() - start
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                row = {
                    **score(stream, test, y_test),
                    "cpu_s": round(seconds, 2),
                    "peak_mib": round(peak / 2**20, 1),
                    "stored_train_mib": round(stored_train.nbytes / 2**20, 1),
                    "objective_gap": round(stream.objective(train, y_train) / model.objective(train, y_train) - 1, 4),
                }
                results["streaming"][f"{encoding}/asgd-{n_epochs}"] = row
                print(
                    f"   streamed ASGD {n_epochs:3d} epochs: acc {row['accuracy']:.4f}  {seconds:.1f} s  "
                    f"peak {row['peak_mib']} MiB  objective +{100 * row['objective_gap']:.1f} %",
                    flush=True,
                )
        del train, test, stored_train, test_stored
    return results


def main(argv: list[str] | None = None) -> int:
    pin_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("features", help="a float32 feature set (e.g. 15-Scenes Fisher vectors)")
    parser.add_argument("--epochs", type=int, nargs="+", default=[10, 20])
    parser.add_argument("--block-rows", type=int, default=256)
    parser.add_argument("--encodings", nargs="+", default=list(ENCODINGS), choices=ENCODINGS)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    machine = announce_machine()
    from classify_images.pipeline.storage.feature_store import load_feature_set

    feature_set = load_feature_set(args.features)
    results = measure(
        np.asarray(feature_set.X_train),
        np.asarray(feature_set.y_train),
        np.asarray(feature_set.X_test),
        np.asarray(feature_set.y_test),
        encodings=args.encodings,
        epochs=tuple(args.epochs),
        block_rows=args.block_rows,
    )
    results.update(
        feature_set=str(Path(args.features).resolve()), machine=machine, date=time.strftime("%Y-%m-%d", time.gmtime())
    )
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
