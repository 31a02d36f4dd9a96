"""The wheel ships every subpackage: pyproject's explicit package list names each one."""

from __future__ import annotations

import tomllib

from tests.conftest import ROOT


def test_every_subpackage_is_named_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "tunecache").rglob("__init__.py")
    }
    # The migrations travel inside the wheel under another name (package-dir in pyproject).
    shipped = {"tunecache._migrations", "tunecache._migrations.versions"}
    assert found == listed - shipped, "add new subpackages to [tool.setuptools] packages"
