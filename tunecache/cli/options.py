"""What the subcommands accept: argument types, and the options as tables of rows.

A row (`Option`) is an `add_argument` call written down as data: the parser adds the rows of a
subcommand in order, and a command reads the values of a table back by the same rows
(`option_values`), so a group of options shared by several subcommands is spelled once. The
device options, which also name the device, live in tunecache.cli.device.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from tunecache.cli.exits import UsageError
from tunecache.frozen import Frozen, fill

# Not `typing` at run time: the command line starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any, Protocol

    class _Container(Protocol):
        """What rows are added to: a parser, or one of its argument groups."""

        def add_argument(self, *flags: str, **settings: Any) -> argparse.Action: ...


__all__ = [
    "Option",
    "option",
    "repeatable",
    "add_options",
    "option_values",
    "time_arg",
    "positive_int",
    "count_arg",
    "scenario_arg",
    "STATUSES",
    "OUTPUT",
    "FILTERS",
    "LIST",
    "TERMINAL_LIMIT",
    "shown_limit",
    "INSPECT",
    "EXPLAIN",
    "PRUNE",
    "EXPORT",
    "IMPORT",
    "MERGE",
    "EXCHANGE",
    "DOCTOR",
    "SYNC",
    "TUNE_MODELS",
    "EVALUATE_MODELS",
    "DEMO_MODELS",
    "MEASURE",
    "TUNE",
    "TUNE_OP",
    "SQL",
]

#: the entry statuses (store.models.ENTRY_STATUSES, which a test keeps equal): spelled out
#: here so that `--help` does not import SQLAlchemy
STATUSES = ("unvalidated", "accepted", "rejected")
#: how many entries `list` and `prune` show on a terminal unless told otherwise (--limit, --all)
TERMINAL_LIMIT = 50

_DURATION = re.compile(r"(\d{1,9})([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class Option(Frozen):
    """One argument of a subcommand: its names, and the settings argparse takes for it.

    (Frozen rather than a dataclass or a NamedTuple: the command line builds its tables at
    every start, and dataclasses and typing cost it milliseconds to import.)
    """

    __match_args__ = ("flags", "settings")
    __slots__ = __match_args__
    flags: tuple[str, ...]
    settings: Mapping[str, Any]

    def __init__(
        self, flags: tuple[str, ...], settings: Mapping[str, Any] = MappingProxyType({})
    ) -> None:
        fill(self, flags, settings)

    @property
    def dest(self) -> str:
        """The attribute of the parsed arguments that holds its value, as argparse names it."""
        if "dest" in self.settings:
            return str(self.settings["dest"])
        if not self.flags[0].startswith("-"):
            return self.flags[0]
        longs = [flag for flag in self.flags if flag.startswith("--")]
        return (longs or list(self.flags))[0].lstrip("-").replace("-", "_")


def option(*flags: str, **settings: Any) -> Option:
    """An Option, written as its `add_argument` call would be."""
    return Option(flags, settings)


def repeatable(flag: str, metavar: str, help: str) -> Option:
    """An option that may be given several times, collecting its values in a list."""
    return option(flag, action="append", default=[], metavar=metavar, help=help)


def add_options(container: _Container, options: Iterable[Option]) -> None:
    """Add each row to a parser (or an argument group), in order."""
    for row in options:
        # A fresh list per parser: argparse hands a default out as it is when nobody gives it.
        settings = {k: list(v) if isinstance(v, list) else v for k, v in row.settings.items()}
        container.add_argument(*row.flags, **settings)


def option_values(args: argparse.Namespace, options: Iterable[Option]) -> dict[str, Any]:
    """The parsed values of these rows, by destination: the keyword arguments they stand for."""
    return {row.dest: getattr(args, row.dest) for row in options}


def shown_limit(args: argparse.Namespace) -> int | None:
    """How many entries `list` or `prune` prints: --limit, or on a terminal TERMINAL_LIMIT
    unless --all (or --json) asks for every one; None for every one."""
    if getattr(args, "limit", None) is not None:
        if args.all:
            raise UsageError("--all and --limit cannot go together")
        return int(args.limit)
    if args.all or args.json or not sys.stdout.isatty():
        return None
    return TERMINAL_LIMIT


# --- argument types --------------------------------------------------------------------------


def time_arg(text: str) -> datetime:
    """A point in time: an age back from now (`30d`, `12h`, `2w`) or an ISO 8601 date/time
    (UTC unless it names a zone)."""
    match = _DURATION.fullmatch(text.strip())
    try:
        if match:
            return datetime.now(UTC) - timedelta(**{_UNITS[match[2]]: int(match[1])})
        value = datetime.fromisoformat(text.strip())
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an age like 30d or 12h nor a date like 2026-01-31"
        ) from None
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{text!r} reaches outside the calendar") from None


def positive_int(text: str) -> int:
    """An integer that is not negative (a limit, where 0 is allowed)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def count_arg(text: str) -> int:
    """A count that must be at least 1 (pairs, blocks, candidates)."""
    value = positive_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not at least 1")
    return value


