"""Dense SIFT descriptors on a regular grid (VLFeat ``dsift`` style, flat window).

:func:`dense_sift` computes SIFT descriptors [1]_ of every patch of a dense
regular grid directly from gradient orientation maps, as VLFeat's fast dense
SIFT does [2]_, instead of calling OpenCV's ``SIFT.compute`` once per
keypoint.  It returns a :class:`DenseSIFT`.  The compiled kernels are in the
private module :mod:`classify_images.features._dsift_kernels`; the grid
tables they read are built here.

Parameters at a glance (details in :func:`dense_sift`)
------------------------------------------------------
::

    patch_sizes         patch widths P in pixels, multiples of 4 and >= 8: 4 x 4 bins of s = P/4 px
    step                grid step in pixels, the same for every patch size
    smooth              True: Gaussian of sigma(s, magnif) per size; False: none; a number: that sigma
    magnif              magnification factor: the smoothing scale is s / magnif (with smooth=True)
    contrast_threshold  raw L2 norm at or below which a patch is low-contrast and kept raw
    clip                upper bound on the unit-normalised values before renormalising
    normalize           False: return the raw descriptors, no normalisation at all
    smoothing           sigma rule with smooth=True: "dsift" (default) or "phow" (s / magnif)
    window_size         None (every bin weighs 1) or VLFeat's Gaussian bin weights (vl_phow: 1.5)
    bin_centres         "patch" (default, half-integers for even s) or "integer" (VLFeat)
    grid_alignment      "corner" (default, every grid at 0) or "centre" (vl_phow)
    low_contrast        "keep" (default, ScSPM), "zero" (vl_phow) or "drop"
    root                RootSIFT (Hellinger) mapping of the normalised descriptors

Fields of the result (:class:`DenseSIFT`)::

    descriptors         (N, 128) float32, index (by * 4 + bx) * 8 + k
    x, y                (N,) float32 patch centres, x0 + (P - 1) / 2
    patch_size          (N,) int16 patch width P of each descriptor
    image_shape         (H, W) of the image the descriptors were computed on
    raw_norm            (N,) float32 L2 norm of each descriptor before normalisation

Technical details
-----------------
Geometry and notation
    Pixel ``(row y, column x)`` has its centre at integer coordinates
    ``(x, y)``; the y axis points down.  A *patch* of size ``P`` with top-left
    corner ``(x0, y0)`` covers the pixels ``x0 .. x0+P-1`` and ``y0 .. y0+P-1``.
    It is divided into 4 x 4 spatial bins of ``s = P / 4`` pixels; spatial bin
    ``b`` (``b = 0..3``) along an axis covers the pixels
    ``x0 + b*s .. x0 + (b+1)*s - 1`` and its centre is at
    ``c_b = x0 + b*s + (s - 1)/2`` (a half-integer when ``s`` is even).  The
    frame of a patch is its centre ``(x0 + (P-1)/2, y0 + (P-1)/2)`` and its
    size ``P``.

Grid
    Patch corners are at ``0, step, 2*step, ...`` along each axis while the
    patch fits inside the image (``x0 + P <= W``): ``floor((W - P) / step) + 1``
    corners along x when ``W >= P``, none otherwise.  Each patch size has its
    own grid, all starting at 0.  Descriptors are returned size after size (in
    the order the sizes are given) and, within a size, in row-major grid order
    (``y0`` outer, ``x0`` inner).

Smoothing
    The image is first smoothed with a Gaussian of standard deviation
    ``sigma = sqrt(max((s / magnif)**2 - 0.25, 0))`` (``magnif = 6``): the
    scale ``s / magnif`` of the bin size, less an assumed pre-existing blur of
    0.5 px (``0.25 = 0.5**2``).  Each patch size therefore has its own
    smoothed image.  The Gaussian is sampled on ``[-ceil(4 sigma),
    ceil(4 sigma)]``, normalised to sum 1, applied separably, and the image is
    extended by replicating its border pixels.

Gradient
    Central differences ``gx = (I[y, x+1] - I[y, x-1]) / 2`` and
    ``gy = (I[y+1, x] - I[y-1, x]) / 2``, with the one-sided differences
    ``I[.,1] - I[.,0]`` and ``I[.,W-1] - I[.,W-2]`` on the first and last
    column (rows likewise), exactly as :func:`numpy.gradient`.  Magnitude
    ``m = sqrt(gx**2 + gy**2)``; angle ``theta = atan2(gy, gx)`` taken in
    ``[0, 2 pi)`` (counter-clockwise from +x in array coordinates, i.e.
    clockwise on screen because y points down).

Orientation maps
    With ``t = theta / (2 pi / 8)`` in ``[0, 8)``, ``k0 = floor(t)``,
    ``k1 = (k0 + 1) mod 8`` and ``f = t - k0``, each pixel adds
    ``m * (1 - f)`` to orientation map ``k0`` and ``m * f`` to map ``k1``
    (linear interpolation between the two nearest of 8 orientation bins
    centred at ``0, 45, ..., 315`` degrees).

Spatial binning (flat window)
    A pixel at ``(x, y)`` contributes to spatial bin ``(by, bx)`` of a patch
    with the bilinear (separable triangular) weight
    ``w(x - c_bx) * w(y - c_by)`` where ``w(d) = max(0, 1 - |d| / s)``.  No
    Gaussian window is applied over the patch.  The support of a patch is
    therefore the patch itself plus a margin of ``floor(s / 2)`` pixels on
    each side (the pixels with ``|x - c_0| < s`` ... ``|x - c_3| < s``);
    pixels outside the image contribute nothing.  Descriptor entry

    ``D[by, bx, k] = sum_{x, y} w(x - c_bx) w(y - c_by) O_k[y, x]``

    is computed for all patches at once by filtering each orientation map
    with the triangular kernel (separably, and only at the rows and columns
    where bin centres fall) and reading the result at the bin centres.  The
    weights of one pixel to consecutive bins sum to 1, so a raw entry is a
    sum of gradient magnitudes (intensity per pixel).

Descriptor layout
    128 values, index ``(by * 4 + bx) * 8 + k``: spatial y bin (top to
    bottom) slowest, then spatial x bin (left to right), then orientation
    ``k`` (angle ``k * 45`` degrees) fastest, i.e. ``D.reshape(4, 4, 8)``.

Normalisation
    With the raw norm ``r = ||D||_2``: if ``r > contrast_threshold`` the
    descriptor is divided by ``r``, clipped at ``clip`` (0.2) and divided by
    its new norm (unit length); otherwise the raw, small descriptor is kept
    as is (a low-contrast patch is *not* blown up to unit length).  For an
    image in ``[0, 1]`` a textured 16 x 16 patch has ``r`` of a few units
    and a flat or nearly flat patch has ``r`` well below 1, so the default
    threshold 1.0 is meaningful on that scale (measured fractions of
    low-contrast patches: see docs/benchmarks/dense-sift.md, "Dense SIFT",
    paragraph "Low-contrast fraction").

Mirror (left-right flip)
    Mirroring the image, ``I'(y, x) = I(y, W - 1 - x)``, negates ``gx`` and keeps ``gy``, so
    ``theta' = pi - theta`` and ``t' = 4 - t``: a pixel's weights to orientation maps ``k0`` and
    ``k0 + 1`` go to maps ``(4 - k0) mod 8`` and ``(3 - k0) mod 8`` with the same fractions.  The
    patch at corner ``x0`` of the mirror is the mirror of the patch at corner ``W - P - x0``,
    its spatial bin ``bx`` that patch's bin ``3 - bx`` (the bin centres, the triangular
    weights, the smoothing, the border rules and the window weights are symmetric).  Hence
    the mirror's descriptor of a patch is the image's descriptor of the mirrored patch with its
    entries permuted, ``(by, bx, k) -> (by, 3 - bx, (4 - k) mod 8)``
    (:func:`mirror_permutation`), at centre ``x' = W - 1 - x``; the normalisation, RootSIFT and
    quantisation act entry by entry and commute with it.  This holds for ``bin_centres =
    "patch"`` (VLFeat's integer bin centres are not symmetric about the patch centre).  It
    gives the mirror's descriptors on the *mirrored grid* (corners ``W - P - x0``), which is the
    grid of the mirrored image when ``(W - P)`` is a multiple of ``step``.

Quantisation
    Descriptors are stored as uint8 ``min(round(512 v), 255)``
    (:func:`quantize_descriptors`) and read back as ``q / 512``
    (:func:`dequantize_descriptors`).

Deviations from VLFeat [2]_ and from the ScSPM reference code [3]_, [4]_
------------------------------------------------------------------------
From VLFeat's ``vl_dsift`` / ``vl_phow`` [2]_ (each of these has an option that
removes it, below; with ``bin_centres="integer"`` and the same ``window_size`` our
descriptors equal VLFeat's ``fast`` dsift up to its coarser ``atan`` approximation
and the border handling: measured in docs/benchmarks/dense-sift.md, "Dense SIFT vs VLFeat dsift
(issue 11)"; test ``tests/test_dsift_options.py``, marker ``vlfeat``):

* *Bin centres.*  VLFeat puts every bin centre on an integer pixel, so its
  outer bin centres are ``3 s`` apart and a frame spans ``3 s + 1`` pixels
  between them; here a patch covers exactly ``P = 4 s`` pixels and, for even
  ``s``, the bin centres are half-integers (option ``bin_centres``).
* *Window.*  VLFeat's flat-window ("fast") path still weighs each spatial bin
  by the mean of a Gaussian window over it (``WindowSize``: 2 bins in
  ``vl_dsift``, 1.5 in ``vl_phow``); here every bin has weight 1 (option
  ``window_size``).
* *Borders.*  VLFeat filters the orientation maps extended by continuity
  (border values repeated); here pixels outside the image contribute
  nothing.
* *Smoothing.*  ``vl_phow`` smooths with ``sigma = s / magnif``; the
  ``sqrt((s / magnif)**2 - 0.25)`` used here is the formula the ``vl_dsift``
  documentation gives to match ``vl_sift``, whose input is assumed blurred by
  0.5 px.  ``vl_phow`` also offsets the grids of the different sizes so that
  their centres align; here every grid starts at corner 0 (options
  ``smoothing`` and ``grid_alignment``).
* *Contrast.*  VLFeat always normalises (dividing by ``norm + eps``) and
  ``vl_phow`` then sets descriptors whose raw norm is below 0.005 to zero;
  here a low-contrast descriptor is kept raw, as in ScSPM's
  ``sp_normalize_sift`` [3]_ (option ``low_contrast``).  VLFeat's norm is on
  another scale, smaller by a factor that grows with the bin size (the ratio
  per patch size is in docs/benchmarks/dense-sift.md), so ``vl_phow``'s threshold 0.005 is
  well below our default 1.0 in our units.
* *Quantisation.*  VLFeat truncates ``512 v`` to uint8 (error ``< 1/512``);
  here it is rounded (error ``<= 1/1024`` below saturation).

From the ScSPM reference code [3]_ (its ``sp_dense_sift``, taken from the
spatial pyramid code of [4]_):

* *Image scale.*  The reference divides the image by its maximum; here the
  image is used as loaded (values ``/ 255``), so the contrast threshold
  compares patches across images on the same scale.
* *Gradient.*  The reference filters with derivative-of-Gaussian kernels;
  here the image is smoothed per patch size as above and differentiated by
  central differences.
* *Orientation binning.*  The reference gives each gradient to all 8
  orientations with the weight ``max(cos(theta - theta_k), 0)**9``; here it
  is split linearly between the two nearest orientations, as in SIFT [1]_
  and VLFeat [2]_.

The triangular spatial weights of width ``s`` and the normalisation (raw
norm threshold 1, clip 0.2, renormalise) are those of the reference.

Implementation notes
--------------------
Per patch size the image is smoothed (OpenCV ``sepFilter2D``), then one
compiled pass over the rows computes each row's gradient orientation and
magnitude, scatters each pixel's two orientation values with their triangular
column weights into a buffer holding only the columns where bin centres fall
(a precomputed pixel -> bin-centre table, see :func:`_axis_table`), and adds
that buffer with its triangular row weights into the rows where bin centres
fall.  A second pass gathers the 4 x 4 x 8 values of every patch and
normalises them.  Angles come from a polynomial approximation of ``atan``
(VLFeat uses a fast approximation too); its error bound is given in
:mod:`classify_images.features._dsift_kernels`.  The kernels release the GIL
but are single-threaded: call :func:`dense_sift` from several threads to use
several cores.

References
----------
.. [1] D. G. Lowe, "Distinctive image features from scale-invariant
   keypoints", International Journal of Computer Vision 60(2), 91–110, 2004.
.. [2] A. Vedaldi and B. Fulkerson, "VLFeat: an open and portable library of
   computer vision algorithms", ACM Multimedia 2010 (``vl/dsift.h``,
   ``vl/dsift.c``, ``vl_phow.m``).
.. [3] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear spatial pyramid matching
   using sparse coding for image classification", CVPR 2009, and its
   reference MATLAB code (``sp_dense_sift.m``, ``sp_normalize_sift.m``).
.. [4] S. Lazebnik, C. Schmid and J. Ponce, "Beyond bags of features: spatial
   pyramid matching for recognizing natural scene categories", CVPR 2006.
.. [5] R. Arandjelović and A. Zisserman, "Three things everyone should know to
   improve object retrieval", CVPR 2012 (RootSIFT).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral, Real

import cv2
import numpy as np

from ._dsift_kernels import binned_orientation_maps, gather_descriptors, normalize_descriptors, quantize_values

__all__ = [
    "IMPLEMENTATION_VERSION",
    "DESCRIPTOR_SIZE",
    "DenseSIFT",
    "dense_sift",
    "bin_window_weights",
    "dequantize_descriptors",
    "grid_offsets",
    "root_sift",
    "gaussian_kernel",
    "grid_frames",
    "grid_origins",
    "mirror_permutation",
    "normalize_sift",
    "opencv_keypoint_size",
    "quantize_descriptors",
    "smooth_image",
    "smoothing_sigma",
    "triangular_kernel",
]

#: Version of this module's numerical output.  Bump it whenever a change alters the
#: numbers it produces: it is part of the stage-cache keys and of the feature sets'
#: config hash, so results computed by the old code are not reused.  It covers the
#: kernels of :mod:`._dsift_kernels` as well.
IMPLEMENTATION_VERSION = 1


N_SPATIAL_BINS: int = 4
N_ORIENTATIONS: int = 8
DESCRIPTOR_SIZE: int = N_SPATIAL_BINS * N_SPATIAL_BINS * N_ORIENTATIONS  # 128
DEFAULT_MAGNIF: float = 6.0
QUANTIZATION_SCALE: float = 512.0


# --------------------------------------------------------------------------
# Result container
# --------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class DenseSIFT:
    """Dense SIFT descriptors of one image.

    Attributes
    ----------
    descriptors : ndarray of float32, shape (N, 128)
        Descriptors, layout ``(y bin, x bin, orientation)`` (see module
        docstring).  Contrasted patches have unit L2 norm; low-contrast
        patches keep their raw values (norm ``<= contrast_threshold``).
    x, y : ndarray of float32, shape (N,)
        Patch centres in pixel coordinates of the input image
        (``x0 + (P - 1) / 2``).
    patch_size : ndarray of int16, shape (N,)
        Patch width ``P`` in pixels (4 bins of ``P / 4`` pixels).
    image_shape : tuple of int
        ``(height, width)`` of the image the descriptors were computed on.
    raw_norm : ndarray of float32, shape (N,), optional
        L2 norm of each raw (un-normalised) descriptor; the patch is
        low-contrast when ``raw_norm <= contrast_threshold``.
    """

    descriptors: np.ndarray
    x: np.ndarray
    y: np.ndarray
    patch_size: np.ndarray
    image_shape: tuple[int, int]
    raw_norm: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.descriptors.shape[0])

    def low_contrast(self, contrast_threshold: float = 1.0) -> np.ndarray:
        """Boolean mask of the low-contrast descriptors (needs ``raw_norm``)."""
        if self.raw_norm is None:
            raise ValueError("raw_norm is not available on this DenseSIFT")
        return self.raw_norm <= contrast_threshold


# --------------------------------------------------------------------------
# Small pure helpers
# --------------------------------------------------------------------------
def smoothing_sigma(patch_size: int, magnif: float = DEFAULT_MAGNIF) -> float:
    """Standard deviation of the Gaussian smoothing used for a patch size.

    ``sigma = sqrt(max((s / magnif)**2 - 0.25, 0))`` with bin size
    ``s = patch_size / 4``: the scale ``s / magnif`` less an assumed blur of
    0.5 px already in the image (``vl_dsift``'s formula, see the module
    docstring); e.g. 0.44 px for 16-px patches, 1.59 px for 40.
    """
    s = patch_size / N_SPATIAL_BINS
    return math.sqrt(max((s / magnif) ** 2 - 0.25, 0.0))


def gaussian_kernel(sigma: float) -> np.ndarray:
    """Sampled 1-D Gaussian ``exp(-u**2 / (2 sigma**2))``, ``|u| <= ceil(4 sigma)``.

    Normalised to sum 1, float32.  ``sigma <= 0`` gives the identity ``[1]``.
    """
    return _gaussian_kernel_cached(float(sigma)).copy()


@functools.lru_cache(maxsize=64)
def _gaussian_kernel_cached(sigma: float) -> np.ndarray:
    if sigma <= 0:
        return np.ones(1, dtype=np.float32)
    radius = int(math.ceil(4.0 * sigma))
    u = np.arange(-radius, radius + 1, dtype=np.float64)
    k = np.exp(-(u * u) / (2.0 * sigma * sigma))
    k = (k / k.sum()).astype(np.float32)
    k.setflags(write=False)
    return k


def smooth_image(image: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian smoothing with replicated borders (float32).

    ``sigma <= 0`` returns the image unchanged (as float32, C-contiguous).
    """
    img = np.ascontiguousarray(image, dtype=np.float32)
    if sigma <= 0:
        return img
    k = _gaussian_kernel_cached(float(sigma))
    return cv2.sepFilter2D(img, cv2.CV_32F, k, k, borderType=cv2.BORDER_REPLICATE)


