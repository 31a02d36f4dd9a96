"""The `tunecache` command: a thin layer of argument parsing over library calls.

Every subcommand is a function of `tunecache.maintain`, `tunecache.exchange`, `tunecache.resolve`
or `tunecache.tune` first; this package parses arguments, calls it, and prints the result as
tables (plain text as the rows come for `list` and `prune`, rich for the rest) or, with `--json`,
as stable JSON (docs/cli.md gives each schema). rich is imported here only, lazily, never on the
resolver's path; the commands that only read never import SQLAlchemy.

Every error is one line on stderr and a documented exit status, never a traceback (set
TUNECACHE_DEBUG=1 to see one). Exit statuses: 0 success; 1 nothing matched (`inspect`), problems
left unrepaired (`doctor`) or another tunecache error; 2 bad argument or key; 3 bad record or
bad file; 4 device mismatch; 5 store error; 6 store busy; 7 schema too new; 8 read-only;
64 bad usage; 70 an internal error; 130 interrupted.

The modules, from the top: `app` (`main`: errors to exit statuses; `run`, what the `tunecache`
script calls), `parser` (the subcommand table), `options` (argument types and option tables),
`device` (the device options), `commands` (one function a subcommand, each module imported
when one of its subcommands runs), `render` (tables, JSON, cells, progress), `exits`.
"""

from __future__ import annotations

from tunecache.cli import commands
from tunecache.cli.app import main, run
from tunecache.cli.exits import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PROBLEMS, EXIT_USAGE
from tunecache.cli.options import STATUSES
from tunecache.cli.parser import build_parser
from tunecache.cli.render import Progress

# Not `typing` at run time: the command line starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    # The subcommand functions, as tunecache.cli.cmd_* has always named them.
    from tunecache.cli.commands import *  # noqa: F403  (commands.__all__ is the list)

__all__ = [
    "main",
    "run",
    "build_parser",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_PROBLEMS",
    "EXIT_USAGE",
    "STATUSES",
    "Progress",
    *commands.__all__,
]


def __getattr__(name: str) -> Callable[..., int]:
    # PEP 562: tunecache.cli.cmd_* as tunecache.cli.commands loads each, on first use, so that
    # a run of one subcommand imports none of the other subcommands' modules.
    if name in commands.__all__:
        value: Callable[..., int] = getattr(commands, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
