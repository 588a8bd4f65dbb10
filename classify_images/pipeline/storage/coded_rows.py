"""Memory-mapped rows stored coded (8- or 4-bit scalar codes), read and written as float32.

The ``npy`` layout keeps float32 and float16 rows as plain memory-mapped arrays.  Rows of a
codec whose stored row is not one float per value (``int8``, ``int4``:
:class:`~classify_images.pipeline.storage.row_codecs.ScalarQuantizedRows`) are wrapped in a
:class:`CodedRows`, which behaves as the ``(n, d)`` float32 array for what the readers and the
builder do with rows: slices stay lazy (nothing is read until rows are taken), an index or an
index array decodes those rows, ``np.asarray`` decodes all of them, and assigning float rows
encodes them into the map.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CodedRows", "stored_array"]


class CodedRows:
    """``(n, n_features)`` float32 rows held coded in ``stored`` (a memory-mapped ``uint8`` array).

    Parameters
    ----------
    stored : ndarray of shape (n, row bytes)
        The stored form, one row per row (``codec.stored_form``).
    codec : RowCodec
        Encodes float32 rows into stored rows and decodes them back, without a learnt state.
    n_features : int
    """

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, stored: np.ndarray, codec: Any, n_features: int) -> None:
        self.stored, self.codec, self.n_features = stored, codec, int(n_features)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.stored.shape[0], self.n_features)

    def __len__(self) -> int:
        return self.stored.shape[0]

    def _decode(self, stored: np.ndarray) -> np.ndarray:
        out = np.empty((stored.shape[0], self.n_features), dtype=np.float32)
        return self.codec.decode(stored, None, out=out)

    def __getitem__(self, key):
        if isinstance(key, tuple):  # rows, then columns of the decoded rows
            return np.asarray(self[key[0]])[(Ellipsis, *key[1:])]
        if isinstance(key, slice):
            return CodedRows(self.stored[key], self.codec, self.n_features)
        if isinstance(key, (int, np.integer)):
            return self._decode(self.stored[key][None])[0]
        return self._decode(self.stored[np.asarray(key)])

    def __setitem__(self, key, rows) -> None:
        rows = np.asarray(rows, dtype=np.float32)
        encoded = self.codec.encode(rows.reshape(-1, self.n_features), None)
        self.stored[key] = encoded[0] if rows.ndim == 1 else encoded

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        rows = self._decode(self.stored)
        return rows if dtype is None else rows.astype(dtype, copy=False)

    def flush(self) -> None:
        """Write the stored rows' dirty pages to their file."""
        if isinstance(self.stored, np.memmap):
            self.stored.flush()


def stored_array(rows) -> Any:
    """The array holding ``rows`` as stored: the coded array of a :class:`CodedRows`, else ``rows``."""
    return rows.stored if isinstance(rows, CodedRows) else rows
