"""Merge another cache, or an export, into a cache: importing the other cache's export, read
as it is made (the other cache's items go straight to the reader, never to bytes in memory)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import exc

from tunecache.cache import Cache, Progress
from tunecache.device import Device
from tunecache.errors import BadArgumentError, StoreError, TunecacheError
from tunecache.exchange.export import export_items
from tunecache.exchange.importer import import_cache
from tunecache.exchange.reports import ImportReport
from tunecache.exchange.stream import Export, Reader
from tunecache.store import migrate, queries
from tunecache.store.engine import make_engine, transaction

__all__ = ["merge", "open_source"]


def merge(
    cache: Cache,
    source: Cache | bytes | BinaryIO,
    *,
    policy: str = "local",
    allow_other_device: bool = False,
    origin: str | None = None,
    progress: Progress | None = None,
    workers: int = 0,
) -> ImportReport:
    """Merge another cache, or an export (its bytes, or a binary stream of it), into this
    cache under a conflict policy.

    Merging a cache is importing its export: the same checks, the same all-or-nothing
    transaction, the same report; the export is read item by item as the other cache gives
    it, in one snapshot of it. `workers` is `import_cache`'s.
    """
    settings: dict[str, Any] = {
        "policy": policy,
        "allow_other_device": allow_other_device,
        "kind": "merge",
        "progress": progress,
        "workers": workers,
    }
    if isinstance(source, Cache):
        if source.path.resolve() == cache.path.resolve():
            raise BadArgumentError(f"cannot merge {cache.path} into itself")
        items = export_items(source)
        try:
            reader = Reader(items)
            export = Export(reader.header, reader.entries(records=False))
            return import_cache(cache, export, origin=origin or str(source.path), **settings)
        finally:
            items.close()  # ends the read transaction on the source, if a refusal left it open
    return import_cache(cache, source, origin=origin, **settings)


def open_source(path: str | Path, prefer: Device) -> Cache:
    """Open another cache database read-only, as the source of a merge, without changing it.

    Its entries are those of `prefer` if the file has that device, else of its only device.
    """
    db = Path(path).absolute()
    if not db.is_file():
        raise BadArgumentError(f"no cache database at {db}")
    engine = make_engine(db, readonly=True)
    try:
        try:
            state = migrate.inspect_file(db, 0.0)
            if state.revision != migrate.HEAD:
                raise StoreError(
                    f"{db} is at schema revision {state.revision}, not {migrate.HEAD}: open it "
                    "once with this tunecache (`tunecache where --db PATH`) to upgrade it first"
                )
            with transaction(engine, read=True) as conn:
                rows = queries.devices_with_entries(conn)
        except (exc.DBAPIError, sqlite3.Error) as error:
            raise StoreError(f"cannot read {db}: {getattr(error, 'orig', error)}") from error
        device = _source_device(db, rows, prefer)
    except BaseException:
        engine.dispose()
        raise
    return Cache(db, device, engine, busy_timeout=0.0, outcome=None, readonly_reason="merge source")


def _source_device(db: Path, rows: list[tuple[Any, ...]], prefer: Device) -> Device:
    devices = []
    for cpu, threads, accelerator, client, version in rows:
        try:
            devices.append(Device(cpu, threads, accelerator, client, version))
        except TunecacheError:
            continue  # a row no tunecache wrote; it has no entries to merge from anyway
    if prefer in devices:
        return prefer
    if len(devices) == 1:
        return devices[0]
    found = ", ".join(sorted(d.dirname for d in devices)) or "none"
    raise BadArgumentError(
        f"{db} holds entries of several devices or none ({found}); export the one to "
        "merge with `tunecache export --db PATH` and its device options"
    )
