"""Colour dense SIFT (``[sift] color``): the colour spaces against per-pixel references, each
384-dimensional descriptor's blocks against dense SIFT of that channel alone, the colour
decode path, the configuration key and every encoder on 384 dimensions."""

from __future__ import annotations

import colorsys
import math

import cv2
import numpy as np
import pytest

from classify_images.coding.encoders import Pyramid, make_encoder
from classify_images.features.colour import COLOR_SPACES, colour_channels
from classify_images.features.descriptors import make_descriptor
from classify_images.features.dsift import dense_sift, dequantize_descriptors, quantize_descriptors
from classify_images.features.preprocess import (
    ImageReadError,
    decode_colour_checked,
    decode_grayscale,
    load_colour,
)
from classify_images.pipeline.extraction.stages import compute_descriptors
from classify_images.pipeline.settings.config import TABLES, ConfigError, load_config, stage_hash

from .conftest import FIXTURE_PHOTO

SIFT = {"patch_sizes": [8, 16], "step": 4, "smooth": True, "contrast_threshold": 1.0}


COLOUR_SPACES = ["opponent", "hsv", "rgb", "c", "lab"]


def _reference_lab(r: float, g: float, b: float) -> tuple[float, float, float]:
    """CIE 1976 L*a*b* of one sRGB pixel, step by step (IEC 61966-2-1 sRGB, D65 = XYZ of RGB (1, 1, 1))."""

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    rl, gl, bl = linear(r), linear(g), linear(b)
    x = 0.4124 * rl + 0.3576 * gl + 0.1805 * bl
    y = 0.2126 * rl + 0.7152 * gl + 0.0722 * bl
    z = 0.0193 * rl + 0.1192 * gl + 0.9505 * bl
    xn, yn, zn = 0.4124 + 0.3576 + 0.1805, 0.2126 + 0.7152 + 0.0722, 0.0193 + 0.1192 + 0.9505
    lightness = 116 * f(y / yn) - 16
    a_star = 500 * (f(x / xn) - f(y / yn))
    b_star = 200 * (f(y / yn) - f(z / zn))
    return lightness, a_star, b_star


def _reference_pixel(r: float, g: float, b: float, space: str) -> tuple[float, float, float]:
    """One pixel by the textbook formulas (van de Sande et al. 2010; colorsys for HSV; CIE for Lab)."""
    o1, o2, o3 = (r - g) / math.sqrt(2), (r + g - 2 * b) / math.sqrt(6), (r + g + b) / math.sqrt(3)
    if space == "opponent":
        return o1, o2, o3
    if space == "hsv":
        return colorsys.rgb_to_hsv(r, g, b)
    if space == "c":
        epsilon = 1e-6  # the documented denominator offset: O3 = 0 only where O1 = O2 = 0 (black)
        return o1 / (o3 + epsilon), o2 / (o3 + epsilon), o3
    if space == "lab":
        return tuple(v / 100 for v in _reference_lab(r, g, b))
    return r, g, b


def _reference_channels(rgb: np.ndarray, space: str) -> np.ndarray:
    h, w, _ = rgb.shape
    out = np.empty((3, h, w), dtype=np.float64)
    for y in range(h):
        for x in range(w):
            out[:, y, x] = _reference_pixel(*(float(v) for v in rgb[y, x]), space)
    return out


def _test_image(seed: int = 0, shape=(37, 45)) -> np.ndarray:
    """Random colours plus the awkward pixels: black, white, greys, primaries, ties."""
    rng = np.random.default_rng(seed)
    rgb = rng.random((*shape, 3)).astype(np.float32)
    special = [
        (0, 0, 0),
        (1, 1, 1),
        (0.5, 0.5, 0.5),
        (1, 0, 0),
        (0, 1, 0),
        (0, 0, 1),
        (1, 1, 0),
        (0, 1, 1),
        (1, 0, 1),
        (0.2, 0.2, 0.7),
        (0.7, 0.2, 0.7),
        (1, 0, 0.001),
    ]
    for i, colour in enumerate(special):
        rgb[0, i] = colour
    return rgb


@pytest.mark.parametrize("space", COLOUR_SPACES)
def test_colour_spaces_match_the_per_pixel_reference(space):
    rgb = _test_image()
    fast = colour_channels(rgb, space)
    assert fast.shape == (3, *rgb.shape[:2]) and fast.dtype == np.float32 and fast.flags.c_contiguous
    np.testing.assert_allclose(fast, _reference_channels(rgb, space), rtol=0, atol=2e-6)


