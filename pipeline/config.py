"""Pipeline configuration: TOML files validated against one schema.

A configuration has one table per stage of the data flow (DESIGN.md §1)::

    [dataset]        keep_background, train_per_class, test_per_class, seed
    [image]          max_side
    [sift]           patch_sizes, step, smooth, contrast_threshold, cache_descriptors
    [codebook]       kind ("kmeans" | "sparse"), size, n_samples, lambda, n_iter, seed
    [pooling]        method ("average" | "max" | "sqrt" | "abs"), levels
    [normalization]  method ("l2" | "l1" | "power" | "minmax" | "none")

Every key has a default (:data:`DEFAULTS`); a file or a command-line flag
overrides some of them.  An unknown table or key, or a value of the wrong type
or outside its allowed values, is a :class:`ConfigError` whose one-line message
names the key and what is allowed.  Ready-made files live in ``configs/`` and
can be named without their extension (``--config scspm``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "DEFAULTS", "load_config", "validate_config", "stage_hash", "named_configs"]


class ConfigError(ValueError):
    """A configuration file or value is invalid (user error)."""


DEFAULTS: dict[str, dict[str, Any]] = {
    "dataset": {"keep_background": False, "train_per_class": 15, "test_per_class": 50, "seed": 0},
    "image": {"max_side": 300},
    "sift": {
        "patch_sizes": [16],
        "step": 8,
        "smooth": True,
        "contrast_threshold": 1.0,
        "cache_descriptors": True,
    },
    "codebook": {"kind": "kmeans", "size": 1024, "n_samples": 200_000, "lambda": 0.15, "n_iter": 100, "seed": 0},
    "pooling": {"method": "average", "levels": [1, 2, 4]},
    "normalization": {"method": "l1"},
}


def _int(low: int | None = None, *, optional: bool = False) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if optional and value in (None, 0, "all"):
            return None
        if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
            allowed = f"an integer ≥ {low}" if low is not None else "an integer"
            raise ConfigError(f"{key} = {value!r}: expected {allowed}" + (" (or 0 / \"all\" for no cap)" if optional else ""))
        return value

    return check


def _float(low: float = 0.0) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
            raise ConfigError(f"{key} = {value!r}: expected a number ≥ {low}")
        return float(value)

    return check


def _bool(key: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} = {value!r}: expected true or false")
    return value


def _choice(*allowed: str) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if value not in allowed:
            raise ConfigError(f"{key} = {value!r}: allowed values are {', '.join(map(repr, allowed))}")
        return value

    return check


def _int_list(low: int, *, multiple_of: int = 1) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        ok = isinstance(value, list) and value and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= low and v % multiple_of == 0 for v in value
        )
        if not ok:
            extra = f" multiple of {multiple_of}" if multiple_of > 1 else ""
            raise ConfigError(f"{key} = {value!r}: expected a non-empty list of integers ≥ {low}{extra}")
        return list(value)

    return check


SCHEMA: dict[str, dict[str, Callable[[str, Any], Any]]] = {
    "dataset": {
        "keep_background": _bool,
        "train_per_class": _int(1),
        "test_per_class": _int(1, optional=True),
        "seed": _int(0),
    },
    "image": {"max_side": _int(16)},
    "sift": {
        "patch_sizes": _int_list(8, multiple_of=4),
        "step": _int(1),
        "smooth": _bool,
        "contrast_threshold": _float(0.0),
        "cache_descriptors": _bool,
    },
    "codebook": {
        "kind": _choice("kmeans", "sparse"),
        "size": _int(2),
        "n_samples": _int(100),
        "lambda": _float(0.0),
        "n_iter": _int(1),
        "seed": _int(0),
    },
    "pooling": {"method": _choice("average", "max", "sqrt", "abs"), "levels": _int_list(1)},
    "normalization": {"method": _choice("l2", "l1", "power", "minmax", "none")},
}

#: Keys that do not change any computed number (excluded from hashes).
NON_SEMANTIC_KEYS = {("sift", "cache_descriptors")}


def validate_config(config: dict[str, Any], *, source: str = "config") -> dict[str, dict[str, Any]]:
    """Merge ``config`` over :data:`DEFAULTS` and validate every value.

    Returns
    -------
    config : dict
        A complete, validated configuration (new object).

    Raises
    ------
    ConfigError
        Unknown table or key, wrong type, value outside the allowed ones.
    """
    merged = copy.deepcopy(DEFAULTS)
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected tables [dataset], [sift], …")
    for table, values in config.items():
        if table not in SCHEMA:
            raise ConfigError(f"{source}: unknown table [{table}]; known tables: {', '.join(SCHEMA)}")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [{table}] must be a table of key = value")
        for key, value in values.items():
            if key not in SCHEMA[table]:
                raise ConfigError(
                    f"{source}: unknown key {table}.{key}; known keys of [{table}]: {', '.join(SCHEMA[table])}"
                )
            merged[table][key] = value
    for table, checks in SCHEMA.items():
        for key, check in checks.items():
            merged[table][key] = check(f"{source}: {table}.{key}", merged[table][key])
    return merged


def named_configs() -> dict[str, Path]:
    """Ready-made configurations shipped in ``configs/``, by name."""
    folder = resources.files("classify_images.configs")
    return {
        entry.name[: -len(".toml")]: Path(str(entry))
        for entry in folder.iterdir()
        if entry.name.endswith(".toml")
    }


def load_config(path: str | os.PathLike | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> dict:
    """Load and validate a configuration.

    Parameters
    ----------
    path : path-like or str, optional
        A TOML file, or the name of a ready-made config (``scspm``, ``bof-spm``, …).
        None: the defaults.
    overrides : dict, optional
        ``{table: {key: value}}`` applied after the file (command-line flags).
    """
    raw: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        file = Path(path)
        if not file.exists():
            shipped = named_configs()
            if str(path) in shipped:
                file = shipped[str(path)]
            else:
                names = ", ".join(sorted(shipped))
                raise ConfigError(f"config file {path} does not exist (ready-made configs: {names})")
        source = str(file)
        try:
            raw = tomllib.loads(file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: not valid TOML ({exc})") from None
    for table, values in (overrides or {}).items():
        raw.setdefault(table, {}).update({k: v for k, v in values.items() if v is not None})
    return validate_config(raw, source=source)


def stage_hash(config: dict, tables: list[str] | tuple[str, ...], *extra: Any) -> str:
    """Digest of the semantic keys of ``tables`` (and ``extra`` values).

    Each stage's cache key includes the tables of every stage upstream of it,
    so an upstream change can never return a stale downstream result.
    """
    payload = {
        table: {k: v for k, v in config[table].items() if (table, k) not in NON_SEMANTIC_KEYS}
        for table in tables
    }
    text = json.dumps([payload, list(extra)], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()
