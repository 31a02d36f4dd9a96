"""Export a device's cache: its entries, with their evidence, read as the export carries them."""

from __future__ import annotations

from sqlalchemy import Connection

from tunecache.cache import Cache, Progress
from tunecache.exchange.wire import ExportedEntry, ExportedVerdict, document
from tunecache.store import queries
from tunecache.store.models import utcnow

__all__ = ["export_cache", "read_entries"]


def read_entries(conn: Connection, device_id: int) -> list[tuple[int, ExportedEntry]]:
    """Every entry of one device, by id, with its candidate set, record and verdicts, in key
    order."""
    found = queries.entries(conn, device_id, order="key", records=True)
    names = queries.set_names(conn, {row.set_id for row in found})
    verdicts: dict[int, list[ExportedVerdict]] = {}
    for v in queries.verdicts(conn, device_id):
        verdicts.setdefault(v.entry_id, []).append(
            ExportedVerdict(**v.facts(), created_at=v.created_at, updated_at=v.updated_at)
        )
    return [
        (
            row.id,
            ExportedEntry(
                **row.values_for(ExportedEntry),
                names=names[row.set_id],
                blob=row.data,
                verdicts=tuple(verdicts.get(row.id, ())),
            ),
        )
        for row in found
    ]


def export_cache(cache: Cache, *, progress: Progress | None = None) -> bytes:
    """Every entry of this cache's device, with its evidence, as one export document.

    Each timing record is decoded on the way out: an export that its own importer would refuse
    is an error now (run `tunecache doctor --repair`), not a surprise on another machine.
    """
    with cache.transaction() as tx:
        device_id = tx.device_id()
        entries = [] if device_id is None else [e for _, e in read_entries(tx.conn, device_id)]
    return document(cache.device, entries, exported_at=utcnow(), progress=progress)
