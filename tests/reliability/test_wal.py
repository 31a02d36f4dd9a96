"""tunecache cannot meet the WAL-reset bug: its readers never checkpoint, its checkpoints and
commits all hold the writers' lock, so the warning about it is one line of `doctor` and `where`
(case 9 of issue 16: a 400-character warning printed by every command that wrote)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.reliability.harness import DEVICE, NAMES
from tunecache.cache import Cache
from tunecache.errors import StoreBusyError
from tunecache.maintain.query import run_query
from tunecache.resolve import Table
from tunecache.store.engine import make_engine, read_connection
from tunecache.store.reading import CacheReader

AFFECTED = sqlite3.sqlite_version_info < (3, 51, 3) and sqlite3.sqlite_version_info[:2] not in (
    (3, 44),
    (3, 50),
)

# A writer that leaves committed frames in the WAL and dies without closing: no connection is
# left to checkpoint them, so whoever opens the file next is its last closer.
WRITER = textwrap.dedent(
    """
    import os, sys
    from tests.reliability.harness import DEVICE, NAMES
    from tunecache.cache import Cache

    cache = Cache.open(device=DEVICE, path=sys.argv[1])
    for i in range(int(sys.argv[2])):
        cache.put(f"conv_F32_h{i + 1}", choice=NAMES[0], candidates=NAMES)
    print("written", flush=True)
    os._exit(0)
    """
)


def _written(db: Path, puts: int = 20) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(db), str(puts)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    assert done.stdout.strip() == "written", done.stderr


def _files(db: Path) -> tuple[str, int]:
    """The database's bytes, and its WAL's size."""
    wal = db.with_name(db.name + "-wal")
    return hashlib.sha256(db.read_bytes()).hexdigest(), wal.stat().st_size if wal.exists() else -1


def _resolver(db: Path) -> None:
    table = Table.open(device=DEVICE, path=db, use="all")
    assert table.resolve("conv_F32_h1", NAMES, NAMES[1]).source == "exact"
    table.close()


def _cache_reader(db: Path) -> None:
    reader = CacheReader.open(db, DEVICE.fingerprint)
    assert reader is not None and reader.entry_count() == 20
    reader.close()


def _sql_command(db: Path) -> None:
    assert run_query(db, "SELECT count(*) FROM entries").rows == ((20,),)


def _readonly_engine(db: Path) -> None:
    engine = make_engine(db, readonly=True)
    with read_connection(engine) as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM entries").scalar() == 20
    engine.dispose()


@pytest.mark.parametrize(
    "read", [_resolver, _cache_reader, _sql_command, _readonly_engine], ids=lambda f: f.__name__
)
def test_a_reader_closing_last_never_checkpoints(
    tmp_path: Path, read: Callable[[Path], None]
) -> None:
    db = tmp_path / "cache.db"
    _written(db)
    before = _files(db)
    assert before[1] > 0  # the writer's commits are in the WAL, not yet in the database
    read(db)
    assert _files(db) == before


def test_a_connection_that_may_write_checkpoints_when_it_closes_last(tmp_path: Path) -> None:
    # The control: what the readers above would have done had they been opened to write.
    db = tmp_path / "cache.db"
    _written(db)
    before = _files(db)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM entries").fetchone() == (20,)
    conn.close()
    after = _files(db)
    assert after[0] != before[0] and after[1] == -1  # folded in, and the WAL deleted


def test_a_connection_closing_while_another_is_open_never_checkpoints(tmp_path: Path) -> None:
    # Why the checkpoint a closing connection makes cannot race a commit: SQLite makes it only
    # when it gets the database's exclusive lock, that is when no other connection is open.
    db = tmp_path / "cache.db"
    _written(db)
    other = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    other.execute("SELECT count(*) FROM entries").fetchone()
    before = _files(db)
    conn = sqlite3.connect(db)
    conn.execute("SELECT count(*) FROM entries").fetchone()
    conn.close()
    assert _files(db) == before
    other.close()


def test_a_checkpoint_waits_for_the_writers_lock(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    with Cache.open(device=DEVICE, path=db, busy_timeout=0.2) as cache:
        cache.put("conv_F32_h1", choice=NAMES[0], candidates=NAMES)
        fd = os.open(db.with_name(db.name + ".write-lock"), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # as a writer in another process holds it
            with pytest.raises(StoreBusyError):
                cache.checkpoint()
        finally:
            os.close(fd)
    # Free again (the given-up wait's helper takes the lock and lets go at once; a loaded
    # machine may take longer than 0.2 s to run it, so the deadline is a generous one).
    with Cache.open(device=DEVICE, path=db, busy_timeout=30) as cache:
        assert cache.checkpoint()


def _tunecache(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunecache", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_no_command_prints_the_wal_reset_warning_and_doctor_and_where_name_it_once() -> None:
    with Cache.open() as cache:
        cache.put("conv_F32_h1", choice=NAMES[0], candidates=NAMES)
        cache.put("conv_F32_h2", choice=NAMES[0], candidates=NAMES)
    for command in (["prune", "--unvalidated"], ["doctor", "--repair"], ["list"]):
        done = _tunecache(*command)
        assert done.returncode == 0, done.stderr
        assert "WAL" not in done.stderr, (command, done.stderr)
        assert done.stderr == "", (command, done.stderr)
    for command in (["where"], ["doctor"]):
        done = _tunecache(*command)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        lines = [line for line in done.stdout.splitlines() if "WAL-reset bug" in line]
        assert len(lines) == (1 if AFFECTED else 0), done.stdout
        assert all(len(line) < 200 for line in lines)
