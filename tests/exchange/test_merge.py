"""Merging another cache, or an export's bytes (tunecache.exchange.merge)."""

from __future__ import annotations

import importlib
import io
import shutil
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from tests.store_helpers import NAMES, snapshot, sql
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError, CodecError, StoreError
from tunecache.exchange import importer
from tunecache.exchange.export import export_items

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


def test_merging_an_export_stream_reads_it_as_an_import_does(filled: Cache, other: Cache) -> None:
    report = exchange.merge(other, io.BytesIO(exchange.export_cache(filled)), origin="peer.cbor")
    assert (report.kind, report.counts["added"], report.verdicts) == ("merge", 4, 3)


def test_a_refused_merge_lets_go_of_its_source(
    filled: Cache, device: Device, other: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The source's entries are read in one snapshot as they are merged: a refusal midway ends
    # that read at once, not whenever the garbage collector comes by.
    made: list[Generator[bytes, None, int]] = []

    def spied(cache: Cache, **options: Any) -> Generator[bytes, None, int]:
        made.append(export_items(cache, **options))
        return made[-1]

    # The module, not the function the package names after it.
    monkeypatch.setattr(importlib.import_module("tunecache.exchange.merge"), "export_items", spied)
    monkeypatch.setattr(importer, "BATCH", 1)  # the bad record is checked as soon as it is read
    sql(filled.path, "UPDATE timing_records SET data = x'ff' WHERE id = 1")
    with exchange.open_source(filled.path, device) as source:
        with pytest.raises(CodecError, match="timing record"):
            exchange.merge(other, source)
        [items] = made
        assert items.gi_frame is None  # closed: its read transaction ended
    assert other.count() == 0
