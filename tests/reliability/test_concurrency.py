"""Many processes writing one cache at once, and the write lock every writer takes up front."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import harness


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
