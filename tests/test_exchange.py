"""Export, import and merge, against real cache databases filled through the library."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tunecache import exchange
from tunecache.cache import Cache
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import Device
from tunecache.errors import (
    BadArgumentError,
    CodecError,
    DeviceMismatchError,
    StoreError,
    TunecacheError,
)

NAMES = ("direct", "im2col", "winograd")


def _record(*medians: float, samples: int = 3) -> TimingRecord:
    return TimingRecord(
        candidates=tuple(
            CandidateTiming(name, tuple(m * (1 + i / 100) for i in range(samples)))
            for name, m in zip(NAMES, medians, strict=False)
        ),
        settings={"min_time": 0.01, "rounds": samples},
        env={"python": "3.11"},
    )


def fill(cache: Cache) -> None:
    """Entries of every kind: with and without records, verdicts of two models, statuses."""
    with cache.run("tune", "fill") as run_id:
        a = cache.put(
            "conv_F32_m64_k3",
            choice="winograd",
            candidates=NAMES,
            heuristic="direct",
            record=_record(3e-5, 2e-5, 1e-5),
            speedup=3.0,
            status="accepted",
            run_id=run_id,
        )
        b = cache.put(
            "conv_F32_m128_k3",
            choice="im2col",
            candidates=NAMES,
            heuristic="direct",
            record=_record(3e-5, 1e-5),
        )
        cache.put("conv_F32_m128_k3", choice="direct", candidates=NAMES[:2], status="rejected")
        cache.put("matmul_F32_m8_n8", choice="im2col", candidates=NAMES)
    cache.validate(
        a,
        model="resnet",
        fingerprint="r1",
        verdict="validated",
        gain=1.2,
        rounds=3,
        confirmations=3,
    )
    cache.validate(a, model="bert", fingerprint="b1", verdict="masked", gain=None, rounds=2)
    cache.validate(
        b, model="bert", fingerprint="b1", verdict="validated", gain=1.05, rounds=3, confirmations=2
    )


def _doc(data: bytes) -> dict[str, Any]:
    doc = cbor2.loads(data)
    doc.pop("exported_at")
    return dict(doc)


def snapshot(path: Path) -> dict[str, Any]:
    """Every row of every table, read without writing, plus the database and WAL bytes."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = {
            t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables
        }
    finally:
        conn.close()
    wal = Path(f"{path}-wal")
    return {
        "rows": rows,
        "db": path.read_bytes(),
        "wal": wal.read_bytes() if wal.exists() else b"",
    }


