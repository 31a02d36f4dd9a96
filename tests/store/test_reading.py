"""The read commands' reader (tunecache.store.reading): which files it reads, what it answers,
and the plan of every statement it runs."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.test_readonly import _as_another_user, shared  # noqa: F401
from tests.store.test_queries import OLD, Stock
from tests.store_helpers import NAMES, sql
from tunecache.cache import Cache
from tunecache.codec import encode
from tunecache.device import Device
from tunecache.errors import StoreError, TunecacheWarning
from tunecache.store import migrate, queries, reading
from tunecache.store.models import ENTRY_STATUSES, READ_VIEWS
from tunecache.store.reading import ENTRY_COLUMNS, MODEL_COLUMNS, VERDICT_COLUMNS, CacheReader

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture
def stock(cache: Cache) -> Stock:
    """The `cache` fixture, stocked as the queries tests stock it."""
    return Stock(cache)


@pytest.fixture
def reader(stock: Stock) -> Iterator[CacheReader]:
    """A reader of the stocked cache's file, for its device."""
    found = CacheReader.open(stock.cache.path, stock.cache.device.fingerprint)
    assert found is not None
    with contextlib.closing(found):
        yield found


def test_the_reader_names_the_revision_and_statuses_the_store_has() -> None:
    assert reading.HEAD == migrate.HEAD
    assert reading.ENTRY_STATUSES == ENTRY_STATUSES
    assert set(reading.VIEWS) <= {*READ_VIEWS, "decisions", "read_entry_origins_v1"}


def _ids(reader: CacheReader, where: dict[str, Any] | None = None, **options: Any) -> list[int]:
    found = reader.entries(where or {}, **options)
    return [row[0] for chunk in found for row in chunk]


