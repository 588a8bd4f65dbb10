"""The feature store: one folder per feature set, readable without pickle.

Layout::

    manifest.json     config, config hash, versions, class names, the split
                      (paths of training and test images), skipped files with
                      their reasons, timings per stage
    X_train.npy       float32 (n_train, d)     memory-mappable
    X_test.npy        float32 (n_test, d)
    y_train.npy       int64 class indices
    y_test.npy        int64
    codebook.npy      float32 (K, 128)         to featurise new images
    codebook.npz      instead of codebook.npy for Fisher vectors: the named arrays of
                      the PCA + GMM model (``np.savez``, loaded without pickle)
    minmax.npy        float32 (2, d)           training minima and maxima, only with
                                               min-max normalisation (the fitted
                                               :class:`~classify_images.coding.normalize.Normalizer`)
    pq_codebooks.npy  float32 (m, 256, s)      product-quantisation codebooks, only for rows
                                               stored ``--rows pq8`` / ``pq16`` (sharded layout)
    X_train_flip.npy  float32 (n_train, d)     only with ``[augment]`` (manifest ``augment.mirrors``):
    X_test_flip.npy   float32 (n_test, d)      row i is the row of the mirror (left-right) of the
                                               image of row i of ``X_train`` / ``X_test``, so a
                                               re-split that moves a row moves its mirror with it

The row files (``X_*.npy``) are float16 instead when the manifest says ``"rows": "float16"``,
and ``uint8`` rows of 8- or 4-bit codes (:mod:`~classify_images.coding.scalar_quantizer`) when
it says ``"int8"`` or ``"int4"``, read through a
:class:`~classify_images.pipeline.storage.coded_rows.CodedRows`.  ``"int8"``, the default for
Fisher vectors (:attr:`~classify_images.coding.encoders.Encoder.default_rows`; within 0.06
points of float16 at a fixed C on 15-Scenes and Flowers-17), packs each block of 64 codes in
the bits it needs (:mod:`~classify_images.coding.packed_codes`): a row's slot holds at most a
byte a value and its header, the row uses its start, and the rest is a hole on disk (about
4.7 bits a value of 15-Scenes Fisher vectors); an ``int8`` file of one byte a code (sets built
before the packing) is read as it is.  ``"int4"`` holds two codes a byte and the steps.  They are decoded to float32 as
they are read (:attr:`FeatureSet.X_train`, :meth:`FeatureSet.iter_row_blocks`,
:meth:`FeatureSet.pooled_rows`).

Two layouts hold the rows (``--store``).  ``npy`` (the default on one machine):
``X_train.npy`` and ``X_test.npy`` as above, filled by the building process.  ``sharded``
(for a cluster; manifest ``format_version`` 2 with a ``store`` entry): instead of those two
files, row blocks ``X_train.000000.npy`` … (dense) or ``X_train.000000.npz`` … (CSR) that
the workers write themselves, listed in the manifest with their rows and SHA-1
(:mod:`~classify_images.pipeline.storage.shard_store`).  The sharded layout can store dense rows
compressed (``--rows``, the manifest's ``store.rows``): ``float16``, or product-quantised
(``pq8`` / ``pq16``: one byte per 8 or 16 dimensions, the codebooks in ``pq_codebooks.npy``,
listed with its SHA-1 in ``store.codebooks``; :mod:`~classify_images.coding.product_quantizer`);
they are decoded to float32 blocks as they are read.  Both load with :func:`load_feature_set`;
``FeatureSet.X_train`` is the dense matrix either way, and
:meth:`FeatureSet.iter_row_blocks` reads either layout one block at a time.

Writing.  The folder is assembled under a temporary name beside its destination
(``.<name>.partial-<pid>``): the row files are allocated on the disk before they are
memory-mapped (``posix_fallocate``), so a full disk is an ``ENOSPC`` error at allocation
and not a ``SIGBUS`` while writing rows (packed ``int8`` rows, which use a prefix of their
slot, are written with ``pwrite`` into a file left unallocated: a full disk is an ``ENOSPC``
of that write, and the slots' unused tails stay holes); every file is synced, the manifest is written
last, and the folder takes the destination's place in one atomic exchange
(:func:`~classify_images.pipeline.storage.atomic.replace_folder`).

What may be replaced.  A destination is replaced only when it is absent, an empty folder,
or a feature set this project wrote: its manifest announces our format *and* the folder
holds exactly the files that manifest lists (with ``force``, also a folder of nothing but
files of those names).  Anything else — a user's folder, the dataset or a folder holding
it, a plain file, a symbolic link — is refused with one line before any work, and a
replaced feature set is removed file by file, by the names above only.

Reading.  :func:`load_feature_set` checks everything it returns (manifest keys and types,
array shapes and dtypes, ``len(y) == len(X)``, labels within the classes, finite values):
a torn or tampered feature set is a one-line :class:`FeatureSetError`, never a traceback
later on.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import tokenize
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...classifiers.combination import Channel, channels_from_dicts
from ...coding.normalize import Normalizer
from ...errors import ClassifyImagesError
from ...files import (
    MAX_JSON_BYTES,
    NotRegularFileError,
    load_npy_checked,
    load_npz_checked,
    loads_bounded_json,
    open_regular_file,
    read_format_json,
    read_regular_bytes,
)
from ..settings.config import ChannelsConfig, ConfigError, PipelineConfig, read_any_config
from .atomic import atomic_write_json, fsync_file, is_temporary_of, remove_stale_siblings, replace_folder
from .coded_rows import CodedRows, stored_array
from .row_codecs import (
    RowCodec,
    RowCodecError,
    codec_for_rows,
    codec_of_format,
    row_codec,
    row_codec_names,
    shard_formats,
    state_files,
)
from .shard_store import (
    ShardedRows,
    ShardError,
    file_sha1,
    is_shard_name,
    is_shard_temporary,
    shard_name,
)

__all__ = [
    "FeatureSetError",
    "FeatureSet",
    "load_feature_set",
    "FeatureSetWriter",
    "check_destination",
    "is_feature_set_folder",
]

MANIFEST = "manifest.json"
#: The codebook: ``codebook.npy`` (one array) or ``codebook.npz`` (named arrays).
CODEBOOK = "codebook"
#: The fitted normaliser's statistics (``[minima; maxima]``), when it has any.
NORMALIZER_STATISTICS = "minmax"
#: The product-quantisation codebooks of rows stored ``pq8`` / ``pq16`` (their codec's state file).
PQ_CODEBOOKS = "pq_codebooks"
FORMAT_NAME = "classify-images-feature-set"
#: Version 1: rows in ``X_train.npy`` / ``X_test.npy``; version 2: a ``store`` entry says
#: where the rows are (``layout = "sharded"``: shards listed in the manifest).
FORMAT_VERSION = 1
SHARDED_FORMAT_VERSION = 2
#: The row layouts (``--store``).
STORE_LAYOUTS = ("npy", "sharded")
#: Rows per block of :meth:`FeatureSet.iter_row_blocks` on the ``npy`` layout, by default.
DEFAULT_ROWS_PER_BLOCK = 1024
#: Bytes of a memory-mapped array read at a time by :meth:`FeatureSet.iter_pooled_rows`.
POOLED_BLOCK_BYTES = 64 * 2**20
#: The row arrays and the label arrays of a feature set.
ROW_ARRAYS = ("X_train", "X_test")
LABEL_ARRAYS = ("y_train", "y_test")
#: The mirrored rows (``[augment]``), aligned with the row arrays: ``MIRROR_ARRAYS[k]`` mirrors ``ROW_ARRAYS[k]``.
MIRROR_ARRAYS = ("X_train_flip", "X_test_flip")
#: Every file name a feature set may hold (what this project writes, and nothing else).
FILE_NAMES = frozenset(
    {
        MANIFEST,
        f"{CODEBOOK}.npz",
        *(
            f"{name}.npy"
            for name in (*ROW_ARRAYS, *MIRROR_ARRAYS, *LABEL_ARRAYS, CODEBOOK, NORMALIZER_STATISTICS, PQ_CODEBOOKS)
        ),
    }
)


def _file_names() -> frozenset[str]:
    """:data:`FILE_NAMES` and the state files of the row codecs registered now."""
    return FILE_NAMES | {f"{name}.npy" for name in state_files()}


#: Rows checked for non-finite values at a time (bounded memory on memory-mapped arrays).
_FINITE_CHECK_ROWS = 4096
#: Coded rows whose steps are checked at a time (each row maps up to 64 KiB around its steps).
_CODED_CHECK_ROWS = 256


def rows_per_block(row_bytes: int, max_rows: int, block_bytes: int = POOLED_BLOCK_BYTES) -> int:
    """Rows of ``row_bytes`` each read at a time: at most ``max_rows`` and ``block_bytes`` of them,
    at least one (1 MiB Fisher-vector rows: 64 in the default 64 MiB)."""
    return max(1, min(max_rows, block_bytes // max(row_bytes, 1)))


class FeatureSetError(ClassifyImagesError, ValueError):
    """A feature-set folder is missing, incomplete or corrupt (user-facing, one line)."""


#: What one page fault in a file mapping may map beside its page (Linux's ``fault_around_bytes``,
#: 64 KiB by default: the neighbouring pages already in the page cache; a file cached in large
#: folios may map more).  Reading a block of columns from each of 1 500 rows of a 15-Scenes split
#: made 190 MB resident, about 128 KiB for the 2-4 KB read from each row, until the pages were
#: dropped every few rows.
FAULT_AROUND_BYTES = 64 * 1024


def release_mapped_pages(rows, first: int | None = None, stop: int | None = None) -> None:
    """Drop from this process the pages of a memory-mapped array that reading it made resident.

    They are clean pages of a read-only file (read again from the page cache if needed), but
    they count in the process's resident memory until unmapped: a pass over a 4.5 GB feature
    set would otherwise leave 4.5 GB resident.  With ``first`` and ``stop``, only the pages of
    rows ``first … stop - 1`` (and of the :data:`FAULT_AROUND_BYTES` on either side, which a
    fault there may have mapped too).  Nothing happens for other arrays."""
    array = stored_array(rows)
    mapping = getattr(array, "_mmap", None)  # numpy.memmap's mapping (np.load(..., mmap_mode="r"))
    if mapping is None or not hasattr(mapping, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    if first is None:
        mapping.madvise(mmap.MADV_DONTNEED)
        return
    base = np.frombuffer(mapping, dtype=np.uint8).ctypes.data  # (no copy; the export ends here)
    begin = array.ctypes.data - base + first * array.strides[0] - FAULT_AROUND_BYTES
    end = array.ctypes.data - base + stop * array.strides[0] + FAULT_AROUND_BYTES
    begin = max(begin - begin % mmap.PAGESIZE, 0)
    end = min(end, len(mapping))
    if end > begin:
        mapping.madvise(mmap.MADV_DONTNEED, begin, end - begin)


@dataclass(init=False)
class FeatureSet:
    """A loaded feature set (arrays memory-mapped, read-only).

    ``FeatureSet(path, manifest, X_train, X_test, y_train, y_test)``: the rows of each split
    are a (memory-mapped) array (``npy`` layout) or a
    :class:`~classify_images.pipeline.storage.shard_store.ShardedRows` (``sharded`` layout), kept in
    :attr:`rows` (``{"train": …, "test": …}``).  :attr:`X_train` and :attr:`X_test` are dense
    float32 arrays in both layouts (the shards are assembled on first access);
    :meth:`iter_row_blocks` reads one block at a time instead.  :attr:`mirror_rows` holds the
    mirrored rows of a feature set built with ``[augment]`` (``{"train": …, "test": …}``, aligned
    with :attr:`rows`), else None; :meth:`mirrors` reads them.
    """

    path: Path
    manifest: dict
    rows: dict[str, np.ndarray | ShardedRows]
    y_train: np.ndarray
    y_test: np.ndarray
    _codebook: np.ndarray | None = field(default=None, repr=False)

    def __init__(
        self, path, manifest: dict, X_train, X_test, y_train: np.ndarray, y_test: np.ndarray, _codebook=None
    ) -> None:
        self.path, self.manifest = Path(path), manifest
        self.rows = {"train": X_train, "test": X_test}
        self.y_train, self.y_test, self._codebook = y_train, y_test, _codebook
        self.mirror_rows: dict[str, np.ndarray] | None = None

    @property
    def has_mirrors(self) -> bool:
        """Whether the mirrored rows are stored (a build with ``[augment]``)."""
        return self.mirror_rows is not None

    def mirrors(self, split: str, needed_by: str = "this option") -> np.ndarray:
        """The mirrored rows of ``split`` (``"train"`` or ``"test"``), aligned with its rows.

        Raises
        ------
        FeatureSetError
            The feature set stores no mirrors (one line naming ``needed_by``).
        """
        if self.mirror_rows is None:
            raise FeatureSetError(
                f"feature set {self.path} has no mirrored rows, which {needed_by} needs: "
                'rebuild it with [augment] flip_train = true or flip_test = "average" in the config'
            )
        return self.mirror_rows[split]

    @property
    def X_train(self) -> np.ndarray:
        """Training rows, float32 (n_train, d)."""
        return self._dense("train")

    @property
    def X_test(self) -> np.ndarray:
        """Test rows, float32 (n_test, d)."""
        return self._dense("test")

    def _dense(self, split: str) -> np.ndarray:
        rows = self.rows[split]
        if isinstance(rows, ShardedRows):
            return rows.toarray()
        if isinstance(rows, np.ndarray) and rows.dtype == np.float32:
            return rows  # the memory map itself
        return np.asarray(rows, dtype=np.float32)  # float16 or coded rows decoded

    @property
    def layout(self) -> str:
        """``"npy"`` or ``"sharded"``."""
        return str(self.manifest.get("store", {}).get("layout", "npy"))

    @property
    def row_encoding(self) -> str:
        """How the rows are stored: ``"float32"``, ``"float16"``, ``"int8"``, ``"int4"``, ``"pq8"`` or ``"pq16"``."""
        if "store" in self.manifest:
            return str(self.manifest["store"].get("rows", "float32"))
        return str(self.manifest.get("rows", "float32"))

    def iter_row_blocks(self, split: str, rows_per_block: int | None = None):
        """``(X_block, y_block)`` over the rows of ``split`` (``"train"`` or ``"test"``), in row order.

        Parameters
        ----------
        split : {"train", "test"}
        rows_per_block : int, optional
            Rows per block (the last one may be shorter).  Default: one shard at a time
            (``sharded`` layout), :data:`DEFAULT_ROWS_PER_BLOCK` rows (``npy`` layout).

        Yields
        ------
        X_block : ndarray of float32 or scipy.sparse.csr_matrix
            Slices of the memory-mapped array (``npy``), dense shards, or CSR shards of a
            ``csr`` sharded store.
        y_block : ndarray of int64
        """
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', not {split!r}")
        rows, labels = self.rows[split], (self.y_train if split == "train" else self.y_test)
        if isinstance(rows, ShardedRows):
            for where, block in rows.blocks(rows_per_block):
                yield block, np.asarray(labels[where], dtype=np.int64)
            return
        step = rows_per_block or DEFAULT_ROWS_PER_BLOCK
        if step < 1:
            raise ValueError(f"rows_per_block must be at least 1, not {step}")
        for start in range(0, rows.shape[0], step):
            block = rows[start : start + step]
            if not (isinstance(block, np.ndarray) and block.dtype == np.float32):
                block = np.asarray(block, dtype=np.float32)  # float16 or coded rows decoded
            yield block, np.asarray(labels[start : start + step], dtype=np.int64)

    def iter_pooled_rows(
        self,
        indices: np.ndarray,
        max_block_bytes: int | None = None,
        *,
        mirrored: bool = False,
        needed_by: str = "this option",
    ):
        """``(positions, X)`` over rows ``indices`` of the pooled rows (the training rows, then
        the test rows; with ``mirrored``, of their stored mirrors, :meth:`mirrors`), read one
        stored block at a time, in storage order.

        ``X`` holds the selected rows of one block (dense float32) and ``positions`` where they
        sit in ``indices``: ``X[i]`` is pooled row ``indices[positions[i]]``.  Memory: one block
        (a shard, or ``max_block_bytes`` of a memory-mapped array), never the pooled rows.
        """
        indices = np.asarray(indices, dtype=np.int64)
        max_block_bytes = POOLED_BLOCK_BYTES if max_block_bytes is None else max_block_bytes
        order = np.argsort(indices, kind="stable")
        wanted = indices[order]
        offset = 0
        for split in ("train", "test"):
            rows = self.mirrors(split, needed_by) if mirrored else self.rows[split]
            if isinstance(rows, ShardedRows):
                blocks = (block for block, _ in self.iter_row_blocks(split))  # one shard at a time
            else:
                # Slices of the map, not read until rows are selected from them: a block none of
                # whose rows is wanted (e.g. the whole test split when gathering training rows) is
                # never read, converted or made resident.
                step = rows_per_block(4 * rows.shape[1], rows.shape[0], max_block_bytes)
                blocks = (rows[start : start + step] for start in range(0, rows.shape[0], step))
            for X_block in blocks:
                n = X_block.shape[0]
                low, high = np.searchsorted(wanted, (offset, offset + n))
                if high > low:
                    selected = X_block[wanted[low:high] - offset]
                    selected = selected.toarray() if hasattr(selected, "toarray") else selected
                    selected = np.asarray(selected, dtype=np.float32)  # fancy indexing: its own memory, not the map's
                    release_mapped_pages(rows)
                    yield order[low:high], selected
                offset += n

    def pooled_rows(
        self,
        indices: np.ndarray,
        *,
        mirrored: bool = False,
        needed_by: str = "this option",
        out: np.ndarray | None = None,
        dtype: Any = np.float32,
    ) -> np.ndarray:
        """Rows ``indices`` of the pooled rows (training, then test), or of their mirrors
        (``mirrored``), as one dense array of ``dtype`` (float32; float16 for rows stored float16
        and a classifier that reads them so: half the memory, the same values), into ``out``
        (shape ``(len(indices), n_features)``) when given: e.g. one half of a preallocated array.

        The only copy made is the result (:meth:`iter_pooled_rows`): an experiment's split
        gathers its training rows without concatenating the training and test sets first.
        """
        if out is None:
            out = np.empty((len(indices), self.n_features), dtype=dtype)
        for positions, block in self.iter_pooled_rows(indices, mirrored=mirrored, needed_by=needed_by):
            out[positions] = block
        return out

    def to_dask_array(self, split: str):
        """The rows of ``split`` as a lazy ``dask.array`` (one chunk per shard, or per
        :data:`DEFAULT_ROWS_PER_BLOCK` rows of the memory-mapped array).  Needs Dask."""
        rows = self.rows[split]
        if isinstance(rows, ShardedRows):
            return rows.to_dask_array()
        from ..execution.cluster import require_distributed

        require_distributed()
        import dask.array as da

        return da.from_array(rows, chunks=(DEFAULT_ROWS_PER_BLOCK, rows.shape[1])).astype(np.float32)

    @property
    def class_names(self) -> list[str]:
        return list(self.manifest["class_names"])

    @property
    def config_hash(self) -> str:
        return str(self.manifest["config_hash"])

    @property
    def config(self) -> PipelineConfig | ChannelsConfig:
        """The configuration the feature set was built with (a :class:`ChannelsConfig` for ``[[channel]]`` tables)."""
        return read_any_config(self.manifest["config"], source=str(self.path / MANIFEST))

    @property
    def channels(self) -> tuple[Channel, ...]:
        """The channel layout of a multi-channel feature set (:mod:`~classify_images.pipeline.extraction.channels`);
        empty for a single channel."""
        entries = self.manifest.get("channels")
        if not entries:
            return ()
        return channels_from_dicts(entries, self.n_features, source=f"feature set {self.path}")

    @property
    def n_features(self) -> int:
        return int(self.rows["train"].shape[1])

    @property
    def train_paths(self) -> list[str]:
        return list(self.manifest["split"]["train"])

    @property
    def test_paths(self) -> list[str]:
        return list(self.manifest["split"]["test"])

    def codebook(self) -> np.ndarray | dict[str, np.ndarray]:
        """The codebook the features were encoded with (a dict of arrays for a Fisher model)."""
        if self._codebook is None:
            if (self.path / f"{CODEBOOK}.npz").exists():
                arrays = _load_arrays(self.path, f"{CODEBOOK}.npz")
                for key, array in arrays.items():
                    if array.dtype.kind != "f":
                        raise FeatureSetError(
                            f"feature set {self.path}: {CODEBOOK}.npz[{key}] is not floats; rebuild it"
                        )
                    _require_finite(
                        self.path, f"{CODEBOOK}.npz[{key}]", array.reshape(array.shape[0] if array.ndim else 1, -1)
                    )
                self._codebook = arrays
            else:
                codebook = _load_array(self.path, f"{CODEBOOK}.npy")
                if codebook.ndim != 2 or codebook.dtype.kind != "f" or codebook.shape[0] < 1:
                    raise FeatureSetError(
                        f"feature set {self.path}: {CODEBOOK}.npy is not a matrix of floats; rebuild it"
                    )
                _require_finite(self.path, f"{CODEBOOK}.npy", codebook)
                self._codebook = codebook
        return self._codebook

    def normalizer(self) -> Normalizer:
        """The normaliser the rows were normalised with, fitted on the training rows."""
        if self.manifest.get("channels"):  # each channel normalised per vector when built
            return Normalizer("none")
        method = self.config.normalization.method
        statistics = None
        if not Normalizer(method).per_vector:
            name = f"{NORMALIZER_STATISTICS}.npy"
            statistics = _load_array(self.path, name)
            if statistics.shape != (2, self.n_features) or statistics.dtype.kind != "f":
                raise FeatureSetError(
                    f"feature set {self.path}: {name} has shape {statistics.shape}, "
                    f"expected (2, {self.n_features}); rebuild it"
                )
            _require_finite(self.path, name, statistics)
        return Normalizer.from_statistics(method, statistics)

    def identity(self) -> dict:
        """What a model records of the feature set it was trained on."""
        return {
            "config_hash": self.config_hash,
            "n_features": self.n_features,
            "class_names": self.class_names,
            "path": str(self.path.resolve()),
        }


#: What ``np.load`` raises on a torn or tampered ``.npy`` / ``.npz`` file: NumPy parses the header
#: as a Python literal, so a damaged header can also end in a tokenizer error.
NPY_READ_ERRORS = (OSError, ValueError, EOFError, SyntaxError, tokenize.TokenError)


def _unreadable(folder: Path, name: str, exc: BaseException) -> FeatureSetError:
    """The one line for a file of the feature set that cannot be used: permission denied and not
    a regular file are said as such (rebuilding would not help: the data may be fine)."""
    path = folder / name
    if isinstance(exc, FileNotFoundError):
        return FeatureSetError(f"feature set {folder} is incomplete: {name} is missing; rebuild it")
    if isinstance(exc, PermissionError):
        return FeatureSetError(
            f"feature set {folder}: permission denied reading {path}; "
            "give yourself read access (chmod u+r) — the file itself may be fine"
        )
    if isinstance(exc, NotRegularFileError):
        return FeatureSetError(f"feature set {folder}: {exc.strerror}; a feature set holds regular files only")
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return FeatureSetError(f"feature set {folder}: {name} is corrupt ({reason}); rebuild it")


def _load_array(folder: Path, name: str, mmap: bool = False) -> np.ndarray:
    """A ``.npy`` file of the feature set: a regular file whose header announces exactly the bytes
    it holds (refused before allocating otherwise), memory-mapped read-only or read."""
    try:
        with open_regular_file(folder / name) as handle:
            return load_npy_checked(handle, os.fstat(handle.fileno()).st_size, mmap=mmap)
    except (*NPY_READ_ERRORS, NotRegularFileError) as exc:
        raise _unreadable(folder, name, exc) from None


def _require_finite(folder: Path, name: str, array: np.ndarray, codec: RowCodec | None = None) -> None:
    """Raise :class:`FeatureSetError` if ``array`` holds NaN or ±inf — or, for rows stored coded
    by ``codec``, values that would not decode to finite rows (``codec.check_stored``) — checked
    in row blocks whose mapped pages are released after each (a 4.5 GB set must not stay resident)."""
    if codec is None:
        step = rows_per_block(array.itemsize * int(np.prod(array.shape[1:])), _FINITE_CHECK_ROWS)
    else:  # reading a row's steps maps the pages around them: a few rows at a time
        step = _CODED_CHECK_ROWS
    for start in range(0, max(array.shape[0], 1), step):
        block = array[start : start + step]
        try:
            if codec is None:
                finite = bool(np.isfinite(block).all())
            else:
                codec.check_stored(block, None)  # RowCodecError, one line, when a row would not decode finite
                finite = True
        except RowCodecError as exc:
            raise FeatureSetError(f"feature set {folder}: {name} {exc}; rebuild it") from None
        finally:
            release_mapped_pages(array)
        if not finite:
            raise FeatureSetError(f"feature set {folder}: {name} holds NaN or infinite values; rebuild it")


def _is_str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_count(value, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_manifest(folder: Path, manifest) -> None:
    """Raise :class:`FeatureSetError` unless the manifest has every key, of the right type."""

    def bad(what: str) -> FeatureSetError:
        return FeatureSetError(f"feature set {folder}: {MANIFEST} {what}; rebuild it")

    if not isinstance(manifest, dict):
        raise bad("is not a JSON object")
    if manifest.get("format") != FORMAT_NAME:
        raise FeatureSetError(f"{folder} is not a classify-images feature set")
    if manifest.get("format_version") not in (FORMAT_VERSION, SHARDED_FORMAT_VERSION):
        raise bad(
            f"has format_version {manifest.get('format_version')!r}, expected {FORMAT_VERSION} "
            f"or {SHARDED_FORMAT_VERSION}"
        )
    if (manifest["format_version"] == SHARDED_FORMAT_VERSION) != ("store" in manifest):
        raise bad(
            f"has format_version {manifest['format_version']} {'without' if 'store' not in manifest else 'with'} "
            "a 'store' entry"
        )
    checks = {
        "config_hash": lambda v: isinstance(v, str) and bool(v),
        "config": lambda v: isinstance(v, dict),
        "class_names": lambda v: _is_str_list(v) and len(v) >= 2 and len(set(v)) == len(v),
        "split": lambda v: isinstance(v, dict) and _is_str_list(v.get("train")) and _is_str_list(v.get("test")),
        "skipped": lambda v: (
            isinstance(v, list)
            and all(
                isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("reason"), str) for e in v
            )
        ),
        "n_features": lambda v: _is_count(v, 1),
        "timings": lambda v: isinstance(v, dict),
    }
    for key, ok in checks.items():
        if key not in manifest:
            raise bad(f"has no {key!r}")
        if not ok(manifest[key]):
            raise bad(f"has an invalid {key!r}")
    split = manifest["split"]
    if not _is_count(split.get("train_per_class"), 1):
        raise bad("has an invalid split.train_per_class")
    if split.get("test_per_class") is not None and not _is_count(split.get("test_per_class"), 1):
        raise bad("has an invalid split.test_per_class")
    try:
        read_any_config(manifest["config"], source=str(folder / MANIFEST))
    except ConfigError as exc:
        raise FeatureSetError(f"{exc}; rebuild the feature set") from None
    if "store" in manifest:
        _check_store(manifest, bad)
    elif manifest.get("rows", NPY_ROW_ENCODINGS[0]) not in NPY_ROW_ENCODINGS:
        raise bad(f"'rows' must be one of {', '.join(NPY_ROW_ENCODINGS)}")


def _is_shard_entry(entry, part: str, fmt: str, index: int) -> bool:
    return (
        isinstance(entry, dict)
        and entry.get("file") == shard_name(part, index, fmt)
        and _is_count(entry.get("rows"), 1)
        and _is_count(entry.get("nnz"), 0)
        and isinstance(entry.get("sha1"), str)
        and len(entry["sha1"]) == 40
    )


def _check_store(manifest: dict, bad) -> None:
    """The ``store`` entry of a sharded feature set: layout, format, shards covering every row."""
    store = manifest["store"]
    formats = shard_formats()
    if not isinstance(store, dict) or store.get("layout") != "sharded" or store.get("format") not in formats:
        raise bad(f"has an invalid 'store' (expected layout 'sharded' and a format among {', '.join(formats)})")
    try:
        codec = _store_codec(store)
    except RowCodecError:
        raise bad(
            f"has an invalid store.rows {store.get('rows', 'float32')!r} for format {store['format']!r}"
        ) from None
    codebooks = store.get("codebooks")
    if (codec.state_file is not None) != (codebooks is not None) or (
        codebooks is not None
        and not (
            isinstance(codebooks, dict)
            and codebooks.get("file") == f"{codec.state_file}.npy"
            and isinstance(codebooks.get("sha1"), str)
            and len(codebooks["sha1"]) == 40
        )
    ):
        raise bad(
            "has an invalid store.codebooks (a codec with a learnt state, such as 'pq', lists its file and "
            "SHA-1, no other does)"
        )
    shards = store.get("shards")
    if not isinstance(shards, dict):
        raise bad("has an invalid store.shards")
    for part in ("train", "test"):
        entries = shards.get(f"X_{part}")
        if not isinstance(entries, list) or not all(
            _is_shard_entry(entry, f"X_{part}", store["format"], index) for index, entry in enumerate(entries)
        ):
            raise bad(f"has an invalid store.shards.X_{part}")
        if sum(entry["rows"] for entry in entries) != len(manifest["split"][part]):
            raise bad(f"lists shards of X_{part} that do not cover its {len(manifest['split'][part])} rows")


def _check_arrays(folder: Path, manifest: dict, arrays: dict[str, np.ndarray]) -> None:
    """Raise :class:`FeatureSetError` unless the arrays agree with each other and the manifest;
    the ``npy`` layout's row arrays are checked (:func:`_npy_rows`) and replaced by their rows."""
    n_classes = len(manifest["class_names"])
    for part in ("train", "test"):
        X, y = arrays.get(f"X_{part}"), arrays[f"y_{part}"]
        n_rows = len(manifest["split"][part])
        if X is not None:
            arrays[f"X_{part}"] = _npy_rows(folder, manifest, f"X_{part}", X, n_rows)
        if y.ndim != 1 or y.dtype.kind not in "iu" or y.shape[0] != n_rows:
            raise FeatureSetError(
                f"feature set {folder}: y_{part}.npy is {y.dtype} {y.shape}, expected {n_rows} integer labels; rebuild it"
            )
        if n_rows and (int(y.min()) < 0 or int(y.max()) >= n_classes):
            raise FeatureSetError(
                f"feature set {folder}: y_{part}.npy has labels outside 0…{n_classes - 1}; rebuild it"
            )


