"""Schema creation, upgrades under concurrency, and refusal of newer schemas."""

from __future__ import annotations

import hashlib
import multiprocessing
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory

from tests.store_helpers import all_rows
from tunecache.cache import Cache
from tunecache.codec import decode
from tunecache.device import Device
from tunecache.errors import ReadOnlyStoreError, StoreError, TunecacheWarning
from tunecache.store import migrate
from tunecache.store.engine import make_engine, transaction

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _schema(path: Path) -> dict[str, object]:
    """Everything about a database's schema that code can depend on, normalised."""
    with sqlite3.connect(path) as conn:
        out: dict[str, object] = {}
        names = conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        out["objects"] = names
        for kind, name in names:
            if kind == "table":
                sql = conn.execute(
                    "SELECT sql FROM sqlite_master WHERE name = ?", (name,)
                ).fetchone()[0]
                out[f"{name}.autoincrement"] = "AUTOINCREMENT" in sql.upper()
                out[f"{name}.columns"] = conn.execute(f"PRAGMA table_info('{name}')").fetchall()
                # Drop the constraint's ordinal: it follows declaration order, not meaning.
                out[f"{name}.fks"] = sorted(
                    row[2:] for row in conn.execute(f"PRAGMA foreign_key_list('{name}')")
                )
                out[f"{name}.indexes"] = sorted(
                    (row[1], row[2]) for row in conn.execute(f"PRAGMA index_list('{name}')")
                )
            if kind == "view":
                # The read contract is its views' columns, each in its place.
                out[f"{name}.columns"] = [
                    row[1] for row in conn.execute(f"PRAGMA table_info('{name}')")
                ]
        return out


def _digest(path: Path) -> tuple[str, str]:
    """The file's bytes and its journal mode, as read without changing either."""
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        raw.close()
    return hashlib.sha256(path.read_bytes()).hexdigest(), mode


def _outcome_of_open(dbs: list[str], device: Device, barrier: object, queue: object) -> None:
    # One process, several rounds: each round every process opens the same file at once.
    for db in dbs:
        try:
            barrier.wait(60)  # type: ignore[attr-defined]
            with Cache.open(device=device, path=db) as cache:
                queue.put(cache.outcome.value if cache.outcome else None)  # type: ignore[attr-defined]
        except BaseException as error:
            queue.put(repr(error))  # type: ignore[attr-defined]


