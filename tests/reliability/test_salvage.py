"""A damaged cache is salvaged, not forgotten: what can still be read is kept, whole.

Issue 16, case 2: on a 30,000-entry cache, random bytes in one page of one index moved all
30,000 entries aside and left an empty cache. Here a cache of 3,000 entries (tools/
bench_quarantine.py runs 30,000) gets random bytes in one page: of an index, it keeps every
entry; of the entries table, it loses at most the rows that page held.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import damage, harness
from tests.reliability.harness import DEVICE
from tunecache.cache import Cache
from tunecache.store import migrate

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


@pytest.mark.parametrize(
    "golden",
    [g for g in harness.goldens() if harness.golden_revision(g) != migrate.HEAD],
    ids=lambda g: g.name,
)
def test_a_damaged_cache_of_an_older_revision_is_salvaged_in_its_own_schema_then_upgraded(
    tmp_path: Path, golden: Path
) -> None:
    root = tmp_path / "root"
    db = damage.managed(root)
    db.write_bytes(golden.read_bytes())
    [page] = damage.tree_pages(db, "sqlite_autoindex_entries_1")
    damage.garbage(db, page.number, seed=5)
    cache, messages = damage.open_recording(root)
    with cache:
        assert cache.outcome is migrate.Outcome.UPGRADED
        assert cache.revision() == migrate.HEAD
    assert "3 entries kept, 0 lost" in damage.salvage_warning(messages)
    before = harness.all_rows(golden)
    assert harness.all_rows(db, before) == before
    assert harness.structure_problems(db, every_entry_has_a_record=False) == []
