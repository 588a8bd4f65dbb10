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
==============  ============================================  ===================================

These are the colour spaces of OpponentSIFT, HSV-SIFT and RGB-SIFT as [1]_ defines them,
with the channels unscaled.  SIFT is invariant to an offset of its
channel (it sees gradients) and, once normalised, to a positive scale, so the channel
ranges matter only for the contrast threshold: a patch whose raw descriptor norm is at or
below ``[sift] contrast_threshold`` is low-contrast in that channel (kept raw, zeroed or —
for grey only — dropped, ``[sift] low_contrast``), decided **per channel**.  O3 spans
√3 times the grey range, so its raw norms are up to √3 times those of grey SIFT.

Deviations
    From [1]_: none in the colour spaces; the per-channel SIFT is this package's dense SIFT
    (:func:`~classify_images.features.dsift.dense_sift`, with every ``[sift]`` option) rather
    than the authors' ColorDescriptor binary.  HSV's hue is circular: its wrap between red
    (H ≈ 1) and red (H ≈ 0) makes a spurious gradient, as in [1]_ (who note HSV-SIFT's hue
    instability); it is kept.
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
"""

from __future__ import annotations

import numpy as np

__all__ = ["COLOR_SPACES", "GRAY", "colour_channels", "n_channels", "skipped_on_grey"]

#: Grey (one channel, the default) and the colour spaces of ``[sift] color``.
GRAY = "gray"
COLOR_SPACES = (GRAY, "opponent", "hsv", "rgb")

_SQRT2, _SQRT3, _SQRT6 = np.sqrt(2.0), np.sqrt(3.0), np.sqrt(6.0)


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


def colour_channels(rgb: np.ndarray, space: str) -> np.ndarray:
    """The channels of ``space`` (table in the module docstring) of an RGB image.

    Parameters
    ----------
    rgb : ndarray, shape (H, W, 3), floating, values in [0, 1]
        Channels in R, G, B order.
    space : {"opponent", "hsv", "rgb"}

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
    r, g, b = (rgb[..., k].astype(np.float64) for k in range(3))
    if space == "opponent":
        channels = ((r - g) / _SQRT2, (r + g - 2.0 * b) / _SQRT6, (r + g + b) / _SQRT3)
    elif space == "hsv":
        channels = _hsv(r, g, b)
    else:
        channels = (r, g, b)
    return np.ascontiguousarray(np.stack(channels).astype(np.float32))
