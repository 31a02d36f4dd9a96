"""The engine every cache runs on: pragmas, BEGIN IMMEDIATE, lock deadlines, forks, pooled
connections and the WAL checkpoint."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.store_helpers import MMM, RFC_TEXT, sql
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError, StoreBusyError, StoreError
from tunecache.keys import make_key
from tunecache.store.engine import (
    MAX_BUSY_TIMEOUT,
    busy_errors,
    check_timeout,
    checkpoint,
    is_busy,
    make_engine,
    read_connection,
)

NAMES = list(MMM)


def _wal(cache: Cache) -> Path:
    return cache.path.with_name(cache.path.name + "-wal")


# --- pragmas and transactions ------------------------------------------------------------------


def test_pragmas_are_set_on_every_connection(cache: Cache) -> None:
    with cache.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def _second_writer_refused(path: Path) -> bool:
    """Whether a writer with no patience is refused the write lock of `path` right now."""
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        assert "locked" in str(error)
        return True
    else:
        other.execute("ROLLBACK")
        return False
    finally:
        other.close()


def test_writes_take_the_write_lock_at_begin(cache: Cache) -> None:
    # A deferred BEGIN would take no lock until the first write; IMMEDIATE holds it at once, so a
    # second writer with no patience is refused while the transaction has not written anything.
    with cache.transaction(write=True):
        assert _second_writer_refused(cache.path)


def test_reads_begin_deferred_and_take_no_write_lock(cache: Cache) -> None:
    with read_connection(cache.engine) as conn, conn.begin():
        assert conn.exec_driver_sql("SELECT count(*) FROM entries").scalar() == 0
        assert not _second_writer_refused(cache.path)
    with cache.transaction():
        assert not _second_writer_refused(cache.path)


def test_a_lock_held_past_the_timeout_is_store_busy(
    cache: Cache, cache_at: Callable[..., Cache]
) -> None:
    holder = sqlite3.connect(cache.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        impatient = cache_at(cache.path, busy_timeout=0.2)
        with pytest.raises(StoreBusyError, match="locked by another writer"):
            impatient.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
        # Readers are not blocked by a writer in WAL mode.
        assert impatient.count() == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), -1, "5", True, 10**9])
def test_a_lock_deadline_must_be_finite(device: Device, tmp_path: Path, timeout: object) -> None:
    with pytest.raises(BadArgumentError, match="busy_timeout"):
        Cache.open(device=device, root=tmp_path, busy_timeout=timeout)  # type: ignore[arg-type]
    assert not (tmp_path / "tune").exists()
    with pytest.raises(BadArgumentError, match="busy_timeout"):
        check_timeout(timeout)


@pytest.mark.parametrize("timeout", [0, 0.5, 30, MAX_BUSY_TIMEOUT])
def test_a_lock_deadline_from_zero_to_a_day_is_seconds(timeout: float) -> None:
    checked = check_timeout(timeout)
    assert checked == timeout and type(checked) is float


def test_busy_errors_are_one_line_store_errors(tmp_path: Path) -> None:
    locked = sqlite3.OperationalError("database is locked")
    assert is_busy(locked) and not is_busy(sqlite3.OperationalError("no such table: x"))
    assert not is_busy(ValueError("database is locked"))
    db = tmp_path / "c.db"
    busy = r"c\.db is locked by another writer \(waited up to 2 s\)$"
    with pytest.raises(StoreBusyError, match=busy), busy_errors(db, 2.0):
        raise locked
    with pytest.raises(StoreError, match=r"c\.db: no such table: x$"), busy_errors(db, 2.0):
        raise sqlite3.OperationalError("no such table: x")


def test_only_a_read_only_engine_may_call_its_file_immutable(tmp_path: Path) -> None:
    with pytest.raises(BadArgumentError, match="only a read-only engine"):
        make_engine(tmp_path / "c.db", immutable=True)


# --- processes ---------------------------------------------------------------------------------


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
    assert sql(cache.path, "PRAGMA integrity_check") == [("ok",)]


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
    assert sql(db, "SELECT count(*) FROM entries") == [(20 + 4 * 20,)]
    assert sql(db, "SELECT count(*) FROM keys") == [(100,)]
    assert sql(db, "SELECT count(*) FROM candidate_sets") == [(1,)]
    assert sql(db, "PRAGMA integrity_check") == [("ok",)]


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


# --- the WAL checkpoint ------------------------------------------------------------------------


def test_a_checkpoint_folds_the_wal_into_the_file_and_truncates_it(cache: Cache) -> None:
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    assert _wal(cache).stat().st_size > 0
    assert checkpoint(cache.engine) is True
    assert _wal(cache).stat().st_size == 0
    # The entry now lives in the database file itself: a reader that ignores the WAL sees it.
    raw = sqlite3.connect(f"file:{cache.path}?immutable=1", uri=True)
    try:
        assert raw.execute("SELECT count(*) FROM entries").fetchone() == (1,)
    finally:
        raw.close()
    cache.put(make_key("conv_F32", h=8), choice="mmm_4x4", candidates=NAMES)
    assert cache.checkpoint() is True and _wal(cache).stat().st_size == 0


def test_a_reader_on_an_old_snapshot_keeps_the_checkpoint_from_finishing(
    cache_at: Callable[..., Cache],
) -> None:
    # No busy timeout: the checkpoint reports the reader at once instead of waiting for it.
    cache = cache_at("checkpoint.db", busy_timeout=0)
    cache.put(RFC_TEXT, choice="mmm_8x8", candidates=NAMES)
    reader = sqlite3.connect(cache.path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM entries").fetchone() == (1,)
        cache.put(make_key("conv_F32", h=8), choice="mmm_4x4", candidates=NAMES)
        assert cache.checkpoint() is False
        assert _wal(cache).stat().st_size > 0
        reader.execute("COMMIT")
    finally:
        reader.close()
    assert cache.checkpoint() is True and _wal(cache).stat().st_size == 0


# --- the file a transaction writes is the one at the path --------------------------------------


def _move_aside(db: Path, to: Path) -> None:
    """Rename a database and its -wal and -shm, as quarantine.move_aside does."""
    for suffix in ("", "-wal", "-shm"):
        source = db.with_name(db.name + suffix)
        if source.exists():
            source.rename(to.with_name(to.name + suffix))


def test_a_transaction_on_a_file_moved_aside_raises_store_moved_error(tmp_path: Path) -> None:
    from tunecache.errors import StoreMovedError
    from tunecache.store.engine import file_identity, transaction

    db = tmp_path / "c.db"
    engine = make_engine(db)
    try:
        with transaction(engine) as conn:
            conn.exec_driver_sql("CREATE TABLE t (x)")
        assert file_identity(db) is not None
        _move_aside(db, tmp_path / "moved.db")
        sqlite3.connect(db).close()  # another file now has the name
        for read in (False, True):
            with (
                pytest.raises(StoreMovedError, match="moved aside or replaced"),
                transaction(engine, read=read),
            ):
                pass
        # Nothing was written to the moved file, and the writers' lock is free again.
        with sqlite3.connect(tmp_path / "moved.db") as moved:
            assert moved.execute("SELECT count(*) FROM t").fetchone() == (0,)
        sql(db, "CREATE TABLE u (y)")
    finally:
        engine.dispose()


def test_a_transaction_with_reopen_begins_again_on_the_engine_it_gets(tmp_path: Path) -> None:
    from tunecache.store.engine import transaction

    db = tmp_path / "c.db"
    old = make_engine(db)
    new = old
    try:
        with transaction(old) as conn:
            conn.exec_driver_sql("CREATE TABLE t (x)")
        _move_aside(db, tmp_path / "moved.db")
        new = make_engine(db)

        ran = 0
        with transaction(old, reopen=lambda failed: new) as conn:
            conn.exec_driver_sql("CREATE TABLE u (y)")
            ran += 1
        assert ran == 1  # the block ran once, on the live file
        assert sql(db, "SELECT name FROM sqlite_master") == [("u",)]
    finally:
        old.dispose()
        new.dispose()


_HOLD_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()  # until the test says to let go
"""

_PROBE_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("free")
except BlockingIOError:
    print("held")
"""


def test_a_wait_given_up_never_costs_a_later_writer_its_lock(tmp_path: Path) -> None:
    # A writer times out while another process holds the lock; its helper thread stays blocked
    # in flock. Closing that cache, and writing through a new one, must leave the new writer
    # holding the lock: the helper, once it gets the lock, lets go of its own descriptor only,
    # never of one the process gave the same number to since.
    import subprocess
    import sys

    db = tmp_path / "cache.db"
    lock = f"{db}.write-lock"
    Cache.open(path=db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, lock], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == b"held\n"
    first = Cache.open(path=db, busy_timeout=0.2)
    with pytest.raises(StoreBusyError):
        first.put("op_F32_m1", choice="a", candidates=["a", "b"])
    first.close()
    second = Cache.open(path=db, busy_timeout=30)
    holder.stdin.write(b"go\n")
    holder.stdin.flush()
    with second.transaction(write=True):
        # The holder has let go; both the given-up helper and this writer wanted the lock.
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE_LOCK, lock], capture_output=True, text=True, check=True
        )
        assert probe.stdout.strip() == "held"
    assert holder.wait(timeout=60) == 0
    second.close()
