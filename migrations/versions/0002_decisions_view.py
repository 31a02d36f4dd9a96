"""The `decisions` view: one readable row per decision for the sqlite3 shell.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

The view is the read contract for people and scripts without tunecache: later revisions that
change the tables recreate it with the same columns. The SQL is a frozen copy on purpose: a
migration must keep doing what it did when it was released, whatever the models say later.

On PostgreSQL (a fleet store) the same columns come from PostgreSQL's own aggregate: SQLite's
group_concat is string_agg there, and PostgreSQL names every subquery in FROM.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DECISIONS_VIEW = """
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
JOIN keys k ON k.id = e.key_id
JOIN devices d ON d.id = e.device_id
JOIN candidate_sets cs ON cs.id = e.candidate_set_id
"""


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


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute(DECISIONS_VIEW_POSTGRES if postgres else DECISIONS_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS decisions")