def _npy_rows(folder: Path, manifest: dict, name: str, X: np.ndarray, n_rows: int) -> np.ndarray | CodedRows:
    """The rows of the ``npy`` layout's row file ``name`` (memory-mapped ``X``), checked against
    the manifest (shape and dtype of the codec's stored form) and for finite values; rows of a
    codec that stores them coded (``int8``, ``int4``) come wrapped in a :class:`CodedRows`."""
    codec = row_codec(manifest.get("rows", NPY_ROW_ENCODINGS[0]))
    n_features = manifest["n_features"]
    dtype, width = codec.stored_form(n_features, None)
    if codec.earlier is not None and X.ndim == 2 and X.shape[1] != width:
        earlier_dtype, earlier_width = codec.earlier.stored_form(n_features, None)
        if X.dtype == earlier_dtype and X.shape == (n_rows, earlier_width):  # rows of an earlier stored form
            codec, width = codec.earlier, earlier_width
    if X.ndim != 2 or X.dtype != dtype or X.shape != (n_rows, width):
        raise FeatureSetError(
            f"feature set {folder}: {name}.npy is {X.dtype} {X.shape}, the manifest announces "
            f"{np.dtype(dtype).name} ({n_rows}, {width}); rebuild it"
        )
    coded = _is_coded(codec)
    _require_finite(folder, f"{name}.npy", X, codec if coded else None)
    return CodedRows(X, codec, n_features) if coded else X


