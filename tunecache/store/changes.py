"""The tables sync keeps (revision 0006): a change number for every entry, where an entry came
from, and how far each remote has been synced.

Every write of an entry or of a verdict on it gives the entry a new change number, from one
counter per database (`entry_changes`): a trigger does it, so every writer is counted (the store
API, the batch path, the Triton client's stdlib writer, an import) without knowing of sync. A
sync reads the entries whose number is above the high-water mark it keeps for that remote
(`sync_marks`) and moves the mark to the highest number it read. Writers of one database are
serialised (SQLite's `BEGIN IMMEDIATE`, the fleet store's writers' advisory lock), so numbers are
given in commit order: a snapshot that sees a change sees every change numbered below it, and a
transaction still running numbers its changes above every committed one. On SQLite the counter
is a row of `sync_store`; on PostgreSQL a sequence (one row updated 10^5 times in one transaction
would leave PostgreSQL a chain of 10^5 dead versions to walk).

`sync_store` also names the database with a random id made when its table is made: a mark kept
for a store that was dropped and made again is not trusted. `entry_origins` says which host a
synced entry was tuned on and where it came from; a local write that changes the decision (its
choice, or the run that wrote it) drops the entry's origin row, so `inspect` never credits a
decision to a host that did not make it.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import (
    DDL,
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    event,
)
from sqlalchemy.orm import Mapped, mapped_column

from tunecache.store.models import Base, UTCDateTime, utcnow

__all__ = [
    "CHANGE_SEQUENCE",
    "ENTRY_CHANGES",
    "ENTRY_ORIGINS",
    "ORIGINS_VIEW",
    "POSTGRES_DDL",
    "SQLITE_DDL",
    "SQLITE_TRIGGERS",
    "SYNC_MARKS",
    "SYNC_STORE",
    "EntryChangeRow",
    "EntryOriginRow",
    "SyncMarkRow",
    "SyncStoreRow",
]

#: the PostgreSQL sequence that numbers changes
CHANGE_SEQUENCE = "entry_change_seq"


class SyncStoreRow(Base):
    """The one row that names this database for sync, and (SQLite) its change counter."""

    __tablename__ = "sync_store"
    __table_args__ = (CheckConstraint("id = 1", name="one_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    store_id: Mapped[str] = mapped_column(String(32))
    #: the last change number given (SQLite; PostgreSQL's is `entry_change_seq`)
    seq: Mapped[int] = mapped_column(BigInteger, default=0)


class EntryChangeRow(Base):
    """The number of an entry's latest change: what sync reads above a mark."""

    __tablename__ = "entry_changes"
    __table_args__ = (Index(None, "seq"),)

    entry_id: Mapped[int] = mapped_column(
        ForeignKey("entries.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    seq: Mapped[int] = mapped_column(BigInteger)


class EntryOriginRow(Base):
    """Where a synced entry came from: the host that tuned it, and the store or host it was
    synced from."""

    __tablename__ = "entry_origins"

    entry_id: Mapped[int] = mapped_column(
        ForeignKey("entries.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    host: Mapped[str] = mapped_column(Text)
    #: the masked URL of the store it was pulled from, or `host NAME` that pushed it
    source: Mapped[str] = mapped_column(Text)
    synced_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SyncMarkRow(Base):
    """How far one direction of sync with one remote store has gone for one device identity:
    the highest change number it has copied from the side it reads."""

    __tablename__ = "sync_marks"

    #: the remote store's `sync_store.store_id`
    store_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    #: the device identity's fingerprint
    device: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: "pull" (the mark is the remote's change number) or "push" (this database's)
    direction: Mapped[str] = mapped_column(String(8), primary_key=True)
    #: the id of the database whose change numbers `seq` counts
    counted_in: Mapped[str] = mapped_column(String(32))
    seq: Mapped[int] = mapped_column(BigInteger)
    #: the remote, as messages name it (its URL masked, or its file)
    remote: Mapped[str] = mapped_column(Text)
    synced_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


SYNC_STORE = cast(Table, SyncStoreRow.__table__)
ENTRY_CHANGES = cast(Table, EntryChangeRow.__table__)
ENTRY_ORIGINS = cast(Table, EntryOriginRow.__table__)
SYNC_MARKS = cast(Table, SyncMarkRow.__table__)


def _sqlite_trigger(name: str, event_: str, table: str, row: str, body: str = "") -> str:
    """A SQLite trigger that gives the entry `row` (NEW.id, NEW.entry_id or OLD.entry_id) of
    `table` a new change number after `event_`."""
    return (
        f"\nCREATE TRIGGER {name} AFTER {event_} ON {table} BEGIN\n"
        f"{body}"
        "UPDATE sync_store SET seq = seq + 1;\n"
        f"INSERT OR REPLACE INTO entry_changes (entry_id, seq)\n"
        f"SELECT {row}, seq FROM sync_store\n"
        f"WHERE EXISTS (SELECT 1 FROM entries WHERE id = {row});\n"
        "END\n"
    )


#: the triggers that number changes on SQLite, by name (frozen: revision 0006 makes these)
SQLITE_TRIGGERS = {
    "entry_changes_after_entry_insert": _sqlite_trigger(
        "entry_changes_after_entry_insert", "INSERT", "entries", "NEW.id"
    ),
    "entry_changes_after_entry_update": _sqlite_trigger(
        "entry_changes_after_entry_update",
        "UPDATE",
        "entries",
        "NEW.id",
        "DELETE FROM entry_origins WHERE entry_id = NEW.id\n"
        "AND (NEW.choice <> OLD.choice OR NEW.run_id IS NOT OLD.run_id);\n",
    ),
    "entry_changes_after_verdict_insert": _sqlite_trigger(
        "entry_changes_after_verdict_insert", "INSERT", "validations", "NEW.entry_id"
    ),
    "entry_changes_after_verdict_update": _sqlite_trigger(
        "entry_changes_after_verdict_update", "UPDATE", "validations", "NEW.entry_id"
    ),
    "entry_changes_after_verdict_delete": _sqlite_trigger(
        "entry_changes_after_verdict_delete", "DELETE", "validations", "OLD.entry_id"
    ),
}

#: the statements that make the rest on SQLite: the store's row, with its random id
SQLITE_DDL = (
    "INSERT INTO sync_store (id, store_id, seq) VALUES (1, lower(hex(randomblob(16))), 0)",
    *SQLITE_TRIGGERS.values(),
)

_POSTGRES_FUNCTION = """
CREATE FUNCTION tunecache_entry_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed integer;
BEGIN
    IF TG_TABLE_NAME = 'entries' THEN
        changed := NEW.id;
        IF TG_OP = 'UPDATE' AND (NEW.choice <> OLD.choice
                OR NEW.run_id IS DISTINCT FROM OLD.run_id) THEN
            DELETE FROM entry_origins WHERE entry_id = NEW.id;
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        changed := OLD.entry_id;
    ELSE
        changed := NEW.entry_id;
    END IF;
    INSERT INTO entry_changes (entry_id, seq)
    SELECT changed, nextval('entry_change_seq')
    WHERE EXISTS (SELECT 1 FROM entries WHERE id = changed)
    ON CONFLICT (entry_id) DO UPDATE SET seq = EXCLUDED.seq;
    RETURN NULL;
END
$$
"""

#: the statements that make the rest on PostgreSQL: the store's row, the sequence, the
#: function and its triggers
POSTGRES_DDL = (
    "INSERT INTO sync_store (id, store_id, seq) "
    "VALUES (1, md5(random()::text || clock_timestamp()::text), 0)",
    f"CREATE SEQUENCE {CHANGE_SEQUENCE}",
    _POSTGRES_FUNCTION,
    """
CREATE TRIGGER entry_changes_after_entry_write AFTER INSERT OR UPDATE ON entries
FOR EACH ROW EXECUTE FUNCTION tunecache_entry_changed()
""",
    """
CREATE TRIGGER entry_changes_after_verdict_write AFTER INSERT OR UPDATE OR DELETE ON validations
FOR EACH ROW EXECUTE FUNCTION tunecache_entry_changed()
""",
)

#: the read contract's view of origins (stdlib readers: `inspect`)
ORIGINS_VIEW = """
CREATE VIEW read_entry_origins_v1 AS
SELECT
    o.entry_id AS entry_id,
    o.host AS host,
    o.source AS source,
    o.synced_at AS synced_at
FROM entry_origins o
"""

# create_all makes a new database in one step: the rows, sequence and triggers come after all
# the tables, in each dialect's SQL. (DDL's constructor carries no annotations, hence the ignores.)
for _sql in SQLITE_DDL:
    event.listen(
        Base.metadata,
        "after_create",
        DDL(_sql).execute_if(dialect="sqlite"),  # type: ignore[no-untyped-call]
    )
for _sql in POSTGRES_DDL:
    event.listen(
        Base.metadata,
        "after_create",
        DDL(_sql).execute_if(  # type: ignore[no-untyped-call]
            dialect="postgresql"
        ),
    )
event.listen(Base.metadata, "after_create", DDL(ORIGINS_VIEW))  # type: ignore[no-untyped-call]
event.listen(
    Base.metadata,
    "before_drop",
    DDL("DROP VIEW IF EXISTS read_entry_origins_v1"),  # type: ignore[no-untyped-call]
)
event.listen(
    Base.metadata,
    "after_drop",
    DDL(  # type: ignore[no-untyped-call]
        "DROP FUNCTION IF EXISTS tunecache_entry_changed() CASCADE; "
        f"DROP SEQUENCE IF EXISTS {CHANGE_SEQUENCE}"
    ).execute_if(dialect="postgresql"),
)
