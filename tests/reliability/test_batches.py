"""Many processes writing batches into one cache at once: every acknowledged entry is there
afterwards, byte for byte, and nothing of a batch is half there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import batches


@pytest.mark.slow
def test_four_processes_writing_batches_at_once_lose_nothing(tmp_path: Path) -> None:
    # tools/bench_store.py runs the same scenario 5 times bigger and prints its rate.
    result = batches.batch_writers(tmp_path / "b.db", writers=4, batches=5, size=100)
    print(f"4 writers x 5 batches of 100: {result.entries_per_s:.0f} entries/s")
    assert result.caller_errors == []
    assert result.acked == 4 * 5 * 100  # every put_many returned
    # every acknowledged entry present and byte-equal, as many rows as acknowledged entries,
    # integrity_check ok, nothing half-written
    assert result.violations == []


def test_a_writer_that_dies_between_batches_leaves_its_earlier_batches_whole(
    tmp_path: Path,
) -> None:
    # The same checks after a writer was killed: what it acknowledged is there, and the
    # entries of a batch are all there or none of them is.
    result = batches.killed_writer(tmp_path / "k.db", batches=3, size=50)
    assert result.violations == []
    assert 50 <= result.acked <= 150
