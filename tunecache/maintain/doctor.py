"""Maintenance of a cache: list and inspect decisions, summarise models, prune, doctor, SQL.

Every maintenance subcommand of `tunecache` is one function here; the command line only parses
arguments and prints what these return. Everything is scoped to the cache's own device except
`doctor`, which checks the whole database file, and version pruning, which works on folders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Connection, Table, delete, exists, func, or_, select, update

from tunecache import codec, paths
from tunecache.cache import Cache
from tunecache.candidates import candidate_names, checksum
from tunecache.device import Device
from tunecache.errors import BadArgumentError, CodecError, NotFoundError, TunecacheError
from tunecache.keys import Key, parse
from tunecache.store import migrate
from tunecache.store.engine import busy_errors
from tunecache.store.models import (
    CANDIDATE_SETS,
    CANDIDATES,
    DEVICES,
    ENTRIES,
    ENTRY_STATUSES,
    KEYS,
    MODELS,
    RUNS,
    TIMING_RECORDS,
    VALIDATIONS,
    utcnow,
)
from tunecache.store.quarantine import QUARANTINE_DIR

__all__ = [
    "EXAMPLE_QUERIES",
    "PRUNE_KINDS",
    "VIEWS",
    "WAL_WARN_BYTES",
    "CandidateInfo",
    "DoctorReport",
    "EntryInfo",
    "Inspection",
    "ModelSummary",
    "NotFoundError",
    "Problem",
    "PruneReport",
    "PrunedEntry",
    "PrunedVersion",
    "QueryResult",
    "RunInfo",
    "Verdict",
    "doctor",
    "inspect",
    "list_entries",
    "models",
    "prune",
    "prune_versions",
    "run_query",
]

# Short names for the Core tables these statements are built from.
_S, _C, _D, _E, _K, _M, _R, _T, _V = (
    CANDIDATE_SETS,
    CANDIDATES,
    DEVICES,
    ENTRIES,
    KEYS,
    MODELS,
    RUNS,
    TIMING_RECORDS,
    VALIDATIONS,
)

#: what `prune` can remove, as the command line names them
PRUNE_KINDS = ("versions", "stale", "unvalidated", "older", "masked")
#: a WAL file larger than this is worth a checkpoint (doctor reports it)
WAL_WARN_BYTES = 64 * 1024 * 1024
#: the documented views a person may query; migrations keep their columns
VIEWS = ("decisions", "read_entries_v1", "read_verdicts_v1", "read_candidates_v1")
#: a few queries to start from, each against the documented views
EXAMPLE_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "every decision, best speedup first",
        "SELECT key, choice, heuristic, speedup, status, validated_by, masked_by "
        "FROM decisions ORDER BY speedup DESC",
    ),
    (
        "decisions no model has validated yet",
        "SELECT key, choice, status, updated_at FROM decisions WHERE validated_by IS NULL",
    ),
    (
        "how often the tuned choice differs from the heuristic, per signature",
        "SELECT signature, count(*) AS entries, sum(choice <> heuristic) AS overridden, "
        "round(avg(speedup), 3) AS mean_speedup FROM decisions GROUP BY signature",
    ),
    (
        "every model's verdicts, with their whole-model gains",
        "SELECT e.key, v.model, v.verdict, v.gain FROM read_verdicts_v1 v "
        "JOIN read_entries_v1 e ON e.entry_id = v.entry_id ORDER BY v.model, e.key",
    ),
    (
        "the candidate lists entries were tuned against",
        "SELECT signature, checksum, group_concat(name, ' ') AS candidates FROM "
        "(SELECT * FROM read_candidates_v1 ORDER BY signature, checksum, position) "
        "GROUP BY signature, checksum",
    ),
)

#: a progress callback: (what is being done, how much is done, out of how much)
Progress = Callable[[str, int, int], None]

_CHUNK = 500


def _jsonable(value: Any) -> Any:
    """A report value as JSON data: times in ISO 8601, tuples as lists, bytes as hex."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


