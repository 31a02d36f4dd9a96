"""The tables of a cache database, as SQLAlchemy 2.x typed models.

Plain columns hold everything a person queries with the sqlite3 shell; CBOR (see
`tunecache.codec`) holds only the raw samples of a timing record. The `decisions` view is the
read contract for people: it is created with the tables and kept compatible by the migrations.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    DDL,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    event,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# The words the status and verdict checks allow: plain values, which the writers check with.
from tunecache.store.values import ENTRY_STATUSES, VERDICTS

__all__ = [
    "ENTRY_STATUSES",
    "RUN_STATUSES",
    "VERDICTS",
    "Base",
    "Candidate",
    "CandidateSet",
    "CandidateTimingRow",
    "ClaimRow",
    "DECISIONS_VIEW",
    "DECISIONS_VIEW_POSTGRES",
    "READ_VIEWS",
    "DeviceRow",
    "EntryRow",
    "KeyRow",
    "ModelRow",
    "PendingRow",
    "RunRow",
    "TimingRecordRow",
    "ValidationRow",
    "utcnow",
    # the Core tables
    "CANDIDATES",
    "CANDIDATE_SETS",
    "CANDIDATE_TIMINGS",
    "CLAIMS",
    "DEVICES",
    "ENTRIES",
    "KEYS",
    "MODELS",
    "PENDING",
    "RUNS",
    "TIMING_RECORDS",
    "VALIDATIONS",
]

RUN_STATUSES = ("running", "finished", "interrupted", "failed")

# Explicit constraint names let Alembic's batch mode rebuild SQLite tables without guessing.
_NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


#: table option for every table with an integer id (see Base)
_AUTOINCREMENT = {"sqlite_autoincrement": True}


def _numbered(*constraints: Any) -> tuple[Any, ...]:
    """The table arguments of a table with an integer id: its constraints, and AUTOINCREMENT."""
    return (*constraints, _AUTOINCREMENT)


def utcnow() -> datetime:
    """The current time in UTC, as every timestamp in the store is kept."""
    return datetime.now(UTC)


def _one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    """A check that `column` holds one of `values`, named after the column."""
    listed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({listed})", name=column)


def _owner(table: str, **options: Any) -> Any:
    """A column naming the row of `table` this row belongs to: the row goes when that one does."""
    return mapped_column(ForeignKey(f"{table}.id", ondelete="CASCADE"), **options)


def _writer() -> Any:
    """A column naming the run that wrote this row: the row stays (NULL) when the run goes."""
    return mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored as UTC and always read back timezone-aware.

    SQLite keeps no zone with DateTime(timezone=True); without this, values came back naive and
    `utcnow() - entry.updated_at` raised TypeError.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """The value as stored: converted to UTC, the zone dropped where the database keeps
        none (SQLite; PostgreSQL's timestamptz keeps the instant whatever the session's time
        zone); a naive one is refused."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("tunecache stores timezone-aware datetimes only")
        value = value.astimezone(UTC)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """The value as read back: in UTC, with the zone."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base with the store's constraint naming convention.

    Every table with an integer id uses AUTOINCREMENT: SQLite would otherwise hand a deleted
    row's id to the next insert, and an id a process remembered (a device's, an entry's) could
    silently name another row after a prune.
    """

    metadata = MetaData(naming_convention=_NAMING)


