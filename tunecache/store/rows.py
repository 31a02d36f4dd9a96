"""Every write the package makes to a cache database: rows found or made, inserted, replaced.

Each function takes the Connection of a write transaction the caller holds (`Cache.transaction`
with `write=True`), so several of them commit together or not at all. Nothing here checks its
arguments: the callers (`tunecache.cache`, exchange, maintenance) check everything before the
transaction starts, and the schema's constraints catch what slips through.

These write one row or one entry a call. Many entries at once, with a few statements for the
whole batch, are `tunecache.store.bulk.write_entries` (what `Cache.put` and `Cache.put_many`
use); its row values (`EntryWrite`, `RecordRow`, `VerdictWrite`) and `record_row` live in
`tunecache.store.values`, public for every caller that writes in bulk.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, delete, insert, select, update

from tunecache import codec
from tunecache._version import __version__
from tunecache.device import Device
from tunecache.keys import Key
from tunecache.store import models as tables
from tunecache.store import queries
from tunecache.store.bulk import dims_text, insert_records, record_row
from tunecache.store.models import utcnow

__all__ = [
    "candidate_set_row",
    "clear_evidence",
    "delete_ids",
    "delete_rowids",
    "device_row",
    "dims_text",
    "fail_runs",
    "finish_run",
    "insert_entry",
    "insert_record",
    "insert_row",
    "insert_run",
    "insert_verdict",
    "key_row",
    "model_row",
    "put_verdict",
    "set_run_notes",
    "set_status",
    "update_entry",
]


def insert_row(conn: Connection, table: Table, **values: Any) -> int:
    """Insert one row and return its new integer id."""
    new_id = conn.execute(insert(table).values(**values)).inserted_primary_key
    assert new_id is not None
    return int(new_id[0])


def device_row(conn: Connection, device: Device) -> int:
    """The id of `device`'s row, inserted if it has none."""
    found = queries.device_id(conn, device.fingerprint)
    if found is not None:
        return found
    # The checked fields are the columns of the same names.
    return insert_row(
        conn,
        tables.DEVICES,
        fingerprint=device.fingerprint,
        created_at=utcnow(),
        **device.as_dict(),
    )


def key_row(conn: Connection, key: Key) -> int:
    """The id of `key`'s row, inserted if it has none."""
    text = key.text
    found = conn.execute(select(tables.KEYS.c.id).where(tables.KEYS.c.text == text)).scalar()
    if found is not None:
        return int(found)
    return insert_row(conn, tables.KEYS, text=text, signature=key.signature, dims=dims_text(key))


def candidate_set_row(conn: Connection, signature: str, names: Sequence[str], checksum: str) -> int:
    """The id of the candidate set (`signature`, `checksum`), inserted with its names if new."""
    found = conn.execute(
        select(tables.CANDIDATE_SETS.c.id).where(
            tables.CANDIDATE_SETS.c.signature == signature,
            tables.CANDIDATE_SETS.c.checksum == checksum,
        )
    ).scalar()
    if found is not None:
        return int(found)
    set_id = insert_row(
        conn,
        tables.CANDIDATE_SETS,
        signature=signature,
        checksum=checksum,
        size=len(names),
        created_at=utcnow(),
    )
    conn.execute(
        insert(tables.CANDIDATES),
        [{"set_id": set_id, "position": i, "name": n} for i, n in enumerate(names)],
    )
    return set_id


# --- entries and their evidence ----------------------------------------------------------------


def insert_entry(
    conn: Connection, device: int, key_id: int, set_id: int, values: Mapping[str, Any]
) -> int:
    """Insert an entry for (device, key, candidate set); `values` has its other columns."""
    return insert_row(
        conn, tables.ENTRIES, device_id=device, key_id=key_id, candidate_set_id=set_id, **values
    )


def update_entry(conn: Connection, entry_id: int, values: Mapping[str, Any]) -> None:
    """Overwrite columns of an entry."""
    conn.execute(update(tables.ENTRIES).where(tables.ENTRIES.c.id == entry_id).values(**values))


def clear_evidence(conn: Connection, entry_id: int, *, verdicts: bool) -> None:
    """Delete an entry's timing record, and with `verdicts` every model's verdict on it."""
    conn.execute(delete(tables.TIMING_RECORDS).where(tables.TIMING_RECORDS.c.entry_id == entry_id))
    if verdicts:
        conn.execute(delete(tables.VALIDATIONS).where(tables.VALIDATIONS.c.entry_id == entry_id))


