"""The subcommands of the offline workflow: tune-op (an op at given shapes), pending (the keys a
serving process recorded without an entry) and `tune --pending` (bench them)."""

from __future__ import annotations

import argparse
from typing import Any

from tunecache.cli import render
from tunecache.cli.device import existing, location, open_cache
from tunecache.cli.exits import UsageError
from tunecache.cli.usercode import spec_roots, user_code
from tunecache.errors import NoCacheError

__all__ = ["cmd_pending", "cmd_tune_op", "shape_arg", "tune_pending"]


def shape_arg(text: str) -> dict[str, Any]:
    """A shape as `m=256,k=256,n=64`: each dim's value an int (another value stays text, for
    an input maker that takes more than dims)."""
    shape: dict[str, Any] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or not name or not value:
            raise UsageError(f"a shape is NAME=VALUE,..., got {text!r}")
        try:
            shape[name] = int(value)
        except ValueError:
            shape[name] = value
    return shape


def _tune_options(args: argparse.Namespace) -> dict[str, Any]:
    """The bench settings the options give, as tune.ops takes them (one not given is left
    out, so the default holds)."""
    given = {"key_budget": args.key_budget, "retune": args.retune or None}
    return {name: value for name, value in given.items() if value is not None}


def _print_ops(report: Any) -> None:
    """One row per shape: the key, what became of it, what it chooses now, and the evidence."""
    console = render.console()
    rows = [
        [
            k.key,
            k.action,
            k.choice or "-",
            k.heuristic,
            "-" if k.speedup is None else f"{k.speedup:.2f}x",
            str(k.entry_id) if k.entry_id is not None else "-",
            k.note or k.doubt or ("wrong: " + ", ".join(k.wrong) if k.wrong else ""),
        ]
        for k in report.keys
    ]
    columns = ("key", "action", "choice", "heuristic", "bench", "entry", "note")
    console.print(render.table(None, *columns, rows=rows))
    tuned = sum(1 for k in report.keys if k.entry_id is not None)
    line = f"{tuned} of {len(report.keys)} keys stored as unvalidated evidence"
    if report.cleared:
        line += f", {report.cleared} pending keys cleared"
    console.print(f"{line}; {report.seconds:.1f} s", highlight=False)
    if tuned:
        console.print(
            "served with use='all', or once a model validates them (tunecache tune MODEL)",
            highlight=False,
        )


def cmd_tune_op(args: argparse.Namespace) -> int:
    """Bench one op's candidates at given shapes, without a model, and store the evidence as
    unvalidated entries (served with use='all', or once a model validates them). OP is
    MODULE:ATTR or FILE.py:ATTR naming a tunable op that declares an input maker (@op.inputs);
    each --shape is NAME=VALUE,... An exception from the op's own code is reported with its
    type, message and line (exit 9)."""
    from tunecache import tune
    from tunecache.tune.ops import load_op

    if not args.shape:
        raise UsageError("tune-op needs at least one --shape NAME=VALUE,...")
    roots = spec_roots([args.op])
    op = load_op(args.op)
    shapes = [shape_arg(text) for text in args.shape]
    with (
        open_cache(args) as cache,
        render.progress(args) as progress,
        user_code(f"op {args.op!r}", roots),
    ):
        report = tune.ops(op, shapes, cache=cache, progress=progress, **_tune_options(args))
    render.emit(args, report, _print_ops)
    return 0


def tune_pending(args: argparse.Namespace) -> int:
    """`tune --pending`: bench this device's pending keys, each through its recorded op."""
    from tunecache import tune

    with (
        open_cache(args) as cache,
        render.progress(args) as progress,
        user_code("a pending key's op"),
    ):
        report = tune.pending(cache=cache, progress=progress, **_tune_options(args))
    if not args.json and not report.keys:
        render.console().print("no pending keys for this device", highlight=False)
        return 0
    render.emit(args, report, _print_ops)
    return 0


def cmd_pending(args: argparse.Namespace) -> int:
    """List the keys this device's processes asked for and found no entry for, recorded by
    tunecache.record_misses() or TUNECACHE_RECORD_MISSES=1, most asked first; `tunecache tune
    --pending` benches them. It reads, and creates nothing."""
    from tunecache.store.pending import pending_keys

    found = location(args)
    try:
        rows = pending_keys(existing(found), found["device"].fingerprint)
    except NoCacheError:
        if args.db is not None:
            raise
        rows = []
    if args.json:
        render.print_json([_as_json(row) for row in rows])
        return 0
    console = render.console()
    cells = [
        [
            row.key,
            str(row.asked),
            row.source,
            row.op or "-",
            _when(row.first_seen),
            _when(row.last_seen),
        ]
        for row in rows
    ]
    columns = ("key", "asked", "answered by", "op", "first seen", "last seen")
    console.print(render.table(None, *columns, rows=cells))
    console.print(f"{len(rows)} pending keys", highlight=False)
    return 0


def _as_json(row: Any) -> dict[str, Any]:
    """A pending key as plain JSON values."""
    return {
        "key": row.key,
        "checksum": row.checksum,
        "candidates": list(row.candidates),
        "heuristic": row.heuristic,
        "op": row.op,
        "source": row.source,
        "asked": row.asked,
        "first_seen": _when(row.first_seen),
        "last_seen": _when(row.last_seen),
    }


def _when(value: Any) -> str:
    """A time as ISO text (UTC), or "-"."""
    return "-" if value is None else str(value.isoformat(timespec="seconds"))
