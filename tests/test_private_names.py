"""Modules talk through public names: no module of tunecache reaches into another's privates.

An AST walk over every module of the package flags:

- `from tunecache.x import _name` (relative imports too): a private name imported from another
  module;
- `m._name` where `m` was imported from a tunecache module (a module, a class, a function):
  `codec._prescan`, `Cache._set_names`;
- `m._name` or `m.sub._name` where `m` was imported from tunecache (`tunecache.codec._prescan`);
- `obj._name` on any other object (read, written or deleted, or named as a string to getattr and
  its kin), where `_name` is not a member of a class of the module doing it but is a member (a
  method, a class attribute, an attribute a method sets on `self`) of a class of another
  tunecache module: the walk cannot know `obj`'s type, so it tells by the name (`cache._read`,
  `table._memo`);
- `import tunecache.pkg._mod` / `from tunecache.pkg._mod import name` from outside `pkg`: a
  private module is private to the package that holds it.

Dunder names are never private. ALLOWED lists the exceptions, each with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "tunecache"

#: (module path relative to the checkout, the flagged expression) -> why it is allowed
ALLOWED: dict[tuple[str, str], str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _members(tree: ast.AST) -> set[str]:
    """The private names a module's classes define: methods, class attributes, and attributes
    a method assigns on its own instance or class (`self._engine = ...`). These are what
    `obj._name` can reach; a module may use its own classes' members on any object."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(item.name)
                elif isinstance(item, ast.Assign):
                    names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return {name for name in names if _private(name)}


def _root_name(node: ast.expr) -> str | None:
    """The name a dotted expression starts from (`a` for `a.b.c`), or None for anything else."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module an import names, relative imports made absolute."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _private_module(importer: str, target: str) -> str | None:
    """The private module `target` passes through that `importer` is not inside, if any."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            parent = ".".join(parts[:i])
            if importer != parent and not importer.startswith(parent + "."):
                return ".".join(parts[: i + 1])
    return None


def _is_module(base: Path, dotted: str) -> bool:
    path = base.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def reaches(root: Path = PACKAGE) -> Iterator[tuple[str, int, str]]:
    """Every private reach in the package at `root`: (module path, line, expression)."""
    base = root.parent
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(root.rglob("*.py"))}
    members = {path: _members(tree) for path, tree in trees.items()}
    for path, tree in trees.items():
        where = str(path.relative_to(base))
        module = _module_name(path, base)
        others = set().union(*(names for p, names in members.items() if p != path))
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "tunecache":
                        imported.add(alias.asname or "tunecache")
                        hidden = _private_module(module, alias.name)
                        if hidden is not None:
                            yield where, node.lineno, f"import {hidden}"
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, path.name == "__init__.py", node)
                if source.split(".")[0] != "tunecache":
                    continue
                hidden = _private_module(module, source)
                if hidden is not None:
                    yield where, node.lineno, f"from {hidden} import ..."
                for alias in node.names:
                    imported.add(alias.asname or alias.name)
                    if not _private(alias.name):
                        continue
                    target = f"{source}.{alias.name}"
                    if _is_module(base, target):
                        hidden = _private_module(module, target)
                        if hidden is not None:
                            yield where, node.lineno, f"import {hidden}"
                    else:
                        yield where, node.lineno, f"from {source} import {alias.name}"
        yield from _attribute_reaches(tree, where, imported, members[path], others)


