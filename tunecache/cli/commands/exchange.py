"""The subcommands that move entries between caches: export, import and merge."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from tunecache.cli import render
from tunecache.cli.device import database, existing, location, open_cache
from tunecache.cli.exits import UsageError
from tunecache.cli.options import EXCHANGE, option_values
from tunecache.errors import BadArgumentError

__all__ = ["cmd_export", "cmd_import", "cmd_merge"]


def cmd_export(args: argparse.Namespace) -> int:
    """Write this device's entries, with their timing records and verdicts, as one CBOR file:
    to standard output, or replacing a regular file whole (`tunecache.outputs`)."""
    from tunecache import exchange, outputs

    to_stdout = args.output in (None, outputs.STDOUT)
    if to_stdout and sys.stdout.isatty():
        raise UsageError("refusing to write binary CBOR to a terminal; give -o FILE")
    if to_stdout and args.json:
        raise UsageError("--json prints a summary; it needs -o FILE for the export itself")
    if args.db is not None:
        # Export only reads: a mistyped --db is an error, never a new empty cache.
        existing(location(args))
    if not to_stdout:
        # Before the cache opens: a FIFO, a device or a folder there is refused, untouched.
        target = outputs.check_output(args.output)
        _refuse_the_cache_itself(target, database(location(args)))
    with open_cache(args) as cache, render.progress(args) as progress:
        device = cache.device
        if to_stdout:
            # Written as it is made: a failure midway leaves a stream without its end item,
            # which an import refuses.
            exchange.export_to(cache, sys.stdout.buffer, progress=progress)
            sys.stdout.buffer.flush()
            return 0
        done = outputs.write_output(
            args.output, lambda fh: exchange.export_to(cache, fh, progress=progress)
        )
    summary = {
        "path": str(Path(args.output).absolute()),
        "bytes": done.bytes,
        "entries": done.entries,
        "format_version": exchange.FORMAT_VERSION,
        "fingerprint": device.fingerprint,
    }
    if args.json:
        render.print_json(summary)
    else:
        render.console().print(
            f"exported {done.entries} entries ({done.bytes} bytes) to {summary['path']}",
            soft_wrap=True,
        )
    return 0


@contextlib.contextmanager
def _importing() -> Iterator[int]:
    """What an import or a merge runs with: the number of worker processes that check timing
    records beside this one (one, on a machine with more than one CPU to use), and a garbage
    collector that leaves alone what was alive before (the modules this process imported),
    which it would otherwise walk again and again among the millions of objects an import of
    a large export makes and drops."""
    from tunecache.identity import usable_cpus

    gc.freeze()
    try:
        yield 1 if usable_cpus() > 1 else 0
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _input(path: str) -> Iterator[BinaryIO]:
    """The export to read, as a binary stream: a file, or stdin for '-'."""
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed below, after the import has read it)
    except OSError as error:
        raise BadArgumentError(f"cannot read {path}: {error.strerror or error}") from error
    with fh:
        yield fh


def _print_import(report: Any) -> None:
    """An import's or a merge's report: where it came from, what was done with each entry."""
    console = render.console()
    source = report.source_device
    console.print(
        f"{report.kind} from {source['cpu']}-t{source['threads']} {source['client']} "
        f"{source['client_version']}"
        + (" (another device: entries arrive unvalidated)" if report.other_device else "")
        + f", policy {report.policy}",
        soft_wrap=True,
    )
    counts = ([action, str(count)] for action, count in report.counts.items())
    console.print(render.table(None, "action", "entries", rows=counts))
    notable = [a for a in report.actions if a.action not in ("added", "unchanged")]
    if notable:
        rows = ([a.key, a.checksum, a.action] for a in notable)
        console.print(render.table("conflicts", "key", "candidate set", "action", rows=rows))
    if report.run_id is None:
        console.print("nothing changed")
    else:
        console.print(f"logged as run {report.run_id}, {report.verdicts} verdicts written")
    if report.origin_device is not None:
        console.print(f"entries kept beside local ones are under device {report.origin_device}")


def _refuse_the_cache_itself(target: Path, db: Path) -> None:
    """Refuse an output that is the cache's own database, -wal or -shm: replacing it with the
    export would destroy the cache it is read from."""
    import os

    from tunecache.errors import BadOutputError

    for name in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        with contextlib.suppress(OSError):
            if os.path.samefile(target, name):
                raise BadOutputError(f"refusing to write {target}: it is the cache's own {name}")


def cmd_import(args: argparse.Namespace) -> int:
    """Import an export file, all or nothing; a file from another device only with
    --allow-other-device, its entries then unvalidated."""
    from tunecache import exchange

    with (
        _importing() as workers,
        _input(args.file) as stream,
        open_cache(args) as cache,
        render.progress(args) as progress,
    ):
        report = exchange.import_cache(
            cache,
            stream,
            **option_values(args, EXCHANGE),
            # A file by its absolute path, as merge names it; standard input by the export's own
            # time, so two different exports piped in never share an origin.
            origin=None if args.file == "-" else str(Path(args.file).absolute()),
            progress=progress,
            workers=workers,
        )
    render.emit(args, report, _print_import)
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
    settings = option_values(args, EXCHANGE)
    with (
        _importing() as workers,
        open_cache(args) as cache,
        render.progress(args) as progress,
    ):
        settings.update(progress=progress, workers=workers)
        if is_database:
            with exchange.open_source(source, cache.device) as other:
                report = exchange.merge(cache, other, **settings)
        else:
            with _input(str(source)) as stream:
                report = exchange.merge(cache, stream, **settings, origin=str(source.absolute()))
    render.emit(args, report, _print_import)
    return 0
