"""What a cache holds for its device: decisions as `tunecache list` shows them, and models.

Read through stdlib sqlite3 and the read contract (`tunecache.store.reading`), never SQLAlchemy:
`tunecache list` starts about as fast as Python does, and streams its rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tunecache.errors import BadArgumentError
from tunecache.maintain.reports import Report, aware
from tunecache.store.reading import ENTRY_STATUSES, CacheReader, EntryQuery, EntryView

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = [
    "EntryInfo",
    "ModelSummary",
    "entry_infos",
    "entry_query",
    "iter_entries",
    "list_entries",
    "models",
    "reading",
]


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

    def as_dict(self) -> dict[str, Any]:
        """This entry as `list --json` prints it (the fields as `Report.as_dict` gives them,
        written out: a listing of a million entries spends its time here)."""
        return {
            "id": self.id,
            "key": self.key,
            "signature": self.signature,
            "dims": self.dims,
            "choice": self.choice,
            "heuristic": self.heuristic,
            "speedup": self.speedup,
            "status": self.status,
            "checksum": self.checksum,
            "validated_by": list(self.validated_by),
            "masked_by": list(self.masked_by),
            "run_id": self.run_id,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@contextlib.contextmanager
def reading(source: Cache | CacheReader) -> Iterator[CacheReader]:
    """A reader of `source`, in one read transaction: the reader itself, or one opened on the
    cache's file and closed afterwards."""
    if isinstance(source, CacheReader):
        with source.snapshot():
            yield source
        return
    reader = CacheReader.of(source)
    try:
        with reader.snapshot():
            yield reader
    finally:
        reader.close()


def entry_infos(reader: CacheReader, found: Sequence[EntryView]) -> list[EntryInfo]:
    """Entries as `list` shows them, with the models that validated or masked each."""
    names: dict[int, dict[str, list[str]]] = {}
    for entry_id, model, verdict in reader.verdict_names([row.id for row in found]):
        by = names.setdefault(entry_id, {"validated": [], "masked": []})
        if model not in by[verdict]:
            by[verdict].append(model)
    empty: dict[str, list[str]] = {"validated": [], "masked": []}
    return [
        EntryInfo(
            id=row.id,
            key=row.key,
            signature=row.signature,
            dims=row.dims,
            choice=row.choice,
            heuristic=row.heuristic,
            speedup=row.speedup,
            status=row.status,
            checksum=row.checksum,
            validated_by=tuple(names.get(row.id, empty)["validated"]),
            masked_by=tuple(names.get(row.id, empty)["masked"]),
            run_id=row.run_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )
        for row in found
    ]


def entry_query(
    *,
    signature: str | None = None,
    op: str | None = None,
    model: str | None = None,
    status: str | None = None,
    older_than: datetime | None = None,
    newer_than: datetime | None = None,
) -> EntryQuery:
    """The selection `list_entries` makes with these filters, each checked (BadArgumentError)."""
    if status is not None and status not in ENTRY_STATUSES:
        raise BadArgumentError(f"status must be one of {ENTRY_STATUSES}, got {status!r}")
    return EntryQuery(
        signature=signature,
        op=op,
        model=model,
        status=status,
        older_than=aware(older_than, "older_than"),
        newer_than=aware(newer_than, "newer_than"),
    )


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or limit < 0):
        raise BadArgumentError(f"limit must be a non-negative integer, got {limit!r}")


def iter_entries(
    source: Cache | CacheReader, query: EntryQuery, *, limit: int | None = None
) -> Generator[EntryInfo, None, None]:
    """The entries `query` selects (see `entry_query`), most recently updated first, as they
    are read: a few hundred at a time sit in memory, however many the device has.

    Everything comes from one read transaction, which is held until the generator is exhausted
    or closed (`contextlib.closing` closes one left unfinished).
    """
    _check_limit(limit)
    with reading(source) as reader:
        for chunk in reader.entries(query, limit=limit):
            yield from entry_infos(reader, chunk)


def list_entries(
    cache: Cache | CacheReader,
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
    `iter_entries` gives the same entries one at a time.
    """
    query = entry_query(
        signature=signature,
        op=op,
        model=model,
        status=status,
        older_than=older_than,
        newer_than=newer_than,
    )
    _check_limit(limit)
    return list(iter_entries(cache, query, limit=limit))


@dataclass(frozen=True, slots=True)
class ModelSummary(Report):
    """A model seen by this cache, with its verdicts on this device's entries."""

    name: str
    fingerprint: str
    validated: int
    masked: int
    first_seen: datetime
    last_verdict: datetime | None


def models(cache: Cache | CacheReader) -> list[ModelSummary]:
    """Every model in the database, with how many of this device's entries each validated
    or masked, by name."""
    with reading(cache) as reader:
        found: Iterable[Any] = reader.models()
    return [
        ModelSummary(
            name=row.name,
            fingerprint=row.fingerprint,
            validated=row.validated,
            masked=row.masked,
            first_seen=row.created_at,
            last_verdict=row.last_verdict,
        )
        for row in found
    ]
