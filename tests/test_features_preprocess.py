"""Tests of classify_images.features.preprocess (loading and resizing images)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from classify_images.features import (
    ImageReadError,
    check_min_size,
    decode_grayscale,
    load_grayscale,
    preprocess,
    resize_max_side,
)
from classify_images.features.preprocess import DEFAULT_MAX_PIXELS

from .conftest import FIXTURE_PHOTO


def _write_png(path: Path, image: np.ndarray) -> Path:
    ok, buf = cv2.imencode(".png", image)
    assert ok
    buf.tofile(str(path))
    return path


# ---------------------------------------------------------------------------
# Bad files
# ---------------------------------------------------------------------------
def test_zero_byte_file(tmp_path):
    p = tmp_path / "empty.jpg"
    p.write_bytes(b"")
    with pytest.raises(ImageReadError, match="^empty file$") as info:
        load_grayscale(p)
    assert info.value.path == str(p)
    assert isinstance(info.value, ValueError)


def test_text_file_named_jpg(tmp_path):
    p = tmp_path / "notes.jpg"
    p.write_text("this is not an image\n" * 10)
    with pytest.raises(ImageReadError, match="not an image or unsupported format"):
        load_grayscale(p)


def test_truncated_jpeg(tmp_path, capfd):
    data = FIXTURE_PHOTO.read_bytes()
    p = tmp_path / "truncated.jpg"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError, match="truncated or corrupt image"):
        load_grayscale(p)
    # rejected before decoding: no libjpeg "Premature end of JPEG file" noise
    assert "Premature end" not in capfd.readouterr().err


def test_jpeg_with_trailing_bytes_is_fine(tmp_path):
    p = tmp_path / "trailing.jpg"
    p.write_bytes(FIXTURE_PHOTO.read_bytes() + b"\x00" * 16)
    img = load_grayscale(p)
    np.testing.assert_array_equal(img, load_grayscale(FIXTURE_PHOTO))


def test_truncated_png(tmp_path):
    full = _write_png(tmp_path / "full.png", (np.arange(64 * 64) % 251).astype(np.uint8).reshape(64, 64))
    p = tmp_path / "truncated.png"
    data = full.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageReadError, match="truncated or corrupt image"):
        load_grayscale(p)


def test_missing_file_is_not_an_image_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_grayscale(tmp_path / "does-not-exist.jpg")


def test_tiny_image(tmp_path):
    p = _write_png(tmp_path / "tiny.png", np.full((10, 30), 128, np.uint8))
    img = load_grayscale(p)
    assert img.shape == (10, 30)
    with pytest.raises(ImageReadError, match=r"image smaller than one patch \(30x10 < 16\)"):
        check_min_size(img, 16)
    with pytest.raises(ImageReadError, match=r"\(30x10 < 40\)"):
        check_min_size(img, (16, 24, 32, 40))
    check_min_size(np.zeros((16, 16), np.float32), 16)  # fits exactly: no error


# ---------------------------------------------------------------------------
# Good files
# ---------------------------------------------------------------------------
def test_colour_image_to_grayscale(tmp_path):
    bgr = np.zeros((20, 30, 3), np.uint8)
    bgr[:, :10] = (0, 0, 255)  # red
    bgr[:, 10:20] = (0, 255, 0)  # green
    bgr[:, 20:] = (255, 0, 0)  # blue
    img = load_grayscale(_write_png(tmp_path / "colour.png", bgr))
    assert img.shape == (20, 30) and img.dtype == np.float32
    np.testing.assert_allclose(img[0, [0, 15, 25]], np.array([0.299, 0.587, 0.114]), atol=1.5 / 255)


def test_value_range_and_no_max_normalisation(tmp_path):
    arr = np.full((20, 20), 100, np.uint8)
    arr[5, 5] = 150
    img = load_grayscale(_write_png(tmp_path / "dim.png", arr))
    assert img.dtype == np.float32 and img.flags["C_CONTIGUOUS"]
    assert img.max() == pytest.approx(150 / 255)  # not stretched to 1
    assert img[0, 0] == pytest.approx(100 / 255)


def test_resize_longer_side(tmp_path):
    arr = (np.random.default_rng(0).random((400, 1000)) * 255).astype(np.uint8)
    p = _write_png(tmp_path / "wide.png", arr)
    assert load_grayscale(p, max_side=300).shape == (120, 300)
    assert load_grayscale(p.as_posix(), max_side=250).shape == (100, 250)
    assert load_grayscale(p, max_side=None).shape == (400, 1000)
    tall = _write_png(tmp_path / "tall.png", np.ascontiguousarray(arr.T))
    assert load_grayscale(tall, max_side=300).shape == (300, 120)
    # area averaging: a constant image stays constant
    const = _write_png(tmp_path / "const.png", np.full((600, 500), 77, np.uint8))
    np.testing.assert_allclose(load_grayscale(const, 300), 77 / 255, atol=1e-6)


def test_never_upscale(tmp_path):
    p = _write_png(tmp_path / "small.png", np.full((50, 80), 10, np.uint8))
    assert load_grayscale(p, max_side=300).shape == (50, 80)
    small = np.zeros((50, 80), np.uint8)
    assert resize_max_side(small, 300) is small


def test_bad_max_side(tmp_path):
    p = _write_png(tmp_path / "x.png", np.zeros((20, 20), np.uint8))
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_side"):
            load_grayscale(p, max_side=bad)


def test_non_ascii_path(tmp_path):
    d = tmp_path / "données ✓ 图像"
    d.mkdir()
    p = _write_png(d / "éàü.png", np.full((30, 40), 200, np.uint8))
    img = load_grayscale(p)
    assert img.shape == (30, 40)


def test_real_photo_loads():
    img = load_grayscale(FIXTURE_PHOTO)
    assert img.ndim == 2 and img.dtype == np.float32 and img.flags["C_CONTIGUOUS"]
    assert max(img.shape) <= 300
    assert 0.0 <= img.min() and img.max() <= 1.0 and img.std() > 0.05
    raw = cv2.imread(str(FIXTURE_PHOTO), cv2.IMREAD_GRAYSCALE)
    if max(raw.shape) <= 300:
        np.testing.assert_allclose(img, raw / 255.0, atol=1e-6)
    check_min_size(img, (16, 24, 32, 40))


def test_decode_grayscale_from_bytes():
    data = FIXTURE_PHOTO.read_bytes()
    np.testing.assert_array_equal(decode_grayscale(data), load_grayscale(FIXTURE_PHOTO))
    with pytest.raises(ImageReadError, match="empty file"):
        decode_grayscale(b"")


# ---------------------------------------------------------------------------
# Pixel guard on every format (issue 26): sizes read by Pillow, unsized formats refused
# ---------------------------------------------------------------------------
def _gradient():
    return (np.arange(150 * 200) % 251).astype(np.uint8).reshape(150, 200)


def _encode(kind):
    """A 200 x 150 image in ``kind``, written by OpenCV (BigTIFF and GIF by Pillow)."""
    import io

    from PIL import Image

    image = _gradient()
    if kind in ("bigtiff", "gif"):
        out = io.BytesIO()
        Image.fromarray(image).save(out, format="TIFF" if kind == "bigtiff" else "GIF", big_tiff=kind == "bigtiff")
        return out.getvalue()
    if kind == ".hdr":
        image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR).astype(np.float32) / 255
    if kind == ".pfm":
        image = image.astype(np.float32) / 255
    ok, buf = cv2.imencode(kind, image)
    assert ok
    return buf.tobytes()


# formats that loaded before the guard moved to Pillow (the first nine were guarded already)
SIZED = [
    ".png",
    ".jpg",
    ".bmp",
    ".tif",
    ".webp",
    ".pgm",
    ".pbm",
    ".pnm",
    "gif",
    "bigtiff",
    ".jp2",
    ".ras",
    ".avif",
    ".pfm",
]  # grayscale PFM ("Pf"); Pillow cannot size colour PFM ("PF"), which never decoded to grayscale
UNSIZED = [".pam", ".hdr"]  # OpenCV decodes them, Pillow cannot read their size


@pytest.mark.parametrize("kind", SIZED)
def test_every_sized_format_still_loads_and_is_guarded(kind, monkeypatch):
    data = _encode(kind)
    image = decode_grayscale(data, max_side=None, max_pixels=DEFAULT_MAX_PIXELS)
    assert image.shape == (150, 200)
    calls, real = [], cv2.imdecode
    monkeypatch.setattr(preprocess.cv2, "imdecode", lambda *a: calls.append(1) or real(*a))
    with pytest.raises(ImageReadError, match=r"^image too large \(200 x 150 pixels > image.max_pixels = 1000\)"):
        decode_grayscale(data, max_pixels=1000)
    assert calls == []  # refused from the header, never decoded


@pytest.mark.parametrize("kind", UNSIZED)
def test_formats_whose_size_cannot_be_read_are_refused_under_a_cap(kind, monkeypatch):
    data = _encode(kind)
    calls, real = [], cv2.imdecode
    monkeypatch.setattr(preprocess.cv2, "imdecode", lambda *a: calls.append(1) or real(*a))
    with pytest.raises(ImageReadError, match=r"^cannot read the image size from the header \(format not supported"):
        decode_grayscale(data, max_pixels=DEFAULT_MAX_PIXELS)
    assert calls == []
    # without a cap they decode as before
    assert decode_grayscale(data, max_side=None, max_pixels=None).shape == (150, 200)


def test_pillow_limit_is_neither_used_nor_changed():
    """A 30 000² header is sized without Pillow's own bomb warning/error, and its limit is restored."""
    import struct
    import warnings
    import zlib

    from PIL import Image

    data = bytearray(cv2.imencode(".png", np.zeros((20, 20), np.uint8))[1].tobytes())
    data[16:24] = struct.pack(">II", 30000, 30000)
    data[29:33] = struct.pack(">I", zlib.crc32(data[12:29]))  # a valid IHDR, as a crafted file has
    before = Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert preprocess.image_size(bytes(data)) == (30000, 30000)
    assert Image.MAX_IMAGE_PIXELS == before


def test_corrupt_header_of_a_known_format_is_not_decoded():
    data = bytearray(_encode(".png"))
    data[12:16] = b"XXXX"  # the IHDR chunk's type: Pillow cannot read the size
    with pytest.raises(ImageReadError, match=r"^truncated or corrupt image \(PNG"):
        decode_grayscale(bytes(data), max_pixels=DEFAULT_MAX_PIXELS)
