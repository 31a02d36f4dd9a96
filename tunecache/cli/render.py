"""How the command prints: rich consoles and tables, JSON, the cells of numbers and times, and
progress bars.

rich is imported here only, lazily, inside the functions that draw: never on the resolver's path,
and not for `--help` or `--version`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "Progress",
    "console",
    "table",
    "print_json",
    "emit",
    "when",
    "num",
    "seconds",
    "cell",
    "names",
    "change",
    "paired",
    "progress",
]

#: a progress callback, as the library functions take it: (what, done, total)
Progress = Callable[[str, int, int], None]


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); off a terminal, wide and without colour, so
    piped output is greppable rather than wrapped at 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream, highlight=False)
    width = int(os.environ.get("COLUMNS", "0") or 0) or 200
    return Console(file=stream, width=width, highlight=False, color_system=None)


def table(title: str | None, *columns: str, rows: Iterable[Sequence[str]] = ()) -> Table:
    """A rich table with these columns (and rows), its title on the left, long cells folded."""
    from rich.table import Table

    drawn = Table(title=title, title_justify="left")
    for name in columns:
        drawn.add_column(name, overflow="fold")
    for cells in rows:
        drawn.add_row(*cells)
    return drawn


def print_json(value: Any) -> None:
    """Print a value as the stable, indented, key-sorted JSON that docs/cli.md describes."""
    print(json.dumps(value, indent=2, sort_keys=True))


def emit(args: argparse.Namespace, result: Any, human: Callable[[Any], None]) -> None:
    """Print a library function's result: with --json its `as_dict()`, else as `human` draws it."""
    if args.json:
        print_json(result.as_dict())
    else:
        human(result)


def when(value: datetime | None) -> str:
    """A time as a cell: UTC to the second, or a dash."""
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def num(value: float | None, suffix: str = "") -> str:
    """A number as a cell: three significant digits and a unit, or a dash."""
    return "-" if value is None else f"{value:.3g}{suffix}"


def seconds(value: float | None) -> str:
    """A duration with a unit a person reads at a glance."""
    if value is None:
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value / 1e-9:.4g} ns"


def cell(value: object) -> str:
    """A SQL value as a table shows it."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return str(value)


def names(values: Sequence[str]) -> str:
    """A list of names as a cell: comma-separated, or a dash."""
    return ", ".join(values) or "-"


def change(speedup: float | None) -> str:
    """A speedup (before over after) as the change in time a person reads: -9.1% is faster."""
    if speedup is None or not speedup > 0:
        return "-"
    return f"{(1 / speedup - 1) * 100:+.1f}%"


def paired(pairs: int, speedup: float, low: float, high: float, p: float) -> list[str]:
    """A paired comparison's cells: the change, its interval (a faster time is the high
    speedup) and p; dashes when nothing was measured."""
    if not pairs:
        return ["-", "-", "-"]
    return [change(speedup), f"[{change(high)}, {change(low)}]", f"{p:.3g}"]


@contextlib.contextmanager
def progress(args: argparse.Namespace) -> Iterator[Progress | None]:
    """A progress bar on stderr for long work, shown only to a person at a terminal."""
    if args.json or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress as Bar

    with Bar(console=console(stderr=True), transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)

        yield update