def _attribute_reaches(
    tree: ast.AST, where: str, imported: set[str], own: set[str], others: set[str]
) -> Iterator[tuple[str, int, str]]:
    """`x._name` (read, written or deleted, or named in getattr/setattr/hasattr/delattr) where
    `x` is, or starts from, a name imported from tunecache, or `_name` is a member of another
    module's class and not of this module's."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root_name(node.value)
            if root in ("self", "cls") and isinstance(node.value, ast.Name):
                continue
            if root in imported or (node.attr not in own and node.attr in others):
                yield where, node.lineno, ast.unparse(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            name = node.args[1].value
            if _root_name(node.args[0]) in imported or (name not in own and name in others):
                yield where, node.lineno, ast.unparse(node)


def _unexplained(root: Path = PACKAGE) -> list[str]:
    return [
        f"{where}:{line}: {text}"
        for where, line, text in reaches(root)
        if (where, text) not in ALLOWED
    ]


def test_no_module_reaches_into_another_modules_private_names() -> None:
    found = _unexplained()
    assert found == [], "private reaches (make the name public, or move the code):\n" + "\n".join(
        found
    )


def test_every_allowed_reach_still_exists() -> None:
    # An exception whose reach is gone is a stale line: the list stays short and true.
    seen = {(where, text) for where, _, text in reaches()}
    assert set(ALLOWED) <= seen, sorted(set(ALLOWED) - seen)


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "tunecache"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_walk_finds_each_kind_of_planted_reach(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "codec.py": "def _prescan(data):\n    return data\n",
            "cache.py": (
                "class Cache:\n"
                "    def _read(self):\n        return self._engine\n"
                "    def __init__(self):\n        self._engine = None\n"
            ),
            "sub/__init__.py": "",
            "sub/_inner.py": "VALUE = 1\n",
            "sub/ok.py": (
                "from tunecache.sub._inner import VALUE\nfrom tunecache.sub import _inner\n"
            ),
            "_shared.py": "VALUE = 2\n",
            "user.py": "from tunecache import _shared\nfrom tunecache.sub import _inner\n",
            "exchange.py": (
                "from tunecache import codec\n"
                "from tunecache.cache import Cache, _helper\n"
                "from tunecache.sub._inner import VALUE\n"
                "def export(cache):\n"
                "    codec._prescan(b'')\n"
                "    Cache._read(cache)\n"
                "    return cache._engine, VALUE\n"
            ),
            "store/__init__.py": "",
            "store/rows.py": "def _helper():\n    return 1\n",
            "store/wire.py": (
                "from .rows import _helper\n"
                "from ..codec import _prescan\n"
                "import tunecache.codec\n"
                "from tunecache import store\n"
                "_read = None\n"
                "def f(cache):\n"
                "    cache._engine = 5\n"
                "    getattr(cache, '_read')()\n"
                "    store.rows._helper()\n"
                "    return tunecache.codec._prescan, cache._read()\n"
            ),
        },
    )
    found = {(where, text) for where, _, text in reaches(root)}
    assert found == {
        ("tunecache/exchange.py", "from tunecache.cache import _helper"),
        ("tunecache/exchange.py", "from tunecache.sub._inner import ..."),
        ("tunecache/exchange.py", "codec._prescan"),
        ("tunecache/exchange.py", "Cache._read"),
        ("tunecache/exchange.py", "cache._engine"),
        ("tunecache/user.py", "import tunecache.sub._inner"),
        # relative imports, a write, a getattr, dotted module paths, a local of the same name
        ("tunecache/store/wire.py", "from tunecache.store.rows import _helper"),
        ("tunecache/store/wire.py", "from tunecache.codec import _prescan"),
        ("tunecache/store/wire.py", "cache._engine"),
        ("tunecache/store/wire.py", "getattr(cache, '_read')"),
        ("tunecache/store/wire.py", "store.rows._helper"),
        ("tunecache/store/wire.py", "tunecache.codec._prescan"),
        ("tunecache/store/wire.py", "cache._read"),
    }


def test_a_module_may_use_its_own_privates_and_dunders(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": (
                "import tunecache\n"
                "class A:\n    def _x(self):\n        return 1\n"
                "def f(other):\n    return other._x(), tunecache.__version__, other.__dict__\n"
            ),
            "b.py": "def g(obj):\n    return obj._not_defined_anywhere\n",
        },
    )
    assert list(reaches(root)) == []
