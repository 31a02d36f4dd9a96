"""The table in force: the process default, or the one a thread or task is `using`.

The places a table is kept are public for the dispatch layer, which reads them on every call of
a tunable op (a ContextVar read and an attribute read cost what a function call would only add
to): `context_table`, `default_table` and `hot`. Set them only through `using`, `set_default`
and `hot`'s methods, which check what they are given.

Until `set_default` names one, the default table is decided on first need (`settle`): where an
identity is configured (`tunecache.configure`, or TUNECACHE_CLIENT, TUNECACHE_CLIENT_VERSION,
TUNECACHE_THREADS), it is that device's table, opened then (`Table.open()`: nothing is read
before the first question, and a missing file is an empty table: nothing is created); where
none is, or TUNECACHE_DISABLE=1, it is the empty table, as before there was a configuration.
"""

from __future__ import annotations

import warnings
from _thread import allocate_lock  # threading costs ~2 ms to import; its Lock is this one
from contextvars import ContextVar

from tunecache import config
from tunecache.errors import BadArgumentError, TunecacheError, TunecacheWarning
from tunecache.resolve.table import Table

__all__ = [
    "HotPath",
    "context_table",
    "current",
    "default_table",
    "forget_default",
    "hot",
    "pending",
    "set_default",
    "settle",
    "using",
]

_EMPTY = Table.empty()

#: The placeholder the default table is until it is first needed (then `settle` replaces it),
#: or None once settled. Read by dispatch on a miss; set only here.
pending: Table | None = Table.empty()

#: The process default table (initially `pending`). Read by dispatch on every call; set only
#: through `set_default` (and `settle`).
default_table: Table = pending  # type: ignore[assignment]

#: This thread's or task's table, None outside every `using` block. Read by dispatch on every
#: call; set only through `using`.
context_table: ContextVar[Table | None] = ContextVar("tunecache_table", default=None)

# The table settle() decided on (None: none yet): while it is the default, a configure()
# makes the default undecided again, as set_default's own choice never is.
_settled: Table | None = None
# The table settle() decided for a configuration that changed while set_default's table was
# the default: given back by set_default(previous), it is decided anew, not served.
_stale: Table | None = None
_lock = allocate_lock()


class HotPath:
    """What every tunable op's call reads first: `table` is the default table while a call
    outside every `using` block may answer from its memo of that table alone (no profile
    running), else None; `unscoped` is the same while no `using` block was ever entered in
    this process (so no context can hold a table, and a call need not look), else None."""

    __slots__ = ("paused", "scoped", "table", "unscoped")

    def __init__(self) -> None:
        self.paused = 0
        self.scoped = False
        self.table: Table | None = None
        self.unscoped: Table | None = None

    def refresh(self) -> None:
        """Follow the default table, the pauses and the first `using` block."""
        self.table = None if self.paused else default_table
        self.unscoped = None if self.scoped else self.table

    def enter_scoped(self) -> None:
        """A `using` block is entered for the first time: from now on a call looks at its
        context's table (a context copied inside the block keeps it after the block ends)."""
        with _lock:
            self.scoped = True
            self.refresh()

    def pause(self) -> None:
        """Send every call through the full path (a profile is recording) until `resume`."""
        with _lock:
            self.paused += 1
            self.refresh()

    def resume(self) -> None:
        """End one `pause`."""
        with _lock:
            self.paused = max(0, self.paused - 1)
            self.refresh()


#: The one HotPath of the process.
hot = HotPath()
hot.refresh()


def current() -> Table:
    """The table in force here: this context's (`using`), else the process default (decided
    on this first need where no `set_default` named one: `settle`)."""
    table = context_table.get()
    if table is None:
        table = default_table
        if table is pending:
            return settle()
    return table


def set_default(table: Table | None) -> Table:
    """Make `table` the process default (None: the empty table, whatever is configured);
    returns the previous one."""
    global default_table
    if table is not None and not isinstance(table, Table):
        raise BadArgumentError(f"set_default takes a Table, got {type(table).__name__}")
    global pending, _stale
    with _lock:
        previous = default_table
        # Given back what settle() or the placeholder was (set_default(previous)), the default
        # is again the configuration's to decide.
        if table is not None and table is _stale:
            # settle() decided it for a configuration changed since: decided anew on need.
            pending, _stale = Table.empty(), None
            default_table = pending
        else:
            default_table = _EMPTY if table is None else table
        hot.refresh()
    return previous


def settle() -> Table:
    """The process default table, decided now where it is still `pending`: the configured
    identity's table (`Table.open()`), or the empty table where no identity is configured or
    TUNECACHE_DISABLE=1. A configuration that cannot be used (a bad TUNECACHE_THREADS, a client
    without its version) is said once, as a TunecacheWarning, and the empty table serves."""
    global default_table, pending, _settled
    unusable = None
    with _lock:
        if default_table is not pending:
            return default_table
        # Not _EMPTY, which is set_default(None)'s: that choice is never the configuration's.
        table = Table.empty()
        try:
            if config.is_configured() and not config.disabled():
                table = Table.open()
        except TunecacheError as error:
            unusable = error
        default_table, pending, _settled = table, None, table
        hot.refresh()
    if unusable is not None:  # outside the lock: a warning filter may run any code
        warnings.warn(
            f"the configured cache is not used, every tunable op runs its heuristic: {unusable}",
            TunecacheWarning,
            stacklevel=4,  # settle, the op's full path, its hit path, and the op's caller
        )
    return table


def forget_default() -> None:
    """Make the default table undecided again, where `settle` decided it (or nothing has yet):
    the next need decides anew. A table `set_default` named stays; the one `settle` decided
    before it is stale then, and given back (`set_default(previous)`) is decided anew."""
    global default_table, pending, _settled, _stale
    with _lock:
        if default_table is not pending and default_table is not _settled:
            if _settled is not None:
                _stale, _settled = _settled, None
            return
        pending = Table.empty()
        default_table, _settled = pending, None
        hot.refresh()


# A new configuration is the default's to follow, unless set_default chose one.
config.on_change(forget_default)


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
        if not hot.scoped:
            hot.enter_scoped()
        self._token = context_table.set(self._table)
        return self._table

    def __exit__(self, *exc: object) -> None:
        context_table.reset(self._token)
