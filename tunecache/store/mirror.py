"""What the resolver reads of one device's rows in a fleet store, copied into a SQLite file.

The resolver reads SQLite files only (`tunecache.resolve.reader`), so a session that tunes into
a fleet store on PostgreSQL runs its model with tables over a mirror: a SQLite cache holding
the device's row, its entries (with their keys, candidate sets and candidates) and the verdicts
on them (with their models), each row with the id it has in the fleet store, so that an entry
id names the same entry in both. `copy_device` makes the mirror again, whole, in the mirror's
write transaction from a read of the fleet store; runs and timing records are left out (no
table reads them), and the entries' and verdicts' run ids with them. Nothing here writes back:
this is a session's view of the fleet store, not a sync.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Select, delete, insert, select

from tunecache.store.models import (
    CANDIDATE_SETS,
    CANDIDATES,
    DEVICES,
    ENTRIES,
    KEYS,
    MODELS,
    VALIDATIONS,
)

__all__ = ["TABLES", "copy_device"]

#: the tables a mirror holds, each before the tables that refer to it
TABLES = (DEVICES, KEYS, CANDIDATE_SETS, CANDIDATES, MODELS, ENTRIES, VALIDATIONS)


def copy_device(source: Connection, target: Connection, fingerprint: str) -> int:
    """Replace every row of TABLES in `target` (a mirror's write transaction) by `source`'s
    rows of the device `fingerprint`; how many entries it copied."""
    for table in reversed(TABLES):
        target.execute(delete(table))
    device = select(DEVICES.c.id).where(DEVICES.c.fingerprint == fingerprint).scalar_subquery()
    entries = select(ENTRIES.c.id).where(ENTRIES.c.device_id == device)
    keys = select(ENTRIES.c.key_id).where(ENTRIES.c.device_id == device)
    sets = select(ENTRIES.c.candidate_set_id).where(ENTRIES.c.device_id == device)
    models = select(VALIDATIONS.c.model_id).where(VALIDATIONS.c.entry_id.in_(entries))
    queries: list[tuple[Any, Select[Any]]] = [
        (DEVICES, select(DEVICES).where(DEVICES.c.id == device)),
        (KEYS, select(KEYS).where(KEYS.c.id.in_(keys))),
        (CANDIDATE_SETS, select(CANDIDATE_SETS).where(CANDIDATE_SETS.c.id.in_(sets))),
        (CANDIDATES, select(CANDIDATES).where(CANDIDATES.c.set_id.in_(sets))),
        (MODELS, select(MODELS).where(MODELS.c.id.in_(models))),
        (ENTRIES, select(ENTRIES).where(ENTRIES.c.device_id == device)),
        (VALIDATIONS, select(VALIDATIONS).where(VALIDATIONS.c.entry_id.in_(entries))),
    ]
    copied = 0
    for table, query in queries:
        rows = [dict(row) for row in source.execute(query).mappings()]
        if "run_id" in table.c:
            for row in rows:
                row["run_id"] = None  # the runs stay in the fleet store
        if rows:
            target.execute(insert(table), rows)
        if table is ENTRIES:
            copied = len(rows)
    return copied
