"""The subcommand that syncs the local cache with a fleet store: sync [pull|push]."""

from __future__ import annotations

import argparse
from typing import Any

from tunecache.cli import render
from tunecache.cli.device import database, location

__all__ = ["cmd_sync"]


def cmd_sync(args: argparse.Namespace) -> int:
    """Sync this device's entries between the local cache and a fleet store: pull copies the
    store's entries of this device identity (decisions, timing records, verdicts, models and
    runs) into the local cache, push sends the local ones with their evidence, and no direction
    both (push, then pull). Only what changed since the last sync with that store is read; a push
    is all or nothing, a pull commits whole chunks with their mark (a pull cut short keeps
    them, and the next one goes on from there); where both sides decided a key, evidence
    decides (docs/fleet.md). The remote is --remote, else $TUNECACHE_REMOTE. The local side is
    always the local cache file (--db, --root, or the device's own), never $TUNECACHE_URL."""
    from tunecache.cache import Cache
    from tunecache.fleet import open_remote, sync

    found = location(args)
    # The remote first: one that cannot be opened leaves no new local cache behind.
    with (
        open_remote(args.remote, found["device"]) as remote,
        Cache.open(device=found["device"], path=database(found)) as local,
    ):
        report = sync(local, remote, direction=args.direction or "both")
    render.emit(args, report, _print_report)
    return 0


def _print_report(report: Any) -> None:
    """The report as a table, a row per direction, then a line each."""
    table = render.table(
        None,
        "direction",
        "remote",
        "read",
        "added",
        "merged",
        "replaced",
        "kept",
        "unchanged",
        "refused",
        "conflicts settled",
        "seconds",
    )
    for d in report.directions:
        settled = ", ".join(
            f"{n} {action} by {rule}"
            for rule, by in d.conflicts.items()
            for action, n in by.items()
            if n
        )
        counts = [str(d.counts[a]) for a in ("added", "merged", "replaced", "kept", "unchanged")]
        table.add_row(
            d.direction,
            d.remote,
            str(d.read),
            *counts,
            str(d.counts["refused"]),
            settled or "-",
            render.num(d.seconds),
        )
    out = render.console()
    out.print(table)
    out.print(report.summary(), soft_wrap=True)