class _Report:
    """A value the command line prints: `as_dict` is its `--json` form, field by field."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        """This value as JSON-ready data, one key per field."""
        return cast(dict[str, Any], _jsonable(self))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _aware(value: datetime | None, what: str) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise BadArgumentError(f"{what} must be a timezone-aware datetime")
    return value


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    # SQLite caps the number of bound parameters in one statement.
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


# --- listing ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryInfo(_Report):
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


def _verdict_names(conn: Connection, device_id: int) -> dict[int, dict[str, list[str]]]:
    out: dict[int, dict[str, list[str]]] = {}
    for row in conn.execute(
        select(_V.c.entry_id, _V.c.verdict, _M.c.name)
        .join(_M, _M.c.id == _V.c.model_id)
        .join(_E, _E.c.id == _V.c.entry_id)
        .where(_E.c.device_id == device_id)
        .order_by(_M.c.name)
    ):
        by = out.setdefault(row.entry_id, {"validated": [], "masked": []})
        if row.name not in by[row.verdict]:
            by[row.verdict].append(row.name)
    return out


def _infos(
    conn: Connection, device_id: int, *where: Any, limit: int | None = None
) -> list[EntryInfo]:
    query = (
        select(
            _E.c.id,
            _K.c.text,
            _K.c.signature,
            _K.c.dims,
            _E.c.choice,
            _E.c.heuristic,
            _E.c.speedup,
            _E.c.status,
            _S.c.checksum,
            _E.c.run_id,
            _E.c.created_at,
            _E.c.updated_at,
        )
        .join(_K, _K.c.id == _E.c.key_id)
        .join(_S, _S.c.id == _E.c.candidate_set_id)
        .where(_E.c.device_id == device_id, *where)
        .order_by(_E.c.updated_at.desc(), _E.c.id.desc())
    )
    if limit is not None:
        query = query.limit(limit)
    rows = conn.execute(query).all()
    verdicts = _verdict_names(conn, device_id) if rows else {}
    empty: dict[str, list[str]] = {"validated": [], "masked": []}
    return [
        EntryInfo(
            id=row.id,
            key=row.text,
            signature=row.signature,
            dims=row.dims,
            choice=row.choice,
            heuristic=row.heuristic,
            speedup=row.speedup,
            status=row.status,
            checksum=row.checksum,
            validated_by=tuple(verdicts.get(row.id, empty)["validated"]),
            masked_by=tuple(verdicts.get(row.id, empty)["masked"]),
            run_id=row.run_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )
        for row in rows
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
    where: list[Any] = []
    if signature is not None:
        where.append(_K.c.signature == signature)
    if op is not None:
        # Tokens are joined by "_", which LIKE reads as a wildcard: autoescape keeps it literal.
        where.append(
            or_(_K.c.signature == op, _K.c.signature.startswith(op + "_", autoescape=True))
        )
    if model is not None:
        where.append(
            exists()
            .where(_V.c.entry_id == _E.c.id, _M.c.id == _V.c.model_id, _M.c.name == model)
            .correlate(_E)
        )
    if status is not None:
        where.append(_E.c.status == status)
    if _aware(older_than, "older_than") is not None:
        where.append(_E.c.updated_at < older_than)
    if _aware(newer_than, "newer_than") is not None:
        where.append(_E.c.updated_at >= newer_than)
    with cache._read() as conn:
        device_id = cache._find_device_id(conn)
        if device_id is None:
            return []
        return _infos(conn, device_id, *where, limit=limit)


# --- inspect ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CandidateInfo(_Report):
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
class Verdict(_Report):
    """A model's verdict on an entry."""

    model: str
    fingerprint: str
    verdict: str
    gain: float | None
    rounds: int
    confirmations: int
    run_id: int | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class RunInfo(_Report):
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
class Inspection(_Report):
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
        where: Any = _E.c.id == target
        shown = f"entry {target}"
    else:
        text = parse(target).text if isinstance(target, str) else parse(target.text).text
        where = _K.c.text == text
        shown = f"key {text}"
    with cache._read() as conn:
        device_id = cache._find_device_id(conn)
        infos = [] if device_id is None else _infos(conn, device_id, where)
        out = [_inspect_one(conn, info) for info in infos]
    if not out:
        raise NotFoundError(f"no entry for {shown} on this device")
    return out


