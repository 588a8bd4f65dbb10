"""Image loading and preprocessing for dense SIFT.

The pipeline's first stage: read an image file, convert
it to grayscale (or, for the colour descriptors, keep its R, G, B channels:
:func:`load_colour`), shrink it so that its longer side is at most ``max_side``
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

Decompression bombs
    A small file can announce a huge image (a 2.6 MB PNG of 30 000 × 30 000 pixels
    decodes to 900 MB).  :func:`image_size` reads the width and height from the header
    with Pillow (``Image.open(...).size`` parses the header only; PNG, JPEG, GIF, BMP,
    TIFF/BigTIFF, WebP, PNM, JPEG 2000, Sun raster, AVIF, ...), and
    :func:`decode_grayscale` refuses an image above ``max_pixels`` before decoding it ->
    ``"image too large (W x H pixels > cap)"``.  While a cap applies, nothing whose size
    cannot be read is decoded: formats OpenCV decodes but Pillow cannot size (PAM, PFM,
    Radiance HDR, OpenEXR) -> ``"cannot read the image size from the header (format not
    supported for the size check: ...)"``; a known format whose header Pillow cannot parse
    -> ``"truncated or corrupt image (... header could not be read)"``.  (OpenCV's own
    ``OPENCV_IO_MAX_IMAGE_PIXELS`` is read once per process, at the first decode, so it
    cannot carry a per-call cap.)  (Decoding large JPEGs reduced,
    ``IMREAD_REDUCED_GRAYSCALE_*``, would change the numbers — libjpeg's scaled IDCT is
    not ``INTER_AREA`` — so it is not done.)

Decoder warnings
    libjpeg accepts some damaged JPEG streams with a warning on stderr ("Corrupt JPEG
    data: …") and decodes what it can.  The warning is captured instead of leaking to
    the terminal (also under ``-q``) and returned by :func:`decode_grayscale_checked`, so
    the pipeline can list the file.

One read
    :func:`load_grayscale` with ``sha1=`` checks that the bytes it decodes are the bytes
    the caller fingerprinted (one read, hashed and decoded from the same buffer): a file
    that changed since -> ``"file changed while the build was reading it"``.

Missing files and directories are not "bad images": they raise the usual
``FileNotFoundError`` / ``IsADirectoryError``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import math
import os
import tempfile
import threading
import warnings as _warnings
from collections.abc import Iterable
from numbers import Integral
from typing import Any

#: OpenCV's own ceiling on decoded pixels, read once per process at its first decode: the
#: highest ``image.max_pixels`` the configuration accepts (set here, before OpenCV is
#: imported by this module, unless the user's environment sets it).
OPENCV_MAX_PIXELS = 2**30
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(OPENCV_MAX_PIXELS))

import cv2  # noqa: E402 - after OPENCV_IO_MAX_IMAGE_PIXELS
import numpy as np  # noqa: E402

from ..errors import ClassifyImagesError  # noqa: E402
from ..files import FileTooLargeError, NotRegularFileError, read_regular_bytes  # noqa: E402

__all__ = [
    "IMPLEMENTATION_VERSION",
    "ImageReadError",
    "DEFAULT_MAX_PIXELS",
    "check_min_size",
    "decode_grayscale",
    "decode_grayscale_checked",
    "image_size",
    "load_bgr",
    "load_colour",
    "decode_colour_checked",
    "load_grayscale",
    "max_file_bytes",
    "resize_max_side",
]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.
IMPLEMENTATION_VERSION = 1

#: Default cap on width × height of an image to decode (a 100-megapixel grayscale image is
#: 100 MB in memory, per worker).
DEFAULT_MAX_PIXELS = 100_000_000


class ImageReadError(ClassifyImagesError, ValueError):
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
    (b"\xff\x4f\xff\x51", 0, "JPEG 2000"),
    (b"\x59\xa6\x6a\x95", 0, "Sun raster"),
    (b"ftypavi", 4, "AVIF"),
    (b"P7", 0, "PAM"),
    (b"PF", 0, "PFM"),
    (b"Pf", 0, "PFM"),
    (b"#?RADIANCE", 0, "Radiance HDR"),
    (b"#?RGBE", 0, "Radiance HDR"),
    (b"v/1\x01", 0, "OpenEXR"),
)

#: Formats OpenCV decodes whose size Pillow cannot read: refused while a pixel cap applies.
_UNSIZED_FORMATS = frozenset({"PAM", "PFM", "Radiance HDR", "OpenEXR"})


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


#: Pillow's own decompression-bomb limit is a module global: it is lifted only while this
#: module reads a header (our ``max_pixels`` is the check), one reader at a time.
_PILLOW_LOCK = threading.Lock()


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) announced by an image file's header, read without decoding it.

    Read by Pillow (``PIL.Image.open(...).size`` parses the header only): PNG, JPEG, GIF,
    BMP, TIFF and BigTIFF, WebP, PNM, JPEG 2000, Sun raster, AVIF and the other formats
    Pillow identifies.  Pillow's own decompression-bomb limit is lifted for the read (the
    caller compares the size with its own cap), and its warnings are not shown.  None when
    Pillow does not identify the format or cannot read the header.
    """
    from PIL import Image  # imported on first use: commands that decode no image skip it

    with _PILLOW_LOCK, _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
        except Exception:
            return None
        finally:
            Image.MAX_IMAGE_PIXELS = saved
    return int(width), int(height)


