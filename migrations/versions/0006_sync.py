"""The sync revision: a change number for every entry, where a synced entry came from, and
how far each remote has been synced (`tunecache.store.changes` says how they are used).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

New tables only, no table or view of an earlier revision changes:

- `sync_store`: one row, naming the database by a random id (a mark kept for a store made
  again is not trusted) and, on SQLite, its change counter (PostgreSQL numbers changes with the
  sequence `entry_change_seq`);
- `entry_changes`: each entry's latest change number, set by triggers on `entries` and
  `validations`, indexed by number (what sync reads above a mark);
- `entry_origins`: the host a synced entry was tuned on and where it came from, with its view
  `read_entry_origins_v1` for the stdlib readers (`inspect`);
- `sync_marks`: per remote store, device identity and direction, the highest change number
  copied.

Every entry already there gets change number 1, so that the first push of an upgraded cache
sends it. The SQL is a frozen copy, as in 0003 and 0004.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SQLITE_TRIGGERS = (
    """
CREATE TRIGGER entry_changes_after_entry_insert AFTER INSERT ON entries BEGIN
UPDATE sync_store SET seq = seq + 1;
INSERT OR REPLACE INTO entry_changes (entry_id, seq)
SELECT NEW.id, seq FROM sync_store
WHERE EXISTS (SELECT 1 FROM entries WHERE id = NEW.id);
END
""",
    """
CREATE TRIGGER entry_changes_after_entry_update AFTER UPDATE ON entries BEGIN
DELETE FROM entry_origins WHERE entry_id = NEW.id
AND (NEW.choice <> OLD.choice OR NEW.run_id IS NOT OLD.run_id);
UPDATE sync_store SET seq = seq + 1;
INSERT OR REPLACE INTO entry_changes (entry_id, seq)
SELECT NEW.id, seq FROM sync_store
WHERE EXISTS (SELECT 1 FROM entries WHERE id = NEW.id);
END
""",
    """
CREATE TRIGGER entry_changes_after_verdict_insert AFTER INSERT ON validations BEGIN
UPDATE sync_store SET seq = seq + 1;
INSERT OR REPLACE INTO entry_changes (entry_id, seq)
SELECT NEW.entry_id, seq FROM sync_store
WHERE EXISTS (SELECT 1 FROM entries WHERE id = NEW.entry_id);
END
""",
    """
CREATE TRIGGER entry_changes_after_verdict_update AFTER UPDATE ON validations BEGIN
UPDATE sync_store SET seq = seq + 1;
INSERT OR REPLACE INTO entry_changes (entry_id, seq)
SELECT NEW.entry_id, seq FROM sync_store
WHERE EXISTS (SELECT 1 FROM entries WHERE id = NEW.entry_id);
END
""",
    """
CREATE TRIGGER entry_changes_after_verdict_delete AFTER DELETE ON validations BEGIN
UPDATE sync_store SET seq = seq + 1;
INSERT OR REPLACE INTO entry_changes (entry_id, seq)
SELECT OLD.entry_id, seq FROM sync_store
WHERE EXISTS (SELECT 1 FROM entries WHERE id = OLD.entry_id);
END
""",
)

POSTGRES_DDL = (
    "CREATE SEQUENCE entry_change_seq",
    """
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
""",
    """
CREATE TRIGGER entry_changes_after_entry_write AFTER INSERT OR UPDATE ON entries
FOR EACH ROW EXECUTE FUNCTION tunecache_entry_changed()
""",
    """
CREATE TRIGGER entry_changes_after_verdict_write AFTER INSERT OR UPDATE OR DELETE ON validations
FOR EACH ROW EXECUTE FUNCTION tunecache_entry_changed()
""",
)

ORIGINS_VIEW = """
CREATE VIEW read_entry_origins_v1 AS
SELECT
    o.entry_id AS entry_id,
    o.host AS host,
    o.source AS source,
    o.synced_at AS synced_at
FROM entry_origins o
"""


def _entry_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["entry_id"],
        ["entries.id"],
        name=op.f(f"fk_{table}_entry_id_entries"),
        ondelete="CASCADE",
    )


def upgrade() -> None:
    op.create_table(
        "sync_store",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("store_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_sync_store_one_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sync_store")),
    )
    op.create_table(
        "sync_marks",
        sa.Column("store_id", sa.String(length=32), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("counted_in", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("remote", sa.Text(), nullable=False),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("store_id", "device", "direction", name=op.f("pk_sync_marks")),
    )
    op.create_table(
        "entry_changes",
        sa.Column("entry_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        _entry_fk("entry_changes"),
        sa.PrimaryKeyConstraint("entry_id", name=op.f("pk_entry_changes")),
    )
    with op.batch_alter_table("entry_changes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_entry_changes_seq"), ["seq"], unique=False)
    op.create_table(
        "entry_origins",
        sa.Column("entry_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=False),
        _entry_fk("entry_origins"),
        sa.PrimaryKeyConstraint("entry_id", name=op.f("pk_entry_origins")),
    )
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            "INSERT INTO sync_store (id, store_id, seq) "
            "VALUES (1, md5(random()::text || clock_timestamp()::text), 0)"
        )
        for sql in POSTGRES_DDL:
            op.execute(sql)
        op.execute("INSERT INTO entry_changes (entry_id, seq) SELECT id, 1 FROM entries")
        op.execute("SELECT setval('entry_change_seq', 1)")
    else:
        op.execute(
            "INSERT INTO sync_store (id, store_id, seq) VALUES (1, lower(hex(randomblob(16))), 1)"
        )
        for sql in SQLITE_TRIGGERS:
            op.execute(sql)
        op.execute("INSERT INTO entry_changes (entry_id, seq) SELECT id, 1 FROM entries")
    op.execute(ORIGINS_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS read_entry_origins_v1")
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS tunecache_entry_changed() CASCADE")
        op.execute("DROP SEQUENCE IF EXISTS entry_change_seq")
    else:
        for name in (
            "entry_changes_after_entry_insert",
            "entry_changes_after_entry_update",
            "entry_changes_after_verdict_insert",
            "entry_changes_after_verdict_update",
            "entry_changes_after_verdict_delete",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    for table in ("entry_origins", "entry_changes", "sync_marks", "sync_store"):
        op.drop_table(table)