def _inspect_one(conn: Connection, info: EntryInfo) -> Inspection:
    set_id = conn.execute(select(_E.c.candidate_set_id).where(_E.c.id == info.id)).scalar_one()
    set_names = Cache._set_names(conn, [set_id])[set_id]
    blob = conn.execute(select(_T.c.data).where(_T.c.entry_id == info.id)).scalar()
    record: codec.TimingRecord | None = None
    error: str | None = None
    if blob is not None:
        try:
            record = codec.decode(bytes(blob))
        except CodecError as e:
            error = str(e)
    timings = {c.name: c for c in record.candidates} if record is not None else {}
    candidates = []
    for name in set_names:
        t = timings.get(name)
        candidates.append(
            CandidateInfo(
                name=name,
                measured=t is not None,
                median_s=None if t is None else t.median,
                min_s=None if t is None else t.min,
                max_s=None if t is None else t.max,
                samples=0 if t is None else len(t.samples),
                inner_loops=1 if t is None else t.inner_loops,
                pruned=False if t is None else t.pruned,
                error=None if t is None else t.error,
                chosen=name == info.choice,
                heuristic=name == info.heuristic,
            )
        )
    verdicts = tuple(
        Verdict(
            row.name,
            row.fingerprint,
            row.verdict,
            row.gain,
            row.rounds,
            row.confirmations,
            row.run_id,
            row.updated_at,
        )
        for row in conn.execute(
            select(
                _M.c.name,
                _M.c.fingerprint,
                _V.c.verdict,
                _V.c.gain,
                _V.c.rounds,
                _V.c.confirmations,
                _V.c.run_id,
                _V.c.updated_at,
            )
            .join(_M, _M.c.id == _V.c.model_id)
            .where(_V.c.entry_id == info.id)
            .order_by(_M.c.name, _M.c.fingerprint)
        )
    )
    run = None
    if info.run_id is not None:
        row = conn.execute(select(_R).where(_R.c.id == info.run_id)).first()
        if row is not None:
            run = RunInfo(
                row.id,
                row.kind,
                row.status,
                row.hostname,
                row.pid,
                row.tool_version,
                row.started_at,
                row.finished_at,
                row.notes,
            )
    return Inspection(
        entry=info,
        candidates=tuple(candidates),
        settings={} if record is None else dict(record.settings),
        env={} if record is None else dict(record.env),
        has_record=blob is not None,
        record_error=error,
        verdicts=verdicts,
        run=run,
    )


# --- models ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelSummary(_Report):
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
    with cache._read() as conn:
        device_id = cache._find_device_id(conn)
        counts: dict[int, dict[str, int]] = {}
        last: dict[int, datetime] = {}
        if device_id is not None:
            for row in conn.execute(
                select(_V.c.model_id, _V.c.verdict, _V.c.updated_at)
                .join(_E, _E.c.id == _V.c.entry_id)
                .where(_E.c.device_id == device_id)
            ):
                by = counts.setdefault(row.model_id, {"validated": 0, "masked": 0})
                by[row.verdict] += 1
                if row.model_id not in last or row.updated_at > last[row.model_id]:
                    last[row.model_id] = row.updated_at
        rows = conn.execute(select(_M).order_by(_M.c.name, _M.c.fingerprint)).all()
    return [
        ModelSummary(
            name=row.name,
            fingerprint=row.fingerprint,
            validated=counts.get(row.id, {}).get("validated", 0),
            masked=counts.get(row.id, {}).get("masked", 0),
            first_seen=row.created_at,
            last_verdict=last.get(row.id),
        )
        for row in rows
    ]


# --- prune: entries --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrunedEntry(_Report):
    """An entry prune removed (or, in a dry run, would remove), and why."""

    id: int
    key: str
    checksum: str
    choice: str
    status: str
    updated_at: datetime
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PrunedVersion(_Report):
    """A version folder prune removed, would remove, or had to leave."""

    version: str
    path: str
    bytes: int
    removed: bool
    #: why it was left, or None when it was (or, in a dry run, would be) removed
    skipped: str | None


@dataclass(frozen=True, slots=True)
class PruneReport(_Report):
    """What prune removed, or in a dry run would remove."""

    dry_run: bool
    entries: tuple[PrunedEntry, ...] = ()
    versions: tuple[PrunedVersion, ...] = ()
    #: rows left without entries and removed with them: keys and candidate sets
    orphans: Mapping[str, int] = field(default_factory=dict)
    #: entries that matched but were spared because a run still writing them is open
    spared_active: int = 0


def _current_sets(
    conn: Connection, device_id: int, current: Mapping[str, Sequence[str]] | None
) -> dict[str, str]:
    """The current candidate-set checksum of each signature judged.

    With `current` (signature -> the client's list now), exactly those signatures; without, the
    set each signature of this device was most recently tuned against.
    """
    if current is not None:
        return {sig: checksum(names) for sig, names in current.items()}
    latest: dict[str, tuple[datetime, int, str]] = {}
    for row in conn.execute(
        select(_S.c.signature, _S.c.checksum, _E.c.updated_at, _E.c.id)
        .join(_E, _E.c.candidate_set_id == _S.c.id)
        .where(_E.c.device_id == device_id)
    ):
        seen = (row.updated_at, row.id, row.checksum)
        if row.signature not in latest or seen > latest[row.signature]:
            latest[row.signature] = seen
    return {sig: value[2] for sig, value in latest.items()}


