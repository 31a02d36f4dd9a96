"""The subcommands, one function each: parse nothing, call one library function, render.

Each `cmd_*` takes the parsed arguments and returns the exit status; its docstring is the
subcommand's description in `--help`. They are grouped by what they drive: the store's reads
(`store`), its upkeep (`maintain`), moving entries between caches (`exchange`) and tuning
(`tuning`), and the offline workflow (`offline`: tune-op, pending).

Each name loads its module on first use: a run of `tunecache list` imports `store` alone, and
none of what export, prune or tune need.
"""

from __future__ import annotations

# Not `typing` at run time: the command line starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tunecache.cli.commands.exchange import cmd_export, cmd_import, cmd_merge
    from tunecache.cli.commands.maintain import cmd_doctor, cmd_prune
    from tunecache.cli.commands.offline import cmd_pending, cmd_tune_op
    from tunecache.cli.commands.store import (
        cmd_explain,
        cmd_inspect,
        cmd_list,
        cmd_models,
        cmd_sql,
        cmd_where,
    )
    from tunecache.cli.commands.sync import cmd_sync
    from tunecache.cli.commands.tuning import cmd_demo, cmd_evaluate, cmd_tune

__all__ = [
    "cmd_where",
    "cmd_list",
    "cmd_inspect",
    "cmd_models",
    "cmd_explain",
    "cmd_sql",
    "cmd_prune",
    "cmd_doctor",
    "cmd_export",
    "cmd_import",
    "cmd_merge",
    "cmd_sync",
    "cmd_tune",
    "cmd_demo",
    "cmd_evaluate",
    "cmd_tune_op",
    "cmd_pending",
]

#: the module of this package that defines each subcommand's function
_HOMES = {
    "cmd_where": "store",
    "cmd_list": "store",
    "cmd_inspect": "store",
    "cmd_models": "store",
    "cmd_explain": "store",
    "cmd_sql": "store",
    "cmd_prune": "maintain",
    "cmd_doctor": "maintain",
    "cmd_export": "exchange",
    "cmd_import": "exchange",
    "cmd_merge": "exchange",
    "cmd_sync": "sync",
    "cmd_tune": "tuning",
    "cmd_demo": "tuning",
    "cmd_evaluate": "tuning",
    "cmd_tune_op": "offline",
    "cmd_pending": "offline",
}


def __getattr__(name: str) -> Callable[..., int]:
    # PEP 562: each subcommand's module is imported when its function is first asked for.
    if name in _HOMES:
        import importlib

        value: Callable[..., int] = getattr(
            importlib.import_module(f"{__name__}.{_HOMES[name]}"), name
        )
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
