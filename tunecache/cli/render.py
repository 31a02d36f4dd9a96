"""How the command prints: rich consoles and tables, plain tables and JSON written as their rows
come, the cells of numbers and times, and progress bars.

rich is imported here only, lazily, inside the functions that draw: never on the resolver's path,
and not for `--help`, `--version`, `where` or `list`. Output of any size (`list`, `prune`) goes
through `rows_table` and `json_stream`, which print each row as it comes and hold none.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime

# Not `typing` at run time: the command line starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from rich.console import Console
    from rich.table import Table

__all__ = [
    "Progress",
    "console",
    "table",
    "print_json",
    "json_stream",
    "rows_table",
    "more_hint",
    "SAMPLE",
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


def console(*, stderr: bool = False, file: TextIO | None = None) -> Console:
    """A rich console on stdout (or stderr, or `file`); off a terminal, wide and without
    colour, so piped output is greppable rather than wrapped at 80 columns."""
    from rich.console import Console

    stream = file if file is not None else sys.stderr if stderr else sys.stdout
    if file is None and stream.isatty():
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
    import json  # here: `where` and `list` print text, and start in a few dozen milliseconds

    print(json.dumps(value, indent=2, sort_keys=True))


def _batches(items: Iterable[Any], size: int = 256) -> Iterator[list[Any]]:
    """`items` in lists of `size` (the last one shorter), as they come."""
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def json_stream(
    fields: Mapping[str, Any], key: str, items: Iterable[Any], out: TextIO | None = None
) -> int:
    """Print one JSON object, as `print_json` would with `fields` and `key`, writing the list
    under `key` as its items come: one item a line, so neither the list nor the text of it is
    ever held whole. Returns how many items were written."""
    import json

    out = sys.stdout if out is None else out
    names = sorted({*fields, key})
    out.write("{\n")
    written = 0
    for place, name in enumerate(names):
        end = ",\n" if place < len(names) - 1 else "\n"
        if name != key:
            value = json.dumps(fields[name], sort_keys=True)
            out.write(f"  {json.dumps(name)}: {value}{end}")
            continue
        out.write(f"  {json.dumps(name)}: [")
        dumps = json.JSONEncoder(sort_keys=True).encode
        for batch in _batches(items):
            lead = "\n    " if not written else ",\n    "
            out.write(lead + ",\n    ".join(map(dumps, batch)))
            written += len(batch)
        out.write(("\n  ]" if written else "]") + end)
    out.write("}\n")
    return written


#: how many rows a plain table measures before it prints: its columns are as wide as the widest
#: of these cells (and the header)
SAMPLE = 100


def more_hint(shown: int, total: int, what: str) -> str:
    """The last line of a listing cut at its terminal limit: how many more, how to see them."""
    return (
        f"{shown} of {total} {what} shown, {total - shown} more: --all shows every one, as a "
        "pipe, a file and --json always get"
    )


def _columns(out: TextIO) -> int:
    """The width of the terminal `out` writes to ($COLUMNS first, as shutil reads it)."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get("COLUMNS", "0")) > 0:
            return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(out.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def rows_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    title: str | None = None,
    narrow: Sequence[tuple[int, int]] = (),
    out: TextIO | None = None,
) -> int:
    """Print a plain, aligned table as its rows come, and return how many rows it printed.

    Each column is as wide as its header and its widest cell among the first SAMPLE rows; a
    later cell that is wider is printed whole off a terminal (the rest of its row moves right,
    nothing is lost to a pipe or a file). On a terminal, where a row is wider than the screen,
    the columns `narrow` names, as (index, narrowest width), are narrowed in that order until
    it fits, and a cell wider than its column is cut with "…". Columns are two spaces apart;
    no colour and no borders, so the output greps and cuts like any text.
    """
    out = sys.stdout if out is None else out
    terminal = out.isatty()
    stream = iter(rows)
    first = list(itertools.islice(stream, SAMPLE))
    widths = [len(name) for name in columns]
    for cells in first:
        widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]
    if terminal:
        over = sum(widths) + 2 * (len(widths) - 1) - _columns(out)
        for index, narrowest in narrow:
            cut = max(0, min(over, widths[index] - max(narrowest, len(columns[index]))))
            widths[index] -= cut
            over -= cut
    # Each cell left-aligned in its column's width (a wider one whole), the last one not
    # padded, so no line ends in spaces: one %-format a row, a third of the cost of ljust on
    # each cell; on a terminal each cell is cut to its column first.
    template = "  ".join([*(f"%-{w}s" for w in widths[:-1]), "%s"])
    size = len(widths)

    def line(cells: Sequence[str]) -> str:
        if len(cells) != size:
            raise ValueError(f"a row of {len(cells)} cells in a table of {size} columns")
        if terminal:
            cells = [_cut(c, w) for c, w in zip(cells, widths, strict=True)]
        return template % tuple(cells)

    if title is not None:
        out.write(title + "\n")
    out.write(line(columns) + "\n")
    count = 0
    for batch in itertools.chain((first,), _batches(stream)):
        if not batch:
            continue
        if terminal or any(len(cells) != size for cells in batch):
            # Cells cut to the screen, or a row of the wrong size, which `line` refuses.
            out.write("\n".join(map(line, batch)) + "\n")
        else:
            out.write("\n".join([template % tuple(cells) for cells in batch]) + "\n")
        count += len(batch)
        out.flush()
    return count


def emit(args: argparse.Namespace, result: Any, human: Callable[[Any], None]) -> None:
    """Print a library function's result: with --json its `as_dict()`, else as `human` draws it."""
    if args.json:
        print_json(result.as_dict())
    else:
        human(result)


def when(value: datetime | None) -> str:
    """A time as a cell: UTC to the second, or a dash."""
    if value is None:
        return "-"
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    # isoformat is several times faster than strftime, and a listing has a cell a row.
    return value.isoformat(" ", "seconds")[:19]


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