def _select_prunable(
    conn: Connection,
    device_id: int,
    *,
    stale: bool,
    current: Mapping[str, Sequence[str]] | None,
    unvalidated: bool,
    older_than: datetime | None,
    masked: bool,
) -> tuple[list[PrunedEntry], int]:
    """The entries each chosen kind would remove, with their reasons, and how many were spared."""
    verdicts: dict[int, list[str]] = {}
    for entry_id, verdict in conn.execute(
        select(_V.c.entry_id, _V.c.verdict)
        .join(_E, _E.c.id == _V.c.entry_id)
        .where(_E.c.device_id == device_id)
    ):
        verdicts.setdefault(entry_id, []).append(verdict)
    # An entry still being tuned or validated is never pruned under the writer's feet.
    active = {
        row[0]
        for row in conn.execute(
            select(_E.c.id)
            .join(_R, _R.c.id == _E.c.run_id)
            .where(_E.c.device_id == device_id, _R.c.status == "running")
            .union(
                select(_V.c.entry_id)
                .join(_R, _R.c.id == _V.c.run_id)
                .join(_E, _E.c.id == _V.c.entry_id)
                .where(_E.c.device_id == device_id, _R.c.status == "running")
            )
        )
    }
    sets = _current_sets(conn, device_id, current) if stale else {}
    chosen: list[PrunedEntry] = []
    spared = 0
    for row in conn.execute(
        select(
            _E.c.id,
            _K.c.text,
            _S.c.signature,
            _S.c.checksum,
            _E.c.choice,
            _E.c.status,
            _E.c.updated_at,
        )
        .join(_K, _K.c.id == _E.c.key_id)
        .join(_S, _S.c.id == _E.c.candidate_set_id)
        .where(_E.c.device_id == device_id)
        .order_by(_K.c.text, _S.c.checksum)
    ):
        said = verdicts.get(row.id, [])
        reasons = []
        if stale and row.signature in sets and sets[row.signature] != row.checksum:
            reasons.append("stale")
        if unvalidated and "validated" not in said:
            reasons.append("unvalidated")
        if older_than is not None and row.updated_at < older_than:
            reasons.append("older")
        if masked and said and all(v == "masked" for v in said):
            reasons.append("masked")
        if not reasons:
            continue
        if row.id in active:
            spared += 1
            continue
        chosen.append(
            PrunedEntry(
                row.id,
                row.text,
                row.checksum,
                row.choice,
                row.status,
                row.updated_at,
                tuple(reasons),
            )
        )
    return chosen, spared


def _orphans(conn: Connection, removed: Iterable[int]) -> tuple[list[int], list[int]]:
    """The keys and candidate sets that would have no entry left once `removed` are gone."""
    gone = set(removed)
    keys: dict[int, bool] = {}
    sets: dict[int, bool] = {}
    for entry_id, key_id, set_id in conn.execute(
        select(_E.c.id, _E.c.key_id, _E.c.candidate_set_id)
    ):
        kept = entry_id not in gone
        keys[key_id] = keys.get(key_id, False) or kept
        sets[set_id] = sets.get(set_id, False) or kept
    # Only rows this prune leaves empty: rows that were orphans already are doctor's business.
    return (
        sorted(k for k, kept in keys.items() if not kept),
        sorted(s for s, kept in sets.items() if not kept),
    )


def _parse_current(current: Mapping[str, Sequence[str]] | None) -> dict[str, tuple[str, ...]]:
    if current is None:
        return {}
    if not isinstance(current, Mapping):
        raise BadArgumentError("the current candidate lists must map a signature to a list")
    out = {}
    for sig, names in current.items():
        if not isinstance(sig, str) or not sig:
            raise BadArgumentError(f"a signature must be non-empty text, got {sig!r}")
        try:
            out[sig] = candidate_names(names)
        except TunecacheError as error:
            raise BadArgumentError(f"candidates of {sig}: {error}") from None
    return out


