"""The store API of tunecache.cache: put, get, validate, runs and transactions, on real files.

The engine underneath (pragmas, BEGIN IMMEDIATE, forks, lock deadlines) is tested in
tests/store/test_engine.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC

import pytest

from tests.store_helpers import MMM, RFC_TEXT, judge, mmm_record, sql
from tunecache.cache import Cache
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.errors import BadKeyError, BadRecordError, StoreError
from tunecache.keys import make_key, parse
from tunecache.store import queries, rows
from tunecache.store.models import utcnow

NAMES = list(MMM)


def test_put_then_get_round_trips_entry_and_record(cache: Cache) -> None:
    entry = cache.put(
        RFC_TEXT,
        choice="mmm_8x8",
        candidates=NAMES,
        heuristic="mmm_4x4",
        record=mmm_record(),
        speedup=1.8,
    )
    assert entry.key == make_key(
        "einsum_nk,km->mn_F32_F32_F32_aconst_nstrided", b=1, m=288, k=96, n=64
    )
    assert (entry.choice, entry.heuristic, entry.status) == ("mmm_8x8", "mmm_4x4", "unvalidated")
    assert entry.candidates == tuple(NAMES)

    got = cache.get(RFC_TEXT, candidates=NAMES)
    assert got == entry
    assert cache.record(got) == mmm_record()

    timings = sql(
        cache.path,
        "SELECT name, samples, inner_loops, error IS NOT NULL FROM candidate_timings ORDER BY name",
    )
    assert timings == [("mmm_4x4", 3, 64, 0), ("mmm_8x8", 3, 64, 0), ("mmv_serial", 0, 1, 1)]
    summary = sql(cache.path, "SELECT best, samples_count, failures_count FROM timing_records")
    assert summary == [("mmm_8x8", 6, 1)]


def test_rewriting_a_key_replaces_its_decision_and_record(cache: Cache) -> None:
    first = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=mmm_record())
    second = cache.put(RFC_TEXT, choice="mmm_4x4", candidates=NAMES, status="accepted")
    assert second.id == first.id
    assert (second.choice, second.status) == ("mmm_4x4", "accepted")
    assert cache.record(second) is None
    assert sql(cache.path, "SELECT count(*) FROM timing_records") == [(0,)]
    assert sql(cache.path, "SELECT count(*) FROM candidate_timings") == [(0,)]
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
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=mmm_record())
    before = sql(cache.path, "SELECT * FROM entries")
    args: dict[str, object] = {"candidates": NAMES, **kwargs}
    key = args.pop("key", RFC_TEXT)
    with pytest.raises(error):
        cache.put(key, **args)  # type: ignore[arg-type]
    assert sql(cache.path, "SELECT * FROM entries") == before
    assert sql(cache.path, "SELECT count(*) FROM keys") == [(1,)]
    assert cache.record(cache.get(RFC_TEXT, candidates=NAMES)) == mmm_record()  # type: ignore[arg-type]


def test_devices_sharing_a_file_never_see_each_others_entries(cache: Cache, twin: Cache) -> None:
    a, b = cache, twin
    a.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    assert b.get(RFC_TEXT, candidates=NAMES) is None
    assert b.count() == 0 and b.entries() == []
    b.put(RFC_TEXT, choice="mmm_4x4", candidates=NAMES)
    assert a.get(RFC_TEXT, candidates=NAMES).choice == "mmm_8x8"  # type: ignore[union-attr]
    assert b.get(RFC_TEXT, candidates=NAMES).choice == "mmm_4x4"  # type: ignore[union-attr]
    # Each device reads only its own evidence, by entry id too.
    a_entry = a.entries()[0]
    a.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES, record=mmm_record())
    assert b.record(a_entry.id) is None
    assert a.record(a_entry.id) == mmm_record()
    assert sql(cache.path, "SELECT count(*) FROM devices") == [(2,)]


def test_decisions_view_reads_without_tunecache(cache: Cache) -> None:
    entry = cache.put(
        RFC_TEXT, choice="mmm_8x8", candidates=NAMES, heuristic="mmm_4x4", speedup=1.25
    )
    judge(
        cache,
        entry,
        ("llama", "validated", 1.1, 3, 3),
        ("bert", "validated", 1.05, 3, 3),
        ("enhancer", "masked", 0.97, 3, 1),
    )
    query = (
        "SELECT key, signature, choice, heuristic, speedup, validated_by, masked_by FROM decisions"
    )
    want = (
        f"{RFC_TEXT}|einsum_nk,km->mn_F32_F32_F32_aconst_nstrided|mmm_8x8|mmm_4x4|1.25|"
        "bert,llama|enhancer"
    )
    shell = shutil.which("sqlite3")
    if shell:
        out = subprocess.run(
            [shell, str(cache.path), query], capture_output=True, text=True, check=True
        ).stdout
    else:
        # -I: isolated mode, so the child cannot import tunecache from this checkout.
        code = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "print('\\n'.join('|'.join(str(v) for v in r) for r in c.execute(sys.argv[2])))"
        )
        out = subprocess.run(
            [sys.executable, "-I", "-c", code, str(cache.path), query],
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
    assert sql(cache.path, "SELECT verdict, rounds FROM validations") == [("masked", 5)]
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
    logged = sql(
        cache.path, "SELECT kind, status, finished_at IS NOT NULL, pid FROM runs ORDER BY id"
    )
    assert logged == [
        ("tune", "finished", 1, os.getpid()),
        ("tune", "failed", 1, os.getpid()),
        ("validate", "interrupted", 1, os.getpid()),
    ]
    assert sql(cache.path, "SELECT run_id FROM entries") == [(1,)]


def test_timestamps_are_utc_and_aware(cache: Cache) -> None:
    # Bracketed by the clock rather than compared with a tolerance: no test rests on speed.
    before = utcnow()
    entry = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    after = utcnow()
    assert entry.updated_at.tzinfo is UTC
    assert before <= entry.created_at == entry.updated_at <= after  # naive: a TypeError


def test_ids_are_never_reused_after_a_delete(cache: Cache) -> None:
    first = cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    sql(cache.path, "DELETE FROM entries")
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
    before = {t: sql(cache.path, f"SELECT * FROM {t}") for t in ("entries", "validations")}
    with pytest.raises(BadRecordError, match=message):
        call(cache)
    assert {t: sql(cache.path, f"SELECT * FROM {t}") for t in before} == before


# --- transactions ------------------------------------------------------------------------------


def test_a_read_transaction_sees_one_snapshot(cache: Cache) -> None:
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    with cache.transaction() as tx:
        device_id = tx.device_id()
        assert device_id is not None
        assert queries.count_entries(tx.conn, device_id) == 1
        # A write committed meanwhile (WAL lets it through) is not in this snapshot.
        cache.put(make_key("conv_F32", h=8), choice="mmm_4x4", candidates=NAMES)
        assert queries.count_entries(tx.conn, device_id) == 1
    assert cache.count() == 2


def test_a_write_transaction_commits_when_its_block_ends_or_not_at_all(cache: Cache) -> None:
    with pytest.raises(RuntimeError, match="half-way"), cache.transaction(write=True) as tx:
        rows.key_row(tx.conn, parse(RFC_TEXT))
        tx.start_run("tune", None)
        raise RuntimeError("half-way")
    for table in ("keys", "runs", "devices"):
        assert sql(cache.path, f"SELECT count(*) FROM {table}") == [(0,)], table
    with cache.transaction(write=True) as tx:
        assert tx.write and tx.cache is cache
        key_id = rows.key_row(tx.conn, parse(RFC_TEXT))
    assert sql(cache.path, "SELECT id, text FROM keys") == [(key_id, RFC_TEXT)]


def test_a_transaction_finds_the_device_row_and_logs_runs(cache: Cache) -> None:
    with cache.transaction() as tx:
        assert not tx.write
        assert tx.device_id() is None  # nothing written for this device yet
        with pytest.raises(StoreError, match="cannot add a device row in a read transaction"):
            tx.device_row()
        with pytest.raises(StoreError, match="cannot log a run in a read transaction"):
            tx.start_run("tune", None)
    with cache.transaction(write=True) as tx:
        device_id = tx.device_row()
        assert tx.device_row() == tx.device_id() == device_id
        running = tx.start_run("tune", "open")
        done = tx.start_run("import", "in one go", status="finished")
    logged = sql(
        cache.path,
        "SELECT id, kind, status, finished_at IS NOT NULL, notes, device_id FROM runs ORDER BY id",
    )
    assert logged == [
        (running, "tune", "running", 0, "open", device_id),
        (done, "import", "finished", 1, "in one go", device_id),
    ]
    with cache.transaction() as tx:
        assert tx.device_id() == device_id


def test_a_cache_whose_file_was_moved_aside_writes_and_reads_the_live_one(
    cache: Cache, cache_at: Callable[..., Cache], device: object
) -> None:
    # Issue 16: a damaged cache moved aside while this one had it open. Its next transaction
    # finds its file is no longer the one at the path, reopens the live cache and goes on
    # there; nothing is acknowledged into the moved file.
    from tunecache.device import Device

    first = cache.put("op_F32_m1", choice=NAMES[0], candidates=NAMES)
    moved = cache.path.with_name("moved.db")
    for suffix in ("", "-wal", "-shm"):
        source = cache.path.with_name(cache.path.name + suffix)
        if source.exists():
            source.rename(moved.with_name(moved.name + suffix))
    # The live cache numbers another device's row first, so row ids differ from the old file.
    assert isinstance(device, Device)
    other = cache_at(cache.path, device=device.with_threads(2))
    other.put("op_F32_m9", choice=NAMES[1], candidates=NAMES)
    other.close()

    second = cache.put("op_F32_m2", choice=NAMES[1], candidates=NAMES)
    assert [e.key.text for e in cache.entries()] == [second.key.text]
    assert cache.get("op_F32_m1") is None and cache.get("op_F32_m2") is not None
    by_device = sql(
        cache.path,
        "SELECT d.threads, k.text FROM entries e JOIN devices d ON d.id = e.device_id "
        "JOIN keys k ON k.id = e.key_id ORDER BY k.text",
    )
    assert by_device == [(cache.device.threads, "op_F32_m2"), (2, "op_F32_m9")]
    assert sql(moved, "SELECT count(*) FROM entries") == [(1,)]
    assert first.key.text == "op_F32_m1"
