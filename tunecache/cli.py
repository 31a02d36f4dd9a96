"""The `tunecache` command: a thin layer of argument parsing over library calls.

Every subcommand is a function of `tunecache.maintain`, `tunecache.exchange` or
`tunecache.tune` first; this module parses arguments, calls it, and prints the result as rich
tables or, with `--json`, as stable JSON (docs/cli.md gives each schema). rich is imported here
only, lazily, never on the resolver's path.

Every error is one line on stderr and a documented exit status, never a traceback (set
TUNECACHE_DEBUG=1 to see one). Exit statuses: 0 success; 1 nothing matched (`inspect`), problems
left unrepaired (`doctor`) or another tunecache error; 2 bad argument or key; 3 bad record or
bad file; 4 device mismatch; 5 store error; 6 store busy; 7 schema too new; 8 read-only;
64 bad usage; 70 an internal error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tunecache._version import __version__
from tunecache.errors import BadArgumentError, TunecacheError, TunecacheWarning
from tunecache.keys import format_key

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["EXIT_INTERNAL", "EXIT_INTERRUPTED", "EXIT_PROBLEMS", "EXIT_USAGE", "main"]

#: doctor found problems it did not repair
EXIT_PROBLEMS = 1
EXIT_USAGE = 64
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

#: a progress callback, as the library functions take it: (what, done, total)
Progress = Callable[[str, int, int], None]

#: the entry statuses (store.models.ENTRY_STATUSES, which a test keeps equal): spelled out
#: here so that `--help` does not import SQLAlchemy
STATUSES = ("unvalidated", "accepted", "rejected")

_DURATION = re.compile(r"(\d{1,9})([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class _Parser(argparse.ArgumentParser):
    """argparse that exits with EXIT_USAGE on bad arguments, after its one-line message."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _device_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("device")
    group.add_argument("--client", default="tunecache", help="client library name")
    group.add_argument("--client-version", help="client library version (needed with --client)")
    group.add_argument("--threads", type=int, help="thread pool size (default: usable CPUs)")
    group.add_argument("--accelerator", help="accelerator name, e.g. 'NVIDIA H200'")
    group.add_argument("--cpu", help="another CPU model (or GPU name) than this machine's")
    group.add_argument(
        "--gpu",
        type=int,
        metavar="INDEX",
        help="the identity tunecache.triton uses for this machine's GPU INDEX (needs torch)",
    )
    group.add_argument("--root", help="cache root (default: $TUNECACHE_DIR, else the user cache)")
    group.add_argument("--db", help="an explicit database file instead of the device's own")


def _device(args: argparse.Namespace) -> Any:
    """The device identity the options name: this machine's, with any field overridden, or
    with --gpu the identity tunecache.triton gives this machine's GPU."""
    from tunecache.device import detect

    if args.gpu is None:
        return detect(
            client=args.client,
            client_version=args.client_version,
            threads=args.threads,
            accelerator=args.accelerator,
            cpu=args.cpu,
        )
    named = [f"--{n.replace('_', '-')}" for n in ("client_version", "threads", "accelerator", "cpu")
             if getattr(args, n) is not None]  # fmt: skip
    if args.client != "tunecache":
        named.insert(0, "--client")
    if named:
        raise _UsageError(f"--gpu gives the whole identity: drop {' '.join(named)}")
    from tunecache import triton

    return triton.gpu_device(args.gpu)


def _open(args: argparse.Namespace) -> Any:
    from tunecache.cache import Cache

    return Cache.open(device=_device(args), root=args.root, path=args.db)


# --- output ----------------------------------------------------------------------------------


def _console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); off a terminal, wide and without colour, so
    piped output is greppable rather than wrapped at 80 columns."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream, highlight=False)
    width = int(os.environ.get("COLUMNS", "0") or 0) or 200
    return Console(file=stream, width=width, highlight=False, color_system=None)


def _table(title: str | None, *columns: str) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in columns:
        table.add_column(name, overflow="fold")
    return table


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _num(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{suffix}"


def _seconds(value: float | None) -> str:
    """A duration with a unit a person reads at a glance."""
    if value is None:
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value / 1e-9:.4g} ns"


