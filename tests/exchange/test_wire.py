"""The items of an export (tunecache.exchange.wire), in both versions: built from entries, read
back from bytes nobody vouches for, every field checked before anything is imported.

Version 2 streams' own rules (framing, order, the end item) are tested in test_stream.py; the
fields of a header, a set, a model and an entry are the same in both versions, and each bad
field is refused in both here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import cbor2
import pytest

from tests.exchange.conftest import items, stream
from tests.store_helpers import snapshot
from tunecache import exchange
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


def _resolved_v1(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A version 1 document's entries, their set and models named instead of numbered."""
    sets, models = doc["candidate_sets"], doc["models"]
    return sorted(
        (
            e["key"],
            tuple(sets[e["set"]]["names"]),
            e["choice"],
            e["status"],
            e["speedup"],
            e["record"],
            tuple(
                (models[v["model"]]["name"], v["verdict"], v["rounds"]) for v in e["validations"]
            ),
        )
        for e in doc["entries"]
    )


def _resolved_v2(data: bytes) -> list[tuple[Any, ...]]:
    """A version 2 export's entries, resolved the same way."""
    sets: list[Any] = []
    models: list[Any] = []
    out = []
    for kind, body in items(data)[1:-1]:
        if kind == "set":
            sets.append(body)
        elif kind == "model":
            models.append(body)
        else:
            out.append(_resolved_v1({"candidate_sets": sets, "models": models, "entries": [body]}))
    return sorted(e for part in out for e in part)


# --- version 1, read whole ---------------------------------------------------------------------


def test_a_version_1_export_decodes_with_its_records_as_they_came(golden_v1: bytes) -> None:
    doc = wire.decode_document(golden_v1, *LIMITS)
    wire_doc = cbor2.loads(golden_v1)
    assert (doc.tool, doc.device.cpu, len(doc.entries)) == ("0.1.0", "test-cpu-9000", 4)
    assert doc.exported_at == datetime.fromisoformat(wire_doc["exported_at"])
    assert sorted(e.blob for e in doc.entries if e.blob) == sorted(
        e["record"] for e in wire_doc["entries"] if e["record"]
    )
    assert all((e.record is None) == (e.blob is None) for e in doc.entries)
    assert all(e.parsed is not None and e.parsed.text == e.key for e in doc.entries)


def test_a_version_1_export_imports_and_goes_out_again_as_version_2(
    golden_v1: bytes, other: Cache
) -> None:
    report = exchange.import_cache(other, golden_v1)
    assert report.counts["added"] == 4 and report.verdicts == 3 and report.tool == "0.1.0"
    again = exchange.export_cache(other)
    assert items(again)[0]["v"] == 2
    # The same entries, records byte for byte, verdicts by model.
    assert _resolved_v2(again) == _resolved_v1(cbor2.loads(golden_v1))
    assert exchange.import_cache(other, golden_v1).counts["unchanged"] == 4


def test_a_version_2_export_is_never_one_map() -> None:
    doc = {"format": "tunecache-export", "v": 2}
    with pytest.raises(CodecError, match="a version 2 export is a stream of items, not one map"):
        wire.decode_document(cbor2.dumps(doc), *LIMITS)


# --- both ways ---------------------------------------------------------------------------------


def test_times_are_written_in_utc() -> None:
    two_hours_east = timezone(timedelta(hours=2))
    assert wire.iso(datetime(2026, 1, 1, 12, tzinfo=two_hours_east)) == "2026-01-01T10:00:00+00:00"
    assert wire.iso(datetime(2026, 1, 1, 12, tzinfo=UTC)) == "2026-01-01T12:00:00+00:00"


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


def test_only_bytes_are_read(other: Cache) -> None:
    with pytest.raises(CodecError, match=r"^export file: expected bytes, got str$"):
        wire.decode_document("tunecache-export", *LIMITS)  # type: ignore[arg-type]
    with pytest.raises(CodecError, match=r"^export file: expected bytes or a binary stream, got"):
        exchange.import_cache(other, "tunecache-export")  # type: ignore[arg-type]


def test_a_newer_format_is_refused_with_a_clear_message(
    exported: bytes, golden_v1: bytes, other: Cache
) -> None:
    doc = cbor2.loads(golden_v1)
    doc["v"] = exchange.FORMAT_VERSION + 1
    doc["a_field_from_the_future"] = 1
    parts = items(exported)
    parts[0]["v"] = exchange.FORMAT_VERSION + 1
    parts.insert(1, ["a-kind-from-the-future", {}])
    before = snapshot(other.path)
    for data in (cbor2.dumps(doc), stream(parts)):
        with pytest.raises(CodecError, match="format version 3 is newer than this tunecache reads"):
            exchange.import_cache(other, data)
    assert snapshot(other.path) == before


# --- hostile and truncated files ---------------------------------------------------------------


def test_every_truncation_is_rejected_and_leaves_the_cache_unchanged(
    exported: bytes, golden_v1: bytes, other: Cache
) -> None:
    before = snapshot(other.path)
    for data in (exported, golden_v1):
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


class _Doc:
    """An export as a mutation sees it, in either version: its top map (the v1 document, or
    the v2 header), its entries, sets and models as maps, and a way back to bytes."""

    def __init__(self, data: bytes) -> None:
        self.v1 = data[0] >> 5 == 5
        if self.v1:
            self.top = cbor2.loads(data)
            self.entries = self.top["entries"]
            self.sets = self.top["candidate_sets"]
        else:
            self.parts = items(data)
            self.top = self.parts[0]
            self.entries = [body for kind, body in self.parts[1:-1] if kind == "entry"]
            self.sets = [body for kind, body in self.parts[1:-1] if kind == "set"]
        self.replaced: Any = None

    def duplicate_entry(self) -> None:
        if self.v1:
            self.entries.append(dict(self.entries[0]))
        else:
            self.parts.insert(-1, ["entry", dict(self.entries[-1])])

    def encode(self) -> bytes:
        if self.v1:
            return bytes(cbor2.dumps(self.replaced or self.top))
        parts = list(self.parts)
        if self.replaced is not None:
            parts[0] = self.replaced
        return stream(parts)


