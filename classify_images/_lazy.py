"""Names of a package imported on first use (PEP 562), so that importing the package stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: str, namespace: dict, table: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package`` whose public names ``table`` maps to
    ``"module:attribute"`` (a module relative to ``package`` when it starts with a dot); a name
    is imported when first read and kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = table[name].partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
