"""The argument parser of the `tunecache` command, built from a table of its subcommands."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tunecache._version import __version__
from tunecache.cli import options
from tunecache.cli.commands import (
    cmd_demo,
    cmd_doctor,
    cmd_evaluate,
    cmd_explain,
    cmd_export,
    cmd_import,
    cmd_inspect,
    cmd_list,
    cmd_merge,
    cmd_models,
    cmd_prune,
    cmd_sql,
    cmd_tune,
    cmd_where,
)
from tunecache.cli.device import DEVICE
from tunecache.cli.exits import EXIT_USAGE
from tunecache.cli.options import Option, add_options

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


class Subcommand(NamedTuple):
    """One subcommand: its name, the function it runs, its one-line summary, its own options."""

    name: str
    run: Callable[[argparse.Namespace], int]
    summary: str
    options: tuple[Option, ...] = ()
    aliases: tuple[str, ...] = ()


#: every subcommand, in the order `tunecache --help` lists them; each also takes the device
#: options and --json, ahead of its own
SUBCOMMANDS = (
    Subcommand("where", cmd_where, "show this device's identity and its cache database"),
    Subcommand(
        "list",
        cmd_list,
        "list decisions, filtered by signature, op, model, status, age",
        options.LIST,
        aliases=("show",),
    ),
    Subcommand("inspect", cmd_inspect, "show one entry's full evidence", options.INSPECT),
    Subcommand("explain", cmd_explain, "how the resolver would answer a key", options.EXPLAIN),
    Subcommand("models", cmd_models, "list the models seen, with their verdict counts"),
    Subcommand("prune", cmd_prune, "remove old versions and stale entries", options.PRUNE),
    Subcommand("export", cmd_export, "write this device's entries as CBOR", options.EXPORT),
    Subcommand("import", cmd_import, "import an export file, all or nothing", options.IMPORT),
    Subcommand("merge", cmd_merge, "merge another cache or an export file", options.MERGE),
    Subcommand("doctor", cmd_doctor, "check the database; repair when asked", options.DOCTOR),
    Subcommand(
        "tune",
        cmd_tune,
        "tune models and keep only what makes them faster",
        (*options.TUNE_MODELS, *options.TUNE),
    ),
    Subcommand(
        "evaluate",
        cmd_evaluate,
        "tune on some models, measure the cache on held-out ones",
        (*options.EVALUATE_MODELS, *options.MEASURE, *options.TUNE),
    ),
    Subcommand(
        "demo",
        cmd_demo,
        "tune the example models on this device and report the change",
        (*options.DEMO_MODELS, *options.MEASURE, *options.TUNE),
    ),
    Subcommand("sql", cmd_sql, "the database path, example queries, or run one", options.SQL),
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