def _is_coded(codec: RowCodec) -> bool:
    """Whether the ``npy`` layout holds ``codec``'s rows as codes rather than one float per value."""
    dtype, width = codec.stored_form(1, None)
    return np.dtype(dtype).kind != "f" or width != 1


def _store_codec(store: dict) -> RowCodec:
    """The row codec of a ``store`` entry: the sparse codec of its format (``csr``), else the codec
    named by ``store.rows``, which must write that format.

    Raises
    ------
    RowCodecError
        No registered codec fits.
    """
    name = store.get("rows", "float32")
    if not isinstance(name, str):
        raise RowCodecError(f"store.rows {name!r} is not a codec name")
    if codec_of_format(store["format"]).sparse:
        return codec_for_rows(True, name)  # the rows as computed, never compressed
    codec = row_codec(name)
    if codec.earlier is not None and codec.earlier.format == store["format"]:
        return codec.earlier  # shards of an earlier stored form
    if codec.format != store["format"]:
        raise RowCodecError(f"store.rows {name!r} writes format {codec.format!r}, not {store['format']!r}")
    return codec


#: Row codecs the ``npy`` layout stores (the manifest's ``rows``; absent: the first, float32):
#: those that say :attr:`~classify_images.pipeline.storage.row_codecs.RowCodec.in_npy_store`.
NPY_ROW_ENCODINGS = tuple(name for name in row_codec_names() if row_codec(name).in_npy_store)