def _webp_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) a WebP file's first chunk announces, read from its bytes (Pillow opens a
    WebP with libwebp's demuxer, which refuses a file whose frames do not fit the canvas it
    announces — so a 16383² canvas with no image data reads as "corrupt" there, not "too large").

    The layouts (Google, "WebP Container Specification"): ``VP8X`` (extended) holds the canvas
    width and height minus one as 24-bit little-endian integers at bytes 24 and 27; ``VP8L``
    (lossless) their 14-bit values minus one after its 0x2F signature byte at 20; ``VP8 ``
    (lossy) 14-bit values at bytes 26 and 28, after the start code ``9D 01 2A``.
    """
    if len(data) < 30 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return None
    chunk = data[12:16]
    if chunk == b"VP8X":
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    return None


#: Pillow modes of single-channel images (a palette image, ``P``, may hold colours: not counted).
GREY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F", "La"})


def is_grey_file(path: str | os.PathLike) -> bool:
    """Whether an image file is stored as one grey channel (its Pillow mode, read from the header
    without decoding; False when Pillow cannot read the header)."""
    from PIL import Image

    with _PILLOW_LOCK, _warnings.catch_warnings():
        _warnings.simplefilter("ignore")
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            with Image.open(path) as image:
                return image.mode in GREY_MODES
        except Exception:
            return False
        finally:
            Image.MAX_IMAGE_PIXELS = saved


def _check_pixels(data: bytes, max_pixels: int | None, kind: str | None) -> None:
    """Refuse, before decoding, an image above ``max_pixels`` or whose size cannot be read."""
    if max_pixels is None:
        return
    size = image_size(data)
    if size is None and kind == "WebP":
        size = _webp_size(bytes(data[:30]))
        if size is not None and size[0] * size[1] <= max_pixels:
            size = None  # (within the cap: the file is what Pillow could not read, corrupt)
    if size is None:
        # nothing is decoded unless its size is known: OpenCV would allocate what the header says
        if kind is None:
            raise ImageReadError("not an image or unsupported format")
        if kind in _UNSIZED_FORMATS:
            raise ImageReadError(
                f"cannot read the image size from the header (format not supported for the size check: {kind})"
            )
        raise ImageReadError(f"truncated or corrupt image ({kind} header could not be read)")
    if size[0] * size[1] > max_pixels:
        raise ImageReadError(
            f"image too large ({size[0]} x {size[1]} pixels > image.max_pixels = {max_pixels}); "
            "raise image.max_pixels to read it"
        )


#: File descriptor 2 is one per process: decoders whose warnings are captured take turns.
_STDERR_LOCK = threading.Lock()
_STDERR_SINK: dict[int, Any] = {}  # process id → the temporary file standing in for its stderr


@contextlib.contextmanager
def _captured_stderr() -> Iterable[list[str]]:
    """Route the process's file descriptor 2 to a temporary file; yield the lines it got
    (filled when the block ends)."""
    messages: list[str] = []
    with _STDERR_LOCK:
        if os.getpid() not in _STDERR_SINK:  # a forked child gets its own file
            _STDERR_SINK.clear()
            _STDERR_SINK[os.getpid()] = tempfile.TemporaryFile()
        sink = _STDERR_SINK[os.getpid()]
        sink.seek(0)
        sink.truncate()
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            yield messages
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode("utf-8", "replace")
    messages.extend(line.strip() for line in text.splitlines() if line.strip())


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


def decode_grayscale(
    data: bytes | np.ndarray, max_side: int | None = 300, *, max_pixels: int | None = None
) -> np.ndarray:
    """Decode an encoded image (file contents) as :func:`load_grayscale` does.

    Parameters
    ----------
    data : bytes or 1-D uint8 array
        The encoded file contents.
    max_side : int or None, default 300
        Maximum length of the longer side after resizing (None: keep size).
    max_pixels : int or None
        Refuse, before decoding, an image whose header announces more pixels (None: no cap).

    Returns
    -------
    ndarray of float32, shape (H, W), C-contiguous, values in [0, 1]

    Raises
    ------
    ImageReadError
        Empty data, not an image, truncated or corrupt image, too large.
    """
    return decode_grayscale_checked(data, max_side, max_pixels=max_pixels)[0]


def decode_grayscale_checked(
    data: bytes | np.ndarray, max_side: int | None = 300, *, max_pixels: int | None = None
) -> tuple[np.ndarray, list[str]]:
    """:func:`decode_grayscale`, and the warnings the decoder printed (captured, not shown)."""
    return _decode_checked(data, max_side, max_pixels, colour=False)


def decode_colour_checked(
    data: bytes | np.ndarray, max_side: int | None = 300, *, max_pixels: int | None = None
) -> tuple[np.ndarray, list[str]]:
    """:func:`decode_grayscale_checked` in colour: float32 ``(H, W, 3)`` in R, G, B order, values
    in [0, 1] (``cv2.IMREAD_COLOR``: a grey file gives three equal channels, alpha is ignored,
    16-bit images are converted to 8 bits), shrunk by the same rule and refused by the same
    checks (pixel cap, truncation) as the grey path."""
    return _decode_checked(data, max_side, max_pixels, colour=True)


def _decode_checked(
    data: bytes | np.ndarray, max_side: int | None, max_pixels: int | None, *, colour: bool
) -> tuple[np.ndarray, list[str]]:
    max_side = validate_max_side(max_side)
    img, warnings = _decode(data, cv2.IMREAD_COLOR if colour else cv2.IMREAD_GRAYSCALE, max_pixels)
    if img.ndim != (3 if colour else 2):
        raise ImageReadError("truncated or corrupt image (decoded to an empty array)")
    if img.dtype != np.uint8:  # both flags give 8 bits; be defensive
        img = cv2.normalize(img, None, 0, 255, cv2.NORM_MINMAX).astype(np.uint8)
    img = resize_max_side(img, max_side)
    if colour:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    out = img.astype(np.float32)
    out /= np.float32(255.0)
    return np.ascontiguousarray(out), warnings


def _decode(data: bytes | np.ndarray, flag: int, max_pixels: int | None) -> tuple[np.ndarray, list[str]]:
    """``cv2.imdecode(data, flag)`` after the checks (truncation, pixel guard), and the
    decoder's captured warnings."""
    buf = (
        np.frombuffer(data, dtype=np.uint8)
        if isinstance(data, (bytes, bytearray))
        else np.asarray(data, dtype=np.uint8).ravel()
    )
    if buf.size == 0:
        raise ImageReadError("empty file")
    raw = buf.tobytes()
    kind = _sniff_format(raw[:16])
    if kind == "JPEG" and _jpeg_is_truncated(raw):
        raise ImageReadError("truncated or corrupt image (JPEG has no end-of-image marker)")
    if kind == "PNG" and _png_is_truncated(raw):
        raise ImageReadError("truncated or corrupt image (PNG has no IEND chunk)")
    _check_pixels(raw, max_pixels, kind)
    warnings: list[str] = []
    try:
        if kind == "JPEG":
            with _captured_stderr() as warnings:
                img = cv2.imdecode(buf, flag)
        else:
            img = cv2.imdecode(buf, flag)
    except cv2.error as exc:  # OpenCV's own limits (OPENCV_IO_MAX_IMAGE_PIXELS) or a decoder failure
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else "cv2.error"
        raise ImageReadError(f"truncated, corrupt or too large image (OpenCV: {reason})") from None
    if img is None:
        if kind is None:
            raise ImageReadError("not an image or unsupported format")
        raise ImageReadError(f"truncated or corrupt image ({kind} could not be decoded)")
    if img.size == 0:
        raise ImageReadError("truncated or corrupt image (decoded to an empty array)")
    return img, warnings


