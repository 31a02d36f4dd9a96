"""store/salvage.py on its own: what it copies from a sound file, what it refuses, and the
figures it reports. What one damaged page costs is measured in tests/reliability/
test_salvage.py, with real bytes in real pages."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.store_helpers import MMM, mmm_record, sql
from tunecache.cache import Cache
from tunecache.store import migrate, salvage
from tunecache.store.salvage import CannotSalvage, Salvage


def _tables(db: Path) -> dict[str, list[tuple[object, ...]]]:
    names = [
        r[0] for r in sql(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    ]
    return {n: sorted(sql(db, f'SELECT * FROM "{n}"'), key=repr) for n in names}


def test_a_sound_cache_is_copied_whole(cache: Cache, tmp_path: Path) -> None:
    for i in range(20):
        entry = cache.put(
            f"op_F32_m{i + 1}", choice=MMM[i % 3], candidates=MMM, record=mmm_record()
        )
        cache.validate(entry, model="m", fingerprint="f", verdict="validated")
    with cache.run("tune"):
        pass
    cache.checkpoint()
    target = tmp_path / "copy.db"
    found = salvage.salvage(cache.path, target, 5.0)
    assert (found.entries_kept, found.entries_lost, found.exact) == (20, 0, True)
    assert found.lost == {} and found.skipped == ()
    assert found.revision == migrate.HEAD
    assert found.summary() == "20 entries kept, 0 lost"
    # Every row, and the id counters; the copy is a new store for sync (a new id, its changes
    # numbered as they were copied in).
    copied, original = _tables(target), _tables(cache.path)
    for table in ("sync_store", "entry_changes"):
        assert len(copied.pop(table)) == len(original.pop(table))
    assert copied == original
    assert sql(target, "PRAGMA journal_mode") == [("wal",)]
    assert not any(p.exists() for p in salvage.side_files(target))


def test_what_is_not_a_tunecache_cache_cannot_be_salvaged_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    source, target = tmp_path / "other.db", tmp_path / "copy.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    target.write_bytes(b"left by a salvage cut short")
    with pytest.raises(CannotSalvage, match="no single tunecache schema revision"):
        salvage.salvage(source, target, 5.0)
    assert not target.exists()


def test_the_figures_survive_their_note_and_say_what_else_was_lost() -> None:
    found = Salvage(
        revision="0004",
        entries_kept=29_962,
        entries_lost=38,
        exact=True,
        kept={"entries": 29_962, "timing_records": 29_954},
        lost={"entries": 38, "timing_records": 46},
        skipped=("entries 1201..1238",),
    )
    assert Salvage.from_json(found.to_json()) == found
    assert found.summary() == "29,962 entries kept, 38 lost (rows lost besides: 46 timing_records)"
    unsure = Salvage("0004", 10, 2, exact=False)
    assert unsure.summary() == "10 entries kept, at least 2 lost"
