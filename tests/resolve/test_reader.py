"""The reader: a missing cache is silent, a damaged one warns once, a busy one is asked again."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.resolve.conftest import CANDS, mm, put, resolve_all, table
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import TunecacheWarning
from tunecache.resolve import Answer, Table
from tunecache.resolve.reader import Busy, Reader


def test_a_missing_cache_answers_the_heuristic_silently(tmp_path: Path, device: Device) -> None:
    t = table(tmp_path / "nothing-here.db", device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        answers = resolve_all(t)
    assert answers == [Answer("blas", "heuristic")] * 4
    assert not (tmp_path / "nothing-here.db").exists()  # reading never creates a cache


def test_a_zero_byte_file_is_a_cache_being_created_not_damage(
    tmp_path: Path, device: Device
) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(b"")  # what another process's brand-new cache looks like for an instant
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_all(table(path, device)) == [Answer("blas", "heuristic")] * 4


def test_answers_given_before_the_damage_showed_are_forgotten(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256), "blocked")
    t = table(db, device)
    assert t.resolve(mm(256), CANDS, "blas").source == "exact"  # answered, and remembered
    store.close()
    db.write_bytes(b"garbage" * 1000)  # the file is destroyed under the running host
    Path(f"{db}-wal").unlink(missing_ok=True)
    Path(f"{db}-shm").unlink(missing_ok=True)
    t.close()  # the next question reconnects, as after a fork
    with pytest.warns(TunecacheWarning, match="every answer is the heuristic"):
        assert t.resolve(mm(300), CANDS, "blas") == Answer("blas", "heuristic")
    assert t.resolve(mm(256), CANDS, "blas") == Answer("blas", "heuristic")


def test_an_empty_cache_answers_the_heuristic(store: Cache, db: Path, device: Device) -> None:
    assert resolve_all(table(db, device)) == [Answer("blas", "heuristic")] * 4
    assert resolve_all(Table.empty()) == [Answer("blas", "heuristic")] * 4


@pytest.mark.parametrize(
    "content",
    [b"this is not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["garbage", "bad-header"],
)
def test_an_unreadable_cache_answers_the_heuristic_with_one_warning(
    tmp_path: Path, device: Device, content: bytes
) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(content)
    t = table(path, device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answers = resolve_all(t) + resolve_all(t)
        explained = t.explain(mm(256), CANDS, "blas")
    assert answers == [Answer("blas", "heuristic")] * 8
    assert explained.answer == Answer("blas", "heuristic")
    mine = [w for w in caught if issubclass(w.category, TunecacheWarning)]
    assert len(mine) == 1, [str(w.message) for w in mine]
    assert "every answer is the heuristic" in str(mine[0].message)
    assert path.read_bytes() == content  # the resolver never writes


def test_a_cache_of_an_older_schema_answers_the_heuristic_with_one_warning(
    tmp_path: Path, device: Device
) -> None:
    path = tmp_path / "old.db"
    path.write_bytes((ROOT / "tests" / "golden" / "rev0001.db").read_bytes())
    with pytest.warns(TunecacheWarning, match="lacks the views"):
        assert resolve_all(table(path, device)) == [Answer("blas", "heuristic")] * 4


# -- the reader on its own ---------------------------------------------------------------------


def test_a_damaged_file_calls_on_damage_once_and_then_reads_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(b"this is not a database at all" * 100)
    reader = Reader(path, "fingerprint", 1.0)
    calls: list[None] = []
    reader.on_damage = lambda: calls.append(None)
    trace: list[str] = []
    with pytest.warns(TunecacheWarning, match="every answer is the heuristic"):
        assert reader.point("k", "sum", trace) is None
    assert reader.broken is not None and str(path) in reader.broken
    assert trace == [f"the cache cannot be read: {reader.broken}"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        assert reader.candidate_sets("sig", None) == []
        assert reader.point("k", "sum", None) is None
    assert calls == [None]
    # A copy (what a derived table reads through) has seen no damage yet.
    fresh = reader.copy()
    assert (fresh.path, fresh.device, fresh.timeout) == (path, "fingerprint", 1.0)
    assert fresh.broken is None and fresh.on_damage is None


def test_a_locked_file_raises_busy_and_stays_readable(
    locked: Callable[[], object], db: Path, device: Device
) -> None:
    reader = Reader(db, device.fingerprint, 0.05)
    with pytest.warns(TunecacheWarning, match="busy"), pytest.raises(Busy):
        reader.candidate_sets(mm(256).signature, None)
    locked()
    assert reader.broken is None
    assert [names for _, names in reader.candidate_sets(mm(256).signature, None)] == [CANDS]
