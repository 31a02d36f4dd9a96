"""The subcommands that move entries between caches: export, import and merge."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from tunecache.cli import render
from tunecache.cli.device import open_cache
from tunecache.cli.exits import UsageError
from tunecache.cli.options import EXCHANGE, option_values
from tunecache.errors import BadArgumentError

__all__ = ["cmd_export", "cmd_import", "cmd_merge"]


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


def cmd_export(args: argparse.Namespace) -> int:
    """Write this device's entries, with their timing records and verdicts, as one CBOR file."""
    from tunecache import exchange

    to_stdout = args.output in (None, "-")
    if to_stdout and sys.stdout.isatty():
        raise UsageError("refusing to write binary CBOR to a terminal; give -o FILE")
    if to_stdout and args.json:
        raise UsageError("--json prints a summary; it needs -o FILE for the export itself")
    with open_cache(args) as cache, render.progress(args) as progress:
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
        render.print_json(summary)
    else:
        render.console().print(f"exported {count} entries ({len(data)} bytes) to {summary['path']}")
    return 0


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


def cmd_import(args: argparse.Namespace) -> int:
    """Import an export file, all or nothing; a file from another device only with
    --allow-other-device, its entries then unvalidated."""
    from tunecache import exchange

    data = _read_input(args.file, exchange.MAX_SIZE)
    with open_cache(args) as cache, render.progress(args) as progress:
        report = exchange.import_cache(
            cache,
            data,
            **option_values(args, EXCHANGE),
            # A file by its absolute path, as merge names it; standard input by the export's own
            # time, so two different exports piped in never share an origin.
            origin=None if args.file == "-" else str(Path(args.file).absolute()),
            progress=progress,
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
    with open_cache(args) as cache, render.progress(args) as progress:
        if is_database:
            with exchange.open_source(source, cache.device) as other:
                report = exchange.merge(cache, other, **settings, progress=progress)
        else:
            data = _read_input(str(source), exchange.MAX_SIZE)
            origin = str(source.absolute())
            report = exchange.merge(cache, data, **settings, origin=origin, progress=progress)
    render.emit(args, report, _print_import)
    return 0
