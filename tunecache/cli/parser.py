"""The argument parser of the `tunecache` command, built from a table of its subcommands."""

from __future__ import annotations

import argparse
import os
import sys

from tunecache._version import __version__
from tunecache.cli import commands, options
from tunecache.cli.device import DEVICE
from tunecache.cli.exits import EXIT_USAGE
from tunecache.cli.options import Option, add_options
from tunecache.frozen import Frozen, fill

# Not `typing` at run time: the command line starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

__all__ = ["Parser", "Subcommand", "SUBCOMMANDS", "build_parser"]


def _columns() -> int:
    """The terminal's width by shutil.get_terminal_size's rule: $COLUMNS, else the terminal of
    stdout, else 80 (shutil itself imports the compression modules, 1.6 ms of every run)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, told the terminal's width without importing shutil."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        super().__init__(
            prog, indent_increment, max_help_position, _columns() - 2 if width is None else width
        )


class Parser(argparse.ArgumentParser):
    """argparse that exits with EXIT_USAGE on bad arguments, after its one-line message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        """Print the usage and the message on stderr, and exit with EXIT_USAGE."""
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class Subcommand(Frozen):
    """One subcommand: its name, its one-line summary, its own options, its other names; it
    runs `tunecache.cli.commands.cmd_<name>`."""

    __match_args__ = ("name", "summary", "options", "aliases")
    __slots__ = __match_args__
    name: str
    summary: str
    options: tuple[Option, ...]
    aliases: tuple[str, ...]

    def __init__(
        self,
        name: str,
        summary: str,
        options: tuple[Option, ...] = (),
        aliases: tuple[str, ...] = (),
    ) -> None:
        fill(self, name, summary, options, aliases)

    @property
    def run(self) -> Callable[[argparse.Namespace], int]:
        """The function it runs, whose docstring is its description: its module is imported
        now, the first time (a run of one subcommand loads none of the others' modules)."""
        name = self.name.replace("-", "_")
        found: Callable[[argparse.Namespace], int] = getattr(commands, f"cmd_{name}")
        return found


#: every subcommand, in the order `tunecache --help` lists them; each also takes the device
#: options and --json, ahead of its own
SUBCOMMANDS = (
    Subcommand("where", "show this device's identity and its cache database"),
    Subcommand(
        "list",
        "list decisions, filtered by signature, op, model, status, age",
        options.LIST,
        aliases=("show",),
    ),
    Subcommand("inspect", "show one entry's full evidence", options.INSPECT),
    Subcommand("explain", "how the resolver would answer a key", options.EXPLAIN),
    Subcommand("models", "list the models seen, with their verdict counts"),
    Subcommand("prune", "remove old versions and stale entries", options.PRUNE),
    Subcommand("export", "write this device's entries as CBOR", options.EXPORT),
    Subcommand("import", "import an export file, all or nothing", options.IMPORT),
    Subcommand("merge", "merge another cache or an export file", options.MERGE),
    Subcommand("sync", "pull from and push to a fleet store", options.SYNC),
    Subcommand("doctor", "check the database; repair when asked", options.DOCTOR),
    Subcommand(
        "tune",
        "tune models and keep only what makes them faster",
        (*options.TUNE_MODELS, *options.TUNE),
    ),
    Subcommand("tune-op", "bench one op's candidates at given shapes", options.TUNE_OP),
    Subcommand("pending", "list the keys recorded without an entry, to tune later"),
    Subcommand(
        "evaluate",
        "tune on some models, measure the cache on held-out ones",
        (*options.EVALUATE_MODELS, *options.MEASURE, *options.TUNE),
    ),
    Subcommand(
        "demo",
        "tune the example models on this device and report the change",
        (*options.DEMO_MODELS, *options.MEASURE, *options.TUNE),
    ),
    Subcommand("sql", "the database path, example queries, or run one", options.SQL),
)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser of the `tunecache` command.

    With `argv` that starts with a subcommand's name, only that subcommand is built; for any
    other (`--help`, `--version`, an unknown name) every one is, so the help and the errors list
    them all. Building every subcommand and its options would cost each run of the command a
    few milliseconds of the few dozen it takes.
    """
    wanted = argv[0] if argv else None
    named = [s for s in SUBCOMMANDS if wanted in (s.name, *s.aliases)]
    parser = Parser(
        prog="tunecache",
        description="A persistent, per-device autotuning cache.",
        epilog="Exit statuses and --json schemas: docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"tunecache {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for subcommand in named or SUBCOMMANDS:
        # The function's docstring is the description: what the subcommand is for.
        child = sub.add_parser(
            subcommand.name,
            aliases=list(subcommand.aliases),
            help=subcommand.summary,
            description=subcommand.run.__doc__,
        )
        child.set_defaults(func=subcommand.run, parser=child)
        add_options(child.add_argument_group("device"), DEVICE)
        add_options(child, (*options.OUTPUT, *subcommand.options))
    return parser
