"""A damaged schema is noticed: a view or index gone or altered is made again, a table gone or
altered is damage (case 3 of issue 16: after `drop view read_entries_v1`, every command said
healthy and the resolver answered the heuristic for good)."""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import tunecache
from tests.reliability.harness import DEVICE, schema
from tunecache.cache import Cache
from tunecache.cli import main
from tunecache.errors import StoreError, TunecacheWarning
from tunecache.store import quarantine

NAMES = ("direct", "im2col", "winograd")
KEY = "conv_F32_m64_k3"


def _sql(db: Path, script: str) -> None:
    """Change the file as a person with the sqlite3 shell would."""
    conn = sqlite3.connect(db)
    try:
        conn.executescript(script)
    finally:
        conn.close()


@pytest.fixture
def own() -> Iterator[Path]:
    """This machine's own cache (where the commands look by default) with one accepted entry."""
    with Cache.open() as cache:
        cache.put(KEY, choice="im2col", candidates=NAMES, heuristic="direct", status="accepted")
        db = cache.path
    yield db


def _resolve() -> tuple[str, list[str]]:
    """How a fresh table answers KEY, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = tunecache.Table.open(use="all")
        try:
            answer = table.resolve(KEY, NAMES, "direct")
        finally:
            table.close()
    return answer.source, [str(w.message) for w in caught]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_a_dropped_view_is_named_by_every_command_and_doctor_repair_brings_it_back(
    own: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = schema(own)
    _sql(own, "DROP VIEW read_entries_v1")

    source, said = _resolve()
    assert source == "heuristic"
    [message] = said
    assert "read_entries_v1" in message and "tunecache doctor --repair" in message
    assert "upgrade" not in message  # the revision is current: opening it fixes nothing

    for command in ("where", "list"):
        status, out, err = _run(capsys, command)
        assert status == 0, err
        assert "read_entries_v1" in err and "tunecache doctor --repair" in err, (command, err)

    status, out, _ = _run(capsys, "doctor")
    assert status == 1
    assert "read_entries_v1" in out and "--repair would make them again" in out
    assert out.rstrip().endswith("problems remain")
    assert "read_entries_v1" not in {row[1] for row in schema(own)}  # doctor alone writes nothing

    status, out, _ = _run(capsys, "doctor", "--repair")
    assert status == 0
    assert "view read_entries_v1 missing" in out and "repaired: make them again" in out
    assert schema(own) == fresh

    status, out, _ = _run(capsys, "doctor")
    assert status == 0 and out.rstrip().endswith("healthy")
    assert _resolve() == ("exact", [])


def test_a_write_makes_missing_or_altered_indexes_and_views_again_in_one_transaction(
    own: Path,
) -> None:
    fresh = schema(own)
    _sql(
        own,
        """
        DROP INDEX ix_keys_signature;
        DROP VIEW read_verdicts_v1;
        CREATE VIEW read_verdicts_v1 AS SELECT 1 AS entry_id;
        CREATE UNIQUE INDEX mine ON entries (choice);
        CREATE TRIGGER forget AFTER INSERT ON entries BEGIN DELETE FROM entries; END;
        """,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Cache.open() as cache:
            assert not caught  # opening only looks
            cache.put("conv_F32_m128_k3", choice="im2col", candidates=NAMES)
            assert cache.count() == 2  # the trigger is gone, the unique index too
    [warning] = caught
    assert issubclass(warning.category, TunecacheWarning)
    for name in ("ix_keys_signature missing", "read_verdicts_v1 altered", "mine unexpected"):
        assert name in str(warning.message)
    assert schema(own) == fresh


@pytest.mark.parametrize(
    "damage",
    [
        "DROP TABLE candidate_timings",
        "ALTER TABLE validations ADD COLUMN note TEXT",
        "ALTER TABLE runs RENAME COLUMN notes TO remarks",
    ],
)
def test_a_missing_or_altered_table_is_damage_moved_aside_at_tunecaches_location(
    own: Path, damage: str
) -> None:
    _sql(own, damage)
    reason = quarantine.problem(own, 5.0)
    assert reason is not None and "damaged" in reason
    with pytest.warns(TunecacheWarning, match="moved aside"), Cache.open() as cache:
        # Salvaged: the rows that could be read are kept, in the schema of its revision.
        assert cache.count() == 1
    assert quarantine.problem(own, 5.0) is None
    moved = list((own.parent / quarantine.QUARANTINE_DIR).glob("*/cache.db"))
    assert len(moved) == 1


def test_a_damaged_table_in_a_file_the_caller_named_is_refused_and_left_as_it_is(
    own: Path, tmp_path: Path
) -> None:
    named = tmp_path / "named.db"
    shutil.copy(own, named)
    _sql(named, "ALTER TABLE entries ADD COLUMN extra INTEGER")
    before = named.read_bytes()
    with pytest.raises(StoreError, match="table entries altered"):
        Cache.open(device=DEVICE, path=named)
    assert named.read_bytes() == before


def test_a_table_only_spelled_differently_is_not_damage(own: Path) -> None:
    # What SQLite's own ALTER TABLE RENAME leaves behind: the same table, its name quoted.
    conn = sqlite3.connect(own)
    try:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA legacy_alter_table = ON")
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'models'").fetchone()
        conn.executescript(
            "BEGIN;"
            + sql.replace("CREATE TABLE models", 'CREATE TABLE "models_new"')
            + "; INSERT INTO models_new SELECT * FROM models; DROP TABLE models;"
            " ALTER TABLE models_new RENAME TO models; COMMIT;"
        )
    finally:
        conn.close()
    assert quarantine.problem(own, 5.0) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Cache.open() as cache:
            assert cache.count() == 1


def test_a_view_a_read_command_needs_gone_is_a_one_line_error_naming_the_repair(
    own: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sql(own, "DROP VIEW read_entry_details_v1")
    status, out, err = _run(capsys, "list")
    assert status != 0 and out == ""
    [line] = err.splitlines()
    assert line.startswith("tunecache: error:") and "tunecache doctor --repair" in line
    assert _run(capsys, "doctor", "--repair")[0] == 0
    status, out, err = _run(capsys, "list")
    assert status == 0 and err == "" and KEY in out


def test_the_resolver_names_the_repair_for_an_altered_view_too(own: Path) -> None:
    # Redefined to serve another entry's choice: read as it is, it would answer wrongly.
    _sql(
        own,
        "DROP VIEW read_entries_v1; CREATE VIEW read_entries_v1 AS SELECT e.id AS entry_id,"
        " k.text AS key, k.signature AS signature, k.dims AS dims, cs.checksum AS checksum,"
        " 'winograd' AS choice, e.heuristic AS heuristic, e.status AS status,"
        " d.fingerprint AS device, e.updated_at AS updated_at FROM entries e"
        " JOIN keys k ON k.id = e.key_id JOIN candidate_sets cs ON cs.id = e.candidate_set_id"
        " JOIN devices d ON d.id = e.device_id",
    )
    source, said = _resolve()
    assert source == "heuristic"
    [message] = said
    assert "view read_entries_v1 altered" in message and "tunecache doctor --repair" in message
    with Cache.open() as cache:
        assert [str(d) for d in cache.mend_schema()] == ["view read_entries_v1 altered"]
    assert _resolve() == ("exact", [])