class DeviceRow(Base):
    """A device identity that owns entries; every checked field is a column."""

    __tablename__ = "devices"
    __table_args__ = _numbered()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    cpu: Mapped[str] = mapped_column(Text)
    threads: Mapped[int] = mapped_column(Integer)
    accelerator: Mapped[str | None] = mapped_column(Text)
    client: Mapped[str] = mapped_column(Text)
    client_version: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class CandidateSet(Base):
    """The ordered list of legal candidates of a signature, named by its checksum."""

    __tablename__ = "candidate_sets"
    __table_args__ = _numbered(UniqueConstraint("signature", "checksum"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    signature: Mapped[str] = mapped_column(Text)
    checksum: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Candidate(Base):
    """One candidate's name at its position in a candidate set."""

    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("set_id", "name"),)

    set_id: Mapped[int] = _owner("candidate_sets", primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text)


class KeyRow(Base):
    """An op key: its canonical text, its signature and its dims."""

    __tablename__ = "keys"
    __table_args__ = _numbered()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    text: Mapped[str] = mapped_column(Text, unique=True)
    signature: Mapped[str] = mapped_column(Text, index=True)
    #: the dims as `b=1 m=288 k=96 n=64`, in the key's own order
    dims: Mapped[str] = mapped_column(Text)


class RunRow(Base):
    """A log line for one tuning, validation or import session."""

    __tablename__ = "runs"
    # device_id: a device with runs is not an orphan; status: the runs still open (0004).
    __table_args__ = _numbered(
        _one_of("status", RUN_STATUSES), Index(None, "device_id"), Index(None, "status")
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, default="running")
    device_id: Mapped[int | None] = mapped_column(ForeignKey("devices.id", ondelete="SET NULL"))
    tool_version: Mapped[str] = mapped_column(Text)
    hostname: Mapped[str] = mapped_column(Text)
    platform: Mapped[str] = mapped_column(Text)
    python_version: Mapped[str] = mapped_column(Text)
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    notes: Mapped[str | None] = mapped_column(Text)


class EntryRow(Base):
    """One decision: for a device, key and candidate set, the chosen candidate."""

    __tablename__ = "entries"
    __table_args__ = _numbered(
        UniqueConstraint("device_id", "key_id", "candidate_set_id"),
        _one_of("status", ENTRY_STATUSES),
        Index(None, "key_id"),
        # Migration 0004: the foreign keys maintenance follows, and a device's entries newest
        # first (every index ends with the id, so `updated_at DESC, id DESC` needs no sort).
        Index(None, "candidate_set_id"),
        Index(None, "run_id"),
        Index(None, "device_id", "updated_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = _owner("devices")
    key_id: Mapped[int] = _owner("keys")
    candidate_set_id: Mapped[int] = _owner("candidate_sets")
    choice: Mapped[str] = mapped_column(Text)
    heuristic: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, default="unvalidated")
    #: heuristic time over chosen time from the evidence that kept the entry (> 1 is faster)
    speedup: Mapped[float | None] = mapped_column(Float)
    run_id: Mapped[int | None] = _writer()
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TimingRecordRow(Base):
    """The evidence behind an entry: summary columns and the CBOR of every raw sample."""

    __tablename__ = "timing_records"
    __table_args__ = _numbered()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    entry_id: Mapped[int] = _owner("entries", unique=True)
    format_version: Mapped[int] = mapped_column(Integer)
    best: Mapped[str | None] = mapped_column(Text)
    best_median_s: Mapped[float | None] = mapped_column(Float)
    heuristic_median_s: Mapped[float | None] = mapped_column(Float)
    candidates_count: Mapped[int] = mapped_column(Integer)
    samples_count: Mapped[int] = mapped_column(Integer)
    failures_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class CandidateTimingRow(Base):
    """One candidate's summary within a timing record, for SQL without decoding CBOR."""

    __tablename__ = "candidate_timings"

    record_id: Mapped[int] = _owner("timing_records", primary_key=True)
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    median_s: Mapped[float | None] = mapped_column(Float)
    min_s: Mapped[float | None] = mapped_column(Float)
    max_s: Mapped[float | None] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    inner_loops: Mapped[int] = mapped_column(Integer)
    pruned: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)


class ModelRow(Base):
    """A whole workload that uses many keys, by name and fingerprint."""

    __tablename__ = "models"
    __table_args__ = _numbered(UniqueConstraint("name", "fingerprint"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ValidationRow(Base):
    """A model's verdict on an entry, from paired whole-model runs."""

    __tablename__ = "validations"
    __table_args__ = _numbered(
        UniqueConstraint("model_id", "entry_id"),
        _one_of("verdict", VERDICTS),
        Index(None, "entry_id"),
        Index(None, "run_id"),  # migration 0004: the verdicts of a run still open
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = _owner("models")
    entry_id: Mapped[int] = _owner("entries")
    verdict: Mapped[str] = mapped_column(Text)
    #: paired whole-model gain, heuristic-table time over with-entry time (> 1 is faster)
    gain: Mapped[float | None] = mapped_column(Float)
    rounds: Mapped[int] = mapped_column(Integer, default=0)
    confirmations: Mapped[int] = mapped_column(Integer, default=0)
    run_id: Mapped[int | None] = _writer()
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PendingRow(Base):
    """A key a runtime asked for and found no entry for, kept until it is tuned (migration
    0007, `tunecache.store.pending`): its device's fingerprint, its candidate list, the op."""

    __tablename__ = "pending"
    __table_args__ = _numbered(UniqueConstraint("device", "key", "checksum"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(Text)
    signature: Mapped[str] = mapped_column(Text)
    checksum: Mapped[str] = mapped_column(String(64))
    #: the candidate names, in order, as a JSON array
    candidates: Mapped[str] = mapped_column(Text)
    heuristic: Mapped[str] = mapped_column(Text)
    #: the op as MODULE:ATTR or FILE.py:ATTR, where the process knew it
    op: Mapped[str | None] = mapped_column(Text)
    #: what answered it: "heuristic", "nearest" (borrowed), or a client's word
    source: Mapped[str] = mapped_column(Text)
    count: Mapped[int] = mapped_column(Integer)
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime)


class ClaimRow(Base):
    """A tuner's claim on one key of one device identity (migration 0005): who holds it, and
    until when unless renewed (`tunecache.store.claims`)."""

    __tablename__ = "claims"
    __table_args__ = (Index(None, "token"),)  # a tuner renews and releases all its claims

    device: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    #: the holder: its host, its process, and a token of its own (pids are reused)
    host: Mapped[str] = mapped_column(Text)
    pid: Mapped[int] = mapped_column(Integer)
    token: Mapped[str] = mapped_column(String(32))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


# The views read an entry with its key, device and candidate set, each joined by its foreign key
# the same way (the text of each view is what the migrations froze; only the order differs).
_KEY = "JOIN keys k ON k.id = e.key_id\n"
_DEVICE = "JOIN devices d ON d.id = e.device_id\n"
_SET = "JOIN candidate_sets cs ON cs.id = e.candidate_set_id\n"

#: One row per decision, readable with the sqlite3 shell and no tunecache installed. Migrations
#: that change the tables keep these columns and their meaning.
DECISIONS_VIEW = (
    """
CREATE VIEW decisions AS
SELECT
    e.id AS entry_id,
    k.text AS key,
    k.signature AS signature,
    k.dims AS dims,
    e.choice AS choice,
    e.heuristic AS heuristic,
    e.speedup AS speedup,
    e.status AS status,
    (SELECT group_concat(name, ',') FROM (
        SELECT m.name AS name FROM validations v JOIN models m ON m.id = v.model_id
        WHERE v.entry_id = e.id AND v.verdict = 'validated' ORDER BY m.name)) AS validated_by,
    (SELECT group_concat(name, ',') FROM (
        SELECT m.name AS name FROM validations v JOIN models m ON m.id = v.model_id
        WHERE v.entry_id = e.id AND v.verdict = 'masked' ORDER BY m.name)) AS masked_by,
    d.cpu AS cpu,
    d.threads AS threads,
    d.accelerator AS accelerator,
    d.client AS client,
    d.client_version AS client_version,
    cs.checksum AS candidate_set,
    e.created_at AS created_at,
    e.updated_at AS updated_at
FROM entries e
"""
    + _KEY
    + _DEVICE
    + _SET
)


#: The same view on PostgreSQL: its own aggregate (string_agg for group_concat), sorted inside it,
#: since PostgreSQL names every subquery in FROM; the same columns, in the same order.
DECISIONS_VIEW_POSTGRES = DECISIONS_VIEW.replace(
    """(SELECT group_concat(name, ',') FROM (
        SELECT m.name AS name FROM validations v JOIN models m ON m.id = v.model_id
        WHERE v.entry_id = e.id AND v.verdict = 'validated' ORDER BY m.name)) AS validated_by,
    (SELECT group_concat(name, ',') FROM (
        SELECT m.name AS name FROM validations v JOIN models m ON m.id = v.model_id
        WHERE v.entry_id = e.id AND v.verdict = 'masked' ORDER BY m.name)) AS masked_by,""",
    """(SELECT string_agg(m.name, ',' ORDER BY m.name) FROM validations v
        JOIN models m ON m.id = v.model_id
        WHERE v.entry_id = e.id AND v.verdict = 'validated') AS validated_by,
    (SELECT string_agg(m.name, ',' ORDER BY m.name) FROM validations v
        JOIN models m ON m.id = v.model_id
        WHERE v.entry_id = e.id AND v.verdict = 'masked') AS masked_by,""",
)
assert DECISIONS_VIEW_POSTGRES != DECISIONS_VIEW


def _view(name: str, columns: str) -> str:
    """The head of a view's CREATE statement: its name and the columns it selects."""
    return f"\nCREATE VIEW {name} AS\nSELECT\n{columns}"


# The columns an entry's views share, and a verdict's (a `_v1` view's columns never change,
# so a later view with more of them starts with the same ones, in the same order).
_ENTRY = """    e.id AS entry_id,
    k.text AS key,
    k.signature AS signature,
    k.dims AS dims,
    cs.checksum AS checksum,
    e.choice AS choice,
    e.heuristic AS heuristic,
    e.status AS status,
    d.fingerprint AS device,
"""
_VERDICT = """    v.entry_id AS entry_id,
    m.name AS model,
    m.fingerprint AS model_fingerprint,
    v.verdict AS verdict,
    v.gain AS gain,
"""
_VALIDATIONS = "FROM validations v\nJOIN models m ON m.id = v.model_id\n"

#: The read contract: stdlib sqlite3 reads these views and nothing else, so neither the hot path
#: (the first three, migration 0003) nor the read commands (the rest, migration 0004) import
#: SQLAlchemy. Every `_v1` column keeps its meaning forever; an incompatible change adds `_v2`
#: views beside them.
READ_VIEWS = {
    "read_entries_v1": _view("read_entries_v1", _ENTRY + "    e.updated_at AS updated_at\n")
    + "FROM entries e\n"
    + _KEY
    + _SET
    + _DEVICE,
    "read_verdicts_v1": _view("read_verdicts_v1", _VERDICT + "    v.updated_at AS updated_at\n")
    + _VALIDATIONS,
    "read_candidates_v1": """
CREATE VIEW read_candidates_v1 AS
SELECT
    cs.signature AS signature,
    cs.checksum AS checksum,
    c.position AS position,
    c.name AS name
FROM candidate_sets cs
JOIN candidates c ON c.set_id = cs.id
""",
    # Migration 0004: what the read commands (list, inspect, models, where) need besides.
    "read_entry_details_v1": _view(
        "read_entry_details_v1",
        _ENTRY
        + """    e.speedup AS speedup,
    e.run_id AS run_id,
    e.created_at AS created_at,
    e.updated_at AS updated_at
""",
    )
    + "FROM entries e\n"
    + _KEY
    + _SET
    + _DEVICE,
    "read_verdict_details_v1": _view(
        "read_verdict_details_v1",
        _VERDICT
        + """    v.rounds AS rounds,
    v.confirmations AS confirmations,
    v.run_id AS run_id,
    v.created_at AS created_at,
    v.updated_at AS updated_at
""",
    )
    + _VALIDATIONS,
    "read_records_v1": """
CREATE VIEW read_records_v1 AS
SELECT
    t.entry_id AS entry_id,
    t.format_version AS format_version,
    t.best AS best,
    t.best_median_s AS best_median_s,
    t.heuristic_median_s AS heuristic_median_s,
    t.candidates_count AS candidates,
    t.samples_count AS samples,
    t.failures_count AS failures,
    length(t.data) AS bytes,
    t.data AS data,
    t.created_at AS created_at
FROM timing_records t
""",
    "read_runs_v1": """
CREATE VIEW read_runs_v1 AS
SELECT
    r.id AS run_id,
    r.kind AS kind,
    r.status AS status,
    d.fingerprint AS device,
    r.tool_version AS tool_version,
    r.hostname AS hostname,
    r.platform AS platform,
    r.python_version AS python_version,
    r.pid AS pid,
    r.started_at AS started_at,
    r.finished_at AS finished_at,
    r.notes AS notes
FROM runs r
LEFT JOIN devices d ON d.id = r.device_id
""",
    "read_models_v1": """
CREATE VIEW read_models_v1 AS
SELECT
    m.name AS model,
    m.fingerprint AS model_fingerprint,
    m.created_at AS created_at
FROM models m
""",
    "read_devices_v1": """
CREATE VIEW read_devices_v1 AS
SELECT
    d.fingerprint AS device,
    d.cpu AS cpu,
    d.threads AS threads,
    d.accelerator AS accelerator,
    d.client AS client,
    d.client_version AS client_version,
    d.created_at AS created_at,
    (SELECT count(*) FROM entries e WHERE e.device_id = d.id) AS entries
FROM devices d
""",
}

# create_all makes a new database in one step; the views must come with the tables, each in its
# dialect's SQL (only `decisions` differs). (DDL's constructor carries no annotations in
# SQLAlchemy 2.x, hence the ignores.)
event.listen(
    Base.metadata,
    "after_create",
    DDL(DECISIONS_VIEW).execute_if(dialect="sqlite"),  # type: ignore[no-untyped-call]
)
event.listen(
    Base.metadata,
    "after_create",
    DDL(DECISIONS_VIEW_POSTGRES).execute_if(  # type: ignore[no-untyped-call]
        dialect="postgresql"
    ),
)
for _name, _sql in {"decisions": DECISIONS_VIEW, **READ_VIEWS}.items():
    if _name != "decisions":
        event.listen(Base.metadata, "after_create", DDL(_sql))  # type: ignore[no-untyped-call]
    event.listen(
        Base.metadata,
        "before_drop",
        DDL(f"DROP VIEW IF EXISTS {_name}"),  # type: ignore[no-untyped-call]
    )


# The Core tables, for statements built with select(), insert() and friends. A mapped class's
# __table__ is typed as a FromClause, so each is cast to its Table once, here.
ENTRIES = cast(Table, EntryRow.__table__)
KEYS = cast(Table, KeyRow.__table__)
CANDIDATE_SETS = cast(Table, CandidateSet.__table__)
CANDIDATES = cast(Table, Candidate.__table__)
DEVICES = cast(Table, DeviceRow.__table__)
TIMING_RECORDS = cast(Table, TimingRecordRow.__table__)
CANDIDATE_TIMINGS = cast(Table, CandidateTimingRow.__table__)
MODELS = cast(Table, ModelRow.__table__)
VALIDATIONS = cast(Table, ValidationRow.__table__)
RUNS = cast(Table, RunRow.__table__)
PENDING = cast(Table, PendingRow.__table__)
CLAIMS = cast(Table, ClaimRow.__table__)

# Revision 0006's tables (sync's change numbers, origins and marks) join the metadata wherever
# the models are imported, so that create_all always makes the whole schema.
from tunecache.store import changes as _changes  # noqa: E402, F401
