"""8-bit scalar codes packed by blocks of 64 values, each block in the fewest bits its codes need.

The 8-bit codes of :mod:`.scalar_quantizer` spend a byte on every value, but a Fisher vector's
codes are mostly small: a Gaussian that no descriptor of a spatial cell reaches gives that
cell 2 x 64 zeros, and the others' values are mostly far below their group's largest (the
step is ``max |x| / 127``).  Packing each block of :data:`BLOCK_VALUES` consecutive codes
``q_1 … q_64`` in

.. math::

    w = \\begin{cases} 0 & m = 0 \\\\ \\lfloor \\log_2 m \\rfloor + 2 & m > 0 \\end{cases},
    \\qquad m = \\max_j |q_j|,

bits a value (``u_j = q_j + 2^{w-1} - 1 \\in [0, 2^w - 2]``) keeps every code: a row decodes
to exactly the values of its 8-bit codes (``s q_j`` in float32), so nothing about accuracy
changes, while the row shrinks to what its codes hold.  Measured: 4.7 bits a value on
15-Scenes Fisher vectors (21 % of the blocks all zero), about one bit on the simulated images
of ``scripts/benchmarks/simulate_scale.py`` (docs/light-pipeline.md).  This is frame-of-reference
bit packing (the integer-list compression of search engines, e.g. Lemire and Boytsov [1]_)
applied to the codes of one block.

A stored row is one slot of :func:`packed_row_bytes` bytes (room for every block at 8 bits),
filled from its start; the rest of the slot is never written, so a row file written slot by
slot without allocating it leaves the unused tails as holes and takes on disk what the rows
hold.  Slot (``uint8``, little-endian; ``G = ceil(d / 4096)`` step groups, ``B = ceil(d / 64)``
blocks):

* a uint32, ``d`` (the row says its own length);
* ``G`` float32: the steps of the groups (as in the 8-bit codes);
* ``G + 1`` uint32: the byte offset of each group's first block in the payload, and the
  payload's length (so a block of columns is found without reading the widths before it);
* then ``ceil(B / 2)`` bytes of widths, block ``k``'s in the low nibble of byte ``k // 2`` for
  even ``k``, the high nibble for odd ``k``; padded with zeros to a multiple of 8 bytes;
* then the payload: block after block, ``w`` little-endian uint64 holding ``u_j`` in bits
  ``j w … j w + w - 1`` (least significant first, a value crossing a word continues in the
  next); the last block of a row whose ``d`` is not a multiple of 64 has zeros beyond ``d``.

The bytes a row uses, :func:`used_bytes`, are the header and ``offsets[G]``.

References
----------
.. [1] D. Lemire and L. Boytsov, "Decoding billions of integers per second through
   vectorization", Software: Practice and Experience 45(1), 2015.
"""

from __future__ import annotations

import numpy as np
from numba import literal_unroll, njit

from .product_quantizer import RowCodecError
from .scalar_quantizer import GROUP_VALUES, quantize_rows, row_bytes

__all__ = [
    "BLOCK_VALUES",
    "packed_row_bytes",
    "pack_codes",
    "pack_rows",
    "used_bytes",
    "unpack_columns",
    "check_packed",
    "stored_n_features",
]

#: Values packed with one width (one Gaussian's 64 PCA dimensions in one cell of a Fisher vector).
BLOCK_VALUES = 64
_BLOCKS_PER_GROUP = GROUP_VALUES // BLOCK_VALUES


