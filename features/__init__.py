"""classify_images.features — image preprocessing and fast dense SIFT.

Typical use::

    from classify_images.features import load_grayscale, check_min_size, dense_sift

    img = load_grayscale(path, max_side=300)          # float32 in [0, 1]
    check_min_size(img, 16)                           # ImageReadError if too small
    ds = dense_sift(img, patch_sizes=(16,), step=6)   # ScSPM setting
    ds.descriptors                                    # (N, 128) float32

Modules: :mod:`.preprocess` (read, decode, shrink, size check),
:mod:`.dsift` (dense SIFT, its helpers and maths; compiled kernels in the
private :mod:`._dsift_kernels`).  The lower-level helpers of :mod:`.dsift`
(``grid_frames``, ``normalize_sift``, ``smoothing_sigma``, ``smooth_image``,
``gaussian_kernel``, ``triangular_kernel``, ``grid_origins``) are imported
from that module.
"""

from .dsift import (
    DESCRIPTOR_SIZE,
    DenseSIFT,
    dense_sift,
    dequantize_descriptors,
    opencv_keypoint_size,
    quantize_descriptors,
)
from .preprocess import (
    ImageReadError,
    check_min_size,
    decode_grayscale,
    load_grayscale,
    resize_max_side,
)

__all__ = [
    "DESCRIPTOR_SIZE",
    "DenseSIFT",
    "ImageReadError",
    "check_min_size",
    "decode_grayscale",
    "dense_sift",
    "dequantize_descriptors",
    "load_grayscale",
    "opencv_keypoint_size",
    "quantize_descriptors",
    "resize_max_side",
]