def _named(columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [dict(zip(columns, row, strict=True)) for row in rows]


@pytest.mark.parametrize(
    "where",
    [
        {},
        {"op": "conv"},
        {"op": "convx"},
        {"op": "%"},
        {"op": "con"},
        {"op": "matmul_F32"},
        {"signature": "conv_F32"},
        {"signature": "conv"},
        {"key": "conv_F32_m1"},
        {"model": "bert"},
        {"model": "bert", "status": "accepted"},
        {"status": "accepted"},
        {"older_than": OLD + timedelta(days=1)},
        {"older_than": OLD},
        {"newer_than": OLD},
        {"newer_than": OLD + timedelta(days=1)},
    ],
    ids=repr,
)
def test_entries_are_the_ones_the_store_selects_in_its_order(
    stock: Stock, reader: CacheReader, where: dict[str, Any]
) -> None:
    assert _ids(reader, where) == stock.ids(**where)
    assert reader.count(where) == len(stock.ids(**where))


def test_entries_by_id_cut_at_a_limit_and_in_chunks(
    stock: Stock, reader: CacheReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = stock
    assert _ids(reader, {"entry_id": s.plain.id}) == [s.plain.id]
    assert _ids(reader, {"entry_id": s.plain.id, "key": "conv_F32_m1"}) == []
    assert _ids(reader, {"status": None, "op": None}) == s.ids()  # None selects everything
    with pytest.raises(TypeError, match="no such filter of entries: colour"):
        reader.count({"colour": "red"})
    assert _ids(reader, limit=2) == s.ids(limit=2)
    monkeypatch.setattr(reading, "CHUNK", 4)
    chunks = list(reader.entries())
    assert [len(c) for c in chunks] == [4, 2]
    assert [row[0] for c in chunks for row in c] == s.ids()


def test_an_entry_reads_as_the_store_reads_it(stock: Stock, reader: CacheReader) -> None:
    with stock.cache.transaction() as tx:
        stored = {row.id: row for row in queries.entries(tx.conn, stock.device)}
    for chunk in reader.entries():
        for row in _named(ENTRY_COLUMNS, chunk):
            assert row == {f: getattr(stored[row["id"]], f) for f in ENTRY_COLUMNS}
            assert row["updated_at"].tzinfo is not None


def test_verdicts_records_candidates_and_runs(stock: Stock, reader: CacheReader) -> None:
    s = stock
    with s.cache.transaction() as tx:
        stored = queries.verdicts(tx.conn, s.device)
    found = _named(VERDICT_COLUMNS, reader.verdicts([e.id for e in s.all]))
    assert found == [{f: getattr(v, f) for f in VERDICT_COLUMNS} for v in stored]
    assert reader.verdicts([]) == [] and reader.verdicts([s.matmul.id]) == []
    assert reader.verdict_names([e.id for e in s.all]) == [
        (v["entry_id"], v["model"], v["verdict"]) for v in found
    ]
    assert reader.record(s.conv.id) == encode(s.record)
    assert reader.record(s.short.id) is None
    assert reader.candidates("conv_F32", s.short.checksum) == NAMES[:2]
    assert reader.candidates("conv_F32", "no such list") == ()
    with s.cache.run("tune", "the notes") as run_id:
        pass
    with s.cache.transaction() as tx:
        run = queries.run(tx.conn, run_id)
    assert run is not None
    shown = reader.run(run_id)
    assert shown is not None and shown["device"] == s.cache.device.fingerprint
    assert {k: shown[k] for k in run if k != "device_id"} == {
        k: v for k, v in run.items() if k != "device_id"
    }
    assert reader.run(run_id + 1) is None


def test_models_and_counts_are_of_the_readers_device(stock: Stock, twin: Cache) -> None:
    twin.put("gemm_F32_m1", choice="direct", candidates=NAMES)
    found = CacheReader.open(stock.cache.path, stock.cache.device.fingerprint)
    theirs = CacheReader.open(twin.path, twin.device.fingerprint)
    nobody = CacheReader.open(stock.cache.path, "no such device")
    assert found is not None and theirs is not None and nobody is not None
    with contextlib.closing(found), contextlib.closing(theirs), contextlib.closing(nobody):
        assert (found.entry_count(), theirs.entry_count(), nobody.entry_count()) == (6, 1, 0)
        assert found.count() == 6 and theirs.count() == 1 and _ids(nobody) == []
        models = {m["name"]: m for m in _named(MODEL_COLUMNS, found.models())}
        assert (models["bert"]["validated"], models["bert"]["masked"]) == (0, 2)
        assert (models["resnet"]["validated"], models["resnet"]["masked"]) == (1, 0)
        assert models["bert"]["last_verdict"] is not None
        assert [m[:4] + m[5:] for m in theirs.models()] == [
            ("bert", "b1", 0, 0, None),
            ("resnet", "r1", 0, 0, None),
        ]


def test_a_snapshot_sees_the_file_as_it_was(stock: Stock, reader: CacheReader) -> None:
    with reader.snapshot():
        before = reader.count()
        stock.cache.put("gemm_F32_m9", choice="direct", candidates=NAMES)
        with reader.snapshot():  # nested: the same snapshot
            assert reader.count() == before
        assert len(_ids(reader)) == before
    assert reader.count() == before + 1


# --- which files it reads ----------------------------------------------------------------------


def test_a_file_that_is_not_ready_is_left_to_the_store(device: Device, tmp_path: Path) -> None:
    fp = device.fingerprint
    assert CacheReader.open(tmp_path / "none.db", fp) is None
    (tmp_path / "empty.db").touch()
    assert CacheReader.open(tmp_path / "empty.db", fp) is None
    (tmp_path / "text.db").write_bytes(b"not sqlite at all " * 64)
    assert CacheReader.open(tmp_path / "text.db", fp) is None
    other = tmp_path / "other.db"
    sql(other, "CREATE TABLE t (x)")
    assert CacheReader.open(other, fp) is None
    old = tmp_path / "old.db"
    shutil.copy(GOLDEN / "rev0003.db", old)
    assert CacheReader.open(old, fp) is None  # views of 0003 only: the store upgrades it
    with Cache.open(device=device, path=old):
        pass
    upgraded = CacheReader.open(old, fp)
    assert upgraded is not None and upgraded.revision == migrate.HEAD
    upgraded.close()  # a reader holds its connection until closed
    sql(old, "UPDATE alembic_version SET version_num = 'fff9'")
    assert CacheReader.open(old, fp) is None  # newer: the store warns and opens it read-only
    sql(old, "DROP VIEW read_runs_v1")
    sql(old, f"UPDATE alembic_version SET version_num = '{migrate.HEAD}'")
    assert CacheReader.open(old, fp) is None


def test_a_cache_the_store_opened_at_a_newer_revision_is_read_through_its_views(
    device: Device, tmp_path: Path
) -> None:
    db = tmp_path / "future.db"
    with Cache.open(device=device, path=db) as cache:
        cache.put("conv_F32_m1", choice="direct", candidates=NAMES)
    sql(db, "UPDATE alembic_version SET version_num = 'fff9'")
    with (
        pytest.warns(TunecacheWarning, match="newer"),
        Cache.open(device=device, path=db) as cache,
        contextlib.closing(CacheReader.of(cache)) as found,
    ):
        assert found.revision == "fff9" and found.count() == 1
        assert found.readonly_reason == cache.readonly_reason is not None
    sql(db, "DROP VIEW read_models_v1")
    with (
        pytest.warns(TunecacheWarning),
        Cache.open(device=device, path=db) as cache,
        pytest.raises(StoreError, match="read-contract views"),
    ):
        CacheReader.of(cache)


def test_a_frozen_cache_is_read_as_immutable_and_says_why_it_is_read_only(
    device: Device,
    shared: Path,  # noqa: F811  (the read-only tests' fixture: a folder `nobody` can reach)
) -> None:
    folder = shared / "frozen"
    db = folder / "cache.db"
    with Cache.open(device=device, path=db) as cache:
        cache.put("conv_F32_m1", choice="direct", candidates=NAMES)
    sql(db, "SELECT 1")  # the last connection to close checkpoints: no -wal, no -shm left
    assert not Path(f"{db}-shm").exists()
    db.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    folder.chmod(0o555)

    def read() -> dict[str, Any]:
        found = CacheReader.open(db, device.fingerprint)
        if found is None:
            return {"opened": False}
        with contextlib.closing(found):
            return {"opened": True, "count": found.count(), "why": found.readonly_reason}

    # Root ignores permissions: the read runs as another user, as the read-only tests do.
    result = _as_another_user(read)
    assert result["opened"] and result["count"] == 1, result
    assert "not writable" in result["why"] or "read-only" in result["why"], result


def test_the_reader_never_writes(stock: Stock, reader: CacheReader) -> None:
    before = sql(stock.cache.path, "SELECT * FROM entries ORDER BY id")
    conn = reader.connection
    with pytest.raises(sqlite3.OperationalError, match=r"readonly|query_only|attempt to write"):
        conn.execute("DELETE FROM entries")
    assert sql(stock.cache.path, "SELECT * FROM entries ORDER BY id") == before


# --- plans: every statement looks its rows up by an index ----------------------------------------


def _plans(reader: CacheReader, run: Any) -> list[list[str]]:
    """SQLite's plan of every SELECT `run()` makes through `reader`."""
    ran: list[str] = []
    conn = reader.connection
    conn.set_trace_callback(ran.append)
    try:
        run()
    finally:
        conn.set_trace_callback(None)
    plans = []
    for statement in ran:
        if not statement.lstrip().upper().startswith("SELECT"):
            continue
        plans.append([str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + statement)])
    return plans


def _scans(plans: list[list[str]], *sorts_allowed: str) -> list[str]:
    """The steps of `plans` that read a whole table, or sort rows no index orders (except
    where a plan's first step starts with one of `sorts_allowed`)."""
    out = []
    for plan in plans:
        for step in plan:
            sorted_here = "TEMP B-TREE" in step and not plan[0].startswith(sorts_allowed)
            if step.startswith("SCAN ") or "AUTOMATIC" in step or sorted_here:
                out.append(step)
    return out


@pytest.mark.parametrize(
    "where",
    [
        {},
        {"status": "accepted"},
        {"older_than": OLD},
        {"newer_than": OLD},
        {"signature": "conv_F32"},
        {"op": "conv"},
        {"model": "bert"},
    ],
    ids=repr,
)
def test_a_listing_walks_the_devices_index_newest_first_without_sorting(
    reader: CacheReader, where: dict[str, Any]
) -> None:
    [plan] = _plans(reader, lambda: list(reader.entries(where, limit=50)))
    assert _scans([plan]) == [], plan
    assert any("ix_entries_device_id_updated_at" in step for step in plan), plan
    [counted] = _plans(reader, lambda: reader.count(where))
    assert _scans([counted]) == [], counted


def test_an_id_or_a_key_is_looked_up_not_found_by_walking_the_device(reader: CacheReader) -> None:
    for lookup in ({"entry_id": 1}, {"key": "conv_F32_m1"}):
        [plan] = _plans(reader, lambda q=lookup: list(reader.entries(q)))
        [step] = [step for step in plan if step.startswith("SEARCH e ")]
        assert "PRIMARY KEY" in step or "ix_entries_key_id" in step, plan
        # Sorting a key's handful of rows is what the lookup costs.
        assert [s for s in plan if s.startswith("SCAN ")] == [], plan


def test_every_other_question_looks_its_rows_up(stock: Stock, reader: CacheReader) -> None:
    s = stock
    plans = _plans(
        reader,
        lambda: (
            reader.entry_count(),
            reader.verdicts([e.id for e in s.all]),
            reader.verdict_names([e.id for e in s.all]),
            reader.record(s.conv.id),
            reader.candidates("conv_F32", s.conv.checksum),
            reader.run(1),
        ),
    )
    assert len(plans) == 6
    # A chunk's verdicts are sorted by model within each entry, which the entry's index
    # leaves in id order.
    assert _scans(plans, "SEARCH v ") == [], plans
    # The models: one pass over the device's verdicts, grouped; the models table is read
    # whole because every model is listed.
    [grouped, listed] = _plans(reader, reader.models)
    assert _scans([grouped], "SEARCH d ") == [], grouped
    assert listed[0].startswith("SCAN m"), listed