def _sizes(n_features: int) -> tuple[int, int, int]:
    """``(groups, blocks, payload start)`` of a row of ``n_features`` values."""
    groups = -(-n_features // GROUP_VALUES)
    blocks = -(-n_features // BLOCK_VALUES)
    header = _STEPS_AT + 4 * groups + 4 * (groups + 1) + (blocks + 1) // 2
    return groups, blocks, -(-header // 8) * 8


# Byte positions in a slot of ``G`` groups: the steps (after the length), the group offsets, the widths.
_STEPS_AT = 4


@njit(cache=True, nogil=True)
def _offsets_at(groups):  # pragma: no cover - compiled
    return _STEPS_AT + 4 * groups


@njit(cache=True, nogil=True)
def _widths_at(groups):  # pragma: no cover - compiled
    return _offsets_at(groups) + 4 * (groups + 1)


def packed_row_bytes(n_features: int) -> int:
    """Bytes of one slot: the header and room for every block at 8 bits (264 712 for 262 144 values)."""
    _, blocks, payload = _sizes(n_features)
    return payload + BLOCK_VALUES * blocks


@njit(cache=True, nogil=True, inline="always")
def _put_values(words, position, codes, low, count, width):  # pragma: no cover - compiled
    """Pack ``codes[low : low + count]`` at ``width`` bits into the words from ``position`` (called
    with a constant ``width`` and, for whole blocks, ``count``: the shifts are then constants)."""
    bias = (1 << (width - 1)) - 1
    for j in range(count):  # value j at bits j w … of the block's w words
        value = np.uint64(np.int64(codes[low + j]) + bias)
        bit = j * width
        word, shift = position + (bit >> 6), bit & 63
        words[word] |= value << np.uint64(shift)
        if shift + width > 64:
            words[word + 1] |= value >> np.uint64(64 - shift)


#: The widths of a block holding a value (0: all zero).
_WIDTHS = (2, 3, 4, 5, 6, 7, 8)


@njit(cache=True, nogil=True)
def _put_block(words, position, codes, low, count, width):  # pragma: no cover - compiled
    if count < BLOCK_VALUES:  # a row's last, partial block
        if width:
            _put_values(words, position, codes, low, count, width)
        return
    for constant in literal_unroll(_WIDTHS):  # one loop compiled per width, its shifts constants
        if width == constant:
            _put_values(words, position, codes, low, BLOCK_VALUES, constant)


@njit(cache=True, nogil=True)
def _pack(stored8, n_features, groups, blocks, payload, out):  # pragma: no cover - compiled
    widths_at = _widths_at(groups)
    for i in range(stored8.shape[0]):
        source = stored8[i]
        codes = source[:n_features].view(np.int8)
        row = out[i]
        row[:4].view(np.uint32)[0] = n_features
        row[_STEPS_AT : _STEPS_AT + 4 * groups] = source[n_features : n_features + 4 * groups]
        offsets = row[_offsets_at(groups) : widths_at].view(np.uint32)
        words = row[payload:].view(np.uint64)
        position = 0  # in words of the payload
        for block in range(blocks):
            if block % _BLOCKS_PER_GROUP == 0:
                offsets[block // _BLOCKS_PER_GROUP] = 8 * position
            low = block * BLOCK_VALUES
            count = min(BLOCK_VALUES, n_features - low)
            largest = np.int32(0)
            for j in range(low, low + count):
                largest = max(largest, abs(np.int32(codes[j])))
            width = 0
            if largest > 0:
                width = 2
                while (1 << (width - 1)) - 1 < largest:
                    width += 1
            row[widths_at + block // 2] |= width if block % 2 == 0 else width << 4
            _put_block(words, position, codes, low, count, width)
            position += width
        offsets[groups] = 8 * position


def pack_codes(stored8: np.ndarray, n_features: int) -> np.ndarray:
    """The packed slots (``uint8``, ``(n, packed_row_bytes(d))``) of rows stored as 8-bit codes
    (:func:`~classify_images.coding.scalar_quantizer.quantize_rows` with 8 bits); each slot's
    bytes beyond :func:`used_bytes` are zero."""
    stored8 = np.ascontiguousarray(stored8, dtype=np.uint8)
    if stored8.ndim != 2 or stored8.shape[1] != row_bytes(n_features, 8):
        raise RowCodecError(f"rows of {stored8.shape[-1]} bytes are not 8-bit rows of {n_features} values")
    groups, blocks, payload = _sizes(n_features)
    out = np.zeros((stored8.shape[0], packed_row_bytes(n_features)), dtype=np.uint8)
    _pack(stored8, n_features, groups, blocks, payload, out)
    return out


def pack_rows(rows: np.ndarray) -> np.ndarray:
    """The packed slots of float rows ``(n, d)``: their 8-bit codes (one step per 4 096 values), packed."""
    rows = np.asarray(rows, dtype=np.float32)
    return pack_codes(quantize_rows(rows, 8), rows.shape[1])


def _check_width(stored: np.ndarray, n_features: int) -> tuple[int, int, int]:
    sizes = _sizes(n_features)
    if stored.ndim != 2 or stored.shape[1] != packed_row_bytes(n_features):
        raise RowCodecError(f"stored rows of {stored.shape[-1]} bytes are not packed rows of {n_features} values")
    return sizes


def used_bytes(stored: np.ndarray, n_features: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Bytes each packed row uses from the start of its slot (int64; ``rows``: an index array, None: every row)."""
    groups, _, payload = _check_width(stored, n_features)
    at = _offsets_at(groups) + 4 * groups
    taken = stored[:, at : at + 4] if rows is None else stored[np.asarray(rows, dtype=np.intp), at : at + 4]
    return payload + np.ascontiguousarray(taken).view("<u4")[:, 0].astype(np.int64)


@njit(cache=True, nogil=True)
def _read_u32(row, at):  # pragma: no cover - compiled
    """The little-endian uint32 at byte ``at`` of ``row``, as int64."""
    return (
        np.int64(row[at]) | (np.int64(row[at + 1]) << 8) | (np.int64(row[at + 2]) << 16) | (np.int64(row[at + 3]) << 24)
    )


@njit(cache=True, nogil=True)
def _width(row, widths_at, block):  # pragma: no cover - compiled
    """Bits a value of ``block`` (its nibble among the widths starting at byte ``widths_at``)."""
    nibble = np.int64(row[widths_at + block // 2])
    return (nibble >> 4) if block % 2 else (nibble & 0x0F)


@njit(cache=True, nogil=True, inline="always")
def _codes_of_width(words, position, width, codes):  # pragma: no cover - compiled
    """The 64 codes of a block of ``width`` bits at word ``position`` (called with a constant
    ``width``: the loop's shifts and word indices are then constants)."""
    bias = (1 << (width - 1)) - 1
    mask = np.uint64((1 << width) - 1)
    for j in range(BLOCK_VALUES):
        bit = j * width
        word, shift = position + (bit >> 6), bit & 63
        value = words[word] >> np.uint64(shift)
        if shift + width > 64:  # a value crossing into the block's next word
            value |= words[word + 1] << np.uint64(64 - shift)
        codes[j] = np.float32(np.int64(value & mask) - bias)


@njit(cache=True, nogil=True)
def _block_codes(words, position, width, codes):  # pragma: no cover - compiled
    """The 64 codes (as float32) of the block of ``width`` bits at word ``position``."""
    if width == 0:
        codes[:] = 0.0
    for constant in literal_unroll(_WIDTHS):
        if width == constant:
            _codes_of_width(words, position, constant, codes)


@njit(cache=True, nogil=True)
def _unpack(stored, rows, steps, start, stop, groups, payload, out):  # pragma: no cover - compiled
    widths_at = _widths_at(groups)
    first_block = start // BLOCK_VALUES
    first_group = first_block // _BLOCKS_PER_GROUP
    codes = np.empty(BLOCK_VALUES, dtype=np.float32)
    for i in range(rows.shape[0]):
        row = stored[rows[i]]
        words = row[payload:].view(np.uint64)
        block = first_block
        group = block // _BLOCKS_PER_GROUP
        position = _read_u32(row, _offsets_at(groups) + 4 * group) // 8  # in words
        for skipped in range(group * _BLOCKS_PER_GROUP, block):  # the group's blocks before ``start``
            position += _width(row, widths_at, skipped)
        column = block * BLOCK_VALUES
        while column < stop:
            step = steps[i, block // _BLOCKS_PER_GROUP - first_group]
            width = _width(row, widths_at, block)
            _block_codes(words, position, width, codes)
            position += width
            low, high = max(column, start), min(column + BLOCK_VALUES, stop)
            for c in range(low, high):
                out[i, c - start] = codes[c - column] * step
            column += BLOCK_VALUES
            block += 1


def unpack_columns(
    stored: np.ndarray,
    rows: np.ndarray | None,
    start: int,
    stop: int,
    n_features: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Values ``start:stop`` of the packed rows ``rows`` (an index array; None: every row) as
    float32 ``(n, stop - start)`` (into ``out``, C-contiguous float32, when given): equal bit for
    bit to those of their 8-bit codes; only the header and the blocks of those columns are read."""
    groups, _, payload = _check_width(stored, n_features)
    if not 0 <= start <= stop <= n_features:
        raise ValueError(f"columns {start}:{stop} are not within the {n_features} values of a row")
    rows = np.arange(stored.shape[0]) if rows is None else np.asarray(rows, dtype=np.intp).reshape(-1)
    if out is None:
        out = np.empty((rows.size, stop - start), dtype=np.float32)
    if stop > start and rows.size:
        first, last = start // GROUP_VALUES, (stop - 1) // GROUP_VALUES  # the steps of these columns' groups
        steps = np.ascontiguousarray(stored[rows, _STEPS_AT + 4 * first : _STEPS_AT + 4 * (last + 1)]).view("<f4")
        _unpack(stored, rows.astype(np.int64), steps, start, stop, groups, payload, out)
    return out


@njit(cache=True, nogil=True)
def _first_bad(stored, n_features, groups, blocks):  # pragma: no cover - compiled
    """Index of the first row whose length is not ``n_features``, whose offsets disagree with its
    widths or whose widths are not 0 or 2 … 8 (-1: none)."""
    widths_at, offsets_at = _widths_at(groups), _offsets_at(groups)
    for i in range(stored.shape[0]):
        row = stored[i]
        if _read_u32(row, 0) != n_features:
            return i
        position = np.int64(0)
        for block in range(blocks):
            if (
                block % _BLOCKS_PER_GROUP == 0
                and _read_u32(row, offsets_at + 4 * (block // _BLOCKS_PER_GROUP)) != position
            ):
                return i
            width = _width(row, widths_at, block)
            if width == 1 or width > 8:
                return i
            position += 8 * width
        if _read_u32(row, offsets_at + 4 * groups) != position:
            return i
    return -1


def check_packed(stored: np.ndarray, n_features: int, *, structure: bool = True) -> np.ndarray:
    """``stored`` if every step is finite and non-negative and (``structure``) every row's widths
    and offsets agree (so every row decodes to finite values, within its slot).

    Raises
    ------
    RowCodecError
        One line: a step is negative, NaN or infinite, a row's header is inconsistent, or the
        rows have another width.
    """
    groups, blocks, _ = _check_width(stored, n_features)
    steps = np.ascontiguousarray(stored[:, _STEPS_AT : _STEPS_AT + 4 * groups]).view("<f4")
    if not (np.isfinite(steps).all() and (steps >= 0).all()):
        raise RowCodecError("holds NaN, infinite or negative quantisation steps")
    if structure and stored.shape[0]:
        bad = _first_bad(stored, n_features, groups, blocks)
        if bad >= 0:
            raise RowCodecError(
                f"holds a row whose header disagrees with itself or with {n_features} values (a damaged file)"
            )
    return stored


def stored_n_features(stored: np.ndarray) -> int:
    """The number of values of packed rows, read from the first row (with no row: the largest
    length whose slot has their width).

    Raises
    ------
    RowCodecError
        No row to read it from, or a first row that is not a packed row.
    """
    if stored.ndim != 2 or stored.shape[1] < 4:
        raise RowCodecError("holds no packed rows")
    if stored.shape[0] == 0:  # no row: the largest length with this slot width (lengths in one block share it)
        n_features = stored.shape[1] // BLOCK_VALUES * BLOCK_VALUES  # the payload alone is 64 bytes a block
        while n_features > 0 and packed_row_bytes(n_features) > stored.shape[1]:
            n_features -= BLOCK_VALUES
        if n_features <= 0 or packed_row_bytes(n_features) != stored.shape[1]:
            raise RowCodecError(f"stored rows of {stored.shape[1]} bytes are not packed rows")
        return n_features
    n_features = int(np.ascontiguousarray(stored[0, :4]).view("<u4")[0])
    if n_features == 0 or stored.shape[1] != packed_row_bytes(n_features):
        raise RowCodecError(f"stored rows of {stored.shape[1]} bytes are not packed rows")
    return n_features
