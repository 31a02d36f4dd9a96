"""The first schema: devices, candidate sets, keys, entries, timing records, models,
validations and runs.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-30 15:36:55.625582
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "candidate_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidate_sets")),
        sa.UniqueConstraint(
            "signature", "checksum", name=op.f("uq_candidate_sets_signature_checksum")
        ),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("cpu", sa.Text(), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.Column("accelerator", sa.Text(), nullable=True),
        sa.Column("client", sa.Text(), nullable=False),
        sa.Column("client_version", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_devices")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_devices_fingerprint")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("dims", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_keys")),
        sa.UniqueConstraint("text", name=op.f("uq_keys_text")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_keys_signature"), ["signature"], unique=False)

    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("name", "fingerprint", name=op.f("uq_models_name_fingerprint")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "candidates",
        sa.Column("set_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["set_id"],
            ["candidate_sets.id"],
            name=op.f("fk_candidates_set_id_candidate_sets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("set_id", "position", name=op.f("pk_candidates")),
        sa.UniqueConstraint("set_id", "name", name=op.f("uq_candidates_set_id_name")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=True),
        sa.Column("tool_version", sa.Text(), nullable=False),
        sa.Column("hostname", sa.Text(), nullable=False),
        sa.Column("platform", sa.Text(), nullable=False),
        sa.Column("python_version", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'finished', 'interrupted', 'failed')",
            name=op.f("ck_runs_status"),
        ),
        sa.ForeignKeyConstraint(
            ["device_id"],
            ["devices.id"],
            name=op.f("fk_runs_device_id_devices"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("candidate_set_id", sa.Integer(), nullable=False),
        sa.Column("choice", sa.Text(), nullable=False),
        sa.Column("heuristic", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('unvalidated', 'accepted', 'rejected')", name=op.f("ck_entries_status")
        ),
        sa.ForeignKeyConstraint(
            ["candidate_set_id"],
            ["candidate_sets.id"],
            name=op.f("fk_entries_candidate_set_id_candidate_sets"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["device_id"],
            ["devices.id"],
            name=op.f("fk_entries_device_id_devices"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["key_id"], ["keys.id"], name=op.f("fk_entries_key_id_keys"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_entries_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entries")),
        sa.UniqueConstraint(
            "device_id",
            "key_id",
            "candidate_set_id",
            name=op.f("uq_entries_device_id_key_id_candidate_set_id"),
        ),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_entries_key_id"), ["key_id"], unique=False)

    op.create_table(
        "timing_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("format_version", sa.Integer(), nullable=False),
        sa.Column("best", sa.Text(), nullable=True),
        sa.Column("best_median_s", sa.Float(), nullable=True),
        sa.Column("heuristic_median_s", sa.Float(), nullable=True),
        sa.Column("candidates_count", sa.Integer(), nullable=False),
        sa.Column("samples_count", sa.Integer(), nullable=False),
        sa.Column("failures_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["entry_id"],
            ["entries.id"],
            name=op.f("fk_timing_records_entry_id_entries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_timing_records")),
        sa.UniqueConstraint("entry_id", name=op.f("uq_timing_records_entry_id")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "validations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.Text(), nullable=False),
        sa.Column("gain", sa.Float(), nullable=True),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("confirmations", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "verdict IN ('validated', 'masked')", name=op.f("ck_validations_verdict")
        ),
        sa.ForeignKeyConstraint(
            ["entry_id"],
            ["entries.id"],
            name=op.f("fk_validations_entry_id_entries"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_validations_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_validations_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_validations")),
        sa.UniqueConstraint("model_id", "entry_id", name=op.f("uq_validations_model_id_entry_id")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("validations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_validations_entry_id"), ["entry_id"], unique=False)

    op.create_table(
        "candidate_timings",
        sa.Column("record_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("median_s", sa.Float(), nullable=True),
        sa.Column("min_s", sa.Float(), nullable=True),
        sa.Column("max_s", sa.Float(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("inner_loops", sa.Integer(), nullable=False),
        sa.Column("pruned", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["record_id"],
            ["timing_records.id"],
            name=op.f("fk_candidate_timings_record_id_timing_records"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("record_id", "name", name=op.f("pk_candidate_timings")),
    )


def downgrade() -> None:
    op.drop_table("candidate_timings")
    with op.batch_alter_table("validations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_validations_entry_id"))

    op.drop_table("validations")
    op.drop_table("timing_records")
    with op.batch_alter_table("entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_entries_key_id"))

    op.drop_table("entries")
    op.drop_table("runs")
    op.drop_table("candidates")
    op.drop_table("models")
    with op.batch_alter_table("keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_keys_signature"))

    op.drop_table("keys")
    op.drop_table("devices")
    op.drop_table("candidate_sets")
