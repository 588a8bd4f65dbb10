"""The sharded row layout of a feature set: row blocks that the workers write themselves.

On one machine a feature set keeps its rows in one memory-mapped ``X_train.npy`` (and
``X_test.npy``) that the building process fills.  On a cluster the client cannot hold or
funnel every vector, so each task writes the rows of its images itself, as one *shard*
(a block of consecutive rows) in the feature-set folder being assembled::

    X_train.000000.npz   rows 0 … B-1 of X_train, CSR     (format "csr")
    X_train.000001.npz   rows B … 2B-1
    ...
    X_test.000000.npy    rows 0 … B-1 of X_test, dense    (format "dense")

Format.  A whole feature set has one row codec
(:mod:`~classify_images.pipeline.storage.row_codecs`), which writes every shard and reads it
back, so that a reader always gets blocks of one type: ``dense`` (each shard a float32
``.npy``, memory-mappable), ``float16`` or ``pq`` (dense rows stored compressed, ``--rows``,
decoded to float32 blocks on reading) or ``csr`` (each shard an uncompressed ``.npz`` of the
CSR components).  :func:`~classify_images.pipeline.storage.row_codecs.codec_for_rows` chooses
it from the encoder (its ``sparse_rows``): VQ histograms (BoF/SPM) have at most one non-zero
per descriptor and cell, a few per cent of their entries, and are stored CSR; sparse-code max
pooling, LLC, VLAD and Fisher vectors are mostly non-zero and stored as ``--rows`` says.  The
measured density is recorded in the manifest beside the choice.  CSR keeps every value bit
for bit (entries ``-0.0`` are kept as stored entries).

Writing.  :func:`write_shard` writes a shard under a random temporary name, syncs it and
renames it into place (:func:`~classify_images.pipeline.storage.atomic.atomic_write`), so a reader
never sees half a shard; the bytes depend
on the rows only (no time stamp in the ``.npz``: its members carry a fixed date), so a
task that Dask runs again — its worker died after writing — rewrites the very same file,
which is harmless.  The feature set becomes visible only when the manifest, listing every
shard with its rows and SHA-1, is written last and the folder moved into place
(:class:`~classify_images.pipeline.storage.feature_store.FeatureSetWriter`).

Reading.  :class:`ShardedRows` is a lazy view of one split: :meth:`ShardedRows.blocks`
reads one shard at a time, :meth:`ShardedRows.toarray` assembles the dense matrix (what
``FeatureSet.X_train`` gives), :meth:`ShardedRows.to_dask_array` is a ``dask.array`` with
one chunk per shard (Dask imported only there).  :func:`check_shards` validates the shards
against the manifest (names, rows, SHA-1, dtypes, CSR structure, finite values).

Why not zarr.  Zarr is the usual chunked-array store and dask reads it, but it would be a
new dependency with its compressors, it has no sparse layout (CSR would be three ragged
arrays managed by hand), and a chunk write is atomic only on some of its stores.  Plain
``.npy`` / ``.npz`` shards need nothing beyond NumPy, load without pickle
(``allow_pickle=False``), memory-map when dense, and ``dask.array`` reads them through
``from_delayed`` with their shapes known from the manifest.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...errors import ClassifyImagesError
from ...files import open_regular_file
from .atomic import atomic_write
from .row_codecs import RowCodec, StoredFormError, as_dense, codec_of_format

__all__ = [
    "shard_name",
    "is_shard_name",
    "is_shard_temporary",
    "write_shard",
    "read_shard",
    "as_dense",
    "ShardedRows",
    "ShardError",
    "file_sha1",
]

_SHARD = re.compile(r"(?P<part>X_train|X_test)\.(?P<index>\d{6})\.(?P<suffix>npy|npz)")
_TEMPORARY = re.compile(r"\.(?:X_train|X_test)\.\d{6}\.(?:npy|npz)\.[0-9a-f]{32}\.tmp")


class ShardError(ClassifyImagesError, ValueError):
    """A shard is missing, torn or disagrees with the manifest (the reader words the message)."""


def shard_name(part: str, index: int, fmt: str | RowCodec) -> str:
    """``X_train.000003.npz`` (``part`` is ``X_train`` or ``X_test``; the suffix is the codec's)."""
    return f"{part}.{index:06d}.{codec_of_format(fmt).suffix}"


def is_shard_name(name: str) -> bool:
    """Whether ``name`` is a shard's file name."""
    return _SHARD.fullmatch(name) is not None


def is_shard_temporary(name: str) -> bool:
    """Whether ``name`` is the temporary name of a shard being written (left by a killed worker)."""
    return _TEMPORARY.fullmatch(name) is not None


def write_shard(
    folder: str | os.PathLike,
    part: str,
    index: int,
    rows: np.ndarray,
    fmt: str | RowCodec,
    state: Any = None,
) -> dict:
    """Write rows as shard ``index`` of ``part``, atomically and idempotently.

    Parameters
    ----------
    folder : path-like
        The feature-set folder being assembled (shared by the workers).
    part : {"X_train", "X_test"}
    index : int
        Shard number within ``part``.
    rows : ndarray of float32, shape (n, d)
    fmt : RowCodec or str
        The row codec, or a shard format (``"dense"``, ``"csr"``, ``"float16"``, ``"pq"``, ...:
        :func:`~classify_images.pipeline.storage.row_codecs.codec_of_format`).
    state : optional
        The codec's learnt state (format ``pq``: the fitted ``ProductQuantizer``).

    Returns
    -------
    dict
        The manifest's entry of the shard: ``file``, ``rows``, ``nnz`` (stored entries; for
        compressed codecs the non-zeros of ``rows`` before compression), ``bytes`` and
        ``sha1`` of the file.

    Raises
    ------
    RowCodecError
        Rows the codec cannot hold (format ``float16``: beyond its range).
    """
    codec = codec_of_format(fmt)
    rows = np.asarray(rows, dtype=np.float32)
    payload, nnz = codec.payload(rows, state)
    name = shard_name(part, index, codec)
    with atomic_write(Path(folder) / name, "wb", concurrent=True) as handle:
        handle.write(payload)
    return {
        "file": name,
        "rows": int(rows.shape[0]),
        "nnz": nnz,
        "bytes": len(payload),
        "sha1": hashlib.sha1(payload).hexdigest(),
    }


def file_sha1(path: Path) -> str:
    """SHA-1 of a file's bytes (hex), read 1 MiB at a time."""
    digest = hashlib.sha1()
    with open_regular_file(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_shard(
    path: str | os.PathLike,
    n_rows: int,
    n_features: int,
    fmt: str | RowCodec,
    state: Any = None,
    *,
    out: np.ndarray | None = None,
    decode: bool = True,
) -> np.ndarray | sp.csr_matrix:
    """One shard, read by its codec: a read-only memory-mapped float32 array (``dense``), a CSR
    matrix (``csr``), or new float32 rows decoded with ``state`` (``float16``, ``pq``, ...; no pickle).

    ``out`` (codecs that decode): a C-contiguous float32 array ``(n_rows, n_features)`` the shard
    is decoded into, and returned.  ``decode=False``: the checked stored array, not decoded
    (format ``pq``: codes whose values are centroids of finite codebooks).

    Raises
    ------
    ShardError
        Unreadable file, or dtype, shape, structure or stored values not the expected ones
        (the message says what; the caller names the feature set).
    """
    path = Path(path)
    codec = codec_of_format(fmt)
    try:
        return codec.read(path, n_rows, n_features, state, out=out, decode=decode)
    except FileNotFoundError:
        raise ShardError(f"{path.name} is missing") from None
    except StoredFormError as exc:
        raise ShardError(f"{path.name}{exc.joiner}{exc}") from None
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ShardError(f"{path.name} is corrupt ({reason})") from None


class ShardedRows:
    """The rows of one split, held in shards; read lazily.

    Parameters
    ----------
    folder : Path
        The feature-set folder.
    entries : list of dict
        The manifest's shard entries of the split, in row order (``file``, ``rows``, …).
    n_features : int
    fmt : RowCodec or str
        The row codec, or its shard format (``"dense"``, ``"csr"``, ``"float16"``, ``"pq"``, ...).
    state : optional
        The codec's learnt state (format ``pq``: the codebooks).  Shards of codecs that
        compress are decoded to float32 blocks as they are read: a reader sees float32 rows
        (or CSR blocks of format ``csr``) whatever the codec.
    """

    def __init__(self, folder: Path, entries: list[dict], n_features: int, fmt: str | RowCodec, state=None) -> None:
        self.folder, self.entries, self.n_features = Path(folder), list(entries), int(n_features)
        self.codec = codec_of_format(fmt)
        self.state = state
        self.starts = np.concatenate([[0], np.cumsum([entry["rows"] for entry in self.entries], dtype=np.int64)])
        self._dense: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.starts[-1]), self.n_features

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def shard(self, index: int, out: np.ndarray | None = None) -> np.ndarray | sp.csr_matrix:
        """Shard ``index`` (memory-mapped dense array, CSR matrix, or decoded float32 rows;
        codecs that decode: into ``out`` if given)."""
        entry = self.entries[index]
        return read_shard(self.folder / entry["file"], entry["rows"], self.n_features, self.codec, self.state, out=out)

    @property
    def format(self) -> str:
        """The shard format (the manifest's ``store.format``)."""
        return self.codec.format

    @property
    def quantizer(self):
        """The codec's learnt state (product quantisation: the fitted quantiser), or None."""
        return self.state

    def __getitem__(self, rows) -> np.ndarray | sp.csr_matrix:
        """The rows at the integer indices ``rows`` (in that order), reading only the shards that hold them."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(f"row index out of range for {self.shape[0]} rows")
        shard_of = np.searchsorted(self.starts, rows, side="right") - 1
        pieces = []
        for index in np.unique(shard_of):
            wanted = rows[shard_of == index] - self.starts[index]
            pieces.append(self.shard(int(index))[wanted])
        if not pieces:
            return self.stack([self.shard(0)[:0]]) if self.entries else np.zeros((0, self.n_features), np.float32)
        joined = self.stack(pieces)
        # back to the order asked for (pieces come shard by shard)
        placed = np.concatenate([np.flatnonzero(shard_of == index) for index in np.unique(shard_of)])
        return joined[np.argsort(placed, kind="stable")]

    def check(self, verify_digests: bool = True) -> None:
        """Read every shard once: structure, SHA-1 against the manifest, finite values (codecs
        :attr:`~classify_images.pipeline.storage.row_codecs.RowCodec.checked_without_decoding`,
        such as ``pq``: stored values checked, codes within the codebooks whose finite centroids
        make every decoded value finite).

        Raises
        ------
        ShardError
        """
        for index, entry in enumerate(self.entries):
            path = self.folder / entry["file"]
            if self.codec.checked_without_decoding:
                read_shard(path, entry["rows"], self.n_features, self.codec, self.state, decode=False)
            else:
                block = self.shard(index)
                values = block.data if sp.issparse(block) else block
                for start in range(0, max(values.shape[0], 1), 4096):
                    if not np.isfinite(values[start : start + 4096]).all():
                        raise ShardError(f"{entry['file']} holds NaN or infinite values")
            if verify_digests and file_sha1(path) != entry["sha1"]:
                raise ShardError(f"{entry['file']} is not the shard the manifest lists (SHA-1 differs)")

    def blocks(self, rows_per_block: int | None = None) -> Iterator[tuple[slice, np.ndarray | sp.csr_matrix]]:
        """``(rows, block)`` in row order: one shard at a time, or ``rows_per_block`` rows at a time.

        Blocks are float32 ndarrays (dense rows; compressed codecs decoded) or CSR matrices
        (csr format).
        """
        if rows_per_block is None:
            for index in range(len(self.entries)):
                yield slice(int(self.starts[index]), int(self.starts[index + 1])), self.shard(index)
            return
        if rows_per_block < 1:
            raise ValueError(f"rows_per_block must be at least 1, not {rows_per_block}")
        pending: list = []
        start = 0
        for _, block in self.blocks():
            pending.append(block)
            held = sum(piece.shape[0] for piece in pending)
            while held >= rows_per_block:
                joined = self.stack(pending)
                yield slice(start, start + rows_per_block), joined[:rows_per_block]
                start += rows_per_block
                pending, held = [joined[rows_per_block:]], held - rows_per_block
        if pending and sum(piece.shape[0] for piece in pending):
            joined = self.stack(pending)
            yield slice(start, start + joined.shape[0]), joined

    def stack(self, pieces: list) -> np.ndarray | sp.csr_matrix:
        """Row blocks of this split (shards or slices of them) stacked into one block of its format."""
        return self.codec.stack(pieces)

    def toarray(self) -> np.ndarray:
        """The dense float32 matrix of the split (assembled once, then kept)."""
        if self._dense is None:
            dense = np.zeros(self.shape, dtype=np.float32)
            for index in range(len(self.entries)):
                rows = slice(int(self.starts[index]), int(self.starts[index + 1]))
                if self.codec.decodes:  # decoded in place
                    self.shard(index, out=dense[rows])
                else:
                    dense[rows] = as_dense(self.shard(index))
            dense.flags.writeable = False
            self._dense = dense
        return self._dense

    def to_dask_array(self):
        """A ``dask.array`` of the split with one chunk per shard (dense chunks; CSR shards
        are expanded chunk by chunk when computed).  Needs Dask installed."""
        from ..execution.cluster import require_distributed

        require_distributed()
        import dask
        import dask.array as da

        def dense_shard(index: int) -> np.ndarray:
            return as_dense(self.shard(index))

        chunks = [
            da.from_delayed(dask.delayed(dense_shard)(index), shape=(entry["rows"], self.n_features), dtype=np.float32)
            for index, entry in enumerate(self.entries)
        ]
        if not chunks:
            return da.zeros((0, self.n_features), dtype=np.float32)
        return da.concatenate(chunks, axis=0)

    @property
    def nnz(self) -> int:
        """Stored entries of all shards (from the manifest)."""
        return int(sum(entry["nnz"] for entry in self.entries))
