"""Named train/test protocols (``--protocol``) and the check that classes hold what one asks.

The split itself (:func:`~classify_images.pipeline.settings.dataset.split_indices`) draws
``train_per_class`` random images per class for training and keeps the rest for testing,
capped at ``test_per_class``.  The protocols of the papers the package reproduces have names
here, with one for a small folder of a user's own photos:

``scene15``
    15-Scenes [1]_: 100 training images per class, all the rest for testing.
``caltech101-15``, ``caltech101-30``
    Caltech-101 [2]_ [3]_: 15 or 30 training images per class, at most 50 for testing.
``half``
    half of each class for training (at least one image, at least one left for testing), all the
    rest for testing: every class keeps its share, so a class of 3 photos does not cut the training
    sets of the classes of 40 (a warning names a class far smaller than the others:
    :func:`small_classes`).

A class with fewer images than a protocol asks for testing is kept with a smaller test set,
with one warning line (:func:`short_classes`, a ``UserWarning`` of the build); a class without the
training images plus one test image is an error of the split.  This module imports nothing
heavy (the command line reads :data:`PROTOCOLS` to build its help).

References
----------
.. [1] S. Lazebnik, C. Schmid and J. Ponce, "Beyond bags of features: spatial pyramid
   matching for recognizing natural scene categories", CVPR 2006.
.. [2] L. Fei-Fei, R. Fergus and P. Perona, "Learning generative visual models from few
   training examples: an incremental Bayesian approach tested on 101 object
   categories", CVPR Workshop on Generative-Model Based Vision, 2004.
.. [3] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear spatial pyramid matching using
   sparse coding for image classification", CVPR 2009.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import ClassifyImagesError

__all__ = ["Protocol", "PROTOCOLS", "ProtocolError", "protocol_split", "short_classes", "small_classes"]


class ProtocolError(ClassifyImagesError, ValueError):
    """An unknown protocol name."""


@dataclass(frozen=True)
class Protocol:
    """A named train/test protocol."""

    train_per_class: int | None  #: training images per class (None: :attr:`train_fraction` of each class)
    test_per_class: int | None  #: cap on the test images per class (None: all the rest)
    description: str  #: one line for ``--help``
    train_fraction: float | None = None  #: fraction of each class for training (``train_per_class`` None)


#: The protocols ``--protocol`` knows, by name.
PROTOCOLS: dict[str, Protocol] = {
    "scene15": Protocol(100, None, "15-Scenes: 100 training images per class, all the rest for testing"),
    "caltech101-15": Protocol(15, 50, "Caltech-101: 15 training images per class, at most 50 for testing"),
    "caltech101-30": Protocol(30, 50, "Caltech-101: 30 training images per class, at most 50 for testing"),
    "half": Protocol(
        None,
        None,
        "a folder of your own photos: half of each class for training, all the rest for testing",
        train_fraction=0.5,
    ),
}


def protocol_split(name: str, class_counts: Sequence[int]) -> tuple[int, int | None]:
    """``(train_per_class, test_per_class)`` of protocol ``name`` for classes of ``class_counts``
    images (``test_per_class`` None: all the rest).  For a protocol of a training fraction
    (``half``), ``train_per_class`` is the smallest class's training count (the split gives each
    class its own: :func:`~classify_images.pipeline.settings.dataset.train_counts`).

    Raises
    ------
    ProtocolError
        Unknown name.
    """
    if name not in PROTOCOLS:
        raise ProtocolError(f"--protocol {name!r} is not a known protocol; known: {', '.join(PROTOCOLS)}")
    protocol = PROTOCOLS[name]
    train = protocol.train_per_class
    if train is None:
        smallest = min(int(k) for k in class_counts)
        train = max(1, min(int(protocol.train_fraction * smallest), smallest - 1))
    return train, protocol.test_per_class


def small_classes(class_names: Sequence[str], train_counts: Sequence[int]) -> str | None:
    """One line naming the classes with fewer than half the median class's training images (they
    will be learnt poorly: a limit on the accuracy the others do not share), or None."""
    counts = sorted(int(k) for k in train_counts)
    median = counts[len(counts) // 2]
    small = [(name, int(k)) for name, k in zip(class_names, train_counts) if 2 * int(k) < median]
    if not small:
        return None
    named = ", ".join(f"{name} ({k})" for name, k in small[:5]) + (" …" if len(small) > 5 else "")
    return (
        f"{len(small)} class(es) have far fewer training images than the others (median {median}): {named}; "
        "they will be recognised less well: add photos to them"
    )


def short_classes(
    class_names: Sequence[str], class_counts: Sequence[int], n_train: int, n_test: int | None
) -> str | None:
    """One line naming the classes with fewer than the ``n_train + n_test`` images a protocol with
    a test cap asks (their test sets will be smaller), or None when every class has them."""
    if n_test is None:
        return None
    asked = n_train + n_test
    short = [(name, int(k)) for name, k in zip(class_names, class_counts) if k < asked]
    if not short:
        return None
    named = ", ".join(f"{name} ({k})" for name, k in short[:5]) + (" …" if len(short) > 5 else "")
    return (
        f"{len(short)} class(es) have fewer than the {asked} images the split asks ({n_train} training + "
        f"{n_test} test): {named}; their test sets are smaller"
    )
