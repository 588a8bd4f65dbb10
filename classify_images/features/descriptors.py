"""Local descriptors as plug-ins: what the pipeline computes on a decoded image.

A :class:`Descriptor` turns a preprocessed image (float32 in [0, 1]) into local descriptors
on a grid, with their positions; the pipeline's stages ask it for that, for its
:attr:`~Descriptor.length` (what an encoder's state is checked against when a model file is
loaded) and for :attr:`~Descriptor.smallest_side` (smaller images are skipped), and never
name it.  The configuration selects one with ``[descriptor] kind`` (default ``"sift"``).
Dense SIFT's parameters are the ``[sift]`` table; another descriptor's are the other keys of
``[descriptor]``, checked by its :meth:`~Descriptor.check_params`.  The stages receive the
descriptor's plain table: ``[sift]``'s semantic keys for dense SIFT (so its cache keys do not
name the kind), ``{"kind": ..., **own keys}`` for any other.

Descriptors are stored in the stage cache as uint8 with VLFeat's convention (512 × the
unit-normalised value, clipped: :func:`~classify_images.features.dsift.quantize_descriptors`),
so a descriptor's values must lie in [0, 0.5] after its own normalisation, as SIFT's do.

The registry: :func:`descriptor_class` by ``kind``; :func:`register_descriptor` adds one
(``docs/extending.md``; ``tests/test_descriptor_plugins.py`` registers a toy descriptor).

============  ====================  ===============================================
kind          class                 computes
============  ====================  ===============================================
``"sift"``    :class:`DenseSift`    dense SIFT (:func:`~classify_images.features.dsift.dense_sift`),
                                    grey or per colour channel (``[sift] color``)
============  ====================  ===============================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from . import colour as colour_module
from . import dsift as dsift_module

__all__ = [
    "Descriptors",
    "Descriptor",
    "DenseSift",
    "DEFAULT_KIND",
    "register_descriptor",
    "descriptor_class",
    "descriptor_kinds",
    "make_descriptor",
]


@dataclass(frozen=True, eq=False)
class Descriptors:
    """The local descriptors of one image.

    Attributes
    ----------
    descriptors : ndarray of float32, shape (n, length)
    x, y : ndarray of float32, shape (n,)
        Centres, pixels of the preprocessed image.
    """

    descriptors: np.ndarray
    x: np.ndarray
    y: np.ndarray


class Descriptor:
    """Base class of the local descriptors.

    Parameters
    ----------
    table : mapping
        The descriptor's configuration table, plain values (``[sift]`` for dense SIFT; keys at
        their defaults may be absent).
    """

    #: Registry key.
    kind: ClassVar[str]
    #: ``IMPLEMENTATION_VERSION`` key of the module whose numbers it produces (cache keys).
    version_key: ClassVar[str]

    def __init__(self, table: Mapping[str, Any]) -> None:
        self.table = dict(table)

    @classmethod
    def check_params(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """This descriptor's own ``[descriptor]`` keys (beside ``kind``), checked; the plain dict
        the stages receive.  Keys at their defaults should be left out, so that adding a key
        keeps the cache keys of every existing configuration.

        Raises
        ------
        ValueError
            Naming the key (``"descriptor.size = 0: expected an integer ≥ 1"``).
        """
        for key in values:
            raise ValueError(f"unknown key descriptor.{key}: descriptor.kind = {cls.kind!r} has no own keys")
        return {}

    @property
    def length(self) -> int:
        """Length of one descriptor."""
        raise NotImplementedError

    @property
    def smallest_side(self) -> int:
        """The shortest image side, px, that yields a descriptor (smaller images are skipped)."""
        raise NotImplementedError

    def implementation_version(self) -> int:
        """The version of this descriptor's numbers (part of the cache keys and config hash)."""
        raise NotImplementedError

    def compute(self, image: np.ndarray) -> Descriptors:
        """The descriptors of a preprocessed image (float32, (H, W), values in [0, 1])."""
        raise NotImplementedError

    @property
    def mirror_columns(self) -> np.ndarray | None:
        """The column order that makes an image's descriptors those of its left-right mirror (each
        at the mirrored centre ``W - 1 - x``), when the descriptor has one; None: the mirror's
        descriptors are computed on the mirrored image."""
        return None


