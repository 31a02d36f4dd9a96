"""A device's cache: open it, write an entry with its evidence, read it back.

This is the storage-facing API that tuning, validation and maintenance build on. The hot path
(the resolver) does not go through it: it reads the database with the stdlib sqlite3 module.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import socket
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Table, delete, func, insert, select, update

from tunecache import codec, paths
from tunecache._version import __version__
from tunecache.candidates import candidate_names, checksum
from tunecache.device import Device, detect
from tunecache.errors import (
    BadRecordError,
    ReadOnlyStoreError,
    SchemaTooNewError,
    StoreError,
    TunecacheError,
    TunecacheWarning,
)
from tunecache.keys import Key, parse
from tunecache.store import health, migrate, quarantine
from tunecache.store.engine import (
    DEFAULT_BUSY_TIMEOUT,
    busy_errors,
    check_timeout,
    make_engine,
    transaction,
)
from tunecache.store.models import (
    CANDIDATE_SETS,
    CANDIDATE_TIMINGS,
    CANDIDATES,
    DEVICES,
    ENTRIES,
    ENTRY_STATUSES,
    KEYS,
    MODELS,
    RUNS,
    TIMING_RECORDS,
    VALIDATIONS,
    VERDICTS,
    utcnow,
)

__all__ = ["Cache", "Entry", "open_cache"]

# Short names for the Core tables these statements are built from.
_S, _CT, _C, _D, _E, _K, _M, _R, _T, _V = (
    CANDIDATE_SETS,
    CANDIDATE_TIMINGS,
    CANDIDATES,
    DEVICES,
    ENTRIES,
    KEYS,
    MODELS,
    RUNS,
    TIMING_RECORDS,
    VALIDATIONS,
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored decision, as read back from the cache."""

    id: int
    key: Key
    choice: str
    heuristic: str | None
    status: str
    speedup: float | None
    candidates: tuple[str, ...]
    checksum: str
    created_at: datetime
    updated_at: datetime


def _dims_text(key: Key) -> str:
    return " ".join(f"{name}={value}" for name, value in key.dims)


def _entry_id(entry: Entry | int) -> int:
    if isinstance(entry, Entry):
        return entry.id
    if isinstance(entry, bool) or not isinstance(entry, int):
        raise BadRecordError(f"an entry is an Entry or its integer id, got {entry!r}")
    return entry


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRecordError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _positive(value: object, what: str) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise BadRecordError(f"{what} must be a finite positive number, got {value!r}")
    return float(value)


def _check_run(conn: Connection, run_id: int | None) -> None:
    if run_id is None:
        return
    if isinstance(run_id, bool) or not isinstance(run_id, int):
        raise BadRecordError(f"run_id must be an integer, got {run_id!r}")
    if conn.execute(select(_R.c.id).where(_R.c.id == run_id)).scalar() is None:
        raise BadRecordError(f"no run {run_id} in this cache")


def _insert(conn: Connection, table: Table, **values: Any) -> int:
    """Insert one row and return its new integer id."""
    new_id = conn.execute(insert(table).values(**values)).inserted_primary_key
    assert new_id is not None
    return int(new_id[0])


def _as_key(key: Key | str) -> Key:
    if isinstance(key, str):
        return parse(key)
    if isinstance(key, Key):
        # Round-trip through the text form: it validates a Key built by the raw constructor.
        return parse(key.text)
    raise BadRecordError(f"a key must be a Key or its text, got {type(key).__name__}")


