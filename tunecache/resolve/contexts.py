"""The table in force: the process default, or the one a thread or task is `using`.

The two places a table is kept are public for the dispatch layer, which reads them on every
call of a tunable op (a ContextVar read and a module-global read cost what a function call would
only add to): `context_table` and `default_table`. Set them only through `using` and
`set_default`, which check what they are given.
"""

from __future__ import annotations

from contextvars import ContextVar

from tunecache.errors import BadArgumentError
from tunecache.resolve.table import Table

__all__ = ["context_table", "current", "default_table", "set_default", "using"]

_EMPTY = Table.empty()

#: The process default table (initially one with no decisions). Read by dispatch on every call;
#: set only through `set_default`.
default_table: Table = _EMPTY

#: This thread's or task's table, None outside every `using` block. Read by dispatch on every
#: call; set only through `using`.
context_table: ContextVar[Table | None] = ContextVar("tunecache_table", default=None)


def current() -> Table:
    """The table in force here: this context's (`using`), else the process default."""
    table = context_table.get()
    return default_table if table is None else table


def set_default(table: Table | None) -> Table:
    """Make `table` the process default (None: the empty table); returns the previous one."""
    global default_table
    if table is not None and not isinstance(table, Table):
        raise BadArgumentError(f"set_default takes a Table, got {type(table).__name__}")
    previous = default_table
    default_table = _EMPTY if table is None else table
    return previous


class using:
    """Make `table` the current one for this thread or task until the block ends.

    Built on contextvars: other threads and tasks keep their own table, and nested blocks restore
    the outer one on the way out.
    """

    __slots__ = ("_table", "_token")

    def __init__(self, table: Table) -> None:
        if not isinstance(table, Table):
            raise BadArgumentError(f"using() takes a Table, got {type(table).__name__}")
        self._table = table

    def __enter__(self) -> Table:
        self._token = context_table.set(self._table)
        return self._table

    def __exit__(self, *exc: object) -> None:
        context_table.reset(self._token)
