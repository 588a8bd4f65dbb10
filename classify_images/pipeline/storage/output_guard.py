"""What a command may write over: the one rule every output of classify-images follows.

A user points ``--out`` (``--workdir``, ``--cache-dir``) at a path; what is there may be theirs.
The rule, checked before any work:

* **A folder** is written into only when it is absent, empty, or holds the marker :data:`MARKER`
  (``.classify-images.json``: our :data:`MARKER_FORMAT` key, the kind of output, the names we
  write there and, for each file, the size and SHA-256 of the bytes we wrote).  A folder holding
  a feature set's manifest is never written into by another command, whatever marker is planted
  beside it (a feature set proves itself by its manifest,
  :func:`~classify_images.pipeline.storage.feature_store.is_feature_set_folder`).
* **A file is replaced only when it is what we wrote**: its size and SHA-256
  (:func:`file_identity`) are those the marker records for its name.  A marker proves nothing
  by itself — it may be copied from another folder or written by hand; a file whose bytes differ
  from the record (the user's ``report.md`` put in a folder emptied with ``rm *``, whose hidden
  marker stayed) is the user's.  Each identity is recorded *before* the file replaces the old one
  (:func:`~classify_images.pipeline.storage.atomic.before_replace`), so a crash at any moment leaves
  every file of ours recorded.  Files with other names are never touched, read or deleted.
* **A single file** (``train --out model.npz``) is replaced only when it is one of our model
  files (a regular file whose header carries our format key; :func:`is_model_file` reads the
  header only and trusts nothing else in it).
* **Another output of ours is not mixed in**: a report is not written into a feature set,
  a run folder or another kind of output (``evaluate --out`` the feature set's own folder).
* **The stage cache** goes only into a folder that is absent, empty or already a stage cache
  (:func:`check_cache_folder`): joblib writes a ``.gitignore`` of ``*`` into the folder it is
  given, which would hide a user's files from ``git status``.
* **Another run is not replaced silently**: the marker records the run (a digest of command,
  classifier, parameters, seeds, inputs, and a short text of them); a folder holding a different
  run's outputs is refused (default folder names carry the parameters, :func:`params_suffix`, so
  two runs with different ``--param`` get two folders).

A refusal is one line (:class:`OutputRefusedError`, exit status 2) naming the path, why, and
``--force``.  ``--force`` means: *write here even though we cannot prove the folder ours, or it
holds another run* — and a file of one of our names that is not ours is first **kept aside** as
``<name>.~1~`` (the next free number; :func:`set_aside`, as ``cp --backup=numbered``), never
replaced.  Even with ``--force`` nothing else is renamed or deleted — no file of another name in
the folder, nothing behind a symbolic link (a link is kept aside, its target is untouched), never
a folder of the user's — and an output is never written into another kind of output of ours.

References
----------
1. Issues 26 ("Data loss"), 25 (point 4) and 41 of the classify-images tracker.
2. GNU coreutils, ``cp --backup=numbered``: the ``NAME.~N~`` backups.
"""

from __future__ import annotations

import contextlib
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
from ...files import read_format_json, read_regular_bytes
from .atomic import atomic_write_json, is_temporary_of

__all__ = [
    "MARKER",
    "MARKER_FORMAT",
    "JOURNAL",
    "OutputRefusedError",
    "OutputFolder",
    "check_output_file",
    "is_model_file",
    "read_marker",
    "params_suffix",
    "check_cache_folder",
    "file_identity",
    "set_aside",
]

#: The marker file we write in every output folder (feature sets excepted: their manifest).
MARKER = ".classify-images.json"
#: Beside the marker while files are written: one line per file written, its identity recorded
#: before the file replaces the old one (appended: cheaper than rewriting the marker each time);
#: folded into the marker when the write ends.
JOURNAL = ".classify-images.log"
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
    """The marker of ``folder`` when it reads as ours (a regular file, our format key, a list of
    names, and for format 2 the identities of the files written); None otherwise.

    Reading as ours proves nothing about the files beside it: a marker can be copied or written
    by hand.  Only a file whose size and SHA-256 are those the marker records is treated as ours
    (:meth:`OutputFolder.check`).
    """
    marker = read_format_json(Path(folder) / MARKER, MARKER_FORMAT, max_bytes=_MAX_MARKER_BYTES)
    if marker is None:
        return None
    names = marker.get("files")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return None
    written = marker.get("written", {})
    if not isinstance(written, dict) or not all(
        isinstance(ids, list) and all(_is_identity(identity) for identity in ids) for ids in written.values()
    ):
        return None
    marker["written"] = {name: list(identities) for name, identities in written.items()}
    for name, identity in _journal(Path(folder)):
        if identity not in marker["written"].setdefault(name, []):
            marker["written"][name].append(identity)
    return marker


