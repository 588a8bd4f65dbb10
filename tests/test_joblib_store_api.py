"""The private joblib API the stage cache's storage builds on (classify_images/pipeline/storage/cache_store.py).

:class:`~classify_images.pipeline.storage.cache_store.NpzStoreBackend` subclasses
``joblib._store_backends.FileSystemStoreBackend``: only ``joblib.register_store_backend`` is
public, and it takes a subclass of the private ``StoreBackendBase``, so there is no public
extension point to move to.  pyproject.toml pins the joblib releases this was tested with;
these tests fail with one clear message when the installed joblib is outside the pin or
changed what the backend relies on (names, signatures, the write path), so that a new joblib
is checked before the pin is widened.
"""

from __future__ import annotations

import inspect
import os
import re
import tomllib

import numpy as np
import pytest

from .conftest import REPO

_WHAT = (
    "classify_images/pipeline/storage/cache_store.py subclasses joblib._store_backends.FileSystemStoreBackend (private API); "
    "check NpzStoreBackend against this joblib before widening the joblib pin in pyproject.toml"
)

#: Methods of joblib's file-system backend that NpzStoreBackend overrides or calls, with the
#: leading parameters it relies on.
RELIED_ON = {
    "configure": ("self", "location", "verbose", "backend_options"),
    "create_location": ("self", "location"),
    "_move_item": ("src", "dst"),  # a static method
    "contains_item": ("self", "call_id"),
    "load_item": ("self", "call_id", "verbose", "timestamp", "metadata"),
    "dump_item": ("self", "call_id", "item", "verbose"),
    "_concurrency_safe_write": ("self", "to_write", "filename", "write_func"),
    "store_metadata": ("self", "call_id", "metadata"),
    "store_cached_func_code": ("self", "call_id", "func_code"),
}


def _pin() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ``joblib>=A,<B`` requirement of pyproject.toml as two version tuples."""
    with open(REPO / "pyproject.toml", "rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    spec = next(d for d in dependencies if re.match(r"joblib\b", d))
    match = re.fullmatch(r"joblib\s*>=\s*([\d.]+)\s*,\s*<\s*([\d.]+)", spec.strip())
    assert match, f"pyproject.toml must pin joblib to a tested range (joblib>=A,<B), not {spec!r}: {_WHAT}"
    return tuple(map(int, match[1].split("."))), tuple(map(int, match[2].split(".")))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_installed_joblib_is_within_the_tested_pin():
    import joblib

    low, high = _pin()
    assert low <= _version(joblib.__version__) < high, (
        f"joblib {joblib.__version__} is outside the tested range >={low}, <{high}: {_WHAT}"
    )


def test_the_private_backend_class_and_methods_are_there():
    try:
        from joblib._store_backends import FileSystemStoreBackend, StoreBackendBase
    except ImportError as exc:
        pytest.fail(f"joblib no longer has joblib._store_backends.FileSystemStoreBackend ({exc}): {_WHAT}")
    from classify_images.pipeline.storage.cache_store import NpzStoreBackend

    assert issubclass(NpzStoreBackend, StoreBackendBase)
    for name, leading in RELIED_ON.items():
        method = getattr(FileSystemStoreBackend, name, None)
        assert callable(method), f"joblib's FileSystemStoreBackend has no method {name}: {_WHAT}"
        parameters = tuple(inspect.signature(method).parameters)
        if isinstance(inspect.getattr_static(FileSystemStoreBackend, name), staticmethod) != (leading[0] != "self"):
            pytest.fail(f"joblib's FileSystemStoreBackend.{name} changed between method and static method: {_WHAT}")
        parameters = parameters[: len(leading)]
        assert parameters == leading, (
            f"joblib's FileSystemStoreBackend.{name} takes {parameters}, NpzStoreBackend expects {leading}: {_WHAT}"
        )


def test_every_file_joblib_writes_goes_through_the_overridden_temporary_then_rename(tmp_path):
    """Results, metadata and function code are all written by ``_concurrency_safe_write`` (the
    override names the temporaries so that stale ones can be found): joblib must still call it."""
    from classify_images.pipeline.storage.cache_store import NpzStoreBackend

    backend = NpzStoreBackend()
    backend.configure(str(tmp_path), verbose=0)
    written = []
    original = backend._concurrency_safe_write

    def record(to_write, filename, write_func):
        written.append(os.path.basename(filename))
        return original(to_write, filename, write_func)

    backend._concurrency_safe_write = record
    call_id = ["module", "function", "0123abcd"]
    backend.dump_item(call_id, np.arange(3.0))
    backend.store_metadata(call_id, {"duration": 0.1})
    backend.store_cached_func_code(call_id[:2], "def function(): pass\n")
    # joblib 1.4 and 1.5 write func_code.py in place (a torn one reads as a changed function: the
    # stage is recomputed, never read wrong); 1.6 writes it through the override too
    assert written[:2] == ["output.npz", "metadata.json"], f"joblib wrote {written}: {_WHAT}"
    assert (tmp_path / "module" / "function" / "func_code.py").is_file(), f"joblib wrote no func_code.py: {_WHAT}"
    assert backend.contains_item(call_id), _WHAT
    np.testing.assert_array_equal(backend.load_item(call_id), np.arange(3.0))


def test_memory_with_the_npz_backend_round_trips_without_pickle(tmp_path):
    import joblib

    from classify_images.pipeline.storage.cache_store import BACKEND_NAME

    calls = []

    def square(x):
        calls.append(x)
        return np.asarray(x, dtype=np.float64) ** 2

    memory = joblib.Memory(str(tmp_path), backend=BACKEND_NAME, verbose=0)
    cached = memory.cache(square)
    first, second = cached([1.0, 2.0]), cached([1.0, 2.0])
    np.testing.assert_array_equal(first, [1.0, 4.0])
    np.testing.assert_array_equal(second, first)
    assert calls == [[1.0, 2.0]], f"joblib.Memory recomputed a stored result: {_WHAT}"
    names = {name for _, _, files in os.walk(tmp_path) for name in files}
    assert "output.npz" in names and "output.pkl" not in names, f"joblib wrote {sorted(names)}: {_WHAT}"
