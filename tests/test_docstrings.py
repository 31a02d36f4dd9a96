"""Every public module, class, function and method of tunecache has a docstring."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "tunecache"


def _public(name: str) -> bool:
    return not name.startswith("_")


def undocumented(root: Path = PACKAGE) -> Iterator[str]:
    """`path:line name` of every public definition without a docstring."""
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root.parent)
        tree = ast.parse(path.read_text(), str(path))
        if ast.get_docstring(tree) is None:
            yield f"{where}:1 (module)"
        yield from _walk(tree.body, where, "")


def _walk(body: list[ast.stmt], where: Path, prefix: str) -> Iterator[str]:
    for node in body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if not _public(node.name) or _is_overload(node):
            continue
        if ast.get_docstring(node) is None:
            yield f"{where}:{node.lineno} {prefix}{node.name}"
        if isinstance(node, ast.ClassDef):
            yield from _walk(node.body, where, f"{prefix}{node.name}.")


def _is_overload(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any(
        (isinstance(d, ast.Name) and d.id == "overload")
        or (isinstance(d, ast.Attribute) and d.attr in ("overload", "setter", "deleter"))
        for d in decorators
    )


def test_every_public_definition_has_a_docstring() -> None:
    missing = list(undocumented())
    assert missing == [], "public names without a docstring:\n" + "\n".join(missing)


def test_the_walk_finds_a_planted_undocumented_method(tmp_path: Path) -> None:
    root = tmp_path / "tunecache"
    root.mkdir()
    (root / "a.py").write_text(
        '"""A module."""\n'
        "class A:\n"
        '    """A class."""\n'
        "    def run(self):\n        return 1\n"
        "    def _private(self):\n        return 2\n"
        "def helper():\n"
        '    """A helper."""\n'
    )
    assert list(undocumented(root)) == ["tunecache/a.py:4 A.run"]
