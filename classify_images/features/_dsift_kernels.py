"""Compiled kernels of :mod:`classify_images.features.dsift` (private).

Four entry points, called by :func:`~classify_images.features.dsift.dense_sift`,
:func:`~classify_images.features.dsift.normalize_sift` and
:func:`~classify_images.features.dsift.quantize_descriptors` once per patch size
and image; the mathematics they implement is in the technical section of
:mod:`classify_images.features.dsift`.

* :func:`binned_orientation_maps` — gradient, orientation binning and the
  separable triangular spatial filter, evaluated only at the rows and columns
  where spatial-bin centres fall;
* :func:`gather_descriptors` — the 4 x 4 x 8 values of every patch, then the
  normalisation of each descriptor and, when asked, its RootSIFT mapping;
* :func:`normalize_descriptors` — the normalisation alone, for descriptors
  given as rows;
* :func:`quantize_values` — the uint8 code of every value, in one pass.

The first three work in float32 with ``fastmath``; all release the GIL (``nogil``); they
are single-threaded (call :func:`~classify_images.features.dsift.dense_sift`
from several threads to use several cores).  There is no Python loop over
patches or pixels.

Angles use an odd polynomial for ``atan`` on ``[0, 1]``,
``p(r) = r * sum_i c_i r**(2 i)`` (``i = 0 .. 7``), whose coefficients were
fitted by iteratively reweighted least squares (Lawson's minimax iteration)
on Chebyshev nodes: its absolute error is below 3.8e-8 rad in float64 and
below 2e-7 rad evaluated in float32, which moves an orientation weight by
less than 3e-7.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["binned_orientation_maps", "gather_descriptors", "normalize_descriptors", "quantize_values"]

# Coefficients c_0 .. c_7 of the odd polynomial atan approximation (see above).
_ATAN_COEFFS = (
    0.9999993356,
    -0.3332986078,
    0.1994656565,
    -0.1390862955,
    0.09642197328,
    -0.05591232676,
    0.02186295786,
    -0.004054567209,
)

_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7 = (np.float32(c) for c in _ATAN_COEFFS)
_FOUR_OVER_PI = np.float32(4.0 / math.pi)


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy", inline="always")
def _octant_angle(gx, gy):
    """atan2(gy, gx) in units of pi/4, in [0, 8); branch-free polynomial atan."""
    ax = abs(gx)
    ay = abs(gy)
    mx = max(ax, ay)
    mn = min(ax, ay)
    q = mn / (mx + np.float32(1e-30))
    q2 = q * q
    p = _C7
    p = p * q2 + _C6
    p = p * q2 + _C5
    p = p * q2 + _C4
    p = p * q2 + _C3
    p = p * q2 + _C2
    p = p * q2 + _C1
    p = p * q2 + _C0
    a = p * q * _FOUR_OVER_PI  # atan(min / max) / (pi / 4), in [0, 1]
    a = np.float32(2.0) - a if ay > ax else a
    a = np.float32(4.0) - a if gx < 0 else a
    a = np.float32(8.0) - a if gy < 0 else a
    a = a - np.float32(8.0) if a >= np.float32(8.0) else a
    return a


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _orientation_row(img, y, t_buf, m_buf):
    """Orientation coordinate t in [0, 8) and gradient magnitude of row y."""
    H, W = img.shape
    if y == 0:
        ym, yp, sy = 0, 1, np.float32(1.0)
    elif y == H - 1:
        ym, yp, sy = H - 2, H - 1, np.float32(1.0)
    else:
        ym, yp, sy = y - 1, y + 1, np.float32(0.5)
    r = img[y]
    rm = img[ym]
    rp = img[yp]
    half = np.float32(0.5)
    # borders: one-sided differences
    gx = r[1] - r[0]
    gy = sy * (rp[0] - rm[0])
    t_buf[0] = _octant_angle(gx, gy)
    m_buf[0] = math.sqrt(gx * gx + gy * gy)
    gx = r[W - 1] - r[W - 2]
    gy = sy * (rp[W - 1] - rm[W - 1])
    t_buf[W - 1] = _octant_angle(gx, gy)
    m_buf[W - 1] = math.sqrt(gx * gx + gy * gy)
    for x in range(1, W - 1):
        gx = half * (r[x + 1] - r[x - 1])
        gy = sy * (rp[x] - rm[x])
        t_buf[x] = _octant_angle(gx, gy)
        m_buf[x] = math.sqrt(gx * gx + gy * gy)


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def binned_orientation_maps(img, col_ptr, col_j8, col_w, row_ptr, row_i, row_w, n_cols, n_rows):
    """Orientation maps filtered by the triangular kernel, at anchor rows/cols.

    ``col_ptr/col_j8/col_w`` list, for each image column x, the anchor
    columns it reaches (as ``8 * anchor index``, uint64) and its triangular
    weight (CSR); ``row_*`` likewise for rows.  Returns G of shape
    (n_rows, n_cols, 8) with
    ``G[i, j, k] = sum_{y, x} w_row(y, i) w_col(x, j) O_k[y, x]``.
    Each row is scattered horizontally into a row buffer (two orientation
    channels per pixel and reached anchor column), then added with its
    vertical weights to the anchor rows it reaches.
    """
    H, W = img.shape
    n8 = n_cols * 8
    F = np.empty(n8, dtype=np.float32)
    G = np.zeros((n_rows, n8), dtype=np.float32)
    t_buf = np.empty(W, dtype=np.float32)
    m_buf = np.empty(W, dtype=np.float32)
    seven = np.uint64(7)
    for y in range(H):
        r0 = row_ptr[y]
        r1 = row_ptr[y + 1]
        if r1 == r0:
            continue
        _orientation_row(img, y, t_buf, m_buf)
        F[:] = 0.0
        for x in range(W):
            t = t_buf[x]
            m = m_buf[x]
            kf = np.uint64(int(t))  # floor(t) as t >= 0
            f = t - np.float32(kf)
            k0 = kf & seven
            k1 = (kf + np.uint64(1)) & seven
            m1 = m * f
            m0 = m - m1
            for e in range(col_ptr[x], col_ptr[x + 1]):
                b = col_j8[e]
                w = col_w[e]
                F[b + k0] += w * m0
                F[b + k1] += w * m1
        for e in range(r0, r1):
            Gi = G[row_i[e]]
            w = row_w[e]
            for q in range(n8):
                Gi[q] += w * F[q]
    return G.reshape((n_rows, n_cols, 8))


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _normalize_row(d, contrast_threshold, clip):
    """ScSPM normalisation of one descriptor in place; returns its raw norm."""
    n = d.shape[0]
    s = np.float32(0.0)
    for i in range(n):
        s += d[i] * d[i]
    r = math.sqrt(s)
    if r > contrast_threshold:
        inv = np.float32(1.0) / np.float32(r)
        s2 = np.float32(0.0)
        for i in range(n):
            v = min(d[i] * inv, clip)
            d[i] = v
            s2 += v * v
        inv2 = np.float32(1.0) / np.float32(math.sqrt(s2))
        for i in range(n):
            d[i] *= inv2
    return r


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _root_row(d):
    """RootSIFT of one non-negative descriptor in place: ``d <- sqrt(d / ||d||_1)`` (a zero row stays zero)."""
    s = np.float32(0.0)
    for i in range(d.shape[0]):
        s += d[i]
    inv = np.float32(1.0) / max(s, np.float32(1e-30))
    for i in range(d.shape[0]):
        d[i] = math.sqrt(d[i] * inv)


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def gather_descriptors(
    G, row_idx, col_idx, bin_weight, out, raw_norm, offset, normalize, contrast_threshold, clip, root
):
    """Copy the 4 x 4 x 8 values of every patch of one size into ``out``.

    Patch ``(py, px)`` of the grid becomes row ``offset + py * nx + px`` of
    ``out``; its spatial bin ``(by, bx)`` reads ``G[row_idx[py, by],
    col_idx[px, bx]]`` (the 8 orientations) times ``bin_weight[by, bx]``.  ``raw_norm`` receives each raw
    descriptor's L2 norm; with ``normalize`` the row is then normalised in
    place as :func:`normalize_descriptors` does, and with ``root`` too, each row whose raw
    norm exceeds ``contrast_threshold`` is then mapped to RootSIFT (``sqrt(v / ||v||_1)``).
    ``out`` may be a column block of a wider array (each row contiguous).
    """
    ny = row_idx.shape[0]
    nx = col_idx.shape[0]
    thr = np.float32(contrast_threshold)
    cl = np.float32(clip)
    # Each row is built in a contiguous buffer, then copied: the same compiled arithmetic (and
    # the same bits) whether ``out`` is contiguous or a column block of a wider array.
    d = np.empty(out.shape[1], dtype=np.float32)
    for py in range(ny):
        for px in range(nx):
            n = offset + py * nx + px
            for by in range(4):
                gr = G[row_idx[py, by]]
                for bx in range(4):
                    src = gr[col_idx[px, bx]]
                    wb = bin_weight[by, bx]
                    b = (by * 4 + bx) * 8
                    for k in range(8):
                        d[b + k] = src[k] * wb
            if normalize:
                r = _normalize_row(d, thr, cl)
                raw_norm[n] = r
                if root and r > thr:
                    _root_row(d)
            else:
                s = np.float32(0.0)
                for i in range(d.shape[0]):
                    s += d[i] * d[i]
                raw_norm[n] = math.sqrt(s)
            out[n, :] = d


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def normalize_descriptors(D, raw_norm, contrast_threshold, clip):
    """ScSPM normalisation of every row of ``D`` in place; raw norms into ``raw_norm``."""
    thr = np.float32(contrast_threshold)
    cl = np.float32(clip)
    for n in range(D.shape[0]):
        raw_norm[n] = _normalize_row(D[n], thr, cl)


@njit(cache=True, nogil=True, error_model="numpy")
def quantize_values(values, scale, out):
    """``out = uint8(min(max(rint(scale * v), 0), 255))`` for every entry of ``values`` (flat,
    float32), in one pass; IEEE arithmetic (no ``fastmath``): the same as NumPy's three steps."""
    for i in range(values.shape[0]):
        q = np.rint(values[i] * scale)
        if q < 0:
            q = 0
        elif q > 255:
            q = 255
        out[i] = np.uint8(q)
    return out