@pytest.fixture
def other(device: Device, tmp_path: Path) -> Iterator[Cache]:
    """A second, empty cache of the same device."""
    c = Cache.open(device=device, path=tmp_path / "other.db")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def filled(cache: Cache) -> Cache:
    fill(cache)
    return cache


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The export of a filled cache, made once for the tests that only read it."""
    device = Device("test-cpu-9000", 4, None, "tunecache", "0.1.0")
    with Cache.open(device=device, path=tmp_path_factory.mktemp("exported") / "c.db") as c:
        fill(c)
        return exchange.export_cache(c)


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


def test_the_export_carries_its_format_device_and_checksums(filled: Cache) -> None:
    doc = cbor2.loads(exchange.export_cache(filled))
    assert doc["format"] == "tunecache-export"
    assert doc["v"] == exchange.FORMAT_VERSION
    assert doc["device"] == filled.device.as_dict()
    assert doc["fingerprint"] == filled.device.fingerprint
    assert {s["checksum"] for s in doc["candidate_sets"]} == {e.checksum for e in filled.entries()}
    assert sorted(m["name"] for m in doc["models"]) == ["bert", "resnet"]
    assert all(isinstance(e["record"], bytes | None) for e in doc["entries"])


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
    conn = sqlite3.connect(other.path)
    kind, status, notes = conn.execute(
        "SELECT kind, status, notes FROM runs WHERE id = ?", (report.run_id,)
    ).fetchone()
    entry_runs = {r[0] for r in conn.execute("SELECT run_id FROM entries")}
    conn.close()
    assert (kind, status) == ("import", "finished")
    assert "fleet.cbor" in notes and filled.device.fingerprint in notes
    assert entry_runs == {report.run_id}


# --- devices and versions ----------------------------------------------------------------------


def test_another_device_is_refused_unless_allowed_then_unvalidated(
    exported: bytes, tmp_path: Path
) -> None:
    data = exported
    elsewhere = Device("other-cpu-1", 4, None, "tunecache", "0.1.0")
    with Cache.open(device=elsewhere, path=tmp_path / "elsewhere.db") as target:
        before = snapshot(target.path)
        with pytest.raises(DeviceMismatchError, match="cpu 'test-cpu-9000' != 'other-cpu-1'"):
            exchange.import_cache(target, data)
        assert snapshot(target.path) == before
        report = exchange.import_cache(target, data, allow_other_device=True)
        assert report.other_device and report.verdicts == 0
        assert {e.status for e in target.entries()} == {"unvalidated"}
        assert len(target.entries()) == 4
        conn = sqlite3.connect(target.path)
        assert conn.execute("SELECT count(*) FROM validations").fetchone() == (0,)
        conn.close()


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


def test_a_failure_inside_the_transaction_rolls_everything_back(
    filled: Cache, other: Cache
) -> None:
    # A real SQLite failure half-way through the import: the verdict with gain 1.05 is written
    # after other entries, their records and verdicts; none of them may survive.
    conn = sqlite3.connect(other.path)
    conn.execute(
        "CREATE TRIGGER boom BEFORE INSERT ON validations WHEN NEW.gain = 1.05 "
        "BEGIN SELECT RAISE(ABORT, 'boom'); END"
    )
    conn.commit()
    conn.close()
    before = snapshot(other.path)["rows"]
    with pytest.raises(StoreError, match="boom"):
        exchange.import_cache(other, exchange.export_cache(filled))
    assert snapshot(other.path)["rows"] == before
    assert other.count() == 0


def test_a_bad_policy_is_refused(exported: bytes, other: Cache) -> None:
    with pytest.raises(BadArgumentError, match="policy"):
        exchange.import_cache(other, exported, policy="newest")


def test_an_unreadable_stored_record_stops_the_export(filled: Cache) -> None:
    conn = sqlite3.connect(filled.path)
    conn.execute("UPDATE timing_records SET data = x'ff' WHERE id = 1")
    conn.commit()
    conn.close()
    with pytest.raises(CodecError, match="doctor --repair"):
        exchange.export_cache(filled)


# --- conflicts and merge -----------------------------------------------------------------------


def _conflict(cache: Cache, other: Cache) -> None:
    """The same key and candidate set on both sides, measured differently."""
    cache.put("gemm_F32_m32", choice="direct", candidates=NAMES, record=_record(1e-5, 2e-5))
    other.put(
        "gemm_F32_m32", choice="im2col", candidates=NAMES, record=_record(2e-5, 1e-5, samples=9)
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
    cache.validate(
        local, model="resnet", fingerprint="r1", verdict="validated", rounds=3, confirmations=3
    )
    report = exchange.import_cache(cache, exchange.export_cache(other), policy="evidence")
    assert report.counts["kept-local"] == 1
    assert cache.get("gemm_F32_m32").choice == "direct"  # type: ignore[union-attr]


def test_evidence_orders_models_then_rounds_then_samples() -> None:
    assert exchange.evidence(1, 0, 0) > exchange.evidence(0, 99, 10**6)
    assert exchange.evidence(1, 3, 0) > exchange.evidence(1, 2, 10**6)
    assert exchange.evidence(0, 0, 10) > exchange.evidence(0, 0, 9)


def test_policy_both_keeps_the_other_under_its_origin_once(cache: Cache, other: Cache) -> None:
    _conflict(cache, other)
    data = exchange.export_cache(other)
    report = exchange.import_cache(cache, data, policy="both", origin="peer.cbor")
    assert report.counts["kept-both"] == 1
    assert report.origin_device is not None
    # The local decision is untouched and is the only one this device sees.
    assert [e.choice for e in cache.entries()] == ["direct"]
    conn = sqlite3.connect(cache.path)
    rows = conn.execute("SELECT choice, client_version FROM decisions ORDER BY choice").fetchall()
    origin = conn.execute(
        "SELECT client_version FROM devices WHERE fingerprint = ?", (report.origin_device,)
    ).fetchone()[0]
    conn.close()
    assert rows[0] == ("direct", "0.1.0")
    assert rows[1][0] == "im2col" and rows[1][1].startswith("0.1.0+origin.")
    assert origin == rows[1][1]
    # Merging the same source again does not pile up copies.
    exchange.import_cache(cache, data, policy="both", origin="peer.cbor")
    conn = sqlite3.connect(cache.path)
    assert conn.execute("SELECT count(*) FROM entries").fetchone() == (2,)
    conn.close()


def test_merge_reads_another_cache_without_changing_it(
    filled: Cache, device: Device, tmp_path: Path
) -> None:
    source_path = filled.path
    filled.close()
    before = snapshot(source_path)
    with (
        Cache.open(device=device, path=tmp_path / "target.db") as target,
        exchange.open_source(source_path, device) as source,
    ):
        report = exchange.merge(target, source, policy="evidence")
        assert report.kind == "merge" and report.counts["added"] == 4
        assert target.count() == 4
        with pytest.raises(BadArgumentError, match="into itself"):
            exchange.merge(source, source)
    assert snapshot(source_path)["rows"] == before["rows"]
    assert source_path.read_bytes() == before["db"]


def test_open_source_refuses_what_it_cannot_read(tmp_path: Path, device: Device) -> None:
    with pytest.raises(BadArgumentError, match="no cache database"):
        exchange.open_source(tmp_path / "missing.db", device)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"junk" * 100)
    with pytest.raises(StoreError):
        exchange.open_source(junk, device)