def _sharded_rows(folder: Path, manifest: dict) -> dict[str, ShardedRows]:
    """The shards of both splits, each read once and checked (structure, SHA-1, finite values)."""
    store = manifest["store"]
    codec = _store_codec(store)
    state = _codec_state(folder, manifest, codec) if codec.state_file is not None else None
    rows = {}
    for part in ("train", "test"):
        rows[part] = ShardedRows(folder, store["shards"][f"X_{part}"], manifest["n_features"], codec, state)
        try:
            rows[part].check()
        except ShardError as exc:
            raise FeatureSetError(f"feature set {folder}: {exc}; rebuild it") from None
    return rows


def _codec_state(folder: Path, manifest: dict, codec: RowCodec):
    """The learnt state of a row codec (``pq``: the product quantiser), its file checked against the manifest."""
    name, store = f"{codec.state_file}.npy", manifest["store"]
    array = _load_array(folder, name)
    if file_sha1(folder / name) != store["codebooks"]["sha1"]:
        raise FeatureSetError(
            f"feature set {folder}: {name} is not the file the manifest lists (SHA-1 differs); rebuild it"
        )
    try:
        return codec.state_from_array(array, manifest["n_features"])
    except RowCodecError as exc:
        raise FeatureSetError(f"feature set {folder}: {name}: {exc}; rebuild it") from None