class DenseSift(Descriptor):
    """Dense SIFT on a regular grid at one or several patch sizes
    (:func:`~classify_images.features.dsift.dense_sift`; the ``[sift]`` table).  Its
    options that postdate the first release (``smoothing``, ``window_size``, ``bin_centres``,
    ``grid_alignment``, ``low_contrast``, ``root_sift``, ``color``) may be absent: they then take
    their defaults, so that the table a configuration gives the cached stages is unchanged for
    every configuration that does not set them.

    With ``color`` a colour space (:data:`~classify_images.features.colour.COLOR_SPACES`:
    ``"opponent"``, ``"hsv"``, ``"rgb"``, ``"c"`` for C-SIFT, ``"lab"`` for CIE L*a*b*), the image
    is decoded in colour, converted by :func:`~classify_images.features.colour.colour_channels`,
    and dense SIFT is run on each of the three channels alone with the same options; a keypoint's
    descriptor is the three 128-dimensional blocks concatenated (``length`` 384; van de Sande et
    al., TPAMI 2010).  ``low_contrast = "drop"`` would drop a different set of patches per channel
    and is refused with colour.
    """

    kind = "sift"
    version_key = "dense_sift"

    @classmethod
    def check_params(cls, values):
        for key in values:
            raise ValueError(f"unknown key descriptor.{key}: dense SIFT's keys go in the [sift] table")
        return {}

    @property
    def smallest_side(self) -> int:
        """The largest patch (``[sift] patch_sizes``)."""
        return max(self.table["patch_sizes"])

    @property
    def color(self) -> str:
        """``"gray"`` or the colour space."""
        return self.table.get("color", colour_module.GRAY)

    @property
    def needs_colour(self) -> bool:
        """True when :meth:`compute` takes an RGB image (H, W, 3) rather than a grey one."""
        return self.color != colour_module.GRAY

    @property
    def length(self) -> int:
        return dsift_module.DESCRIPTOR_SIZE * colour_module.n_channels(self.color)

    def implementation_version(self) -> int:
        return dsift_module.IMPLEMENTATION_VERSION

    @property
    def mirror_columns(self) -> np.ndarray | None:
        """:func:`~classify_images.features.dsift.mirror_permutation` of every channel's block: the
        mirror's SIFT is the image's, permuted, on the mirrored grid (exact with ``bin_centres =
        "patch"``, the default; VLFeat's integer bin centres are not symmetric: None then)."""
        if self.table.get("bin_centres", "patch") != "patch":
            return None
        return dsift_module.mirror_permutation(self.length)

    def _dense_sift(self, channel: np.ndarray, out: np.ndarray | None = None) -> dsift_module.DenseSIFT:
        table = self.table
        return dsift_module.dense_sift(
            channel,
            patch_sizes=tuple(table["patch_sizes"]),
            step=table["step"],
            smooth=table["smooth"],
            contrast_threshold=table["contrast_threshold"],
            smoothing=table.get("smoothing", "dsift"),
            window_size=table.get("window_size") or None,
            bin_centres=table.get("bin_centres", "patch"),
            grid_alignment=table.get("grid_alignment", "corner"),
            low_contrast=table.get("low_contrast", "keep"),
            root=table.get("root_sift", False),
            out=out,
        )

    def compute(self, image: np.ndarray) -> Descriptors:
        """Descriptors of a grey image (H, W), or of an RGB image (H, W, 3) when :attr:`needs_colour`.

        A colour space's channels that are all zero, or equal to an earlier channel, are not run
        through SIFT: their blocks are zeros or a copy (the same values SIFT gives them).  On a grey
        image (R = G = B) opponent, HSV, C-SIFT and Lab compute one channel (O3, V, O3, L*) and RGB
        one (R), so a colour configuration costs about what a grey one does on grey photographs.
        """
        if not self.needs_colour:
            result = self._dense_sift(image)
            return Descriptors(
                result.descriptors, np.asarray(result.x, dtype=np.float32), np.asarray(result.y, dtype=np.float32)
            )
        if self.table.get("low_contrast", "keep") == "drop":
            raise ValueError(
                "sift.low_contrast = 'drop' cannot be used with a colour space (each channel "
                "would drop different patches); use 'keep' or 'zero'"
            )
        channels = colour_module.colour_channels(image, self.color)
        # A grey image (R = G = B) has zero channels (O1, O2; H, S; O1/O3, O2/O3; a*, b*) and repeated
        # ones (R, G, B): their SIFT blocks are all zeros or copies, so only the distinct non-zero
        # channels are computed, each written straight into its block of the (N, 384) rows.
        sources: list[int | None] = []
        for k, channel in enumerate(channels):
            if not channel.any():
                sources.append(None)
                continue
            same = next((j for j in range(k) if sources[j] == j and np.array_equal(channels[j], channel)), None)
            sources.append(k if same is None else same)
        if all(source is None for source in sources):  # a black image: SIFT of the zero channel gives the grid
            sources[0] = 0
        table = self.table
        x, y, _ = dsift_module.grid_frames(
            channels.shape[1:],
            tuple(table["patch_sizes"]),
            table["step"],
            bin_centres=table.get("bin_centres", "patch"),
            grid_alignment=table.get("grid_alignment", "corner"),
        )
        size = dsift_module.DESCRIPTOR_SIZE
        allocate = np.empty if None not in sources else np.zeros
        rows = allocate((x.shape[0], size * len(channels)), dtype=np.float32)
        for k, source in enumerate(sources):
            if source == k:
                self._dense_sift(channels[k], out=rows[:, size * k : size * (k + 1)])
            elif source is not None:
                rows[:, size * k : size * (k + 1)] = rows[:, size * source : size * (source + 1)]
        return Descriptors(rows, np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32))


_REGISTERED: dict[str, type[Descriptor]] = {DenseSift.kind: DenseSift}


def register_descriptor(cls: type[Descriptor]) -> type[Descriptor]:
    """Add a descriptor class under ``cls.kind`` (usable as a decorator)."""
    if _REGISTERED.get(cls.kind, cls) is not cls:
        raise ValueError(f"descriptor kind {cls.kind!r} is taken by {_REGISTERED[cls.kind].__name__}")
    _REGISTERED[cls.kind] = cls
    return cls


#: The descriptor of a configuration that names none.
DEFAULT_KIND = DenseSift.kind


def descriptor_kinds() -> tuple[str, ...]:
    """The registered ``descriptor.kind`` values."""
    return tuple(_REGISTERED)


def descriptor_class(kind: str) -> type[Descriptor]:
    """The descriptor class of ``kind`` (KeyError naming the known kinds)."""
    if kind not in _REGISTERED:
        raise KeyError(f"unknown descriptor kind {kind!r}; known kinds: {', '.join(_REGISTERED)}")
    return _REGISTERED[kind]


def make_descriptor(table: Mapping[str, Any]) -> Descriptor:
    """The descriptor of a plain table as the stages receive it: ``table["kind"]`` (absent:
    dense SIFT, whose table is ``[sift]``) made with the other keys."""
    kind = table.get("kind", DEFAULT_KIND)
    return descriptor_class(kind)({key: value for key, value in table.items() if key != "kind"})
