"""Packed 8-bit codes against one-byte codes on the rows of a feature set: bytes a value, and the
CPU of coding and of decoding by blocks of columns (as the linear SVM reads them), side by side.

Usage::

    python scripts/benchmarks/bench_packed_codes.py FEATURE_SET [--rows 300] [--repeats 3]

Takes ``--rows`` rows evenly spaced over the training rows of ``FEATURE_SET`` (any encoding; they
are decoded to float32 first) and, ``--repeats`` times, alternating: codes them as one byte a
value (:func:`~classify_images.coding.scalar_quantizer.quantize_rows`) and packs those codes
(:func:`~classify_images.coding.packed_codes.pack_codes`), then decodes every block of 4 096
columns of all the rows from either form (``dequantize_columns``, ``unpack_columns``).  Prints
one JSON line: the bits a value of each form (packed: the bytes the rows use), the CPU seconds
(``time.process_time``, the fastest repeat) and the decoded values per CPU second, the processor,
and whether both forms decode to the same float32 bits (after a first line naming the machine).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def _fitting(out: np.ndarray, width: int) -> np.ndarray | None:
    """``out`` when it is ``width`` columns wide, else None (the decoder allocates)."""
    return out if out.shape[1] == width else None


def measure(feature_set: Path, n_rows: int, repeats: int, machine: dict | None = None) -> dict:
    """The JSON record of the module docstring (``machine``: the record of the machine, looked up when None)."""
    from _bench_utils import machine as machine_record

    from classify_images.coding.packed_codes import pack_codes, unpack_columns, used_bytes
    from classify_images.coding.scalar_quantizer import GROUP_VALUES, dequantize_columns, quantize_rows
    from classify_images.pipeline.storage.feature_store import load_feature_set

    source = load_feature_set(feature_set)
    rows = source.rows["train"]
    picked = np.unique(np.linspace(0, len(rows) - 1, min(n_rows, len(rows))).astype(int))
    X = np.asarray(rows[picked], dtype=np.float32)
    n, d = X.shape
    seconds: dict[str, list[float]] = {name: [] for name in ("code", "pack", "decode_bytes", "decode_packed")}
    out = np.empty((n, min(GROUP_VALUES, d)), dtype=np.float32)  # every block but a shorter last one
    every = np.arange(n)
    same = True
    for _ in range(repeats):
        start = time.process_time()
        one_byte = quantize_rows(X, 8)
        seconds["code"].append(time.process_time() - start)
        start = time.process_time()
        packed = pack_codes(one_byte, d)
        seconds["pack"].append(time.process_time() - start)
        for name, decode, stored in (
            (
                "decode_bytes",
                lambda s, a, b: dequantize_columns(s, 8, every, a, b, d, out=_fitting(out, b - a)),
                one_byte,
            ),
            ("decode_packed", lambda s, a, b: unpack_columns(s, every, a, b, d, out=_fitting(out, b - a)), packed),
        ):
            start = time.process_time()
            for first in range(0, d, GROUP_VALUES):
                decode(stored, first, min(first + GROUP_VALUES, d))
            seconds[name].append(time.process_time() - start)
        for first in range(0, d, 8 * GROUP_VALUES):  # a sample of blocks compared bit for bit
            last = min(first + GROUP_VALUES, d)
            a = dequantize_columns(one_byte, 8, every, first, last, d)
            b = unpack_columns(packed, every, first, last, d)
            same &= bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
    best = {name: min(values) for name, values in seconds.items()}
    return {
        "feature_set": str(feature_set),
        "rows": n,
        "dims": d,
        "bits_per_value_one_byte": 8 * one_byte.shape[1] / d,
        "bits_per_value_packed": 8 * float(used_bytes(packed, d).mean()) / d,
        "cpu_s": best,
        "decoded_values_per_cpu_s": {
            "one_byte": n * d / max(best["decode_bytes"], 1e-12),
            "packed": n * d / max(best["decode_packed"], 1e-12),
        },
        "same_float32_bits": same,
        "machine": machine if machine is not None else machine_record(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("feature_set", type=Path)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from _bench_utils import announce_machine

    machine = announce_machine()
    print(json.dumps(measure(args.feature_set, args.rows, args.repeats, machine)))


if __name__ == "__main__":
    main()
