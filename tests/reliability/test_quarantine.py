"""A cache moved aside while writers write: no write a writer was told is stored may be lost.

Issue 16, case 1: a writer kept putting while a second process found a damaged page and moved
the file aside; the writer got no error and went on acknowledging writes into the moved file,
and the entries written before left the live cache too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import damage


@pytest.mark.parametrize(
    ("target", "writers"), [(damage.KEY_ID_INDEX, 1), (damage.ENTRIES_TABLE, 2)]
)
def test_writes_acknowledged_while_a_damaged_cache_is_moved_aside_are_all_in_the_live_cache(
    tmp_path: Path, target: str, writers: int
) -> None:
    # A page in the middle of an index, or of the entries table: one the writers' new rows
    # never touch, so every write they acknowledge is whole wherever it landed.
    trial = damage.move_while_writing(tmp_path / "root", 1, writers=writers, target=target)
    print(
        f"{trial.writers} writers, {trial.damaged}: {trial.acked} acknowledged, "
        f"{trial.failed} failed, {len(trial.lost)} lost; {trial.warning}"
    )
    assert trial.violations == []
    assert trial.acked > 0
    assert trial.lost == [], f"{len(trial.lost)} acknowledged writes lost, first {trial.lost[:3]}"
