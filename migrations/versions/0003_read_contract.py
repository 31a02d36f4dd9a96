"""The resolver's read contract: three versioned views that stdlib sqlite3 reads.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

The resolver runs in the host program's hot path and must not import SQLAlchemy, so it reads the
database with the stdlib `sqlite3` module, through these views only. Their names carry a version:
later revisions keep every `_v1` column with its meaning (recreating the views over new tables if
they must), and a change that cannot keep them adds `_v2` views beside them. The SQL is a frozen
copy on purpose: a migration must keep doing what it did when it was released.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = {
    "read_entries_v1": """
CREATE VIEW read_entries_v1 AS
SELECT
    e.id AS entry_id,
    k.text AS key,
    k.signature AS signature,
    k.dims AS dims,
    cs.checksum AS checksum,
    e.choice AS choice,
    e.heuristic AS heuristic,
    e.status AS status,
    d.fingerprint AS device,
    e.updated_at AS updated_at
FROM entries e
JOIN keys k ON k.id = e.key_id
JOIN candidate_sets cs ON cs.id = e.candidate_set_id
JOIN devices d ON d.id = e.device_id
""",
    "read_verdicts_v1": """
CREATE VIEW read_verdicts_v1 AS
SELECT
    v.entry_id AS entry_id,
    m.name AS model,
    m.fingerprint AS model_fingerprint,
    v.verdict AS verdict,
    v.gain AS gain,
    v.updated_at AS updated_at
FROM validations v
JOIN models m ON m.id = v.model_id
""",
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
}


def upgrade() -> None:
    for sql in VIEWS.values():
        op.execute(sql)


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