def _cell(value: object) -> str:
    """A SQL value as a table shows it."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return str(value)


def _names(names: Sequence[str]) -> str:
    return ", ".join(names) or "-"


@contextlib.contextmanager
def _progress(args: argparse.Namespace) -> Iterator[Progress | None]:
    """A progress bar on stderr for long work, shown only to a person at a terminal."""
    if args.json or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress as Bar

    with Bar(console=_console(stderr=True), transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)

        yield update


# --- argument types --------------------------------------------------------------------------


def _time_arg(text: str) -> datetime:
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def _count_arg(text: str) -> int:
    """A count that must be at least 1 (pairs, blocks, candidates)."""
    value = _positive_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not at least 1")
    return value


def _read_input(path: str, limit: int) -> bytes:
    """The bytes of a file (or stdin for '-'), refusing more than `limit` without reading it all."""
    from tunecache.errors import CodecError

    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
    except OSError as error:
        raise BadArgumentError(f"cannot read {path}: {error.strerror or error}") from error
    if len(data) > limit:
        raise CodecError(f"export file: {path} is larger than the limit of {limit} bytes")
    return data


def _write_output(path: str, data: bytes) -> None:
    """Write a file whole or not at all: a crash or a full disk never leaves half an export."""
    target = Path(path)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, target)
    except BaseException as error:
        # Also on Ctrl-C: no half-written temp file is left beside the target.
        with contextlib.suppress(OSError):
            temp.unlink()
        if isinstance(error, OSError):
            raise BadArgumentError(f"cannot write {path}: {error.strerror or error}") from error
        raise


# --- where -----------------------------------------------------------------------------------


def cmd_where(args: argparse.Namespace) -> int:
    """Print the device identity and where its cache lives, creating the cache if needed."""
    with _open(args) as cache:
        info: dict[str, Any] = {
            "device": cache.device.as_dict(),
            "fingerprint": cache.device.fingerprint,
            "database": str(cache.path),
            "revision": cache.revision(),
            "entries": cache.count(),
            "writable": not cache.readonly,
        }
        if cache.readonly_reason:
            info["readonly_reason"] = cache.readonly_reason
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    width = max(len(k) for k in info["device"]) + 1
    for name, value in info["device"].items():
        print(f"{name + ':':<{width + 1}} {'-' if value is None else value}")
    print(f"{'database:':<{width + 1}} {info['database']}")
    print(f"{'revision:':<{width + 1}} {info['revision']}")
    print(f"{'entries:':<{width + 1}} {info['entries']}")
    if cache.readonly_reason:
        print(f"{'read-only:':<{width + 1}} {cache.readonly_reason}")
    return 0


# --- list, inspect, models -------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    """List this device's decisions, most recently updated first, filtered by signature, op,
    model, status or age."""
    from tunecache import maintain

    with _open(args) as cache:
        found = maintain.list_entries(
            cache,
            signature=args.signature,
            op=args.op,
            model=args.model,
            status=args.status,
            older_than=args.older_than,
            newer_than=args.newer_than,
            limit=args.limit,
        )
    if args.json:
        _print_json({"entries": [e.as_dict() for e in found], "count": len(found)})
        return 0
    table = _table(
        None,
        "id",
        "key",
        "choice",
        "heuristic",
        "speedup",
        "status",
        "validated by",
        "masked by",
        "updated",
    )
    for e in found:
        table.add_row(
            str(e.id),
            e.key,
            e.choice,
            e.heuristic or "-",
            _num(e.speedup, "x"),
            e.status,
            _names(e.validated_by),
            _names(e.masked_by),
            _when(e.updated_at),
        )
    console = _console()
    console.print(table)
    console.print(f"{len(found)} entries")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Show everything about one entry (by id) or every entry of a key: the timing record of
    each candidate, the bench settings, the models' verdicts, and the run that tuned it."""
    from tunecache import maintain

    # isascii: "²".isdigit() is true, and int("²") fails.
    digits = args.target.isascii() and args.target.isdigit()
    target: int | str = int(args.target) if digits else args.target
    with _open(args) as cache:
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
        _print_json({"entries": [i.as_dict() for i in found]})
        return 0
    console = _console()
    for item in found:
        _print_inspection(console, item)
    return 0


def _print_inspection(console: Console, item: Any) -> None:
    e = item.entry
    console.print(f"[bold]{e.key}[/bold]  (entry {e.id}, {e.status})")
    console.print(
        f"choice {e.choice}, heuristic {e.heuristic or '-'}, speedup {_num(e.speedup, 'x')}; "
        f"candidate set {e.checksum}; created {_when(e.created_at)}, "
        f"updated {_when(e.updated_at)}"
    )
    if not item.has_record:
        console.print("no timing record")
    elif item.record_error is not None:
        console.print(f"timing record unreadable: {item.record_error}")
    table = _table(
        "candidates", "name", "median", "min", "max", "samples", "loops", "failures", "note"
    )
    for c in item.candidates:
        notes = [n for n, on in (("chosen", c.chosen), ("heuristic", c.heuristic)) if on]
        if c.pruned:
            notes.append("pruned")
        if not c.measured:
            notes.append("not measured")
        table.add_row(
            c.name,
            _seconds(c.median_s),
            _seconds(c.min_s),
            _seconds(c.max_s),
            str(c.samples),
            str(c.inner_loops),
            c.error or "-",
            ", ".join(notes) or "-",
        )
    console.print(table)
    for title, values in (("bench settings", item.settings), ("environment", item.env)):
        if values:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
            console.print(f"{title}: {shown}", soft_wrap=True)
    if item.verdicts:
        verdicts = _table(
            "verdicts", "model", "fingerprint", "verdict", "gain", "confirmed", "run", "updated"
        )
        for v in item.verdicts:
            verdicts.add_row(
                v.model,
                v.fingerprint or "-",
                v.verdict,
                _num(v.gain, "x"),
                f"{v.confirmations}/{v.rounds}",
                "-" if v.run_id is None else str(v.run_id),
                _when(v.updated_at),
            )
        console.print(verdicts)
    else:
        console.print("no model has judged this entry")
    run = item.run
    if run is None:
        console.print("tuned outside a logged run")
    else:
        console.print(
            f"run {run.id}: {run.kind}, {run.status}, on {run.hostname} (pid {run.pid}) by "
            f"tunecache {run.tool_version}, {_when(run.started_at)} to {_when(run.finished_at)}"
            + (f"; {run.notes}" if run.notes else ""),
            soft_wrap=True,
        )
    console.print()


