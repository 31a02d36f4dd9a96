"""Hostile input through every door: key text, timing records inside a cache file, exports.

tests/test_codec.py and tests/test_keys.py refuse hostile CBOR and key text at the codec and
the parser, and tests/exchange/test_wire.py refuses hostile exports without changing the cache. What
they leave out is done here: every door of the store (Cache.get and put, Cache.record of a
record someone scribbled into the file, the resolver, import_cache), in a forked child whose
address space may grow by at most CAP bytes (RLIMIT_AS), each refusal a typed TunecacheError.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import cbor2
import pytest

from tests.exchange.conftest import items, stream
from tests.reliability import harness
from tests.reliability.harness import DEVICE, MARK, NAMES, OPENED, Child, Sender
from tunecache import exchange
from tunecache.cache import Cache, NewEntry
from tunecache.candidates import checksum
from tunecache.codec import CandidateTiming, TimingRecord, encode
from tunecache.errors import TunecacheError
from tunecache.keys import make_key
from tunecache.resolve import Table

#: how much more memory the child may map than it had when it started
CAP = 256 * 1024 * 1024

KEY_TEXTS = {
    "10 MB of underscores": "_" * 10_000_000,
    "10 MB of one token": "a" * 10_000_000,
    "a 5000-digit dim": "conv_F32_m" + "9" * 5000,
    "a dim beyond 63 bits": f"conv_F32_m{2**63}",
    "a NUL byte": "conv\x00_F32_m1",
    "a lone surrogate": "conv_F32\ud800_m1",
    "100k dims": "conv_F32_" + "_".join(f"d{i % 9}" for i in range(100_000)),
    "empty": "",
    "only a dims block": "_m1_k2",
}

RECORDS = {
    "deep nesting": b"\x81" * 100_000 + b"\x00",
    "declared length 2**64-1": b"\x5b" + b"\xff" * 8,
    "array of 2**64-1 items": b"\x9b" + b"\xff" * 8 + b"\x00" * 8,
    "tag chain": b"\xd8\x1c" * 1000 + b"\x00",
    "indefinite-length map": b"\xbf\xff",
    "duplicate map keys": b"\xa2\x61v\x01\x61v\x01",
    "trailing bytes": encode(harness.record_for(0, 0)) + b"\x00",
    "NaN sample": None,  # built from a valid record below
    "negative sample": None,
    "17 MB blob": b"\x00" * (17 * 1024 * 1024),
}


def _with_sample(value: bytes) -> bytes:
    record = cbor2.loads(encode(harness.record_for(0, 0)))
    record["c"][0]["s"] = value + record["c"][0]["s"][8:]
    return bytes(cbor2.dumps(record, canonical=True))


RECORDS["NaN sample"] = _with_sample(b"\x00\x00\x00\x00\x00\x00\xf8\x7f")
RECORDS["negative sample"] = _with_sample(b"\x00\x00\x00\x00\x00\x00\xf0\xbf")


def _exports(valid: bytes) -> dict[str, bytes]:
    parts = items(valid)
    first_entry = next(i for i, part in enumerate(parts) if i and part[0] == "entry")
    hostile_record = [list(part) if isinstance(part, list) else part for part in parts]
    hostile_record[first_entry] = ["entry", {**parts[first_entry][1]}]
    hostile_record[first_entry][1]["record"] = RECORDS["tag chain"]
    duplicated = [*parts[:-1], parts[first_entry], parts[-1]]
    header, *_ = parts
    # Sets enough to pass the table limit: a reader keeps every set a stream declares.
    many_sets = [header] + [
        ["set", {"signature": f"s{i}", "checksum": checksum(["a"]), "names": ["a"]}]
        for i in range(300_000)
    ]
    return {
        "export: array of 2**64-1 items": b"\x9b" + b"\xff" * 8 + b"\x00" * 8,
        "export: map of 2**63 pairs": b"\xbb\x80" + b"\x00" * 15,
        "export: deep nesting": b"\xa1\x00" * 100_000 + b"\x00",
        "export: tag chain": b"\xd8\x1c" * 1000 + b"\x00",
        "export: indefinite array": b"\x9f" * 1000 + b"\xff" * 1000,
        "export: trailing bytes": valid + b"\x00",
        "export: hostile record inside": stream(hostile_record),
        "export: an entry twice": stream(duplicated),
        "export: a SQLite file": b"SQLite format 3\x00" + bytes(4096),
        "export: an item declaring 2**62 bytes": b"\x5b" + (2**62).to_bytes(8, "big"),
        "export: items of a megabyte, never ending": stream([header])
        + (b"\x5a" + (2**20).to_bytes(4, "big") + b"\x80" * 2**20) * 200,
        "export: sets past the table limit": stream(many_sets),
        "export: a version 1 map of 2**32 entries": b"\xa9\x67entries\x9b" + b"\xff" * 8,
    }


def _vm_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _prepare(tmp_path: Path) -> tuple[Path, dict[str, int], bytes]:
    """A cache whose entries hold the hostile records, and a valid export of a clean cache."""
    db = tmp_path / "hostile.db"
    ids = {}
    with Cache.open(device=DEVICE, path=db) as cache:
        for i, name in enumerate(RECORDS):
            entry = cache.put(
                make_key("conv_F32_hostile", h=i + 1),
                choice=NAMES[0],
                candidates=NAMES,
                record=harness.record_for(0, i),
            )
            ids[name] = entry.id
    with sqlite3.connect(db) as conn:
        for name, blob in RECORDS.items():
            conn.execute("UPDATE timing_records SET data = ? WHERE entry_id = ?", (blob, ids[name]))
    clean = tmp_path / "clean.db"
    with Cache.open(device=DEVICE, path=clean) as cache:
        for i in range(3):
            harness.write_for(0, i, make_key("conv_F32_clean", h=i + 1)).put(cache)
        valid = exchange.export_cache(cache)
    return db, ids, valid


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced on Linux")
def test_hostile_input_is_refused_typed_quickly_and_in_bounded_memory(tmp_path: Path) -> None:
    db, ids, valid = _prepare(tmp_path)

    def body(send: Sender) -> None:
        import resource

        cache = Cache.open(device=DEVICE, path=db)
        target = Cache.open(device=DEVICE, path=tmp_path / "target.db")
        table = Table.open(device=DEVICE, path=db)
        cases: dict[str, Callable[[], object]] = {}
        for name, text in KEY_TEXTS.items():
            cases[f"get: {name}"] = partial(cache.get, text, candidates=NAMES)
            cases[f"put: {name}"] = partial(cache.put, text, choice=NAMES[0], candidates=NAMES)
            cases[f"resolve: {name}"] = partial(table.resolve, text, NAMES, NAMES[0])
        for name, entry_id in ids.items():
            cases[f"stored record: {name}"] = partial(cache.record, entry_id)
        for name, data in _exports(valid).items():
            cases[name] = partial(exchange.import_cache, target, data)
        before = target.count()
        limit = _vm_bytes() + CAP
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for name, case in cases.items():
            start = time.perf_counter()
            try:
                case()
                outcome = "accepted"
            except TunecacheError as error:
                outcome = f"refused: {type(error).__name__}"
                if "\n" in str(error):
                    outcome = "refused with a multi-line message"
            except BaseException as error:  # MemoryError, RecursionError, anything untyped
                outcome = f"escaped: {type(error).__name__}: {str(error)[:200]}"
            elapsed = time.perf_counter() - start
            send(MARK, OPENED, round(elapsed * 1e6), text=json.dumps([name, outcome]))
        send(MARK, OPENED, -1, text=json.dumps(["target entries changed", target.count() - before]))

    kid = Child(body)
    kid.finish()
    assert kid.crashes() == [], kid.crashes()
    results = {}
    slowest = 0.0
    for m in kid.messages:
        if m.tag == MARK:
            name, outcome = json.loads(m.text)
            results[name] = outcome
            slowest = max(slowest, m.b / 1e6)
    changed = results.pop("target entries changed")
    print(
        f"{len(results)} hostile inputs, each refused within +{CAP >> 20} MiB of memory; "
        f"slowest {slowest * 1000:.1f} ms"
    )
    bad = {n: o for n, o in results.items() if not o.startswith("refused: ")}
    assert bad == {}
    assert changed == 0  # imports are all or nothing: every refused import wrote nothing
    # No wall-clock bound here (the machine may be loaded): a case that hangs fails through the
    # child's deadline, and the slowest case is printed above.
    # The cache with scribbled records still serves its entries.
    with Cache.open(device=DEVICE, path=db) as cache:
        assert cache.count() == len(RECORDS)
    assert os.path.getsize(db) > 0


#: how much more memory the child importing a large export may map than it had when it started
STREAM_CAP = 64 * 1024 * 1024
#: the entries of that export, each with a record of 4 candidates x 16,384 samples (512 KiB)
STREAM_ENTRIES = 200


def _big_record(seq: int) -> TimingRecord:
    samples = tuple(1e-5 * (1 + (seq + k) % 97 / 100) for k in range(16_384))
    return TimingRecord(
        candidates=tuple(CandidateTiming(name, samples) for name in NAMES),
        settings={"seq": seq},
    )


def _digest(path: Path) -> str:
    """The database's and its WAL's bytes, hashed a block at a time."""
    out = hashlib.sha256()
    for name in (path, Path(f"{path}-wal")):
        if name.exists():
            with open(name, "rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    out.update(block)
    return out.hexdigest()


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced on Linux")
def test_a_streaming_import_larger_than_memory_succeeds_and_a_cut_one_changes_nothing(
    tmp_path: Path,
) -> None:
    source = tmp_path / "source.db"
    with Cache.open(device=DEVICE, path=source) as cache:
        for start in range(0, STREAM_ENTRIES, 16):
            cache.put_many(
                NewEntry(
                    make_key("conv_F32_big", h=seq + 1),
                    NAMES[seq % 4],
                    NAMES,
                    record=_big_record(seq),
                )
                for seq in range(start, min(start + 16, STREAM_ENTRIES))
            )
        whole = tmp_path / "whole.cbor"
        with open(whole, "wb") as fh:
            exchange.export_to(cache, fh)
    cut = tmp_path / "cut.cbor"
    with open(whole, "rb") as src, open(cut, "wb") as dst:
        for block in iter(lambda: src.read(1 << 20), b""):
            dst.write(block)
        dst.truncate(whole.stat().st_size - 60)  # the end item and a little of the last entry
    assert whole.stat().st_size > 1.5 * STREAM_CAP
    kept = tmp_path / "kept.db"
    with Cache.open(device=DEVICE, path=kept) as cache:
        cache.put(make_key("conv_F32_kept", m=1), choice=NAMES[0], candidates=NAMES)
    before = _digest(kept)

    def body(send: Sender) -> None:
        import resource

        fresh = Cache.open(device=DEVICE, path=tmp_path / "fresh.db")
        target = Cache.open(device=DEVICE, path=kept)
        limit = _vm_bytes() + STREAM_CAP
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for name, cache, path in (("cut", target, cut), ("whole", fresh, whole)):
            try:
                with open(path, "rb") as fh:
                    report = exchange.import_cache(cache, fh)
                outcome = f"added {report.counts['added']}"
            except TunecacheError as error:
                outcome = f"refused: {type(error).__name__}: {error}"
            except BaseException as error:  # MemoryError, anything untyped
                outcome = f"escaped: {type(error).__name__}: {str(error)[:200]}"
            send(MARK, OPENED, text=json.dumps([name, outcome]))
        send(MARK, OPENED, text=json.dumps(["count", fresh.count()]))

    kid = Child(body)
    kid.finish()
    assert kid.crashes() == [], kid.crashes()
    results = dict(json.loads(m.text) for m in kid.messages if m.tag == MARK)
    assert results["whole"] == f"added {STREAM_ENTRIES}"
    assert results["count"] == STREAM_ENTRIES
    assert results["cut"].startswith("refused: CodecError: export file: truncated at byte")
    assert "\n" not in results["cut"]
    assert _digest(kept) == before  # not a byte of the database or its WAL changed
