"""Merging another cache, or an export's bytes (tunecache.exchange.merge)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.store_helpers import NAMES, snapshot, sql
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError, StoreError

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_merge_reads_another_cache_without_changing_it(
    filled: Cache, device: Device, other: Cache
) -> None:
    source_path = filled.path
    filled.close()
    before = snapshot(source_path)
    with exchange.open_source(source_path, device) as source:
        assert source.readonly
        report = exchange.merge(other, source, policy="evidence")
        assert report.kind == "merge" and report.counts["added"] == 4
        assert other.count() == 4
        with pytest.raises(BadArgumentError, match="into itself"):
            exchange.merge(source, source)
    assert snapshot(source_path)["rows"] == before["rows"]
    assert source_path.read_bytes() == before["db"]
    # The source's path is the origin the run names.
    [(notes,)] = sql(other.path, "SELECT notes FROM runs WHERE id = ?", report.run_id)
    assert notes.startswith(f"merge from {source_path}: ")


def test_merging_an_exports_bytes_is_an_import_logged_as_a_merge(
    filled: Cache, other: Cache
) -> None:
    report = exchange.merge(other, exchange.export_cache(filled), origin="peer.cbor")
    assert (report.kind, report.policy, report.counts["added"]) == ("merge", "local", 4)
    assert sql(other.path, "SELECT kind FROM runs") == [("merge",)]


def test_open_source_refuses_what_it_cannot_read(tmp_path: Path, device: Device) -> None:
    with pytest.raises(BadArgumentError, match="no cache database"):
        exchange.open_source(tmp_path / "missing.db", device)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"junk" * 100)
    with pytest.raises(StoreError):
        exchange.open_source(junk, device)
    old = tmp_path / "old.db"
    shutil.copy(GOLDEN / "rev0001.db", old)
    with pytest.raises(StoreError, match="upgrade it first"):
        exchange.open_source(old, device)


def test_open_source_reads_the_preferred_device_or_the_only_one(
    cache: Cache, twin: Cache, device: Device, cache_at: Callable[..., Cache]
) -> None:
    twin.put("gemm_F32_m1", choice="direct", candidates=NAMES)
    # Only the twin has entries: it is the source, whatever was preferred.
    with exchange.open_source(cache.path, device) as source:
        assert source.device == twin.device
    cache.put("gemm_F32_m1", choice="im2col", candidates=NAMES)
    with exchange.open_source(cache.path, device) as source:
        assert source.device == device and source.get("gemm_F32_m1").choice == "im2col"  # type: ignore[union-attr]
    with pytest.raises(BadArgumentError, match="several devices or none"):
        exchange.open_source(cache.path, device.with_threads(2))
    empty = cache_at("empty.db")
    with pytest.raises(BadArgumentError, match=r"\(none\)"):
        exchange.open_source(empty.path, device)
