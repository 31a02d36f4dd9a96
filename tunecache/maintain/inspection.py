"""Everything the cache knows about one entry: why it was chosen, by whom, when."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime

from sqlalchemy import Connection

from tunecache import codec
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError, CodecError, NotFoundError
from tunecache.keys import Key, parse
from tunecache.maintain.listing import EntryInfo, entry_infos
from tunecache.maintain.reports import Report
from tunecache.store import queries

__all__ = ["CandidateInfo", "Inspection", "RunInfo", "Verdict", "inspect"]


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
class Verdict(queries.VerdictFacts, Report):
    """A model's verdict on an entry, with the run that wrote it and when."""

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


def inspect(cache: Cache, target: int | str | Key) -> list[Inspection]:
    """Inspect an entry by id, or every entry of a key (one per candidate set it was tuned
    against); NotFoundError if there is none on this device."""
    if isinstance(target, bool):
        raise BadArgumentError("an entry is named by its id or its key")
    if isinstance(target, int):
        where = queries.EntryFilter(entry_id=target)
        shown = f"entry {target}"
    else:
        text = parse(target).text if isinstance(target, str) else parse(target.text).text
        where = queries.EntryFilter(key=text)
        shown = f"key {text}"
    with cache.transaction() as tx:
        device_id = tx.device_id()
        out = []
        if device_id is not None:
            found = queries.entries(tx.conn, device_id, where)
            infos = entry_infos(tx.conn, device_id, found)
            out = [
                _inspect_one(tx.conn, device_id, stored.set_id, info)
                for stored, info in zip(found, infos, strict=True)
            ]
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


def _inspect_one(conn: Connection, device_id: int, set_id: int, info: EntryInfo) -> Inspection:
    set_names = queries.set_names(conn, [set_id])[set_id]
    blob = queries.record_data(conn, info.id, device_id)
    record: codec.TimingRecord | None = None
    error: str | None = None
    if blob is not None:
        try:
            record = codec.decode(blob)
        except CodecError as e:
            error = str(e)
    timings = {c.name: c for c in record.candidates} if record is not None else {}
    verdicts = tuple(
        Verdict(**v.facts(), run_id=v.run_id, updated_at=v.updated_at)
        for v in queries.verdicts(conn, device_id, entry_id=info.id)
    )
    run = None if info.run_id is None else queries.run(conn, info.run_id)
    return Inspection(
        entry=info,
        candidates=tuple(_candidate(name, timings.get(name), info) for name in set_names),
        settings={} if record is None else dict(record.settings),
        env={} if record is None else dict(record.env),
        has_record=blob is not None,
        record_error=error,
        verdicts=verdicts,
        run=None if run is None else RunInfo(**{f.name: run[f.name] for f in fields(RunInfo)}),
    )
