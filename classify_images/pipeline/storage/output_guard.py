"""What a command may write over: the one rule every output of classify-images follows.

A user points ``--out`` (``--workdir``, ``--cache-dir``) at a path; what is there may be theirs.
The rule, checked before any work:

* **A folder** is written into only when it is absent, empty, or proven ours: it holds the
  marker :data:`MARKER` (``.classify-images.json``, our :data:`MARKER_FORMAT` key, the kind of
  output and the names we wrote in it).  A feature-set folder proves itself by its manifest
  instead (:func:`~classify_images.pipeline.storage.feature_store.is_feature_set_folder`: our format
  key *and* nothing but the files that manifest lists).
* **Only the names we wrote are replaced**: in a folder of ours, a file of an output's name
  that the marker does not record (a user put it there) is refused too.  Files with other
  names are never touched, read or deleted.
* **A single file** (``train --out model.npz``) is replaced only when it is one of our model
  files (a regular file whose header carries our format key; :func:`is_model_file` reads the
  header only and trusts nothing else in it).
* **Another output of ours is not mixed in**: a report is not written into a feature set,
  a run folder or another kind of output (``evaluate --out`` the feature set's own folder).
* **The stage cache** goes only into a folder that is absent, empty or already a stage cache
  (:func:`check_cache_folder`): joblib writes a ``.gitignore`` of ``*`` into the folder it is
  given, which would hide a user's files from ``git status``.
* **Another run is not replaced silently**: the marker records the run (command, classifier,
  parameters, seeds, inputs); a folder holding a different run's outputs is refused
  (default folder names carry the parameters, :func:`params_suffix`, so two runs with
  different ``--param`` get two folders).

A refusal is one line (:class:`OutputRefusedError`, exit status 2) naming the path, why, and
``--force``.  ``--force`` means: *the files of the names this command writes may be replaced
even though we cannot prove we wrote them* (a user's ``report.md``, a folder of another run,
a model file that is not ours).  Even with ``--force`` nothing else is deleted or replaced —
no file of another name in the folder, nothing behind a symbolic link (a link is replaced
by a file, its target is untouched), never a folder of the user's — and an output is never
written into another kind of output of ours.

References
----------
1. Issue 26 ("Data loss"), issue 25 point 4 of the classify-images tracker.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import ClassifyImagesError
from ...files import read_format_json
from .atomic import atomic_write_json

__all__ = [
    "MARKER",
    "MARKER_FORMAT",
    "OutputRefusedError",
    "OutputFolder",
    "check_output_file",
    "is_model_file",
    "read_marker",
    "params_suffix",
    "check_cache_folder",
]

#: The marker file we write in every output folder (feature sets excepted: their manifest).
MARKER = ".classify-images.json"
#: The format key of :data:`MARKER`.
MARKER_FORMAT = "classify-images-outputs"
#: The ``format`` that a model file's header carries (written by
#: :mod:`~classify_images.pipeline.training.model_file`; named here so that this rule, below the
#: model files, can recognise one without importing them).
MODEL_FORMAT_NAME = "classify-images-model"
#: A marker larger than this is not ours (it is read whole).
_MAX_MARKER_BYTES = 1 << 20
#: Files in a folder named in a refusal (the rest are counted).
_NAMED = 3


class OutputRefusedError(ClassifyImagesError, ValueError):
    """An output path holds something classify-images did not write (one line, naming ``--force``)."""


def _refusal(
    option: str, path: Path, why: str, *, force: bool = True, replaced: str = "them (other files are kept)"
) -> OutputRefusedError:
    hint = f"; choose another path, or add --force to replace {replaced}" if force else ""
    return OutputRefusedError(f"refusing to write {option} {path}: {why}{hint}")


def _listing(names: Iterable[str]) -> str:
    names = sorted(names)
    shown = ", ".join(names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


def read_marker(folder: str | os.PathLike) -> dict | None:
    """The marker of ``folder`` when it is ours (a regular file, our format key, a list of
    names); None otherwise."""
    marker = read_format_json(Path(folder) / MARKER, MARKER_FORMAT, max_bytes=_MAX_MARKER_BYTES)
    if marker is None:
        return None
    names = marker.get("files")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return None
    return marker


def _canonical(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


class OutputFolder:
    """A folder a command writes ``names`` (files or sub-folders, at its top level) into.

    Parameters
    ----------
    path : path-like
    names : iterable of str
        What the command writes in it.
    kind : str
        The kind of output (``"report"``, ``"experiment"``, ``"run"``, ``"demo"``), recorded
        in the marker: an output of another kind is never written over.
    run : dict, optional
        What decides the content (command, classifier, parameters, inputs), recorded in the
        marker: a folder holding a different run is refused without ``force``.
    option : str
        How the user named the folder (``--out``, ``--workdir``), for the refusal.

    Usage: :meth:`check` before any work, :meth:`claim` just before the first write.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        names: Iterable[str],
        kind: str,
        *,
        run: dict | None = None,
        option: str = "--out",
    ) -> None:
        self.path, self.names, self.kind = Path(path), tuple(names), kind
        self.run, self.option = (None if run is None else _canonical(run)), option

    def _refuse(self, why: str, *, force: bool = True) -> OutputRefusedError:
        return _refusal(self.option, self.path, why, force=force)

    def check(self, force: bool = False) -> Path:
        """Raise :class:`OutputRefusedError` unless the command may write into the folder.

        Allowed: absent, empty, or holding our marker of this kind, for the same run, with
        every existing file of :attr:`names` recorded in it.  ``force`` allows a folder not
        proven ours, another run, and unrecorded files of :attr:`names`; never a symbolic
        link, a file, a feature set or another kind of our outputs.
        """
        from .feature_store import MANIFEST, is_feature_set_folder

        path = self.path
        try:
            info = os.lstat(path)
        except OSError:  # nothing there (or nothing reachable): the write reports its own error
            return path
        if stat.S_ISLNK(info.st_mode):
            raise self._refuse("it is a symbolic link; give the folder itself (links are not followed)", force=False)
        if not stat.S_ISDIR(info.st_mode):
            raise self._refuse(f"it is a file, not a folder; give a folder for the {self.kind}", force=False)
        try:
            present = set(os.listdir(path))
        except OSError as exc:
            raise self._refuse(f"cannot list it ({exc.strerror})", force=False) from None
        if not present:
            return path
        marker = read_marker(path)
        if marker is None:
            if MANIFEST in present and is_feature_set_folder(path):
                raise self._refuse(
                    f"it is a feature set's folder; give a folder of its own to the {self.kind}", force=False
                )
            if not force:
                raise self._refuse(f"it holds files classify-images did not write ({_listing(present)})")
            return path
        if marker.get("kind") != self.kind:
            raise self._refuse(
                f"it holds classify-images' {marker.get('kind')!r} outputs; give a folder of its own "
                f"to the {self.kind}",
                force=False,
            )
        unfinished = marker.get("finished") is False  # a run that failed: its retry may take the folder back
        if not force and self.run is not None and marker.get("run") not in (None, self.run) and not unfinished:
            raise self._refuse(f"it holds the {self.kind} of another run ({_run_text(marker['run'])})")
        foreign = [name for name in self.names if name in present and name not in marker["files"]]
        if foreign and not force:
            raise self._refuse(
                f"{_listing(foreign)} there {'was' if len(foreign) == 1 else 'were'} not written by classify-images"
            )
        return path

    def claim(self, *, until_finished: bool = False) -> Path:
        """Create the folder if needed and record :attr:`names` (with those recorded before) in its
        marker, before the first of them is written: a crash in between leaves them ours.

        ``until_finished``: the run is recorded as unfinished until :meth:`finish`; a command that
        fails in between leaves a folder its retry with other settings may write into (the run
        recorded there never completed, so no finished run is replaced)."""
        self.path.mkdir(parents=True, exist_ok=True)
        before = read_marker(self.path) or {}
        files = sorted(set(before.get("files", [])) | set(self.names))
        marker = {"format": MARKER_FORMAT, "format_version": 1, "kind": self.kind, "files": files, "run": self.run}
        if until_finished:
            marker["finished"] = False
        atomic_write_json(self.path / MARKER, marker)
        return self.path

    def finish(self) -> Path:
        """Record the run claimed with ``until_finished`` as finished (:meth:`claim`)."""
        return self.claim()


