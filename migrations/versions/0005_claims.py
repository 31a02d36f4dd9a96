"""The claims revision: one tuner per key, across the processes and hosts of one store.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

A tuner claims a key of a device identity before it benches it: a row of `claims` names the
holder (its host, its pid and a token of its own) and when the claim expires unless the holder
renews it. Another tuner that meets the key waits for the holder, or tunes other keys meanwhile,
and reuses what the holder wrote; a claim whose holder was killed expires
(`tunecache.store.claims`). The token is indexed: a tuner renews and releases all its claims at
once.

No row of another table changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("token", sa.String(length=32), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("device", "key", name=op.f("pk_claims")),
    )
    with op.batch_alter_table("claims", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_claims_token"), ["token"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("claims", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_claims_token"))
    op.drop_table("claims")
