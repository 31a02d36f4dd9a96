"""What a cache's filesystem allows: a regular database file, room to write, reading without a
-shm file. (Network filesystems: tests/reliability/test_health.py; a real full disk:
tests/reliability/test_full_disk.py.)"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from pathlib import Path

import pytest

from tests.reliability.disk_full import limit_file_size
from tests.reliability.harness import MARK, OPENED, Child, Sender
from tunecache.cache import Cache
from tunecache.errors import StoreError
from tunecache.store import filesystems
from tunecache.store.filesystems import EXCLUSIVE, SHARED, database_stat, no_room, open_for_reading


def test_database_stat_of_a_file_nothing_and_a_fifo(tmp_path: Path) -> None:
    (tmp_path / "a.db").write_bytes(b"x")
    found = database_stat(tmp_path / "a.db")
    assert found is not None and found.st_size == 1
    assert database_stat(tmp_path / "none.db") is None
    assert database_stat(tmp_path / "a.db" / "below.db") is None  # a file on the way
    os.mkfifo(tmp_path / "fifo.db")
    with pytest.raises(StoreError, match="is a FIFO, not a regular file"):
        database_stat(tmp_path / "fifo.db")
    (tmp_path / "link.db").symlink_to("fifo.db")
    with pytest.raises(StoreError, match="is a symlink to a FIFO"):
        database_stat(tmp_path / "link.db")


def _error(name: str) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorname = name  # type: ignore[attr-defined]
    return error


def test_no_room_says_disk_full_only_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "cache.db"
    assert no_room(_error("SQLITE_FULL"), db) == "disk full: free some space on its filesystem"
    assert no_room(OSError(errno.ENOSPC, "No space left on device"), db) is not None
    assert no_room(_error("SQLITE_CORRUPT"), db) is None
    assert no_room(OSError(errno.EACCES, "Permission denied"), db) is None
    # An I/O error SQLite gives no cause for: a full disk only where the disk is nearly full,
    # or where this process may not write past a size.
    monkeypatch.setattr(filesystems, "_size_limit", lambda: None)
    monkeypatch.setattr(filesystems, "_free_bytes", lambda folder: 10 << 30)
    assert no_room(_error("SQLITE_IOERR_SHMSIZE"), db) is None
    monkeypatch.setattr(filesystems, "_free_bytes", lambda folder: 4096)
    assert "4096 bytes free" in str(no_room(_error("SQLITE_IOERR_SHMSIZE"), db))
    monkeypatch.setattr(filesystems, "_size_limit", lambda: 1024)
    assert "1024 bytes" in str(no_room(OSError(errno.EFBIG, "File too large"), db))


def test_open_for_reading_reads_shared_and_never_writes(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    Cache.open(path=db).close()
    conn, how = open_for_reading(db, 1.0)
    try:
        assert how == SHARED
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("CREATE TABLE x (y)")
    finally:
        conn.close()


def test_without_room_for_a_shm_it_reads_exclusive_and_locks_others_out(tmp_path: Path) -> None:
    # In a child that may write no file past 1 KiB: the new -shm cannot grow, as on a full disk
    # (tests/reliability/test_full_disk.py has a real one).
    db = tmp_path / "cache.db"
    with Cache.open(path=db) as cache:
        cache.put("conv_F32_m64_k3", choice="b", candidates=("a", "b"))
    assert not Path(f"{db}-shm").exists()

    def body(send: Sender) -> None:
        limit_file_size(1024)()
        conn, how = open_for_reading(db, 1.0)
        out = [how, conn.execute("SELECT count(*) FROM read_entries_v1").fetchone()[0]]
        other = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0)
        try:
            other.execute("SELECT count(*) FROM read_entries_v1").fetchone()
            out.append("another connection read it")
        except sqlite3.OperationalError as error:
            out.append(str(error))
        other.close()
        try:
            conn.execute("DELETE FROM entries")
        except sqlite3.OperationalError as error:
            out.append(str(error))
        conn.close()
        # A -wal with frames in it is left to a reader with a -shm.
        Path(f"{db}-wal").write_bytes(b"x" * 100)
        try:
            open_for_reading(db, 1.0)
        except sqlite3.OperationalError as error:
            out.append(str(error))
        send(MARK, OPENED, text=json.dumps(out))

    kid = Child(body)
    kid.finish()
    assert kid.crashes() == [], kid.crashes()
    [said] = [json.loads(m.text) for m in kid.messages if m.tag == MARK]
    assert said == [
        EXCLUSIVE,
        1,
        "database is locked",
        "attempt to write a readonly database",
        "disk I/O error",
    ]
