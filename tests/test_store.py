"""The store through the Cache API, on real SQLite files."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, timedelta
from pathlib import Path

import pytest

from tunecache.cache import Cache
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.errors import BadArgumentError, BadKeyError, BadRecordError, StoreBusyError
from tunecache.keys import make_key
from tunecache.store.models import utcnow

RFC_TEXT = "einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided"
NAMES = ["mmm_4x4", "mmm_8x8", "mmv_serial"]


def _record() -> TimingRecord:
    return TimingRecord(
        candidates=(
            CandidateTiming("mmm_4x4", (2.0e-5, 2.1e-5, 1.9e-5), inner_loops=64),
            CandidateTiming("mmm_8x8", (1.0e-5, 1.1e-5, 1.2e-5), inner_loops=64),
            CandidateTiming("mmv_serial", (), inner_loops=1, error="ValueError: no"),
        ),
        settings={"max_samples": 30, "prune_ratio": 1.5},
        env={"numpy": "2.4.6"},
    )


def _rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def test_pragmas_are_set_on_every_connection(cache: Cache) -> None:
    with cache.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_put_then_get_round_trips_entry_and_record(cache: Cache) -> None:
    entry = cache.put(
        RFC_TEXT,
        choice="mmm_8x8",
        candidates=NAMES,
        heuristic="mmm_4x4",
        record=_record(),
        speedup=1.8,
    )
    assert entry.key == make_key(
        "einsum_nk,km->mn_F32_F32_F32_aconst_nstrided", b=1, m=288, k=96, n=64
    )
    assert (entry.choice, entry.heuristic, entry.status) == ("mmm_8x8", "mmm_4x4", "unvalidated")
    assert entry.candidates == tuple(NAMES)

    got = cache.get(RFC_TEXT, candidates=NAMES)
    assert got == entry
    assert cache.record(got) == _record()

    rows = _rows(
        cache.path,
        "SELECT name, samples, inner_loops, error IS NOT NULL FROM candidate_timings ORDER BY name",
    )
    assert rows == [("mmm_4x4", 3, 64, 0), ("mmm_8x8", 3, 64, 0), ("mmv_serial", 0, 1, 1)]
    summary = _rows(cache.path, "SELECT best, samples_count, failures_count FROM timing_records")
    assert summary == [("mmm_8x8", 6, 1)]


def test_rewriting_a_key_replaces_its_decision_and_record(cache: Cache) -> None:
    first = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=_record())
    second = cache.put(RFC_TEXT, choice="mmm_4x4", candidates=NAMES, status="accepted")
    assert second.id == first.id
    assert (second.choice, second.status) == ("mmm_4x4", "accepted")
    assert cache.record(second) is None
    assert _rows(cache.path, "SELECT count(*) FROM timing_records") == [(0,)]
    assert _rows(cache.path, "SELECT count(*) FROM candidate_timings") == [(0,)]
    assert cache.count() == 1


def test_a_changed_candidate_list_is_a_new_set_and_the_old_entry_stays_apart(
    cache: Cache,
) -> None:
    old = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    new_names = ["mmm_4x4", "mmm_16x16"]
    new = cache.put(RFC_TEXT, choice="mmm_16x16", candidates=new_names)
    assert old.checksum != new.checksum
    assert cache.get(RFC_TEXT, candidates=NAMES) == old
    assert cache.get(RFC_TEXT, candidates=new_names) == new
    # A list that was never tuned finds nothing, even for a key that has entries.
    assert cache.get(RFC_TEXT, candidates=["mmm_4x4"]) is None
    # Reordering is a change too: the checksum covers the order.
    assert cache.get(RFC_TEXT, candidates=list(reversed(NAMES))) is None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"choice": "nope"}, BadRecordError),
        ({"choice": "mmm_8x8", "heuristic": "nope"}, BadRecordError),
        ({"choice": "mmm_8x8", "status": "great"}, BadRecordError),
        ({"choice": "mmm_8x8", "speedup": float("nan")}, BadRecordError),
        ({"choice": "mmm_8x8", "speedup": -1.0}, BadRecordError),
        ({"choice": "mmm_8x8", "candidates": ["mmm_8x8", "mmm_8x8"]}, BadRecordError),
        ({"choice": "mmm_8x8", "candidates": []}, BadRecordError),
        ({"choice": "mmm_8x8", "candidates": "mmm_8x8"}, BadRecordError),
        (
            {
                "choice": "mmm_8x8",
                "record": TimingRecord(candidates=(CandidateTiming("ghost", (1.0,), 1),)),
            },
            BadRecordError,
        ),
        ({"choice": "mmm_8x8", "key": "einsum_F32_aconst_m4"}, BadKeyError),
        ({"choice": "mmm_8x8", "key": "einsum__m4"}, BadKeyError),
    ],
)
def test_bad_input_raises_and_leaves_the_store_as_it_was(
    cache: Cache, kwargs: dict[str, object], error: type[Exception]
) -> None:
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=_record())
    before = _rows(cache.path, "SELECT * FROM entries")
    args: dict[str, object] = {"candidates": NAMES, **kwargs}
    key = args.pop("key", RFC_TEXT)
    with pytest.raises(error):
        cache.put(key, **args)  # type: ignore[arg-type]
    assert _rows(cache.path, "SELECT * FROM entries") == before
    assert _rows(cache.path, "SELECT count(*) FROM keys") == [(1,)]
    assert cache.record(cache.get(RFC_TEXT, candidates=NAMES)) == _record()  # type: ignore[arg-type]


def test_devices_sharing_a_file_never_see_each_others_entries(
    device: Device, tmp_path: Path
) -> None:
    db = tmp_path / "shared.db"
    other = device.with_threads(8)
    with Cache.open(device=device, path=db) as a, Cache.open(device=other, path=db) as b:
        a.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
        assert b.get(RFC_TEXT, candidates=NAMES) is None
        assert b.count() == 0 and b.entries() == []
        b.put(RFC_TEXT, choice="mmm_4x4", candidates=NAMES)
        assert a.get(RFC_TEXT, candidates=NAMES).choice == "mmm_8x8"  # type: ignore[union-attr]
        assert b.get(RFC_TEXT, candidates=NAMES).choice == "mmm_4x4"  # type: ignore[union-attr]
        # Each device reads only its own evidence, by entry id too.
        a_entry = a.entries()[0]
        a.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=_record())
        assert b.record(a_entry.id) is None
        assert a.record(a_entry.id) == _record()
    assert _rows(db, "SELECT count(*) FROM devices") == [(2,)]


def test_decisions_view_reads_without_tunecache(cache: Cache) -> None:
    entry = cache.put(
        RFC_TEXT, choice="mmm_8x8", candidates=NAMES, heuristic="mmm_4x4", speedup=1.25
    )
    cache.validate(
        entry,
        model="llama",
        fingerprint="f1",
        verdict="validated",
        gain=1.1,
        rounds=3,
        confirmations=3,
    )
    cache.validate(
        entry,
        model="bert",
        fingerprint="f2",
        verdict="validated",
        gain=1.05,
        rounds=3,
        confirmations=3,
    )
    cache.validate(
        entry,
        model="enhancer",
        fingerprint="f3",
        verdict="masked",
        gain=0.97,
        rounds=3,
        confirmations=1,
    )
    sql = (
        "SELECT key, signature, choice, heuristic, speedup, validated_by, masked_by FROM decisions"
    )
    want = (
        f"{RFC_TEXT}|einsum_nk,km->mn_F32_F32_F32_aconst_nstrided|mmm_8x8|mmm_4x4|1.25|"
        "bert,llama|enhancer"
    )
    shell = shutil.which("sqlite3")
    if shell:
        out = subprocess.run(
            [shell, str(cache.path), sql], capture_output=True, text=True, check=True
        ).stdout
    else:
        # -I: isolated mode, so the child cannot import tunecache from this checkout.
        code = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "print('\\n'.join('|'.join(str(v) for v in r) for r in c.execute(sys.argv[2])))"
        )
        out = subprocess.run(
            [sys.executable, "-I", "-c", code, str(cache.path), sql],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    assert out.strip() == want


def test_a_validation_is_replaced_not_duplicated(cache: Cache) -> None:
    entry = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    cache.validate(
        entry, model="m", fingerprint="f", verdict="validated", rounds=3, confirmations=3
    )
    cache.validate(entry, model="m", fingerprint="f", verdict="masked", rounds=5, confirmations=2)
    assert _rows(cache.path, "SELECT verdict, rounds FROM validations") == [("masked", 5)]
    with pytest.raises(BadRecordError):
        cache.validate(entry, model="m", fingerprint="f", verdict="maybe")
    with pytest.raises(BadRecordError):
        cache.validate(
            entry, model="m", fingerprint="f", verdict="masked", rounds=1, confirmations=2
        )
    with pytest.raises(BadRecordError):
        cache.validate(entry.id + 100, model="m", fingerprint="f", verdict="masked")


def test_set_status_keeps_the_evidence_and_verdicts_are_read_per_model(cache: Cache) -> None:
    record = TimingRecord((CandidateTiming("mmm_8x8", (1e-3, 2e-3)),))
    entry = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=record)
    changed = cache.set_status(entry, "accepted")
    assert changed.status == "accepted" and changed.choice == "mmm_8x8"
    assert cache.record(entry) == record
    with pytest.raises(BadRecordError, match="status"):
        cache.set_status(entry, "maybe")
    with pytest.raises(BadRecordError, match="no entry"):
        cache.set_status(entry.id + 100, "rejected")
    assert cache.get(RFC_TEXT, candidates=NAMES).status == "accepted"  # type: ignore[union-attr]

    assert cache.verdicts("m") == {}
    cache.validate(entry, model="m", fingerprint="v1", verdict="masked")
    cache.validate(entry, model="other", fingerprint="v1", verdict="validated")
    assert cache.verdicts("m") == {entry.id: "masked"}
    assert cache.verdicts("m", "v1") == {entry.id: "masked"}
    assert cache.verdicts("m", "v2") == {}
    assert cache.verdicts_on(entry) == {"m": "masked", "other": "validated"}
    assert cache.verdicts_on(entry.id + 100) == {}
    # A verdict may set the entry's status in its own commit, and nothing on bad input.
    cache.validate(entry, model="m", fingerprint="v1", verdict="masked", status="rejected")
    assert cache.get(RFC_TEXT, candidates=NAMES).status == "rejected"  # type: ignore[union-attr]
    with pytest.raises(BadRecordError, match="status"):
        cache.validate(entry, model="m", fingerprint="v1", verdict="validated", status="maybe")
    assert cache.verdicts("m") == {entry.id: "masked"}


def test_a_changed_choice_drops_the_verdicts_on_the_old_one(cache: Cache) -> None:
    entry = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, status="rejected")
    cache.validate(entry, model="m", fingerprint="f", verdict="masked")
    # The same choice again (new evidence, new status): the verdicts stand.
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, status="rejected")
    assert cache.verdicts_on(entry) == {"m": "masked"}
    # Another choice: m judged the old one, not this.
    other = next(n for n in NAMES if n != "mmm_8x8")
    again = cache.put(RFC_TEXT, choice=other, candidates=NAMES, status="accepted")
    assert again.id == entry.id and cache.verdicts_on(entry) == {}


def test_run_notes_are_replaced_and_found(cache: Cache) -> None:
    with cache.run("tune", notes="model m") as run_id:
        cache.note(run_id, "model m: guard passed over entries 1")
        assert cache.runs_noted("model m: guard passed over entries 1") == []  # still running
    assert cache.runs_noted("model m: guard passed over entries 1") == [run_id]
    assert cache.runs_noted("model m") == []
    with pytest.raises(BadRecordError):
        cache.note(run_id + 100, "x")


def test_runs_are_logged_with_their_outcome(cache: Cache) -> None:
    with cache.run("tune", notes="first") as run_id:
        cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, run_id=run_id)
    with pytest.raises(RuntimeError), cache.run("tune"):
        raise RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt), cache.run("validate"):
        raise KeyboardInterrupt
    rows = _rows(
        cache.path, "SELECT kind, status, finished_at IS NOT NULL, pid FROM runs ORDER BY id"
    )
    assert rows == [
        ("tune", "finished", 1, os.getpid()),
        ("tune", "failed", 1, os.getpid()),
        ("validate", "interrupted", 1, os.getpid()),
    ]
    assert _rows(cache.path, "SELECT run_id FROM entries") == [(1,)]


def test_writes_take_the_write_lock_at_begin(cache: Cache) -> None:
    # A deferred BEGIN would take no lock until the first write; IMMEDIATE holds it at once, so a
    # second writer with no patience is refused while the transaction has not written anything.
    with cache.transaction(write=True):
        other = sqlite3.connect(cache.path, timeout=0, isolation_level=None)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()


def test_a_lock_held_past_the_timeout_is_store_busy(device: Device, tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    Cache.open(device=device, path=db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with Cache.open(device=device, path=db, busy_timeout=0.2) as cache:
            with pytest.raises(StoreBusyError, match="locked by another writer"):
                cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
            # Readers are not blocked by a writer in WAL mode.
            assert cache.count() == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _child_writes(
    db: str, device: Device, index: int, barrier: object, queue: multiprocessing.Queue[object]
) -> None:
    try:
        with Cache.open(device=device, path=db) as cache:
            barrier.wait(60)  # type: ignore[attr-defined]
            for j in range(40):
                # Half the keys are shared by every writer, half are this writer's own.
                h = j if j % 2 else 1000 * (index + 1) + j
                cache.put(make_key("conv_F32", h=h), choice=NAMES[index % 3], candidates=NAMES)
            queue.put("ok")
    except BaseException as error:  # report, so the parent's assertion says why
        queue.put(repr(error))


def test_a_forked_child_never_reuses_the_parents_connections(cache: Cache) -> None:
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)  # the pool now holds a connection
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[object] = ctx.Queue()
    # The child opens nothing new: it inherits this very Cache object and writes through it.
    parent_pool = id(cache.engine.pool)
    proc = ctx.Process(target=_inherited_write, args=(cache, parent_pool, queue))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert queue.get(timeout=5) == 2
    # The parent's connection is still good after the child has come and gone.
    cache.put(make_key("conv_F32", h=16), choice="mmm_4x4", candidates=NAMES)
    assert cache.count() == 3
    assert _rows(cache.path, "PRAGMA integrity_check") == [("ok",)]


def _inherited_write(cache: Cache, parent_pool: int, queue: multiprocessing.Queue[object]) -> None:
    try:
        # register_at_fork replaced the inherited pool before this line ran, so the parent's
        # pooled connection can never be checked out here (ids survive a fork unchanged).
        assert id(cache.engine.pool) != parent_pool
        cache.put(make_key("conv_F32", h=8), choice="mmm_4x4", candidates=NAMES)
        queue.put(cache.count())
    except BaseException as error:
        queue.put(repr(error))


def test_concurrent_writers_lose_nothing_and_share_one_row_per_key(
    device: Device, tmp_path: Path
) -> None:
    # Four processes start writing at the same instant, on overlapping keys. Under a deferred
    # BEGIN this fails (a reader's lock cannot be upgraded: SQLITE_BUSY with no wait); with
    # BEGIN IMMEDIATE every writer queues for the lock and every put lands.
    db = tmp_path / "shared.db"
    Cache.open(device=device, path=db).close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    queue: multiprocessing.Queue[object] = ctx.Queue()
    procs = [
        ctx.Process(target=_child_writes, args=(str(db), device, i, barrier, queue))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert results == ["ok"] * 4
    # 20 shared keys once each, plus 20 own keys for each of the 4 writers
    assert _rows(db, "SELECT count(*) FROM entries") == [(20 + 4 * 20,)]
    assert _rows(db, "SELECT count(*) FROM keys") == [(100,)]
    assert _rows(db, "SELECT count(*) FROM candidate_sets") == [(1,)]
    assert _rows(db, "PRAGMA integrity_check") == [("ok",)]


def test_timestamps_are_utc_and_aware(cache: Cache) -> None:
    entry = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    assert entry.updated_at.tzinfo is UTC
    age = utcnow() - entry.updated_at  # naive values made this a TypeError
    assert timedelta(0) <= age < timedelta(minutes=5)


def test_ids_are_never_reused_after_a_delete(cache: Cache) -> None:
    first = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    with sqlite3.connect(cache.path) as conn:
        conn.execute("DELETE FROM entries")
    second = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    assert second.id > first.id


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.validate("abc", model="m", fingerprint="f", verdict="masked"), "entry"),
        (lambda c: c.validate(True, model="m", fingerprint="f", verdict="masked"), "entry"),
        (lambda c: c.record("x"), "entry"),
        (
            lambda c: c.validate(1, model="m", fingerprint="f", verdict="masked", rounds="3"),
            "rounds",
        ),
        (lambda c: c.validate(1, model="m", fingerprint="f", verdict="masked", gain="1"), "gain"),
        (lambda c: c.validate(1, model="", fingerprint="f", verdict="masked"), "model"),
        (lambda c: c.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, run_id=99), "no run 99"),
        (lambda c: c.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, speedup="2"), "speedup"),
        (lambda c: c.put(42, choice="mmm_8x8", candidates=NAMES), "key"),
    ],
)
def test_bad_api_arguments_are_tunecache_errors_and_write_nothing(
    cache: Cache, call: Callable[[Cache], object], message: str
) -> None:
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    before = {t: _rows(cache.path, f"SELECT * FROM {t}") for t in ("entries", "validations")}
    with pytest.raises(BadRecordError, match=message):
        call(cache)
    assert {t: _rows(cache.path, f"SELECT * FROM {t}") for t in before} == before


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), -1, "5", True, 10**9])
def test_a_lock_deadline_must_be_finite(device: Device, tmp_path: Path, timeout: object) -> None:
    with pytest.raises(BadArgumentError, match="busy_timeout"):
        Cache.open(device=device, root=tmp_path, busy_timeout=timeout)  # type: ignore[arg-type]
    assert not (tmp_path / "tune").exists()


def test_a_pooled_connection_from_another_process_is_replaced(cache: Cache) -> None:
    # The checkout guard behind register_at_fork: a connection stamped with another pid is
    # dropped and a fresh one is made in its place.
    with cache.engine.connect() as conn:
        record = conn.connection._connection_record
        assert record is not None
        stale = conn.connection.dbapi_connection
        record.info["pid"] = -1
    with cache.engine.connect() as conn:
        assert conn.connection.dbapi_connection is not stale
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
