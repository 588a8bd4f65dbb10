"""Colour spaces of the colour SIFT descriptors (van de Sande, Gevers & Snoek [1]_).

:func:`colour_channels` turns an RGB image (float32, (H, W, 3), values in [0, 1], as
:func:`~classify_images.features.preprocess.load_colour` returns) into the three channels on
which dense SIFT is run one at a time (:class:`~classify_images.features.descriptors.DenseSift`
with ``[sift] color``).  The descriptor of a keypoint is the three 128-dimensional SIFT
descriptors of its channels concatenated in the order below (3 × 128 = 384).

==============  ============================================  ===================================
``color``       channels (R, G, B in [0, 1])                   ranges
==============  ============================================  ===================================
``"opponent"``  O1 = (R − G) / √2                              [−1/√2, 1/√2]
                O2 = (R + G − 2B) / √6                         [−2/√6, 2/√6]
                O3 = (R + G + B) / √3                          [0, √3]
``"hsv"``       H, S, V (Smith's hexcone model):              H in [0, 1) (hue angle / 360°),
                V = max, S = (max − min) / max (0 if max = 0), S, V in [0, 1]
                H from the largest channel, 0 when max = min
``"rgb"``       R, G, B                                        [0, 1]
``"c"``         C1 = O1 / (O3 + ε), C2 = O2 / (O3 + ε),       C1 in [−√(3/2), √(3/2)],
                O3 (opponent channels above; ε = 10⁻⁶)        C2 in [−√2, 1/√2], O3 in [0, √3]
``"lab"``       L*/100, a*/100, b*/100: CIE 1976 L*a*b* of    L*/100 in [0, 1]; on sRGB colours
                the sRGB image, D65 white (below)             a*/100 in [−0.87, 0.99],
                                                              b*/100 in [−1.08, 0.95]
==============  ============================================  ===================================

The first three are the colour spaces of OpponentSIFT, HSV-SIFT and RGB-SIFT as [1]_ defines
them, with the channels unscaled.  ``"c"`` is C-SIFT's: [1]_ (sec. 2.3) describes the C invariant
of Geusebroek et al. [3]_ as the opponent space normalised by intensity, O1/O3 and O2/O3, which
cancels a light-intensity scale (shadow, shading); following Burghouts & Geusebroek [4]_, whose
C-SIFT keeps an intensity SIFT block beside the two chromatic ones, the third channel is the
intensity O3.  The ratios are bounded on non-negative RGB (|R − G| ≤ R + G + B, −2B ≤ R + G − 2B ≤
R + G), but dark pixels amplify noise: one 8-bit step at near-black moves a ratio by up to √(3/2).

``"lab"`` is CIE 1976 L*a*b* [5]_ (computed in float32) of the image read as sRGB (IEC 61966-2-1):
each channel is linearised (c/12.92 for c ≤ 0.04045, ((c + 0.055)/1.055)^2.4 above), mapped to XYZ by the sRGB
matrix (rows 0.4124 0.3576 0.1805 / 0.2126 0.7152 0.0722 / 0.0193 0.1192 0.9505), and divided by
the D65 white point, the XYZ of R = G = B = 1 (the matrix's row sums); then, with
f(t) = t^(1/3) for t > (6/29)³ and t/(3 (6/29)²) + 4/29 below, L* = 116 f(Y/Yn) − 16,
a* = 500 (f(X/Xn) − f(Y/Yn)), b* = 200 (f(Y/Yn) − f(Z/Zn)).  The three channels are divided by
100, so that L*/100 spans the grey image's [0, 1] and ``[sift] contrast_threshold`` means on L*
about what it means on grey SIFT.

SIFT is invariant to an offset of its channel (it sees gradients) and, once normalised, to a positive scale, so the channel
ranges matter only for the contrast threshold: a patch whose raw descriptor norm is at or
below ``[sift] contrast_threshold`` is low-contrast in that channel (kept raw, zeroed or —
for grey only — dropped, ``[sift] low_contrast``), decided **per channel**.  O3 spans
√3 times the grey range, so its raw norms are up to √3 times those of grey SIFT.

Deviations
    From [1]_: in C-SIFT the ratios' denominator is O3 + ε, ε = 10⁻⁶, not O3, so that a black
    pixel (O3 = 0, where O1 = O2 = 0 too) gives C1 = C2 = 0 rather than 0/0; elsewhere
    O3 ≥ 1/(255 √3) ≈ 2.3 × 10⁻³ for 8-bit images, and ε changes the ratios by at most
    4.4 × 10⁻⁴ of their value.  Its block order (C1, C2, O3) follows the opponent space's
    (colour, then intensity); Geusebroek's colour SIFT software puts the intensity block first.
    The order of the 128-dimensional blocks does not change any encoder's result.  Opponent,
    HSV and RGB are as in [1]_; the per-channel SIFT is this package's dense SIFT
    (:func:`~classify_images.features.dsift.dense_sift`, with every ``[sift]`` option) rather
    than the authors' ColorDescriptor binary.  HSV's hue is circular: its wrap between red
    (H ≈ 1) and red (H ≈ 0) makes a spurious gradient, as in [1]_ (who note HSV-SIFT's hue
    instability); it is kept.
From OpenCV's ``cv2.cvtColor(..., cv2.COLOR_RGB2Lab)``
    Lab is computed here by the formulas above (in float32, within 1.1 × 10⁻⁶ of float64, 3.3 ms
    against OpenCV's 1.9 ms on a 300 × 400 image) rather than by OpenCV: OpenCV 5.1's
    float32 conversion interpolates a lookup table, and differs from the CIE formulas by up to
    0.55 in a* (0.23 in L*, 0.44 in b*) on random colours and by up to 0.19 in L* and 0.125 in
    a* on greys, whose a* and b* are then not zero (which would defeat the skip of zero channels
    in :meth:`~classify_images.features.descriptors.DenseSift.compute`).  Here grey pixels
    (R = G = B) get a* = b* = 0 exactly: the formulas give 0 there, up to float32 rounding
    (below 10⁻⁶), which is set to 0.
From VLFeat's ``vl_phow`` ``Color`` option [2]_
    ``vl_phow``'s opponent space replaces O3 by the intensity μ = 0.3 R + 0.59 G + 0.11 B and
    adds 0.01 μ to O1 and O2 ("for monochromatic regions"); its contrast threshold is applied
    to all three channels from one channel's contrast (μ for gray/opponent, V for hsv, the mean
    of the three for rgb), and low-contrast descriptors are zeroed in every channel.  Its
    ``hsv`` is MATLAB's ``rgb2hsv`` (the same H, S, V as here).  Here the channels are the
    paper's and each channel's threshold is its own.  No test compares with ``vl_phow``'s colour
    output: ``cyvlfeat`` (the Python binding used by the grey ``vlfeat`` tests) does not wrap
    ``vl_phow``; its own Python ``phow`` port has a ``color`` argument but returns the first
    channel's 128 values only and computes O2 with an operator-precedence slip, so it is no
    reference.

References
----------
.. [1] K. E. A. van de Sande, T. Gevers and C. G. M. Snoek, "Evaluating color descriptors
   for object and scene recognition", IEEE TPAMI 32(9), 2010, pp. 1582–1596.
.. [2] A. Vedaldi and B. Fulkerson, "VLFeat: an open and portable library of computer
   vision algorithms", ACM Multimedia 2010 (``toolbox/sift/vl_phow.m``).
.. [3] J.-M. Geusebroek, R. van den Boomgaard, A. W. M. Smeulders and H. Geerts, "Color
   invariance", IEEE TPAMI 23(12), 2001, pp. 1338–1350.
.. [4] G. J. Burghouts and J.-M. Geusebroek, "Performance evaluation of local colour
   invariants", Computer Vision and Image Understanding 113(1), 2009, pp. 48–62.
.. [5] CIE 15:2004, Colorimetry, 3rd edition (CIELAB, sec. 8.2.1); IEC 61966-2-1:1999, sRGB.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "COLOR_SPACES",
    "C_INVARIANT_EPSILON",
    "D65_WHITE",
    "GRAY",
    "SRGB_TO_XYZ",
    "colour_channels",
    "n_channels",
    "skipped_on_grey",
]

#: Grey (one channel, the default) and the colour spaces of ``[sift] color``.
GRAY = "gray"
COLOR_SPACES = (GRAY, "opponent", "hsv", "rgb", "c", "lab")

_SQRT2, _SQRT3, _SQRT6 = np.sqrt(2.0), np.sqrt(3.0), np.sqrt(6.0)

#: C-SIFT's ε: the ratios are O1 / (O3 + ε) and O2 / (O3 + ε) (module docstring, Deviations).
C_INVARIANT_EPSILON = 1e-6

#: Linear sRGB -> CIE XYZ (IEC 61966-2-1), rows X, Y, Z.
SRGB_TO_XYZ = np.array(
    [
        [0.4124, 0.3576, 0.1805],
        [0.2126, 0.7152, 0.0722],
        [0.0193, 0.1192, 0.9505],
    ]
)
#: D65 white, the XYZ of R = G = B = 1.
D65_WHITE = SRGB_TO_XYZ.sum(axis=1)
#: Linear sRGB -> (X/Xn, Y/Yn, Z/Zn), transposed for ``rgb @ _XYZ_OVER_WHITE``.
_XYZ_OVER_WHITE = np.ascontiguousarray((SRGB_TO_XYZ / D65_WHITE[:, None]).T.astype(np.float32))


def n_channels(space: str) -> int:
    """Channels of ``space``: 1 for grey, 3 for a colour space."""
    _check_space(space)
    return 1 if space == GRAY else 3


def skipped_on_grey(space: str) -> str:
    """What :meth:`~classify_images.features.descriptors.DenseSift.compute` skips on a grey image
    (R = G = B) in ``space``: its zero channels and the copies of a computed one, as a phrase."""
    _check_space(space)
    return {
        GRAY: "nothing",
        "opponent": "O1 and O2 are zero, only O3 is computed",
        "hsv": "H and S are zero, only V is computed",
        "rgb": "G and B repeat R, only R is computed",
        "c": "O1/O3 and O2/O3 are zero, only O3 is computed",
        "lab": "a* and b* are zero, only L* is computed",
    }[space]


def _check_space(space: str) -> None:
    if space not in COLOR_SPACES:
        raise ValueError(f"colour space {space!r}: allowed values are {', '.join(map(repr, COLOR_SPACES))}")


def _hsv(r: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Smith's hexcone HSV, H in [0, 1) (as :func:`colorsys.rgb_to_hsv` and MATLAB's ``rgb2hsv``)."""
    v = np.maximum(np.maximum(r, g), b)
    c = v - np.minimum(np.minimum(r, g), b)
    s = np.divide(c, v, out=np.zeros_like(v), where=v > 0)
    safe = np.where(c > 0, c, 1.0)
    rc, gc, bc = (v - r) / safe, (v - g) / safe, (v - b) / safe
    h = np.where(r == v, bc - gc, np.where(g == v, 2.0 + rc - bc, 4.0 + gc - rc))
    h = np.where(c > 0, np.mod(h / 6.0, 1.0), 0.0)
    return h, s, v


