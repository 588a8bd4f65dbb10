"""The property-based tests behave alike under every hypothesis release and loaded profile
(tests/_fuzz.py): checked from their source, so that a new fuzz test cannot drift."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
#: pytest's own fixtures that live for one test function.
BUILTIN_FUNCTION_FIXTURES = {
    "tmp_path",
    "tmpdir",
    "capsys",
    "capsysbinary",
    "capfd",
    "capfdbinary",
    "monkeypatch",
    "request",
    "caplog",
    "recwarn",
}


def _name(node: ast.AST) -> str:
    """``given`` for ``given(...)``, ``hypothesis.given(...)``, ``given``."""
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _function_scoped_fixtures(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if _name(decorator) == "fixture":
                    scope = next((k.value for k in getattr(decorator, "keywords", []) if k.arg == "scope"), None)
                    if scope is None or (isinstance(scope, ast.Constant) and scope.value == "function"):
                        names.add(node.name)
    return names


def _modules() -> list[Path]:
    return sorted(TESTS.glob("test_*.py"))


def _fuzz_tests() -> list[tuple[Path, ast.FunctionDef]]:
    found = []
    for module in _modules():
        tree = ast.parse(module.read_text(encoding="utf-8"))
        found += [
            (module, node)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and any(_name(d) == "given" for d in node.decorator_list)
        ]
    return found


def test_the_fuzz_tests_are_found():
    assert len(_fuzz_tests()) >= 7


@pytest.mark.parametrize("module, test", _fuzz_tests(), ids=lambda v: v.name if hasattr(v, "name") else str(v))
def test_fuzz_test_uses_the_shared_settings_and_no_function_scoped_fixture(module, test):
    assert any(_name(d) == "fuzz_settings" for d in test.decorator_list), (
        f"{module.name}::{test.name}: decorate it with @fuzz_settings(N) from tests/_fuzz.py"
    )
    given = next(d for d in test.decorator_list if _name(d) == "given")
    generated = {k.arg for k in given.keywords}
    function_scoped = (
        BUILTIN_FUNCTION_FIXTURES
        | _function_scoped_fixtures(ast.parse(module.read_text("utf-8")))
        | _function_scoped_fixtures(ast.parse((TESTS / "conftest.py").read_text("utf-8")))
    )
    shared = [a.arg for a in test.args.args if a.arg not in generated and a.arg in function_scoped]
    assert not shared, f"{module.name}::{test.name} shares function-scoped fixtures {shared} between its examples"


@pytest.mark.parametrize("module", [m for m in _modules() if m.name != Path(__file__).name], ids=lambda p: p.name)
def test_hypothesis_is_imported_not_skipped(module):
    """hypothesis is a test dependency (pyproject's test extra): missing or broken, it fails the run."""
    assert 'importorskip("hypothesis")' not in module.read_text("utf-8"), module.name
