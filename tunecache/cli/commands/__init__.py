"""The subcommands, one function each: parse nothing, call one library function, render.

Each `cmd_*` takes the parsed arguments and returns the exit status; its docstring is the
subcommand's description in `--help`. They are grouped by what they drive: the store's reads
(`store`), its upkeep (`maintain`), moving entries between caches (`exchange`) and tuning
(`tuning`).
"""

from __future__ import annotations

from tunecache.cli.commands.exchange import cmd_export, cmd_import, cmd_merge
from tunecache.cli.commands.maintain import cmd_doctor, cmd_prune
from tunecache.cli.commands.store import (
    cmd_explain,
    cmd_inspect,
    cmd_list,
    cmd_models,
    cmd_sql,
    cmd_where,
)
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
    "cmd_tune",
    "cmd_demo",
    "cmd_evaluate",
]
