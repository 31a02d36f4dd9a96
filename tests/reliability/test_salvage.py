"""A damaged cache is salvaged, not forgotten: what can still be read is kept, whole.

Issue 16, case 2: on a 30,000-entry cache, random bytes in one page of one index moved all
30,000 entries aside and left an empty cache. Here a cache of 3,000 entries (tools/
bench_quarantine.py runs 30,000) gets random bytes in one page: of an index, it keeps every
entry; of the entries table, it loses at most the rows that page held.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import damage
from tests.reliability.harness import DEVICE
from tunecache.cache import Cache

ENTRIES = 3000


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of ENTRIES entries, written once for the module and copied by each test."""
    db = tmp_path_factory.mktemp("salvage-template") / "cache.db"
    damage.fill(db, ENTRIES)
    return db


@pytest.mark.parametrize("index", [damage.KEY_ID_INDEX, "sqlite_autoindex_keys_1"])
def test_one_garbage_index_page_keeps_every_entry(
    tmp_path: Path, template: Path, index: str
) -> None:
    trial = damage.salvage_page(tmp_path / "root", template, index, seed=3)
    print(f"{trial.damaged}: kept {trial.kept} of {trial.entries}; {trial.warning}")
    assert trial.violations == []
    assert (trial.kept, trial.intact) == (ENTRIES, ENTRIES)
    warning = damage.salvage_warning([trial.warning])
    assert f"{ENTRIES:,} entries kept, 0 lost" in warning


def test_one_garbage_table_page_loses_at_most_the_rows_it_held(
    tmp_path: Path, template: Path
) -> None:
    trial = damage.salvage_page(tmp_path / "root", template, damage.ENTRIES_TABLE, seed=4)
    print(f"{trial.damaged} ({trial.cells} rows): kept {trial.kept} of {trial.entries}")
    assert trial.violations == []
    assert trial.intact == trial.kept  # what is kept is byte-equal to what was written
    assert 0 < trial.lost <= trial.cells
    said = f"{trial.kept:,} entries kept, {trial.lost:,} lost"
    assert said in damage.salvage_warning([trial.warning])
    # doctor says so too, and finds nothing wrong with what was kept.
    from tunecache.maintain import doctor

    with Cache.open(device=DEVICE, root=tmp_path / "root") as cache:
        report = doctor(cache)
    assert report.salvaged is not None and said in report.salvaged, report.salvaged
    assert "quarantine" in report.salvaged
    assert report.healthy, report.problems


@pytest.mark.parametrize("seed", range(6))
def test_a_crash_in_the_middle_of_a_salvage_leaves_the_damaged_file_and_no_half_cache(
    tmp_path: Path, template: Path, seed: int, window: float
) -> None:
    trial = damage.crash_salvage(tmp_path / "root", template, seed, window)
    print(f"seed {seed}: killed {trial.phase}")
    assert trial.violations == []


@pytest.fixture(scope="module")
def window(template: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds a salvage of the template takes, from its start to the end of its open."""
    return damage.salvage_window(tmp_path_factory.mktemp("salvage-window") / "root", template)
