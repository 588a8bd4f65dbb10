"""Image loading and preprocessing for dense SIFT.

The pipeline's first stage: read an image file, convert
it to grayscale, shrink it so that its longer side is at most ``max_side``
pixels, and return it as float32 in ``[0, 1]``.  Files that cannot be used
raise :class:`ImageReadError`, whose message is a short reason suitable for
the feature store's manifest of skipped files.

Decoding
    Files are read with :func:`numpy.fromfile` and decoded with
    :func:`cv2.imdecode` (so non-ASCII paths work on every platform) using
    the flag ``cv2.IMREAD_GRAYSCALE``: OpenCV converts colour images to
    luminance ``Y = 0.299 R + 0.587 G + 0.114 B`` (for JPEG it asks libjpeg
    for the Y channel directly, which is the same formula up to rounding),
    ignores any alpha channel and converts 16-bit images to 8 bits.

Broken files
    * zero-byte files -> ``"empty file"``;
    * files OpenCV cannot decode and whose first bytes are not a known image
      signature -> ``"not an image or unsupported format"``;
    * JPEG files without an end-of-image marker (``FF D9``) after their last
      start-of-scan marker, and PNG files without an ``IEND`` chunk, are
      rejected *before* decoding -> ``"truncated or corrupt image"``.  (libjpeg
      would otherwise decode a truncated JPEG partially, fill the rest with
      grey and print "Premature end of JPEG file" on stderr; checking the
      markers first avoids both the silent garbage and the warning.)  Other
      known formats that fail to decode get the same reason.

Missing files and directories are not "bad images": they raise the usual
``FileNotFoundError`` / ``IsADirectoryError``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from numbers import Integral

import cv2
import numpy as np

__all__ = [
    "IMPLEMENTATION_VERSION",
    "ImageReadError",
    "check_min_size",
    "decode_grayscale",
    "load_grayscale",
    "resize_max_side",
]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 1



class ImageReadError(ValueError):
    """An image file cannot be used; ``str(err)`` is a short reason.

    Parameters
    ----------
    reason : str
        Short human-readable reason, e.g. ``"empty file"``.
    path : str, optional
        The offending file, kept as the ``path`` attribute (not part of the
        message, so reasons can be counted / grouped).
    """

    def __init__(self, reason: str, path: str | os.PathLike | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = None if path is None else os.fspath(path)


# (signature, offset, name) of formats OpenCV usually decodes
_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\xff\xd8\xff", 0, "JPEG"),
    (b"\x89PNG\r\n\x1a\n", 0, "PNG"),
    (b"GIF87a", 0, "GIF"),
    (b"GIF89a", 0, "GIF"),
    (b"BM", 0, "BMP"),
    (b"II*\x00", 0, "TIFF"),
    (b"MM\x00*", 0, "TIFF"),
    (b"WEBP", 8, "WebP"),
    (b"\x00\x00\x00\x0cjP  ", 0, "JPEG 2000"),
)


def _sniff_format(head: bytes) -> str | None:
    """Name of the image format announced by the first bytes, or None."""
    for sig, off, name in _SIGNATURES:
        if head[off : off + len(sig)] == sig:
            return name
    if len(head) >= 2 and head[0:1] == b"P" and head[1:2] in b"123456":
        return "PNM"
    return None


def _jpeg_is_truncated(data: bytes) -> bool:
    """True if no end-of-image marker follows the last start-of-scan marker.

    Inside entropy-coded data every ``FF`` byte is stuffed (``FF 00``) or is a
    restart marker, so ``FF D9`` / ``FF DA`` only occur as real markers; an
    embedded EXIF thumbnail has its own markers but sits before the main
    image's scans.  Trailing bytes after the EOI marker are tolerated.
    """
    sos = data.rfind(b"\xff\xda")
    eoi = data.rfind(b"\xff\xd9")
    return sos < 0 or eoi < sos


def _png_is_truncated(data: bytes) -> bool:
    """True if the PNG stream has no ``IEND`` chunk."""
    return data.rfind(b"IEND") < 0


def resize_max_side(image: np.ndarray, max_side: int | None) -> np.ndarray:
    """Shrink ``image`` so that its longer side is ``max_side``; never enlarge.

    Uses ``cv2.INTER_AREA`` (pixel-area averaging).  The new size is
    ``round(side * max_side / longer_side)`` (at least 1 pixel), the longer
    side becoming exactly ``max_side``.  ``max_side=None`` or an image that
    already fits returns the input unchanged.
    """
    if max_side is None:
        return image
    h, w = image.shape[:2]
    longer = max(h, w)
    if longer <= max_side:
        return image
    scale = max_side / longer
    new_w = max_side if w >= h else max(1, int(math.floor(w * scale + 0.5)))
    new_h = max_side if h > w else max(1, int(math.floor(h * scale + 0.5)))
    return cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_AREA)


def validate_max_side(max_side: int | None) -> int | None:
    if max_side is None:
        return None
    if isinstance(max_side, bool) or not isinstance(max_side, (Integral, np.integer)) or max_side < 1:
        raise ValueError(f"max_side must be a positive integer or None, got {max_side!r}")
    return int(max_side)


def decode_grayscale(data: bytes | np.ndarray, max_side: int | None = 300) -> np.ndarray:
    """Decode an encoded image (file contents) as :func:`load_grayscale` does.

    Parameters
    ----------
    data : bytes or 1-D uint8 array
        The encoded file contents.
    max_side : int or None, default 300
        Maximum length of the longer side after resizing (None: keep size).

    Returns
    -------
    ndarray of float32, shape (H, W), C-contiguous, values in [0, 1]

    Raises
    ------
    ImageReadError
        Empty data, not an image, truncated or corrupt image.
    """
    max_side = validate_max_side(max_side)
    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else np.asarray(data, dtype=np.uint8).ravel()
    if buf.size == 0:
        raise ImageReadError("empty file")
    raw = buf.tobytes()
    kind = _sniff_format(raw[:16])
    if kind == "JPEG" and _jpeg_is_truncated(raw):
        raise ImageReadError("truncated or corrupt image (JPEG has no end-of-image marker)")
    if kind == "PNG" and _png_is_truncated(raw):
        raise ImageReadError("truncated or corrupt image (PNG has no IEND chunk)")
    img = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
    if img is None:
        if kind is None:
            raise ImageReadError("not an image or unsupported format")
        raise ImageReadError(f"truncated or corrupt image ({kind} could not be decoded)")
    if img.ndim != 2 or img.size == 0:
        raise ImageReadError("truncated or corrupt image (decoded to an empty array)")
    if img.dtype != np.uint8:  # IMREAD_GRAYSCALE gives 8 bits; be defensive
        img = cv2.normalize(img, None, 0, 255, cv2.NORM_MINMAX).astype(np.uint8)
    img = resize_max_side(img, max_side)
    out = img.astype(np.float32)
    out /= np.float32(255.0)
    return np.ascontiguousarray(out)


def load_grayscale(path: str | os.PathLike, max_side: int | None = 300) -> np.ndarray:
    """Read an image file as a grayscale float32 array in ``[0, 1]``.

    The image is decoded with ``cv2.imdecode(np.fromfile(path), IMREAD_GRAYSCALE)``
    (see the module docstring for the colour conversion), shrunk with
    ``cv2.INTER_AREA`` so that its longer side is at most ``max_side`` (never
    enlarged) and divided by 255 (no max-normalisation).

    Parameters
    ----------
    path : str or path-like
        Image file; any Unicode path.
    max_side : int or None, default 300
        Maximum length of the longer side (the ScSPM setting); None keeps the
        original size.

    Returns
    -------
    ndarray of float32, shape (H, W), C-contiguous, values in [0, 1]

    Raises
    ------
    ImageReadError
        ``"empty file"``, ``"not an image or unsupported format"``,
        ``"truncated or corrupt image (...)"``; the ``path`` attribute is set.
    FileNotFoundError, IsADirectoryError, PermissionError
        The path cannot be read at all.
    """
    data = np.fromfile(os.fspath(path), dtype=np.uint8)
    try:
        return decode_grayscale(data, max_side)
    except ImageReadError as err:
        raise ImageReadError(err.reason, path) from None


def check_min_size(image: np.ndarray, patch_size: int | Iterable[int], path: str | os.PathLike | None = None) -> None:
    """Raise :class:`ImageReadError` if ``image`` cannot hold the largest patch.

    Parameters
    ----------
    image : ndarray, shape (H, W)
        Preprocessed image.
    patch_size : int or iterable of int
        Patch width(s) in pixels; the largest one is checked.
    path : str, optional
        Recorded on the error.

    Raises
    ------
    ImageReadError
        ``"image smaller than one patch (WxH < P)"`` when ``W < P`` or ``H < P``.
    """
    sizes = [int(patch_size)] if isinstance(patch_size, (Integral, np.integer)) else [int(p) for p in patch_size]
    if not sizes:
        raise ValueError("patch_size must not be empty")
    p = max(sizes)
    h, w = image.shape[:2]
    if h < p or w < p:
        raise ImageReadError(f"image smaller than one patch ({w}x{h} < {p})", path)