def _mutations() -> dict[str, Callable[[_Doc], Any]]:
    def set_entry(field: str, value: Any) -> Callable[[_Doc], Any]:
        def mutate(doc: _Doc) -> None:
            doc.entries[0][field] = value

        return mutate

    def set_top(field: str, value: Any) -> Callable[[_Doc], Any]:
        def mutate(doc: _Doc) -> None:
            doc.top[field] = value

        return mutate

    def verdict(field: str, value: Any) -> Callable[[_Doc], Any]:
        def mutate(doc: _Doc) -> None:
            target = next(e for e in doc.entries if e["validations"])
            target["validations"][0][field] = value

        return mutate

    def bad_checksum(doc: _Doc) -> None:
        doc.sets[0]["checksum"] = "0" * 32

    def rename_candidate(doc: _Doc) -> None:
        doc.sets[0]["names"][0] = "renamed"

    def bad_device(doc: _Doc) -> None:
        doc.top["device"]["threads"] = 0

    def hostile_record(doc: _Doc) -> None:
        target = next(e for e in doc.entries if e["record"] is not None)
        target["record"] = b"\x9f" * 100  # indefinite-length arrays

    def nan_record(doc: _Doc) -> None:
        target = next(e for e in doc.entries if e["record"] is not None)
        record = cbor2.loads(target["record"])
        record["c"][0]["s"] = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"  # NaN
        target["record"] = cbor2.dumps(record, canonical=True)

    def ghost_candidate(doc: _Doc) -> None:
        target = next(e for e in doc.entries if e["record"] is not None)
        record = cbor2.loads(target["record"])
        record["c"][0]["n"] = "ghost"
        target["record"] = cbor2.dumps(record, canonical=True)

    def not_a_map(doc: _Doc) -> None:
        doc.replaced = [doc.top]

    return {
        "not a map": not_a_map,
        "wrong format": set_top("format", "something-else"),
        "no version": lambda doc: doc.top.pop("v"),
        "unknown top key": set_top("extra", 1),
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
        "a record naming unknown candidates": ghost_candidate,
        "duplicate entry": _Doc.duplicate_entry,
        "checksum mismatch": bad_checksum,
        "renamed candidate": rename_candidate,
        "unknown verdict": verdict("verdict", "loved"),
        "confirmations over rounds": verdict("confirmations", 99),
        "negative rounds": verdict("rounds", -1),
        "model index out of range": verdict("model", 42),
        "huge int": set_entry("speedup", 2**70),
    }


MUTATIONS = _mutations()


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_hostile_documents_are_rejected_and_change_nothing(
    exported: bytes, golden_v1: bytes, other: Cache, name: str, version: int
) -> None:
    doc = _Doc(golden_v1 if version == 1 else exported)
    MUTATIONS[name](doc)
    data = doc.encode()
    before = snapshot(other.path)
    with pytest.raises(CodecError, match=r"^export file: ") as refused:
        exchange.import_cache(other, data)
    assert "\n" not in str(refused.value)
    assert snapshot(other.path) == before


def test_version_1_refuses_what_only_it_can_get_wrong(golden_v1: bytes, other: Cache) -> None:
    doc = cbor2.loads(golden_v1)
    doc.pop("entries")
    with pytest.raises(CodecError, match="missing key 'entries'"):
        exchange.import_cache(other, cbor2.dumps(doc))
    doc = cbor2.loads(golden_v1)
    doc["models"].append(dict(doc["models"][0]))
    with pytest.raises(CodecError, match="model 2 appears twice"):
        exchange.import_cache(other, cbor2.dumps(doc))
    assert other.count() == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty input"),
        (b"\x81" * 100 + b"\x00", "not a tunecache export: it starts with an array"),
        (b"\xa1" * 100 + b"\x00", "nesting deeper"),
        (b"\x5b\xff\xff\xff\xff\xff\xff\xff\xff", "declares 18446744073709551615 bytes"),
        (b"\xc6" * 50 + b"\x00", "it starts with a tag"),
        (b"\xbf\x61a\x01\xff", "indefinite-length"),
        (b"\xa2\x61a\x01\x61a\x02", "invalid CBOR"),  # a duplicate map key
        (b"\xa0\x00", "trailing byte"),
        (b"\x5f\x41a\xff", "has no definite length"),
        (b"SQLite format 3\x00" + bytes(100), "SQLite database, not an export"),
    ],
)
def test_hostile_bytes_are_refused_before_decoding(other: Cache, data: bytes, message: str) -> None:
    before = snapshot(other.path)
    with pytest.raises(CodecError, match=message):
        exchange.import_cache(other, data)
    assert snapshot(other.path) == before


def test_the_limits_are_checked(exported: bytes, golden_v1: bytes, other: Cache) -> None:
    for data in (exported, golden_v1):
        with pytest.raises(CodecError, match="exceed the limit"):
            exchange.import_cache(other, data, max_size=len(data) - 1)
        with pytest.raises(CodecError, match="more than 10 items"):
            exchange.import_cache(other, data, max_items=10)
        with pytest.raises(CodecError, match="nesting deeper than 2"):
            exchange.import_cache(other, data, max_depth=2)
    assert other.count() == 0
