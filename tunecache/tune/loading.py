"""The user's module a MODULE:ATTR or FILE.py:ATTR spec names, for the commands that load the
models (`tunecache tune`, `evaluate`) or the op (`tune-op`, `tune.pending`) to tune.

A FILE.py is loaded under a private module name (the prefix and a hash of its path), so a file
called like an installed module shadows nothing; it stays in `sys.modules` while it loads
(dataclasses and pickling look the module up) and is removed where loading fails. Any failure is
one line (BadArgumentError).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tunecache.errors import BadArgumentError, TunecacheError

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["load_module"]


def load_module(
    where: str, prefix: str, *, reuse: bool = False, cannot_import: bool = False
) -> ModuleType:
    """The module `where` names, imported by dotted name or loaded from its FILE.py under
    `prefix`; with `reuse`, the file's own module once per process (loaded by its resolved
    path, and returned again), and with `cannot_import`, an ImportError said as "cannot
    import" rather than as what the import raised."""
    import importlib.util

    try:
        if not where.endswith(".py"):
            return importlib.import_module(where)
        path = Path(where).resolve() if reuse else Path(where)
        if not path.is_file():
            raise BadArgumentError(f"no file {where!r}")
        name = f"{prefix}{abs(hash(str(path.resolve())))}"
        if reuse and name in sys.modules:
            return sys.modules[name]
        found = importlib.util.spec_from_file_location(name, path)
        if found is None or found.loader is None:
            raise BadArgumentError(f"cannot import {where!r}")
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        try:
            found.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module
    except ImportError as error:
        if cannot_import:
            raise BadArgumentError(f"cannot import {where!r}: {error}") from None
        text = f"importing {where!r} raised {type(error).__name__}: {error}"
        raise BadArgumentError(text.splitlines()[0]) from None
    except TunecacheError:
        raise
    except Exception as error:  # the module's own code failed while importing
        text = f"importing {where!r} raised {type(error).__name__}: {error}"
        raise BadArgumentError(text.splitlines()[0]) from None
