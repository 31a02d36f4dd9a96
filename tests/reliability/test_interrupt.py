"""Ctrl-C in the middle of a write: the interrupt reaches the caller, and no lock stays behind.

A KeyboardInterrupt can land anywhere in a transaction, inside SQLAlchemy or the driver. It must
surface as itself (not as SQLAlchemy's PendingRollbackError about the half-finished
transaction), and the write queue's lock must be free afterwards, so that the process can log
that it was interrupted and a later write does not wait out the deadline.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunecache.cache import Cache

NAMES = ["a", "b", "c"]


def _flock_free(db: Path) -> bool:
    """Whether another process can take the write queue's lock right now."""
    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, f"{db}.write-lock"], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.fixture
def alarm() -> Iterator[None]:
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_an_interrupt_inside_a_write_leaves_the_next_write_free(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    with Cache.open(path=db, busy_timeout=1) as cache:
        with pytest.raises(KeyboardInterrupt), cache.transaction(write=True) as tx:
            tx.start_run("tune", None)
            raise KeyboardInterrupt
        assert _flock_free(db)
        cache.put("op_F32_m1", choice="a", candidates=NAMES)  # no wait, no StoreBusyError
        assert cache.count() == 1


@pytest.mark.slow
# An alarm that lands inside a weakref callback is reported by Python as "ignored": an
# artefact of injecting interrupts, as a real Ctrl-C there would be.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_interrupts_at_random_points_of_writes_surface_as_themselves(
    tmp_path: Path, alarm: None
) -> None:
    seen = {"interrupted": 0, "finished": 0}
    for seed in range(30):
        db = tmp_path / f"c{seed}.db"
        cache = Cache.open(path=db, busy_timeout=1)
        signal.setitimer(signal.ITIMER_REAL, random.Random(seed).uniform(0.001, 0.03))
        try:
            for i in range(400):
                entry = cache.put(f"op_F32_m{i}", choice="a", candidates=NAMES)
                cache.validate(entry, model="m", fingerprint="f", verdict="validated")
            seen["finished"] += 1
        except KeyboardInterrupt:
            seen["interrupted"] += 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            cache.close()
        assert _flock_free(db), f"seed {seed}: the write queue's lock was left held"
        with os.fdopen(os.open(db, os.O_RDONLY), "rb") as f:  # the file is still a database
            assert f.read(16) == b"SQLite format 3\x00"
    assert seen["interrupted"] > 0
