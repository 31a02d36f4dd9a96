"""The fleet-size revision: indexes for maintenance and listing, views for the read commands.

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

The read commands (`where`, `list`, `inspect`, `models`) read through stdlib sqlite3, as the
resolver does, so they get read-contract views of their own beside revision 0003's: an entry's
speedup, run and creation time (`read_entry_details_v1`), a verdict's rounds, confirmations and
run (`read_verdict_details_v1`), a timing record's counts and bytes (`read_records_v1`), the runs
(`read_runs_v1`), the models (`read_models_v1`) and the devices with their entry counts
(`read_devices_v1`). Every `_v1` column keeps its meaning in later revisions. The views' SQL is a
frozen copy, as in 0003: a migration keeps doing what it did when it was released.

No row changes.
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

#: the read commands' views, created after the indexes
VIEWS = {
    "read_entry_details_v1": """
CREATE VIEW read_entry_details_v1 AS
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
    e.speedup AS speedup,
    e.run_id AS run_id,
    e.created_at AS created_at,
    e.updated_at AS updated_at
FROM entries e
JOIN keys k ON k.id = e.key_id
JOIN candidate_sets cs ON cs.id = e.candidate_set_id
JOIN devices d ON d.id = e.device_id
""",
    "read_verdict_details_v1": """
CREATE VIEW read_verdict_details_v1 AS
SELECT
    v.entry_id AS entry_id,
    m.name AS model,
    m.fingerprint AS model_fingerprint,
    v.verdict AS verdict,
    v.gain AS gain,
    v.rounds AS rounds,
    v.confirmations AS confirmations,
    v.run_id AS run_id,
    v.created_at AS created_at,
    v.updated_at AS updated_at
FROM validations v
JOIN models m ON m.id = v.model_id
""",
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


def upgrade() -> None:
    for table, indexes in INDEXES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for columns in indexes:
                batch_op.create_index(
                    batch_op.f(f"ix_{table}_{'_'.join(columns)}"), list(columns), unique=False
                )
    for sql in VIEWS.values():
        op.execute(sql)


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for table, indexes in INDEXES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for columns in indexes:
                batch_op.drop_index(batch_op.f(f"ix_{table}_{'_'.join(columns)}"))
