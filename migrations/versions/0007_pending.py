"""Pending keys: what a runtime asked for and found no entry for, kept until they are tuned.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

`tunecache.record_misses()` (or TUNECACHE_RECORD_MISSES=1) records, in a process that serves
from the cache, the keys its resolver answered without an entry of their own; `tunecache tune
--pending` benches them offline and clears them (PyTorch TunableOp's record-then-tune-offline
workflow). One row per device fingerprint, key and candidate-list checksum, with the candidate
names, the heuristic, the op's importable name where the process knew it, what answered it,
how many times it was asked, and when first and last. A table of its own: the entries, their
statuses and the read-contract views are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pending",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=False),
        sa.Column("candidates", sa.Text(), nullable=False),
        sa.Column("heuristic", sa.Text(), nullable=False),
        sa.Column("op", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending")),
        sa.UniqueConstraint(
            "device", "key", "checksum", name=op.f("uq_pending_device_key_checksum")
        ),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("pending")