def test_lab_agrees_with_opencv_within_its_lookup_table_error_and_is_exactly_zero_on_greys():
    rgb = _test_image(3, (64, 64))
    ours = colour_channels(rgb, "lab") * 100  # back to CIE units
    opencv = np.moveaxis(cv2.cvtColor(rgb, cv2.COLOR_RGB2Lab), -1, 0)
    # OpenCV's float32 conversion interpolates a lookup table (0.55 worst seen, in a*)
    np.testing.assert_allclose(ours, opencv, rtol=0, atol=1.0)
    greys = np.repeat(np.linspace(0, 1, 256, dtype=np.float32)[:, None, None], 3, axis=2)
    lab = colour_channels(greys, "lab")
    assert not lab[1:].any()  # a* = b* = 0 exactly: DenseSift.compute skips zero channels
    assert lab[0, 0, 0] == 0 and lab[0, -1, 0] == pytest.approx(1.0, abs=1e-6)  # black L* 0, white 100
    white = colour_channels(np.ones((1, 1, 3), np.float32), "lab")
    np.testing.assert_array_equal(white[1:], 0)


def test_c_sift_is_finite_on_black_and_its_ratios_ignore_the_light_intensity():
    rgb = _test_image(4, (40, 40)) * 0.5 + 0.25  # away from black, where ε matters
    rgb[0, 0] = 0
    channels = colour_channels(rgb, "c")
    assert np.isfinite(channels).all() and not channels[:, 0, 0].any()
    darker = colour_channels(rgb * np.float32(0.5), "c")
    np.testing.assert_allclose(darker[:2, 1:], channels[:2, 1:], rtol=0, atol=2e-5)  # C1, C2: scale-invariant
    np.testing.assert_allclose(darker[2], channels[2] * 0.5, rtol=1e-6, atol=1e-7)  # O3 is not
    np.testing.assert_array_equal(colour_channels(rgb, "c")[2], colour_channels(rgb, "opponent")[2])


def test_colour_spaces_refuse_what_they_cannot_convert():
    with pytest.raises(ValueError, match="allowed values"):
        colour_channels(_test_image(), "xyz")
    with pytest.raises(ValueError, match="shape \\(H, W, 3\\)"):
        colour_channels(np.zeros((4, 4), np.float32), "rgb")


@pytest.mark.parametrize("space", COLOUR_SPACES)
@pytest.mark.parametrize("options", [{}, {"low_contrast": "zero", "root_sift": True, "window_size": 1.5}])
def test_each_block_is_dense_sift_of_its_channel_alone(space, options):
    rgb = _test_image(1, (48, 60))
    table = {**SIFT, **options, "color": space}
    descriptor = make_descriptor(table)
    assert descriptor.needs_colour and descriptor.length == 384
    result = descriptor.compute(rgb)
    channels = _reference_channels(rgb, space).astype(np.float32)
    kwargs = dict(
        patch_sizes=(8, 16),
        step=4,
        smooth=True,
        contrast_threshold=1.0,
        low_contrast=options.get("low_contrast", "keep"),
        root=options.get("root_sift", False),
        window_size=options.get("window_size"),
    )
    for k in range(3):
        alone = dense_sift(np.ascontiguousarray(channels[k]), **kwargs)
        np.testing.assert_allclose(result.descriptors[:, 128 * k : 128 * (k + 1)], alone.descriptors, atol=2e-5)
        np.testing.assert_array_equal(result.x, alone.x)
        np.testing.assert_array_equal(result.y, alone.y)


def test_gray_is_unchanged_and_one_block():
    gray = _test_image(2)[..., 0].copy()
    descriptor = make_descriptor(SIFT)
    assert not descriptor.needs_colour and descriptor.length == 128
    np.testing.assert_array_equal(descriptor.compute(gray).descriptors, dense_sift(gray, (8, 16), 4).descriptors)
    with pytest.raises(ValueError, match="low_contrast = 'drop'"):
        make_descriptor({**SIFT, "color": "rgb", "low_contrast": "drop"}).compute(_test_image())


