"""Recorded misses (tunecache.resolve.misses) and pending keys (tunecache.store.pending): the
keys a process asked for without an entry, noted only on a table's slow path, bounded, written
as pending keys when a `with` block ends or at the process's exit (a real process), without
SQLAlchemy on a current cache; then benched by `tunecache tune --pending` and served.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

import tunecache
from tests.conftest import ROOT
from tunecache import cli
from tunecache.cache import Cache
from tunecache.candidates import checksum
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.resolve import Table, misses
from tunecache.store import pending as store_pending
from tunecache.store.direct import DirectStore, DirectWriteRefused
from tunecache.store.pending import Pending, clear_pending, pending_keys, record_pending


@tunecache.tunable("missmm", dims=("m", "k", "n"), shape=lambda a, b: (*a.shape, b.shape[1]))
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The heuristic."""
    return a @ b


@matmul.candidate("einsum")
def _einsum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,jk->ik", a, b)


@matmul.inputs
def _inputs(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return (np.ones((m, k)), np.ones((k, n)))


def _table(cache: Cache, **options: object) -> Table:
    return Table.open(path=cache.path, device=cache.device, **options)  # type: ignore[arg-type]


def test_misses_are_noted_once_a_table_and_written_when_the_block_ends(cache: Cache) -> None:
    tuned = matmul.key(*_inputs(2, 2, 2))
    cache.put(tuned, choice="einsum", candidates=matmul.candidates, status="accepted")
    # An hour between the writer's batches: only leaving the block writes, whatever the load.
    with misses.record_misses(interval=3600) as recorder, tunecache.using(_table(cache)):
        for _ in range(3):
            matmul(*_inputs(2, 2, 2))  # a hit: never noted
            matmul(*_inputs(3, 5, 7))  # a miss: noted once, then a hit of the memo
        assert pending_keys(cache.path) == []  # nothing written by the asking thread yet
    assert recorder.recorded == 1 and recorder.written == 1 and recorder.dropped == 0
    (row,) = pending_keys(cache.path, cache.device.fingerprint)
    assert row.key == "missmm_m3_k5_n7" and row.asked == 1 and row.source == "heuristic"
    assert row.candidates == ("matmul", "einsum") and row.heuristic == "matmul"
    assert row.checksum == checksum(matmul.candidates)
    assert row.op == "tests.test_misses:matmul"
    # Another table asking again counts up; outside the block nothing is noted.
    with misses.record_misses(), tunecache.using(_table(cache)):
        matmul(*_inputs(3, 5, 7))
    with tunecache.using(_table(cache)):
        matmul(*_inputs(4, 4, 4))
    (row,) = pending_keys(cache.path)
    assert row.asked == 2 and row.first_seen is not None and row.last_seen is not None
    assert row.first_seen <= row.last_seen


def test_a_recorder_is_bounded_and_counts_what_it_drops(cache: Cache) -> None:
    table = _table(cache)
    with misses.record_misses(cap=2) as recorder:
        for m in range(1, 6):
            table.resolve(matmul.key(*_inputs(m, 2, 2)), matmul.candidates, "matmul")
    assert recorder.recorded == 2 and recorder.dropped == 3
    assert len(pending_keys(cache.path)) == 2
    with pytest.raises(BadArgumentError, match="cap is an int >= 1"):
        misses.record_misses(cap=0)


def test_the_store_keeps_at_most_max_pending_keys_a_device(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_pending, "MAX_PENDING", 3)
    items = [_item(f"missmm_m{m}_k1_n1") for m in range(1, 6)]
    store = DirectStore(cache.path, None)
    try:
        assert record_pending(store, "dev", items) == (3, 2)
        # Keys already pending still count up when the store is full.
        assert record_pending(store, "dev", items[:1]) == (1, 0)
    finally:
        store.close()
    assert [row.asked for row in pending_keys(cache.path, "dev")] == [2, 1, 1]


def _item(key: str, **more: object) -> Pending:
    names = ("matmul", "einsum")
    return Pending(key, checksum(names), names, "matmul", **more)  # type: ignore[arg-type]


def test_pending_keys_are_recorded_listed_and_cleared_through_the_public_api(
    cache: Cache,
) -> None:
    store = DirectStore(cache.path, None)
    at = datetime(2026, 12, 1, tzinfo=UTC)
    try:
        assert record_pending(store, "gpu0", [_item("missmm_m1_k1_n1", source="triton")], now=at)
        with pytest.raises(BadArgumentError, match="checksum is not its candidates'"):
            record_pending(store, "gpu0", [_item("missmm_m2_k1_n1")._replace(checksum="x")])
        with pytest.raises(BadArgumentError, match="heuristic 'nope' is not one"):
            record_pending(store, "gpu0", [_item("missmm_m2_k1_n1")._replace(heuristic="nope")])
        (row,) = pending_keys(cache.path, "gpu0")
        assert (row.source, row.first_seen, row.device) == ("triton", at, "gpu0")
        assert pending_keys(cache.path, "another") == []
        assert clear_pending(store, "gpu0", [(row.key, row.checksum)]) == 1
        assert pending_keys(cache.path) == []
    finally:
        store.close()


def test_a_file_at_an_older_revision_is_refused_by_the_direct_writer(
    cache: Cache, tmp_path: Path
) -> None:
    import sqlite3

    with sqlite3.connect(cache.path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0004'")
    store = DirectStore(cache.path, None)
    try:
        with pytest.raises(DirectWriteRefused, match="schema revision"):
            record_pending(store, "dev", [_item("missmm_m1_k1_n1")])
    finally:
        store.close()
    assert pending_keys(tmp_path / "none.db") == []


CHILD = """
    import sys
    import numpy as np
    import tunecache

    @tunecache.tunable("childmm", dims=("m", "k", "n"), shape=lambda a, b: (*a.shape, b.shape[1]))
    def matmul(a, b):
        return a @ b

    @matmul.candidate("einsum")
    def _(a, b):
        return np.einsum("ij,jk->ik", a, b)

    @matmul.inputs
    def _(m, k, n):
        return (np.ones((m, k)), np.ones((k, n)))

    if __name__ == "__main__":
        table = tunecache.Table.open(path=sys.argv[1], client="missclient", client_version="1",
                                     threads=1)
        tunecache.set_default(table)
        matmul(np.ones((64, 32)), np.ones((32, 16)))
        if sys.argv[2] == "flush":
            from tunecache.resolve import misses
            misses.recorder.flush()
            print("sqlalchemy" in sys.modules)
        print("served", flush=True)
"""


def _child(tmp_path: Path, db: Path, how: str) -> tuple[Path, str]:
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(CHILD))
    done = subprocess.run(
        [sys.executable, str(script), str(db), how],
        env={**_env(), misses.ENV: "1"},
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return script, done.stdout


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


DEVICE = ("--client", "missclient", "--client-version", "1", "--threads", "1")


def test_a_process_option_writes_at_exit_and_tune_pending_benches_and_serves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "served.db"
    Cache.open(path=db, client="missclient", client_version="1", threads=1).close()
    script, out = _child(tmp_path, db, "exit")
    assert out.strip() == "served"
    (row,) = pending_keys(db)
    assert row.key == "childmm_m64_k32_n16" and row.op == f"{script}:matmul"
    code = cli.main(["pending", "--db", str(db), "--json", *DEVICE])
    listed = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["key"] for r in listed] == [row.key]

    code = cli.main(["tune", "--pending", "--db", str(db), "--json", *DEVICE])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    (tuned,) = report["keys"]
    assert tuned["key"] == row.key and tuned["action"] == "benched" and tuned["op"] == row.op
    assert report["cleared"] == 1 and pending_keys(db) == []
    # Served from now on to tables that take everything (a model validates it for the rest).
    with Cache.open(path=db, client="missclient", client_version="1", threads=1) as cache:
        table = _table(cache, use="all")
        answer = table.resolve(row.parsed(), ("matmul", "einsum"), "matmul")
    assert answer.source == "exact" and answer.entry_id == tuned["entry_id"]


def test_a_current_cache_is_written_without_sqlalchemy(tmp_path: Path, device: Device) -> None:
    db = tmp_path / "current.db"
    Cache.open(path=db, client="missclient", client_version="1", threads=1).close()
    _, out = _child(tmp_path, db, "flush")
    assert out.split() == ["False", "served"]
    assert [row.key for row in pending_keys(db)] == ["childmm_m64_k32_n16"]


def test_pending_keys_that_cannot_be_benched_stay_pending_with_a_note(
    cache: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    store = DirectStore(cache.path, None)
    try:
        record_pending(
            store,
            cache.device.fingerprint,
            [
                _item("missmm_m1_k1_n1"),  # no op recorded
                _item("missmm_m2_k1_n1", op="tests.no_such_module:op"),
                _item("missmm_m3_k1_n1", op="tests.test_misses:matmul"),
            ],
        )
    finally:
        store.close()
    report = tunecache.tune.pending(cache=cache)
    by_key = {k.key: k for k in report.keys}
    assert by_key["missmm_m1_k1_n1"].action == "left"
    assert "no op was recorded" in by_key["missmm_m1_k1_n1"].note
    assert by_key["missmm_m2_k1_n1"].action == "left"
    assert "No module named" in by_key["missmm_m2_k1_n1"].note
    assert by_key["missmm_m3_k1_n1"].action in ("benched", "kept")
    assert report.cleared == 1
    assert sorted(r.key for r in pending_keys(cache.path)) == ["missmm_m1_k1_n1", "missmm_m2_k1_n1"]


def test_a_client_keeps_its_own_pending_keys_and_they_outlive_the_process(
    tmp_path: Path, cache: Cache
) -> None:
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        import tunecache
        from tunecache.resolve import misses
        key = tunecache.parse("mm_F16_m128_n64_k32")
        misses.keep(Path({str(cache.path)!r}), "gpu-fingerprint", key, ("c0", "c1"), "c0",
                    source="triton", op="matmul_kernel")
        print("kept", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split() == ["kept"]
    (row,) = pending_keys(cache.path, "gpu-fingerprint")
    assert (row.key, row.source, row.op, row.candidates) == (
        "mm_F16_m128_n64_k32",
        "triton",
        "matmul_kernel",
        ("c0", "c1"),
    )
    assert tunecache.record_misses is misses.record_misses


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_revision_0007_makes_the_pending_table_and_takes_it_back(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from alembic import command
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.pool import NullPool

    from tunecache.store import migrate

    if backend == "postgresql":
        url = request.getfixturevalue("pg").url
    else:
        url = f"sqlite:///{tmp_path / 'migrated.db'}"
    engine = create_engine(url, poolclass=NullPool)
    try:
        for target in ("0006", "0007", "0006", "0007"):
            with engine.begin() as conn:
                if target == "0006" and inspect(conn).has_table("pending"):
                    command.downgrade(migrate.alembic_config(conn), target)
                else:
                    command.upgrade(migrate.alembic_config(conn), target)
                has = inspect(conn).has_table("pending")
            assert has == (target == "0007")
        columns = [c["name"] for c in inspect(engine).get_columns("pending")]
        assert columns == [
            "id", "device", "key", "signature", "checksum", "candidates", "heuristic", "op",
            "source", "count", "first_seen", "last_seen",
        ]  # fmt: skip
    finally:
        engine.dispose()


def test_the_recorder_never_creates_nor_upgrades_a_cache_file(cache: Cache, tmp_path: Path) -> None:
    import shutil
    import sqlite3

    key = matmul.key(*_inputs(3, 5, 7))
    gone = tmp_path / "mirror" / "cache.db"  # a fleet session's mirror, removed when it ended
    older = cache.path
    with sqlite3.connect(older) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0004'")
    recorder = misses.Recorder(interval=3600)
    Cache.open(path=gone, device=cache.device).close()
    shutil.rmtree(gone.parent)
    for path in (gone, older):
        recorder.note(path, cache.device.fingerprint, key, matmul.candidates, "matmul")
    recorder.close()
    assert not gone.parent.exists()  # nothing made again
    with sqlite3.connect(older) as conn:  # nothing upgraded from the serving process
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0004",)
    assert recorder.written == 0 and recorder.dropped == 2 and recorder.error is None


def test_a_file_that_is_no_serving_cache_notes_no_miss(cache: Cache) -> None:
    table = _table(cache)
    misses.never_record(cache.path)
    with misses.record_misses(interval=3600) as recorder, tunecache.using(table):
        matmul(*_inputs(3, 5, 7))
    assert recorder.recorded == 0 and pending_keys(cache.path) == []


def test_two_pending_runs_at_once_bench_each_key_once(cache: Cache) -> None:
    from tests.tune.claims_child import DEVICE as CHILD_DEVICE
    from tests.tune.claims_child import tune_at_once

    assert cache.device == CHILD_DEVICE
    with misses.record_misses(interval=3600), tunecache.using(_table(cache)):
        matmul(*_inputs(3, 5, 7))
        matmul(*_inputs(4, 6, 8))
    reports = tune_at_once(str(cache.path), "pending")
    actions: dict[str, list[str]] = {}
    for report in reports:
        for outcome in report["keys"]:
            actions.setdefault(outcome["key"], []).append(outcome["action"])
    assert sorted(actions) == ["missmm_m3_k5_n7", "missmm_m4_k6_n8"]
    for key, done in actions.items():
        # Benched by one run; the other found its entry (or no pending key left to read).
        assert done.count("benched") == 1 and set(done) <= {"benched", "kept"}, (key, done)
    assert pending_keys(cache.path) == []
