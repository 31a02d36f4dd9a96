"""Everything the cache knows about one entry: why it was chosen, by whom, when.

Read through stdlib sqlite3 and the read contract (`tunecache.store.reading`), as listing is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING

from tunecache import codec
from tunecache.errors import BadArgumentError, CodecError, NotFoundError
from tunecache.keys import Key, parse
from tunecache.maintain.listing import EntryInfo, entry_infos, reading
from tunecache.maintain.reports import Report
from tunecache.store.reading import CacheReader

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = ["CandidateInfo", "Inspection", "OriginInfo", "RunInfo", "Verdict", "inspect"]


@dataclass(frozen=True, slots=True)
class CandidateInfo(Report):
    """One candidate of an entry's set, with what its timing record says about it."""

    name: str
    #: False when the record has no timing for it (or there is no record)
    measured: bool
    median_s: float | None
    min_s: float | None
    max_s: float | None
    samples: int
    inner_loops: int
    pruned: bool
    error: str | None
    chosen: bool
    heuristic: bool


@dataclass(frozen=True, slots=True)
class Verdict(Report):
    """A model's verdict on an entry: the paired whole-model blocks behind it (`rounds` run,
    `confirmations` won) and its `gain`, the run that wrote it and when."""

    model: str
    fingerprint: str
    verdict: str
    rounds: int
    confirmations: int
    gain: float | None
    run_id: int | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class RunInfo(Report):
    """The session of work that wrote an entry."""

    id: int
    kind: str
    status: str
    hostname: str
    pid: int
    tool_version: str
    started_at: datetime
    finished_at: datetime | None
    notes: str | None


@dataclass(frozen=True, slots=True)
class OriginInfo(Report):
    """Where an entry synced from a fleet store came from: the host that tuned it, the store
    (its URL masked) or host it was synced from, and when."""

    host: str
    source: str
    synced_at: datetime | None


@dataclass(frozen=True, slots=True)
class Inspection(Report):
    """Everything the cache knows about one entry: why it was chosen, by whom, when."""

    entry: EntryInfo
    candidates: tuple[CandidateInfo, ...]
    settings: Mapping[str, codec.Scalar]
    env: Mapping[str, codec.Scalar]
    #: whether the entry has a timing record at all
    has_record: bool
    #: why the record could not be read, or None
    record_error: str | None
    verdicts: tuple[Verdict, ...]
    run: RunInfo | None
    #: where the entry came from, when sync brought it (None: written here)
    origin: OriginInfo | None = None


def inspect(cache: Cache | CacheReader, target: int | str | Key) -> list[Inspection]:
    """Inspect an entry by id, or every entry of a key (one per candidate set it was tuned
    against); NotFoundError if there is none on this device."""
    if isinstance(target, bool):
        raise BadArgumentError("an entry is named by its id or its key")
    if isinstance(target, int):
        where: dict[str, int | str] = {"entry_id": target}
        shown = f"entry {target}"
    else:
        text = parse(target).text if isinstance(target, str) else parse(target.text).text
        where = {"key": text}
        shown = f"key {text}"
    with reading(cache) as reader:
        found = [row for chunk in reader.entries(where) for row in chunk]
        out = [_inspect_one(reader, info) for info in entry_infos(reader, found)]
    if not out:
        raise NotFoundError(f"no entry for {shown} on this device")
    return out


def _candidate(name: str, timing: codec.CandidateTiming | None, info: EntryInfo) -> CandidateInfo:
    measured = timing is not None
    return CandidateInfo(
        name=name,
        measured=measured,
        median_s=timing.median if timing is not None else None,
        min_s=timing.min if timing is not None else None,
        max_s=timing.max if timing is not None else None,
        samples=len(timing.samples) if timing is not None else 0,
        inner_loops=timing.inner_loops if timing is not None else 1,
        pruned=timing.pruned if timing is not None else False,
        error=timing.error if timing is not None else None,
        chosen=name == info.choice,
        heuristic=name == info.heuristic,
    )


def _inspect_one(reader: CacheReader, info: EntryInfo) -> Inspection:
    set_names = reader.candidates(info.signature, info.checksum)
    blob = reader.record(info.id)
    record: codec.TimingRecord | None = None
    error: str | None = None
    if blob is not None:
        try:
            record = codec.decode(blob)
        except CodecError as e:
            error = str(e)
    timings = {c.name: c for c in record.candidates} if record is not None else {}
    # VERDICT_COLUMNS but the entry id and creation time are Verdict's fields, in order.
    verdicts = tuple(Verdict(*row[1:9]) for row in reader.verdicts([info.id]))
    run = None if info.run_id is None else reader.run(info.run_id)
    origin = reader.origin(info.id)
    return Inspection(
        entry=info,
        candidates=tuple(_candidate(name, timings.get(name), info) for name in set_names),
        settings={} if record is None else dict(record.settings),
        env={} if record is None else dict(record.env),
        has_record=blob is not None,
        record_error=error,
        verdicts=verdicts,
        run=None if run is None else RunInfo(**{f.name: run[f.name] for f in fields(RunInfo)}),
        origin=None if origin is None else OriginInfo(*origin),
    )