def _load_arrays(folder: Path, name: str) -> dict[str, np.ndarray]:
    """The named arrays of an ``.npz`` file, read into memory, without pickle, headers checked."""
    try:
        return load_npz_checked(folder / name)
    except (*NPY_READ_ERRORS, NotRegularFileError, KeyError, zipfile.BadZipFile, NotImplementedError) as exc:
        raise _unreadable(folder, name, exc) from None


def read_manifest(folder: Path) -> dict:
    """The parsed ``manifest.json`` of ``folder`` (a regular file, JSON bounded in size and depth)."""
    manifest_path = folder / MANIFEST
    try:
        return loads_bounded_json(read_regular_bytes(manifest_path, max_bytes=MAX_JSON_BYTES), what=str(manifest_path))
    except (OSError, ValueError, RecursionError) as exc:
        if isinstance(exc, (PermissionError, NotRegularFileError)):
            raise _unreadable(folder, MANIFEST, exc) from None
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FeatureSetError(f"{manifest_path} is not valid JSON ({reason}); rebuild the feature set") from None


def load_feature_set(path: str | os.PathLike) -> FeatureSet:
    """Open a feature set folder written by ``classify-images build-features``, and check it.

    Raises
    ------
    FeatureSetError
        Missing folder, no manifest (incomplete build), a manifest without a required
        key or with a value of the wrong type, unreadable or corrupt arrays, arrays whose
        shapes or dtypes disagree with the manifest or with each other, labels outside the
        classes, NaN or infinite values.
    """
    folder = Path(path)
    if not folder.is_dir():
        if folder.exists():
            raise FeatureSetError(
                f"feature set {folder} is not a folder (a feature set is the folder build-features wrote)"
            )
        raise FeatureSetError(
            f"feature set {folder} does not exist (build it with: classify-images build-features DATASET --out {folder})"
        )
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        raise FeatureSetError(f"{folder} is not a complete feature set (no {MANIFEST}); rebuild it")
    manifest = read_manifest(folder)
    _check_manifest(folder, manifest)
    sharded = "store" in manifest
    names = LABEL_ARRAYS if sharded else (*ROW_ARRAYS, *LABEL_ARRAYS)
    arrays = {name: _load_array(folder, f"{name}.npy", mmap=True) for name in names}
    _check_arrays(folder, manifest, arrays)
    rows = _sharded_rows(folder, manifest) if sharded else {"train": arrays["X_train"], "test": arrays["X_test"]}
    feature_set = FeatureSet(folder, manifest, rows["train"], rows["test"], arrays["y_train"], arrays["y_test"])
    if _has_mirrors(manifest):
        feature_set.mirror_rows = _mirror_rows(folder, manifest)
    return feature_set