def _open_all_at_once(dbs: list[Path], device: Device, n: int) -> list[list[object]]:
    """For each database in turn, open it from n processes at once; their outcomes per round."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n)
    queue = ctx.Queue()
    args = ([str(db) for db in dbs], device, barrier, queue)
    procs = [ctx.Process(target=_outcome_of_open, args=args) for _ in range(n)]
    for p in procs:
        p.start()
    rounds = [sorted((queue.get(timeout=120) for _ in procs), key=str) for _ in dbs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return rounds


def test_head_constant_matches_the_scripts() -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config())
    assert script.get_current_head() == migrate.HEAD
    # One straight line of history: a branch would leave some databases unupgradable.
    assert len(script.get_heads()) == 1


def test_models_and_migrations_agree(tmp_path: Path) -> None:
    # Replay the whole history on an empty file, then let alembic compare it with the models.
    db = tmp_path / "replayed.db"
    engine = make_engine(db)
    with engine.begin() as conn:
        command.upgrade(migrate.alembic_config(conn), "head")
    with engine.begin() as conn:
        command.check(migrate.alembic_config(conn))  # raises if autogenerate finds a change
    engine.dispose()
    # create_all + stamp (how a new cache is made) and the replayed history give one schema,
    # views included, which alembic's check does not look at.
    fresh = tmp_path / "fresh.db"
    engine = make_engine(fresh)
    assert migrate.ensure_schema(engine, fresh) is migrate.Outcome.CREATED
    engine.dispose()
    assert _schema(fresh) == _schema(db)


def test_a_new_database_is_created_and_stamped(device: Device, tmp_path: Path) -> None:
    with Cache.open(device=device, root=tmp_path) as cache:
        assert cache.outcome is migrate.Outcome.CREATED
        assert cache.revision() == migrate.HEAD
    with Cache.open(device=device, root=tmp_path) as cache:
        assert cache.outcome is migrate.Outcome.CURRENT


#: The read contract: every `_v1` view with its columns, as docs/cli.md documents them. A later
#: revision keeps each of them, in its place, with its meaning (it may add views beside them).
CONTRACT = {
    "read_entries_v1": "entry_id key signature dims checksum choice heuristic status device "
    "updated_at",
    "read_verdicts_v1": "entry_id model model_fingerprint verdict gain updated_at",
    "read_candidates_v1": "signature checksum position name",
    "read_entry_details_v1": "entry_id key signature dims checksum choice heuristic status "
    "device speedup run_id created_at updated_at",
    "read_verdict_details_v1": "entry_id model model_fingerprint verdict gain rounds "
    "confirmations run_id created_at updated_at",
    "read_records_v1": "entry_id format_version best best_median_s heuristic_median_s "
    "candidates samples failures bytes data created_at",
    "read_runs_v1": "run_id kind status device tool_version hostname platform python_version "
    "pid started_at finished_at notes",
    "read_models_v1": "model model_fingerprint created_at",
    "read_devices_v1": "device cpu threads accelerator client client_version created_at entries",
    "read_entry_origins_v1": "entry_id host source synced_at",
}


def test_the_read_contract_keeps_every_view_and_column(device: Device, tmp_path: Path) -> None:
    with Cache.open(device=device, root=tmp_path) as cache:
        schema = _schema(cache.path)
    for view, columns in CONTRACT.items():
        assert schema[f"{view}.columns"] == columns.split(), view
    assert {n for kind, n in schema["objects"] if kind == "view"} == {*CONTRACT, "decisions"}


#: the golden database of every released revision (tests/golden/make_golden.py), oldest first
GOLDENS = sorted(GOLDEN.glob("rev*.db"))


def test_every_golden_database_is_found() -> None:
    assert [g.name for g in GOLDENS[:3]] == ["rev0001.db", "rev0002.db", "rev0003.db"]


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: p.stem)
def test_golden_database_upgrades_with_its_content(
    golden: Path, device: Device, tmp_path: Path
) -> None:
    db = tmp_path / "old.db"
    shutil.copy(golden, db)
    before = all_rows(db)
    assert before["timing_records"] and before["candidate_timings"] and before["validations"]
    at_head = golden.stem == f"rev{migrate.HEAD}"
    with Cache.open(device=device, path=db) as cache:
        assert cache.outcome is (migrate.Outcome.CURRENT if at_head else migrate.Outcome.UPGRADED)
        assert cache.revision() == migrate.HEAD
    after = all_rows(db)
    assert after.pop("alembic_version") == [(migrate.HEAD,)]
    before.pop("alembic_version")
    # Revision 0006's tables come with the upgrade: every entry with a change number; the
    # tables of 0005 (claims) and 0007 (pending keys) arrive empty.
    made = set(after) - set(before)
    sync_tables = {"entry_changes", "entry_origins", "sync_marks", "sync_store"}
    assert made <= sync_tables | {"claims", "pending"}
    if "entry_changes" in made:
        assert len(after.pop("entry_changes")) == len(after["entries"])
    if made:
        for table in made - {"entry_changes"}:
            rows = after.pop(table)
            assert table in sync_tables or rows == [], table
    assert after == before  # every row of every table, byte for byte
    # The schema a new cache is made with, every index of migration 0004 included.
    assert _schema(db) == _schema_of_new(device, tmp_path)
    blob = after["timing_records"][0][-1]
    assert [c.name for c in decode(blob).candidates] == ["mmm_4x4", "mmm_8x8"]
    with sqlite3.connect(db) as conn:
        decisions = conn.execute(
            "SELECT key, choice, status, validated_by, masked_by, threads FROM decisions "
            "ORDER BY entry_id"
        ).fetchall()
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert decisions == [
        (
            "einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided",
            "mmm_8x8",
            "accepted",
            "llama",
            "enhancer",
            4,
        ),
        (
            "einsum_nk,km->mn_F32_F32_F32_b1_m512_k96_n64_aconst_nstrided",
            "mmm_4x4",
            "rejected",
            None,
            None,
            4,
        ),
        (
            "einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided",
            "mmm_4x4",
            "unvalidated",
            None,
            None,
            1,
        ),
    ]
    # The upgraded file takes new writes beside the old rows.
    with Cache.open(device=device, path=db) as cache:
        cache.put("conv_F32_h8", choice="a", candidates=["a", "b"])
        assert cache.count() == 1


def _future_database(device: Device, db: Path, journal: str) -> None:
    """A cache stamped with a revision from the future, in the given journal mode."""
    with Cache.open(device=device, path=db) as cache:
        cache.put("conv_F32_h8", choice="a", candidates=["a", "b"])
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if journal == "delete":
        conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("UPDATE alembic_version SET version_num = 'fff9_from_the_future'")
    conn.close()
    if journal == "wal-with-frames":
        # Leave a commit in the WAL, as a writer killed before any checkpoint would: a clean
        # close would checkpoint it into the main file.
        code = (
            "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('PRAGMA wal_autocheckpoint = 0'); "
            "c.execute(\"UPDATE entries SET choice = 'b'\"); os._exit(0)"
        )
        subprocess.run([sys.executable, "-c", code, str(db)], check=True)
        assert db.with_name(db.name + "-wal").stat().st_size > 0
        return


@pytest.mark.parametrize("journal", ["delete", "wal", "wal-with-frames"])
def test_a_newer_unknown_revision_is_opened_read_only_and_never_written(
    device: Device, tmp_path: Path, journal: str
) -> None:
    db = tmp_path / "future.db"
    _future_database(device, db, journal)
    before = _digest(db)
    wal = db.with_name(db.name + "-wal")
    wal_before = wal.read_bytes() if wal.exists() else None

    with pytest.warns(TunecacheWarning, match="newer than this tunecache knows"):
        cache = Cache.open(device=device, path=db)
    with cache:
        assert cache.readonly
        want = "b" if journal == "wal-with-frames" else "a"
        assert cache.get("conv_F32_h8", candidates=["a", "b"]).choice == want  # type: ignore[union-attr]
        with pytest.raises(ReadOnlyStoreError, match="read-only"):
            cache.put("conv_F32_h16", choice="a", candidates=["a", "b"])
        with pytest.raises(ReadOnlyStoreError):
            cache.validate(1, model="m", fingerprint="f", verdict="masked")
        # Even a write slipped past the API is refused by SQLite itself.
        with pytest.raises(Exception, match=r"readonly|read-only"), cache.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM entries")
    assert _digest(db) == before  # same bytes, same journal mode: not even a checkpoint
    if wal_before is not None:
        assert wal.read_bytes() == wal_before


def test_a_database_of_another_program_is_refused_untouched(device: Device, tmp_path: Path) -> None:
    db = tmp_path / "theirs.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    before = _digest(db)
    with pytest.raises(StoreError, match="not a tunecache cache"):
        Cache.open(device=device, path=db)
    assert _digest(db) == before == (before[0], "delete")
    assert not db.with_name(db.name + "-wal").exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("INSERT INTO alembic_version VALUES ('zzzz')", "2 schema revisions stamped"),
        (
            "DROP TABLE candidate_timings; DROP TABLE timing_records; "
            "DROP TABLE validations; DROP TABLE entries",
            "lacks the tables entries",
        ),
    ],
)
def test_a_damaged_cache_is_refused_untouched(
    device: Device, tmp_path: Path, damage: str, message: str
) -> None:
    db = tmp_path / "damaged.db"
    shutil.copy(GOLDEN / "rev0001.db", db)
    with sqlite3.connect(db) as conn:
        conn.executescript(damage)
    before = _digest(db)
    with pytest.raises(StoreError, match=message) as info:
        Cache.open(device=device, path=db)
    assert "\n" not in str(info.value)
    assert _digest(db) == before


def test_a_file_that_is_not_sqlite_is_a_one_line_store_error(
    device: Device, tmp_path: Path
) -> None:
    db = tmp_path / "garbage.db"
    db.write_bytes(b"this is not a database, just some text that is long enough" * 100)
    with pytest.raises(StoreError) as info:
        Cache.open(device=device, path=db)
    assert "\n" not in str(info.value)


def test_two_processes_opening_a_fresh_cache_at_once_make_one_schema(
    device: Device, tmp_path: Path
) -> None:
    # Several rounds: the race this guards against (a WAL switch refused at once with
    # SQLITE_BUSY while the other process creates the schema) lost about one round in four.
    dbs = [tmp_path / f"fresh{i}.db" for i in range(16)]
    rounds = _open_all_at_once(dbs, device, 2)
    assert rounds == [["created", "current"]] * len(dbs)
    reference = _schema_of_new(device, tmp_path)
    for db in dbs:
        assert _schema(db) == reference
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM alembic_version").fetchall() == [(1,)]


def _schema_of_new(device: Device, tmp_path: Path) -> dict[str, object]:
    db = tmp_path / "reference.db"
    Cache.open(device=device, path=db).close()
    return _schema(db)


@pytest.mark.slow
def test_eight_processes_opening_an_old_database_at_once_migrate_it_once(
    device: Device, tmp_path: Path
) -> None:
    db = tmp_path / "old.db"
    shutil.copy(GOLDEN / "rev0001.db", db)
    [results] = _open_all_at_once([db], device, 8)
    assert results.count("upgraded") == 1, results
    assert results.count("current") == 7, results
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (migrate.HEAD,)
        ]
        assert conn.execute("SELECT count(*) FROM entries").fetchall() == [(3,)]


def test_migration_scripts_are_found_and_alembic_never_configures_logging(
    monkeypatch: pytest.MonkeyPatch, device: Device, tmp_path: Path
) -> None:
    import logging.config

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("fileConfig would overwrite the host program's logging")

    monkeypatch.setattr(logging.config, "fileConfig", refuse)
    assert (Path(migrate.script_location()) / "env.py").is_file()
    db = tmp_path / "old.db"
    shutil.copy(GOLDEN / "rev0001.db", db)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Cache.open(device=device, path=db) as cache:
            assert cache.outcome is migrate.Outcome.UPGRADED


def test_a_future_table_rebuild_keeps_every_child_row(device: Device, tmp_path: Path) -> None:
    # What a later revision will do to change a column SQLite cannot ALTER: batch mode copies
    # the table, drops the old one and renames the copy. With foreign keys on, the drop would
    # cascade into validations and timing records; the decisions view would block the rename.
    # migration_connection is the environment every upgrade runs in.
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    db = tmp_path / "old.db"
    shutil.copy(GOLDEN / "rev0001.db", db)
    Cache.open(device=device, path=db).close()
    before = all_rows(db)
    schema_before = _schema(db)
    engine = make_engine(db)
    try:
        with migrate.migration_connection(engine, db) as conn:
            ops = Operations(MigrationContext.configure(conn, opts={"render_as_batch": True}))
            for table in ("entries", "keys", "devices"):
                # Reflection does not carry AUTOINCREMENT: without table_kwargs the rebuilt
                # table would silently lose it, and its sqlite_sequence row with it.
                with ops.batch_alter_table(
                    table, recreate="always", table_kwargs={"sqlite_autoincrement": True}
                ):
                    pass
    finally:
        engine.dispose()
    assert all_rows(db) == before
    # Dropping a table drops its triggers: a migration that rebuilds entries or validations
    # makes revision 0006's triggers again, as mend does here.
    engine = make_engine(db)
    try:
        with transaction(engine) as conn:
            assert {d.type for d in migrate.mend(conn)} == {"trigger"}
    finally:
        engine.dispose()
    assert _schema(db) == schema_before
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("SELECT count(*) FROM decisions").fetchone() == (3,)
        assert conn.execute("PRAGMA foreign_keys").fetchone() == (0,)  # a fresh connection
    # The pooled connection got its pragmas back.
    with Cache.open(device=device, path=db) as cache, cache.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA legacy_alter_table").scalar() == 0


def test_a_failed_foreign_key_check_rolls_the_schema_change_back(
    device: Device, tmp_path: Path
) -> None:
    db = tmp_path / "c.db"
    with Cache.open(device=device, path=db) as cache:
        cache.put("conv_F32_h8", choice="a", candidates=["a", "b"])
    before = all_rows(db)
    engine = make_engine(db)
    try:
        with (
            pytest.raises(StoreError, match="dangling references"),
            migrate.migration_connection(engine, db) as conn,
        ):
            conn.exec_driver_sql("DELETE FROM keys")  # entries now point nowhere
    finally:
        engine.dispose()
    assert all_rows(db) == before
