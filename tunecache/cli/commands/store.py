"""The subcommands that read the store: where, list (show), inspect, models, explain and sql.

Each reads through `tunecache.cli.device.read_cache`: stdlib sqlite3 and the read contract,
without SQLAlchemy, wherever the cache is already at this tunecache's schema revision.
"""

from __future__ import annotations

import argparse
import contextlib

from tunecache.cli import render
from tunecache.cli.device import database, existing, fleet_url, location, read_cache, sourced
from tunecache.cli.exits import EXIT_PROBLEMS
from tunecache.cli.options import FILTERS, option_values, shown_limit

# Not `typing` at run time: the read commands start without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from rich.console import Console
    from rich.table import Table

    from tunecache.maintain.listing import ListedEntry

__all__ = ["cmd_where", "cmd_list", "cmd_inspect", "cmd_models", "cmd_explain", "cmd_sql"]


def _fleet_where(url: str, fingerprint: str) -> dict[str, Any]:
    """What `where` shows of the fleet store at `url`: its masked URL, revision and this
    device's entries there, and whether this role may write it; nothing is created."""
    from tunecache.store.engine import DEFAULT_BUSY_TIMEOUT
    from tunecache.store.opening import fleet_summary
    from tunecache.store.urls import mask

    revision, entries, denied = fleet_summary(url, fingerprint, DEFAULT_BUSY_TIMEOUT)
    info: dict[str, Any] = {
        "database": mask(url),
        "exists": revision is not None,
        "revision": revision,
        "entries": entries,
        "writable": denied is None,
    }
    if denied:
        info["readonly_reason"] = denied
    return info


def cmd_where(args: argparse.Namespace) -> int:
    """Print the device identity and where its cache lives; it reads, and creates nothing.
    With --db, a file that is not there is an error; at the device's own location, where it
    says the cache is not created yet. The last line is the SQLite library's version with its
    known WAL defects."""
    from tunecache.errors import NoCacheError
    from tunecache.store.wal import note

    device, sources, counted = sourced(args)
    found = {"device": device, "root": args.root, "path": args.db}
    info: dict[str, Any] = {"device": device.as_dict(), "fingerprint": device.fingerprint}
    info["sources"], info["root"] = _sources(args, sources, device.client)
    if counted is not None:
        info["threads_counted"] = counted
    url = fleet_url(found)
    try:
        if url is not None:
            info.update(_fleet_where(url, device.fingerprint))  # the local cache is not looked at
        else:
            with read_cache(found) as reader:
                info.update(
                    database=str(reader.path),
                    exists=True,
                    revision=reader.revision,
                    entries=reader.entry_count(),
                    writable=reader.readonly_reason is None,
                )
                if reader.readonly_reason:
                    info["readonly_reason"] = reader.readonly_reason
    except NoCacheError:
        if args.db is not None:
            raise
        from tunecache.store.access import write_denied

        db = database(found)
        info.update(database=str(db), exists=False, revision=None, entries=0)
        # Whether the first write could create it: the nearest folder there is decides.
        folder = next(p for p in (db.parent, *db.parents) if p.is_dir())
        denied = write_denied(folder / db.name)
        info["writable"] = denied is None
        if denied:
            info["readonly_reason"] = denied
    if args.json:
        render.print_json(info)
        return 0
    width = max(len(k) for k in info["device"]) + 1
    said = info["sources"]
    fields = [
        (name, f"{'-' if value is None else value}  ({_said(name, said[name])})")
        for name, value in info["device"].items()
    ]
    if counted is not None:
        place = list(info["device"]).index("threads")
        fields[place] = ("threads", f"{device.threads}  (default: {counted})")
    if info["root"] is not None:
        fields.append(("root", f"{info['root']}  ({_said('root', said['root'])})"))
    if info["exists"]:
        fields += [(name, info[name]) for name in ("database", "revision", "entries")]
    else:
        fields.append(("database", f"{info['database']} (not created yet)"))
    if "readonly_reason" in info:
        fields.append(("read-only", info["readonly_reason"]))
    fields.append(("sqlite", note()))
    for name, value in fields:
        print(f"{name + ':':<{width + 1}} {value}")
    return 0


_LIST_COLUMNS = (
    "id", "key", "choice", "heuristic", "speedup", "status", "validated by", "masked by",
    "updated",
)  # fmt: skip


#: on a narrow terminal, the lists of models give way first, then the key down to 32 characters
_NARROW = ((6, 0), (7, 0), (1, 32))


def _row_cells() -> Callable[[ListedEntry], tuple[str, ...]]:
    """A function from an entry as `tunecache.maintain.listing.iter_rows` gives it (its row of
    ENTRY_COLUMNS, the models that validated it and those that masked it) to its row of
    `list`."""
    # A listing is in update order, so the entries of one batch, which share their time, come
    # one after another: their time is drawn once (drawing it costs as much as the rest of a
    # row).
    time: Any = None
    drawn = "-"

    def cells(entry: ListedEntry) -> tuple[str, ...]:
        nonlocal time, drawn
        row, validated, masked = entry
        entry_id, key, _, _, choice, heuristic, speedup, status, _, _, _, at = row
        if at != time:
            time, drawn = at, render.when(at)
        return (
            str(entry_id),
            key,
            choice,
            heuristic or "-",
            render.num(speedup, "x"),
            status,
            render.names(validated),
            render.names(masked),
            drawn,
        )

    return cells