def max_file_bytes(max_pixels: int | None) -> int | None:
    """Largest image file read under a pixel cap: 8 bytes a pixel (16-bit RGBA, uncompressed)
    and 1 MiB of metadata; None without a cap.  A larger file is refused before it is read
    (a 2 GB sparse file named ``.jpg`` would otherwise be read whole)."""
    return None if max_pixels is None else 8 * int(max_pixels) + 2**20


def read_image_file(path: str | os.PathLike, max_pixels: int | None) -> bytes:
    """The bytes of an image file: a regular file (a FIFO or a device is refused without
    waiting or reading) no larger than :func:`max_file_bytes`.

    Raises
    ------
    ImageReadError
        Not a regular file, or too large (``path`` set).
    OSError
        Missing, a folder, permission denied.
    """
    try:
        return read_regular_bytes(path, max_bytes=max_file_bytes(max_pixels))
    except NotRegularFileError as exc:
        if exc.errno == errno.EISDIR:
            raise IsADirectoryError(errno.EISDIR, "is a folder", os.fspath(path)) from None
        raise ImageReadError(f"not a regular file ({exc.kind})", path) from None
    except FileTooLargeError:
        size = os.stat(path).st_size
        raise ImageReadError(
            f"file too large ({size} bytes > {max_file_bytes(max_pixels)} bytes read at most "
            f"under image.max_pixels = {max_pixels})",
            path,
        ) from None