class Cache:
    """An open cache database for one device identity."""

    def __init__(
        self,
        path: Path,
        device: Device,
        engine: Engine,
        *,
        busy_timeout: float,
        outcome: migrate.Outcome | None,
        readonly_reason: str | None,
    ) -> None:
        self.path = path
        self.device = device
        self.busy_timeout = busy_timeout
        #: what opening did to the schema (None for a database opened read-only)
        self.outcome = outcome
        #: why this cache refuses writes, or None when it accepts them
        self.readonly_reason = readonly_reason
        self._engine = engine
        self._device_id: int | None = None

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        *,
        client: str = "tunecache",
        client_version: str | None = None,
        threads: int | None = None,
        accelerator: str | None = None,
        root: str | os.PathLike[str] | None = None,
        path: str | os.PathLike[str] | None = None,
        device: Device | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        cpu: str | None = None,
    ) -> Cache:
        """Open (creating or upgrading as needed) the cache of this device.

        The database lives at `paths.database_path(device, root)` unless `path` names a file. A
        database written by a newer tunecache is opened read-only, with a TunecacheWarning.
        `cpu` names another processor (or a GPU, for a GPU client) than this machine's.
        """
        if device is None:
            device = detect(
                client=client,
                client_version=client_version,
                threads=threads,
                accelerator=accelerator,
                cpu=cpu,
            )
        busy_timeout = check_timeout(busy_timeout)
        db = paths.explicit_path(path) if path is not None else paths.database_path(device, root)
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create cache folder {db.parent}: {error.strerror}") from error
        health.check_filesystem(db)
        denied = health.write_denied(db)
        if denied is not None:
            engine, reason = health.open_readonly(db, busy_timeout, denied)
            return cls(
                db, device, engine, busy_timeout=busy_timeout, outcome=None, readonly_reason=reason
            )
        # A damaged file at tunecache's own location is moved aside for a fresh cache; one the
        # caller named is never moved.
        quarantine.check(db, busy_timeout, may_move=path is None)
        # Look before writing: even switching the journal mode writes to the file, and a file
        # this tunecache must not change is refused (or read) without being touched.
        state = migrate.inspect_file(db, busy_timeout)
        try:
            migrate.check_writable_schema(state, db)
        except SchemaTooNewError as error:
            warnings.warn(str(error), TunecacheWarning, stacklevel=2)
            engine = make_engine(db, busy_timeout=busy_timeout, readonly=True)
            return cls(
                db,
                device,
                engine,
                busy_timeout=busy_timeout,
                outcome=None,
                readonly_reason=str(error),
            )
        engine = make_engine(db, busy_timeout=busy_timeout)
        try:
            with busy_errors(db, busy_timeout):
                outcome = migrate.ensure_schema(engine, db)
        except BaseException:
            engine.dispose()
            raise
        return cls(
            db, device, engine, busy_timeout=busy_timeout, outcome=outcome, readonly_reason=None
        )

    def close(self) -> None:
        """Close every connection; the cache cannot be used afterwards."""
        self._engine.dispose()

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.readonly_reason else "read-write"
        return f"<Cache {self.path} {self.device.dirname} {mode}>"

    @property
    def readonly(self) -> bool:
        """Whether this cache refuses writes."""
        return self.readonly_reason is not None

    # -- transactions -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        if self.readonly_reason is not None:
            raise ReadOnlyStoreError(f"cache {self.path} is read-only: {self.readonly_reason}")
        health.warn_wal_defects()
        with busy_errors(self.path, self.busy_timeout), transaction(self._engine) as conn:
            yield conn

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        with (
            busy_errors(self.path, self.busy_timeout),
            transaction(self._engine, read=True) as conn,
        ):
            yield conn

    def revision(self) -> str | None:
        """The schema revision stamped in the database."""
        with self._read() as conn:
            return migrate.current_revision(conn)

    # -- rows that entries hang on ------------------------------------------------------------

    def _find_device_id(self, conn: Connection) -> int | None:
        # Only committed ids are remembered (see put): an id seen inside a write transaction
        # that later rolls back could name another device's row tomorrow.
        if self._device_id is not None:
            return self._device_id
        found = conn.execute(
            select(_D.c.id).where(_D.c.fingerprint == self.device.fingerprint)
        ).scalar()
        return None if found is None else int(found)

    def _device_row(self, conn: Connection) -> int:
        found = self._find_device_id(conn)
        if found is not None:
            return found
        # The checked fields are the columns of the same names.
        return _insert(
            conn,
            _D,
            fingerprint=self.device.fingerprint,
            created_at=utcnow(),
            **self.device.as_dict(),
        )

    @staticmethod
    def _key_row(conn: Connection, key: Key) -> int:
        text = key.text
        found = conn.execute(select(_K.c.id).where(_K.c.text == text)).scalar()
        if found is not None:
            return int(found)
        return _insert(conn, _K, text=text, signature=key.signature, dims=_dims_text(key))

    @staticmethod
    def _set_row(conn: Connection, signature: str, names: tuple[str, ...], sum_: str) -> int:
        found = conn.execute(
            select(_S.c.id).where(_S.c.signature == signature, _S.c.checksum == sum_)
        ).scalar()
        if found is not None:
            return int(found)
        set_id = _insert(
            conn, _S, signature=signature, checksum=sum_, size=len(names), created_at=utcnow()
        )
        conn.execute(
            insert(_C),
            [{"set_id": set_id, "position": i, "name": n} for i, n in enumerate(names)],
        )
        return set_id

    # -- entries ------------------------------------------------------------------------------

    def put(
        self,
        key: Key | str,
        *,
        choice: str,
        candidates: Sequence[str],
        heuristic: str | None = None,
        record: codec.TimingRecord | None = None,
        speedup: float | None = None,
        status: str = "unvalidated",
        run_id: int | None = None,
    ) -> Entry:
        """Store the decision for `key` against this candidate list, with its evidence.

        Writing the same key and list again replaces the decision and its timing record; if the
        choice changes, the models' verdicts on the old decision go with it (they judged another
        choice). Every argument is checked before the transaction starts: a bad one raises and
        writes nothing.
        """
        key = _as_key(key)
        names = candidate_names(candidates)
        if choice not in names:
            raise BadRecordError(f"choice {choice!r} is not one of the candidates {list(names)}")
        if heuristic is not None and heuristic not in names:
            raise BadRecordError(f"heuristic {heuristic!r} is not one of the candidates")
        if status not in ENTRY_STATUSES:
            raise BadRecordError(f"status must be one of {ENTRY_STATUSES}, got {status!r}")
        speedup = _positive(speedup, "speedup")
        blob: bytes | None = None
        if record is not None:
            if not isinstance(record, codec.TimingRecord):
                raise BadRecordError("record must be a tunecache.codec.TimingRecord")
            unknown = [c.name for c in record.candidates if c.name not in names]
            if unknown:
                raise BadRecordError(f"timing record names unknown candidates {unknown}")
            blob = codec.encode(record)
        sum_ = checksum(names)
        now = utcnow()

        with self._write() as conn:
            # Inside the transaction, so a run deleted meanwhile cannot slip through; raising
            # here rolls back, and nothing is written.
            _check_run(conn, run_id)
            device_id = self._device_row(conn)
            key_id = self._key_row(conn, key)
            set_id = self._set_row(conn, key.signature, names, sum_)
            values: dict[str, Any] = {
                "choice": choice,
                "heuristic": heuristic,
                "status": status,
                "speedup": speedup,
                "run_id": run_id,
                "updated_at": now,
            }
            found = conn.execute(
                select(_E.c.id, _E.c.choice).where(
                    _E.c.device_id == device_id,
                    _E.c.key_id == key_id,
                    _E.c.candidate_set_id == set_id,
                )
            ).first()
            entry_id = None if found is None else found.id
            if found is not None and found.choice != choice:
                conn.execute(delete(_V).where(_V.c.entry_id == entry_id))
            if entry_id is None:
                entry_id = _insert(
                    conn,
                    _E,
                    device_id=device_id,
                    key_id=key_id,
                    candidate_set_id=set_id,
                    created_at=now,
                    **values,
                )
            else:
                conn.execute(update(_E).where(_E.c.id == entry_id).values(**values))
                conn.execute(delete(_T).where(_T.c.entry_id == entry_id))
            if record is not None and blob is not None:
                self._insert_record(conn, entry_id, record, blob, heuristic, now)
            entry = self._entries(conn, _E.c.id == entry_id)[0]
        self._device_id = device_id
        return entry

    @staticmethod
    def _insert_record(
        conn: Connection,
        entry_id: int,
        record: codec.TimingRecord,
        blob: bytes,
        heuristic: str | None,
        now: datetime,
    ) -> None:
        best = record.best()
        heuristic_timing = (
            next((c for c in record.candidates if c.name == heuristic), None)
            if heuristic is not None
            else None
        )
        record_id = _insert(
            conn,
            _T,
            entry_id=entry_id,
            format_version=codec.FORMAT_VERSION,
            best=None if best is None else best.name,
            best_median_s=None if best is None else best.median,
            heuristic_median_s=None if heuristic_timing is None else heuristic_timing.median,
            candidates_count=len(record.candidates),
            samples_count=sum(len(c.samples) for c in record.candidates),
            failures_count=sum(1 for c in record.candidates if c.error is not None),
            created_at=now,
            data=blob,
        )
        if record.candidates:
            conn.execute(
                insert(_CT),
                [
                    {
                        "record_id": record_id,
                        "name": c.name,
                        "median_s": c.median,
                        "min_s": c.min,
                        "max_s": c.max,
                        "samples": len(c.samples),
                        "inner_loops": c.inner_loops,
                        "pruned": c.pruned,
                        "error": c.error,
                    }
                    for c in record.candidates
                ],
            )

    def _entries(self, conn: Connection, *where: Any) -> list[Entry]:
        device_id = self._find_device_id(conn)
        if device_id is None:
            return []
        rows = conn.execute(
            select(
                _E.c.id,
                _K.c.text,
                _E.c.choice,
                _E.c.heuristic,
                _E.c.status,
                _E.c.speedup,
                _S.c.id.label("set_id"),
                _S.c.checksum,
                _E.c.created_at,
                _E.c.updated_at,
            )
            .join(_K, _K.c.id == _E.c.key_id)
            .join(_S, _S.c.id == _E.c.candidate_set_id)
            .where(_E.c.device_id == device_id, *where)
            .order_by(_E.c.updated_at.desc(), _E.c.id.desc())
        ).all()
        names = self._set_names(conn, {row.set_id for row in rows})
        return [
            Entry(
                id=row.id,
                key=parse(row.text),
                choice=row.choice,
                heuristic=row.heuristic,
                status=row.status,
                speedup=row.speedup,
                candidates=names[row.set_id],
                checksum=row.checksum,
                created_at=row.created_at,
                updated_at=row.updated_at,
            )
            for row in rows
        ]

    @staticmethod
    def _set_names(conn: Connection, set_ids: Iterable[int]) -> dict[int, tuple[str, ...]]:
        ids = sorted(set_ids)
        if not ids:
            return {}
        out: dict[int, list[str]] = {i: [] for i in ids}
        for set_id, name in conn.execute(
            select(_C.c.set_id, _C.c.name)
            .where(_C.c.set_id.in_(ids))
            .order_by(_C.c.set_id, _C.c.position)
        ):
            out[set_id].append(name)
        return {i: tuple(v) for i, v in out.items()}

    def get(self, key: Key | str, *, candidates: Sequence[str] | None = None) -> Entry | None:
        """The entry for `key` on this device, or None.

        With `candidates`, only an entry tuned against exactly that list answers; without, the
        most recently updated entry of the key, whatever list it was tuned against.
        """
        key = _as_key(key)
        where = [_K.c.text == key.text]
        if candidates is not None:
            where.append(_S.c.checksum == checksum(candidates))
        with self._read() as conn:
            found = self._entries(conn, *where)
        return found[0] if found else None

    def entries(self) -> list[Entry]:
        """Every entry of this device, most recently updated first."""
        with self._read() as conn:
            return self._entries(conn)

    def count(self) -> int:
        """How many entries this device has."""
        with self._read() as conn:
            device_id = self._find_device_id(conn)
            if device_id is None:
                return 0
            return int(
                conn.execute(
                    select(func.count()).select_from(_E).where(_E.c.device_id == device_id)
                ).scalar_one()
            )

    def record(self, entry: Entry | int) -> codec.TimingRecord | None:
        """The timing record kept with an entry of this device, or None if it has none."""
        entry_id = _entry_id(entry)
        with self._read() as conn:
            device_id = self._find_device_id(conn)
            data = conn.execute(
                select(_T.c.data)
                .join(_E, _E.c.id == _T.c.entry_id)
                .where(_T.c.entry_id == entry_id, _E.c.device_id == device_id)
            ).scalar()
        return None if data is None else codec.decode(bytes(data))

    def set_status(self, entry: Entry | int, status: str) -> Entry:
        """Change an entry's status (accepted / rejected / unvalidated), keeping its evidence.

        `put` replaces a decision and its timing record; acceptance only changes its verdict.
        """
        if status not in ENTRY_STATUSES:
            raise BadRecordError(f"status must be one of {ENTRY_STATUSES}, got {status!r}")
        entry_id = _entry_id(entry)
        with self._write() as conn:
            done = conn.execute(
                update(_E)
                .where(_E.c.id == entry_id, _E.c.device_id == self._find_device_id(conn))
                .values(status=status, updated_at=utcnow())
            )
            if done.rowcount == 0:
                raise BadRecordError(f"no entry {entry_id} on this device")
            return self._entries(conn, _E.c.id == entry_id)[0]

    # -- models, validations, runs ------------------------------------------------------------

    def validate(
        self,
        entry: Entry | int,
        *,
        model: str,
        fingerprint: str,
        verdict: str,
        gain: float | None = None,
        rounds: int = 0,
        confirmations: int = 0,
        run_id: int | None = None,
        status: str | None = None,
    ) -> None:
        """Record a model's verdict on an entry of this device, replacing its earlier one.

        `status`, if given, sets the entry's status in the same transaction: a verdict that
        decides whether the entry may be served at all never lands without it.
        """
        if verdict not in VERDICTS:
            raise BadRecordError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        if status is not None and status not in ENTRY_STATUSES:
            raise BadRecordError(f"status must be one of {ENTRY_STATUSES}, got {status!r}")
        if not isinstance(model, str) or not model or not isinstance(fingerprint, str):
            raise BadRecordError("a model needs a non-empty name and a fingerprint string")
        gain = _positive(gain, "gain")
        rounds = _count(rounds, "rounds")
        confirmations = _count(confirmations, "confirmations")
        if confirmations > rounds:
            raise BadRecordError(f"confirmations ({confirmations}) exceed rounds ({rounds})")
        entry_id = _entry_id(entry)
        now = utcnow()
        with self._write() as conn:
            _check_run(conn, run_id)
            owned = conn.execute(
                select(_E.c.id).where(
                    _E.c.id == entry_id, _E.c.device_id == self._find_device_id(conn)
                )
            ).scalar()
            if owned is None:
                raise BadRecordError(f"no entry {entry_id} on this device")
            model_id = conn.execute(
                select(_M.c.id).where(_M.c.name == model, _M.c.fingerprint == fingerprint)
            ).scalar()
            if model_id is None:
                model_id = _insert(conn, _M, name=model, fingerprint=fingerprint, created_at=now)
            values = {
                "verdict": verdict,
                "gain": gain,
                "rounds": rounds,
                "confirmations": confirmations,
                "run_id": run_id,
                "updated_at": now,
            }
            done = conn.execute(
                update(_V)
                .where(_V.c.model_id == model_id, _V.c.entry_id == entry_id)
                .values(**values)
            )
            if done.rowcount == 0:
                conn.execute(
                    insert(_V).values(
                        model_id=model_id, entry_id=entry_id, created_at=now, **values
                    )
                )
            if status is not None:
                conn.execute(
                    update(_E).where(_E.c.id == entry_id).values(status=status, updated_at=now)
                )

    def verdicts(self, model: str, fingerprint: str | None = None) -> dict[int, str]:
        """This model's verdicts on entries of this device, by entry id (any fingerprint of the
        model's name when `fingerprint` is None)."""
        where = [_M.c.name == model]
        if fingerprint is not None:
            where.append(_M.c.fingerprint == fingerprint)
        with self._read() as conn:
            device_id = self._find_device_id(conn)
            rows = conn.execute(
                select(_V.c.entry_id, _V.c.verdict)
                .join(_M, _M.c.id == _V.c.model_id)
                .join(_E, _E.c.id == _V.c.entry_id)
                .where(_E.c.device_id == device_id, *where)
                .order_by(_V.c.updated_at)
            ).all()
        return {int(entry_id): str(verdict) for entry_id, verdict in rows}

    def verdicts_on(self, entry: Entry | int) -> dict[str, str]:
        """Every model's verdict on one entry of this device, by model name."""
        entry_id = _entry_id(entry)
        with self._read() as conn:
            rows = conn.execute(
                select(_M.c.name, _V.c.verdict)
                .join(_M, _M.c.id == _V.c.model_id)
                .join(_E, _E.c.id == _V.c.entry_id)
                .where(_V.c.entry_id == entry_id, _E.c.device_id == self._find_device_id(conn))
                .order_by(_V.c.updated_at)
            ).all()
        return {str(name): str(verdict) for name, verdict in rows}

    def _insert_run(
        self, conn: Connection, kind: str, notes: str | None, *, status: str = "running"
    ) -> int:
        """Write a `runs` row inside the caller's transaction; a run already over when it is
        logged (an import done in one transaction) passes its final status."""
        now = utcnow()
        return _insert(
            conn,
            _R,
            kind=kind,
            status=status,
            device_id=self._device_row(conn),
            tool_version=__version__,
            hostname=socket.gethostname(),
            platform=platform.platform(),
            python_version=sys.version.split()[0],
            pid=os.getpid(),
            started_at=now,
            finished_at=None if status == "running" else now,
            notes=notes,
        )

    def note(self, run_id: int, notes: str) -> None:
        """Replace a run's notes: what the session found, written once it knows."""
        if not isinstance(notes, str):
            raise BadRecordError(f"notes are a string, got {type(notes).__name__}")
        with self._write() as conn:
            _check_run(conn, run_id)
            conn.execute(update(_R).where(_R.c.id == run_id).values(notes=notes))

    def runs_noted(self, notes: str, *, status: str = "finished") -> list[int]:
        """Ids of this device's runs in `status` whose notes are exactly `notes`, oldest first."""
        with self._read() as conn:
            device_id = self._find_device_id(conn)
            rows = conn.execute(
                select(_R.c.id)
                .where(_R.c.device_id == device_id, _R.c.status == status, _R.c.notes == notes)
                .order_by(_R.c.id)
            ).all()
        return [int(row.id) for row in rows]

    @contextlib.contextmanager
    def run(self, kind: str, notes: str | None = None) -> Iterator[int]:
        """Log a session of work (tuning, validation, import) in the `runs` table.

        The row is written when the session starts and closed as finished, interrupted (Ctrl-C)
        or failed when the block ends, so a crash leaves a visible "running" row behind.
        """
        with self._write() as conn:
            run_id = self._insert_run(conn, kind, notes)
        status = "failed"
        try:
            yield run_id
            status = "finished"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            try:
                with self._write() as conn:
                    conn.execute(
                        update(_R)
                        .where(_R.c.id == run_id)
                        .values(status=status, finished_at=utcnow())
                    )
            except TunecacheError:
                # Closing the log must not hide why the session ended: after Ctrl-C or a
                # failure, the row stays "running" (doctor marks it failed) and the original
                # exception goes on. Only a session that finished reports the error.
                if status == "finished":
                    raise


def open_cache(**kwargs: Any) -> Cache:
    """Open this device's cache; the same arguments as `Cache.open`."""
    return Cache.open(**kwargs)