def prune(
    cache: Cache,
    *,
    versions: bool = False,
    stale: bool = False,
    current: Mapping[str, Sequence[str]] | None = None,
    unvalidated: bool = False,
    older_than: datetime | None = None,
    masked: bool = False,
    dry_run: bool = False,
    root: str | os.PathLike[str] | None = None,
) -> PruneReport:
    """Remove what the chosen kinds select, or with `dry_run` only say what that would be.

    - `versions`: the version folders of this client other than the current one;
    - `stale`: entries tuned against a candidate list that is no longer current: `current`
      maps a signature to the client's list now (other signatures are left alone); without
      it, the list each signature was most recently tuned against is taken as current;
    - `unvalidated`: entries no model has validated;
    - `older_than`: entries last updated before that time;
    - `masked`: entries that every model that judged them masked.

    Entries of a run still open ("running") are spared and counted. Keys and candidate sets
    that no entry uses any more go with the entries. All entry removals are one transaction.
    """
    checked = _parse_current(current) if current is not None else None
    older_than = _aware(older_than, "older_than")
    kinds = dict(stale=stale, unvalidated=unvalidated, older=older_than is not None, masked=masked)
    report = PruneReport(dry_run=dry_run)
    if any(kinds.values()):
        report = _prune_entries(cache, checked, older_than, dry_run=dry_run, **kinds)
    if versions:
        found = prune_versions(cache.device, root=root, dry_run=dry_run)
        report = PruneReport(
            dry_run,
            report.entries,
            tuple(found),
            report.orphans,
            report.spared_active,
        )
    return report


def _prune_entries(
    cache: Cache,
    current: Mapping[str, Sequence[str]] | None,
    older_than: datetime | None,
    *,
    dry_run: bool,
    stale: bool,
    unvalidated: bool,
    older: bool,
    masked: bool,
) -> PruneReport:
    session = cache._read() if dry_run else cache._write()
    # The selection runs inside the same transaction as the deletes: what is reported is
    # exactly what went, even with other writers about.
    with session as conn:
        device_id = cache._find_device_id(conn)
        if device_id is None:
            return PruneReport(dry_run=dry_run, orphans={"keys": 0, "candidate_sets": 0})
        chosen, spared = _select_prunable(
            conn,
            device_id,
            stale=stale,
            current=current,
            unvalidated=unvalidated,
            older_than=older_than if older else None,
            masked=masked,
        )
        ids = [e.id for e in chosen]
        keys, sets = _orphans(conn, ids)
        if not dry_run:
            # Foreign keys cascade to timing records, candidate timings and verdicts.
            for part in _chunks(ids):
                conn.execute(delete(_E).where(_E.c.id.in_(part)))
            for part in _chunks(keys):
                conn.execute(delete(_K).where(_K.c.id.in_(part)))
            for part in _chunks(sets):
                conn.execute(delete(_S).where(_S.c.id.in_(part)))
    return PruneReport(
        dry_run=dry_run,
        entries=tuple(chosen),
        orphans={"keys": len(keys), "candidate_sets": len(sets)},
        spared_active=spared,
    )


# --- prune: version folders ------------------------------------------------------------------


def _folder_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            # A file may vanish between listing and looking (another pruner, a cleaner).
            with contextlib.suppress(FileNotFoundError):
                total += (Path(dirpath) / name).lstat().st_size
    return total


def _unexpected(version_dir: Path) -> str | None:
    """What in a version folder tunecache did not put there, or None if it is all ours.

    A folder holding anything else (a user's file, a symlink) is left alone: pruning deletes
    whole folders, and must never take something it did not write.
    """
    for device_dir in version_dir.iterdir():
        if device_dir.is_symlink() or not device_dir.is_dir():
            return f"{device_dir.name} is not a device folder"
        for item in device_dir.iterdir():
            if item.name == QUARANTINE_DIR and item.is_dir() and not item.is_symlink():
                # Damaged databases tunecache moved aside: nobody writes to them any more.
                continue
            if item.is_symlink() or not item.is_file():
                return f"{device_dir.name}/{item.name} is not a file"
            if not item.name.startswith(paths.DATABASE_NAME):
                return f"{device_dir.name}/{item.name} is not a cache file"
    return None


def _claim(db: Path) -> sqlite3.Connection:
    """Lock a database against every other connection, without waiting, or raise
    sqlite3.OperationalError.

    Leaving WAL mode needs an exclusive lock, which SQLite grants only when no other
    connection, in any process, has the database open (each WAL connection holds a shared
    lock while open, reading or writing); the EXCLUSIVE transaction then keeps newcomers out
    while the folder goes. A writer is therefore either refused here or never started.
    """
    uri = "file:" + urllib.parse.quote(str(db)) + "?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=0, isolation_level=None)
    try:
        mode = conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
        if str(mode).lower() != "delete":
            raise sqlite3.OperationalError("database is locked (still in WAL mode)")
        conn.execute("BEGIN EXCLUSIVE")
    except BaseException:
        conn.close()
        raise
    return conn


def _release(claims: Iterable[sqlite3.Connection], *, restore: bool) -> None:
    for conn in claims:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
            if restore:
                # Give the database back as tunecache keeps it.
                conn.execute("PRAGMA journal_mode = WAL")
        conn.close()


