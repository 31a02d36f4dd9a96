"""Checking and repairing a whole cache file (tunecache.maintain.doctor)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from tests.maintain.conftest import Filled
from tests.store_helpers import sql
from tunecache import maintain
from tunecache.cache import Cache
from tunecache.errors import CodecError
from tunecache.store import rows


def test_a_sound_cache_is_healthy(filled: Filled) -> None:
    report = maintain.doctor(filled.cache)
    assert report.healthy and report.integrity == ("ok",) and report.problems == ()
    assert (report.revision, report.entries, report.devices) == (report.head, 4, 1)


def _damage(filled: Filled) -> int:
    """Rows of every kind doctor looks for; returns the pid of a process that is gone."""
    path = filled.cache.path
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(gone.stdout)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute(
        "INSERT INTO keys (text, signature, dims) VALUES ('pool_F32_m1', 'pool_F32', 'm=1')"
    )
    conn.execute(
        "INSERT INTO runs (kind, status, tool_version, hostname, platform, python_version, pid,"
        " started_at) SELECT 'tune', 'running', '0', hostname, '', '', ?, started_at FROM runs",
        (pid,),
    )
    conn.execute("UPDATE entries SET choice = 'gone' WHERE id = ?", (filled.matmul.id,))
    conn.execute("UPDATE timing_records SET data = x'ff'")
    conn.execute("DELETE FROM entries WHERE id = ?", (filled.stale.id,))
    conn.execute(
        "INSERT INTO validations (model_id, entry_id, verdict, rounds, confirmations,"
        " created_at, updated_at) VALUES (1, 9999, 'masked', 0, 0, '2020-01-01', "
        "'2020-01-01')"
    )
    conn.commit()
    conn.close()
    return pid


def test_doctor_reports_without_repairing_then_repairs_when_asked(filled: Filled) -> None:
    _damage(filled)
    before = sql(filled.cache.path, "SELECT count(*) FROM keys")
    report = maintain.doctor(filled.cache)
    found = {p.kind: p for p in report.problems}
    assert not report.healthy
    assert set(found) == {
        "dangling-rows",
        "orphaned-keys",
        "orphaned-candidate-sets",
        "stale-runs",
        "illegal-choices",
        "unreadable-records",
    }
    assert found["dangling-rows"].count == 2  # a verdict's and a change number's
    assert found["orphaned-keys"].count == 2  # the inserted key and the deleted entry's
    assert not any(p.repaired for p in report.problems)
    assert sql(filled.cache.path, "SELECT count(*) FROM keys") == before

    repaired = maintain.doctor(filled.cache, repair=True)
    assert all(p.repaired for p in repaired.problems) and repaired.healthy
    assert repaired.checkpointed and repaired.wal_bytes == 0
    again = maintain.doctor(filled.cache)
    assert again.healthy and again.problems == ()
    # The entry with the unreadable record stays; only its record went.
    assert filled.cache.get("conv_F32_m64_k3") is not None
    assert filled.cache.record(filled.mixed) is None
    assert sql(filled.cache.path, "SELECT status FROM runs WHERE status = 'running'") == []


def test_doctor_finds_unused_models_and_devices_and_leaves_this_one(
    filled: Filled, twin: Cache
) -> None:
    with twin.run("tune"):
        pass  # the twin's device row has a run: it is in use
    lonely = filled.cache.device.with_threads(2)
    with filled.cache.transaction(write=True) as tx:
        rows.model_row(tx.conn, "gpt", "g2")
        rows.device_row(tx.conn, lonely)
    found = {p.kind: p.count for p in maintain.doctor(filled.cache).problems}
    assert found == {"orphaned-models": 1, "orphaned-devices": 1}
    assert maintain.doctor(filled.cache, repair=True).healthy
    assert sql(filled.cache.path, "SELECT count(*) FROM devices") == [(2,)]
    assert sql(filled.cache.path, "SELECT name, fingerprint FROM models ORDER BY name") == [
        ("bert", "b1"),
        ("gpt", "g1"),
        ("resnet", "r1"),
    ]


def test_a_candidate_set_that_lost_its_checksum_cannot_be_repaired(filled: Filled) -> None:
    # The matmul entry chose "direct"; renaming another of its candidates keeps the choice
    # legal but breaks the set's checksum, which no repair can restore.
    sql(
        filled.cache.path,
        "UPDATE candidates SET name = 'renamed' WHERE name = 'winograd' AND set_id ="
        " (SELECT candidate_set_id FROM entries WHERE id = ?)",
        filled.matmul.id,
    )
    repaired = maintain.doctor(filled.cache, repair=True)
    [problem] = repaired.problems
    assert (problem.kind, problem.count, problem.repair, problem.repaired) == (
        "bad-candidate-sets",
        1,
        None,
        False,
    )
    assert not repaired.healthy and repaired.as_dict()["healthy"] is False


def test_doctor_reports_its_progress_and_its_json_form(filled: Filled) -> None:
    calls: list[tuple[str, int, int]] = []
    report = maintain.doctor(filled.cache, progress=lambda *call: calls.append(call))
    assert calls == [("records", 0, 1), ("records", 1, 1)]
    shown = report.as_dict()
    assert shown["healthy"] is True and shown["integrity"] == ["ok"] and shown["problems"] == []
    assert (shown["path"], shown["entries"], shown["repair"]) == (str(filled.cache.path), 4, False)


def test_doctor_checks_the_structure_of_every_record_and_reading_checks_the_rest(
    filled: Filled,
) -> None:
    # What the bounded pre-scan refuses is found, and repair deletes it: cut short, an
    # unfinished container, trailing bytes, a tag, text where bytes belong.
    [(blob,)] = sql(filled.cache.path, "SELECT data FROM timing_records")
    for damage in (blob[:-3], b"\xa1", blob + b"\x00", b"\xc1\x00", "text"):
        sql(filled.cache.path, "UPDATE timing_records SET data = ?", damage)
        [problem] = maintain.doctor(filled.cache).problems
        assert (problem.kind, problem.count) == ("unreadable-records", 1), damage
    # Sound CBOR that breaks the record's schema (here a map without the candidates) is
    # refused when the record is read, in one line, and the rest of the cache reads on.
    sql(filled.cache.path, "UPDATE timing_records SET data = ?", bytes.fromhex("a1617601"))
    assert maintain.doctor(filled.cache).problems == ()
    with pytest.raises(CodecError, match="timing record: ") as info:
        filled.cache.record(filled.mixed)
    assert "\n" not in str(info.value)
    assert filled.cache.get("conv_F32_m64_k3") is not None
