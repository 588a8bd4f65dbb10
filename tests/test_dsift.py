"""Tests of classify_images.features.dsift against a slow, obvious reference."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from classify_images.features import (
    DESCRIPTOR_SIZE,
    DenseSIFT,
    dense_sift,
    dequantize_descriptors,
    load_grayscale,
    opencv_keypoint_size,
    quantize_descriptors,
)
from classify_images.features.dsift import (
    gaussian_kernel,
    grid_frames,
    normalize_sift,
    smooth_image,
    smoothing_sigma,
    triangular_kernel,
)

from .conftest import FIXTURE_PHOTO


# ---------------------------------------------------------------------------
# Slow reference: one patch at a time, one pixel at a time
# ---------------------------------------------------------------------------
def reference_descriptor(
    smoothed: np.ndarray, x0: int, y0: int, patch_size: int, centre_offset: float | None = None, bin_weight=None
) -> np.ndarray:
    """Raw dense-SIFT descriptor of the patch with top-left corner (x0, y0).

    Straight from the definition: every pixel near the patch adds its
    gradient magnitude, split linearly between its two nearest orientation
    bins, to the 4x4 spatial bins with bilinear weights
    max(0, 1 - |x - c_bx| / s) * max(0, 1 - |y - c_by| / s),
    bin centres c_b = corner + b*s + (s-1)/2.  Gradients are numpy's central
    differences (one-sided at the image border), in float64.
    ``centre_offset`` replaces ``(s-1)/2`` (``s // 2``: VLFeat's integer
    centres); ``bin_weight`` (4 x 4) multiplies each spatial bin.
    """
    img = smoothed.astype(np.float64)
    H, W = img.shape
    gy, gx = np.gradient(img)
    s = patch_size // 4
    c0 = (s - 1) / 2 if centre_offset is None else centre_offset
    cx = [x0 + b * s + c0 for b in range(4)]
    cy = [y0 + b * s + c0 for b in range(4)]
    desc = np.zeros((4, 4, 8))
    # the patch plus a margin of s pixels: enough for every non-zero weight
    for y in range(max(0, y0 - s), min(H, y0 + patch_size + s)):
        wy = [max(0.0, 1.0 - abs(y - c) / s) for c in cy]
        if not any(wy):
            continue
        for x in range(max(0, x0 - s), min(W, x0 + patch_size + s)):
            wx = [max(0.0, 1.0 - abs(x - c) / s) for c in cx]
            if not any(wx):
                continue
            m = math.hypot(gx[y, x], gy[y, x])
            theta = math.atan2(gy[y, x], gx[y, x]) % (2 * math.pi)
            t = theta / (2 * math.pi / 8)
            k0 = int(math.floor(t))
            f = t - k0
            k0 %= 8
            k1 = (k0 + 1) % 8
            for by in range(4):
                if wy[by] == 0.0:
                    continue
                for bx in range(4):
                    w = wy[by] * wx[bx] * (1.0 if bin_weight is None else bin_weight[by, bx])
                    if w == 0.0:
                        continue
                    desc[by, bx, k0] += w * m * (1 - f)
                    desc[by, bx, k1] += w * m * f
    return desc.reshape(-1)


def reference_normalize(raw: np.ndarray, threshold: float = 1.0, clip: float = 0.2) -> np.ndarray:
    r = np.linalg.norm(raw)
    if r <= threshold:
        return raw.copy()
    v = np.minimum(raw / r, clip)
    return v / np.linalg.norm(v)


def reference_dense_sift(image, patch_size, step, corners=None, smooth=True, normalize=True):
    sigma = smoothing_sigma(patch_size) if smooth else 0.0
    sm = smooth_image(image, sigma)
    H, W = image.shape
    if corners is None:
        corners = [(x0, y0) for y0 in range(0, H - patch_size + 1, step) for x0 in range(0, W - patch_size + 1, step)]
    out = []
    for x0, y0 in corners:
        raw = reference_descriptor(sm, x0, y0, patch_size)
        out.append(reference_normalize(raw) if normalize else raw)
    return np.array(out).reshape(-1, DESCRIPTOR_SIZE)


def _rows_for_corners(res: DenseSIFT, patch_size: int, corners):
    c = (patch_size - 1) / 2
    idx = []
    for x0, y0 in corners:
        hit = np.flatnonzero((res.x == x0 + c) & (res.y == y0 + c) & (res.patch_size == patch_size))
        assert hit.size == 1
        idx.append(hit[0])
    return np.array(idx)


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="module")
def real_image():
    return load_grayscale(FIXTURE_PHOTO, max_side=300)


def _random_image(rng, h, w):
    # smooth-ish random texture: a mix of strong and weak contrast
    img = rng.random((h, w)).astype(np.float32)
    img = cv2.GaussianBlur(img, (0, 0), 1.0)
    img[: h // 3] *= 0.02  # a low-contrast band
    return np.ascontiguousarray(img, dtype=np.float32)


# ---------------------------------------------------------------------------
# Fast == slow reference
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape, patch_size, step",
    [((37, 45), 8, 3), ((41, 38), 12, 5), ((40, 44), 16, 7), ((45, 47), 20, 6), ((42, 50), 24, 9)],
)
def test_matches_reference_random(rng, shape, patch_size, step):
    img = _random_image(rng, *shape)
    fast = dense_sift(img, (patch_size,), step, normalize=False)
    ref = reference_dense_sift(img, patch_size, step, normalize=False)
    assert fast.descriptors.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(fast.descriptors, ref, rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(fast.raw_norm, np.linalg.norm(ref, axis=1), rtol=1e-5, atol=1e-6)
    fast_n = dense_sift(img, (patch_size,), step)
    ref_n = np.array([reference_normalize(r) for r in ref])
    np.testing.assert_allclose(fast_n.descriptors, ref_n, rtol=0, atol=1e-5)


def test_matches_reference_multiscale_without_smoothing(rng):
    img = _random_image(rng, 44, 52)
    sizes = (8, 16, 24)
    fast = dense_sift(img, sizes, 4, smooth=False)
    for p in sizes:
        ref = reference_dense_sift(img, p, 4, smooth=False)
        got = fast.descriptors[fast.patch_size == p]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("patch_size, step", [(16, 8), (24, 3), (40, 6)])
def test_matches_reference_real_image(real_image, rng, patch_size, step):
    """Selected patches (corners, borders, random) of a real photograph."""
    img = real_image
    H, W = img.shape
    fast = dense_sift(img, (patch_size,), step)
    xs = np.arange(0, W - patch_size + 1, step)
    ys = np.arange(0, H - patch_size + 1, step)
    corners = [(xs[0], ys[0]), (xs[-1], ys[-1]), (xs[0], ys[-1]), (xs[-1], ys[0])]
    corners += [(int(rng.choice(xs)), int(rng.choice(ys))) for _ in range(6)]
    ref = reference_dense_sift(img, patch_size, step, corners=corners)
    got = fast.descriptors[_rows_for_corners(fast, patch_size, corners)]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)


def test_matches_reference_photo_crop():
    img = np.ascontiguousarray(load_grayscale(FIXTURE_PHOTO)[100:160, 90:150])
    fast = dense_sift(img, (16, 20), 11)
    for p in (16, 20):
        ref = reference_dense_sift(img, p, 11)
        np.testing.assert_allclose(fast.descriptors[fast.patch_size == p], ref, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------
# Patch extent
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("patch_size", [16, 20])
def test_patch_support(rng, patch_size):
    """Pixels beyond the bilinear reach (+1 px of central differences) do not matter."""
    H = W = 64
    img = _random_image(rng, H, W)
    img[: H // 3] /= 0.02  # undo the low-contrast band: contrast everywhere
    s = patch_size // 4
    margin = s // 2  # floor(s/2) pixels of half-bin margin on each side
    x0 = y0 = 20
    lo, hi = x0 - margin, x0 + patch_size - 1 + margin  # first/last pixel with weight > 0

    def desc(im):
        r = dense_sift(im, (patch_size,), 1, smooth=False)
        return r.descriptors[_rows_for_corners(r, patch_size, [(x0, y0)])[0]]

    d0 = desc(img)
    # outside [lo-1, hi+1] in x or in y: unchanged (exactly)
    out = img.copy()
    yy, xx = np.mgrid[0:H, 0:W]
    far = (xx < lo - 1) | (xx > hi + 1) | (yy < lo - 1) | (yy > hi + 1)
    out[far] = rng.random(int(far.sum())).astype(np.float32)
    np.testing.assert_array_equal(desc(out), d0)
    # one pixel just outside the support changes the gradient of the last
    # support pixel: the descriptor changes
    for py, px in [(y0 + 5, lo - 1), (y0 + 5, hi + 1), (lo - 1, x0 + 5), (hi + 1, x0 + 5)]:
        near = img.copy()
        near[py, px] += 0.5
        assert np.abs(desc(near) - d0).max() > 1e-4
    # with smoothing the reach grows by the Gaussian radius
    r = int(math.ceil(4 * smoothing_sigma(patch_size)))

    def desc_s(im):
        res = dense_sift(im, (patch_size,), 1)
        return res.descriptors[_rows_for_corners(res, patch_size, [(x0, y0)])[0]]

    far_s = (xx < lo - 1 - r) | (xx > hi + 1 + r) | (yy < lo - 1 - r) | (yy > hi + 1 + r)
    out_s = img.copy()
    out_s[far_s] = rng.random(int(far_s.sum())).astype(np.float32)
    np.testing.assert_array_equal(desc_s(out_s), desc_s(img))


def test_triangular_kernel_partition_of_unity():
    for s in range(2, 11):
        k, lo = triangular_kernel(s)
        assert k.dtype == np.float32
        assert lo == -(s - 1)
        if s % 2 == 0:
            assert k.size == 2 * s
            np.testing.assert_allclose(k[:s] + k[s:], 1.0, atol=1e-6)
        else:
            assert k.size == 2 * s - 1
            assert k[s - 1] == 1.0
            np.testing.assert_allclose(k[: s - 1] + k[s:], 1.0, atol=1e-6)


# ---------------------------------------------------------------------------
# OpenCV keypoint size (DESIGN.md pitfall)
# ---------------------------------------------------------------------------
def test_opencv_keypoint_size_covers_the_patch(rng):
    P = 16
    assert opencv_keypoint_size(P) == pytest.approx(16 / 6)
    img = (rng.random((160, 160)) * 255).astype(np.uint8)
    cx = cy = 80
    sift = cv2.SIFT_create()

    def describe(im, size):
        kp = [cv2.KeyPoint(float(cx), float(cy), size, 0)]
        kp, d = sift.compute(im, kp)
        assert len(kp) == 1
        return d[0]

    # everything farther than 20 px from the centre (the 16-px patch + half-bin
    # margin = 10 px, + gradient 1 px + OpenCV's base blur radius <= 6 px)
    yy, xx = np.mgrid[0:160, 0:160]
    far = (np.abs(xx - cx) > 20) | (np.abs(yy - cy) > 20)
    changed = img.copy()
    changed[far] = 255 - changed[far]

    good = opencv_keypoint_size(P)
    np.testing.assert_array_equal(describe(changed, good), describe(img, good))
    inside = img.copy()
    inside[cy - 4 : cy + 4, cx - 4 : cx + 4] = 255 - inside[cy - 4 : cy + 4, cx - 4 : cx + 4]
    assert np.abs(describe(inside, good) - describe(img, good)).max() > 0
    # the pitfall: size = P gives 24-px bins (~96-px window): far pixels matter
    assert np.abs(describe(changed, float(P)) - describe(img, float(P))).max() > 0


# ---------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------
def test_normalize_sift_rules():
    rng = np.random.default_rng(0)
    raw = rng.random((5, 128)).astype(np.float32)
    raw[0, 3] = 40.0  # one dominant entry: gets clipped
    raw[1] *= 0.01  # low contrast: norm < 1
    raw[2] = 0.0  # empty
    out, r = normalize_sift(raw)
    np.testing.assert_allclose(r, np.linalg.norm(raw, axis=1), rtol=1e-6)
    for i in (0, 3, 4):
        assert np.linalg.norm(out[i]) == pytest.approx(1.0, abs=1e-6)
        np.testing.assert_allclose(out[i], reference_normalize(raw[i]), atol=1e-6)
        clipped_norm = np.linalg.norm(np.minimum(raw[i] / r[i], 0.2))
        assert out[i].max() <= 0.2 / clipped_norm + 1e-6
    # the dominant entry ends at exactly the clip level relative to the rest
    assert out[0, 3] == pytest.approx(out[0].max())
    np.testing.assert_array_equal(out[1], raw[1])  # left small, not blown up
    np.testing.assert_array_equal(out[2], 0.0)
    assert np.isfinite(out).all()
    # threshold inf keeps everything raw; input untouched
    same, _ = normalize_sift(raw, contrast_threshold=np.inf)
    np.testing.assert_array_equal(same, raw)


def test_dense_sift_normalisation_on_real_image(real_image):
    raw = dense_sift(real_image, (16,), 6, normalize=False)
    res = dense_sift(real_image, (16,), 6)
    np.testing.assert_array_equal(res.raw_norm, raw.raw_norm)
    norms = np.linalg.norm(res.descriptors, axis=1)
    hi = res.raw_norm > 1.0
    assert 0.3 < hi.mean() <= 1.0  # most patches of a real image are contrasted
    np.testing.assert_allclose(norms[hi], 1.0, atol=1e-5)
    clipped = np.minimum(raw.descriptors[hi] / raw.raw_norm[hi, None], 0.2)
    bound = 0.2 / np.linalg.norm(clipped, axis=1)
    assert (res.descriptors[hi].max(axis=1) <= bound + 1e-5).all()
    # low contrast rows: the raw descriptor itself, norm <= 1
    np.testing.assert_array_equal(res.descriptors[~hi], raw.descriptors[~hi])
    assert (norms[~hi] <= 1.0 + 1e-6).all()
    assert (res.descriptors >= 0).all()
    np.testing.assert_array_equal(res.low_contrast(1.0), ~hi)


def test_thread_safe(real_image):
    from concurrent.futures import ThreadPoolExecutor

    imgs = [real_image, np.ascontiguousarray(real_image[::-1, ::-1])]
    serial = [dense_sift(im, (16, 24), 5) for im in imgs]
    with ThreadPoolExecutor(2) as ex:
        threaded = list(ex.map(lambda im: dense_sift(im, (16, 24), 5), imgs))
    for a, b in zip(serial, threaded):
        np.testing.assert_array_equal(a.descriptors, b.descriptors)


def test_flat_and_textured_images():
    flat = np.full((40, 40), 0.5, dtype=np.float32)
    res = dense_sift(flat, (16,), 4)
    assert np.isfinite(res.descriptors).all()
    np.testing.assert_array_equal(res.descriptors, 0.0)
    np.testing.assert_array_equal(res.raw_norm, 0.0)

    rng = np.random.default_rng(3)
    near_flat = (0.5 + 1e-3 * rng.standard_normal((40, 40))).astype(np.float32)
    res = dense_sift(near_flat, (16,), 4)
    assert np.isfinite(res.descriptors).all()
    assert (res.raw_norm < 1.0).all()  # low contrast, left small
    assert np.linalg.norm(res.descriptors, axis=1).max() < 0.5

    checker = ((np.indices((48, 48)).sum(axis=0) // 4) % 2).astype(np.float32)
    res = dense_sift(checker, (16,), 4)
    assert (res.raw_norm > 3.0).all()  # textured: raw norm well above the threshold
    np.testing.assert_allclose(np.linalg.norm(res.descriptors, axis=1), 1.0, atol=1e-5)


def test_orientation_and_spatial_layout():
    yy, xx = np.mgrid[0:16, 0:16].astype(np.float32)
    cases = {0: 0.02 * xx, 2: 0.02 * yy, 4: 0.5 - 0.02 * xx, 6: 0.5 - 0.02 * yy, 1: 0.02 * (xx + yy)}
    for k, img in cases.items():
        d = dense_sift(np.ascontiguousarray(img), (16,), 16, smooth=False).descriptors
        assert d.shape == (1, 128)
        h = d.reshape(4, 4, 8)
        others = np.delete(h, k, axis=2)
        assert h[:, :, k].min() > 0 and np.abs(others).max() < 1e-5, k
    # texture only in the top-left quadrant -> energy in bins (by, bx) near (0, 0)
    rng = np.random.default_rng(5)
    img = np.zeros((16, 16), np.float32)
    img[:8, :8] = rng.random((8, 8))
    h = dense_sift(img, (16,), 16, smooth=False, normalize=False).descriptors.reshape(4, 4, 8)
    energy = h.sum(axis=2)
    assert energy[0, 0] > 10 * energy[3, 3] and energy[0, 0] > 10 * energy[0, 3]


# ---------------------------------------------------------------------------
# Grid, smoothing, dtypes
# ---------------------------------------------------------------------------
def test_grid_count_and_centres():
    img = np.zeros((50, 70), np.float32)
    res = dense_sift(img, (16,), 6)
    x0 = np.arange(0, 55, 6)  # 0..54 (54 + 16 = 70)
    y0 = np.arange(0, 35, 6)  # 0..30
    assert len(res) == x0.size * y0.size == 60
    np.testing.assert_array_equal(res.x, np.tile(x0 + 7.5, y0.size))
    np.testing.assert_array_equal(res.y, np.repeat(y0 + 7.5, x0.size))
    assert res.descriptors.dtype == np.float32 and res.descriptors.shape == (60, 128)
    assert res.x.dtype == res.y.dtype == np.float32
    assert res.patch_size.dtype == np.int16 and (res.patch_size == 16).all()
    assert res.image_shape == (50, 70)

    multi = dense_sift(img, (16, 24, 32, 40, 56), 3)
    counts = [((70 - p) // 3 + 1) * ((50 - p) // 3 + 1) for p in (16, 24, 32, 40)]
    assert len(multi) == sum(counts)  # 56 does not fit in 50 rows: none
    np.testing.assert_array_equal(multi.patch_size, np.repeat([16, 24, 32, 40], counts))
    gx, gy, gp = grid_frames((50, 70), (16, 24, 32, 40, 56), 3)
    np.testing.assert_array_equal(gx, multi.x)
    np.testing.assert_array_equal(gy, multi.y)
    np.testing.assert_array_equal(gp, multi.patch_size)

    tiny = dense_sift(np.zeros((10, 12), np.float32), (16,), 3)
    assert len(tiny) == 0 and tiny.descriptors.shape == (0, 128)


def test_smoothing_matches_scipy_and_options(real_image):
    from scipy.ndimage import gaussian_filter

    img = np.ascontiguousarray(real_image[:60, :70])
    for p in (16, 24, 32, 40):
        sigma = smoothing_sigma(p)
        assert sigma == pytest.approx(math.sqrt((p / 4 / 6) ** 2 - 0.25))
        r = int(math.ceil(4 * sigma))
        ref = gaussian_filter(img.astype(np.float64), sigma, mode="nearest", radius=r)
        np.testing.assert_allclose(smooth_image(img, sigma), ref, atol=2e-6)
        assert gaussian_kernel(sigma).size == 2 * r + 1
    a = dense_sift(img, (24,), 5, smooth=True)
    b = dense_sift(img, (24,), 5, smooth=smoothing_sigma(24))
    np.testing.assert_array_equal(a.descriptors, b.descriptors)
    c = dense_sift(img, (24,), 5, smooth=False)
    d = dense_sift(img, (24,), 5, smooth=0.0)
    np.testing.assert_array_equal(c.descriptors, d.descriptors)
    assert np.abs(a.descriptors - c.descriptors).max() > 1e-3
    # float64 input gives the same result as float32
    e = dense_sift(img.astype(np.float64), (24,), 5)
    np.testing.assert_array_equal(e.descriptors, a.descriptors)


# ---------------------------------------------------------------------------
# Quantisation
# ---------------------------------------------------------------------------
def test_quantize_round_trip():
    rng = np.random.default_rng(7)
    v = rng.uniform(0, 255.5 / 512, size=(200, 128)).astype(np.float32)
    q = quantize_descriptors(v)
    assert q.dtype == np.uint8 and q.shape == v.shape
    back = dequantize_descriptors(q)
    assert back.dtype == np.float32
    assert np.abs(back - v).max() <= 1 / 1024 + 1e-7
    q2 = quantize_descriptors(np.array([[0.0, 0.9, -0.1, 1.0, 0.2]], np.float32))
    np.testing.assert_array_equal(q2, [[0, 255, 0, 255, 102]])
    # real descriptors: every value survives within 1/1024 unless saturated
    d = dense_sift(load_grayscale(FIXTURE_PHOTO), (16,), 8).descriptors
    back = dequantize_descriptors(quantize_descriptors(d))
    ok = d <= 255.5 / 512
    assert ok.mean() > 0.999
    assert np.abs(back - d)[ok].max() <= 1 / 1024 + 1e-7


def test_quantize_is_numpys_rint_and_clip_exactly():
    # the compiled one-pass quantiser against the obvious NumPy steps: ties (k + 1/2) / 512 round to
    # even, out-of-range values clip, empty and non-contiguous input work
    rng = np.random.default_rng(3)
    v = rng.uniform(-0.1, 0.7, size=(300, 384)).astype(np.float32)
    v[0, :40] = (np.arange(40, dtype=np.float32) + np.float32(0.5)) / np.float32(512)
    v[1, :4] = [255.5 / 512, 254.5 / 512, -0.5 / 512, 0.5 / 512]
    expected = np.clip(np.rint(v * np.float32(512)), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(quantize_descriptors(v), expected)
    np.testing.assert_array_equal(quantize_descriptors(v[:, ::3]), expected[:, ::3])
    assert quantize_descriptors(np.zeros((0, 128), np.float32)).shape == (0, 128)
    q = rng.integers(0, 256, size=(50, 128), dtype=np.uint8)
    np.testing.assert_array_equal(dequantize_descriptors(q), q.astype(np.float32) / np.float32(512))


def test_dense_sift_writes_into_a_column_block_of_wider_rows():
    img = load_grayscale(FIXTURE_PHOTO)
    for options in ({}, {"root": True}, {"low_contrast": "zero", "root": True}):
        alone = dense_sift(img, (16, 24), 6, **options)
        wide = np.full((len(alone), 3 * 128), -1.0, np.float32)
        result = dense_sift(img, (16, 24), 6, out=wide[:, 128:256], **options)
        assert np.shares_memory(result.descriptors, wide)
        # the same bits as the contiguous result, the other blocks untouched
        np.testing.assert_array_equal(wide[:, 128:256], alone.descriptors)
        assert (wide[:, :128] == -1).all() and (wide[:, 256:] == -1).all()
    n = len(alone)
    for bad in (np.zeros((n + 1, 128), np.float32), np.zeros((n, 128), np.float64), wide[:, ::3][:, :128]):
        with pytest.raises(ValueError, match="out must be a float32 array"):
            dense_sift(img, (16, 24), 6, out=bad)
    with pytest.raises(ValueError, match="low_contrast not 'drop'"):
        dense_sift(img, (16, 24), 6, low_contrast="drop", out=np.zeros((n, 128), np.float32))


# ---------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"image": np.zeros((20, 20, 3), np.float32)}, "2-D"),
        ({"image": np.zeros((20, 20), np.uint8)}, "float"),
        ({"image": np.full((20, 20), np.nan, np.float32)}, "NaN"),
        ({"image": [[0.0] * 20] * 20}, "numpy array"),
        ({"patch_sizes": (10,)}, "multiples of 4"),
        ({"patch_sizes": (4,)}, ">= 8"),
        ({"patch_sizes": (0,)}, "multiples of 4"),
        ({"patch_sizes": (16.0,)}, "integers"),
        ({"patch_sizes": ()}, "empty"),
        ({"patch_sizes": (16, 16)}, "duplicates"),
        ({"step": 0}, "step"),
        ({"step": 1.5}, "step"),
        ({"clip": 0.0}, "clip"),
        ({"contrast_threshold": -1.0}, "contrast_threshold"),
        ({"smooth": -1.0}, "smooth"),
    ],
)
def test_input_validation(kwargs, match):
    args = {"image": np.zeros((20, 20), np.float32), "patch_sizes": (16,), "step": 4}
    args.update(kwargs)
    image = args.pop("image")
    with pytest.raises(ValueError, match=match):
        dense_sift(image, **args)


@pytest.mark.parametrize(
    "options",
    [{}, {"window_size": 1.5}, {"root": True}, {"grid_alignment": "centre"}, {"low_contrast": "zero"}],
)
def test_the_mirror_of_dense_sift_is_its_permutation_on_the_mirrored_grid(options):
    """Reference: dense SIFT of the mirrored image.  Every descriptor of the mirror is the image's
    descriptor of the mirrored patch with entries (by, 3 - bx, (4 - k) mod 8), up to float rounding,
    on every frame the two grids share: all of them at this width ((W - P) a multiple of the step)
    with corner-aligned grids; those of the centre-aligned grids (offset on the left only) too."""
    from classify_images.features.dsift import mirror_permutation

    rng = np.random.default_rng(5)
    image = cv2.GaussianBlur(rng.random((61, 88)).astype(np.float32), (5, 5), 1.0)
    sizes, step = (8, 16, 24), 4
    ours = dense_sift(image, sizes, step, **options)
    reference = dense_sift(np.ascontiguousarray(image[:, ::-1]), sizes, step, **options)
    width = image.shape[1]
    permuted, x = ours.descriptors[:, mirror_permutation()], (width - 1) - ours.x
    frames = {(int(p), float(fy), float(fx)): i for i, (p, fy, fx) in enumerate(zip(ours.patch_size, ours.y, x))}
    common = [
        (frames[key], j)
        for j, key in enumerate(zip(reference.patch_size.tolist(), reference.y.tolist(), reference.x.tolist()))
        if key in frames
    ]
    if options.get("grid_alignment") != "centre":
        assert len(common) == len(ours) == len(reference)
    assert len(common) > len(ours) // 2
    a, b = (np.array(side) for side in zip(*common))
    np.testing.assert_allclose(permuted[a], reference.descriptors[b], atol=1e-6)
    permutation = mirror_permutation(384)
    np.testing.assert_array_equal(permutation[permutation], np.arange(384))
    with pytest.raises(ValueError, match="multiple of 128"):
        mirror_permutation(100)
