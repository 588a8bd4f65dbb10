"""The sharded row layout of a feature set: row blocks that the workers write themselves.

On one machine a feature set keeps its rows in one memory-mapped ``X_train.npy`` (and
``X_test.npy``) that the building process fills.  On a cluster the client cannot hold or
funnel every vector, so each task writes the rows of its images itself, as one *shard*
(a block of consecutive rows) in the feature-set folder being assembled::

    X_train.000000.npz   rows 0 … B-1 of X_train, CSR     (format "csr")
    X_train.000001.npz   rows B … 2B-1
    ...
    X_test.000000.npy    rows 0 … B-1 of X_test, dense    (format "dense")

Format.  A whole feature set is ``dense`` (each shard a float32 ``.npy``,
memory-mappable), ``float16`` or ``pq`` (dense rows stored compressed, ``--rows``: a float16
``.npy``, or a uint8 ``.npy`` of product-quantisation codes whose codebooks the feature set
keeps beside the shards; both decoded to float32 blocks on reading,
:mod:`~classify_images.coding.product_quantizer`) or ``csr`` (each shard an uncompressed ``.npz`` of the CSR components
``data`` float32, ``indices`` int32, ``indptr`` int64 and ``shape`` — these dtypes whatever
scipy chose, so that the bytes do not depend on its version), so that a reader always gets
blocks of one type.  :func:`shard_format` chooses it from the
encoder (its ``sparse_rows``): VQ histograms (``codebook.kind = "kmeans"``, BoF/SPM) have at most one
non-zero per descriptor and cell, a few per cent of their entries, and are stored CSR;
sparse-code max pooling, LLC, VLAD and Fisher vectors are mostly non-zero and stored
dense.  The measured density is recorded in the manifest beside the choice.  CSR keeps
every value bit for bit (entries ``-0.0`` are kept as stored entries).

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
import io
import os
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ...coding.product_quantizer import ProductQuantizer, RowCodecError, to_float16
from ...errors import ClassifyImagesError
from ...files import load_npy_checked, load_npz_checked, open_regular_file
from .atomic import atomic_write

__all__ = [
    "SHARD_FORMATS",
    "ENCODING_FORMATS",
    "shard_format",
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

#: ``dense``: float32 ``.npy`` shards; ``csr``: ``.npz`` shards of CSR components;
#: ``float16``: float16 ``.npy`` shards; ``pq``: ``.npy`` shards of uint8 product-quantisation codes.
SHARD_FORMATS = ("dense", "csr", "float16", "pq")
#: The shard format of each stored row encoding of dense rows (``--rows``).
ENCODING_FORMATS = {"float32": "dense", "float16": "float16", "pq8": "pq", "pq16": "pq"}
_SUFFIX = {"dense": "npy", "csr": "npz", "float16": "npy", "pq": "npy"}
_SHARD = re.compile(r"(?P<part>X_train|X_test)\.(?P<index>\d{6})\.(?P<suffix>npy|npz)")
_TEMPORARY = re.compile(r"\.(?:X_train|X_test)\.\d{6}\.(?:npy|npz)\.[0-9a-f]{32}\.tmp")
#: The fixed date of the ``.npz`` members (the earliest a zip file can hold): the bytes of
#: a shard depend on its rows only.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_CSR_KEYS = ("data", "indices", "indptr", "shape")


class ShardError(ClassifyImagesError, ValueError):
    """A shard is missing, torn or disagrees with the manifest (the reader words the message)."""


def shard_format(sparse_rows: bool, encoding: str = "float32") -> str:
    """``"csr"`` for rows sparse enough (an encoder's ``sparse_rows``: VQ histograms), else the
    format of the dense rows' ``encoding`` (:data:`ENCODING_FORMATS`: ``"dense"`` for float32).

    Raises
    ------
    RowCodecError
        A compressed ``encoding`` of sparse rows (they are stored CSR, exactly).
    """
    if sparse_rows:
        if encoding != "float32":
            raise RowCodecError(
                f"--rows {encoding} compresses dense rows (Fisher vectors, VLAD, sparse coding, LLC); "
                "this encoder's histograms are sparse and stored CSR: use --rows float32"
            )
        return "csr"
    return ENCODING_FORMATS[encoding]


def shard_name(part: str, index: int, fmt: str) -> str:
    """``X_train.000003.npz`` (``part`` is ``X_train`` or ``X_test``)."""
    return f"{part}.{index:06d}.{_SUFFIX[fmt]}"


def is_shard_name(name: str) -> bool:
    """Whether ``name`` is a shard's file name."""
    return _SHARD.fullmatch(name) is not None


def is_shard_temporary(name: str) -> bool:
    """Whether ``name`` is the temporary name of a shard being written (left by a killed worker)."""
    return _TEMPORARY.fullmatch(name) is not None


def _csr_of(rows: np.ndarray) -> sp.csr_matrix:
    """CSR of a float32 block keeping every entry that is not +0.0 (``-0.0`` included)."""
    stored = (rows != 0) | np.signbit(rows)
    indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(stored.sum(axis=1), out=indptr[1:])
    row_index, col_index = np.nonzero(stored)
    return sp.csr_matrix((rows[row_index, col_index], col_index, indptr), shape=rows.shape)


def as_dense(block: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """A block as a float32 ndarray; a CSR block's stored entries are copied as they are
    (``scipy``'s ``toarray`` adds them to zeros, which turns ``-0.0`` into ``0.0``)."""
    if not sp.issparse(block):
        return np.asarray(block)
    dense = np.zeros(block.shape, dtype=np.float32)
    dense[np.repeat(np.arange(block.shape[0]), np.diff(block.indptr)), block.indices] = block.data
    return dense


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An uncompressed ``.npz`` whose bytes depend on ``arrays`` only (fixed member dates)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for key, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE), member.getvalue())
    return buffer.getvalue()


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def write_shard(
    folder: str | os.PathLike,
    part: str,
    index: int,
    rows: np.ndarray,
    fmt: str,
    quantizer: ProductQuantizer | None = None,
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
    fmt : {"dense", "csr", "float16", "pq"}
    quantizer : ProductQuantizer, optional
        The fitted codebooks of format ``pq`` (the shard holds the codes of ``rows``).

    Returns
    -------
    dict
        The manifest's entry of the shard: ``file``, ``rows``, ``nnz`` (stored entries; for
        ``float16`` and ``pq`` the non-zeros of ``rows`` before compression), ``bytes`` and
        ``sha1`` of the file.

    Raises
    ------
    RowCodecError
        Rows beyond float16's range (format ``float16``).
    """
    rows = np.asarray(rows, dtype=np.float32)
    if fmt == "csr":
        matrix = _csr_of(rows)
        payload = _npz_bytes(
            {
                "data": matrix.data.astype(np.float32),
                "indices": matrix.indices.astype(np.int32),
                "indptr": matrix.indptr.astype(np.int64),
                "shape": np.asarray(rows.shape, dtype=np.int64),
            }
        )
        nnz = int(matrix.nnz)
    elif fmt == "float16":
        payload, nnz = _npy_bytes(to_float16(rows)), int(np.count_nonzero(rows))
    elif fmt == "pq":
        payload, nnz = _npy_bytes(quantizer.encode(rows)), int(np.count_nonzero(rows))
    else:
        payload, nnz = _npy_bytes(rows), int(np.count_nonzero(rows))
    name = shard_name(part, index, fmt)
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
    fmt: str,
    quantizer: ProductQuantizer | None = None,
    *,
    out: np.ndarray | None = None,
    decode: bool = True,
) -> np.ndarray | sp.csr_matrix:
    """One shard: a read-only memory-mapped float32 array, a CSR matrix, or (formats ``float16``
    and ``pq``, decoded with ``quantizer``) a new float32 array (no pickle).

    ``out`` (formats ``float16`` and ``pq``): a C-contiguous float32 array ``(n_rows, n_features)``
    the shard is decoded into, and returned.  ``decode=False`` (format ``pq``): the checked uint8
    codes, not decoded (their values are centroids of finite codebooks).

    Raises
    ------
    ShardError
        Unreadable file, or dtype, shape or CSR structure not the expected ones (the
        message says what; the caller names the feature set).
    """
    path = Path(path)
    try:
        if fmt != "csr":
            with open_regular_file(path) as handle:
                rows = load_npy_checked(handle, os.fstat(handle.fileno()).st_size, mmap=True)
        else:
            archive = load_npz_checked(path)
            if sorted(archive) != sorted(_CSR_KEYS):
                raise ShardError(f"{path.name} holds {sorted(archive)}, not the CSR components")
            data, indices, indptr, shape = (archive[key] for key in _CSR_KEYS)
    except FileNotFoundError:
        raise ShardError(f"{path.name} is missing") from None
    except ShardError:
        raise
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ShardError(f"{path.name} is corrupt ({reason})") from None
    if fmt != "csr":
        stored = {"dense": (np.float32, n_features), "float16": (np.float16, n_features)}.get(fmt)
        if stored is None:
            stored = (np.uint8, quantizer.codebooks_.shape[0])
        if rows.dtype != stored[0] or rows.shape != (n_rows, stored[1]):
            raise ShardError(
                f"{path.name} is {rows.dtype} {rows.shape}, expected {np.dtype(stored[0])} ({n_rows}, {stored[1]})"
            )
        if fmt == "float16":
            if out is None:
                return rows.astype(np.float32)
            np.copyto(out, rows)
            return out
        if fmt == "pq":
            try:
                return quantizer.decode(rows, out=out) if decode else quantizer.check_codes(rows)
            except RowCodecError as exc:
                raise ShardError(f"{path.name}: {exc}") from None
        return rows
    if (
        tuple(shape.tolist()) != (n_rows, n_features)
        or data.dtype != np.float32
        or indices.dtype.kind != "i"
        or indptr.dtype.kind != "i"
        or indptr.shape != (n_rows + 1,)
        or data.shape != indices.shape
        or indptr[0] != 0
        or indptr[-1] != data.shape[0]
        or np.any(np.diff(indptr) < 0)
        or (indices.size and (indices.min() < 0 or indices.max() >= n_features))
    ):
        raise ShardError(f"{path.name} is not a valid float32 CSR matrix of shape ({n_rows}, {n_features})")
    return sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_features))


class ShardedRows:
    """The rows of one split, held in shards; read lazily.

    Parameters
    ----------
    folder : Path
        The feature-set folder.
    entries : list of dict
        The manifest's shard entries of the split, in row order (``file``, ``rows``, …).
    n_features : int
    fmt : {"dense", "csr", "float16", "pq"}
    quantizer : ProductQuantizer, optional
        The codebooks of format ``pq``.  Shards of formats ``float16`` and ``pq`` are
        decoded to float32 blocks as they are read: a reader sees float32 rows whatever the format.
    """

    def __init__(
        self, folder: Path, entries: list[dict], n_features: int, fmt: str, quantizer: ProductQuantizer | None = None
    ) -> None:
        self.folder, self.entries, self.n_features, self.format = Path(folder), list(entries), int(n_features), fmt
        self.quantizer = quantizer
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
        formats ``float16`` and ``pq``: decoded into ``out`` if given)."""
        entry = self.entries[index]
        return read_shard(
            self.folder / entry["file"], entry["rows"], self.n_features, self.format, self.quantizer, out=out
        )

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
        """Read every shard once: structure, SHA-1 against the manifest, finite values (format
        ``pq``: codes within the codebooks, whose finite centroids make every decoded value finite).

        Raises
        ------
        ShardError
        """
        for index, entry in enumerate(self.entries):
            path = self.folder / entry["file"]
            if self.format == "pq":  # codes checked, not decoded: centroids of finite codebooks are finite
                read_shard(path, entry["rows"], self.n_features, self.format, self.quantizer, decode=False)
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

        Blocks are float32 ndarrays (dense, float16 and pq formats: the latter two decoded) or
        CSR matrices (csr format).
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
        if self.format == "csr":
            return sp.vstack(pieces, format="csr", dtype=np.float32) if len(pieces) > 1 else pieces[0].tocsr()
        return np.concatenate(pieces) if len(pieces) > 1 else np.asarray(pieces[0])

    def toarray(self) -> np.ndarray:
        """The dense float32 matrix of the split (assembled once, then kept)."""
        if self._dense is None:
            dense = np.zeros(self.shape, dtype=np.float32)
            for index in range(len(self.entries)):
                rows = slice(int(self.starts[index]), int(self.starts[index + 1]))
                if self.format in ("float16", "pq"):  # decoded in place
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
