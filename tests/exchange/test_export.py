"""Exporting a device's cache (tunecache.exchange.export): what the stream carries, read as the
store holds it, a chunk of keys at a time."""

from __future__ import annotations

import io

import pytest

from tests.exchange.conftest import items, without_time
from tests.store_helpers import NAMES, sql
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.errors import CodecError
from tunecache.exchange.export import read_entries
from tunecache.store import queries


def _entries(data: bytes) -> list[dict[str, object]]:
    return [body for kind, body in items(data)[1:-1] if kind == "entry"]


def test_the_export_carries_its_format_device_and_checksums(filled: Cache) -> None:
    data = exchange.export_cache(filled)
    parts = items(data)
    header, end = parts[0], parts[-1]
    assert header["format"] == "tunecache-export"
    assert header["v"] == exchange.FORMAT_VERSION == 2
    assert header["device"] == filled.device.as_dict()
    assert header["fingerprint"] == filled.device.fingerprint
    assert header["entries"] == 4
    sets = [body for kind, body in parts[1:-1] if kind == "set"]
    models = [body for kind, body in parts[1:-1] if kind == "model"]
    assert {s["checksum"] for s in sets} == {e.checksum for e in filled.entries()}
    assert sorted(m["name"] for m in models) == ["bert", "resnet"]
    assert all(isinstance(e["record"], bytes | None) for e in _entries(data))
    assert end == ["end", {"entries": 4, "candidate_sets": 3, "models": 2, "validations": 3}]


def test_sets_and_models_come_before_the_first_entry_that_names_them(filled: Cache) -> None:
    sets = models = 0
    for kind, body in items(exchange.export_cache(filled))[1:-1]:
        if kind == "set":
            sets += 1
        elif kind == "model":
            models += 1
        else:
            assert body["set"] < sets
            assert all(v["model"] < models for v in body["validations"])


def test_stored_records_go_out_as_the_bytes_they_are(filled: Cache) -> None:
    stored = {
        (key, checksum): bytes(data)
        for key, checksum, data in sql(
            filled.path,
            "SELECT k.text, s.checksum, t.data FROM entries e JOIN keys k ON k.id = e.key_id"
            " JOIN candidate_sets s ON s.id = e.candidate_set_id"
            " JOIN timing_records t ON t.entry_id = e.id",
        )
    }
    parts = items(exchange.export_cache(filled))
    sets = [body["checksum"] for kind, body in parts[1:-1] if kind == "set"]
    sent = {
        (e["key"], sets[e["set"]]): e["record"] for e in _entries(exchange.export_cache(filled))
    }
    assert {ident: blob for ident, blob in sent.items() if blob is not None} == stored


def test_entries_are_read_in_key_order_with_their_evidence(filled: Cache) -> None:
    with filled.transaction() as tx:
        device_id = tx.device_id()
        assert device_id is not None
        found = list(read_entries(tx.conn, device_id))
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


def test_a_cache_is_read_a_chunk_of_keys_at_a_time_in_key_order(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seven keys, each tuned against two lists: chunks of three keys cut between keys, never
    # between the entries of one key.
    for i in range(7):
        cache.put(f"gemm_F32_m{i + 1}", choice="direct", candidates=NAMES)
        cache.put(f"gemm_F32_m{i + 1}", choice="im2col", candidates=NAMES[:2])
    whole = exchange.export_cache(cache)
    monkeypatch.setattr(queries, "CHUNK", 3)
    chunked = exchange.export_cache(cache)
    assert without_time(chunked) == without_time(whole)
    idents = [(e["key"], e["set"]) for e in _entries(chunked)]
    assert len(idents) == 14 and [key for key, _ in idents] == sorted(key for key, _ in idents)


def test_exporting_twice_gives_the_same_items_but_the_time(filled: Cache) -> None:
    assert without_time(exchange.export_cache(filled)) == without_time(
        exchange.export_cache(filled)
    )


def test_export_to_writes_the_stream_and_says_what_it_wrote(filled: Cache) -> None:
    out = io.BytesIO()
    done = exchange.export_to(filled, out)
    assert done == exchange.Exported(entries=4, bytes=len(out.getvalue()))
    assert without_time(out.getvalue()) == without_time(exchange.export_cache(filled))


def test_only_this_devices_entries_are_exported(filled: Cache, twin: Cache) -> None:
    twin.put("gemm_F32_m1", choice="direct", candidates=NAMES)
    keys = {e["key"] for e in _entries(exchange.export_cache(filled))}
    assert "gemm_F32_m1" not in keys and len(keys) == 3
    [only] = _entries(exchange.export_cache(twin))
    assert only["key"] == "gemm_F32_m1"


def test_an_empty_cache_exports_a_header_and_an_end(cache: Cache) -> None:
    header, end = items(exchange.export_cache(cache))
    assert header["entries"] == 0
    assert end == ["end", {"entries": 0, "candidate_sets": 0, "models": 0, "validations": 0}]


def test_an_export_reports_its_progress(filled: Cache) -> None:
    calls: list[tuple[str, int, int]] = []
    exchange.export_cache(filled, progress=lambda *call: calls.append(call))
    assert calls == [("export", 0, 4), ("export", 4, 4)]


def test_a_damaged_stored_record_goes_out_and_its_import_is_refused(
    filled: Cache, other: Cache
) -> None:
    # Exported as stored (checked when written, and by doctor since); the import checks it.
    sql(filled.path, "UPDATE timing_records SET data = x'ff' WHERE id = 1")
    data = exchange.export_cache(filled)
    with pytest.raises(CodecError, match=r"^export file: entry \d \('conv_F32_m64_k3'\): timing"):
        exchange.import_cache(other, data)
    assert other.count() == 0
