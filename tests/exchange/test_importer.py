"""Importing an export (tunecache.exchange.importer): round trips, other devices, all or nothing,
and the conflict policies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cbor2
import pytest

from tests.store_helpers import NAMES, RESNET, judge, snapshot, sql, timing
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError, DeviceMismatchError, StoreError


def _doc(data: bytes) -> dict[str, Any]:
    doc = cbor2.loads(data)
    doc.pop("exported_at")
    return dict(doc)


# --- round trip --------------------------------------------------------------------------------


def test_round_trip_export_import_export_gives_the_same_entries(
    filled: Cache, other: Cache
) -> None:
    first = exchange.export_cache(filled)
    report = exchange.import_cache(other, first)
    assert report.counts["added"] == 4
    assert report.verdicts == 3
    assert report.run_id is not None
    second = exchange.export_cache(other)
    assert _doc(second) == _doc(first)
    # The entries read through the cache API agree too, records included.
    mine = {(e.key, e.checksum): e for e in filled.entries()}
    theirs = {(e.key, e.checksum): e for e in other.entries()}
    assert mine.keys() == theirs.keys()
    for ident, e in mine.items():
        t = theirs[ident]
        assert (e.choice, e.heuristic, e.status, e.speedup, e.candidates) == (
            t.choice,
            t.heuristic,
            t.status,
            t.speedup,
            t.candidates,
        )
        assert (e.created_at, e.updated_at) == (t.created_at, t.updated_at)
        assert filled.record(e) == other.record(t)


def test_an_empty_cache_exports_and_imports_nothing(cache: Cache, other: Cache) -> None:
    report = exchange.import_cache(other, exchange.export_cache(cache))
    assert report.actions == () and report.run_id is None and other.count() == 0


def test_importing_the_same_file_again_changes_nothing(filled: Cache, other: Cache) -> None:
    data = exchange.export_cache(filled)
    exchange.import_cache(other, data)
    before = snapshot(other.path)
    report = exchange.import_cache(other, data)
    assert report.counts["unchanged"] == 4 and not report.changed
    assert snapshot(other.path)["rows"] == before["rows"]


def test_the_import_is_logged_as_a_run_naming_its_origin(filled: Cache, other: Cache) -> None:
    report = exchange.import_cache(other, exchange.export_cache(filled), origin="fleet.cbor")
    [(kind, status, notes)] = sql(
        other.path, "SELECT kind, status, notes FROM runs WHERE id = ?", report.run_id
    )
    entry_runs = {r[0] for r in sql(other.path, "SELECT run_id FROM entries")}
    assert (kind, status) == ("import", "finished")
    assert "fleet.cbor" in notes and filled.device.fingerprint in notes
    assert entry_runs == {report.run_id}


# --- devices -----------------------------------------------------------------------------------


def test_another_device_is_refused_unless_allowed_then_unvalidated(
    exported: bytes, cache_at: Callable[..., Cache]
) -> None:
    data = exported
    target = cache_at("elsewhere.db", device=Device("other-cpu-1", 4, None, "tunecache", "0.1.0"))
    before = snapshot(target.path)
    with pytest.raises(DeviceMismatchError, match="cpu 'test-cpu-9000' != 'other-cpu-1'"):
        exchange.import_cache(target, data)
    assert snapshot(target.path) == before
    report = exchange.import_cache(target, data, allow_other_device=True)
    assert report.other_device and report.verdicts == 0
    assert {e.status for e in target.entries()} == {"unvalidated"}
    assert len(target.entries()) == 4
    assert sql(target.path, "SELECT count(*) FROM validations") == [(0,)]


def test_the_origin_device_is_the_source_with_a_tagged_client_version(device: Device) -> None:
    aside = exchange.origin_device(device, "peer.cbor")
    assert aside.differences(device) == ["client_version"]
    assert aside.client_version.startswith(device.client_version + "+origin.")
    # The same source gives the same identity; another origin, another one.
    assert exchange.origin_device(device, "peer.cbor") == aside
    assert exchange.origin_device(device, "elsewhere.cbor") != aside
    # A version with a local part already gets a dot, cut so the whole stays a valid version.
    long = Device(device.cpu, 4, None, "client", "1.0+" + "x" * 59)
    tagged = exchange.origin_device(long, "o").client_version
    assert len(tagged) == 64 and tagged.startswith("1.0+xxx")
    assert tagged[-16:-8] == ".origin." and "+" not in tagged[-16:]


# --- all or nothing ----------------------------------------------------------------------------


def test_a_failure_inside_the_transaction_rolls_everything_back(
    filled: Cache, other: Cache
) -> None:
    # A real SQLite failure half-way through the import: the verdict with gain 1.05 is written
    # after other entries, their records and verdicts; none of them may survive.
    sql(
        other.path,
        "CREATE TRIGGER boom BEFORE INSERT ON validations WHEN NEW.gain = 1.05 "
        "BEGIN SELECT RAISE(ABORT, 'boom'); END",
    )
    before = snapshot(other.path)["rows"]
    with pytest.raises(StoreError, match="boom"):
        exchange.import_cache(other, exchange.export_cache(filled))
    assert snapshot(other.path)["rows"] == before
    assert other.count() == 0


def test_a_bad_policy_is_refused(exported: bytes, other: Cache) -> None:
    with pytest.raises(BadArgumentError, match="policy"):
        exchange.import_cache(other, exported, policy="newest")


# --- conflicts ---------------------------------------------------------------------------------


def _conflict(cache: Cache, other: Cache) -> None:
    """The same key and candidate set on both sides, measured differently."""
    cache.put("gemm_F32_m32", choice="direct", candidates=NAMES, record=timing(1e-5, 2e-5))
    other.put(
        "gemm_F32_m32", choice="im2col", candidates=NAMES, record=timing(2e-5, 1e-5, samples=9)
    )


def test_policy_local_keeps_the_local_entry(cache: Cache, other: Cache) -> None:
    _conflict(cache, other)
    report = exchange.import_cache(cache, exchange.export_cache(other), policy="local")
    assert report.counts["kept-local"] == 1 and not report.changed
    assert cache.get("gemm_F32_m32") is not None
    assert cache.get("gemm_F32_m32").choice == "direct"  # type: ignore[union-attr]


def test_policy_evidence_takes_more_samples_but_not_fewer(cache: Cache, other: Cache) -> None:
    _conflict(cache, other)
    report = exchange.import_cache(cache, exchange.export_cache(other), policy="evidence")
    assert report.counts["replaced"] == 1
    entry = cache.get("gemm_F32_m32")
    assert entry is not None and entry.choice == "im2col"
    assert len(cache.entries()) == 1
    # The other way round the local entry, now with 9 samples, already has the stronger
    # evidence against 3: it stays.
    back = exchange.import_cache(other, exchange.export_cache(cache), policy="evidence")
    assert back.counts["unchanged"] == 1


def test_policy_evidence_puts_a_validated_entry_above_raw_samples(
    cache: Cache, other: Cache
) -> None:
    _conflict(cache, other)
    local = cache.get("gemm_F32_m32")
    assert local is not None
    judge(cache, local, RESNET)
    report = exchange.import_cache(cache, exchange.export_cache(other), policy="evidence")
    assert report.counts["kept-local"] == 1
    assert cache.get("gemm_F32_m32").choice == "direct"  # type: ignore[union-attr]


def test_policy_both_keeps_the_other_under_its_origin_once(cache: Cache, other: Cache) -> None:
    _conflict(cache, other)
    data = exchange.export_cache(other)
    report = exchange.import_cache(cache, data, policy="both", origin="peer.cbor")
    assert report.counts["kept-both"] == 1
    assert report.origin_device is not None
    # The local decision is untouched and is the only one this device sees.
    assert [e.choice for e in cache.entries()] == ["direct"]
    decisions = sql(cache.path, "SELECT choice, client_version FROM decisions ORDER BY choice")
    [(origin,)] = sql(
        cache.path, "SELECT client_version FROM devices WHERE fingerprint = ?", report.origin_device
    )
    assert decisions[0] == ("direct", "0.1.0")
    assert decisions[1][0] == "im2col" and decisions[1][1].startswith("0.1.0+origin.")
    assert origin == decisions[1][1]
    assert origin == exchange.origin_device(other.device, "peer.cbor").client_version
    # Merging the same source again does not pile up copies.
    exchange.import_cache(cache, data, policy="both", origin="peer.cbor")
    assert sql(cache.path, "SELECT count(*) FROM entries") == [(2,)]
