"""Datasets as folders of class folders, and the seeded train/test split.

A dataset is a folder whose sub-folders are the classes (Caltech-101 [1]_: 102
folders; ``BACKGROUND_Google`` is excluded unless asked for; ``Faces`` and
``Faces_easy`` are separate classes).  The split draws ``n_train`` random images per
class for training and keeps the rest for testing, capped at ``n_test`` per class when
given — the protocols of the papers the package reproduces [2]_ [3]_: Caltech-101, 15 or
30 training images and at most 50 test images per class; 15-Scenes, 100 training images
per class and all the rest for testing.

References
----------
.. [1] L. Fei-Fei, R. Fergus and P. Perona, "Learning generative visual models from few
   training examples: an incremental Bayesian approach tested on 101 object
   categories", CVPR Workshop on Generative-Model Based Vision, 2004.
.. [2] S. Lazebnik, C. Schmid and J. Ponce, "Beyond bags of features: spatial pyramid
   matching for recognizing natural scene categories", CVPR 2006.
.. [3] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear spatial pyramid matching using
   sparse coding for image classification", CVPR 2009.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import ClassifyImagesError
from ...files import describe_file_kind, open_regular_file

__all__ = [
    "IMAGE_EXTENSIONS",
    "UNSUPPORTED_IMAGE_EXTENSIONS",
    "BACKGROUND_CLASSES",
    "DatasetError",
    "Dataset",
    "discover_dataset",
    "check_dataset_folder",
    "walk_image_files",
    "split_indices",
    "train_counts",
    "file_fingerprint",
    "dataset_digest",
]

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".gif", ".bmp", ".pgm", ".ppm", ".pbm", ".tif", ".tiff", ".webp", ".avif"}
)
BACKGROUND_CLASSES = frozenset({"BACKGROUND_Google"})
#: Photograph formats cameras and phones write that the image reader (OpenCV 5 here, Pillow without
#: plugins) cannot decode: listed as skipped with the advice to convert them, never ignored (AVIF it
#: reads: an image extension).
UNSUPPORTED_IMAGE_EXTENSIONS = {
    ".heic": "HEIC/HEIF",
    ".heif": "HEIC/HEIF",
    ".hif": "HEIC/HEIF",
    ".jxl": "JPEG XL",
    ".dng": "camera raw (DNG)",
    ".cr2": "camera raw (CR2)",
    ".cr3": "camera raw (CR3)",
    ".nef": "camera raw (NEF)",
    ".arw": "camera raw (ARW)",
    ".orf": "camera raw (ORF)",
    ".rw2": "camera raw (RW2)",
    ".raf": "camera raw (RAF)",
}


class DatasetError(ClassifyImagesError, ValueError):
    """The dataset folder or the split request is not usable (user error)."""


@dataclass(frozen=True)
class Dataset:
    """Images of a folder of class folders.

    Attributes
    ----------
    root : Path
    class_names : list of str
        Sorted class folder names.
    paths : list of str
        Image paths relative to ``root`` (``class/file``, ``class/sub-folder/file``), sorted.
    labels : ndarray of int64
        Index into ``class_names`` of each path.
    unusable : list of dict
        Files that are not used, as ``{"path", "reason"}`` (listed as skipped): a format the
        reader cannot decode (HEIC, camera raw), another extension, a file beside the class
        folders, a symbolic link whose target is missing, a symbolic-link loop.
    """

    root: Path
    class_names: list[str]
    paths: list[str]
    labels: np.ndarray
    unusable: list[dict[str, str]] = field(default_factory=list)

    def absolute(self, relative: str) -> Path:
        """Absolute path of an image given relative to the dataset root."""
        return self.root / relative


def unsupported_format_reason(suffix: str) -> str:
    """Why a file of an image format we cannot decode (:data:`UNSUPPORTED_IMAGE_EXTENSIONS`) is not used."""
    return f"unsupported format ({UNSUPPORTED_IMAGE_EXTENSIONS[suffix]}): convert it to JPEG or PNG to use it"


def discover_dataset(root: str | os.PathLike, *, keep_background: bool = False) -> Dataset:
    """List the classes and images of ``root``.

    Each class folder is searched recursively (:func:`walk_image_files`, the rule ``predict``
    follows too); image files are recognised by extension, case-insensitively
    (:data:`IMAGE_EXTENSIONS`); hidden files and folders are ignored.  Every other file — in a
    class folder, or beside the class folders — is listed in :attr:`Dataset.unusable` with its
    reason (an unsupported format such as HEIC, another extension, a broken link).

    Raises
    ------
    DatasetError
        ``root`` missing or not a folder, no class folder, fewer than two classes
        with images.
    """
    root = check_dataset_folder(root)
    class_dirs = sorted(entry for entry in root.iterdir() if entry.is_dir() and not entry.name.startswith("."))
    if not keep_background:
        class_dirs = [d for d in class_dirs if d.name not in BACKGROUND_CLASSES]
    class_names, paths, labels = [], [], []
    empty: list[str] = []
    unusable = [
        {"path": entry.name, "reason": "not in a class folder (each class is a sub-folder of the dataset)"}
        for entry in sorted(root.iterdir())
        if not entry.name.startswith(".") and not entry.is_dir()
    ]
    for class_dir in class_dirs:
        found, passed_over = walk_image_files(class_dir)
        files = [f.relative_to(class_dir).as_posix() for f in found]
        unusable += [{**entry, "path": f"{class_dir.name}/{entry['path']}"} for entry in passed_over]
        if not files:
            empty.append(class_dir.name)
            continue
        label = len(class_names)
        class_names.append(class_dir.name)
        paths.extend(f"{class_dir.name}/{name}" for name in files)
        labels.extend([label] * len(files))
    if not class_dirs:
        raise DatasetError(f"dataset folder {root} has no class folders (expected one sub-folder per class)")
    if empty:
        raise DatasetError(
            f"class folder(s) with no images in {root}: {', '.join(empty)} "
            "(remove them or add images; extensions: " + ", ".join(sorted(IMAGE_EXTENSIONS)) + ")"
        )
    if len(class_names) < 2:
        raise DatasetError(f"dataset {root} has a single class ({class_names[0]}): classification needs at least two")
    return Dataset(
        root=root, class_names=class_names, paths=paths, labels=np.asarray(labels, dtype=np.int64), unusable=unusable
    )


def check_dataset_folder(root: str | os.PathLike) -> Path:
    """``root`` as a Path, or :class:`DatasetError` when it is missing or not a folder."""
    root = Path(root)
    if not root.exists():
        raise DatasetError(f"dataset folder {root} does not exist")
    if not root.is_dir():
        raise DatasetError(f"dataset {root} is not a folder (expected a folder of class folders)")
    return root


def walk_image_files(folder: str | os.PathLike) -> tuple[list[Path], list[dict[str, str]]]:
    """The image files under ``folder``, searched recursively, and every other file with why it is not used.

    The one rule of every command that reads folders of images (``build-features``, ``run``,
    ``predict``): sub-folders are searched (a class folder's ``2019/`` holds photos of the class);
    hidden files and folders (``.DS_Store``, ``.thumbnails/``) are not images and are not listed;
    every other file that is not read is listed, as ``{"path", "reason"}`` with ``path`` relative to
    ``folder``: a format the reader cannot decode (HEIC/HEIF, camera raw, …:
    :data:`UNSUPPORTED_IMAGE_EXTENSIONS`), another extension, a broken link, a FIFO.

    Returns
    -------
    files : list of Path
        Regular files with an extension of :data:`IMAGE_EXTENSIONS` (case-insensitive), sorted by
        their relative path.
    passed_over : list of dict
        The other non-hidden entries, sorted by path.
    """
    folder = Path(folder)
    files: list[Path] = []
    passed_over: list[dict[str, str]] = []
    for parent, subfolders, names in os.walk(folder, followlinks=False):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = Path(parent) / name
            relative = path.relative_to(folder).as_posix()
            suffix = path.suffix.lower()
            if suffix in IMAGE_EXTENSIONS:
                reason = _unusable_reason(path)
                if reason is None:
                    files.append(path)
                else:
                    passed_over.append({"path": relative, "reason": reason})
            elif suffix in UNSUPPORTED_IMAGE_EXTENSIONS:
                passed_over.append({"path": relative, "reason": unsupported_format_reason(suffix)})
            else:
                passed_over.append({"path": relative, "reason": f"not an image file extension ({suffix or 'none'})"})
        for sub in list(subfolders):  # a link to a folder is listed by os.walk among the folders
            if (Path(parent) / sub).is_symlink():
                subfolders.remove(sub)
                passed_over.append(
                    {
                        "path": (Path(parent) / sub).relative_to(folder).as_posix(),
                        "reason": "symbolic link to a folder (not followed)",
                    }
                )
    files.sort(key=lambda f: f.relative_to(folder).as_posix())
    passed_over.sort(key=lambda e: e["path"])
    return files, passed_over


def _unusable_reason(entry: Path) -> str | None:
    """Why an entry with an image extension is not a readable file (None: it is a file)."""
    if entry.is_file():
        return None
    try:
        mode = os.stat(entry).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
        if entry.is_symlink():
            return "broken symbolic link (its target does not exist)"
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISDIR(mode):
        return None  # a folder named like an image: not an image, not listed
    return f"not a regular file ({describe_file_kind(mode)}; only regular files are read)"


def split_indices(
    labels: np.ndarray, n_train: int, n_test: int | None = None, seed: int = 0, *, train_fraction: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded per-class split: ``n_train`` images per class for training, the rest (≤ ``n_test``) for testing.

    With ``train_fraction``, class ``c`` of ``k_c`` items gives ``clip(floor(train_fraction · k_c), 1,
    k_c - 1)`` items to training instead (:func:`train_counts`): each class keeps its share, and a
    small class does not cut the training sets of the others.

    Parameters
    ----------
    labels : ndarray of int (n,)
        Class index of each item.
    n_train : int
        Training items per class.
    n_test : int or None
        Cap on test items per class (None: all the rest).
    seed : int
        Seed of the permutation (``numpy.random.default_rng``).

    Returns
    -------
    train_index, test_index : ndarray of int64, sorted

    Raises
    ------
    DatasetError
        A class with fewer than ``n_train + 1`` items (it would have no test item).
    """
    labels = np.asarray(labels)
    if n_train < 1:
        raise DatasetError(f"--train-per-class must be at least 1, got {n_train}")
    if n_test is not None and n_test < 1:
        raise DatasetError(f"--test-per-class must be at least 1 (or omitted for all the rest), got {n_test}")
    rng = np.random.default_rng(seed)
    train, test = [], []
    classes, counts = np.unique(labels, return_counts=True)
    if train_fraction is not None:
        too_small = [(int(c), int(k)) for c, k in zip(classes, counts) if k < 2]
        n_train_of = dict(zip(classes.tolist(), train_counts(counts, train_fraction)))
    else:
        too_small = [(int(c), int(k)) for c, k in zip(classes, counts) if k < n_train + 1]
        n_train_of = dict.fromkeys(classes.tolist(), n_train)
    if too_small:
        smallest = min(k for _, k in too_small)
        if smallest < 2:
            raise DatasetError(
                f"{len(too_small)} class(es) have fewer than 2 images (smallest: {smallest}; each class needs "
                "one training and one test image): add images or remove those classes"
            )
        raise DatasetError(
            f"{len(too_small)} class(es) have fewer than {n_train + 1} images (smallest: {smallest}); "
            f"use --protocol half (half of each class for training) or lower --train-per-class to at most {smallest - 1}"
        )
    for c in classes:
        members = np.flatnonzero(labels == c)
        order = rng.permutation(members)
        train.append(order[: n_train_of[c.item()]])
        rest = order[n_train_of[c.item()] :]
        test.append(rest if n_test is None else rest[:n_test])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def train_counts(class_counts: np.ndarray, train_fraction: float) -> list[int]:
    """Training items per class under ``train_fraction``: ``floor(fraction · k)``, at least 1 and at
    most ``k - 1`` (a test item per class)."""
    return [int(min(max(1, int(train_fraction * int(k))), int(k) - 1)) for k in class_counts]


def file_fingerprint(path: str | os.PathLike) -> str:
    """SHA-1 of a file's bytes: the cache key of everything computed from it."""
    digest = hashlib.sha1()
    with open_regular_file(path) as handle:  # a FIFO or a device is refused, not waited on or read forever
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dataset_digest(paths: list[str], fingerprints: list[str]) -> str:
    """SHA-1 over the relative paths and content fingerprints of a dataset's images.

    It changes when an image is added, removed, renamed or edited; it is part of the
    feature set's config hash.
    """
    # os.fsencode: a file name that is not valid UTF-8 (kept by Python as surrogates) is
    # digested as its bytes on disk; a valid name gives the same bytes as str.encode().
    return hashlib.sha1(b"\n".join(os.fsencode(f"{p}:{f}") for p, f in zip(paths, fingerprints))).hexdigest()