def prune_versions(
    device: Device, *, root: str | os.PathLike[str] | None = None, dry_run: bool = False
) -> list[PrunedVersion]:
    """Remove the version folders of `device`'s client other than its current version.

    Each database in a folder is claimed first (see `_claim`): a folder any process still has
    a database of open is skipped and reported, never deleted under it. A dry run only looks.
    """
    tune = paths.cache_root(device.client, root) / "tune"
    if not tune.is_dir():
        return []
    out = []
    for version_dir in sorted(tune.iterdir()):
        version = version_dir.name
        if version == device.client_version or version.startswith("."):
            continue
        if version_dir.is_symlink() or not version_dir.is_dir():
            continue
        size = _folder_bytes(version_dir)
        unexpected = _unexpected(version_dir)
        if unexpected is not None:
            out.append(PrunedVersion(version, str(version_dir), size, False, unexpected))
            continue
        if dry_run:
            out.append(PrunedVersion(version, str(version_dir), size, False, None))
            continue
        out.append(_remove_version(version, version_dir, size))
    return out


def _remove_version(version: str, version_dir: Path, size: int) -> PrunedVersion:
    claims: list[sqlite3.Connection] = []
    try:
        for db in sorted(version_dir.glob(f"*/{paths.DATABASE_NAME}")):
            try:
                claims.append(_claim(db))
            except sqlite3.Error as error:
                _release(claims, restore=True)
                claims = []
                return PrunedVersion(
                    version,
                    str(version_dir),
                    size,
                    False,
                    f"{db.parent.name} is in use by another process ({error})",
                )
        try:
            shutil.rmtree(version_dir)
        except OSError as error:
            _release(claims, restore=True)
            claims = []
            return PrunedVersion(
                version, str(version_dir), size, False, f"cannot remove: {error.strerror}"
            )
        return PrunedVersion(version, str(version_dir), size, True, None)
    finally:
        _release(claims, restore=False)


# --- doctor ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem(_Report):
    """Something doctor found: what, how many rows, and what repairing it does."""

    kind: str
    count: int
    detail: str
    #: what --repair does about it, or None when doctor cannot repair it
    repair: str | None
    repaired: bool = False


