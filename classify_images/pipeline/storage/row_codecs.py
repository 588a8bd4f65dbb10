"""Row codecs as plug-ins: how the rows of a sharded feature set are stored in their shards.

A :class:`RowCodec` turns a float32 block of rows into the bytes of one shard and back; the
shard store, the feature store and the build ask it, and never name it.  A codec is found by
its :attr:`~RowCodec.name` — the ``--rows`` value and the manifest's ``store.rows`` — and
names the shard :attr:`~RowCodec.format` it writes (the manifest's ``store.format``).  A codec
with a learnt state (product quantisation's codebooks) says so with
:attr:`~RowCodec.state_file`: the build learns the state from a sample of training rows
(:meth:`~RowCodec.fit`), stores it beside the shards and lists it with its SHA-1 in the
manifest's ``store.codebooks``; every reader gets it back with :meth:`~RowCodec.state_from_array`.

=============  ===========  ======================================================  =========
name           format       a shard holds                                           state
=============  ===========  ======================================================  =========
``float32``    ``dense``    the float32 rows (``.npy``, memory-mapped on reading)   —
``csr``        ``csr``      the CSR components (``.npz``; sparse rows, chosen by    —
                            the encoder's ``sparse_rows``, never by ``--rows``)
``float16``    ``float16``  the rows in half precision                              —
``int8``       ``int8-packed``  8-bit codes + one float32 step per 4 096 values,    —
                            packed by blocks of 64 in the bits each block needs
                            (feature sets of format ``int8``, one byte a code, are
                            read as they are)
``int4``       ``int4``     4-bit codes (two a byte) + one step per 4 096 values    —
``pq8``        ``pq``       uint8 product-quantisation codes, 8 dimensions a byte   codebooks
``pq16``       ``pq``       uint8 codes, 16 dimensions a byte                       codebooks
=============  ===========  ======================================================  =========

A new codec is one class and one :func:`register_row_codec` call (see ``docs/extending.md``
and ``tests/test_row_codec_plugins.py``).  Reading decodes every block to float32 rows (or a
CSR matrix for ``csr``): a reader never sees the stored form.
"""

from __future__ import annotations

import io
import os
import zipfile
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ...coding.packed_codes import check_packed, pack_rows, packed_row_bytes, stored_n_features, unpack_columns
from ...coding.packed_codes import used_bytes as packed_used_bytes
from ...coding.product_quantizer import ProductQuantizer, RowCodecError, to_float16
from ...coding.scalar_quantizer import check_steps, dequantize_columns, dequantize_rows, quantize_rows, row_bytes
from ...errors import ClassifyImagesError
from ...files import load_npy_checked, load_npz_checked, open_regular_file

__all__ = [
    "RowCodec",
    "RowCodecError",
    "register_row_codec",
    "row_codec",
    "row_codec_names",
    "codec_of_format",
    "codec_for_rows",
    "shard_formats",
    "state_files",
    "npy_bytes",
    "npz_bytes",
    "as_dense",
]

#: The fixed date of the ``.npz`` members (the earliest a zip file can hold): the bytes of
#: a shard depend on its rows only.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_CSR_KEYS = ("data", "indices", "indptr", "shape")


