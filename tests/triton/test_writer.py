"""tunecache.triton.writer: a tuned key's record written behind its launch, and when it is there.

The multi-process tests run real processes (tests/triton/writer_child.py) and synchronise on the
lines they print at the point under test, and on the writers' flock, which the test holds to keep
a child's writer from writing: never on a sleep.
"""

from __future__ import annotations

import json
import os
import select
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.store_helpers import all_rows
from tests.triton.fake import GPU, CpuKernel, launch, operands, tuner
from tunecache import paths
from tunecache.cache import Cache
from tunecache.store.writelock import WriteQueue
from tunecache.triton import flush

#: how long a child may take to reach its next line before the test fails
PATIENCE = 120.0


def _db() -> Path:
    return paths.locate(device=GPU)[1]


def _made() -> Path:
    """The test's store, created with its schema and nothing in it (as a process that ran
    before leaves it)."""
    with Cache.open(device=GPU) as cache:
        return cache.path


def _entries(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
        except sqlite3.OperationalError:
            return 0  # a store in the making: no table yet


class Child:
    """A writer_child process, read line by line (from its pipe's bytes as they come, so that a
    line read never hides the next one in a buffer `select` cannot see)."""

    def __init__(self, m: int, *flags: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.triton.writer_child", str(m), *flags],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._read = b""
        #: every line it printed so far
        self.lines: list[str] = []

    def line(self) -> str:
        """The next line it prints."""
        stdout = self.process.stdout
        assert stdout is not None
        while b"\n" not in self._read:
            readable, _, _ = select.select([stdout], [], [], PATIENCE)
            assert readable, f"the child printed nothing in {PATIENCE} s after {self.lines}"
            chunk = os.read(stdout.fileno(), 4096)
            assert chunk, f"the child ended: {self.finish()}"
            self._read += chunk
        text, self._read = self._read.split(b"\n", 1)
        self.lines.append(text.decode())
        return self.lines[-1]

    def expect(self, prefix: str) -> str:
        """The rest of the next line, which must start with `prefix`."""
        text = self.line()
        assert text.startswith(prefix), text
        return text[len(prefix) :].strip()

    def finish(self) -> str:
        """Wait for it to end with status 0; what it said on stderr."""
        _, err = self.process.communicate(timeout=PATIENCE)
        assert self.process.returncode == 0, err.decode()
        return err.decode()

    def kill(self) -> None:
        self.process.kill()
        self.process.communicate(timeout=PATIENCE)


@contextmanager
def _writers_held(db: Path) -> Iterator[None]:
    """Hold the writers' flock of `db`: every tunecache writer queues behind it until the
    block ends."""
    db.parent.mkdir(parents=True, exist_ok=True)
    fd = WriteQueue(db, 1.0).acquire()
    assert fd >= 0
    try:
        yield
    finally:
        WriteQueue.release(fd)


def _tuned_by(child: Child) -> dict[str, int]:
    stats: dict[str, int] = json.loads(child.expect("launched"))
    return stats


# --- in one process --------------------------------------------------------------------------


def test_flush_and_wait_pending_write_what_is_queued() -> None:
    db = _made()
    kernel = tuner(CpuKernel())
    launch(kernel, 96)
    assert flush(timeout=60)
    assert _entries(db) == 1
    launch(kernel, 256)  # beyond the cap of 96: tuned
    assert kernel.wait_pending(timeout=60)
    assert _entries(db) == 2 and kernel.stats["tuned"] == 2


def test_another_kernel_of_the_process_sees_the_first_ones_decisions() -> None:
    _made()
    first = CpuKernel()
    launch(tuner(first), 96)
    again = CpuKernel()
    second = tuner(again)
    launch(second, 96)  # its first look at the store waits for what this process queued
    assert second.stats["exact"] == 1 and len(again.launches) == 1


def test_a_key_borrows_from_one_tuned_in_this_process_before_its_record_is_written() -> None:
    db = _made()
    kernel = tuner(CpuKernel())
    with _writers_held(db):
        launch(kernel, 96)
        out = launch(kernel, 80)  # the table serves 96's decision from memory
        assert kernel.stats["borrowed"] == 1 and _entries(db) == 0
    a, b, _ = operands(80)
    assert abs(out - a @ b).max() < 1e-3
    assert kernel.wait_pending(timeout=60) and _entries(db) == 1


# --- across processes --------------------------------------------------------------------------


def test_the_launch_does_not_wait_for_the_write_and_wait_pending_flushes_it() -> None:
    db = _made()
    with _writers_held(db):
        child = Child(96, "--wait")
        assert _tuned_by(child)["tuned"] == 1  # launched, its record queued behind our flock
        assert _entries(db) == 0
    assert child.expect("flushed") == "True"
    assert _entries(db) == 1
    assert child.expect("imported") == "[]"  # the store existed: no SQLAlchemy, no Alembic
    child.finish()


def test_a_store_not_made_yet_is_made_behind_the_first_launch() -> None:
    db = _db()
    assert not db.exists()
    with _writers_held(db):
        child = Child(96)
        assert _tuned_by(child)["tuned"] == 1  # launched while the store is not made yet
        assert _entries(db) == 0
    child.finish()  # its exit flushed the record: the store was made for it
    assert _entries(db) == 1


def test_records_are_flushed_at_exit_and_the_next_process_reads_them() -> None:
    _made()
    Child(96).finish()
    reader = Child(96)
    assert _tuned_by(reader) == {"exact": 1, "borrowed": 0, "reused": 0, "tuned": 0, "single": 0}
    reader.finish()


def test_a_process_killed_before_its_write_loses_the_record_and_the_next_tunes_again() -> None:
    db = _made()
    before = all_rows(db)
    with _writers_held(db):
        child = Child(96)
        assert _tuned_by(child)["tuned"] == 1
        child.kill()  # its record was queued, never written
    assert all_rows(db) == before
    again = Child(96, "--wait")
    assert _tuned_by(again)["tuned"] == 1
    assert again.expect("flushed") == "True"
    again.finish()
    assert _entries(db) == 1


def test_a_process_killed_inside_its_write_leaves_no_part_of_the_record() -> None:
    db = _made()
    before = all_rows(db)
    child = Child(96, "--stall-commit")
    seen = [child.line()]
    # The launch, and its writer inside the transaction, in whichever order they come.
    while "in transaction" not in seen or not any(s.startswith("launched") for s in seen):
        seen.append(child.line())
    child.kill()
    assert all_rows(db) == before
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    again = Child(96)
    assert _tuned_by(again)["tuned"] == 1
    again.finish()
    assert _entries(db) == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
def test_a_fork_writes_the_records_first() -> None:
    db = _made()
    with _writers_held(db):
        child = Child(96, "--fork")
        assert _tuned_by(child)["tuned"] == 1
        # Its fork now waits for the record's write, which waits for this flock.
    assert child.expect("sees") == "1"
    child.finish()


def test_a_record_not_stored_is_said_even_where_warnings_are_errors(tmp_path: Path) -> None:
    import warnings

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache root should be")
    kernel = tuner(CpuKernel(), root=blocker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the resolver's own, of the same unusable root
        warnings.filterwarnings("error", message="tunecache: matmul_kernel's")
        launch(kernel, 96)
        assert kernel.wait_pending(timeout=60)  # the writer said it, and went on
    db = _made()
    again = tuner(CpuKernel())
    launch(again, 96)
    assert again.wait_pending(timeout=60) and _entries(db) == 1