def insert_record(
    conn: Connection,
    entry_id: int,
    record: codec.TimingRecord,
    blob: bytes,
    heuristic: str | None,
    now: datetime,
) -> None:
    """Insert an entry's timing record (`blob` is its CBOR) and a summary row per candidate."""
    insert_records(conn, [(entry_id, record_row(record, blob, heuristic), now)])


def set_status(
    conn: Connection, entry_id: int, device: int | None, status: str, now: datetime
) -> bool:
    """Set the status of the device's entry `entry_id`; False if the device has no such entry."""
    done = conn.execute(
        update(tables.ENTRIES)
        .where(tables.ENTRIES.c.id == entry_id, tables.ENTRIES.c.device_id == device)
        .values(status=status, updated_at=now)
    )
    return bool(done.rowcount)


# --- models and verdicts -----------------------------------------------------------------------


def model_row(conn: Connection, name: str, fingerprint: str) -> int:
    """The id of the model (`name`, `fingerprint`), inserted if new."""
    found = conn.execute(
        select(tables.MODELS.c.id).where(
            tables.MODELS.c.name == name, tables.MODELS.c.fingerprint == fingerprint
        )
    ).scalar()
    if found is not None:
        return int(found)
    return insert_row(conn, tables.MODELS, name=name, fingerprint=fingerprint, created_at=utcnow())


def put_verdict(
    conn: Connection, model_id: int, entry_id: int, values: Mapping[str, Any], now: datetime
) -> None:
    """Set a model's verdict on an entry, replacing its earlier one (`values`: the verdict
    columns, `updated_at` included)."""
    done = conn.execute(
        update(tables.VALIDATIONS)
        .where(tables.VALIDATIONS.c.model_id == model_id, tables.VALIDATIONS.c.entry_id == entry_id)
        .values(**values)
    )
    if done.rowcount == 0:
        insert_verdict(conn, model_id, entry_id, {"created_at": now, **values})


def insert_verdict(
    conn: Connection, model_id: int, entry_id: int, values: Mapping[str, Any]
) -> None:
    """Insert a model's verdict on an entry that has none from it (`values`: every column)."""
    conn.execute(insert(tables.VALIDATIONS).values(model_id=model_id, entry_id=entry_id, **values))


# --- runs --------------------------------------------------------------------------------------


def insert_run(
    conn: Connection, device: int, kind: str, notes: str | None, *, status: str = "running"
) -> int:
    """Log a session of work of this process on the device row `device`; a run already over
    when it is logged (an import done in one transaction) passes its final status."""
    now = utcnow()
    return insert_row(
        conn,
        tables.RUNS,
        kind=kind,
        status=status,
        device_id=device,
        tool_version=__version__,
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python_version=sys.version.split()[0],
        pid=os.getpid(),
        started_at=now,
        finished_at=None if status == "running" else now,
        notes=notes,
    )


def finish_run(conn: Connection, run_id: int, status: str) -> None:
    """Close a run with its final status, now."""
    conn.execute(
        update(tables.RUNS)
        .where(tables.RUNS.c.id == run_id)
        .values(status=status, finished_at=utcnow())
    )


def set_run_notes(conn: Connection, run_id: int, notes: str) -> None:
    """Replace a run's notes."""
    conn.execute(update(tables.RUNS).where(tables.RUNS.c.id == run_id).values(notes=notes))


def fail_runs(conn: Connection, ids: Sequence[int]) -> None:
    """Mark runs failed, now: their process is gone without closing them."""
    for part in queries.chunks(ids):
        conn.execute(
            update(tables.RUNS)
            .where(tables.RUNS.c.id.in_(part))
            .values(status="failed", finished_at=utcnow())
        )


# --- removal -----------------------------------------------------------------------------------


def delete_ids(conn: Connection, table: Table, ids: Sequence[int]) -> None:
    """Delete the rows of `table` with these ids; foreign keys cascade to what hangs on them."""
    for part in queries.chunks(ids):
        conn.execute(delete(table).where(table.c.id.in_(part)))


def delete_rowids(conn: Connection, rows: Sequence[tuple[str, int]]) -> None:
    """Delete rows named by (table, rowid), as SQLite's foreign_key_check reports them."""
    for table, rowid in rows:
        # Table names come from SQLite's own foreign_key_check, not from the user.
        conn.exec_driver_sql(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))