@dataclass(frozen=True, slots=True)
class DoctorReport(_Report):
    """The health of a cache database file."""

    path: str
    revision: str | None
    head: str
    integrity: tuple[str, ...]
    database_bytes: int
    wal_bytes: int
    devices: int
    entries: int
    problems: tuple[Problem, ...]
    repair: bool
    #: whether a WAL checkpoint ran (with repair)
    checkpointed: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data, with `healthy` beside the fields."""
        return {**_jsonable(self), "healthy": self.healthy}

    @property
    def healthy(self) -> bool:
        """Whether nothing is left to worry about: sound, current, no problem left unrepaired."""
        return (
            self.integrity == ("ok",)
            and self.revision == self.head
            and all(p.repaired for p in self.problems)
        )


@dataclass(slots=True)
class _Finding:
    kind: str
    detail: str
    repair: str | None
    rows: list[Any]
    fix: Callable[[Connection, list[Any]], None] | None


def _delete_ids(table: Table) -> Callable[[Connection, list[Any]], None]:
    def fix(conn: Connection, ids: list[Any]) -> None:
        for part in _chunks(ids):
            conn.execute(delete(table).where(table.c.id.in_(part)))

    return fix


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    except (OverflowError, ValueError):
        return False
    return True


def _close_runs(conn: Connection, ids: list[Any]) -> None:
    for part in _chunks(ids):
        conn.execute(
            update(_R).where(_R.c.id.in_(part)).values(status="failed", finished_at=utcnow())
        )


def _delete_dangling(conn: Connection, rows: list[Any]) -> None:
    for table, rowid in rows:
        # Table names come from SQLite's own foreign_key_check, not from the user.
        conn.exec_driver_sql(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))


def _drop_records(conn: Connection, ids: list[Any]) -> None:
    for part in _chunks(ids):
        conn.execute(delete(_T).where(_T.c.id.in_(part)))


def _find(conn: Connection, local: Device, progress: Progress | None) -> list[_Finding]:
    """Every problem doctor knows how to look for, read within one transaction."""
    out: list[_Finding] = []
    dangling = [
        (str(row[0]), int(row[1]))
        for row in conn.exec_driver_sql("PRAGMA foreign_key_check")
        if row[1] is not None
    ]
    out.append(
        _Finding(
            "dangling-rows",
            "rows pointing at a row that no longer exists",
            "delete them",
            dangling,
            _delete_dangling,
        )
    )

    def orphans(kind: str, table: Table, detail: str, *conditions: Any) -> None:
        ids = [row[0] for row in conn.execute(select(table.c.id).where(*conditions))]
        out.append(_Finding(kind, detail, "delete them", ids, _delete_ids(table)))

    orphans(
        "orphaned-keys",
        _K,
        "keys no entry uses",
        ~exists().where(_E.c.key_id == _K.c.id),
    )
    orphans(
        "orphaned-candidate-sets",
        _S,
        "candidate sets no entry uses",
        ~exists().where(_E.c.candidate_set_id == _S.c.id),
    )
    orphans(
        "orphaned-models",
        _M,
        "models with no verdict",
        ~exists().where(_V.c.model_id == _M.c.id),
    )
    orphans(
        "orphaned-devices",
        _D,
        "device identities with no entry and no run",
        ~exists().where(_E.c.device_id == _D.c.id),
        ~exists().where(_R.c.device_id == _D.c.id),
        _D.c.fingerprint != local.fingerprint,
    )
    host = socket.gethostname()
    stale_runs = [
        row.id
        for row in conn.execute(
            select(_R.c.id, _R.c.pid).where(_R.c.status == "running", _R.c.hostname == host)
        )
        if not _pid_alive(row.pid)
    ]
    out.append(
        _Finding(
            "stale-runs",
            "runs still marked running whose process on this host is gone",
            "mark them failed",
            stale_runs,
            _close_runs,
        )
    )
    broken = []
    set_names: dict[int, tuple[str, ...]] = {}
    for set_id, name in conn.execute(
        select(_C.c.set_id, _C.c.name).order_by(_C.c.set_id, _C.c.position)
    ):
        set_names[set_id] = (*set_names.get(set_id, ()), name)
    for row in conn.execute(select(_E.c.id, _E.c.candidate_set_id, _E.c.choice, _E.c.heuristic)):
        names = set_names.get(row.candidate_set_id, ())
        if row.choice not in names or (row.heuristic is not None and row.heuristic not in names):
            broken.append(row.id)
    out.append(
        _Finding(
            "illegal-choices",
            "entries whose choice or heuristic is not in their candidate set",
            "delete them",
            broken,
            _delete_ids(_E),
        )
    )
    bad_sets = []
    for set_id, sum_ in conn.execute(select(_S.c.id, _S.c.checksum)):
        try:
            if checksum(set_names.get(set_id, ())) != sum_:
                bad_sets.append(set_id)
        except TunecacheError:
            bad_sets.append(set_id)
    out.append(
        _Finding(
            "bad-candidate-sets",
            "candidate sets whose names do not match their checksum",
            None,
            bad_sets,
            None,
        )
    )
    out.append(
        _Finding(
            "unreadable-records",
            "timing records that do not decode",
            "delete the records (the entries stay)",
            _unreadable_records(conn, progress),
            _drop_records,
        )
    )
    return out


def _unreadable_records(conn: Connection, progress: Progress | None) -> list[int]:
    total = int(conn.execute(select(func.count()).select_from(_T)).scalar_one())
    bad = []
    for done, (record_id, data) in enumerate(conn.execute(select(_T.c.id, _T.c.data))):
        if progress is not None and done % 256 == 0:
            progress("records", done, total)
        try:
            codec.decode(bytes(data))
        except (CodecError, TypeError):
            bad.append(record_id)
    if progress is not None:
        progress("records", total, total)
    return bad


def _examine(
    conn: Connection, local: Device, repair: bool, progress: Progress | None
) -> list[Problem]:
    """Find the problems, and with `repair` fix them until none that can be fixed is left.

    One repair can make another problem (an illegal entry deleted leaves its key unused), so
    repairs run again on what they leave, a few passes at most, all in the caller's transaction.
    """
    found: dict[str, Problem] = {}
    for _ in range(3 if repair else 1):
        findings = [f for f in _find(conn, local, progress) if f.rows]
        fixable = [f for f in findings if repair and f.fix is not None]
        for f in findings:
            before = found.get(f.kind)
            # Rows a pass already repaired count once more only if the pass finds new ones.
            count = len(f.rows) + (before.count if before is not None and before.repaired else 0)
            found[f.kind] = Problem(f.kind, count, f.detail, f.repair, f in fixable)
        for f in fixable:
            assert f.fix is not None
            f.fix(conn, f.rows)
        if not fixable:
            break
    return list(found.values())


def doctor(cache: Cache, *, repair: bool = False, progress: Progress | None = None) -> DoctorReport:
    """Check the whole database file and report; repair what can be repaired only if asked.

    Repairs run in one write transaction that finds the problems again under the lock, so it
    repairs exactly what it reports. A checkpoint then folds the WAL back into the database.
    """
    wal = Path(str(cache.path) + "-wal")
    session = cache._write() if repair else cache._read()
    with session as conn:
        integrity = tuple(
            str(row[0]) for row in conn.exec_driver_sql("PRAGMA integrity_check").fetchall()
        )
        revision = migrate.current_revision(conn)
        devices = int(conn.execute(select(func.count()).select_from(_D)).scalar_one())
        entries = int(conn.execute(select(func.count()).select_from(_E)).scalar_one())
        problems = _examine(conn, cache.device, repair, progress)
    found_wal = wal.stat().st_size if wal.exists() else 0
    checkpointed = False
    wal_bytes = found_wal
    if repair:
        checkpointed = _checkpoint(cache)
        wal_bytes = wal.stat().st_size if wal.exists() else 0
    if found_wal > WAL_WARN_BYTES:
        problems.append(
            Problem(
                "large-wal",
                1,
                f"the WAL holds {found_wal} bytes not yet folded into the database",
                "checkpoint it",
                # Repaired only if the checkpoint finished: a reader may have held it back.
                checkpointed and wal_bytes <= WAL_WARN_BYTES,
            )
        )
    return DoctorReport(
        path=str(cache.path),
        revision=revision,
        head=migrate.HEAD,
        integrity=integrity,
        database_bytes=cache.path.stat().st_size if cache.path.exists() else 0,
        wal_bytes=wal_bytes,
        devices=devices,
        entries=entries,
        problems=tuple(problems),
        repair=repair,
        checkpointed=checkpointed,
    )


def _checkpoint(cache: Cache) -> bool:
    """Fold the WAL into the database and truncate it; False if readers kept it from finishing."""
    # On the driver's own connection: SQLAlchemy would open a transaction first, and SQLite
    # refuses a checkpoint inside one ("database table is locked").
    with busy_errors(cache.path, cache.busy_timeout), cache._engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        busy = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return busy is not None and int(busy[0]) == 0


# --- sql -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryResult(_Report):
    """The rows a read-only query returned."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    #: whether more rows were left out than max_rows allowed
    truncated: bool