def triangular_kernel(bin_size: int) -> tuple[np.ndarray, int]:
    """Bilinear spatial weights of one bin, sampled at pixel offsets.

    Returns ``(weights, first_offset)``: pixel ``anchor + first_offset + j``
    gets weight ``weights[j]``.  For odd ``s`` the anchor is the bin centre
    and ``weights[j] = 1 - |u| / s`` for ``u = -(s-1) .. s-1``; for even ``s``
    the bin centre is ``anchor + 1/2`` and ``weights[j] = 1 - |u - 1/2| / s``
    for ``u = -(s-1) .. s`` (2s taps).  Either way the weights are
    ``max(0, 1 - |x - centre| / s)`` and each pixel's weights to consecutive
    bins sum to 1.
    """
    s = int(bin_size)
    delta = 0.5 if s % 2 == 0 else 0.0
    lo = -(s - 1)
    hi = s - 1 + (1 if s % 2 == 0 else 0)
    u = np.arange(lo, hi + 1, dtype=np.float64)
    w = 1.0 - np.abs(u - delta) / s
    return w.astype(np.float32), lo


def _integer_triangular_kernel(bin_size: int) -> tuple[np.ndarray, int]:
    """Bilinear weights ``1 - |u| / s`` for ``u = -(s-1) .. s-1`` around an integer centre."""
    s = int(bin_size)
    u = np.arange(-(s - 1), s, dtype=np.float64)
    return (1.0 - np.abs(u) / s).astype(np.float32), -(s - 1)