def _sources(
    args: argparse.Namespace, sources: dict[str, str], client: str
) -> tuple[dict[str, str], str | None]:
    """Where each field `where` shows came from (`tunecache.config.SOURCES` words; the
    default threads also say what was counted), and the cache root (None with --db)."""
    from tunecache import config, paths

    said = dict(sources)
    if args.db is not None:
        said["root"] = "argument"
        return said, None
    said["root"] = config.root(args.root)[1]
    return said, str(paths.cache_root(client, args.root))


def _said(name: str, source: str) -> str:
    """A field's source as `where` prints it: the environment names its variable."""
    from tunecache.config import ENV_VARS

    if source == "environment" and name in ENV_VARS:
        return f"environment: {ENV_VARS[name]}"
    if source == "argument":
        return f"argument: --{name.replace('_', '-')}"
    return source


def cmd_list(args: argparse.Namespace) -> int:
    """List this device's decisions, most recently updated first, filtered by signature, op,
    model, status or age. On a terminal the first 50 unless --limit or --all says otherwise."""
    from tunecache.maintain.listing import checked, iter_entries, iter_rows

    filters = option_values(args, FILTERS)
    asked = filters.pop("limit")
    limit = shown_limit(args)
    query = checked(filters)
    with read_cache(location(args)) as reader, reader.snapshot():
        if args.json:
            # The count comes first, as it always has: the same snapshot counts the entries.
            total = reader.count(query)
            count = total if limit is None else min(total, limit)
            with contextlib.closing(iter_entries(reader, query, limit=limit)) as found:
                render.json_stream({"count": count}, "entries", (e.as_dict() for e in found))
            return 0
        # Rows as tuples, not EntryInfo values: a listing prints each and keeps none.
        with contextlib.closing(iter_rows(reader, query, limit=limit)) as rows:
            shown = render.rows_table(_LIST_COLUMNS, map(_row_cells(), rows), narrow=_NARROW)
        total = shown
        if asked is None and limit is not None and shown == limit:
            total = reader.count(query)
    print(f"{shown} entries" if total == shown else render.more_hint(shown, total, "entries"))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Show everything about one entry (by id) or every entry of a key: the timing record of
    each candidate, the bench settings, the models' verdicts, and the run that tuned it."""
    from tunecache import maintain

    # isascii: "²".isdigit() is true, and int("²") fails.
    digits = args.target.isascii() and args.target.isdigit()
    target: int | str = int(args.target) if digits else args.target
    with read_cache(location(args)) as cache:
        try:
            found = maintain.inspect(cache, target)
        except maintain.NotFoundError as error:
            # A key whose op is all digits is still a key; the id's message says what's missing.
            if not isinstance(target, int):
                raise
            try:
                found = maintain.inspect(cache, args.target)
            except maintain.NotFoundError:
                raise error from None
    if args.json:
        render.print_json({"entries": [i.as_dict() for i in found]})
        return 0
    console = render.console()
    for item in found:
        _print_inspection(console, item)
    return 0


def _print_inspection(console: Console, item: Any) -> None:
    """One entry's evidence: the decision, its candidates' timings, settings, verdicts, run."""
    entry = item.entry
    console.print(f"[bold]{entry.key}[/bold]  (entry {entry.id}, {entry.status})")
    console.print(
        f"choice {entry.choice}, heuristic {entry.heuristic or '-'}, "
        f"speedup {render.num(entry.speedup, 'x')}; candidate set {entry.checksum}; "
        f"created {render.when(entry.created_at)}, updated {render.when(entry.updated_at)}"
    )
    if not item.has_record:
        console.print("no timing record")
    elif item.record_error is not None:
        console.print(f"timing record unreadable: {item.record_error}")
    console.print(_candidates(item.candidates))
    for title, values in (("bench settings", item.settings), ("environment", item.env)):
        if values:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
            console.print(f"{title}: {shown}", soft_wrap=True)
    if item.verdicts:
        console.print(_verdicts(item.verdicts))
    else:
        console.print("no model has judged this entry")
    run = item.run
    if run is None:
        console.print("tuned outside a logged run")
    else:
        console.print(
            f"run {run.id}: {run.kind}, {run.status}, on {run.hostname} (pid {run.pid}) by "
            f"tunecache {run.tool_version}, {render.when(run.started_at)} to "
            f"{render.when(run.finished_at)}" + (f"; {run.notes}" if run.notes else ""),
            soft_wrap=True,
        )
    if item.origin is not None:
        console.print(
            f"origin: {item.origin.host}, synced from {item.origin.source} at "
            f"{render.when(item.origin.synced_at)}",
            soft_wrap=True,
        )
    console.print()