# Statements a read-only query may run. Reading is all `sql` is for; ATTACH in particular could
# create a file, so everything else is refused by the authorizer before it runs.
_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
        "user_version",
        "schema_version",
        "page_count",
        "page_size",
        "freelist_count",
        "compile_options",
        "database_list",
        "function_list",
        "collation_list",
        "pragma_list",
    }
)


def _authorize(action: int, arg1: str | None, arg2: str | None, *rest: object) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 is not None and arg1.lower() in _READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def run_query(
    path: str | os.PathLike[str],
    query: str,
    *,
    max_rows: int = 1000,
    timeout: float = 30.0,
) -> QueryResult:
    """Run one read-only SQL statement on a cache database with the stdlib sqlite3 module.

    The file is opened `mode=ro` with `PRAGMA query_only`, and an authorizer refuses anything
    but reads; a query running past `timeout` seconds is interrupted. A bad query raises
    BadArgumentError with SQLite's message.
    """
    if not isinstance(query, str) or not query.strip():
        raise BadArgumentError("the query is empty")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
        raise BadArgumentError(f"max_rows must be a non-negative integer, got {max_rows!r}")
    if not isinstance(timeout, int | float) or not 0 < timeout <= 86400 or math.isnan(timeout):
        raise BadArgumentError(f"timeout must be seconds from 0 to 86400, got {timeout!r}")
    db = Path(path).absolute()
    if not db.is_file():
        raise BadArgumentError(f"no database at {db}")
    uri = "file:" + urllib.parse.quote(str(db)) + "?mode=ro"
    deadline = time.monotonic() + timeout
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=min(timeout, 30.0))
    except sqlite3.Error as error:
        raise BadArgumentError(f"cannot open {db}: {error}") from error
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(_authorize)
        # Returning non-zero interrupts the statement: a runaway recursive CTE stops in time.
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        cursor = conn.execute(query)
        columns = tuple(d[0] for d in cursor.description or ())
        rows = cursor.fetchmany(max_rows + 1) if columns else []
    except sqlite3.Error as error:
        if time.monotonic() > deadline:
            raise BadArgumentError(f"query interrupted after {timeout:g} s") from error
        raise BadArgumentError(f"query failed: {error}") from error
    finally:
        conn.close()
    return QueryResult(
        columns=columns,
        rows=tuple(tuple(row) for row in rows[:max_rows]),
        truncated=len(rows) > max_rows,
    )