def _has_mirrors(manifest: dict) -> bool:
    augment = manifest.get("augment")
    return isinstance(augment, dict) and augment.get("mirrors") is True


def _mirror_rows(folder: Path, manifest: dict) -> dict[str, np.ndarray]:
    """The mirrored rows (memory-mapped), checked like the rows (:func:`_check_arrays`)."""
    mirrors = {
        part: _npy_rows(
            folder, manifest, name, _load_array(folder, f"{name}.npy", mmap=True), len(manifest["split"][part])
        )
        for part, name in zip(("train", "test"), MIRROR_ARRAYS)
    }
    return mirrors


# --- what may be replaced ---


#: A manifest larger than this is not read to decide whether a folder is ours.
_MAX_MANIFEST_BYTES = 256 << 20


def _read_own_manifest(folder: Path) -> dict | None:
    """The manifest of ``folder`` when it is a regular file of JSON announcing our format (None otherwise)."""
    return read_format_json(folder / MANIFEST, FORMAT_NAME, max_bytes=_MAX_MANIFEST_BYTES)


def _listed_files(manifest: dict) -> tuple[set[str], set[str]] | None:
    """The files a manifest of ours says its folder holds: ``(required, optional)``; None when it
    does not say (a manifest with our format key but not our layout)."""
    required = {MANIFEST, *(f"{name}.npy" for name in LABEL_ARRAYS)}
    store = manifest.get("store")
    if store is None:
        required |= {f"{name}.npy" for name in ROW_ARRAYS}
        if _has_mirrors(manifest):
            required |= {f"{name}.npy" for name in MIRROR_ARRAYS}
    else:
        try:
            required |= {entry["file"] for part in ROW_ARRAYS for entry in store["shards"][part]}
        except (TypeError, KeyError):
            return None
        if not all(
            isinstance(name, str) and is_shard_name(name)
            for name in required - {MANIFEST} - {f"{name}.npy" for name in LABEL_ARRAYS}
        ):
            return None
        state = store.get("codebooks")
        if isinstance(state, dict) and state.get("file") in _file_names():  # a codec's learnt state
            required.add(state["file"])
    return required, {f"{CODEBOOK}.npy", f"{CODEBOOK}.npz", f"{NORMALIZER_STATISTICS}.npy"}