def scenario_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """A symbolic dim and the sizes it was tuned at: `s=1,64,256`."""
    name, sep, sizes = text.partition("=")
    try:
        values = tuple(int(v) for v in sizes.split(","))
    except ValueError:
        values = ()
    if not sep or not name or not values:
        raise argparse.ArgumentTypeError(
            f"a scenario is NAME=SIZE,SIZE,... (s=1,64,256), not {text!r}"
        )
    return name, values


# --- the tables --------------------------------------------------------------------------------

#: every subcommand's --json
OUTPUT = (option("--json", action="store_true", help="machine-readable output"),)

#: list's filters, by the names maintain.list_entries takes
FILTERS = (
    option("--signature", help="only this op signature, e.g. matmul_F32"),
    option("--op", help="only this op, the first token of a key, e.g. matmul"),
    option("--model", help="only entries this model validated or masked"),
    option("--status", choices=STATUSES, help="only entries in this status"),
    option(
        "--older-than",
        type=time_arg,
        metavar="WHEN",
        help="only entries last updated before WHEN: an age (30d, 12h, 2w) or a date",
    ),
    option("--newer-than", type=time_arg, metavar="WHEN", help="only entries updated since WHEN"),
    option("--limit", type=positive_int, help="at most this many entries"),
)

#: what shows every entry on a terminal, where list and prune show the first TERMINAL_LIMIT
_ALL = option(
    "--all",
    action="store_true",
    help=f"on a terminal, every entry rather than the first {TERMINAL_LIMIT} (a pipe, a file "
    "and --json always get every one)",
)

#: list's options: its filters, and --all
LIST = (*FILTERS, _ALL)

INSPECT = (option("target", metavar="KEY_OR_ID", help="an entry id, or a key's text"),)

EXPLAIN = (
    option("key", metavar="KEY", help="a key's text, e.g. matmul_F32_m256_k256_n64"),
    option("--model", help="resolve as this model sees the cache (its masks apply)"),
    option("--fingerprint", help="the model's fingerprint (default: any)"),
    option(
        "--use",
        choices=("validated", "own", "all"),
        default="validated",
        help="which entries serve: validated by any model (default), by this model, or all",
    ),
    option(
        "--max-distance",
        type=float,
        default=1.0,
        help="how far a nearest shape may be borrowed from, summed |log2 ratio| (default 1.0)",
    ),
    option(
        "--scenario",
        type=scenario_arg,
        action="append",
        metavar="NAME=SIZES",
        help="a symbolic dim and its tuned sizes, e.g. s=1,64,256,1024 (repeatable)",
    ),
    option("--candidates", metavar="A,B,...", help="the caller's legal candidates, in order"),
    option("--heuristic", help="the caller's own pick, one of the candidates"),
)

PRUNE = (
    option("--versions", action="store_true", help="version folders other than the current one"),
    option(
        "--stale",
        action="store_true",
        help="entries tuned against a candidate list that is not the current one",
    ),
    option(
        "--candidates",
        metavar="FILE",
        help="JSON file mapping each signature to its current candidate list (implies --stale; "
        "without it, the list a signature was last tuned against is current)",
    ),
    option("--unvalidated", action="store_true", help="entries no model validated"),
    option("--older-than", type=time_arg, metavar="WHEN", help="entries last updated before WHEN"),
    option("--masked", action="store_true", help="entries masked by every model that judged them"),
    option("--dry-run", action="store_true", help="say what would be removed, remove nothing"),
    _ALL,
)

