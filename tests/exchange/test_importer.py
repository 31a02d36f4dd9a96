"""Importing an export (tunecache.exchange.importer): round trips, other devices, all or nothing,
the conflict policies, and the chunks and checking processes an import is applied through."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.exchange.conftest import items, stream, without_time
from tests.store_helpers import NAMES, RESNET, judge, snapshot, sql, timing
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError, CodecError, DeviceMismatchError, StoreError
from tunecache.exchange import importer, staging

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
    assert without_time(second) == without_time(first)
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


# --- streams, chunks and staging -----------------------------------------------------------------


def test_an_import_reads_a_binary_stream_as_it_reads_bytes(
    filled: Cache, other: Cache, cache_at: Callable[..., Cache], tmp_path: Path
) -> None:
    path = tmp_path / "a.cbor"
    with open(path, "wb") as fh:
        exchange.export_to(filled, fh)
    with open(path, "rb") as fh:
        from_file = exchange.import_cache(other, fh)
    from_bytes = exchange.import_cache(cache_at("third.db"), path.read_bytes())
    assert from_file.actions == from_bytes.actions and from_file.verdicts == 3


def test_a_stream_cut_before_its_end_leaves_the_files_byte_equal(
    filled: Cache, other: Cache
) -> None:
    # Every entry came, checked; only the end item is missing. Nothing was written: not a
    # page into the WAL, not a byte of the database.
    other.put("gemm_F32_m1", choice="direct", candidates=NAMES, record=timing(1e-5, 2e-5))
    before = snapshot(other.path)
    cut = stream(items(exchange.export_cache(filled))[:-1])
    with pytest.raises(CodecError, match="without its end item"):
        exchange.import_cache(other, cut)
    assert snapshot(other.path) == before


def test_nothing_is_left_beside_the_cache(filled: Cache, other: Cache) -> None:
    folder = sorted(other.path.parent.iterdir())
    exchange.import_cache(other, exchange.export_cache(filled))
    with pytest.raises(CodecError):
        exchange.import_cache(other, exchange.export_cache(filled)[:-3])
    assert sorted(other.path.parent.iterdir()) == folder


def test_chunks_of_two_decide_and_write_as_one_chunk_does(
    cache: Cache, other: Cache, cache_at: Callable[..., Cache], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        cache.put(f"gemm_F32_m{i + 1}", choice="direct", candidates=NAMES, record=timing(1e-5))
        other.put(
            f"gemm_F32_m{i + 1}",
            choice="im2col",
            candidates=NAMES,
            record=timing(2e-5, 1e-5, samples=9),
        )
    for i in range(5, 9):
        other.put(f"gemm_F32_m{i + 1}", choice="im2col", candidates=NAMES)
    data = exchange.export_cache(other)
    third = cache_at("third.db")
    exchange.import_cache(third, exchange.export_cache(cache))
    whole = exchange.import_cache(cache, data, policy="evidence")
    monkeypatch.setattr(staging, "CHUNK", 2)
    chunked = exchange.import_cache(third, data, policy="evidence")
    assert chunked.actions == whole.actions
    assert chunked.counts == {**whole.counts} and whole.counts["replaced"] == 5
    assert without_time(exchange.export_cache(third)) == without_time(exchange.export_cache(cache))


def test_an_import_reports_its_reading_and_its_writing(filled: Cache, other: Cache) -> None:
    calls: list[tuple[str, int, int]] = []
    exchange.import_cache(other, exchange.export_cache(filled), progress=lambda *c: calls.append(c))
    assert calls == [("import", 0, 4), ("import", 4, 4), ("write", 0, 4), ("write", 4, 4)]


# --- a worker process checking the records -------------------------------------------------------


@pytest.fixture
def worker_from_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process for any export, and batches of two records."""
    monkeypatch.setattr(importer, "WORKER_FROM", 1)
    monkeypatch.setattr(importer, "BATCH", 2)


@pytest.mark.usefixtures("worker_from_one")
def test_a_worker_process_checks_the_records_as_this_one_would(
    filled: Cache, other: Cache, cache_at: Callable[..., Cache]
) -> None:
    data = exchange.export_cache(filled)
    alone = exchange.import_cache(other, data)
    helped = exchange.import_cache(cache_at("third.db"), data, workers=1)
    assert helped.actions == alone.actions and helped.verdicts == alone.verdicts
    assert without_time(exchange.export_cache(cache_at("third.db"))) == without_time(
        exchange.export_cache(other)
    )


@pytest.mark.usefixtures("worker_from_one")
def test_the_first_bad_entry_is_named_whoever_found_it(exported: bytes, other: Cache) -> None:
    parts = items(exported)
    entries = [i for i, p in enumerate(parts) if i and p[0] == "entry"]
    with_record = [i for i in entries if parts[i][1]["record"] is not None]
    # A bad record early (the worker finds it) and a bad key later (the reader does).
    parts[with_record[0]][1]["record"] = b"\xff"
    parts[entries[-1]][1]["key"] = "matmul__F32"
    before = snapshot(other.path)
    for workers in (0, 1):
        with pytest.raises(CodecError, match=r"^export file: entry 1 \('conv_F32_m128_k3'\)"):
            exchange.import_cache(other, stream(parts), workers=workers)
    assert snapshot(other.path) == before


def test_a_stopped_worker_is_a_store_error(
    filled: Cache, other: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    class Broken(Future[list[object]]):
        def result(self, timeout: float | None = None) -> list[object]:
            raise BrokenProcessPool("gone")

    monkeypatch.setattr(importer.Checker, "submit", lambda self, tasks: Broken())
    with pytest.raises(StoreError, match="the process checking timing records stopped: gone"):
        exchange.import_cache(other, io.BytesIO(exchange.export_cache(filled)))
    assert other.count() == 0
