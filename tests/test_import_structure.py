"""The package's import structure: no cycle between product modules (imports written inside
functions count), the pipeline's sub-packages import only downward, and the lower packages
(features, coding, classifiers) never import the pipeline.

The graph is read from the source with :mod:`ast` (every ``import`` and ``from … import``
statement anywhere in a module), so it also sees the imports that run only when a function is
called, which ``sys.modules`` after an import would miss.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import classify_images

PACKAGE = Path(classify_images.__file__).resolve().parent

#: The pipeline's sub-packages, lowest first: each may import only those before it.
PIPELINE_LAYERS = ("settings", "execution", "storage", "extraction", "training", "interfaces")
#: The packages below the pipeline: they never import it.
LOWER_PACKAGES = ("features", "coding", "classifiers")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(["classify_images", *parts])] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The product modules that ``name`` imports (the longest known prefix of each imported name)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.module == "__future__":
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    # Importing ``a.b`` runs ``a/__init__.py`` first; a package's ``__init__`` that re-exports
    # its children lazily (PEP 562) is not an edge back. Drop edges into ancestors' __init__.
    return {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def _layer(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) >= 3 and parts[1] == "pipeline" and parts[2] in PIPELINE_LAYERS:
        return PIPELINE_LAYERS.index(parts[2])
    return None


def test_no_import_cycle_between_product_modules():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_are_edges(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from .other import x\n")
    modules = {"classify_images.p.m": module, "classify_images.p.other": tmp_path / "other.py"}
    assert _imports("classify_images.p.m", module, modules) == {"classify_images.p.other"}


def test_pipeline_sub_packages_import_only_downward():
    upward = []
    for name, targets in import_graph().items():
        own = _layer(name)
        if own is None:
            continue
        for target in targets:
            other = _layer(target)
            if other is not None and other > own:
                upward.append(f"{name} -> {target}")
    assert upward == []


@pytest.mark.parametrize("lower", LOWER_PACKAGES)
def test_lower_packages_never_import_the_pipeline(lower):
    offenders = [
        f"{name} -> {target}"
        for name, targets in import_graph().items()
        if name.startswith(f"classify_images.{lower}")
        for target in targets
        if target.startswith("classify_images.pipeline")
    ]
    assert offenders == []


def test_every_pipeline_sub_package_states_its_purpose_in_one_line():
    found = sorted(p.name for p in (PACKAGE / "pipeline").iterdir() if (p / "__init__.py").exists())
    assert found == sorted(PIPELINE_LAYERS)
    for layer in PIPELINE_LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / "pipeline" / layer / "__init__.py").read_text()))
        assert doc and "\n" not in doc.strip(), layer
    assert not list((PACKAGE / "pipeline").glob("[!_]*.py")), "pipeline/ holds sub-packages only"