EXPORT = (
    option("-o", "--output", metavar="FILE", help="where to write it (default: standard output)"),
)

#: what import and merge share, by the names tunecache.exchange takes
EXCHANGE = (
    option(
        "--policy",
        choices=("local", "evidence", "both"),
        default="local",
        help="where both sides hold an entry: keep the local one (default), keep the one with "
        "stronger evidence, or keep both (the incoming one beside it, under its origin)",
    ),
    option(
        "--allow-other-device",
        action="store_true",
        help="accept entries measured on another device identity; they arrive unvalidated",
    ),
)

IMPORT = (
    option("file", metavar="FILE", help="the export file, or - for standard input"),
    *EXCHANGE,
)

MERGE = (
    option("source", metavar="SOURCE", help="a cache database or an export file"),
    *EXCHANGE,
)

SYNC = (
    option(
        "direction",
        nargs="?",
        choices=("pull", "push"),
        help="pull or push only (default: push, then pull)",
    ),
    option("--remote", metavar="URL", help="the fleet store (default: $TUNECACHE_REMOTE)"),
)

DOCTOR = (option("--repair", action="store_true", help="repair what can be repaired"),)

TUNE_MODELS = (
    option("model", nargs="*", metavar="MODEL", help="MODULE:ATTR or FILE.py:ATTR"),
    option(
        "--pending",
        action="store_true",
        help="bench this device's pending keys instead (tunecache pending lists them)",
    ),
    option(
        "--alone",
        action="store_true",
        help="run a session of its own even while an identical tune command runs on this host "
        "(default: wait for that one and report its session)",
    ),
)

EVALUATE_MODELS = (
    repeatable("--tune", "MODEL", "a model to tune on (default: half of the example models)"),
    repeatable("--held-out", "MODEL", "a model the cache is applied to without tuning it"),
)

DEMO_MODELS = (
    repeatable("--model", "NAME", "only this example model (repeatable; default: all of them)"),
)

#: the report's own measurement, in evaluate and demo
MEASURE = (
    option(
        "--measure-pairs",
        type=count_arg,
        help="paired runs per model for the report (default 20)",
    ),
)

#: the tuner's settings, by the names tunecache.tune.tune takes; an option not given is left
#: out, so the tuner's own default holds (the help texts name them: a test keeps them true)
TUNE = (
    option(
        "--share",
        type=float,
        help="leave keys lighter than this fraction of a run's time alone (default 0.01)",
    ),
    option("--budget", type=float, metavar="SECONDS", help="stop tuning new keys after this long"),
    option(
        "--key-budget",
        type=float,
        metavar="SECONDS",
        help="the longest one key's isolated bench may take (default 1.0)",
    ),
    option("--keep", type=count_arg, help="bench survivors tried in whole runs (default 3)"),
    option("--confirmations", type=count_arg, help="paired blocks B must win, k of k"),
    option("--pairs", type=count_arg, help="paired runs per block"),
    option("--alpha", type=float, help="significance level of the paired test"),
    option("--retune", action="store_true", help="bench again keys that already have evidence"),
    option(
        "--claim-wait",
        type=float,
        metavar="SECONDS",
        help="the longest to wait for another tuner of the model, or a key it claims (600)",
    ),
)

#: tune-op's own: the op, its shapes, and the tuner's settings that bear on one op's bench
TUNE_OP = (
    option("op", metavar="OP", help="MODULE:ATTR or FILE.py:ATTR naming a tunable op"),
    repeatable("--shape", "NAME=VALUE,...", "a shape to bench the op at (repeatable)"),
    *(row for row in TUNE if row.dest in ("key_budget", "retune")),
)

SQL = (
    option("query", nargs="?", metavar="QUERY", help="one read-only SQL statement"),
    option("--limit", type=positive_int, default=1000, help="at most this many rows (1000)"),
    option(
        "--timeout", type=float, default=30.0, help="interrupt the query after this many seconds"
    ),
)
