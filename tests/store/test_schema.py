"""The schema each revision has, as tunecache.store.schema keeps it, and how a file's schema is
compared with it and mended."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory

from tests.reliability.harness import DEVICE, golden_revision, goldens
from tunecache.cache import Cache
from tunecache.store import migrate, reading, schema
from tunecache.store.engine import make_engine, transaction
from tunecache.store.schema import Drift


def _objects(db: Path) -> list[tuple[str, str, str, str | None]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(schema.SCHEMA_QUERY).fetchall()
    finally:
        conn.close()


def _digests(db: Path) -> dict[tuple[str, str], str]:
    return {
        (type_, name): schema.digest(type_, sql)
        for type_, name, _, sql in _objects(db)
        if name != "alembic_version"
    }


def _replayed(tmp_path: Path, revision: str) -> Path:
    db = tmp_path / f"rev{revision}.db"
    engine = make_engine(db)
    with engine.begin() as conn:
        command.upgrade(migrate.alembic_config(conn), revision)
    engine.dispose()
    return db


def _written(objects: dict[tuple[str, str], tuple[str, str]]) -> str:
    """OBJECTS as it is written in schema.py, for the message of a test that finds it stale."""
    lines = [f"    {key!r}: {value!r}," for key, value in objects.items()]
    return "OBJECTS = {\n" + "\n".join(lines).replace("'", '"') + "\n}"


def test_revisions_are_the_migration_scripts_and_head_is_the_last() -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config())
    assert tuple(reversed([r.revision for r in script.walk_revisions()])) == schema.REVISIONS
    assert schema.REVISIONS[-1] == migrate.HEAD == reading.HEAD


def test_objects_are_what_the_migrations_make_at_each_revision_and_create_all_at_head(
    tmp_path: Path,
) -> None:
    made: dict[tuple[str, str], tuple[str, str]] = {}
    for revision in schema.REVISIONS:
        found = _digests(_replayed(tmp_path, revision))
        for key, sum_ in found.items():
            made.setdefault(key, (revision, sum_))
            # No revision changed what an older one made (schema.OBJECTS has one digest each).
            assert made[key][1] == sum_, (key, revision)
        assert found == schema.expected(revision), f"stale, should be:\n{_written(made)}"
    assert made == schema.OBJECTS, f"stale, should be:\n{_written(made)}"
    fresh = tmp_path / "fresh.db"
    with Cache.open(device=DEVICE, path=fresh):
        pass
    assert _digests(fresh) == schema.expected(migrate.HEAD)


@pytest.mark.parametrize("golden", goldens(), ids=lambda p: p.name)
def test_every_golden_database_is_its_revisions_schema_before_and_after_its_upgrade(
    golden: Path, tmp_path: Path
) -> None:
    revision = golden_revision(golden)
    assert schema.drift(_objects(golden), revision) == ()
    db = tmp_path / "cache.db"
    shutil.copy(golden, db)
    with Cache.open(device=DEVICE, path=db) as cache:
        assert cache.outcome is migrate.Outcome.UPGRADED
    assert schema.drift(_objects(db), migrate.HEAD) == ()


def test_the_canonical_form_ignores_spelling_not_meaning() -> None:
    table = (
        "CREATE TABLE t (\n\ta INTEGER NOT NULL, \n\tb TEXT, \n\tCONSTRAINT pk PRIMARY KEY (a),"
        " \n\tCONSTRAINT ck CHECK (b IN ('x', 'y')), \n\tUNIQUE (b)\n)"
    )
    respelled = (
        'CREATE TABLE "t"(a INTEGER NOT NULL,b TEXT,UNIQUE(b),'
        "CONSTRAINT ck CHECK(b IN ('x','y')),CONSTRAINT pk PRIMARY KEY(a))"
    )
    assert schema.digest("table", table) == schema.digest("table", respelled)
    # The order of the columns is meaning; so is a name, a type, a constraint.
    for changed in (
        table.replace("a INTEGER NOT NULL, \n\tb TEXT", "b TEXT, \n\ta INTEGER NOT NULL"),
        table.replace("b TEXT", "b BLOB"),
        table.replace("UNIQUE (b)", "UNIQUE (a)"),
        table.replace("'y'", "'z'"),
    ):
        assert schema.digest("table", changed) != schema.digest("table", table)
    view = "CREATE VIEW v AS\nSELECT\n    x AS y\nFROM t\n"
    assert schema.digest("view", view) == schema.digest(
        "view", "CREATE VIEW v AS SELECT x AS y FROM t"
    )
    assert schema.digest("view", view) != schema.digest("view", view.replace("x AS", "z AS"))


def test_drift_names_each_difference_and_leaves_other_peoples_objects_alone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cache.db"
    with Cache.open(device=DEVICE, path=db):
        pass
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        DROP TABLE candidate_timings;
        DROP INDEX ix_runs_status;
        DROP VIEW decisions; CREATE VIEW decisions AS SELECT 1 AS entry_id;
        CREATE INDEX ix_extra ON keys (dims);
        CREATE TABLE notes (text TEXT); CREATE INDEX ix_notes ON notes (text);
        CREATE VIEW my_entries AS SELECT * FROM entries;
        """
    )
    conn.close()
    found = schema.drift(_objects(db), migrate.HEAD)
    assert found == (
        Drift("missing", "table", "candidate_timings"),
        Drift("unexpected", "index", "ix_extra"),
        Drift("missing", "index", "ix_runs_status"),
        Drift("altered", "view", "decisions"),
    )
    assert [d.holds_data for d in found] == [True, False, False, False]
    assert schema.describe(found, most=2) == (
        "table candidate_timings missing, index ix_extra unexpected and 2 more"
    )
    assert schema.drift(_objects(db), "0099") == ()  # a newer revision's schema is its own


def test_mend_makes_views_and_indexes_again_once_and_keeps_every_row(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    with Cache.open(device=DEVICE, path=db) as cache:
        cache.put("conv_F32_h1", choice="a", candidates=["a", "b"])
    fresh = sorted(_objects(db))
    conn = sqlite3.connect(db)
    conn.executescript(
        "DROP VIEW read_runs_v1; DROP INDEX ix_entries_key_id;"
        " CREATE VIEW ix_entries_key_id AS SELECT 1;"  # its name, taken by a view
    )
    conn.close()
    engine = make_engine(db)
    try:
        with transaction(engine) as conn:
            assert [str(d) for d in migrate.mend(conn)] == [
                "index ix_entries_key_id missing",
                "view read_runs_v1 missing",
            ]
        assert migrate.mend_schema(engine, db, 1.0) == ()  # nothing left to do
    finally:
        engine.dispose()
    assert sorted(_objects(db)) == fresh
    with Cache.open(device=DEVICE, path=db) as cache:
        assert cache.count() == 1


def test_a_table_with_its_meaning_changed_is_damage_and_one_respelled_is_not(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cache.db"
    with Cache.open(device=DEVICE, path=db):
        pass
    state = migrate.inspect_file(db, 1.0)
    assert migrate.table_damage(state) == ()
    rows = list(state.objects)
    for i, (type_, name, table, sql) in enumerate(rows):
        if name == "keys":
            assert sql is not None
            rows[i] = (type_, name, table, sql.replace("CREATE TABLE keys", 'CREATE TABLE "keys"'))
        if name == "devices":
            assert sql is not None
            rows[i] = (type_, name, table, sql.replace("\n)", ", \n\tnickname TEXT\n)"))
    respelled = migrate.FileState(state.revisions, state.tables, tuple(rows))
    assert migrate.table_damage(respelled) == (Drift("altered", "table", "devices"),)
