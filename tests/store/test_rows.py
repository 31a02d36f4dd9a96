"""Every write of tunecache.store.rows, made directly in a write transaction on a real file."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, Table, event

from tests.store_helpers import NAMES, RESNET, judge, sql, timing
from tunecache import codec
from tunecache.cache import Cache
from tunecache.candidates import checksum
from tunecache.device import Device
from tunecache.keys import make_key, parse
from tunecache.store import models as schema
from tunecache.store import queries, rows, upkeep


def _write(cache: Cache, change: Callable[[Connection], Any]) -> Any:
    """Make one change in its own write transaction and return what it returned."""
    with cache.transaction(write=True) as tx:
        return change(tx.conn)


def _counts(cache: Cache, *tables: Table) -> dict[str, int]:
    with cache.transaction() as tx:
        return {t.name: queries.count(tx.conn, t) for t in tables}


# --- rows found or made ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "make", "tables"),
    [
        ("key", lambda conn: rows.key_row(conn, parse("conv_F32_m1")), (schema.KEYS,)),
        (
            "candidate set",
            lambda conn: rows.candidate_set_row(conn, "conv_F32", NAMES, checksum(NAMES)),
            (schema.CANDIDATE_SETS, schema.CANDIDATES),
        ),
        ("model", lambda conn: rows.model_row(conn, "resnet", "r1"), (schema.MODELS,)),
        (
            "device",
            lambda conn: rows.device_row(conn, Device("cpu-x", 2, None, "tunecache", "9")),
            (schema.DEVICES,),
        ),
    ],
)
def test_a_row_is_found_before_it_is_made(
    cache: Cache, what: str, make: Callable[[Connection], int], tables: tuple[Table, ...]
) -> None:
    first = _write(cache, make)
    after_first = _counts(cache, *tables)
    assert set(after_first.values()) != {0}, what
    assert _write(cache, make) == first
    assert _counts(cache, *tables) == after_first  # the second call inserted nothing


def test_a_key_row_keeps_its_text_signature_and_dims(cache: Cache) -> None:
    key = make_key("mm_F32", b=1, m=288)
    assert rows.dims_text(key) == "b=1 m=288"
    key_id = _write(cache, lambda conn: rows.key_row(conn, key))
    assert sql(cache.path, "SELECT id, text, signature, dims FROM keys") == [
        (key_id, "mm_F32_b1_m288", "mm_F32", "b=1 m=288")
    ]


def test_a_candidate_set_is_its_signature_and_checksum(cache: Cache) -> None:
    def make(signature: str, names: tuple[str, ...]) -> int:
        return int(
            _write(cache, lambda c: rows.candidate_set_row(c, signature, names, checksum(names)))
        )

    full = make("conv_F32", NAMES)
    assert make("conv_F32", NAMES[:2]) != full  # another list, another set
    assert make("pool_F32", NAMES) != full  # the same list for another signature too
    assert sql(
        cache.path, "SELECT position, name FROM candidates WHERE set_id = ? ORDER BY position", full
    ) == list(enumerate(NAMES))
    assert sql(cache.path, "SELECT size, checksum FROM candidate_sets WHERE id = ?", full) == [
        (3, checksum(NAMES))
    ]


def test_a_device_row_holds_the_checked_fields(cache: Cache, device: Device) -> None:
    device_id = _write(cache, lambda conn: rows.device_row(conn, device))
    with cache.transaction() as tx:
        assert queries.device_id(tx.conn, device.fingerprint) == device_id
        assert tx.device_id() == device_id  # the cache's own identity
        assert queries.count(tx.conn, schema.DEVICES) == 1


def test_insert_row_returns_the_new_id(cache: Cache) -> None:
    first = _write(
        cache,
        lambda c: rows.insert_row(
            c, schema.MODELS, name="a", fingerprint="", created_at=schema.utcnow()
        ),
    )
    second = _write(
        cache,
        lambda c: rows.insert_row(
            c, schema.MODELS, name="b", fingerprint="", created_at=schema.utcnow()
        ),
    )
    assert second > first
    assert sql(cache.path, "SELECT id, name FROM models ORDER BY id") == [
        (first, "a"),
        (second, "b"),
    ]


# --- entries and their evidence ----------------------------------------------------------------


def _entry(conn: Connection, device: Device, **values: Any) -> int:
    """An entry of conv_F32_m1 against NAMES for `device`, with `values` for its columns."""
    now = schema.utcnow()
    columns = {"choice": "direct", "status": "unvalidated", "created_at": now, "updated_at": now}
    return rows.insert_entry(
        conn,
        rows.device_row(conn, device),
        rows.key_row(conn, parse("conv_F32_m1")),
        rows.candidate_set_row(conn, "conv_F32", NAMES, checksum(NAMES)),
        {**columns, **values},
    )


def test_an_entry_is_inserted_then_overwritten(cache: Cache, device: Device) -> None:
    entry_id = _write(cache, lambda conn: _entry(conn, device, heuristic="im2col"))
    assert cache.get("conv_F32_m1").choice == "direct"  # type: ignore[union-attr]
    _write(cache, lambda conn: rows.update_entry(conn, entry_id, {"choice": "winograd"}))
    got = cache.get("conv_F32_m1")
    assert got is not None and (got.id, got.choice, got.heuristic) == (
        entry_id,
        "winograd",
        "im2col",
    )


def test_a_timing_record_is_stored_with_a_summary_per_candidate(cache: Cache) -> None:
    entry = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES)
    record = timing(3e-5, 1e-5)
    now = schema.utcnow()
    _write(
        cache,
        lambda conn: rows.insert_record(
            conn, entry.id, record, codec.encode(record), "direct", now
        ),
    )
    assert cache.record(entry) == record
    summary = sql(
        cache.path,
        "SELECT format_version, best, best_median_s, heuristic_median_s, candidates_count,"
        " samples_count, failures_count FROM timing_records",
    )
    best, heuristic = record.candidate("im2col").median, record.candidate("direct").median
    assert summary == [(codec.FORMAT_VERSION, "im2col", best, heuristic, 2, 6, 0)]
    assert sql(cache.path, "SELECT name, samples FROM candidate_timings ORDER BY name") == [
        ("direct", 3),
        ("im2col", 3),
    ]


def test_a_record_without_candidates_has_no_summary_rows(cache: Cache) -> None:
    entry = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES)
    empty = codec.TimingRecord()
    now = schema.utcnow()
    _write(
        cache,
        lambda conn: rows.insert_record(conn, entry.id, empty, codec.encode(empty), None, now),
    )
    assert sql(
        cache.path, "SELECT best, heuristic_median_s, candidates_count FROM timing_records"
    ) == [(None, None, 0)]
    assert sql(cache.path, "SELECT count(*) FROM candidate_timings") == [(0,)]


@pytest.mark.parametrize("verdicts", [False, True])
def test_clearing_evidence_takes_the_record_and_only_if_asked_the_verdicts(
    cache: Cache, verdicts: bool
) -> None:
    entry = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES, record=timing(3e-5, 1e-5))
    judge(cache, entry, RESNET)
    _write(cache, lambda conn: rows.clear_evidence(conn, entry.id, verdicts=verdicts))
    assert cache.record(entry) is None
    assert sql(cache.path, "SELECT count(*) FROM candidate_timings") == [(0,)]
    assert cache.verdicts_on(entry) == ({} if verdicts else {"resnet": "validated"})
    assert cache.get("conv_F32_m1") == entry  # the decision itself stays


def test_a_status_is_set_only_on_the_devices_own_entry(cache: Cache, twin: Cache) -> None:
    entry = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES)
    with cache.transaction() as tx:
        mine = tx.device_id()
    theirs = twin.put("conv_F32_m1", choice="direct", candidates=NAMES)
    now = schema.utcnow()
    assert _write(cache, lambda conn: rows.set_status(conn, entry.id, mine, "accepted", now))
    assert not _write(cache, lambda conn: rows.set_status(conn, theirs.id, mine, "accepted", now))
    got = cache.get("conv_F32_m1")
    assert got is not None and (got.status, got.updated_at) == ("accepted", now)
    assert twin.get("conv_F32_m1") == theirs


# --- verdicts ----------------------------------------------------------------------------------


def test_put_verdict_replaces_the_models_earlier_one(cache: Cache) -> None:
    entry = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES)
    model = _write(cache, lambda conn: rows.model_row(conn, "resnet", "r1"))

    def give(verdict: str, rounds: int) -> None:
        now = schema.utcnow()
        values = {"verdict": verdict, "gain": None, "rounds": rounds, "confirmations": 0}
        values |= {"run_id": None, "updated_at": now}
        _write(cache, lambda conn: rows.put_verdict(conn, model, entry.id, values, now))

    give("validated", 3)
    [(created, _)] = sql(cache.path, "SELECT created_at, updated_at FROM validations")
    give("masked", 5)
    assert sql(cache.path, "SELECT model_id, entry_id, verdict, rounds FROM validations") == [
        (model, entry.id, "masked", 5)
    ]
    assert sql(cache.path, "SELECT created_at FROM validations") == [(created,)]


def test_insert_verdict_writes_every_column_given(cache: Cache) -> None:
    entry = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES)
    now = schema.utcnow()
    values = {"verdict": "masked", "gain": 0.9, "rounds": 4, "confirmations": 1}
    values |= {"run_id": None, "created_at": now, "updated_at": now}

    def insert(conn: Connection) -> None:
        rows.insert_verdict(conn, rows.model_row(conn, "bert", "b1"), entry.id, values)

    _write(cache, insert)
    assert cache.verdicts_on(entry) == {"bert": "masked"}
    assert sql(cache.path, "SELECT gain, rounds, confirmations FROM validations") == [(0.9, 4, 1)]


# --- runs --------------------------------------------------------------------------------------


def test_runs_are_logged_closed_noted_and_failed(cache: Cache, device: Device) -> None:
    def log(conn: Connection) -> tuple[int, int]:
        device_id = rows.device_row(conn, device)
        return (
            rows.insert_run(conn, device_id, "tune", "open"),
            rows.insert_run(conn, device_id, "import", None, status="finished"),
        )

    running, finished = _write(cache, log)
    logged = sql(
        cache.path,
        "SELECT kind, status, finished_at IS NOT NULL, notes, hostname, pid FROM runs ORDER BY id",
    )
    here = (socket.gethostname(), os.getpid())
    assert logged == [("tune", "running", 0, "open", *here), ("import", "finished", 1, None, *here)]
    _write(cache, lambda conn: rows.set_run_notes(conn, running, "found something"))
    _write(cache, lambda conn: rows.finish_run(conn, running, "interrupted"))
    assert sql(
        cache.path, "SELECT status, finished_at IS NOT NULL, notes FROM runs WHERE id = ?", running
    ) == [("interrupted", 1, "found something")]
    _write(cache, lambda conn: rows.fail_runs(conn, [running, finished]))
    assert sql(cache.path, "SELECT DISTINCT status FROM runs") == [("failed",)]


# --- removal -----------------------------------------------------------------------------------


@pytest.fixture
def deletes(cache: Cache) -> Iterator[list[int]]:
    """How many ids each DELETE statement on the cache binds, statement by statement."""
    bound: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE"):
            bound.append(len(parameters))

    event.listen(cache.engine, "before_cursor_execute", count)
    try:
        yield bound
    finally:
        event.remove(cache.engine, "before_cursor_execute", count)


def test_delete_ids_binds_at_most_a_chunk_per_statement(cache: Cache, deletes: list[int]) -> None:
    many = 2 * queries.CHUNK + 1

    def make(conn: Connection) -> list[int]:
        return [rows.key_row(conn, make_key("conv_F32", m=m)) for m in range(many + 1)]

    made = _write(cache, make)
    _write(cache, lambda conn: rows.delete_ids(conn, schema.KEYS, made[:many]))
    assert deletes == [queries.CHUNK, queries.CHUNK, 1]
    assert sql(cache.path, "SELECT id FROM keys") == [(made[-1],)]
    _write(cache, lambda conn: rows.delete_ids(conn, schema.KEYS, []))
    assert len(deletes) == 3  # nothing to delete: no statement at all


def test_deleting_an_entry_takes_its_evidence_with_it(cache: Cache) -> None:
    entry = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES, record=timing(3e-5, 1e-5))
    judge(cache, entry, RESNET)
    _write(cache, lambda conn: rows.delete_ids(conn, schema.ENTRIES, [entry.id]))
    for table in ("entries", "timing_records", "candidate_timings", "validations"):
        assert sql(cache.path, f"SELECT count(*) FROM {table}") == [(0,)], table
    # What the entry pointed at stays: removing that is prune's and doctor's business.
    assert _counts(cache, schema.KEYS, schema.CANDIDATE_SETS, schema.MODELS, schema.RUNS) == {
        "keys": 1,
        "candidate_sets": 1,
        "models": 1,
        "runs": 0,
    }


def test_delete_rowids_removes_the_rows_the_foreign_key_check_names(cache: Cache) -> None:
    entry = cache.put("conv_F32_m1", choice="im2col", candidates=NAMES)
    judge(cache, entry, RESNET)
    sql(cache.path, "DELETE FROM entries")  # the stdlib connection has foreign keys off
    with cache.transaction() as tx:
        dangling = upkeep.foreign_key_violations(tx.conn)
    # The entry's verdict, and its change number (revision 0006).
    assert [table for table, _ in dangling] == ["entry_changes", schema.VALIDATIONS.name]
    _write(cache, lambda conn: rows.delete_rowids(conn, dangling))
    with cache.transaction() as tx:
        assert upkeep.foreign_key_violations(tx.conn) == []
        assert queries.count(tx.conn, schema.VALIDATIONS) == 0