def _is_feature_set_file(name: str) -> bool:
    """A name this project writes in a feature set: :data:`FILE_NAMES` or a shard."""
    return name in _file_names() or is_shard_name(name)


def has_feature_set_manifest(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a manifest of ours (whatever else is there): a folder that does is
    a feature set, perhaps with files added, and no other output is ever written into it."""
    return _read_own_manifest(Path(folder)) is not None


def is_feature_set_folder(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` is a feature set this project wrote (an empty folder is not).

    Proven by its manifest: a regular file announcing our format, and the folder holds exactly
    the files that manifest lists (every required one, one codebook, and nothing else; all
    regular files).  Files with a feature set's names but no such manifest — a user's own
    ``X_train.npy``, a web app's ``manifest.json`` — are not ours.
    """
    folder = Path(folder)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False
    if not all(entry.is_file(follow_symlinks=False) for entry in entries):
        return False
    manifest = _read_own_manifest(folder)
    listed = None if manifest is None else _listed_files(manifest)
    if listed is None:
        return False
    required, optional = listed
    present = {entry.name for entry in entries}
    codebooks = present & {f"{CODEBOOK}.npy", f"{CODEBOOK}.npz"}
    return required <= present and present <= required | optional and len(codebooks) == 1


def _refuse(out: Path, why: str) -> FeatureSetError:
    return FeatureSetError(f"refusing to write the feature set to {out}: {why}")


def check_destination(out: str | os.PathLike, dataset: str | os.PathLike | None = None, *, force: bool = False) -> Path:
    """Check that the feature set may be written to ``out``; return its absolute path.

    Allowed: ``out`` is absent, an empty folder, or a feature set this project wrote
    (:func:`is_feature_set_folder`); with ``force``, also a folder holding nothing but regular
    files of a feature set's names (:data:`FILE_NAMES`, shards) that we cannot prove we wrote —
    they are replaced.  Refused, with one line saying why: a symbolic link, a plain file (or
    anything else that is not a folder), a folder with files of other names (even with
    ``force``: the folder is replaced as a whole, so they would be moved aside), the current
    folder, and — when ``dataset`` is given — the dataset folder, a folder holding it, or a
    folder inside it (it would be read as a class folder).

    Raises
    ------
    FeatureSetError
    """
    out = Path(os.path.abspath(out))
    if os.path.islink(out):
        raise _refuse(out, "it is a symbolic link; give the path of a folder (it is not followed or replaced)")
    if out.exists() and not out.is_dir():
        raise _refuse(out, "it is a file, not a folder; remove it or choose another --out")
    if dataset is not None:
        data, target = Path(dataset).resolve(), out.resolve()
        if target == data:
            raise _refuse(out, "it is the dataset folder; choose another --out")
        if target in data.parents:
            raise _refuse(out, f"it holds the dataset {dataset}; choose another --out")
        if data in target.parents:
            raise _refuse(
                out, f"it is inside the dataset {dataset}, where it would be read as a class; choose another --out"
            )
    if out.is_dir():
        with contextlib.suppress(OSError):
            if out.samefile(os.getcwd()):
                raise _refuse(out, "it is the current folder; give the name of a new folder")
        try:
            entries = list(os.scandir(out))
        except OSError as exc:
            raise _refuse(out, f"cannot list it ({exc.strerror})") from None
        if entries and not is_feature_set_folder(out):
            foreign = sorted(
                entry.name
                for entry in entries
                if not (_is_feature_set_file(entry.name) and entry.is_file(follow_symlinks=False))
            )
            if foreign:
                raise _refuse(
                    out,
                    f"the folder exists and is not a feature set: it holds {', '.join(foreign[:3])}"
                    f"{' …' if len(foreign) > 3 else ''} (nothing was changed); choose another --out "
                    "or empty it",
                )
            if not force:
                raise _refuse(
                    out,
                    "the folder holds files with a feature set's names but no manifest of ours "
                    "listing them (nothing was changed); choose another --out, or add --force to "
                    "replace them",
                )
    return out


def remove_stale_partials(out: str | os.PathLike) -> list[Path]:
    """Delete the ``.<name>.partial-<pid>`` / ``.<name>.old-<pid>`` siblings of the feature set ``out``
    left by builds that are gone (killed in the middle of writing or of the final rename), by the
    names a feature set holds only; called by every build, the one that finds ``out`` up to date too."""
    out = Path(out)
    return remove_stale_siblings(out.parent, out.name, _remove_feature_set_files)


def _remove_feature_set_files(folder: Path) -> bool:
    """Delete a feature set (or a partial one) by the names this project writes in it only:
    :data:`FILE_NAMES`, shards, and the temporary names of the manifest and of shards.
    True when the folder is gone."""
    for entry in os.scandir(folder):
        ours = (
            _is_feature_set_file(entry.name) or is_shard_temporary(entry.name) or is_temporary_of(entry.name, MANIFEST)
        )
        if ours and not entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def _allocate(handle, size: int) -> None:
    """Reserve ``size`` bytes of disk for an open file (no sparse holes to fault on later)."""
    try:
        os.posix_fallocate(handle.fileno(), 0, size)
        return
    except AttributeError:  # pragma: no cover - not POSIX
        pass
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS):
            raise
    # The file system cannot allocate: write zeros instead (a full disk is then ENOSPC here).
    handle.seek(0, os.SEEK_END)
    block = bytes(1 << 20)
    remaining = size - handle.tell()
    while remaining > 0:
        remaining -= handle.write(block[: min(remaining, len(block))])
    handle.flush()