def cmd_models(args: argparse.Namespace) -> int:
    """List the models seen, with how many of this device's entries each validated or masked."""
    from tunecache import maintain

    with _open(args) as cache:
        found = maintain.models(cache)
    if args.json:
        _print_json({"models": [m.as_dict() for m in found]})
        return 0
    table = _table(
        None, "model", "fingerprint", "validated", "masked", "first seen", "last verdict"
    )
    for m in found:
        table.add_row(
            m.name,
            m.fingerprint or "-",
            str(m.validated),
            str(m.masked),
            _when(m.first_seen),
            _when(m.last_verdict),
        )
    _console().print(table)
    return 0


# --- prune -----------------------------------------------------------------------------------


def _current_lists(path: str | None) -> dict[str, list[str]] | None:
    if path is None:
        return None
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
    only says what would go."""
    from tunecache import maintain

    if not (
        args.versions
        or args.stale
        or args.candidates
        or args.unvalidated
        or args.older_than
        or args.masked
    ):
        raise _UsageError(
            "say what to prune: --versions, --stale, --unvalidated, --older-than or --masked"
        )
    current = _current_lists(args.candidates)
    with _open(args) as cache:
        report = maintain.prune(
            cache,
            versions=args.versions,
            stale=args.stale or current is not None,
            current=current,
            unvalidated=args.unvalidated,
            older_than=args.older_than,
            masked=args.masked,
            dry_run=args.dry_run,
            root=args.root,
        )
    if args.json:
        _print_json(report.as_dict())
        return 0
    console = _console()
    verb = "would remove" if report.dry_run else "removed"
    if report.entries:
        table = _table(f"entries {verb}", "id", "key", "choice", "status", "updated", "why")
        for e in report.entries:
            table.add_row(
                str(e.id), e.key, e.choice, e.status, _when(e.updated_at), ", ".join(e.reasons)
            )
        console.print(table)
    if report.versions:
        table = _table("version folders", "version", "path", "bytes", "outcome")
        for v in report.versions:
            outcome = f"left: {v.skipped}" if v.skipped else verb
            table.add_row(v.version, v.path, str(v.bytes), outcome)
        console.print(table)
    orphans = report.orphans
    console.print(
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
    return 0


# --- export, import, merge -------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    """Write this device's entries, with their timing records and verdicts, as one CBOR file."""
    from tunecache import exchange

    to_stdout = args.output in (None, "-")
    if to_stdout and sys.stdout.isatty():
        raise _UsageError("refusing to write binary CBOR to a terminal; give -o FILE")
    if to_stdout and args.json:
        raise _UsageError("--json prints a summary; it needs -o FILE for the export itself")
    with _open(args) as cache, _progress(args) as progress:
        count = cache.count()
        data = exchange.export_cache(cache, progress=progress)
        device = cache.device
    if to_stdout:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return 0
    _write_output(args.output, data)
    summary = {
        "path": str(Path(args.output).absolute()),
        "bytes": len(data),
        "entries": count,
        "format_version": exchange.FORMAT_VERSION,
        "fingerprint": device.fingerprint,
    }
    if args.json:
        _print_json(summary)
    else:
        _console().print(f"exported {count} entries ({len(data)} bytes) to {summary['path']}")
    return 0


def _print_import(args: argparse.Namespace, report: Any) -> None:
    if args.json:
        _print_json(report.as_dict())
        return
    console = _console()
    counts = report.counts
    source = report.source_device
    console.print(
        f"{report.kind} from {source['cpu']}-t{source['threads']} {source['client']} "
        f"{source['client_version']}"
        + (" (another device: entries arrive unvalidated)" if report.other_device else "")
        + f", policy {report.policy}",
        soft_wrap=True,
    )
    table = _table(None, "action", "entries")
    for action, n in counts.items():
        table.add_row(action, str(n))
    console.print(table)
    notable = [a for a in report.actions if a.action not in ("added", "unchanged")]
    if notable:
        detail = _table("conflicts", "key", "candidate set", "action")
        for a in notable:
            detail.add_row(a.key, a.checksum, a.action)
        console.print(detail)
    if report.run_id is None:
        console.print("nothing changed")
    else:
        console.print(f"logged as run {report.run_id}, {report.verdicts} verdicts written")
    if report.origin_device is not None:
        console.print(f"entries kept beside local ones are under device {report.origin_device}")


