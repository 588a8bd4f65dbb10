"""Scalar quantisation of dense rows: 8 or 4 bits a value, one step per group of values.

A Fisher-vector row of 262 144 float32 takes 1 MB (512 KB in float16).  Stored as signed
integers of ``b`` bits with one float32 step per group of ``G =`` :data:`GROUP_VALUES`
consecutive values, it takes ``d b / 8 + 4 ceil(d / G)`` bytes: 262 400 bytes at 8 bits, 131 328 at
4 bits.  For the values ``x_1 … x_G`` of one group of a row

.. math::

    s = \\frac{\\max_i |x_i|}{2^{b-1} - 1}, \\qquad
    q_i = \\operatorname{round}(x_i / s) \\in \\{-(2^{b-1} - 1), \\dots, 2^{b-1} - 1\\}, \\qquad
    \\hat x_i = s\\, q_i,

so ``|x_i - \\hat x_i| <= s / 2`` (nothing is clipped; a group of zeros has ``s = 0`` and
decodes to zeros), and the error of an inner product ``\\hat x^T w`` is at most
``(s / 2) ||w||_1`` over the group.  Sánchez and Perronnin [1]_ compress such signatures for
linear-SVM training, product quantisation among their codes (:mod:`.product_quantizer`);
this is the plain uniform scalar quantiser, with one step per group of values instead of one
per row so that the spatial cells of a row (each L2-normalised on its own) do not share a step.
Deviations from a learnt quantiser: the step is the group's largest magnitude, so rows are
coded one at a time with no learnt state; 4-bit codes use 15 of the 16 levels (symmetric about
zero).  Measured accuracy: docs/light-pipeline.md.

Stored form of a row (``uint8``): the codes, then the ``ceil(d / G)`` steps as float32 bytes.
8 bits: one signed byte per value.  4 bits: two values a byte, value ``2 j`` in the low nibble
of byte ``j`` and value ``2 j + 1`` in its high nibble, each as ``q + 8`` (1 … 15); for an odd
``d`` the last high nibble is 0, which no value uses, so the stored row says its own length.

References
----------
.. [1] J. Sánchez and F. Perronnin, "High-dimensional signature compression for
   large-scale image classification", CVPR 2011.
"""

from __future__ import annotations

import numpy as np

from .product_quantizer import RowCodecError

__all__ = [
    "GROUP_VALUES",
    "SCALAR_BITS",
    "quantize_rows",
    "dequantize_rows",
    "dequantize_columns",
    "row_bytes",
    "check_steps",
]

#: Values sharing one step (a Fisher-vector cell of 32 768 values holds 8 groups).
GROUP_VALUES = 4096
#: The code widths offered.
SCALAR_BITS = (8, 4)
#: A 4-bit value is stored as ``q + _NIBBLE_ZERO``; the nibble 0 marks the padding of an odd row.
_NIBBLE_ZERO = 8


def _check_bits(bits: int) -> int:
    if bits not in SCALAR_BITS:
        raise ValueError(f"bits must be one of {SCALAR_BITS}, not {bits!r}")
    return bits