def _anchor_offset(bin_size: int, bin_centres: str = "patch") -> int:
    """Anchor of bin 0 relative to the patch corner.

    ``(s - 1) // 2`` for ``bin_centres="patch"``; ``s // 2`` for
    ``"integer"`` (the same pixel for odd ``s``, half a pixel right of the
    half-integer centre for even ``s``).
    """
    s = int(bin_size)
    return s // 2 if bin_centres == "integer" else (s - 1) // 2


def grid_origins(length: int, patch_size: int, step: int, offset: int = 0) -> np.ndarray:
    """Patch corners ``offset, offset + step, ...`` with ``corner + patch_size <= length``.

    Returns an int64 array (empty when the patch does not fit).
    """
    if length < patch_size + offset:
        return np.zeros(0, dtype=np.int64)
    return np.arange(offset, length - patch_size + 1, step, dtype=np.int64)


def grid_offsets(patch_sizes: tuple[int, ...], grid_alignment: str = "corner") -> tuple[int, ...]:
    """First patch corner of each size's grid (the same along x and y).

    ``"corner"``: 0 for every size.  ``"centre"``: ``(P_max - P) / 2`` so that
    the first patch centres of every size coincide (``vl_phow`` aligns its
    grids the same way [2]_), and with them every centre the steps share.
    """
    if grid_alignment == "corner":
        return tuple(0 for _ in patch_sizes)
    p_max = max(patch_sizes)
    return tuple((p_max - p) // 2 for p in patch_sizes)


def bin_window_weights(bin_size: int, window_size: float | None) -> np.ndarray:
    """Weight of each of the 4 x 4 spatial bins (float32, shape (4, 4)).

    ``None``: 1 for every bin (flat window).  A number ``w``: VLFeat's
    flat-window approximation of the Gaussian window [2]_: bin ``b`` (centre
    ``delta_b = s (b - 3/2)`` from the patch centre) weighs the mean of
    ``exp(-u**2 / (2 (w s)**2))`` over ``u = delta_b - (s-1) .. delta_b + (s-1)``
    (``vl_dsift``'s ``_vl_dsift_get_bin_window_mean``), and bin ``(by, bx)``
    the product of its two axes' weights.
    """
    if window_size is None:
        return np.ones((N_SPATIAL_BINS, N_SPATIAL_BINS), dtype=np.float32)
    s = int(bin_size)
    sigma = float(window_size) * s
    u = np.arange(-(s - 1), s, dtype=np.float64)
    delta = s * (np.arange(N_SPATIAL_BINS) - 0.5 * (N_SPATIAL_BINS - 1))
    w = np.exp(-0.5 * ((u[None, :] - delta[:, None]) / sigma) ** 2).mean(axis=1)
    return np.outer(w, w).astype(np.float32)


@functools.lru_cache(maxsize=8)
def mirror_permutation(length: int = DESCRIPTOR_SIZE) -> np.ndarray:
    """Column order that turns descriptors into those of the mirrored image (module docstring,
    "Mirror").

    ``descriptors[:, mirror_permutation(n)]`` is, for every row, the descriptor of the same patch
    mirrored left-right: entry ``(by, bx, k)`` of the result is entry ``(by, 3 - bx, (4 - k) mod 8)``
    of the row.  ``length`` may be a multiple of 128 (colour descriptors: the channels' blocks
    side by side, each permuted alike).  The permutation is its own inverse.

    Parameters
    ----------
    length : int, default 128

    Returns
    -------
    ndarray of int64, shape (length,)
        Read-only (computed once per length).
    """
    if length % DESCRIPTOR_SIZE:
        raise ValueError(f"descriptor length {length} is not a multiple of {DESCRIPTOR_SIZE}")
    by, bx, k = np.meshgrid(
        np.arange(N_SPATIAL_BINS), np.arange(N_SPATIAL_BINS), np.arange(N_ORIENTATIONS), indexing="ij"
    )
    block = ((by * N_SPATIAL_BINS + (N_SPATIAL_BINS - 1 - bx)) * N_ORIENTATIONS + (4 - k) % N_ORIENTATIONS).ravel()
    blocks = length // DESCRIPTOR_SIZE
    permutation = (np.arange(blocks)[:, None] * DESCRIPTOR_SIZE + block[None, :]).ravel().astype(np.int64)
    permutation.setflags(write=False)  # cached: shared by every caller
    return permutation


def grid_frames(
    image_shape: tuple[int, int],
    patch_sizes: Iterable[int] = (16,),
    step: int = 6,
    *,
    bin_centres: str = "patch",
    grid_alignment: str = "corner",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frames ``(x, y, patch_size)`` that :func:`dense_sift` returns, in order.

    Useful to know the number of descriptors of an image without computing
    them: ``len(grid_frames(shape, sizes, step)[0])`` (before any
    ``low_contrast="drop"``).
    """
    sizes = validate_patch_sizes(patch_sizes)
    step = validate_step(step)
    _check_choice("bin_centres", bin_centres, BIN_CENTRES)
    _check_choice("grid_alignment", grid_alignment, GRID_ALIGNMENTS)
    h, w = int(image_shape[0]), int(image_shape[1])
    offsets = grid_offsets(sizes, grid_alignment)
    return _frames([_geometry(h, w, p, step, o, bin_centres) for p, o in zip(sizes, offsets)], sizes)


def opencv_keypoint_size(patch_size: float) -> float:
    """``cv2.KeyPoint.size`` whose SIFT descriptor covers a ``patch_size`` patch.

    OpenCV's descriptor (octave 0) uses spatial bins of
    ``hist_width = SIFT_DESCR_SCL_FCTR * size / 2 = 1.5 * size`` pixels, 4 x 4
    bins.  A patch of ``P`` pixels has bins of ``P / 4`` pixels, so
    ``size = (P / 4) / 1.5 = P / 6`` (2.67 for a 16-px patch).  Passing
    ``size = P`` instead gives bins of ``1.5 P`` pixels, a window six times
    too wide (24-px bins, about 96 px, for a 16-px patch).  Use ``angle=0``
    (``-1`` means a 1 degree rotation in OpenCV).
    """
    return float(patch_size) / 6.0


# --------------------------------------------------------------------------
# Quantisation
# --------------------------------------------------------------------------
def quantize_descriptors(descriptors: np.ndarray) -> np.ndarray:
    """Quantise descriptors to uint8: ``min(round(512 v), 255)`` (and ``>= 0``).

    For ``0 <= v <= 255.5 / 512`` (~0.499) the round trip through
    :func:`dequantize_descriptors` has absolute error ``<= 1/1024``; larger
    values (rare: a unit-length, 0.2-clipped SIFT only exceeds it when fewer
    than ~5 entries carry the energy) saturate at ``255/512``.  This is
    VLFeat's convention except that VLFeat truncates (error ``< 1/512``)
    where this rounds.
    """
    d = np.ascontiguousarray(descriptors, dtype=np.float32)
    q = np.empty(d.shape, dtype=np.uint8)
    if d.size:
        quantize_values(d.reshape(-1), np.float32(QUANTIZATION_SCALE), q.reshape(-1))
    return q


def dequantize_descriptors(quantized: np.ndarray) -> np.ndarray:
    """Inverse of :func:`quantize_descriptors`: ``q / 512`` as float32."""
    # One pass (the product of each uint8, converted, by 2⁻⁹ is exact): the values of q.astype(float32) / 512.
    return np.multiply(np.asarray(quantized), np.float32(1.0 / QUANTIZATION_SCALE), dtype=np.float32)


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------
def _validate_image(image: np.ndarray) -> np.ndarray:
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy array, got {type(image).__name__}")
    if image.ndim != 2:
        raise ValueError(
            f"image must be 2-D (grayscale), got shape {image.shape}; use features.load_grayscale or cv2.cvtColor first"
        )
    if not np.issubdtype(image.dtype, np.floating):
        raise ValueError(
            f"image must be a float array with values in [0, 1], got dtype {image.dtype}; "
            "convert with image.astype(np.float32) / 255"
        )
    img = np.ascontiguousarray(image, dtype=np.float32)
    if img.size and not np.isfinite(img).all():
        raise ValueError("image contains NaN or infinite values")
    return img


def validate_patch_sizes(patch_sizes: Iterable[int] | int) -> tuple[int, ...]:
    if isinstance(patch_sizes, (Integral, np.integer)):
        patch_sizes = (patch_sizes,)
    try:
        sizes = tuple(patch_sizes)
    except TypeError:
        raise ValueError(f"patch_sizes must be an int or a sequence of ints, got {patch_sizes!r}") from None
    if not sizes:
        raise ValueError("patch_sizes must not be empty")
    out = []
    for p in sizes:
        if isinstance(p, bool) or not isinstance(p, (Integral, np.integer)):
            raise ValueError(f"patch sizes must be integers, got {p!r}")
        p = int(p)
        if p < 8 or p % 4 != 0:
            raise ValueError(
                f"patch size {p} is invalid: patch sizes must be multiples of 4 and >= 8 "
                "(4 x 4 spatial bins of at least 2 pixels)"
            )
        out.append(p)
    if len(set(out)) != len(out):
        raise ValueError(f"patch_sizes contains duplicates: {tuple(out)}")
    return tuple(out)


def validate_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, (Integral, np.integer)) or step < 1:
        raise ValueError(f"step must be an integer >= 1, got {step!r}")
    return int(step)


def _validate_nonneg(name: str, value: float, *, allow_inf: bool, strictly: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (Real, np.floating, np.integer)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    bad = math.isnan(v) or (v <= 0 if strictly else v < 0) or (math.isinf(v) and not allow_inf)
    if bad:
        cond = "> 0" if strictly else ">= 0"
        raise ValueError(f"{name} must be {cond}{'' if allow_inf else ' and finite'}, got {value!r}")
    return v


def _as_f32_threshold(value: float) -> np.float32:
    """float32 version of a threshold; values beyond float32's range -> inf."""
    return np.float32(value) if value <= float(np.finfo(np.float32).max) else np.float32(np.inf)


# --------------------------------------------------------------------------
# Grid geometry (cached per image size / patch size / step)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class _AxisTable:
    """Scatter table of one axis: pixel -> (anchor index, triangular weight)."""

    ptr: np.ndarray  # int64 (length + 1,) CSR row pointer per pixel
    idx: np.ndarray  # int64 anchor index (into the unique anchors)
    idx8: np.ndarray  # uint64 8 * idx (offset of the anchor's 8 channels)
    weight: np.ndarray  # float32 weight
    n_anchors: int
    patch_idx: np.ndarray  # int64 (n_patches, 4) anchor index per patch / bin


def _axis_table(length: int, patch_size: int, step: int, offset: int = 0, bin_centres: str = "patch") -> _AxisTable:
    """Anchors of the 4 bins of every patch along one axis, and per-pixel weights.

    Bin ``b`` of the patch at corner ``o`` has anchor ``o + b*s + (s-1)//2``;
    pixel ``anchor + k_lo + u`` receives weight ``kernel[u]`` (see
    :func:`triangular_kernel`).  Pixels outside ``[0, length)`` are dropped.
    """
    s = patch_size // N_SPATIAL_BINS
    if bin_centres == "integer":
        kernel, k_lo = _integer_triangular_kernel(s)
    else:
        kernel, k_lo = triangular_kernel(s)
    origins = grid_origins(length, patch_size, step, offset)
    anchors = origins[:, None] + np.arange(N_SPATIAL_BINS, dtype=np.int64)[None, :] * s + _anchor_offset(s, bin_centres)
    uniq, inv = np.unique(anchors.ravel(), return_inverse=True)
    patch_idx = inv.reshape(anchors.shape).astype(np.int64)
    # every (anchor, tap) pair, kept if the pixel lies inside the image
    pix = uniq[:, None] + k_lo + np.arange(kernel.shape[0], dtype=np.int64)[None, :]
    aidx = np.broadcast_to(np.arange(uniq.shape[0], dtype=np.int64)[:, None], pix.shape)
    wts = np.broadcast_to(kernel[None, :], pix.shape)
    keep = (pix >= 0) & (pix < length) & (wts > 0)
    pix, aidx, wts = pix[keep], aidx[keep], wts[keep]
    order = np.lexsort((aidx, pix))
    pix, aidx, wts = pix[order], aidx[order], wts[order]
    ptr = np.zeros(length + 1, dtype=np.int64)
    np.add.at(ptr, pix + 1, 1)
    ptr = np.cumsum(ptr)
    aidx = aidx.astype(np.int64)
    return _AxisTable(
        ptr,
        aidx,
        (aidx * 8).astype(np.uint64),
        wts.astype(np.float32),
        int(uniq.shape[0]),
        patch_idx,
    )


@dataclass(frozen=True)
class _Geometry:
    """Grid of one patch size on one image size: the kernels' tables and the frames."""

    cols: _AxisTable  # scatter table of the x axis
    rows: _AxisTable  # scatter table of the y axis
    frame_x: np.ndarray  # float32 (ny*nx,) patch centres x, row-major grid order
    frame_y: np.ndarray  # float32 (ny*nx,) patch centres y


@functools.lru_cache(maxsize=256)
def _geometry(
    height: int, width: int, patch_size: int, step: int, offset: int = 0, bin_centres: str = "patch"
) -> _Geometry:
    """Tables and frames of the grid (cached; every array is read-only)."""
    cols = _axis_table(width, patch_size, step, offset, bin_centres)
    rows = _axis_table(height, patch_size, step, offset, bin_centres)
    s = patch_size // N_SPATIAL_BINS
    # frame centre: centre of bin 0 plus 1.5 bins
    c = _anchor_offset(s, bin_centres) + 1.5 * s if bin_centres == "integer" else (patch_size - 1) / 2.0
    x0 = grid_origins(width, patch_size, step, offset).astype(np.float32) + np.float32(c)
    y0 = grid_origins(height, patch_size, step, offset).astype(np.float32) + np.float32(c)
    fy, fx = np.meshgrid(y0, x0, indexing="ij")
    fx = np.ascontiguousarray(fx.ravel(), dtype=np.float32)
    fy = np.ascontiguousarray(fy.ravel(), dtype=np.float32)
    for t in (cols, rows):
        for arr in (t.ptr, t.idx, t.idx8, t.weight, t.patch_idx):
            arr.setflags(write=False)
    fx.setflags(write=False)
    fy.setflags(write=False)
    return _Geometry(cols, rows, fx, fy)


def _frames(geometries: list[_Geometry], sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frames ``(x, y, patch_size)`` of the grids of every size, size after size.

    ``x`` and ``y`` are float32, ``patch_size`` int16, all of shape ``(N,)``.
    """
    counts = [g.frame_x.shape[0] for g in geometries]
    x = np.concatenate([g.frame_x for g in geometries])
    y = np.concatenate([g.frame_y for g in geometries])
    patch_size = np.repeat(np.asarray(sizes, dtype=np.int16), counts)
    return x, y, patch_size


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------
def normalize_sift(
    descriptors: np.ndarray, contrast_threshold: float = 1.0, clip: float = 0.2
) -> tuple[np.ndarray, np.ndarray]:
    """ScSPM normalisation of raw SIFT descriptors (``sp_normalize_sift``).

    For each row ``v`` with ``r = ||v||_2``: if ``r > contrast_threshold``,
    ``v <- v / r``; ``v <- min(v, clip)``; ``v <- v / ||v||_2`` (unit length,
    every entry ``<= clip / ||min(v / r, clip)||``).  Rows with
    ``r <= contrast_threshold`` (low contrast) are returned unchanged.

    Parameters
    ----------
    descriptors : array_like, shape (N, D)
        Raw, non-negative descriptors (not modified).
    contrast_threshold : float, default 1.0
        Threshold on the raw norm (``inf`` normalises nothing).
    clip : float, default 0.2
        Upper bound applied to the unit-normalised values.

    Returns
    -------
    normalized : ndarray of float32, shape (N, D)
    raw_norm : ndarray of float32, shape (N,)
    """
    thr = _validate_nonneg("contrast_threshold", contrast_threshold, allow_inf=True, strictly=False)
    cl = _validate_nonneg("clip", clip, allow_inf=False, strictly=True)
    D = np.array(descriptors, dtype=np.float32, order="C", copy=True)
    if D.ndim != 2:
        raise ValueError(f"descriptors must be 2-D (N, D), got shape {D.shape}")
    raw = np.empty(D.shape[0], dtype=np.float32)
    normalize_descriptors(D, raw, _as_f32_threshold(thr), np.float32(cl))
    return D, raw


SMOOTHING_RULES = ("dsift", "phow")
BIN_CENTRES = ("patch", "integer")
GRID_ALIGNMENTS = ("corner", "centre")
LOW_CONTRAST_MODES = ("keep", "zero", "drop")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def root_sift(descriptors: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """RootSIFT (Hellinger) mapping ``v <- sqrt(v / ||v||_1)`` of non-negative rows, in place.

    Arandjelović and Zisserman's RootSIFT [5]_: the Euclidean distance of the
    mapped descriptors is the Hellinger distance of the L1-normalised ones;
    the result has unit L2 norm.  ``rows``: boolean mask of the rows to map
    (default all); all-zero rows stay zero.
    """
    l1 = descriptors.sum(axis=1, keepdims=True, dtype=np.float32)
    np.maximum(l1, np.float32(1e-30), out=l1)
    # ufunc ``where``: the masked-out rows are left as they are, without copying the others out and back
    where = True if rows is None else np.asarray(rows, dtype=bool)[:, None]
    np.divide(descriptors, l1, out=descriptors, where=where)
    np.sqrt(descriptors, out=descriptors, where=where)
    return descriptors


def dense_sift(
    image: np.ndarray,
    patch_sizes: Iterable[int] | int = (16,),
    step: int = 6,
    *,
    smooth: bool | float = True,
    magnif: float = DEFAULT_MAGNIF,
    contrast_threshold: float = 1.0,
    clip: float = 0.2,
    normalize: bool = True,
    smoothing: str = "dsift",
    window_size: float | None = None,
    bin_centres: str = "patch",
    grid_alignment: str = "corner",
    low_contrast: str = "keep",
    root: bool = False,
    out: np.ndarray | None = None,
) -> DenseSIFT:
    """Dense SIFT descriptors of a grayscale image on a regular grid.

    See the module docstring for the exact mathematics (grid, smoothing,
    gradients, orientation and spatial binning, layout, normalisation).

    Parameters
    ----------
    image : ndarray, shape (H, W), floating dtype
        Grayscale image with values in [0, 1] (as returned by
        :func:`classify_images.features.load_grayscale`).  Converted to float32.
    patch_sizes : int or sequence of int, default (16,)
        Patch widths ``P`` in pixels: multiples of 4, ``>= 8``, no duplicates.
        Each patch has 4 x 4 spatial bins of ``P / 4`` pixels.  Sizes that do
        not fit in the image produce no descriptors (use
        :func:`classify_images.features.check_min_size` to reject such
        images).  ``(16,)`` with step 6 is the ScSPM setting;
        ``(16, 24, 32, 40)`` with step 3 the HIK nSVM / vl_phow setting.
    step : int, default 6
        Grid step in pixels (the same for every size).
    smooth : bool or float, default True
        ``True``: smooth per patch size with the ``smoothing`` rule.
        ``False``: no smoothing.  A number ``>= 0``: that fixed sigma
        (pixels) for every size.
    magnif : float, default 6.0
        Magnification factor (bin size over smoothing scale, ``vl_phow``'s
        default 6) used when ``smooth is True``.
    contrast_threshold : float, default 1.0
        Raw-norm threshold at or below which a patch is low-contrast (what
        happens to it: ``low_contrast``); ``inf`` makes every patch low-contrast.
    clip : float, default 0.2
        Clipping value of the unit-normalised descriptor before renormalising.
    normalize : bool, default True
        If False, return the raw descriptors (no normalisation at all;
        ``low_contrast`` and ``root`` are then ignored).
    smoothing : {"dsift", "phow"}, default "dsift"
        Sigma rule when ``smooth is True``: ``"dsift"``
        ``sqrt((P / 4 / magnif)**2 - 0.25)`` (:func:`smoothing_sigma`);
        ``"phow"`` ``P / 4 / magnif``, as ``vl_phow`` does.
    window_size : float or None, default None
        ``None``: every spatial bin weighs 1.  A number: VLFeat's
        flat-window Gaussian bin weights (:func:`bin_window_weights`;
        ``vl_dsift`` uses 2, ``vl_phow`` 1.5).
    bin_centres : {"patch", "integer"}, default "patch"
        ``"patch"``: bin centres ``x0 + b s + (s - 1) / 2`` (the patch is
        exactly ``P`` pixels; half-integers for even ``s``).  ``"integer"``:
        ``x0 + b s + floor(s / 2)``, on pixels as in VLFeat, with weights
        ``1 - |u| / s`` (the same for odd ``s``).
    grid_alignment : {"corner", "centre"}, default "corner"
        First patch corner of each size: 0, or :func:`grid_offsets` so that
        the grids of all sizes share their centres (``vl_phow``).
    low_contrast : {"keep", "zero", "drop"}, default "keep"
        Low-contrast patches (raw norm ``<= contrast_threshold``): kept
        un-normalised (ScSPM), normalised like the others and then set to
        zero (``vl_phow``), or removed with their frames.
    root : bool, default False
        Map the normalised descriptors to RootSIFT (:func:`root_sift`);
        low-contrast rows kept raw are left as they are.
    out : ndarray of float32, shape (N, 128), optional
        Where to write the descriptors (returned as ``descriptors``), e.g. a column block
        ``wide[:, 128 k : 128 (k + 1)]`` of a wider array whose rows are the blocks of several
        channels side by side; ``N`` is ``len(grid_frames(image.shape, ...)[0])``.  Each row
        must be contiguous.  Not with ``low_contrast="drop"``.

    Returns
    -------
    DenseSIFT
        ``descriptors`` float32 of shape ``(N, 128)``; ``x``, ``y`` (float32),
        ``patch_size`` (int16) and ``raw_norm`` (float32) of shape ``(N,)``;
        ``image_shape = (H, W)``.  ``N = sum_P n(H, P) * n(W, P)`` over the
        patch sizes, with ``n(L, P) = floor((L - o - P) / step) + 1`` grid
        positions along a side of length ``L >= P + o`` (``o`` the grid
        offset, 0 unless ``grid_alignment="centre"``) and 0 otherwise,
        less the dropped patches with ``low_contrast="drop"``.

    Raises
    ------
    ValueError
        Non-2-D or non-float image, non-finite values, bad patch sizes, step,
        smoothing, threshold, clip or option values.
    """
    img = _validate_image(image)
    sizes = validate_patch_sizes(patch_sizes)
    step = validate_step(step)
    thr = _validate_nonneg("contrast_threshold", contrast_threshold, allow_inf=True, strictly=False)
    cl = _validate_nonneg("clip", clip, allow_inf=False, strictly=True)
    _check_choice("smoothing", smoothing, SMOOTHING_RULES)
    _check_choice("bin_centres", bin_centres, BIN_CENTRES)
    _check_choice("grid_alignment", grid_alignment, GRID_ALIGNMENTS)
    _check_choice("low_contrast", low_contrast, LOW_CONTRAST_MODES)
    if window_size is not None:
        window_size = _validate_nonneg("window_size", window_size, allow_inf=False, strictly=True)
    if isinstance(smooth, (bool, np.bool_)):
        magnif = _validate_nonneg("magnif", magnif, allow_inf=False, strictly=True)
        if smoothing == "phow":
            sigmas = [p / N_SPATIAL_BINS / magnif if smooth else 0.0 for p in sizes]
        else:
            sigmas = [smoothing_sigma(p, magnif) if smooth else 0.0 for p in sizes]
    else:
        sig = _validate_nonneg("smooth (sigma)", smooth, allow_inf=False, strictly=False)
        sigmas = [sig] * len(sizes)

    h, w = img.shape
    offsets = grid_offsets(sizes, grid_alignment)
    geoms = [_geometry(h, w, p, step, o, bin_centres) for p, o in zip(sizes, offsets)]
    counts = [g.frame_x.shape[0] for g in geoms]
    total = int(sum(counts))
    if out is None:
        out = np.empty((total, DESCRIPTOR_SIZE), dtype=np.float32)
    elif (
        not isinstance(out, np.ndarray)
        or out.dtype != np.float32
        or out.shape != (total, DESCRIPTOR_SIZE)
        or out.strides[1] != out.itemsize
        or low_contrast == "drop"
    ):
        raise ValueError(
            f"out must be a float32 array of shape ({total}, {DESCRIPTOR_SIZE}) with contiguous rows "
            f"(and low_contrast not 'drop'), got {getattr(out, 'dtype', type(out))} {getattr(out, 'shape', '')}"
        )
    raw = np.empty(total, dtype=np.float32)
    keep_raw = normalize and low_contrast == "keep"
    # "zero" / "drop" normalise every patch with a positive norm first
    thr32 = _as_f32_threshold(thr) if keep_raw else np.float32(0.0)

    smoothed_cache: dict[float, np.ndarray] = {}
    offset = 0
    for g, sigma, cnt, p in zip(geoms, sigmas, counts, sizes):
        if cnt == 0:
            continue
        sm = smoothed_cache.get(sigma)
        if sm is None:
            sm = smooth_image(img, sigma)
            smoothed_cache[sigma] = sm
        c, r = g.cols, g.rows
        G = binned_orientation_maps(sm, c.ptr, c.idx8, c.weight, r.ptr, r.idx, r.weight, c.n_anchors, r.n_anchors)
        weights = bin_window_weights(p // N_SPATIAL_BINS, window_size)
        gather_descriptors(
            G, r.patch_idx, c.patch_idx, weights, out, raw, offset, bool(normalize), thr32, np.float32(cl), bool(root)
        )
        offset += cnt

    fx, fy, ps = _frames(geoms, sizes)
    if normalize:
        low = raw <= _as_f32_threshold(thr)
        # RootSIFT, when asked, was applied by the kernel to every row above ``thr32``: with "keep"
        # the rows that are not low-contrast, otherwise every non-zero row (as root_sift(out) would).
        if low_contrast == "zero":
            out[low] = 0.0
        elif low_contrast == "drop":
            keep = ~low
            out, raw, fx, fy, ps = out[keep], raw[keep], fx[keep], fy[keep], ps[keep]
    return DenseSIFT(out, fx, fy, ps, (int(h), int(w)), raw)