def cmd_import(args: argparse.Namespace) -> int:
    """Import an export file, all or nothing; a file from another device only with
    --allow-other-device, its entries then unvalidated."""
    from tunecache import exchange

    data = _read_input(args.file, exchange.MAX_SIZE)
    with _open(args) as cache, _progress(args) as progress:
        report = exchange.import_cache(
            cache,
            data,
            allow_other_device=args.allow_other_device,
            policy=args.policy,
            # A file by its absolute path, as merge names it; standard input by the export's own
            # time, so two different exports piped in never share an origin.
            origin=None if args.file == "-" else str(Path(args.file).absolute()),
            progress=progress,
        )
    _print_import(args, report)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Merge another cache database or an export file into this cache under a conflict policy,
    and report what was done with each entry."""
    from tunecache import exchange

    source = Path(args.source)
    if not source.is_file():
        raise BadArgumentError(f"no cache database or export file at {source}")
    with open(source, "rb") as fh:
        header = exchange.SQLITE_HEADER
        is_database = fh.read(len(header)) == header
    with _open(args) as cache, _progress(args) as progress:
        if is_database:
            with exchange.open_source(source, cache.device) as other:
                report = exchange.merge(
                    cache,
                    other,
                    policy=args.policy,
                    allow_other_device=args.allow_other_device,
                    progress=progress,
                )
        else:
            report = exchange.merge(
                cache,
                _read_input(str(source), exchange.MAX_SIZE),
                policy=args.policy,
                allow_other_device=args.allow_other_device,
                origin=str(source.absolute()),
                progress=progress,
            )
    _print_import(args, report)
    return 0


# --- doctor, sql -----------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check the database: integrity, schema revision, WAL size, stale and orphaned rows. It
    says what it would repair, and repairs only with --repair. Exit 1 if problems remain."""
    from tunecache import maintain

    with _open(args) as cache, _progress(args) as progress:
        report = maintain.doctor(cache, repair=args.repair, progress=progress)
    if args.json:
        _print_json(report.as_dict())
        return 0 if report.healthy else EXIT_PROBLEMS
    console = _console()
    console.print(f"database: {report.path}")
    integrity = "ok" if report.integrity == ("ok",) else "; ".join(report.integrity[:5])
    console.print(f"integrity: {integrity}")
    console.print(f"revision: {report.revision} (this tunecache: {report.head})")
    console.print(f"size: {report.database_bytes} bytes, WAL {report.wal_bytes} bytes")
    console.print(f"devices: {report.devices}, entries: {report.entries}")
    if report.problems:
        table = _table("problems", "problem", "rows", "what", "repair")
        for p in report.problems:
            if p.repair is None:
                repair = "cannot repair"
            elif p.repaired:
                repair = f"repaired: {p.repair}"
            else:
                repair = f"--repair would {p.repair}"
            table.add_row(p.kind, str(p.count), p.detail, repair)
        console.print(table)
    else:
        console.print("no stale or orphaned rows")
    if report.checkpointed:
        console.print("WAL checkpointed")
    console.print("healthy" if report.healthy else "problems remain")
    return 0 if report.healthy else EXIT_PROBLEMS


def _load_models(spec: str) -> list[Any]:
    """The models a MODULE:ATTR or FILE.py:ATTR spec names: a Model, a callable, or a list or
    dict of them."""
    import importlib
    import importlib.util

    from tunecache import tune

    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise _UsageError(f"a model is named MODULE:ATTR or FILE.py:ATTR, got {spec!r}")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise BadArgumentError(f"no file {where!r}")
            # A name of its own, so a file called like an installed module shadows nothing.
            name = f"_tunecache_models_{abs(hash(str(path.resolve())))}"
            loader_spec = importlib.util.spec_from_file_location(name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise BadArgumentError(f"cannot import {where!r}")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module  # dataclasses and pickling look the module up
            try:
                loader_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        else:
            module = importlib.import_module(where)
    except ImportError as error:
        raise BadArgumentError(f"cannot import {where!r}: {error}") from None
    except TunecacheError:
        raise
    except Exception as error:  # the module's own code failed while importing
        raise BadArgumentError(
            f"importing {where!r} raised {type(error).__name__}: {error}".splitlines()[0]
        ) from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise BadArgumentError(f"{where!r} has no attribute {attr!r}")
        value = getattr(value, part)
    if isinstance(value, dict):
        return [tune.as_model(v, name=str(k)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [tune.as_model(v) for v in value]
    return [tune.as_model(value, name=attr)]


def _tune_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--share",
        type=float,
        default=0.01,
        help="leave keys lighter than this fraction of a run's time alone (default 0.01)",
    )
    parser.add_argument(
        "--budget", type=float, metavar="SECONDS", help="stop tuning new keys after this long"
    )
    parser.add_argument(
        "--key-budget",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="the longest one key's isolated bench may take (default 1.0)",
    )
    parser.add_argument(
        "--keep", type=_count_arg, default=3, help="bench survivors tried in whole runs (3)"
    )
    parser.add_argument("--confirmations", type=_count_arg, help="paired blocks B must win, k of k")
    parser.add_argument("--pairs", type=_count_arg, help="paired runs per block")
    parser.add_argument("--alpha", type=float, help="significance level of the paired test")
    parser.add_argument(
        "--retune", action="store_true", help="bench again keys that already have evidence"
    )


def _measure_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--measure-pairs",
        type=_count_arg,
        default=20,
        help="paired runs per model for the report (default 20)",
    )


def _tune_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "share": args.share,
        "budget": args.budget,
        "key_budget": args.key_budget,
        "keep": args.keep,
        "confirmations": args.confirmations,
        "pairs": args.pairs,
        "alpha": args.alpha,
        "retune": args.retune,
    }


