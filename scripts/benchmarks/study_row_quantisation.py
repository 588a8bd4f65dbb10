"""Re-store the rows of a feature set (``npy`` layout) with another row codec, so that
``classify-images experiment`` on the copy measures the accuracy of rows stored that way
against the original, split for split, with everything else (codebook, split, labels,
mirrors) the same.

Usage::

    python scripts/benchmarks/study_row_quantisation.py FEATURE_SET OUT --rows int8

``FEATURE_SET`` holds float32 or float16 rows (e.g. a ``fisher-flip-rootsift`` build); every
row file (``X_*.npy``, mirrors included) is decoded and encoded again with the codec ``--rows``
(``int8``, ``int4`` or ``float16``: what ``build-features --rows`` would have stored, since the
codecs code each row on its own), block by block; the manifest's ``rows`` names the codec.
Prints the bytes of the row files before and after (their sizes, and the bytes they take on
disk: packed ``int8`` rows leave each slot's unused tail a hole) and the relative L2 error of the
decoded rows.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np


def restore(feature_set: Path, out: Path, rows: str, rows_per_block: int = 256) -> dict:
    """Write the copy (module docstring) and return what :func:`main` prints."""
    from classify_images.pipeline.storage.coded_rows import CodedRows
    from classify_images.pipeline.storage.feature_store import load_feature_set
    from classify_images.pipeline.storage.row_codecs import row_codec

    source = load_feature_set(feature_set)
    codec = row_codec(rows)
    manifest = dict(source.manifest, rows=rows)
    out.mkdir(parents=True, exist_ok=False)
    arrays = {"X_train": source.rows["train"], "X_test": source.rows["test"]}
    if source.has_mirrors:
        arrays |= {"X_train_flip": source.mirrors("train"), "X_test_flip": source.mirrors("test")}
    before = after = after_on_disk = 0
    squared_error = squared_norm = 0.0
    for name, stored_rows in arrays.items():
        before += (feature_set / f"{name}.npy").stat().st_size
        dtype, width = codec.stored_form(source.n_features, None)
        stored = np.lib.format.open_memmap(out / f"{name}.npy", mode="w+", dtype=dtype, shape=(len(stored_rows), width))
        # encodes what is assigned and writes it as a build does (packed rows: their prefix, with pwrite)
        target = CodedRows(stored, codec, source.n_features, out / f"{name}.npy", stored.offset)
        for start in range(0, len(stored_rows), rows_per_block):
            block = np.asarray(stored_rows[start : start + rows_per_block], dtype=np.float32)
            target[start : start + len(block)] = block
            decoded = np.asarray(target[start : start + len(block)], dtype=np.float64)
            squared_error += float(np.sum((decoded - block) ** 2))
            squared_norm += float(np.sum(block.astype(np.float64) ** 2))
        target.flush()
        stored.flush()
        del target, stored
        after += (out / f"{name}.npy").stat().st_size
        after_on_disk += (out / f"{name}.npy").stat().st_blocks * 512
    for path in feature_set.iterdir():
        if not (path.name.startswith("X_") or path.name == "manifest.json"):
            shutil.copy2(path, out / path.name)
    (out / "manifest.json").write_text(json.dumps(manifest))
    return {
        "rows": rows,
        "from": source.row_encoding,
        "row_file_bytes_before": before,
        "row_file_bytes_after": after,
        "row_file_bytes_on_disk_after": after_on_disk,
        "relative_l2_error": (squared_error / max(squared_norm, 1e-300)) ** 0.5,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("feature_set", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", default="int8", help="the codec: int8, int4 or float16")
    parser.add_argument("--rows-per-block", type=int, default=256)
    args = parser.parse_args()
    print(json.dumps(restore(args.feature_set, args.out, args.rows, args.rows_per_block)))


if __name__ == "__main__":
    main()
