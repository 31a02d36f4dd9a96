"""tunecache.store.direct: Cache.put_many's rows, written through stdlib sqlite3.

The writer is worth having only if it writes exactly what `put_many` writes: the tests apply the
same batches to two copies of one cache, one through each writer, at one frozen time, and compare
every column of every row of every table (ids, times and bytes included).
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.store_helpers import MMM, NAMES, RESNET, conv_record, judge, mmm_record, sql, timing
from tunecache import cache as cache_module
from tunecache.cache import Cache, NewEntry
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.errors import BadArgumentError, BadRecordError, StoreBusyError
from tunecache.store import migrate, reading
from tunecache.store import rows as rows_module
from tunecache.store.direct import DirectStore, DirectWriteRefused
from tunecache.store.writelock import WriteQueue

NOW = datetime(2026, 12, 1, 9, 30, 0, 123456, tzinfo=UTC)
LATER = datetime(2026, 12, 2, 10, 0, 0, 1, tzinfo=UTC)


def _raw_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every column of every row of every table (SQLite's own sequences included), in rowid
    order where the table has one: what a second writer must leave exactly alike."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out = {}
        for t in tables:
            rows = conn.execute(f'SELECT * FROM "{t}"').fetchall()
            out[t] = sorted(rows, key=repr)
            with_rowid = conn.execute(f'SELECT rowid FROM "{t}"').fetchall()
            out[f"{t} rowids"] = sorted(with_rowid)
        return out
    finally:
        conn.close()


def _frozen(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    """Every time the store API takes (an entry's, a verdict's, a device row's) is `when`."""
    monkeypatch.setattr(cache_module, "utcnow", lambda: when)
    monkeypatch.setattr(rows_module, "utcnow", lambda: when)


def _pruned_record() -> TimingRecord:
    return TimingRecord(
        candidates=(
            CandidateTiming("direct", (3e-5, 2.9e-5)),
            CandidateTiming("im2col", (1e-5,), pruned=True),
            CandidateTiming("winograd", error="OutOfResources: shared memory"),
        ),
        settings={"kernel": "conv", "budget_overrun": False},
        env={"python": "3.12"},
    )


def _batches() -> list[list[NewEntry]]:
    """Batches that meet every case of a write: new keys, lists and signatures; a key twice in
    one batch; a replaced entry keeping or losing its verdicts; records with samples, prunings
    and failures; an entry without a record."""
    return [
        [
            NewEntry("conv_F32_m64_k3", "im2col", NAMES, record=conv_record()),
            NewEntry("conv_F32_m128_k3", "direct", NAMES, heuristic="direct", speedup=1.5),
            NewEntry("mm_F32_m16_n16", "mmm_8x8", MMM, record=mmm_record()),
            NewEntry("conv_F32_m64_k3", "direct", NAMES[:2], record=timing(1.0, 2.0)),
        ],
        [
            # The judged entry changes its choice: its verdicts go.
            NewEntry("conv_F32_m64_k3", "winograd", NAMES, record=_pruned_record()),
            # The same choice again: its verdicts stay, its record is replaced.
            NewEntry("conv_F32_m128_k3", "direct", NAMES, record=timing(2.0, 1.0)),
            NewEntry("conv_F32_m256_k3", "im2col", NAMES, status="accepted"),
            NewEntry("conv_F32_m256_k3", "direct", NAMES, record=timing(1.0)),
            NewEntry("ln_F16_n4096", "b", ("a", "b"), record=timing()),
        ],
    ]


def _two_caches(device: Device, tmp_path: Path) -> tuple[Path, Path]:
    """Two copies of one cache with an entry judged by a model: the start of both writers."""
    first = tmp_path / "put_many.db"
    with Cache.open(device=device, path=first) as cache:
        cache.put_many(
            [
                NewEntry("conv_F32_m64_k3", "im2col", NAMES, record=timing(2.0, 1.0)),
                NewEntry("conv_F32_m128_k3", "direct", NAMES),
            ]
        )
        for key, judgement in [
            ("conv_F32_m64_k3", RESNET),
            ("conv_F32_m128_k3", ("bert", "masked", None, 2, 0)),
        ]:
            entry = cache.get(key, candidates=NAMES)
            assert entry is not None
            judge(cache, entry, judgement)
        assert cache.checkpoint()
    second = tmp_path / "direct.db"
    shutil.copyfile(first, second)
    return first, second


def test_the_direct_writer_writes_the_rows_put_many_writes(
    device: Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _frozen(monkeypatch, NOW)
    first, second = _two_caches(device, tmp_path)
    assert _raw_rows(first) == _raw_rows(second)
    store = DirectStore(second, device)
    for when, batch in zip((NOW, LATER), _batches(), strict=True):
        _frozen(monkeypatch, when)
        with Cache.open(device=device, path=first) as cache:
            ids = cache.put_many(batch)
        assert store.put_many(batch, now=when) == ids
        assert _raw_rows(second) == _raw_rows(first)
    store.close()
    # And what a reader makes of them: the decisions view, the read contract.
    view = "SELECT * FROM decisions"
    assert sorted(sql(second, view), key=repr) == sorted(sql(first, view), key=repr)


def test_a_device_new_to_the_cache_gets_the_row_put_many_gives_it(
    device: Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _frozen(monkeypatch, NOW)
    first, second = _two_caches(device, tmp_path)
    gpu = Device("nvidia-h200", 132, "nvidia-h200-sm90-driver-580", "triton", "3.6.0")
    batch = _batches()[0]
    with Cache.open(device=gpu, path=first) as cache:
        ids = cache.put_many(batch)
    store = DirectStore(second, gpu)
    assert store.put_many(batch, now=NOW) == ids
    assert store.put_many([], now=NOW) == []
    store.close()
    assert _raw_rows(second) == _raw_rows(first)


def test_it_writes_only_a_current_cache_and_refuses_the_rest_untouched(
    device: Device, tmp_path: Path
) -> None:
    entry = [NewEntry("conv_F32_m64_k3", "im2col", NAMES)]
    missing = tmp_path / "missing.db"
    with pytest.raises(DirectWriteRefused, match="does not exist yet"):
        DirectStore(missing, device).put_many(entry)
    assert not missing.exists()

    older = tmp_path / "older.db"
    with Cache.open(device=device, path=older):
        pass
    sql(older, "UPDATE alembic_version SET version_num = '0003'")
    before = _raw_rows(older)
    with pytest.raises(DirectWriteRefused, match=rf"revision \['0003'\], not '{migrate.HEAD}'"):
        DirectStore(older, device).put_many(entry)
    assert _raw_rows(older) == before

    foreign = tmp_path / "foreign.db"
    sql(foreign, "CREATE TABLE notes (x)")
    with pytest.raises(DirectWriteRefused, match="delete mode, not WAL"):
        DirectStore(foreign, device).put_many(entry)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database, not at all" * 100)
    with pytest.raises(DirectWriteRefused, match="not a database"):
        DirectStore(garbage, device).put_many(entry)


def test_a_file_moved_aside_while_open_is_never_written(device: Device, tmp_path: Path) -> None:
    # As a damaged cache is moved aside (store/quarantine.py): the files renamed away, a fresh
    # cache in their place. The open connection still has the old file; the write must not
    # be acknowledged into it.
    db = tmp_path / "cache.db"
    with Cache.open(device=device, path=db):
        pass
    store = DirectStore(db, device)
    assert len(store.put_many([NewEntry("conv_F32_m64_k3", "im2col", NAMES)])) == 1
    aside = tmp_path / "aside"
    aside.mkdir()
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            Path(f"{db}{suffix}").rename(aside / f"cache.db{suffix}")
    with Cache.open(device=device, path=db):
        pass
    moved = _raw_rows(aside / "cache.db")
    with pytest.raises(DirectWriteRefused, match="moved aside or replaced"):
        store.put_many([NewEntry("conv_F32_m80_k3", "im2col", NAMES)])
    assert _raw_rows(aside / "cache.db") == moved
    # The next write opens the file that is the cache now.
    assert len(store.put_many([NewEntry("conv_F32_m96_k3", "im2col", NAMES)])) == 1
    with Cache.open(device=device, path=db) as cache:
        assert [e.key.text for e in cache.entries()] == ["conv_F32_m96_k3"]


def test_bad_entries_and_verdicts_write_nothing(device: Device, tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with Cache.open(device=device, path=path):
        pass
    before = _raw_rows(path)
    store = DirectStore(path, device)
    with pytest.raises(BadRecordError, match=r"entry 1 \(conv_F32_m8_k3\): choice 'nope'"):
        store.put_many(
            [NewEntry("conv_F32_m4_k3", "direct", NAMES), NewEntry("conv_F32_m8_k3", "nope", NAMES)]
        )
    with pytest.raises(BadRecordError, match="no run 7 in this cache"):
        store.put_many([NewEntry("conv_F32_m4_k3", "direct", NAMES, run_id=7)])
    from tunecache.cache import NewVerdict

    judged = NewEntry("conv_F32_m4_k3", "direct", NAMES, verdicts=[NewVerdict("m", "f", "masked")])
    with pytest.raises(BadArgumentError, match="without verdicts"):
        store.put_many([judged])

    def crash() -> None:
        raise RuntimeError("stopped before the commit")

    store.before_commit = crash
    with pytest.raises(RuntimeError, match="before the commit"):
        store.put_many([NewEntry("conv_F32_m4_k3", "direct", NAMES, record=conv_record())])
    store.close()
    assert _raw_rows(path) == before


def test_it_queues_behind_the_writers_flock(device: Device, tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with Cache.open(device=device, path=path):
        pass
    queue = WriteQueue(path, 1.0)
    fd = queue.acquire()
    try:
        with pytest.raises(StoreBusyError, match="locked by another writer"):
            DirectStore(path, device, busy_timeout=0.05).put_many(
                [NewEntry("conv_F32_m4_k3", "direct", NAMES)]
            )
    finally:
        WriteQueue.release(fd)
    store = DirectStore(path, device, busy_timeout=0.05)
    assert store.put_many([NewEntry("conv_F32_m4_k3", "direct", NAMES)]) == [1]
    store.close()


def test_times_are_kept_as_sqlalchemy_keeps_them() -> None:
    # The row comparison above holds this for UTC times; here for a time in another zone.
    eastern = datetime(2026, 1, 2, 3, 4, 5, 6).astimezone()
    assert reading.stamp(eastern) == eastern.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def test_writing_needs_no_sqlalchemy(device: Device, tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with Cache.open(device=device, path=path):
        pass
    code = (
        "import sys\n"
        "from tunecache.writes import NewEntry\n"
        "from tunecache.device import Device\n"
        "from tunecache.store.direct import DirectStore\n"
        f"device = Device(*{tuple(device.as_dict().values())!r})\n"
        f"store = DirectStore({str(path)!r}, device)\n"
        f"print(store.put_many([NewEntry('conv_F32_m4_k3', 'direct', {NAMES!r})]))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'alembic'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split("\n")[:2] == ["[1]", "[]"]
