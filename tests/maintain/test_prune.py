"""Pruning a device's entries: stale, unvalidated, old and masked ones (tunecache.maintain.prune).

Version folders, which prune also removes, are tested in test_versions.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.maintain.conftest import OLD, Filled, keys_of
from tests.store_helpers import NAMES, sql
from tunecache import maintain
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError


def _pruned(report: maintain.PruneReport) -> dict[str, tuple[str, ...]]:
    return {e.key: e.reasons for e in report.entries}


def test_each_kind_selects_its_entries(filled: Filled) -> None:
    c = filled.cache
    assert _pruned(maintain.prune(c, stale=True, dry_run=True)) == {
        "conv_F32_m64_k3": ("stale",),
        "conv_F32_m128_k3": ("stale",),
    }
    assert _pruned(maintain.prune(c, unvalidated=True, dry_run=True)) == {
        "conv_F32_m128_k3": ("unvalidated",),
        "conv_F32_m256_k3": ("unvalidated",),
        "matmul_F32_m8_n8": ("unvalidated",),
    }
    assert _pruned(maintain.prune(c, older_than=OLD + timedelta(days=1), dry_run=True)) == {
        "conv_F32_m64_k3": ("older",)
    }
    assert _pruned(maintain.prune(c, masked=True, dry_run=True)) == {
        "conv_F32_m128_k3": ("masked",)
    }


def test_stale_against_the_current_lists_given(filled: Filled) -> None:
    # The client's list is the full one: the entry tuned against the shorter list is stale,
    # and matmul, whose list was not given, is not judged.
    report = maintain.prune(filled.cache, stale=True, current={"conv_F32": NAMES}, dry_run=True)
    assert _pruned(report) == {"conv_F32_m256_k3": ("stale",)}
    with pytest.raises(BadArgumentError, match="appears twice"):
        maintain.prune(filled.cache, stale=True, current={"conv_F32": ["a", "a"]})


def test_a_dry_run_removes_nothing_and_matches_the_real_run(filled: Filled) -> None:
    c = filled.cache
    before = sql(c.path, "SELECT * FROM entries ORDER BY id")
    dry = maintain.prune(c, unvalidated=True, masked=True, dry_run=True)
    assert sql(c.path, "SELECT * FROM entries ORDER BY id") == before
    real = maintain.prune(c, unvalidated=True, masked=True)
    assert not real.dry_run
    assert real.entries == dry.entries and real.orphans == dry.orphans
    assert _pruned(dry)["conv_F32_m128_k3"] == ("unvalidated", "masked")
    assert keys_of(maintain.list_entries(c)) == ["conv_F32_m64_k3"]
    # Their keys, candidate sets, records and verdicts went with them.
    # (the shorter conv list and matmul's list: conv's full list still has an entry)
    assert real.orphans == {"keys": 3, "candidate_sets": 2}
    assert sql(c.path, "SELECT count(*) FROM keys") == [(1,)]
    assert sql(c.path, "SELECT count(*) FROM candidate_sets") == [(1,)]
    assert sql(c.path, "SELECT count(*) FROM validations") == [(2,)]


def test_entries_of_a_run_still_open_are_spared(cache: Cache) -> None:
    with cache.run("tune") as run_id:
        cache.put("conv_F32_m1", choice="direct", candidates=NAMES, run_id=run_id)
        report = maintain.prune(cache, unvalidated=True)
        assert report.entries == () and report.spared_active == 1
    assert len(maintain.prune(cache, unvalidated=True).entries) == 1
    assert cache.count() == 0


def test_prune_leaves_other_devices_alone(filled: Filled, twin: Cache) -> None:
    twin.put("conv_F32_m64_k3", choice="direct", candidates=NAMES)
    maintain.prune(filled.cache, unvalidated=True, masked=True, stale=True)
    assert twin.count() == 1


def test_nothing_chosen_or_nothing_stored_prunes_nothing(filled: Filled, twin: Cache) -> None:
    assert maintain.prune(filled.cache) == maintain.PruneReport(dry_run=False)
    assert filled.cache.count() == 4
    # A device with nothing written has nothing to prune, and no row is made for it.
    report = maintain.prune(twin, unvalidated=True, stale=True)
    assert report.entries == () and report.orphans == {"keys": 0, "candidate_sets": 0}
    assert sql(twin.path, "SELECT count(*) FROM devices") == [(1,)]


def test_prune_refuses_bad_arguments_before_touching_anything(filled: Filled) -> None:
    c = filled.cache
    before = sql(c.path, "SELECT * FROM entries ORDER BY id")
    with pytest.raises(BadArgumentError, match="timezone"):
        maintain.prune(c, older_than=datetime(2020, 1, 1))
    with pytest.raises(BadArgumentError, match="map a signature"):
        maintain.prune(c, stale=True, current=[("conv_F32", NAMES)])  # type: ignore[arg-type]
    with pytest.raises(BadArgumentError, match="non-empty text"):
        maintain.prune(c, stale=True, current={"": NAMES})
    assert sql(c.path, "SELECT * FROM entries ORDER BY id") == before


def test_the_json_form_of_a_prune_report(filled: Filled) -> None:
    report = maintain.prune(filled.cache, older_than=OLD + timedelta(days=1), dry_run=True)
    shown = report.as_dict()
    assert shown["dry_run"] is True and shown["versions"] == [] and shown["spared_active"] == 0
    [entry] = shown["entries"]
    assert (entry["key"], entry["reasons"], entry["updated_at"]) == (
        "conv_F32_m64_k3",
        ["older"],
        OLD.isoformat(),
    )
    assert keys_of(report.entries) == ["conv_F32_m64_k3"]