def load_bgr(path: str | os.PathLike, *, max_pixels: int | None = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """An image file decoded in colour (BGR uint8, ``cv2.IMREAD_COLOR``) through the same checks as
    :func:`load_grayscale`: regular files only, size and pixel guard before decoding.

    Raises
    ------
    ImageReadError, OSError
        As :func:`load_grayscale`.
    """
    try:
        return _decode(read_image_file(path, max_pixels), cv2.IMREAD_COLOR, max_pixels)[0]
    except ImageReadError as err:
        raise ImageReadError(err.reason, path) from None


def load_grayscale(
    path: str | os.PathLike, max_side: int | None = 300, *, max_pixels: int | None = None, sha1: str | None = None
) -> np.ndarray:
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
    max_pixels : int or None
        Refuse an image whose header announces more pixels (None: no cap).
    sha1 : str or None
        The SHA-1 the caller fingerprinted the file with: the bytes read are checked
        against it, so what is decoded is what was fingerprinted.

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
    return load_grayscale_checked(path, max_side, max_pixels=max_pixels, sha1=sha1)[0]


def load_grayscale_checked(
    path: str | os.PathLike, max_side: int | None = 300, *, max_pixels: int | None = None, sha1: str | None = None
) -> tuple[np.ndarray, list[str]]:
    """:func:`load_grayscale`, and the decoder's warnings (:func:`decode_grayscale_checked`)."""
    return _load_checked(path, max_side, max_pixels, sha1, decode_grayscale_checked)


def load_colour(
    path: str | os.PathLike, max_side: int | None = 300, *, max_pixels: int | None = None, sha1: str | None = None
) -> np.ndarray:
    """:func:`load_grayscale` in colour: float32 ``(H, W, 3)``, R, G, B in [0, 1]
    (:func:`decode_colour_checked`); the same checks, errors and arguments."""
    return _load_checked(path, max_side, max_pixels, sha1, decode_colour_checked)[0]


def _load_checked(path, max_side, max_pixels, sha1, decode) -> tuple[np.ndarray, list[str]]:
    data = read_image_file(path, max_pixels)
    try:
        if sha1 is not None and hashlib.sha1(data).hexdigest() != sha1:
            raise ImageReadError(
                "file changed while the build was reading it (its bytes no longer match "
                "its fingerprint); re-run when it is stable"
            )
        return decode(data, max_side, max_pixels=max_pixels)
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