def _run_text(run: Any) -> str:
    if not isinstance(run, dict):
        return "unknown"
    text = ", ".join(f"{key} {json.dumps(value, sort_keys=True)}" for key, value in sorted(run.items()))
    return text if len(text) <= 160 else text[:157] + "..."


def is_model_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file holding a classify-images model header.

    Reads the zip directory and the header member only (bounded), never the arrays; says
    nothing about whether the model is valid — only that we wrote it.
    """
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return False
        with zipfile.ZipFile(path) as archive:
            member = archive.getinfo("__meta__.npy")
            if member.file_size > _MAX_MARKER_BYTES:
                return False
            import numpy as np

            with archive.open(member) as handle:
                header = np.load(handle, allow_pickle=False)
        meta = json.loads(str(header[()]))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, NotImplementedError, RecursionError, EOFError):
        return False
    return isinstance(meta, dict) and meta.get("format") == MODEL_FORMAT_NAME


def check_output_file(path: str | os.PathLike, what: str, *, force: bool = False, option: str = "--out") -> Path:
    """Raise :class:`OutputRefusedError` unless the model file ``path`` may be written.

    Allowed: absent, or one of our model files (:func:`is_model_file`).  ``force`` allows
    any other file or a symbolic link (replaced by the new file; its target is untouched);
    never a folder.  A file inside a feature set's folder is refused: the feature set would
    no longer be ours.
    """
    from .feature_store import MANIFEST, is_feature_set_folder

    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if (parent / MANIFEST).exists() and is_feature_set_folder(parent):
        raise _refusal(option, path, f"{parent} is a feature set's folder; write the {what} beside it", force=False)
    try:
        info = os.lstat(path)
    except OSError:  # nothing there (or nothing reachable): the write reports its own error
        return path
    if stat.S_ISDIR(info.st_mode):
        raise _refusal(option, path, f"it is a folder; give the name of the {what} to write", force=False)
    if force or is_model_file(path):
        return path
    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a file classify-images did not write"
    raise _refusal(option, path, f"it is {kind}, not a {what} of ours", replaced="it")


def params_suffix(params: dict[str, Any] | None) -> str:
    """A short, readable, file-name-safe suffix naming ``params`` (``""`` for none): ``-C=0.01-p=-8``,
    or ``-p<8 hex digits of their hash>`` when that would be long or not portable."""
    if not params:
        return ""
    text = "-".join(f"{key}={_value_text(value)}" for key, value in sorted(params.items()))
    if len(text) <= 40 and re.fullmatch(r"[A-Za-z0-9_.,=+\-]+", text):
        return "-" + text
    digest = hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"-p{digest}"


def _value_text(value: Any) -> str:
    """A parameter value in a folder name: a list as its values joined by commas (``C=1,10,100``)."""
    if isinstance(value, (list, tuple)):
        return ",".join(_value_text(v) for v in value)
    return json.dumps(value, sort_keys=True).replace('"', "")


def check_cache_folder(path: str | os.PathLike) -> Path:
    """Raise :class:`OutputRefusedError` unless ``path`` may hold the stage cache.

    joblib's ``Memory(location)`` writes ``location/.gitignore`` (``# Created by joblib
    automatically.`` and ``*``; joblib 1.6 keeps an existing ``.gitignore``), so a cache folder
    that is a user's folder — a git work tree, say — would hide their new files from ``git``.
    Allowed: absent, empty, or holding a stage cache already (a ``joblib`` folder, not a link).
    """
    path = Path(path).expanduser()
    try:
        present = set(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return path  # (absent; a file there is the cache folder's own one-line error)
    except OSError:
        return path
    if not present or (os.path.isdir(path / "joblib") and not os.path.islink(path / "joblib")):
        return path
    raise OutputRefusedError(
        f"refusing to use {path} as the stage cache: it holds files of its own ({_listing(present)}) and no cache, "
        f"and joblib would write a '.gitignore' of '*' there (hiding them from git); give a new or empty folder, "
        f"e.g. {path / 'classify-images-cache'}"
    )