def _opponent(r: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """O1, O2, O3 of van de Sande et al. [1]_ (eq. 2 there)."""
    return (r - g) / _SQRT2, (r + g - 2.0 * b) / _SQRT6, (r + g + b) / _SQRT3


def _c_invariant(r: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """C-SIFT's channels O1 / (O3 + ε), O2 / (O3 + ε), O3 (module docstring)."""
    o1, o2, o3 = _opponent(r, g, b)
    denominator = o3 + C_INVARIANT_EPSILON
    return o1 / denominator, o2 / denominator, o3


def _cie_f(t: np.ndarray) -> np.ndarray:
    """CIELAB's f: the cube root above (6/29)³, the tangent line t / (3 (6/29)²) + 4/29 below."""
    delta = 6.0 / 29.0
    return np.where(t > t.dtype.type(delta**3), np.cbrt(t), t * t.dtype.type(1 / (3 * delta**2)) + t.dtype.type(4 / 29))


def _lab(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """L*/100, a*/100, b*/100 of sRGB values in [0, 1], D65 white (module docstring).

    In float32 (a power, a cube root and a 3 × 3 product per pixel, vectorised): within 1.1 × 10⁻⁶
    of the float64 formulas, at a quarter of their time."""
    one = np.float32
    linear = np.where(rgb <= one(0.04045), rgb * one(1 / 12.92), ((rgb + one(0.055)) * one(1 / 1.055)) ** one(2.4))
    relative_xyz = linear @ _XYZ_OVER_WHITE
    fx, fy, fz = np.moveaxis(_cie_f(relative_xyz), -1, 0)
    grey = (rgb[..., 0] == rgb[..., 1]) & (rgb[..., 1] == rgb[..., 2])
    # a* = b* = 0 exactly on grey pixels, not rounding noise: zero channels stay zero (DenseSift.compute)
    a_star = np.where(grey, one(0), one(5) * (fx - fy))
    b_star = np.where(grey, one(0), one(2) * (fy - fz))
    lightness = np.maximum(one(1.16) * fy - one(0.16), one(0))  # black: L* = 0, not a rounding −1e-8
    return lightness, a_star, b_star


def colour_channels(rgb: np.ndarray, space: str) -> np.ndarray:
    """The channels of ``space`` (table in the module docstring) of an RGB image.

    Parameters
    ----------
    rgb : ndarray, shape (H, W, 3), floating, values in [0, 1]
        Channels in R, G, B order.
    space : {"opponent", "hsv", "rgb", "c", "lab"}

    Returns
    -------
    ndarray of float32, shape (3, H, W), C-contiguous
        The three channels, each C-contiguous.

    Raises
    ------
    ValueError
        Not an (H, W, 3) floating array, or an unknown or grey ``space``.
    """
    _check_space(space)
    if space == GRAY:
        raise ValueError("colour_channels needs a colour space; grey images are one channel already")
    if (
        not isinstance(rgb, np.ndarray)
        or rgb.ndim != 3
        or rgb.shape[2] != 3
        or not np.issubdtype(rgb.dtype, np.floating)
    ):
        raise ValueError(f"expected an RGB float image of shape (H, W, 3), got {getattr(rgb, 'shape', type(rgb))}")
    if space == "lab":
        return np.ascontiguousarray(np.stack(_lab(rgb.astype(np.float32, copy=False))))
    r, g, b = (rgb[..., k].astype(np.float64) for k in range(3))
    if space == "opponent":
        channels = _opponent(r, g, b)
    elif space == "hsv":
        channels = _hsv(r, g, b)
    elif space == "c":
        channels = _c_invariant(r, g, b)
    else:
        channels = (r, g, b)
    return np.ascontiguousarray(np.stack(channels).astype(np.float32))