def _change(speedup: float | None) -> str:
    """A speedup (before over after) as the change in time a person reads: -9.1% is faster."""
    if speedup is None or not speedup > 0:
        return "-"
    return f"{(1 / speedup - 1) * 100:+.1f}%"


def _paired(pairs: int, speedup: float, low: float, high: float, p: float) -> list[str]:
    """A paired comparison's cells: the change, its interval (a faster time is the high
    speedup) and p; dashes when nothing was measured."""
    if not pairs:
        return ["-", "-", "-"]
    return [_change(speedup), f"[{_change(high)}, {_change(low)}]", f"{p:.3g}"]


def _print_tune(console: Console, report: Any) -> None:
    title = f"{report.model} (fingerprint {report.fingerprint}, {len(report.scenarios)} scenarios)"
    table = _table(title, "key", "share", "action", "runs", "heuristic", "change", "p", "pairs")
    for k in report.keys:
        v = k.verdict
        table.add_row(
            k.key,
            f"{k.share * 100:.1f}%",
            k.action,
            k.choice,
            k.heuristic,
            _change(v.speedup) if v else "-",
            f"{v.p_value:.3g}" if v else "-",
            f"{v.rounds} ({v.confirmations}/{v.needed})" if v else "-",
        )
    console.print(table)
    counts = {a: report.count(a) for a in ("accepted", "validated", "masked", "rejected")}
    console.print(
        f"{len({k.key for k in report.keys})} heavy keys, {report.screened} screened out; "
        + ", ".join(f"{n} {a}" for a, n in counts.items())
    )
    if report.guard_error:
        console.print(
            f"final guard: a run with this table raised {report.guard_error}; "
            "every entry it used is masked for the model"
        )
    elif report.guard_skipped:
        console.print("final guard: passed in an earlier session over this same table")
    elif report.guard is None:
        console.print("final guard: not needed, the model uses no entry (it runs its heuristic)")
    else:
        g = report.guard
        word = "kept" if g.accepted else "dropped (every entry it used is masked for it)"
        console.print(
            f"final guard, no table vs this table: {_change(g.speedup)} "
            f"[{_change(g.high)}, {_change(g.low)}], p={g.p_value:.3g}, "
            f"{g.confirmations}/{g.needed} blocks: table {word}"
        )
    if report.interrupted:
        console.print("interrupted: what was accepted before is stored")
    elif report.budget_spent:
        console.print("the time budget ran out: some keys were skipped")
    console.print(f"{report.seconds:.1f} s, run {report.run_id}")


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune models on this device: profile, screen heavy keys, bench their candidates, accept
    an entry only when the whole model gets faster (paired runs), and write it to the cache.
    MODEL is MODULE:ATTR or FILE.py:ATTR naming a tunecache.tune.Model, a callable, or a list or
    dict of them. Ctrl-C keeps what was accepted (exit 130)."""
    from tunecache import tune

    models = [m for spec in args.model for m in _load_models(spec)]
    reports = []
    with _open(args) as cache, _progress(args) as progress:
        for model in models:
            try:
                report = tune.tune(model, cache=cache, progress=progress, **_tune_kwargs(args))
            except tune.TuneInterrupted as stop:
                reports.append(stop.report)
                _emit_tune(args, reports)
                raise
            reports.append(report)
    _emit_tune(args, reports)
    return 0


def _emit_tune(args: argparse.Namespace, reports: list[Any]) -> None:
    if args.json:
        _print_json([r.as_dict() for r in reports])
        return
    console = _console()
    for report in reports:
        _print_tune(console, report)


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: tune every example model (tunecache.examples: real numpy convolutions,
    matrix chains, BLAS thread counts) on this device, into its cache, then measure each model
    against its heuristic in paired runs. A second run finds everything tuned and only
    measures. Ctrl-C keeps what was accepted (exit 130)."""
    from tunecache import demo, tune

    models = demo.example_models(args.model)
    # Every option is checked before the cache is opened or a word is printed.
    alpha = 0.01 if args.alpha is None else args.alpha
    tune.check_evaluate_options(args.measure_pairs, alpha, _tune_kwargs(args))
    with _open(args) as cache, _progress(args) as progress:
        if not args.json:
            _console(stderr=True).print(
                f"tuning {len(models)} example models into {cache.path}", highlight=False
            )
        report = demo.demo(
            models,
            cache=cache,
            pairs=args.measure_pairs,
            alpha=alpha,
            tune_options=_tune_kwargs(args),
            progress=progress,
        )
    if args.json:
        _print_json(report.as_dict())
        return 0
    console = _console()
    table = _table(
        "the example models on this device: the cache against each model's heuristic",
        "model", "scenarios", "heuristic ms", "tuned ms", "change", "99% interval", "p",
        "entries used", "kept", "masked", "tuned now", "outcome",
    )  # fmt: skip
    for r in report.rows:
        table.add_row(
            r.model,
            str(r.scenarios),
            _num(r.heuristic_ms),
            _num(r.tuned_ms),
            *_paired(r.pairs, r.speedup, r.low, r.high, r.p_value),
            str(r.used),
            str(r.kept),
            str(r.masked),
            f"{r.accepted} in {r.tune_seconds:.1f} s",
            r.outcome + (f" ({r.note})" if r.note else ""),
        )
    console.print(table)
    c = report.counts()
    console.print(
        f"{c['improved']} improved, {c['neutral']} neutral, {c['regressed']} regressed; "
        f"{report.seconds:.1f} s"
    )
    console.print(f"the decisions: sqlite3 {report.database} 'select * from decisions'")
    return 0


