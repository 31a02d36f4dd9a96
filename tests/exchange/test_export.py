"""Exporting a device's cache (tunecache.exchange.export): what the document carries, read as
the store holds it."""

from __future__ import annotations

import cbor2
import pytest

from tests.store_helpers import NAMES, sql
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.errors import CodecError
from tunecache.exchange.export import read_entries


def test_the_export_carries_its_format_device_and_checksums(filled: Cache) -> None:
    doc = cbor2.loads(exchange.export_cache(filled))
    assert doc["format"] == "tunecache-export"
    assert doc["v"] == exchange.FORMAT_VERSION
    assert doc["device"] == filled.device.as_dict()
    assert doc["fingerprint"] == filled.device.fingerprint
    assert {s["checksum"] for s in doc["candidate_sets"]} == {e.checksum for e in filled.entries()}
    assert sorted(m["name"] for m in doc["models"]) == ["bert", "resnet"]
    assert all(isinstance(e["record"], bytes | None) for e in doc["entries"])


def test_entries_are_read_in_key_order_with_their_evidence(filled: Cache) -> None:
    with filled.transaction() as tx:
        device_id = tx.device_id()
        assert device_id is not None
        found = read_entries(tx.conn, device_id)
    by_id = {e.id: e for e in filled.entries()}
    assert sorted(by_id) == sorted(entry_id for entry_id, _ in found)
    assert [(e.key, e.checksum) for _, e in found] == sorted((e.key, e.checksum) for _, e in found)
    for entry_id, exported in found:
        stored = by_id[entry_id]
        assert (exported.key, exported.signature) == (stored.key.text, stored.key.signature)
        assert (exported.names, exported.choice, exported.status) == (
            stored.candidates,
            stored.choice,
            stored.status,
        )
        record = filled.record(stored)
        samples = 0 if record is None else sum(len(c.samples) for c in record.candidates)
        assert exported.samples == samples
        assert (exported.blob is None) == (record is None)
        assert {v.model: v.verdict for v in exported.verdicts} == filled.verdicts_on(stored)
        assert [v.model for v in exported.verdicts] == sorted(v.model for v in exported.verdicts)


def test_only_this_devices_entries_are_exported(filled: Cache, twin: Cache) -> None:
    twin.put("gemm_F32_m1", choice="direct", candidates=NAMES)
    keys = {e["key"] for e in cbor2.loads(exchange.export_cache(filled))["entries"]}
    assert "gemm_F32_m1" not in keys and len(keys) == 3
    [only] = cbor2.loads(exchange.export_cache(twin))["entries"]
    assert only["key"] == "gemm_F32_m1"


def test_an_export_reports_its_progress(filled: Cache) -> None:
    calls: list[tuple[str, int, int]] = []
    exchange.export_cache(filled, progress=lambda *call: calls.append(call))
    assert calls == [("export", 0, 4), ("export", 4, 4)]


def test_an_unreadable_stored_record_stops_the_export(filled: Cache) -> None:
    sql(filled.path, "UPDATE timing_records SET data = x'ff' WHERE id = 1")
    with pytest.raises(CodecError, match="doctor --repair"):
        exchange.export_cache(filled)
