"""The export document (tunecache.exchange.wire): written from entries, read back from bytes
nobody vouches for, every field checked before anything is imported."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import cbor2
import pytest

from tests.store_helpers import snapshot
from tunecache import __version__, exchange
from tunecache.cache import Cache
from tunecache.errors import CodecError, TunecacheError
from tunecache.exchange import wire
from tunecache.exchange.export import read_entries

LIMITS = (wire.MAX_SIZE, wire.MAX_DEPTH, wire.MAX_ITEMS)


def _entries(cache: Cache) -> list[wire.ExportedEntry]:
    with cache.transaction() as tx:
        device_id = tx.device_id()
        assert device_id is not None
        return [e for _, e in read_entries(tx.conn, device_id)]


# --- both ways ---------------------------------------------------------------------------------


def test_a_document_decodes_back_to_the_entries_it_was_made_of(filled: Cache) -> None:
    entries = _entries(filled)
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    calls: list[tuple[str, int, int]] = []
    data = wire.document(
        filled.device, entries, exported_at=when, progress=lambda *call: calls.append(call)
    )
    assert calls == [("export", 0, 4), ("export", 4, 4)]
    doc = wire.decode_document(data, *LIMITS)
    assert (doc.tool, doc.exported_at, doc.device) == (__version__, when, filled.device)
    # Reading checks every record and keeps it decoded; the rest is what was written.
    assert [replace(e, record=None) for e in doc.entries] == entries
    assert [e.record is None for e in doc.entries] == [e.blob is None for e in entries]


def test_times_are_written_in_utc() -> None:
    two_hours_east = timezone(timedelta(hours=2))
    assert wire.iso(datetime(2026, 1, 1, 12, tzinfo=two_hours_east)) == "2026-01-01T10:00:00+00:00"


def test_entries_are_the_same_decision_by_key_and_set_and_compared_without_times(
    filled: Cache,
) -> None:
    judged = next(e for e in _entries(filled) if e.verdicts)
    assert judged.ident == (judged.key, judged.checksum)
    later = replace(judged, created_at=judged.created_at + timedelta(days=1))
    assert later.content() == judged.content()
    assert replace(judged, updated_at=later.created_at).content() == judged.content()
    assert replace(judged, choice="other").content() != judged.content()
    assert replace(judged, verdicts=()).content() != judged.content()


def test_only_bytes_are_read() -> None:
    with pytest.raises(CodecError, match=r"^export file: expected bytes, got str$"):
        wire.decode_document("tunecache-export", *LIMITS)  # type: ignore[arg-type]


def test_a_newer_format_is_refused_with_a_clear_message(exported: bytes, other: Cache) -> None:
    doc = cbor2.loads(exported)
    doc["v"] = exchange.FORMAT_VERSION + 1
    doc["a_field_from_the_future"] = 1
    before = snapshot(other.path)
    with pytest.raises(CodecError, match="format version 2 is newer than this tunecache reads"):
        exchange.import_cache(other, cbor2.dumps(doc))
    assert snapshot(other.path) == before


# --- hostile and truncated files ---------------------------------------------------------------


def test_every_truncation_is_rejected_and_leaves_the_cache_unchanged(
    exported: bytes, other: Cache
) -> None:
    data = exported
    before = snapshot(other.path)
    for length in range(0, len(data), 3):
        with pytest.raises(CodecError):
            exchange.import_cache(other, data[:length])
    assert snapshot(other.path) == before


def test_flipped_bytes_never_escape_as_anything_but_a_tunecache_error(
    exported: bytes, other: Cache
) -> None:
    before = snapshot(other.path)["rows"]
    refused = 0
    for position in range(0, len(exported), 11):
        flipped = bytearray(exported)
        flipped[position] ^= 0x5A
        try:
            exchange.import_cache(other, bytes(flipped), policy="evidence")
        except TunecacheError:
            refused += 1
            assert snapshot(other.path)["rows"] == before
        else:
            # A flip inside a sample or a name can still be a valid export; it is imported.
            before = snapshot(other.path)["rows"]
    assert refused > 0


def _mutations() -> dict[str, Callable[[dict[str, Any]], Any]]:
    def entry(doc: dict[str, Any]) -> dict[str, Any]:
        return dict(doc["entries"][0])

    def set_entry(field: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        def mutate(doc: dict[str, Any]) -> None:
            doc["entries"][0][field] = value

        return mutate

    def set_top(field: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        def mutate(doc: dict[str, Any]) -> None:
            doc[field] = value

        return mutate

    def verdict(field: str, value: Any) -> Callable[[dict[str, Any]], Any]:
        def mutate(doc: dict[str, Any]) -> None:
            target = next(e for e in doc["entries"] if e["validations"])
            target["validations"][0][field] = value

        return mutate

    def duplicate_entry(doc: dict[str, Any]) -> None:
        doc["entries"].append(entry(doc))

    def bad_checksum(doc: dict[str, Any]) -> None:
        doc["candidate_sets"][0]["checksum"] = "0" * 32

    def rename_candidate(doc: dict[str, Any]) -> None:
        doc["candidate_sets"][0]["names"][0] = "renamed"

    def bad_device(doc: dict[str, Any]) -> None:
        doc["device"]["threads"] = 0

    def hostile_record(doc: dict[str, Any]) -> None:
        target = next(e for e in doc["entries"] if e["record"] is not None)
        target["record"] = b"\x9f" * 100  # indefinite-length arrays

    def nan_record(doc: dict[str, Any]) -> None:
        target = next(e for e in doc["entries"] if e["record"] is not None)
        record = cbor2.loads(target["record"])
        record["c"][0]["s"] = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"  # NaN
        target["record"] = cbor2.dumps(record, canonical=True)

    return {
        "not a map": lambda doc: [doc],
        "wrong format": set_top("format", "something-else"),
        "no version": lambda doc: doc.pop("v"),
        "unknown top key": set_top("extra", 1),
        "missing entries": lambda doc: doc.pop("entries"),
        "fingerprint mismatch": set_top("fingerprint", "f" * 32),
        "bad device": bad_device,
        "exported_at without zone": set_top("exported_at", "2026-01-01T00:00:00"),
        "bad key": set_entry("key", "conv__F32"),
        "key of another signature": set_entry("key", "pool_F32_m64"),
        "choice outside the set": set_entry("choice", "not-a-candidate"),
        "heuristic outside the set": set_entry("heuristic", "not-a-candidate"),
        "unknown status": set_entry("status", "golden"),
        "NaN speedup": set_entry("speedup", float("nan")),
        "negative speedup": set_entry("speedup", -1.0),
        "set index out of range": set_entry("set", 99),
        "set index a bool": set_entry("set", True),
        "record not bytes": set_entry("record", "text"),
        "hostile record": hostile_record,
        "NaN sample": nan_record,
        "duplicate entry": duplicate_entry,
        "checksum mismatch": bad_checksum,
        "renamed candidate": rename_candidate,
        "unknown verdict": verdict("verdict", "loved"),
        "confirmations over rounds": verdict("confirmations", 99),
        "negative rounds": verdict("rounds", -1),
        "model index out of range": verdict("model", 42),
        "huge int": set_entry("speedup", 2**70),
    }


MUTATIONS = _mutations()


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_hostile_documents_are_rejected_and_change_nothing(
    exported: bytes, other: Cache, name: str
) -> None:
    doc = cbor2.loads(exported)
    doc = MUTATIONS[name](doc) or doc
    data = cbor2.dumps(doc)
    before = snapshot(other.path)
    with pytest.raises(CodecError, match=r"^export file: "):
        exchange.import_cache(other, data)
    assert snapshot(other.path) == before


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty input"),
        (b"\x81" * 100 + b"\x00", "nesting deeper"),
        (b"\x5b\xff\xff\xff\xff\xff\xff\xff\xff", "declared length"),
        (b"\xc6" * 50 + b"\x00", "tag 6"),
        (b"\xbf\x61a\x01\xff", "indefinite-length"),
        (b"\xa2\x61a\x01\x61a\x02", "invalid CBOR"),  # a duplicate map key
        (b"\xa0\x00", "trailing byte"),
        (b"SQLite format 3\x00" + bytes(100), "SQLite database, not an export"),
    ],
)
def test_hostile_bytes_are_refused_before_decoding(other: Cache, data: bytes, message: str) -> None:
    before = snapshot(other.path)
    with pytest.raises(CodecError, match=message):
        exchange.import_cache(other, data)
    assert snapshot(other.path) == before


def test_the_size_limit_is_checked_first(exported: bytes, other: Cache) -> None:
    data = exported
    with pytest.raises(CodecError, match="exceed the limit"):
        exchange.import_cache(other, data, max_size=len(data) - 1)
    with pytest.raises(CodecError, match="more than 10 items"):
        exchange.import_cache(other, data, max_items=10)