@contextlib.contextmanager
def _evaluation_store(args: argparse.Namespace, examples: bool) -> Iterator[Any]:
    """The cache an evaluation runs in: the one the options name, or, for the example models
    with no --root or --db, a fresh temporary one (the demo may have tuned the held-out half in
    this device's own cache, and then nothing would be held out)."""
    if not examples or args.root is not None or args.db is not None:
        with _open(args) as cache:
            yield cache
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tunecache-evaluate-") as root:
        args.root = root
        if not args.json:
            _console(stderr=True).print(
                f"the example models, in a fresh cache under {root} (removed afterwards)",
                highlight=False,
            )
        with _open(args) as cache:
            yield cache


def cmd_evaluate(args: argparse.Namespace) -> int:
    """The held-out protocol: tune on the --tune models, apply the shared cache as it is to the
    --held-out models, and report every model improved / neutral / regressed against its
    heuristic, from paired end-to-end runs. With no models named, it runs on the example
    workload (tunecache.examples.TUNED and HELD_OUT) in a fresh temporary cache, unless --root
    or --db names one."""
    from tunecache import tune

    tune.check_evaluate_options(
        args.measure_pairs, 0.01 if args.alpha is None else args.alpha, _tune_kwargs(args)
    )
    examples = not args.tune and not args.held_out
    if examples:
        from tunecache import examples as workload

        tuned, held = list(workload.TUNED), list(workload.HELD_OUT)
    elif not args.tune:
        raise _UsageError("--held-out needs at least one --tune model to build the cache from")
    else:
        tuned = [m for spec in args.tune for m in _load_models(spec)]
        held = [m for spec in args.held_out for m in _load_models(spec)]
    with _evaluation_store(args, examples) as cache, _progress(args) as progress:
        for m in held:
            if cache.verdicts(m.name):
                raise BadArgumentError(
                    f"held-out model {m.name!r} was already tuned or validated in {cache.path}: "
                    "nothing would be held out; evaluate in a fresh cache (--root DIR)"
                )
        result = tune.evaluate(
            tuned,
            held,
            cache=cache,
            pairs=args.measure_pairs,
            alpha=0.01 if args.alpha is None else args.alpha,
            tune_options=_tune_kwargs(args),
            progress=progress,
        )
    if args.json:
        _print_json(result.as_dict())
        return 0
    console = _console()
    table = _table(
        "held-out evaluation: the shared cache against each model's heuristic",
        "model", "group", "heuristic ms", "cached ms", "change", "99% interval", "p", "pairs",
        "entries", "outcome",
    )  # fmt: skip
    for r in result.rows:
        p = min(r.p_faster, r.p_slower)
        table.add_row(
            r.model,
            r.group,
            _num(r.heuristic_ms),
            _num(r.cached_ms),
            *_paired(r.pairs, r.speedup, r.low, r.high, p),
            str(r.pairs),
            str(r.entries),
            r.outcome + (f" ({r.note})" if r.note else ""),
        )
    console.print(table)
    for group in ("tuned", "held-out"):
        c = result.counts(group)
        console.print(
            f"{group}: {c['improved']} improved, {c['neutral']} neutral, {c['regressed']} regressed"
        )
    console.print(f"{result.seconds:.1f} s")
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    """Print the database path and example queries against the documented views; with a
    query, run it read-only and print its rows."""
    from tunecache import maintain

    with _open(args) as cache:
        path = cache.path
    if args.query is None:
        if args.json:
            _print_json(
                {
                    "database": str(path),
                    "views": list(maintain.VIEWS),
                    "examples": [{"title": t, "sql": q} for t, q in maintain.EXAMPLE_QUERIES],
                }
            )
            return 0
        console = _console()
        console.print(f"database: {path}", soft_wrap=True)
        console.print(f"views: {', '.join(maintain.VIEWS)} (docs/cli.md describes them)")
        console.print(f"open it with: sqlite3 -readonly {path}", soft_wrap=True)
        for title, query in maintain.EXAMPLE_QUERIES:
            console.print(f"\n-- {title}\n{query};", soft_wrap=True)
        return 0
    result = maintain.run_query(path, args.query, max_rows=args.limit, timeout=args.timeout)
    if args.json:
        _print_json(result.as_dict())
        return 0
    table = _table(None, *result.columns)
    for row in result.rows:
        table.add_row(*[_cell(v) for v in row])
    console = _console()
    console.print(table)
    if result.truncated:
        console.print(f"only the first {args.limit} rows are shown (--limit)")
    return 0