class StoredFormError(ClassifyImagesError, ValueError):
    """A shard's stored array is not what its codec writes (the shard store names the file).

    The message follows the file's name: ``"<name> is float64 (3, 4), expected ..."``, or, with
    ``joiner=": "``, ``"<name>: <what the codec found>"``."""

    def __init__(self, message: str, joiner: str = " ") -> None:
        super().__init__(message)
        self.joiner = joiner


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An uncompressed ``.npz`` whose bytes depend on ``arrays`` only (fixed member dates)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for key, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE), member.getvalue())
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    """The ``.npy`` bytes of one array (no pickle)."""
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def as_dense(block: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """A block as a float32 ndarray; a CSR block's stored entries are copied as they are
    (``scipy``'s ``toarray`` adds them to zeros, which turns ``-0.0`` into ``0.0``)."""
    if not sp.issparse(block):
        return np.asarray(block)
    dense = np.zeros(block.shape, dtype=np.float32)
    dense[np.repeat(np.arange(block.shape[0]), np.diff(block.indptr)), block.indices] = block.data
    return dense


class RowCodec:
    """Base class of the row codecs: dense rows stored as one ``.npy`` array per shard.

    A subclass sets :attr:`name` and :attr:`format` and implements :meth:`encode`,
    :meth:`stored_form` and :meth:`decode`; one with a learnt state also sets
    :attr:`state_file` and implements :meth:`fit`, :meth:`state_to_array` and
    :meth:`state_from_array`.
    """

    #: Registry key: the ``--rows`` value and the manifest's ``store.rows``.
    name: ClassVar[str]
    #: The shard format it writes (the manifest's ``store.format``; codecs may share one).
    format: ClassVar[str]
    #: File suffix of its shards.
    suffix: ClassVar[str] = "npy"
    #: Stores sparse rows (chosen by the encoder's ``sparse_rows``, not by ``--rows``).
    sparse: ClassVar[bool] = False
    #: File stem of the learnt state beside the shards (None: nothing is learnt).
    state_file: ClassVar[str | None] = None
    #: Valid stored values decode to finite rows, so a reader checks them without decoding.
    checked_without_decoding: ClassVar[bool] = False
    #: Also stored in the ``npy`` layout's whole-split row files (their dtype: :meth:`stored_form`).
    in_npy_store: ClassVar[bool] = False
    #: Its rows lose nothing that matters when a reader holds them decoded in float16 (float16
    #: itself; codes of 8 bits or fewer, whose error is at least 16 times float16's rounding).
    float16_holds_rows: ClassVar[bool] = False
    #: A stored row uses a prefix of its slot (:meth:`used_bytes`); the ``npy`` layout writes that
    #: prefix only and leaves the rest of the file unallocated.
    writes_prefix: ClassVar[bool] = False
    #: The codec of an earlier stored form of the same rows, read where a feature set has it.
    earlier: ClassVar[RowCodec | None] = None

    @property
    def compressed(self) -> bool:
        """Whether the rows are stored other than as float32 (only the sharded store can)."""
        return self.name != "float32"

    # ------------------------------------------------------------- state
    def fit(self, sample: np.ndarray) -> Any:
        """The state learnt from a sample of finite training rows ``(n, d)`` (codecs with :attr:`state_file`)."""
        return None

    def state_to_array(self, state: Any) -> np.ndarray:
        """The state as one array (stored as ``<state_file>.npy``)."""
        raise NotImplementedError

    def state_from_array(self, array: np.ndarray, n_features: int) -> Any:
        """The state back from its array, checked (:class:`RowCodecError`, one line)."""
        raise NotImplementedError

    def state_entry(self, state: Any) -> dict[str, Any]:
        """Keys of the manifest's ``store.codebooks`` entry beside ``file`` and ``sha1``."""
        return {}

    # ------------------------------------------------------- encode, decode
    def encode(self, rows: np.ndarray, state: Any) -> np.ndarray:
        """The stored array of a float32 block ``(n, d)``."""
        raise NotImplementedError

    def stored_form(self, n_features: int, state: Any) -> tuple[np.dtype, int]:
        """``(dtype, columns)`` of the stored array of rows of ``n_features``."""
        raise NotImplementedError

    def decode(self, stored: np.ndarray, state: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Float32 rows of a stored array (into ``out``, C-contiguous float32, when given)."""
        raise NotImplementedError

    def check_stored(self, stored: np.ndarray, state: Any) -> np.ndarray:
        """The stored array, if its values are valid (codecs with :attr:`checked_without_decoding`)."""
        return stored

    def bytes_per_row(self, n_features: int) -> int:
        """Bytes one dense row of ``n_features`` takes stored (before any state is learnt)."""
        dtype, width = self.stored_form(n_features, None)
        return int(np.dtype(dtype).itemsize * width)

    # ---------------------------------------------------------- shard bytes
    def payload(self, rows: np.ndarray, state: Any) -> tuple[bytes, int]:
        """The bytes of a shard of float32 ``rows`` and its ``nnz`` (non-zeros of ``rows``)."""
        return npy_bytes(self.encode(rows, state)), int(np.count_nonzero(rows))

    def read(
        self,
        path: os.PathLike,
        n_rows: int,
        n_features: int,
        state: Any,
        *,
        out: np.ndarray | None = None,
        decode: bool = True,
    ) -> np.ndarray | sp.csr_matrix:
        """A shard's rows (``decode=False``: the checked stored array).

        Raises
        ------
        StoredFormError
            Stored array of another dtype or shape, or invalid values.
        OSError, ValueError
            Unreadable file (the shard store words it).
        """
        with open_regular_file(path) as handle:
            stored = load_npy_checked(handle, os.fstat(handle.fileno()).st_size, mmap=True)
        dtype, width = self.stored_form(n_features, state)
        if stored.dtype != dtype or stored.shape != (n_rows, width):
            raise StoredFormError(f"is {stored.dtype} {stored.shape}, expected {np.dtype(dtype)} ({n_rows}, {width})")
        try:
            return self.decode(stored, state, out=out) if decode else self.check_stored(stored, state)
        except RowCodecError as exc:
            raise StoredFormError(str(exc), joiner=": ") from None

    def stack(self, pieces: list) -> np.ndarray | sp.csr_matrix:
        """Decoded blocks (or slices of them) stacked into one block."""
        return np.concatenate(pieces) if len(pieces) > 1 else np.asarray(pieces[0])

    @property
    def decodes(self) -> bool:
        """Whether reading makes new float32 rows (so a reader can give an ``out`` to decode into)."""
        return True


class Float32Rows(RowCodec):
    """Rows as computed: one float32 ``.npy`` per shard, memory-mapped on reading."""

    name, format = "float32", "dense"
    in_npy_store = True

    def encode(self, rows, state):
        return rows

    def stored_form(self, n_features, state):
        return np.dtype(np.float32), n_features

    def decode(self, stored, state, out=None):
        if out is None:
            return stored
        np.copyto(out, stored)
        return out

    @property
    def decodes(self) -> bool:
        return False


class CsrRows(RowCodec):
    """Sparse rows: an uncompressed ``.npz`` of the CSR components ``data`` float32, ``indices``
    int32, ``indptr`` int64 and ``shape`` (these dtypes whatever scipy chose, so that the bytes
    do not depend on its version); every value is kept bit for bit (``-0.0`` stored too)."""

    name, format, suffix, sparse = "csr", "csr", "npz", True

    @staticmethod
    def _csr_of(rows: np.ndarray) -> sp.csr_matrix:
        """CSR of a float32 block keeping every entry that is not +0.0 (``-0.0`` included)."""
        stored = (rows != 0) | np.signbit(rows)
        indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(stored.sum(axis=1), out=indptr[1:])
        row_index, col_index = np.nonzero(stored)
        return sp.csr_matrix((rows[row_index, col_index], col_index, indptr), shape=rows.shape)

    def payload(self, rows, state):
        matrix = self._csr_of(rows)
        arrays = {
            "data": matrix.data.astype(np.float32),
            "indices": matrix.indices.astype(np.int32),
            "indptr": matrix.indptr.astype(np.int64),
            "shape": np.asarray(rows.shape, dtype=np.int64),
        }
        return npz_bytes(arrays), int(matrix.nnz)

    def read(self, path, n_rows, n_features, state, *, out=None, decode=True):
        archive = load_npz_checked(path)
        if sorted(archive) != sorted(_CSR_KEYS):
            raise StoredFormError(f"holds {sorted(archive)}, not the CSR components")
        data, indices, indptr, shape = (archive[key] for key in _CSR_KEYS)
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
            raise StoredFormError(f"is not a valid float32 CSR matrix of shape ({n_rows}, {n_features})")
        return sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_features))

    def stack(self, pieces):
        return sp.vstack(pieces, format="csr", dtype=np.float32) if len(pieces) > 1 else pieces[0].tocsr()

    @property
    def decodes(self) -> bool:
        return False


class Float16Rows(RowCodec):
    """Rows in IEEE half precision (half the bytes; values beyond ±65504 are refused)."""

    name, format = "float16", "float16"
    in_npy_store, float16_holds_rows = True, True

    def encode(self, rows, state):
        return to_float16(rows)

    def stored_form(self, n_features, state):
        return np.dtype(np.float16), n_features

    def decode(self, stored, state, out=None):
        if out is None:
            return stored.astype(np.float32)
        np.copyto(out, stored)
        return out


class ScalarQuantizedRows(RowCodec):
    """Rows as signed integers of :attr:`bits` bits with one float32 step per 4 096 values
    (:mod:`~classify_images.coding.scalar_quantizer`): no learnt state, stored in either layout."""

    in_npy_store, checked_without_decoding, float16_holds_rows = True, True, True
    bits: ClassVar[int]

    def encode(self, rows, state):
        return quantize_rows(rows, self.bits)

    def stored_form(self, n_features, state):
        return np.dtype(np.uint8), row_bytes(n_features, self.bits)

    def decode(self, stored, state, out=None):
        return dequantize_rows(stored, self.bits, out=out)

    def decode_columns(self, stored, rows, start: int, stop: int, n_features: int, out=None):
        """Values ``start:stop`` of the stored rows ``rows`` (float32), reading only their codes and steps."""
        return dequantize_columns(stored, self.bits, rows, start, stop, n_features, out=out)

    def check_stored(self, stored, state):
        return check_steps(stored, self.bits)


class ByteInt8Rows(ScalarQuantizedRows):
    """8-bit codes, one byte a value: how ``int8`` rows were stored before they were packed
    (read where a feature set holds them; not registered, so never written)."""

    name, format, bits = "int8", "int8", 8


class Int8Rows(ScalarQuantizedRows):
    """8-bit codes packed by blocks of 64 values in the bits each block needs
    (:mod:`~classify_images.coding.packed_codes`): the values of one-byte codes, bit for bit, in
    the bytes they need (a Fisher vector's: about 4.7 bits a value on 15-Scenes)."""

    name, format, bits = "int8", "int8-packed", 8
    writes_prefix = True
    earlier = ByteInt8Rows()

    def encode(self, rows, state):
        return pack_rows(rows)

    def stored_form(self, n_features, state):
        return np.dtype(np.uint8), packed_row_bytes(n_features)

    def decode(self, stored, state, out=None):
        n_features = stored_n_features(stored) if out is None else out.shape[1]
        return unpack_columns(stored, None, 0, n_features, n_features, out=out)

    def decode_columns(self, stored, rows, start: int, stop: int, n_features: int, out=None):
        return unpack_columns(stored, rows, start, stop, n_features, out=out)

    def check_stored(self, stored, state):
        return check_packed(stored, stored_n_features(stored))

    def used_bytes(self, stored: np.ndarray, n_features: int) -> np.ndarray:
        """Bytes each stored row uses from the start of its slot."""
        return packed_used_bytes(stored, n_features)


class Int4Rows(ScalarQuantizedRows):
    name, format, bits = "int4", "int4", 4


class ProductQuantizedRows(RowCodec):
    """Product-quantised rows, ``sub_dim`` dimensions a byte
    (:class:`~classify_images.coding.product_quantizer.ProductQuantizer`; its codebooks are the state)."""

    format, state_file, checked_without_decoding = "pq", "pq_codebooks", True
    sub_dim: ClassVar[int]

    def fit(self, sample):
        return ProductQuantizer(self.sub_dim).fit(sample)

    def bytes_per_row(self, n_features):
        return -(-n_features // self.sub_dim)  # one byte per sub-vector

    def state_to_array(self, state):
        return state.codebooks_

    def state_from_array(self, array, n_features):
        quantizer = ProductQuantizer.from_codebooks(array, n_features)
        if quantizer.sub_dim != self.sub_dim:
            raise RowCodecError(f"sub-vectors of {quantizer.sub_dim} dimensions, but store.rows says {self.name}")
        return quantizer

    def state_entry(self, state):
        return {"sub_dim": state.sub_dim, "n_centroids": int(state.codebooks_.shape[1])}

    def encode(self, rows, state):
        return state.encode(rows)

    def stored_form(self, n_features, state):
        return np.dtype(np.uint8), state.codebooks_.shape[0]

    def decode(self, stored, state, out=None):
        return state.decode(stored, out=out)

    def check_stored(self, stored, state):
        return state.check_codes(stored)


class ProductQuantized8(ProductQuantizedRows):
    name, sub_dim = "pq8", 8


class ProductQuantized16(ProductQuantizedRows):
    name, sub_dim = "pq16", 16


_REGISTERED: dict[str, RowCodec] = {}


def register_row_codec(cls: type[RowCodec]) -> type[RowCodec]:
    """Add a row codec class under ``cls.name`` (usable as a decorator).

    Raises
    ------
    ValueError
        The name is taken by another class, or the format by a codec of another kind.
    """
    taken = _REGISTERED.get(cls.name)
    if taken is not None and type(taken) is not cls:
        raise ValueError(f"row codec {cls.name!r} is taken by {type(taken).__name__}")
    for other in _REGISTERED.values():
        if (
            other.format == cls.format
            and other.name != cls.name
            and (other.suffix, other.sparse)
            != (
                cls.suffix,
                cls.sparse,
            )
        ):
            raise ValueError(f"shard format {cls.format!r} is written by {type(other).__name__} with another layout")
    _REGISTERED[cls.name] = cls()
    return cls


for _cls in (Float32Rows, CsrRows, Float16Rows, Int8Rows, Int4Rows, ProductQuantized8, ProductQuantized16):
    register_row_codec(_cls)


def row_codec_names(*, sparse: bool = False) -> tuple[str, ...]:
    """The names of the registered codecs of dense rows (the ``--rows`` values), or of sparse rows."""
    return tuple(name for name, codec in _REGISTERED.items() if codec.sparse == sparse)


def row_codec(name: str) -> RowCodec:
    """The codec called ``name`` (``--rows``, ``store.rows``).

    Raises
    ------
    RowCodecError
        No such codec of dense rows (one line naming the known ones).
    """
    codec = _REGISTERED.get(name)
    if codec is None or codec.sparse:
        raise RowCodecError(f"--rows must be one of {', '.join(row_codec_names())}, not {name!r}")
    return codec


def codec_of_format(fmt: str | RowCodec) -> RowCodec:
    """The first registered codec writing shard format ``fmt`` (a codec is returned as it is).

    Codecs sharing a format (``pq8``, ``pq16``) read the same way: their state says the rest."""
    if isinstance(fmt, RowCodec):
        return fmt
    for codec in _REGISTERED.values():
        if codec.format == fmt:
            return codec
    for codec in _REGISTERED.values():
        if codec.earlier is not None and codec.earlier.format == fmt:
            return codec.earlier
    raise ValueError(f"unknown shard format {fmt!r}; known formats: {', '.join(shard_formats())}")


def codec_for_rows(sparse_rows: bool, name: str = "float32") -> RowCodec:
    """The codec of a build: the sparse codec for rows sparse enough (an encoder's
    ``sparse_rows``: VQ histograms), else the codec ``name`` of dense rows (``--rows``).

    Raises
    ------
    RowCodecError
        Unknown ``name``, or a compressed codec of sparse rows (they are stored CSR, exactly).
    """
    codec = row_codec(name)
    if not sparse_rows:
        return codec
    if codec.compressed:
        raise RowCodecError(
            f"--rows {name} compresses dense rows (Fisher vectors, VLAD, sparse coding, LLC); "
            "this encoder's histograms are sparse and stored CSR: use --rows float32"
        )
    return _REGISTERED[row_codec_names(sparse=True)[0]]


def shard_formats() -> tuple[str, ...]:
    """Every shard format of the registered codecs, and of the earlier forms they read."""
    codecs = [*_REGISTERED.values(), *(c.earlier for c in _REGISTERED.values() if c.earlier is not None)]
    return tuple(dict.fromkeys(codec.format for codec in codecs))


def state_files() -> tuple[str, ...]:
    """The file stems of the registered codecs' learnt states."""
    return tuple(dict.fromkeys(c.state_file for c in _REGISTERED.values() if c.state_file is not None))