def _png(image_bgr: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", image_bgr)
    assert ok
    return data.tobytes()


def test_colour_decode_is_rgb_and_shares_the_grey_checks():
    bgr = np.zeros((20, 30, 3), np.uint8)
    bgr[:, :10] = (255, 0, 0)  # blue
    bgr[:, 10:20] = (0, 255, 0)  # green
    bgr[:, 20:] = (0, 0, 255)  # red
    data = _png(bgr)
    rgb, warnings = decode_colour_checked(data, None)
    assert rgb.shape == (20, 30, 3) and rgb.dtype == np.float32 and warnings == []
    np.testing.assert_array_equal(rgb[0, 0], [0, 0, 1])
    np.testing.assert_array_equal(rgb[0, 15], [0, 1, 0])
    np.testing.assert_array_equal(rgb[0, 25], [1, 0, 0])
    # the same size as the grey decode after shrinking
    assert decode_colour_checked(data, 12)[0].shape[:2] == decode_grayscale(data, 12).shape
    # a grey file decodes to three equal channels
    grey = decode_colour_checked(_png(np.full((8, 8), 77, np.uint8)), None)[0]
    assert np.all(grey == np.float32(77 / 255))
    with pytest.raises(ImageReadError, match="too large"):
        decode_colour_checked(data, None, max_pixels=100)
    with pytest.raises(ImageReadError, match="truncated"):
        decode_colour_checked(data[: len(data) // 2], None)
    with pytest.raises(ImageReadError, match="empty file"):
        decode_colour_checked(b"", None)


def test_colour_descriptors_of_a_photograph_through_the_stage():
    grey = compute_descriptors(str(FIXTURE_PHOTO), 96, SIFT)
    colour = compute_descriptors(str(FIXTURE_PHOTO), 96, {**SIFT, "color": "opponent"})
    assert colour["descriptors"].shape == (grey["descriptors"].shape[0], 384)
    np.testing.assert_array_equal(colour["shape"], grey["shape"])
    np.testing.assert_array_equal(colour["x"], grey["x"])
    # the stage's blocks are dense SIFT of the decoded photograph's channels
    channels = colour_channels(load_colour(FIXTURE_PHOTO, 96), "opponent")
    alone = dense_sift(channels[2], (8, 16), 4)
    np.testing.assert_array_equal(colour["descriptors"][:, 256:], quantize_descriptors(alone.descriptors))


def test_color_key_keeps_the_grey_hashes_and_is_checked():
    default = load_config(None)
    explicit = load_config(None, {"sift": {"color": "gray"}})
    opponent = load_config(None, {"sift": {"color": "opponent"}})
    assert stage_hash(default, list(TABLES)) == stage_hash(explicit, list(TABLES))
    assert "color" not in explicit.sift_params()
    assert stage_hash(default, list(TABLES)) != stage_hash(opponent, list(TABLES))
    assert opponent.sift_params()["color"] == "opponent"
    with pytest.raises(ConfigError, match="sift.color = 'xyz'") as refused:
        load_config(None, {"sift": {"color": "xyz"}})
    assert "'c'" in str(refused.value) and "'lab'" in str(refused.value)
    for space in ("c", "lab"):
        assert load_config(None, {"sift": {"color": space}}).sift_params()["color"] == space
    with pytest.raises(ConfigError, match="low_contrast = 'drop' cannot be used"):
        load_config(None, {"sift": {"color": "hsv", "low_contrast": "drop"}})
    assert set(COLOR_SPACES) == {"gray", "opponent", "hsv", "rgb", "c", "lab"}
    assert load_config("scene15-fisher-opponent").sift.color == "opponent"


def _table(kind: str, **own) -> dict:
    return {"kind": kind, "size": 6, "n_samples": 500, "lambda": 0.15, "n_iter": 5, "seed": 0, **own}


@pytest.mark.parametrize(
    "table",
    [
        _table("kmeans"),
        _table("kmeans", assignment="soft", soft_neighbors=2),
        _table("sparse"),
        _table("llc", n_neighbors=3),
        _table("vlad"),
        _table("fisher", pca_dims=8),
        _table("fisher", pca_dims=384),
    ],
    ids=lambda t: f"{t['kind']}-{t.get('assignment', '')}{t.get('pca_dims', '')}",
)
def test_every_encoder_takes_384_dimensional_descriptors(table):
    data = compute_descriptors(str(FIXTURE_PHOTO), 96, {**SIFT, "color": "opponent"})
    descriptors = dequantize_descriptors(data["descriptors"])
    if table.get("pca_dims") == 384:  # a full-rank PCA needs more rows than dimensions
        descriptors = np.tile(descriptors, (1 + 400 // len(descriptors), 1))
        descriptors = descriptors + np.random.default_rng(0).normal(0, 1e-3, descriptors.shape).astype(np.float32)
    encoder = make_encoder(table)
    state = encoder.learn(descriptors)
    back = encoder.from_arrays(encoder.to_arrays(state), 384)
    with pytest.raises(ValueError):
        encoder.from_arrays(encoder.to_arrays(state), 128)
    pyramid = Pyramid((1, 2), "max" if table["kind"] in ("sparse", "llc") else "average")
    n = len(data["x"])
    row = encoder.encode(back, descriptors[:n], data["x"], data["y"], tuple(int(v) for v in data["shape"]), pyramid)
    assert row.shape == (encoder.dimension(back, pyramid),) and np.isfinite(row).all() and np.abs(row).sum() > 0


def _by_frame(data: dict, sizes: list[int], step: int) -> np.ndarray:
    """The descriptors in (patch size, y, x) order (within a size, centres are unique)."""
    height, width = (int(v) for v in data["shape"])
    order, start = [], 0
    for size in sizes:
        count = ((height - size) // step + 1) * ((width - size) // step + 1)
        block = np.arange(start, start + count)
        order.append(block[np.lexsort((data["x"][block], data["y"][block]))])
        start += count
    assert start == data["descriptors"].shape[0]
    return data["descriptors"][np.concatenate(order)].astype(np.int16)


def test_a_flipped_image_is_the_mirrored_file_and_its_own_cache_entry(tmp_path):
    """The mirror's descriptors are the image's, permuted, at the mirrored centres (no second SIFT);
    they are what dense SIFT of the mirrored file gives on the same frames (the fixture's width
    makes the mirrored grid the mirrored file's grid), up to one quantisation step."""
    from classify_images.features.descriptors import make_descriptor
    from classify_images.pipeline.extraction.stages import FLIP_KEY, StageCache, mirrored_descriptors

    mirrored = tmp_path / "mirrored.png"
    cv2.imwrite(str(mirrored), cv2.imread(str(FIXTURE_PHOTO), cv2.IMREAD_COLOR)[:, ::-1])
    original = tmp_path / "original.png"
    cv2.imwrite(str(original), cv2.imread(str(FIXTURE_PHOTO), cv2.IMREAD_COLOR))
    for table in (SIFT, {**SIFT, "color": "opponent"}):
        image = compute_descriptors(str(original), None, table)
        flipped = compute_descriptors(str(original), None, {**table, FLIP_KEY: True})
        expected = mirrored_descriptors(image, make_descriptor(table).mirror_columns)
        for key in ("descriptors", "x", "y", "shape"):
            np.testing.assert_array_equal(flipped[key], expected[key])
        width = int(image["shape"][1])
        np.testing.assert_array_equal(flipped["x"], (width - 1) - image["x"])
        assert all((width - size) % SIFT["step"] == 0 for size in SIFT["patch_sizes"])
        reference = compute_descriptors(str(mirrored), None, table)
        difference = np.abs(
            _by_frame(flipped, SIFT["patch_sizes"], SIFT["step"])
            - _by_frame(reference, SIFT["patch_sizes"], SIFT["step"])
        )
        assert difference.max() <= 1 and (difference > 0).mean() < 1e-3, (difference.max(), (difference > 0).mean())
        assert not np.array_equal(flipped["descriptors"], image["descriptors"])
    cache = StageCache(tmp_path / "cache")
    import hashlib

    fingerprint = hashlib.sha1(original.read_bytes()).hexdigest()
    plain = cache._descriptors(str(original), fingerprint, None, SIFT)
    flipped = cache._descriptors(str(original), fingerprint, None, {**SIFT, FLIP_KEY: True})
    assert not np.array_equal(plain["descriptors"], flipped["descriptors"])
    np.testing.assert_array_equal(
        cache._descriptors(str(original), fingerprint, None, {**SIFT, FLIP_KEY: True})["descriptors"],
        flipped["descriptors"],
    )


def test_integer_bin_centres_mirror_by_computing_on_the_mirrored_image(tmp_path):
    """VLFeat's integer bin centres are not symmetric about the patch centre: no permutation, the
    mirror's descriptors are those of the mirrored pixels (the mirrored file's, exactly)."""
    from classify_images.features.descriptors import make_descriptor
    from classify_images.pipeline.extraction.stages import FLIP_KEY

    table = {**SIFT, "bin_centres": "integer"}
    assert make_descriptor(table).mirror_columns is None
    mirrored = tmp_path / "mirrored.png"
    cv2.imwrite(str(mirrored), cv2.imread(str(FIXTURE_PHOTO), cv2.IMREAD_COLOR)[:, ::-1])
    original = tmp_path / "original.png"
    cv2.imwrite(str(original), cv2.imread(str(FIXTURE_PHOTO), cv2.IMREAD_COLOR))
    flipped = compute_descriptors(str(original), None, {**table, FLIP_KEY: True})
    reference = compute_descriptors(str(mirrored), None, table)
    for key in ("descriptors", "x", "y", "shape"):
        np.testing.assert_array_equal(flipped[key], reference[key])


@pytest.mark.parametrize("space", ["opponent", "c", "lab"])
def test_a_colour_feature_set_builds_and_its_model_classifies_images(space, small_dataset, tmp_path):
    from classify_images.pipeline.extraction.build import build_feature_set
    from classify_images.pipeline.settings.config import validate_config
    from classify_images.pipeline.storage.feature_store import load_feature_set

    from ._encoder_helpers import assert_image_model_classifies_like_rows
    from .conftest import SMALL_CONFIG

    raw = {table: dict(values) for table, values in SMALL_CONFIG.items()}
    raw["sift"]["color"] = space
    raw["codebook"] = {"kind": "kmeans", "size": 8, "n_samples": 1000, "n_iter": 5}
    build_feature_set(small_dataset, tmp_path / "fs", validate_config(raw), cache_dir=tmp_path / "cache")
    fs = load_feature_set(tmp_path / "fs")
    assert fs.config.sift.color == space and fs.codebook().shape == (8, 384)
    assert_image_model_classifies_like_rows(fs, small_dataset, tmp_path / "model.npz")


# ---------------------------------------------------------------- grey images in a colour configuration
@pytest.mark.parametrize("space", COLOUR_SPACES)
@pytest.mark.parametrize("root", [False, True])
def test_a_grey_image_skips_zero_and_repeated_channels_with_the_same_descriptors(space, root, monkeypatch):
    from classify_images.features import colour as colour_module
    from classify_images.features.descriptors import make_descriptor

    rng = np.random.default_rng(1)
    grey = rng.random((56, 64)).astype(np.float32)
    grey[:16, :16] = 0.5  # a flat patch: low contrast in every channel
    rgb = np.ascontiguousarray(np.repeat(grey[:, :, None], 3, axis=2))
    descriptor = make_descriptor(
        {
            "patch_sizes": [8, 16],
            "step": 4,
            "smooth": True,
            "contrast_threshold": 0.005,
            "color": space,
            "root_sift": root,
        }
    )
    every_channel = np.concatenate(
        [descriptor._dense_sift(c).descriptors for c in colour_module.colour_channels(rgb, space)], axis=1
    )
    calls = []
    original = descriptor._dense_sift
    monkeypatch.setattr(
        descriptor, "_dense_sift", lambda channel, out=None: calls.append(1) or original(channel, out=out)
    )
    np.testing.assert_array_equal(descriptor.compute(rgb).descriptors, every_channel)
    assert len(calls) == 1  # one channel computed, not three
    calls.clear()
    colourful = np.ascontiguousarray(rng.random((56, 64, 3)).astype(np.float32))
    descriptor.compute(colourful)
    assert len(calls) == 3


def test_warm_up_compiles_a_colour_descriptor():
    from classify_images.pipeline.execution.warm_up import synthetic_input, warm_descriptors

    sift = {"patch_sizes": [16], "step": 8, "smooth": True, "contrast_threshold": 0.005, "color": "opponent"}
    assert synthetic_input(sift).ndim == 3
    warm_descriptors(sift)  # raised "expected an RGB float image" before


def test_the_build_says_in_one_line_when_the_images_are_grey(tmp_path):
    import cv2

    from classify_images.pipeline.extraction.build_steps import grey_images_note

    rng = np.random.default_rng(0)
    grey, colour = tmp_path / "g.png", tmp_path / "c.png"
    cv2.imwrite(str(grey), (255 * rng.random((20, 20))).astype(np.uint8))
    cv2.imwrite(str(colour), (255 * rng.random((20, 20, 3))).astype(np.uint8))
    assert grey_images_note([str(grey)], ["gray"]) is None
    assert grey_images_note([str(colour)], ["opponent"]) is None
    note = grey_images_note([str(grey), str(grey)], ["opponent"])
    assert note.startswith("all 2 images are grey") and "only O3 is computed" in note
    assert grey_images_note([str(grey), str(colour)], ["rgb"]).startswith("1 of 2 images are grey")