# --- explain ---------------------------------------------------------------------------------


def _scenario_arg(text: str) -> tuple[str, tuple[int, ...]]:
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


def cmd_explain(args: argparse.Namespace) -> int:
    """Show how the resolver would answer KEY for this device (and model), and why: masks, the
    exact entry, the nearest tuned shapes with their distances, or the heuristic. Reads only;
    without --candidates, each candidate list stored for the key's signature is tried."""
    from tunecache.resolve import Table

    table = Table.open(
        device=_device(args),
        root=args.root,
        path=args.db,
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
    if args.json:
        _print_json(explanation.as_dict())
    else:
        print(f"key: {format_key(explanation.key)}")
        for step in explanation.steps:
            print(f"  {step}")
    return 0 if explanation.answer is not None else EXIT_PROBLEMS


# --- the parser ------------------------------------------------------------------------------


class _UsageError(Exception):
    """A combination of arguments argparse cannot express; reported as usage (exit 64)."""


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    if issubclass(category, TunecacheWarning):
        print(f"tunecache: warning: {message}", file=sys.stderr)
    else:
        _original_showwarning(message, category, filename, lineno, file, line)


_original_showwarning = warnings.showwarning


def _subcommand(
    sub: Any,
    name: str,
    func: Callable[[argparse.Namespace], int],
    summary: str,
    *,
    aliases: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """Add a subcommand with the device options and --json every subcommand shares."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, aliases=list(aliases), help=summary, description=func.__doc__
    )
    _device_options(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=func, parser=parser)
    return parser


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--signature", help="only this op signature, e.g. matmul_F32")
    parser.add_argument("--op", help="only this op, the first token of a key, e.g. matmul")
    parser.add_argument("--model", help="only entries this model validated or masked")
    parser.add_argument("--status", choices=STATUSES, help="only entries in this status")
    parser.add_argument(
        "--older-than",
        type=_time_arg,
        metavar="WHEN",
        help="only entries last updated before WHEN: an age (30d, 12h, 2w) or a date",
    )
    parser.add_argument(
        "--newer-than", type=_time_arg, metavar="WHEN", help="only entries updated since WHEN"
    )
    parser.add_argument("--limit", type=_positive_int, help="at most this many entries")


def _add_exchange_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        choices=("local", "evidence", "both"),
        default="local",
        help="where both sides hold an entry: keep the local one (default), keep the one with "
        "stronger evidence, or keep both (the incoming one beside it, under its origin)",
    )
    parser.add_argument(
        "--allow-other-device",
        action="store_true",
        help="accept entries measured on another device identity; they arrive unvalidated",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `tunecache` command."""
    parser = _Parser(
        prog="tunecache",
        description="A persistent, per-device autotuning cache.",
        epilog="Exit statuses and --json schemas: docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"tunecache {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    _subcommand(sub, "where", cmd_where, "show this device's identity and its cache database")

    listing = _subcommand(
        sub,
        "list",
        cmd_list,
        "list decisions, filtered by signature, op, model, status, age",
        aliases=("show",),
    )
    _add_filters(listing)

    inspect = _subcommand(sub, "inspect", cmd_inspect, "show one entry's full evidence")
    inspect.add_argument("target", metavar="KEY_OR_ID", help="an entry id, or a key's text")

    explain = _subcommand(sub, "explain", cmd_explain, "how the resolver would answer a key")
    explain.add_argument("key", metavar="KEY", help="a key's text, e.g. matmul_F32_m256_k256_n64")
    explain.add_argument("--model", help="resolve as this model sees the cache (its masks apply)")
    explain.add_argument("--fingerprint", help="the model's fingerprint (default: any)")
    explain.add_argument(
        "--use",
        choices=("validated", "own", "all"),
        default="validated",
        help="which entries serve: validated by any model (default), by this model, or all",
    )
    explain.add_argument(
        "--max-distance",
        type=float,
        default=1.0,
        help="how far a nearest shape may be borrowed from, summed |log2 ratio| (default 1.0)",
    )
    explain.add_argument(
        "--scenario",
        type=_scenario_arg,
        action="append",
        metavar="NAME=SIZES",
        help="a symbolic dim and its tuned sizes, e.g. s=1,64,256,1024 (repeatable)",
    )
    explain.add_argument(
        "--candidates", metavar="A,B,...", help="the caller's legal candidates, in order"
    )
    explain.add_argument("--heuristic", help="the caller's own pick, one of the candidates")

    _subcommand(sub, "models", cmd_models, "list the models seen, with their verdict counts")

    prune = _subcommand(sub, "prune", cmd_prune, "remove old versions and stale entries")
    prune.add_argument(
        "--versions", action="store_true", help="version folders other than the current one"
    )
    prune.add_argument(
        "--stale",
        action="store_true",
        help="entries tuned against a candidate list that is not the current one",
    )
    prune.add_argument(
        "--candidates",
        metavar="FILE",
        help="JSON file mapping each signature to its current candidate list (implies --stale; "
        "without it, the list a signature was last tuned against is current)",
    )
    prune.add_argument("--unvalidated", action="store_true", help="entries no model validated")
    prune.add_argument(
        "--older-than", type=_time_arg, metavar="WHEN", help="entries last updated before WHEN"
    )
    prune.add_argument(
        "--masked", action="store_true", help="entries masked by every model that judged them"
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="say what would be removed, remove nothing"
    )

    export = _subcommand(sub, "export", cmd_export, "write this device's entries as CBOR")
    export.add_argument(
        "-o", "--output", metavar="FILE", help="where to write it (default: standard output)"
    )

    imp = _subcommand(sub, "import", cmd_import, "import an export file, all or nothing")
    imp.add_argument("file", metavar="FILE", help="the export file, or - for standard input")
    _add_exchange_options(imp)

    merge = _subcommand(sub, "merge", cmd_merge, "merge another cache or an export file")
    merge.add_argument("source", metavar="SOURCE", help="a cache database or an export file")
    _add_exchange_options(merge)

    doctor = _subcommand(sub, "doctor", cmd_doctor, "check the database; repair when asked")
    doctor.add_argument("--repair", action="store_true", help="repair what can be repaired")

    tune_ = _subcommand(sub, "tune", cmd_tune, "tune models and keep only what makes them faster")
    tune_.add_argument("model", nargs="+", metavar="MODEL", help="MODULE:ATTR or FILE.py:ATTR")
    _tune_options(tune_)

    evaluate = _subcommand(
        sub, "evaluate", cmd_evaluate, "tune on some models, measure the cache on held-out ones"
    )
    evaluate.add_argument(
        "--tune",
        action="append",
        default=[],
        metavar="MODEL",
        help="a model to tune on (default: half of the example models)",
    )
    evaluate.add_argument(
        "--held-out",
        action="append",
        default=[],
        metavar="MODEL",
        help="a model the cache is applied to without tuning it",
    )
    _measure_option(evaluate)
    _tune_options(evaluate)

    demo = _subcommand(
        sub, "demo", cmd_demo, "tune the example models on this device and report the change"
    )
    demo.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME",
        help="only this example model (repeatable; default: all of them)",
    )
    _measure_option(demo)
    _tune_options(demo)

    sql = _subcommand(sub, "sql", cmd_sql, "the database path, example queries, or run one")
    sql.add_argument("query", nargs="?", metavar="QUERY", help="one read-only SQL statement")
    sql.add_argument(
        "--limit", type=_positive_int, default=1000, help="at most this many rows (1000)"
    )
    sql.add_argument(
        "--timeout", type=float, default=30.0, help="interrupt the query after this many seconds"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        with warnings.catch_warnings():
            # tunecache's own warnings are one line on stderr, and never an error even under
            # `python -W error`: a warning is something the user should read, not a failure.
            warnings.simplefilter("always", TunecacheWarning)
            warnings.showwarning = _show_warning
            return func(args)
    except _UsageError as error:
        args.parser.error(str(error))
        return EXIT_USAGE  # not reached: error() exits
    except TunecacheError as error:
        print(f"tunecache: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("tunecache: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into `head` that closed early is not an error worth a message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as error:  # the promise: one line, never a traceback
        if os.environ.get("TUNECACHE_DEBUG"):
            raise
        print(
            f"tunecache: internal error: {type(error).__name__}: {error} "
            "(set TUNECACHE_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