def _journal(folder: Path) -> list[tuple[str, dict]]:
    """The ``(name, identity)`` lines of ``folder``'s :data:`JOURNAL` (none when it is not a regular
    file of at most 1 MiB; lines that are not such a record are skipped)."""
    try:
        text = read_regular_bytes(folder / JOURNAL, max_bytes=_MAX_MARKER_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):
        return []
    entries = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("name"), str):
            identity = {"size": record.get("size"), "sha256": record.get("sha256")}
            if _is_identity(identity):
                entries.append((record["name"], identity))
    return entries


def _append_journal(folder: Path, name: str, identity: dict) -> None:
    """Append ``name``'s identity to :data:`JOURNAL` (not synced, no link followed, no wait on a FIFO);
    a failure only leaves the file unrecorded until the marker is written at the end."""
    line = (json.dumps({"name": name, **identity}) + "\n").encode()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(folder / JOURNAL, flags, 0o644)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.write(fd, line)
    except OSError:
        pass
    finally:
        os.close(fd)


def _is_identity(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("size"), int)
        and isinstance(value.get("sha256"), str)
        and len(value["sha256"]) == 64
    )


def file_identity(path: str | os.PathLike) -> dict[str, Any]:
    """What identifies the bytes of the regular file ``path``: ``{"size": bytes, "sha256": hex}``.

    SHA-256 (not a fast non-cryptographic hash): a file a user made cannot be given the identity
    of one we wrote short of holding the very same bytes.  Only the files an output folder's
    marker records are hashed — reports, ``experiment.json``, ``demo.json``: kilobytes to a few
    megabytes, hashed once when written (the temporary file, still in the page cache) and once
    when checked.  A multi-gigabyte feature set is never hashed: its folder is proven by its
    manifest and replaced as a whole.
    """
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def _stat_key(info: os.stat_result) -> tuple[int, ...]:
    """What tells, within one command, that a file is still the one hashed: the same inode (a rename
    keeps it), size and modification time."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _is_ours(path: Path, identities: list[dict], hashed: dict[Path, tuple] | None = None) -> bool:
    """Whether ``path`` is a regular file whose bytes are one of ``identities`` (size compared first:
    a user's file of another size is never read).  ``hashed`` holds identities this command computed
    already, by :func:`_stat_key`: a file unchanged since is not read again."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode) or not any(identity["size"] == info.st_size for identity in identities):
        return False
    known = None if hashed is None else hashed.get(path)
    if known is not None and known[0] == _stat_key(info):
        return known[1] in identities
    try:
        identity = file_identity(path)
    except OSError:
        return False
    if hashed is not None:
        hashed[path] = (_stat_key(info), identity)
    return identity in identities


def set_aside(path: str | os.PathLike) -> Path:
    """Rename the user's file (or link) ``path`` to the first free ``<name>.~N~`` beside it (the
    numbered backups of ``cp --backup=numbered``) and return the new name: never a byte lost,
    never another file replaced (the new name is taken with ``link``, which fails if it exists)."""
    path = Path(path)
    for number in range(1, 1_000_000):
        backup = path.with_name(f"{path.name}.~{number}~")
        if os.path.lexists(backup):
            continue
        try:
            os.link(path, backup, follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError:  # no hard links here (some file systems): a checked rename
            if os.path.lexists(backup):
                continue
            os.rename(path, backup)
            return backup
        os.unlink(path)
        return backup
    raise OutputRefusedError(f"cannot keep {path} aside: {path.name}.~1~ to .~999999~ all exist")


def _note_set_aside(path: Path, backup: Path) -> None:
    import warnings

    warnings.warn(
        f"{path} was not written by classify-images: kept as {backup.name} (--force never replaces a user's file)",
        stacklevel=3,
    )


def _canonical(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _run_digest(run: Any) -> str:
    return hashlib.sha256(json.dumps(run, sort_keys=True).encode()).hexdigest()


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
    parts : iterable of str, optional
        The names among ``names`` that are outputs proven ours by their own rule (a feature set's
        folder by its manifest, a report folder by its own marker, a model file by its header):
        the marker records their names only.  Every other name is a file the marker records by
        its size and SHA-256 (:func:`file_identity`).
    run : dict, optional
        What decides the content (command, classifier, parameters, inputs), recorded in the
        marker (as a digest and a short text): a folder holding a different run is refused
        without ``force``.
    option : str
        How the user named the folder (``--out``, ``--workdir``), for the refusal.

    Usage: :meth:`check` before any work; ``with folder.claim():`` around the writes (the
    marker records each file's identity before the file replaces the old one).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        names: Iterable[str],
        kind: str,
        *,
        parts: Iterable[str] = (),
        run: dict | None = None,
        option: str = "--out",
    ) -> None:
        self.path, self.names, self.kind = Path(path), tuple(names), kind
        self.parts = frozenset(parts)
        self.files = tuple(name for name in self.names if name not in self.parts)
        self.run, self.option = (None if run is None else _canonical(run)), option
        self._hashed: dict[Path, tuple] = {}  # identities computed by this command (:func:`_is_ours`)

    def _refuse(self, why: str, *, force: bool = True) -> OutputRefusedError:
        return _refusal(self.option, self.path, why, force=force, replaced=_FORCE_KEEPS)

    def _foreign(self, marker: dict | None, present: set[str]) -> list[str]:
        """The names of ours present in the folder that the marker does not prove ours."""
        foreign = []
        for name in self.names:
            if name not in present:
                continue
            if marker is None:
                foreign.append(name)
            elif name in self.parts:
                if name not in marker["files"]:
                    foreign.append(name)
            elif not _is_ours(self.path / name, marker["written"].get(name, []), self._hashed):
                foreign.append(name)
        return foreign

    def check(self, force: bool = False) -> Path:
        """Raise :class:`OutputRefusedError` unless the command may write into the folder.

        Allowed: absent, empty, or holding our marker of this kind, for the same run, where
        every existing file of :attr:`names` has the size and SHA-256 the marker records (a
        part: its name recorded).  ``force`` allows a folder not proven ours, another run, and
        files of :attr:`names` that are not ours — :meth:`claim` keeps those as ``<name>.~N~``;
        never a symbolic link, a file, a feature set, another kind of our outputs, or a folder
        of the user's where we write a file.
        """
        from .feature_store import MANIFEST, has_feature_set_manifest

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
        if MANIFEST in present and has_feature_set_manifest(path):  # whatever marker is planted beside it
            raise self._refuse(
                f"it is a feature set's folder; give a folder of its own to the {self.kind}", force=False
            )
        marker = read_marker(path)
        if marker is None:
            if not force:
                raise self._refuse(_not_ours_text(present))
        else:
            if marker.get("kind") != self.kind:
                raise self._refuse(
                    f"it holds classify-images' {marker.get('kind')!r} outputs; give a folder of its own "
                    f"to the {self.kind}",
                    force=False,
                )
            unfinished = marker.get("finished") is False  # a run that failed: its retry may take the folder back
            if (
                not force
                and self.run is not None
                and marker.get("run_digest") not in (None, _run_digest(self.run))
                and not unfinished
            ):
                raise self._refuse(f"it holds the {self.kind} of another run ({marker.get('run', 'unknown')})")
        foreign = self._foreign(marker, present)
        folders = [name for name in foreign if name in self.files and os.path.isdir(path / name)]
        if folders:
            raise self._refuse(
                f"{_listing(folders)} there {'is a folder' if len(folders) == 1 else 'are folders'} "
                f"classify-images did not write; move {'it' if len(folders) == 1 else 'them'} away",
                force=False,
            )
        if foreign and not force:
            raise self._refuse(
                f"{_listing(foreign)} there {'was' if len(foreign) == 1 else 'were'} not written by classify-images "
                "(the bytes differ from those it recorded)"
            )
        return path

    def claim(self, force: bool = False, *, until_finished: bool = False) -> OutputFolder:
        """Create the folder if needed, keep aside each file of :attr:`names` that is not ours (with
        ``force``; without, such a file is refused as by :meth:`check`), and record :attr:`names` in the marker before
        the first of them is written.  Use as ``with folder.claim():`` around the writes: each file's
        identity is recorded before it replaces the old one, so a crash at any moment leaves every
        file of ours recorded (and the old identities are dropped on leaving the block).

        ``until_finished``: the run is recorded as unfinished until :meth:`finish`; a command that
        fails in between leaves a folder its retry with other settings may write into (the run
        recorded there never completed, so no finished run is replaced)."""
        self.path.mkdir(parents=True, exist_ok=True)
        marker = read_marker(self.path)
        before = marker or {"files": [], "written": {}}
        present = set(os.listdir(self.path))
        foreign = [name for name in self._foreign(marker, present) if name in self.files]
        if foreign and not force:  # (what :meth:`check` refuses; a file put there since is refused too)
            raise self._refuse(
                f"{_listing(foreign)} there {'was' if len(foreign) == 1 else 'were'} not written by classify-images "
                "(the bytes differ from those it recorded)"
            )
        for name in foreign:
            if name in self.files:
                backup = set_aside(self.path / name)
                _note_set_aside(self.path / name, backup)
        written = {}
        for name, identities in before["written"].items():
            ours = [identity for identity in identities if _is_ours(self.path / name, [identity], self._hashed)]
            if ours:
                written[name] = ours[:1]
        self._write_marker(sorted(set(before["files"]) | set(self.names)), written, unfinished=until_finished)
        return self

    def finish(self) -> None:
        """Record the run claimed with ``until_finished`` as finished (:meth:`claim`)."""
        marker = read_marker(self.path)
        if marker is not None:
            self._write_marker(marker["files"], marker["written"])

    def _write_marker(
        self, files: list[str], written: dict[str, list], *, durable: bool = True, unfinished: bool = False
    ) -> None:
        marker = {"format": MARKER_FORMAT, "format_version": 2, "kind": self.kind, "files": files}
        if self.run is not None:
            marker["run_digest"], marker["run"] = _run_digest(self.run), _run_text(self.run)
        if unfinished:
            marker["finished"] = False
        marker["written"] = written
        atomic_write_json(self.path / MARKER, marker, durable=durable)
        with contextlib.suppress(FileNotFoundError):  # (folded into the marker just written)
            os.unlink(self.path / JOURNAL)

    def _record(self, destination: Path, complete: Path) -> None:
        """Before ``complete`` replaces ``destination``: add its identity to the marker's."""
        if destination.parent != self.path or destination.name not in self.files:
            return
        marker = read_marker(self.path) or {"written": {}}
        identities = marker["written"].get(destination.name, [])
        new = file_identity(complete)
        with contextlib.suppress(OSError):  # (renamed next: the same inode, size and time at ``destination``)
            self._hashed[destination] = (_stat_key(os.lstat(complete)), new)
        if new not in identities:  # (not synced: a power loss here leaves the file unproven — refused, never lost)
            _append_journal(self.path, destination.name, new)

    def __enter__(self) -> OutputFolder:
        from .atomic import before_replace

        self._recording = before_replace(self._record)
        self._recording.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self._recording.__exit__(*exc_info)
        marker = read_marker(self.path)
        if marker is not None:  # each file recorded by the identity it has now, and only that one
            written = {}
            for name, identities in marker["written"].items():
                ours = [identity for identity in identities if _is_ours(self.path / name, [identity], self._hashed)]
                if ours:
                    written[name] = ours[:1]
            self._write_marker(marker["files"], written, unfinished=marker.get("finished") is False)


#: What ``--force`` does, in a refusal.
_FORCE_KEEPS = "them (a file that is not ours is kept as NAME.~1~; other files are untouched)"


def _not_ours_text(present: set[str]) -> str:
    others = present - {MARKER, JOURNAL}
    if not others:
        return f"its {MARKER} is not one classify-images wrote"
    return f"it holds files classify-images did not write ({_listing(others)})"

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
    any other file or a symbolic link, which is first kept aside as ``<name>.~N~``
    (:func:`set_aside`; a link's target is untouched); never a folder.  A file inside a
    feature set's folder is refused: the feature set would no longer be ours.
    """
    from .feature_store import MANIFEST, has_feature_set_manifest

    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if (parent / MANIFEST).exists() and has_feature_set_manifest(parent):
        raise _refusal(option, path, f"{parent} is a feature set's folder; write the {what} beside it", force=False)
    try:
        info = os.lstat(path)
    except OSError:  # nothing there (or nothing reachable): the write reports its own error
        return path
    if stat.S_ISDIR(info.st_mode):
        raise _refusal(option, path, f"it is a folder; give the name of the {what} to write", force=False)
    if is_model_file(path):
        return path
    if force:
        backup = set_aside(path)
        _note_set_aside(path, backup)
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
    from .cache_store import CREATED_MARKER

    present.discard(CREATED_MARKER)  # (the stage cache made this folder)
    # ... and another process that is making it now: the marker's atomic write in flight
    present -= {name for name in present if is_temporary_of(name, CREATED_MARKER)}
    if not present or (os.path.isdir(path / "joblib") and not os.path.islink(path / "joblib")):
        return path
    raise OutputRefusedError(
        f"refusing to use {path} as the stage cache: it holds files of its own ({_listing(present)}) and no cache, "
        f"and joblib would write a '.gitignore' of '*' there (hiding them from git); give a new or empty folder, "
        f"e.g. {path / 'classify-images-cache'}"
    )
