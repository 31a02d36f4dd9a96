"""Many processes writing one cache at once, and the write lock every writer takes up front."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reliability import harness
from tunecache.cache import Cache
from tunecache.errors import TunecacheError


@pytest.mark.slow
def test_concurrent_writers_lose_nothing_mix_nothing_and_never_see_locked(tmp_path: Path) -> None:
    # Four writers (2, 8 and 32 in tools/bench_reliability.py) on keys half of which they all
    # share, while two readers (Cache.get, and the resolver when it exists) check every answer.
    result = harness.concurrent_writers(tmp_path / "c.db", writers=4, puts=60, readers=2)
    print(result.summary())
    assert result.acked == 4 * 60  # no put failed, so every one was acknowledged
    assert result.caller_errors == []  # in particular no 'database is locked' reached a caller
    assert result.locked_errors == 0
    assert result.reads > 0
    # every acknowledged entry present and byte-equal, one row per shared key holding a write
    # no later write beat, no mixed rows, integrity_check ok, nothing half-written
    assert result.violations == []


def test_a_second_writer_with_no_patience_is_refused_at_once(tmp_path: Path) -> None:
    # The first writer holds a transaction that has written nothing yet: only BEGIN IMMEDIATE
    # takes the lock that early, so the refusal proves writers take it up front (a deferred
    # BEGIN would let both start and fail later, at the first write, with SQLITE_BUSY).
    got, seconds = harness.second_writer_refused(tmp_path / "l.db")
    print(f"second writer with busy_timeout=0: {got} after {seconds * 1000:.2f} ms")
    assert got == "StoreBusyError"


def test_a_child_forked_inside_a_write_does_not_keep_the_write_lock(tmp_path: Path) -> None:
    # A child forked while the parent writes inherits the descriptor that holds the writers'
    # flock; if it kept it, every writer would wait for the child to exit.
    db = tmp_path / "f.db"
    harness.new_cache(db)
    release_r, release_w = os.pipe()
    with Cache.open(device=harness.DEVICE, path=db) as cache:
        with cache.transaction(write=True):
            sleeper = harness.Child(lambda send: _wait(release_r), close=[release_w])
        got = _write_from_another_process(db)
        os.close(release_w)
        sleeper.finish()
        os.close(release_r)
    assert got == "written"


def test_writes_go_on_without_a_usable_lock_file(tmp_path: Path) -> None:
    # The queue only orders writers; SQLite's lock keeps them correct. A lock file that cannot
    # be created (here a link into a folder that does not exist) must not stop a write.
    db = tmp_path / "n.db"
    harness.new_cache(db)
    lock = tmp_path / "n.db.write-lock"
    lock.unlink()
    lock.symlink_to(tmp_path / "missing" / "lock")
    with Cache.open(device=harness.DEVICE, path=db) as cache:
        harness.write_for(0, 0, harness.shared_key(0)).put(cache)
        assert cache.count() == 1


def _write_from_another_process(db: Path) -> str:
    def body(send: harness.Sender) -> None:
        with Cache.open(device=harness.DEVICE, path=db, busy_timeout=2) as other:
            try:
                harness.write_for(1, 0, harness.shared_key(1)).put(other)
                send(harness.ACK)
            except TunecacheError as error:
                send(harness.ERROR, text=type(error).__name__)

    kid = harness.Child(body)
    kid.finish()
    got = [m for m in kid.messages if m.tag in (harness.ACK, harness.ERROR)]
    return "written" if got and got[0].tag == harness.ACK else str(got or kid.crashes())


def _wait(fd: int) -> None:
    os.read(fd, 1)  # returns when the other end closes