def _n_groups(n_features: int) -> int:
    return -(-n_features // GROUP_VALUES)


def _code_bytes(n_features: int, bits: int) -> int:
    return n_features if bits == 8 else -(-n_features // 2)


def row_bytes(n_features: int, bits: int) -> int:
    """Bytes of one stored row of ``n_features`` values: codes, then one float32 step per group."""
    return _code_bytes(n_features, _check_bits(bits)) + 4 * _n_groups(n_features)


def _layout(stored: np.ndarray, bits: int, n_features: int | None) -> tuple[int, int]:
    """``(n_features, code_bytes)`` of stored rows (``n_features`` read from their width when None)."""
    width = stored.shape[1]
    if n_features is None:
        low, high = 0, width * 8 // bits  # row_bytes grows with n_features: the largest n with row_bytes(n) <= width
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if row_bytes(middle, bits) <= width else (low, middle - 1)
        n_features = low
        if bits == 4 and len(stored) and n_features % 2 == 0 and n_features and not stored[0, n_features // 2 - 1] >> 4:
            n_features -= 1  # the padding nibble of an odd row
    if row_bytes(n_features, bits) != width:
        raise RowCodecError(f"stored rows of {width} bytes are not {bits}-bit rows of {n_features} values")
    return n_features, _code_bytes(n_features, bits)


def quantize_rows(rows: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """The stored form (``uint8``, ``(n, row_bytes(d, bits))``) of float rows ``(n, d)``.

    A group holding NaN or ±inf gets a NaN step, so its row decodes to NaN (and the reader's
    check of the steps, :func:`check_steps`, refuses it): the builder names such images."""
    _check_bits(bits)
    rows = np.asarray(rows, dtype=np.float32)
    n, d = rows.shape
    top = 2 ** (bits - 1) - 1
    groups = _n_groups(d)
    if d == groups * GROUP_VALUES:
        padded = np.ascontiguousarray(rows)  # no copy for whole groups (a Fisher vector's 64)
    else:
        padded = np.zeros((n, groups * GROUP_VALUES), dtype=np.float32)
        padded[:, :d] = rows
    grouped = padded.reshape(n, groups, GROUP_VALUES)
    with np.errstate(invalid="ignore"):  # a non-finite group: a NaN step, its codes 0
        steps = np.abs(grouped).max(axis=2) / np.float32(top)
        inverse = np.zeros_like(steps)
        np.divide(1.0, steps, out=inverse, where=steps > 0)
        codes = np.rint(grouped * inverse[:, :, None]).reshape(n, -1)[:, :d]
    np.nan_to_num(codes, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    np.clip(codes, -top, top, out=codes)
    code_bytes = _code_bytes(d, bits)
    if out is None:
        out = np.empty((n, row_bytes(d, bits)), dtype=np.uint8)
    if bits == 8:
        out[:, :code_bytes] = codes.astype(np.int8).view(np.uint8)
    else:
        nibbles = np.zeros((n, 2 * code_bytes), dtype=np.uint8)  # an odd row's padding nibble stays 0
        nibbles[:, :d] = (codes + _NIBBLE_ZERO).astype(np.uint8)
        out[:, :code_bytes] = nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)
    out[:, code_bytes:] = steps.astype(np.float32).view(np.uint8)
    return out


def _steps(stored: np.ndarray, code_bytes: int) -> np.ndarray:
    return np.ascontiguousarray(stored[:, code_bytes:]).view(np.float32)


def check_steps(stored: np.ndarray, bits: int, n_features: int | None = None) -> np.ndarray:
    """``stored`` if every step is finite and non-negative (so every row decodes to finite values).

    Raises
    ------
    RowCodecError
        One line: a step is negative, NaN or infinite, or the rows have another width.
    """
    n_features, code_bytes = _layout(stored, _check_bits(bits), n_features)
    steps = _steps(stored, code_bytes)  # 4 bytes per 4 096 values: a small copy
    if not (np.isfinite(steps).all() and (steps >= 0).all()):
        raise RowCodecError("holds NaN, infinite or negative quantisation steps")
    return stored


def dequantize_rows(
    stored: np.ndarray, bits: int, out: np.ndarray | None = None, n_features: int | None = None
) -> np.ndarray:
    """Float32 rows ``(n, d)`` of their stored form, into ``out`` (C-contiguous float32) when given."""
    if n_features is None and out is not None:
        n_features = out.shape[1]
    n_features, _ = _layout(stored, _check_bits(bits), n_features)
    return dequantize_columns(stored, bits, None, 0, n_features, n_features, out=out)


def dequantize_columns(
    stored: np.ndarray,
    bits: int,
    rows: np.ndarray,
    start: int,
    stop: int,
    n_features: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Values ``start:stop`` of the stored rows ``rows`` (an index array; None: every row),
    float32 ``(n, stop - start)`` (into ``out``, C-contiguous float32, when given): only their
    codes and the steps of their groups are read, so a memory-mapped ``stored`` is read a block
    of columns at a time.  :func:`dequantize_rows` is this for every column."""
    n_features, code_bytes = _layout(stored, _check_bits(bits), n_features)
    if not 0 <= start <= stop <= n_features:
        raise ValueError(f"columns {start}:{stop} are not within the {n_features} values of a row")
    rows = slice(None) if rows is None else np.asarray(rows, dtype=np.intp)
    if out is None:
        out = np.empty((len(stored[rows, :0]), stop - start), dtype=np.float32)
    if stop == start:
        return out
    if bits == 8:
        np.copyto(out, stored[rows, start:stop].view(np.int8), casting="unsafe")
    else:
        first, last = start // 2, (stop + 1) // 2  # the bytes holding values start … stop - 1
        packed = stored[rows, first:last]
        # value 2 j in the low nibble of byte j: written in place from an even start, else shifted by one
        values = out if start % 2 == 0 else np.empty((packed.shape[0], 2 * (last - first)), dtype=np.float32)
        width = values.shape[1]
        values[:, 0::2] = (packed & 0x0F)[:, : (width + 1) // 2]
        values[:, 1::2] = (packed >> 4)[:, : width // 2]
        if values is out:
            out -= _NIBBLE_ZERO
        else:
            np.subtract(values[:, 1 : 1 + stop - start], _NIBBLE_ZERO, out=out)
    first_group, last_group = start // GROUP_VALUES, (stop - 1) // GROUP_VALUES
    steps = np.ascontiguousarray(stored[rows, code_bytes + 4 * first_group : code_bytes + 4 * (last_group + 1)])
    steps = steps.view(np.float32)
    with np.errstate(invalid="ignore"):  # a NaN step (a non-finite row) decodes to NaN
        for group in range(first_group, last_group + 1):
            low = max(start, group * GROUP_VALUES) - start
            high = min(stop, (group + 1) * GROUP_VALUES) - start
            out[:, low:high] *= steps[:, group - first_group : group - first_group + 1]
    return out