class FeatureSetWriter:
    """Assemble a feature set in a temporary folder, then move it into place.

    Usage::

        with FeatureSetWriter(out) as writer:
            X_train = writer.open_rows("X_train", n, d)    # allocated, memory-mapped .npy
            ...
            writer.save("y_train", y)
            writer.commit(manifest)                        # sync, manifest last, exchange

    ``out`` is checked with :func:`check_destination` on entry and again at the commit.
    Temporary folders of earlier runs whose process is gone are removed on entry.
    """

    def __init__(
        self, out: str | os.PathLike, dataset: str | os.PathLike | None = None, *, force: bool = False
    ) -> None:
        self.out = Path(os.path.abspath(out))
        self.dataset, self.force = dataset, force
        self.tmp = self.out.with_name(f".{self.out.name}.partial-{os.getpid()}")
        self.aside = self.out.with_name(f".{self.out.name}.old-{os.getpid()}")

    def __enter__(self) -> FeatureSetWriter:
        check_destination(self.out, self.dataset, force=self.force)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_siblings(self.out.parent, self.out.name, _remove_feature_set_files)
        if self.tmp.exists():  # our own pid's leftover (a previous writer in this process)
            _remove_feature_set_files(self.tmp)
        self.tmp.mkdir()
        return self

    def open_rows(self, name: str, n_rows: int, n_cols: int, encoding: str = "float32") -> np.ndarray | CodedRows:
        """``(n_rows, n_cols)`` rows stored as ``encoding`` (a codec of :data:`NPY_ROW_ENCODINGS`) in a
        ``.npy`` file allocated on disk and memory-mapped for writing: the array itself for
        float32 and float16, a :class:`CodedRows` (float rows assigned are encoded) for ``int8``
        and ``int4``.  Packed ``int8`` rows use a prefix of their slot: their file is not
        allocated (the slots' unused tails stay holes), the rows are written with ``pwrite``
        and mapped read-only."""
        codec = row_codec(encoding)
        dtype, width = codec.stored_form(n_cols, None)
        dtype = np.dtype(dtype)
        path = self.tmp / f"{name}.npy"
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (n_rows, width)}
        with open(path, "wb") as handle:
            np.lib.format.write_array_header_1_0(handle, header)
            offset = handle.tell()
            handle.flush()
            if codec.writes_prefix:  # each row written is the prefix of its slot: the rest stays a hole
                handle.truncate(offset + n_rows * width * dtype.itemsize)
            else:
                _allocate(handle, offset + n_rows * width * dtype.itemsize)
        if n_rows * width == 0:
            stored = np.zeros((n_rows, width), dtype=dtype)
        else:
            stored = np.memmap(
                path, dtype=dtype, mode="r" if codec.writes_prefix else "r+", offset=offset, shape=(n_rows, width)
            )
        if not _is_coded(codec):
            return stored
        return CodedRows(stored, codec, n_cols, path if codec.writes_prefix and n_rows * width else None, offset)

    def save(self, name: str, array: np.ndarray) -> None:
        with open(self.tmp / f"{name}.npy", "wb") as handle:
            np.save(handle, np.asarray(array), allow_pickle=False)

    def save_codebook(self, codebook: np.ndarray | dict[str, np.ndarray]) -> None:
        """Store the codebook: one array as ``codebook.npy``, named arrays as ``codebook.npz``."""
        if isinstance(codebook, dict):
            np.savez(self.tmp / f"{CODEBOOK}.npz", **{key: np.asarray(value) for key, value in codebook.items()})
        else:
            self.save(CODEBOOK, codebook)

    def save_codec_state(self, codec: RowCodec, state) -> dict:
        """Store a row codec's learnt state (``pq``: the codebooks, ``pq_codebooks.npy``); return
        its ``store.codebooks`` manifest entry."""
        name = f"{codec.state_file}.npy"
        self.save(codec.state_file, codec.state_to_array(state))
        return {"file": name, "sha1": file_sha1(self.tmp / name), **codec.state_entry(state)}

    def save_normalizer(self, normalizer: Normalizer) -> None:
        """Store the fitted normaliser's statistics (nothing for per-vector methods)."""
        statistics = normalizer.statistics()
        if statistics is not None:
            self.save(NORMALIZER_STATISTICS, statistics)

    @property
    def shard_folder(self) -> Path:
        """Where the workers write the shards of a sharded store (the folder being assembled;
        on a cluster it must be on a file system every worker shares)."""
        return self.tmp

    def commit(self, manifest: dict) -> Path:
        """Sync every file, write the manifest, and put the folder at ``out``.

        A manifest with a ``store`` entry (sharded rows) is written as format version 2.
        Temporary shard files left by killed workers are removed first."""
        for entry in os.scandir(self.tmp):
            if is_shard_temporary(entry.name):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
        for entry in os.scandir(self.tmp):
            fsync_file(entry.path)
        version = SHARDED_FORMAT_VERSION if "store" in manifest else FORMAT_VERSION
        manifest = {"format": FORMAT_NAME, "format_version": version, **manifest}
        atomic_write_json(self.tmp / MANIFEST, manifest)
        check_destination(self.out, self.dataset, force=self.force)
        if replace_folder(self.tmp, self.out, self.aside):
            # The previous feature set, by its file names only (anything foreign stays).
            _remove_feature_set_files(self.aside)
        return self.out

    def __exit__(self, *exc_info) -> None:
        if self.tmp.exists():
            _remove_feature_set_files(self.tmp)