def _candidates(candidates: Any) -> Table:
    """An inspection's candidates, with their timings and what became of each."""
    return render.table(
        "candidates", "name", "median", "min", "max", "samples", "loops", "failures", "note",
        rows=map(_candidate_cells, candidates),
    )  # fmt: skip


def _candidate_cells(candidate: Any) -> list[str]:
    """One candidate's timings as a row, with its notes: chosen, heuristic, pruned, unmeasured."""
    notes = [
        note
        for note, on in (("chosen", candidate.chosen), ("heuristic", candidate.heuristic))
        if on
    ]
    if candidate.pruned:
        notes.append("pruned")
    if not candidate.measured:
        notes.append("not measured")
    return [
        candidate.name,
        render.seconds(candidate.median_s),
        render.seconds(candidate.min_s),
        render.seconds(candidate.max_s),
        str(candidate.samples),
        str(candidate.inner_loops),
        candidate.error or "-",
        ", ".join(notes) or "-",
    ]


def _verdicts(verdicts: Any) -> Table:
    """An inspection's verdicts, one row a model."""
    rows = (
        [
            verdict.model,
            verdict.fingerprint or "-",
            verdict.verdict,
            render.num(verdict.gain, "x"),
            f"{verdict.confirmations}/{verdict.rounds}",
            "-" if verdict.run_id is None else str(verdict.run_id),
            render.when(verdict.updated_at),
        ]
        for verdict in verdicts
    )
    return render.table(
        "verdicts", "model", "fingerprint", "verdict", "gain", "confirmed", "run", "updated",
        rows=rows,
    )  # fmt: skip


def cmd_models(args: argparse.Namespace) -> int:
    """List the models seen, with how many of this device's entries each validated or masked."""
    from tunecache import maintain

    with read_cache(location(args)) as cache:
        found = maintain.models(cache)
    if args.json:
        render.print_json({"models": [m.as_dict() for m in found]})
        return 0
    rows = (
        [
            model.name,
            model.fingerprint or "-",
            str(model.validated),
            str(model.masked),
            render.when(model.first_seen),
            render.when(model.last_verdict),
        ]
        for model in found
    )
    shown = render.table(
        None, "model", "fingerprint", "validated", "masked", "first seen", "last verdict", rows=rows
    )
    render.console().print(shown)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """Show how the resolver would answer KEY for this device (and model), and why: masks, the
    exact entry, the nearest tuned shapes with their distances, or the heuristic. Reads only;
    without --candidates, each candidate list stored for the key's signature is tried."""
    from tunecache.resolve import Table

    found = location(args)
    if args.db is not None:
        existing(found)  # a mistyped --db is an error; elsewhere no cache is the heuristic
    table = Table.open(
        **found,
        model=args.model,
        fingerprint=args.fingerprint,
        use=args.use,
        max_distance=args.max_distance,
        scenarios=dict(args.scenario or ()),
    )
    candidates = None
    if args.candidates is not None:
        candidates = tuple(name for name in args.candidates.split(",") if name)
    explanation = table.explain(args.key, candidates, args.heuristic)
    table.close()
    render.emit(args, explanation, _print_explanation)
    return 0 if explanation.answer is not None else EXIT_PROBLEMS


def _print_explanation(explanation: Any) -> None:
    """The key as the resolver read it, then each step it took."""
    from tunecache.keys import format_key

    print(f"key: {format_key(explanation.key)}")
    for step in explanation.steps:
        print(f"  {step}")


def cmd_sql(args: argparse.Namespace) -> int:
    """Print the database path and example queries against the documented views; with a
    query, run it read-only and print its rows."""
    from tunecache import maintain

    with read_cache(location(args)) as cache:
        path = cache.path
    if args.query is None:
        if args.json:
            render.print_json(
                {
                    "database": str(path),
                    "views": list(maintain.VIEWS),
                    "examples": [{"title": t, "sql": q} for t, q in maintain.EXAMPLE_QUERIES],
                }
            )
            return 0
        console = render.console()
        console.print(f"database: {path}", soft_wrap=True)
        console.print(f"views: {', '.join(maintain.VIEWS)} (docs/cli.md describes them)")
        console.print(f"open it with: sqlite3 -readonly {path}", soft_wrap=True)
        for title, query in maintain.EXAMPLE_QUERIES:
            console.print(f"\n-- {title}\n{query};", soft_wrap=True)
        return 0
    result = maintain.run_query(path, args.query, max_rows=args.limit, timeout=args.timeout)
    if args.json:
        render.print_json(result.as_dict())
        return 0
    console = render.console()
    cells = ([render.cell(value) for value in row] for row in result.rows)
    console.print(render.table(None, *result.columns, rows=cells))
    if result.truncated:
        console.print(f"only the first {args.limit} rows are shown (--limit)")
    return 0
