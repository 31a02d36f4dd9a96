"""What a cache holds for its device: decisions as `tunecache list` shows them, and models.

Read through stdlib sqlite3 and the read contract (`tunecache.store.reading`), never SQLAlchemy:
`tunecache list` starts about as fast as Python does, and streams its rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator, Mapping, Sequence
from types import MappingProxyType

from tunecache.errors import BadArgumentError
from tunecache.frozen import Frozen, fill
from tunecache.maintain.reports import Report, aware
from tunecache.store.reading import ENTRY_STATUSES, FILTERS, CacheReader

# Not `typing` at run time: `tunecache list` starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any

    from tunecache.cache import Cache

    #: an entry as `iter_rows` gives it: its row of `reading.ENTRY_COLUMNS`, the models that
    #: validated it and those that masked it
    ListedEntry = tuple[tuple[Any, ...], tuple[str, ...], tuple[str, ...]]

__all__ = [
    "EntryInfo",
    "ModelSummary",
    "checked",
    "entry_infos",
    "iter_entries",
    "iter_rows",
    "list_entries",
    "models",
    "reading",
]


class EntryInfo(Frozen, Report):
    """One decision as `tunecache list` shows it."""

    # Frozen, not a frozen dataclass: `tunecache list` starts without importing dataclasses.
    __match_args__ = (
        "id", "key", "signature", "dims", "choice", "heuristic", "speedup", "status",
        "checksum", "validated_by", "masked_by", "run_id", "created_at", "updated_at",
    )  # fmt: skip
    __slots__ = __match_args__
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

    def __init__(
        self,
        id: int,
        key: str,
        signature: str,
        dims: str,
        choice: str,
        heuristic: str | None,
        speedup: float | None,
        status: str,
        checksum: str,
        validated_by: tuple[str, ...],
        masked_by: tuple[str, ...],
        run_id: int | None,
        created_at: datetime,
        updated_at: datetime,
    ) -> None:
        fill(
            self, id, key, signature, dims, choice, heuristic, speedup, status, checksum,
            validated_by, masked_by, run_id, created_at, updated_at,
        )  # fmt: skip

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
    with contextlib.closing(CacheReader.of(source)) as reader, reader.snapshot():
        yield reader


def _with_verdicts(reader: CacheReader, found: Sequence[tuple[Any, ...]]) -> list[ListedEntry]:
    """Entries (rows of `reading.ENTRY_COLUMNS`), each with the models that validated it and
    those that masked it."""
    names: dict[int, dict[str, list[str]]] = {}
    for entry_id, model, verdict in reader.verdict_names([row[0] for row in found]):
        by = names.get(entry_id)
        if by is None:
            by = names[entry_id] = {"validated": [], "masked": []}
        if model not in by[verdict]:
            by[verdict].append(model)
    out: list[ListedEntry] = []
    for row in found:
        by = names.get(row[0])
        if by is None:
            out.append((row, (), ()))
        else:
            out.append((row, tuple(by["validated"]), tuple(by["masked"])))
    return out


def _info(row: tuple[Any, ...], validated: tuple[str, ...], masked: tuple[str, ...]) -> EntryInfo:
    # ENTRY_COLUMNS are EntryInfo's fields but the verdicts', which come after checksum.
    # (mypy counts no arguments in a row of unknown length, then two too many after it.)
    return EntryInfo(*row[:9], validated, masked, *row[9:])  # type: ignore[call-arg]


def entry_infos(reader: CacheReader, found: Sequence[tuple[Any, ...]]) -> list[EntryInfo]:
    """Entries (rows of `reading.ENTRY_COLUMNS`) as `list` shows them, with the models that
    validated or masked each."""
    return [_info(*entry) for entry in _with_verdicts(reader, found)]


def checked(where: Mapping[str, Any]) -> dict[str, Any]:
    """Filters of a listing (`tunecache.store.reading.FILTERS`, by name), refused with a
    BadArgumentError where a status is not one the store knows or a time has no zone."""
    status = where.get("status")
    if status is not None and status not in ENTRY_STATUSES:
        raise BadArgumentError(f"status must be one of {ENTRY_STATUSES}, got {status!r}")
    for name in ("older_than", "newer_than"):
        aware(where.get(name), name)
    return dict(where)


def iter_rows(
    source: Cache | CacheReader,
    where: Mapping[str, Any] = MappingProxyType({}),
    *,
    limit: int | None = None,
) -> Generator[ListedEntry, None, None]:
    """`iter_entries`'s entries as plain data: each its row of `reading.ENTRY_COLUMNS`, the
    models that validated it and those that masked it. What a listing of any size prints,
    without building a value for each row it only shows."""
    if limit is not None and (isinstance(limit, bool) or limit < 0):
        raise BadArgumentError(f"limit must be a non-negative integer, got {limit!r}")
    chosen = checked(where)
    with reading(source) as reader:
        for chunk in reader.entries(chosen, limit=limit):
            yield from _with_verdicts(reader, chunk)


def iter_entries(
    source: Cache | CacheReader,
    where: Mapping[str, Any] = MappingProxyType({}),
    *,
    limit: int | None = None,
) -> Generator[EntryInfo, None, None]:
    """The entries the filters `where` select (`list_entries`'s, by name), most recently
    updated first, as they are read: a few hundred at a time sit in memory, however many the
    device has.

    Everything comes from one read transaction, which is held until the generator is exhausted
    or closed (`contextlib.closing` closes one left unfinished).
    """
    with contextlib.closing(iter_rows(source, where, limit=limit)) as rows:
        for row, validated, masked in rows:
            yield _info(row, validated, masked)


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
    # The filters are the parameters of the same names.
    where = {name: value for name, value in locals().items() if name in FILTERS}
    found = iter_entries(cache, where, limit=limit)
    return list(found)


class ModelSummary(Frozen, Report):
    """A model seen by this cache, with its verdicts on this device's entries."""

    __match_args__ = ("name", "fingerprint", "validated", "masked", "first_seen", "last_verdict")
    __slots__ = __match_args__
    name: str
    fingerprint: str
    validated: int
    masked: int
    first_seen: datetime
    last_verdict: datetime | None

    def __init__(
        self,
        name: str,
        fingerprint: str,
        validated: int,
        masked: int,
        first_seen: datetime,
        last_verdict: datetime | None,
    ) -> None:
        fill(self, name, fingerprint, validated, masked, first_seen, last_verdict)


def models(cache: Cache | CacheReader) -> list[ModelSummary]:
    """Every model in the database, with how many of this device's entries each validated
    or masked, by name."""
    with reading(cache) as reader:
        # MODEL_COLUMNS are ModelSummary's fields, in order.
        return [ModelSummary(*row) for row in reader.models()]
