"""The subcommands that keep a cache in shape: prune and doctor."""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from tunecache.cli import render
from tunecache.cli.device import existing, local_only, location, open_cache
from tunecache.cli.exits import EXIT_PROBLEMS, UsageError
from tunecache.cli.options import shown_limit
from tunecache.errors import BadArgumentError

__all__ = ["cmd_prune", "cmd_doctor"]

#: what prune may be told to remove besides --stale, by the names maintain.prune takes
_SELECTIONS = ("versions", "unvalidated", "older_than", "masked")


def _current_lists(path: str | None) -> dict[str, list[str]] | None:
    """The signatures' current candidate lists from a --candidates JSON file, if one is named."""
    if path is None:
        return None
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh)
    except OSError as error:
        raise BadArgumentError(f"cannot read {path}: {error.strerror or error}") from error
    except ValueError as error:
        raise BadArgumentError(f"{path} is not JSON: {error}") from error
    if not isinstance(value, dict) or not all(isinstance(v, list) for v in value.values()):
        raise BadArgumentError(f"{path} must map each signature to its list of candidates")
    return value


def cmd_prune(args: argparse.Namespace) -> int:
    """Remove old version folders and stale, unvalidated, old or masked entries; --dry-run
    only says what would go. On a terminal the first 50 entries are listed unless --all."""
    from tunecache import maintain

    selected = {name: getattr(args, name) for name in _SELECTIONS}
    if not (any(selected.values()) or args.stale or args.candidates):
        raise UsageError(
            "say what to prune: --versions, --stale, --unvalidated, --older-than or --masked"
        )
    current = _current_lists(args.candidates)
    if args.dry_run and args.db is not None:
        # A dry run only reads: a mistyped --db is an error, never a new empty cache.
        existing(location(args))
    with open_cache(args) as cache:
        report = maintain.prune(
            cache,
            **selected,
            stale=args.stale or current is not None,
            current=current,
            dry_run=args.dry_run,
            root=args.root,
        )
    if args.json:
        _print_prune_json(report)
    else:
        _print_prune(report, shown_limit(args))
    return 0


def _print_prune_json(report: Any) -> None:
    """The report as `as_dict` has it, its entries written one a line as they are turned into
    JSON: a prune of 100,000 entries never builds the whole text."""
    import dataclasses

    fields: dict[str, Any] = dataclasses.replace(report, entries=()).as_dict()
    render.json_stream(fields, "entries", (e.as_dict() for e in report.entries))


def _print_prune(report: Any, limit: int | None) -> None:
    """What prune removed (or would): the entries, the version folders, then the counts, each
    table printed as its rows come (the first `limit` entries only, if not None)."""
    verb = "would remove" if report.dry_run else "removed"
    shown = 0
    if report.entries:
        entries = (
            [str(e.id), e.key, e.choice, e.status, render.when(e.updated_at), ", ".join(e.reasons)]
            for e in itertools.islice(report.entries, limit)
        )
        shown = render.rows_table(
            ("id", "key", "choice", "status", "updated", "why"),
            entries,
            title=f"entries {verb}:",
            narrow=((5, 0), (1, 32)),
        )
    if report.versions:
        versions = (
            [v.version, v.path, str(v.bytes), f"left: {v.skipped}" if v.skipped else verb]
            for v in report.versions
        )
        render.rows_table(
            ("version", "path", "bytes", "outcome"), versions, title="version folders:"
        )
    if shown < len(report.entries):
        print(render.more_hint(shown, len(report.entries), "entries"))
    orphans = report.orphans
    print(
        f"{verb} {len(report.entries)} entries, {orphans.get('keys', 0)} keys and "
        f"{orphans.get('candidate_sets', 0)} candidate sets left unused, "
        f"{sum(v.removed for v in report.versions)} version folders"
        + (
            f"; spared {report.spared_active} entries of runs still open"
            if report.spared_active
            else ""
        )
        + ("; dry run, nothing removed" if report.dry_run else "")
    )


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check the database: integrity, schema revision and objects, WAL size, stale and orphaned
    rows. It says what it would repair, and repairs only with --repair. Exit 1 if problems
    remain."""
    from tunecache import maintain
    from tunecache.cache import Cache

    found = location(args)  # once: with --gpu, each working out asks the GPU again
    local_only(found)  # doctor checks a file: integrity, WAL, salvage
    existing(found)  # a check of a cache that is not there creates none
    with Cache.open(**found) as cache, render.progress(args) as progress:
        report = maintain.doctor(cache, repair=args.repair, progress=progress)
    render.emit(args, report, _print_doctor)
    return 0 if report.healthy else EXIT_PROBLEMS


def _print_doctor(report: Any) -> None:
    """The doctor's findings: the file, its integrity and revision, and each problem."""
    console = render.console()
    console.print(f"database: {report.path}")
    integrity = "ok" if report.integrity == ("ok",) else "; ".join(report.integrity[:5])
    console.print(f"integrity: {integrity}")
    console.print(f"revision: {report.revision} (this tunecache: {report.head})")
    console.print(f"size: {report.database_bytes} bytes, WAL {report.wal_bytes} bytes")
    console.print(f"devices: {report.devices}, entries: {report.entries}")
    if report.salvaged:
        console.print(f"salvaged from a damaged file: {report.salvaged}")
    from tunecache.store.wal import note

    console.print(f"sqlite: {note()}")
    if report.problems:
        rows = ([p.kind, str(p.count), p.detail, _repair(p)] for p in report.problems)
        console.print(render.table("problems", "problem", "rows", "what", "repair", rows=rows))
    else:
        console.print("no stale or orphaned rows")
    if report.checkpointed:
        console.print("WAL checkpointed")
    console.print("healthy" if report.healthy else "problems remain")


def _repair(problem: Any) -> str:
    """What became, or would become, of a problem's repair."""
    if problem.repair is None:
        return "cannot repair"
    if problem.repaired:
        return f"repaired: {problem.repair}"
    return f"--repair would {problem.repair}"
