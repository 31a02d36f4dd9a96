"""Indexes for maintenance and listing at fleet size.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

With 10^5 to 10^6 entries, every question prune, doctor and `list` ask must be answered from
an index, not by scanning a table once per row it checks:

- the foreign keys that had none: `entries.candidate_set_id` (orphaned candidate sets, and the
  cascade when a set is deleted), `entries.run_id` and `validations.run_id` (what an open run
  wrote or judged, and the SET NULL when a run is deleted), `runs.device_id` (orphaned devices);
- `runs.status`: the runs still open, out of every run a fleet cache has logged;
- `entries(device_id, updated_at)`: a device's entries newest first (`list`, ordered by
  updated_at then id, which every index of `entries` ends with) and the age filters, without
  sorting them all.

Indexes only: no row changes, and the read-contract views stay as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: table -> the column lists indexed, as the models declare them
INDEXES = {
    "entries": (("candidate_set_id",), ("run_id",), ("device_id", "updated_at")),
    "validations": (("run_id",),),
    "runs": (("device_id",), ("status",)),
}


def upgrade() -> None:
    for table, indexes in INDEXES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for columns in indexes:
                batch_op.create_index(
                    batch_op.f(f"ix_{table}_{'_'.join(columns)}"), list(columns), unique=False
                )


def downgrade() -> None:
    for table, indexes in INDEXES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for columns in indexes:
                batch_op.drop_index(batch_op.f(f"ix_{table}_{'_'.join(columns)}"))
