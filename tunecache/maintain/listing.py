"""What a cache holds for its device: decisions as `tunecache list` shows them, and models."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from tunecache.cache import Cache
from tunecache.errors import BadArgumentError
from tunecache.maintain.reports import Report, aware
from tunecache.store import queries
from tunecache.store.models import ENTRY_STATUSES

__all__ = ["EntryInfo", "ModelSummary", "entry_infos", "list_entries", "models"]


@dataclass(frozen=True, slots=True)
class EntryInfo(Report):
    """One decision as `tunecache list` shows it."""

    id: int
    key: str
    signature: str
    dims: str
    choice: str
    heuristic: str | None
    speedup: float | None
    status: str
    checksum: str
    validated_by: tuple[str, ...]
    masked_by: tuple[str, ...]
    run_id: int | None
    created_at: datetime
    updated_at: datetime


def entry_infos(
    conn: Connection, device_id: int, found: Sequence[queries.StoredEntry]
) -> list[EntryInfo]:
    """Entries of a device as `list` shows them, with the models that validated or masked
    each."""
    names: dict[int, dict[str, list[str]]] = {}
    for v in queries.verdicts(conn, device_id) if found else ():
        by = names.setdefault(v.entry_id, {"validated": [], "masked": []})
        if v.model not in by[v.verdict]:
            by[v.verdict].append(v.model)
    empty: dict[str, list[str]] = {"validated": [], "masked": []}
    return [
        EntryInfo(
            **row.values_for(EntryInfo),
            validated_by=tuple(names.get(row.id, empty)["validated"]),
            masked_by=tuple(names.get(row.id, empty)["masked"]),
        )
        for row in found
    ]


def list_entries(
    cache: Cache,
    *,
    signature: str | None = None,
    op: str | None = None,
    model: str | None = None,
    status: str | None = None,
    older_than: datetime | None = None,
    newer_than: datetime | None = None,
    limit: int | None = None,
) -> list[EntryInfo]:
    """This device's entries, most recently updated first, filtered as asked.

    `op` is a key's first token (`matmul` for `matmul_F32_m288_k96_n64`); `model` keeps entries
    that model has a verdict on, either way; the ages compare the entry's last update.
    """
    if status is not None and status not in ENTRY_STATUSES:
        raise BadArgumentError(f"status must be one of {ENTRY_STATUSES}, got {status!r}")
    if limit is not None and (isinstance(limit, bool) or limit < 0):
        raise BadArgumentError(f"limit must be a non-negative integer, got {limit!r}")
    where = queries.EntryFilter(
        signature=signature,
        op=op,
        model=model,
        status=status,
        older_than=aware(older_than, "older_than"),
        newer_than=aware(newer_than, "newer_than"),
    )
    with cache.transaction() as tx:
        device_id = tx.device_id()
        if device_id is None:
            return []
        return entry_infos(
            tx.conn, device_id, queries.entries(tx.conn, device_id, where, limit=limit)
        )


@dataclass(frozen=True, slots=True)
class ModelSummary(Report):
    """A model seen by this cache, with its verdicts on this device's entries."""

    name: str
    fingerprint: str
    validated: int
    masked: int
    first_seen: datetime
    last_verdict: datetime | None


def models(cache: Cache) -> list[ModelSummary]:
    """Every model in the database, with how many of this device's entries each validated
    or masked, by name."""
    counts: dict[int, dict[str, int]] = {}
    last: dict[int, datetime] = {}
    with cache.transaction() as tx:
        for v in queries.verdicts(tx.conn, tx.device_id()):
            by = counts.setdefault(v.model_id, {"validated": 0, "masked": 0})
            by[v.verdict] += 1
            if v.model_id not in last or v.updated_at > last[v.model_id]:
                last[v.model_id] = v.updated_at
        found: Sequence[queries.StoredModel] = queries.models(tx.conn)
    return [
        ModelSummary(
            name=row.name,
            fingerprint=row.fingerprint,
            validated=counts.get(row.id, {}).get("validated", 0),
            masked=counts.get(row.id, {}).get("masked", 0),
            first_seen=row.created_at,
            last_verdict=last.get(row.id),
        )
        for row in found
    ]
