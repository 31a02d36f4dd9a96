"""Tests for tunecache.codec: round trips, validation, and decoding hostile bytes within limits."""

from __future__ import annotations

import math
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunecache.codec import (
    FORMAT_VERSION,
    MAX_SIZE,
    CandidateTiming,
    TimingRecord,
    decode,
    encode,
    wire_items,
)
from tunecache.errors import CodecError

REPO = Path(__file__).resolve().parents[1]

# --- strategies ------------------------------------------------------------------------------

names = st.text(min_size=1, max_size=20)
sample_lists = st.lists(
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=False), max_size=20
).map(tuple)
candidates = st.builds(
    CandidateTiming,
    name=names,
    samples=sample_lists,
    inner_loops=st.integers(1, 2**63 - 1),
    error=st.none() | st.text(max_size=30),
    pruned=st.booleans(),
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
scalar_maps = st.dictionaries(st.text(max_size=12), scalars, max_size=6)
records = st.builds(
    TimingRecord,
    candidates=st.lists(candidates, max_size=6, unique_by=lambda c: c.name).map(tuple),
    settings=scalar_maps,
    env=scalar_maps,
)


def sample_record() -> TimingRecord:
    """A small realistic record: a winner, a slower one, a failure and a pruned one."""
    return TimingRecord(
        candidates=(
            CandidateTiming("mkl_nt4", (1.2e-4, 1.1e-4, 1.3e-4, 1.15e-4), inner_loops=16),
            CandidateTiming("packed_nt4", (2.0e-4, 2.1e-4, 1.9e-4), inner_loops=16),
            CandidateTiming("triton_bm64", (), error="OutOfResources: shared memory"),
            CandidateTiming("naive", (9.0e-3,), pruned=True),
        ),
        settings={"warmup": 3, "max_samples": 50, "budget_s": 2.5, "adaptive": True},
        env={"numpy": "2.1.0", "blas": "openblas", "cpu_mhz": None},
    )


def wire() -> dict[str, Any]:
    """The plain CBOR structure of sample_record(), for tampering with field by field."""
    obj = cbor2.loads(encode(sample_record()))
    assert isinstance(obj, dict)
    return obj


def dumps(obj: object) -> bytes:
    return cbor2.dumps(obj, canonical=True)


def f64(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


# --- round trips -----------------------------------------------------------------------------


@given(records)
def test_round_trip(record: TimingRecord) -> None:
    data = encode(record)
    back = decode(data)
    assert back == record
    # == cannot tell True from 1 or 1.0 from 1: the types must survive too.
    for before, after in ((record.settings, back.settings), (record.env, back.env)):
        assert {k: type(v) for k, v in before.items()} == {k: type(v) for k, v in after.items()}
    assert all(type(x) is float for c in back.candidates for x in c.samples)
    assert encode(back) == data


@given(records)
def test_encode_is_deterministic(record: TimingRecord) -> None:
    shuffled = TimingRecord(
        record.candidates,
        dict(reversed(list(record.settings.items()))),
        dict(reversed(list(record.env.items()))),
    )
    assert encode(shuffled) == encode(record)


def test_wire_format() -> None:
    obj = wire()
    assert set(obj) == {"v", "c", "settings", "env"}
    assert obj["v"] == FORMAT_VERSION == 1
    first = obj["c"][0]
    assert first == {
        "n": "mkl_nt4",
        "s": f64(1.2e-4, 1.1e-4, 1.3e-4, 1.15e-4),
        "l": 16,
        "e": None,
        "p": False,
    }
    assert obj["settings"]["budget_s"] == 2.5


def test_accepts_lists_and_bytes_like() -> None:
    record = TimingRecord(
        [CandidateTiming("a", [1.0, 2.0])],  # type: ignore[arg-type]
        {"k": 1},
        {},
    )
    assert record.candidates[0].samples == (1.0, 2.0)
    data = encode(record)
    assert decode(bytearray(data)) == record
    assert decode(memoryview(data)) == record


def test_record_does_not_share_caller_dicts() -> None:
    settings: dict[str, Any] = {"warmup": 3}
    record = TimingRecord((), settings, {})
    settings["warmup"] = 99
    assert record.settings["warmup"] == 3


# --- derived values --------------------------------------------------------------------------


def test_statistics() -> None:
    c = CandidateTiming("a", (3.0, 1.0, 2.0, 10.0))
    assert (c.median, c.min, c.max) == (2.5, 1.0, 10.0)
    empty = CandidateTiming("b", (), error="boom")
    assert (empty.median, empty.min, empty.max) == (None, None, None)


def test_best_skips_failed_pruned_and_empty() -> None:
    record = sample_record()
    best = record.best()
    assert best is not None and best.name == "mkl_nt4"
    only_bad = TimingRecord(
        (
            CandidateTiming("fail", (1e-9,), error="boom"),
            CandidateTiming("pruned", (1e-9,), pruned=True),
            CandidateTiming("never_ran", ()),
        )
    )
    assert only_bad.best() is None
    assert TimingRecord().best() is None


def test_best_ties_keep_candidate_order() -> None:
    record = TimingRecord((CandidateTiming("x", (1.0,)), CandidateTiming("y", (1.0,))))
    assert record.best() == record.candidates[0]


def test_candidate_lookup() -> None:
    record = sample_record()
    assert record.candidate("naive").pruned
    with pytest.raises(KeyError):
        record.candidate("missing")


# --- encode validation -----------------------------------------------------------------------


def with_candidate(**changes: Any) -> TimingRecord:
    fields: dict[str, Any] = {"name": "a", "samples": (1.0,), "inner_loops": 1}
    fields.update(changes)
    return TimingRecord((CandidateTiming(**fields),))


BAD_RECORDS = {
    "nan sample": with_candidate(samples=(1.0, math.nan)),
    "inf sample": with_candidate(samples=(math.inf,)),
    "negative sample": with_candidate(samples=(-1e-9,)),
    "str sample": with_candidate(samples=("1.0",)),
    "bool sample": with_candidate(samples=(True,)),
    "huge int sample": with_candidate(samples=(10**400,)),
    "empty name": with_candidate(name=""),
    "int name": with_candidate(name=3),
    "surrogate name": with_candidate(name="a\ud800"),
    "zero loops": with_candidate(inner_loops=0),
    "bool loops": with_candidate(inner_loops=True),
    "float loops": with_candidate(inner_loops=2.0),
    "loops beyond 64 bits": with_candidate(inner_loops=2**64),
    "loops beyond a signed 64-bit column": with_candidate(inner_loops=2**63),
    "bytes error": with_candidate(error=b"boom"),
    "int pruned": with_candidate(pruned=1),
    "duplicate names": TimingRecord((CandidateTiming("a"), CandidateTiming("a"))),
    "not a candidate": TimingRecord(("a",)),  # type: ignore[arg-type]
    "list setting": TimingRecord(settings={"x": [1]}),  # type: ignore[dict-item]
    "dict env": TimingRecord(env={"x": {}}),  # type: ignore[dict-item]
    "int key": TimingRecord(settings={1: 1}),  # type: ignore[dict-item]
    "nan setting": TimingRecord(settings={"x": math.nan}),
    "inf env": TimingRecord(env={"x": -math.inf}),
    "int setting beyond 64 bits": TimingRecord(settings={"x": -(2**64) - 1}),
    "bytes setting": TimingRecord(settings={"x": b"raw"}),  # type: ignore[dict-item]
}


@pytest.mark.parametrize("record", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_encode_rejects(record: TimingRecord) -> None:
    with pytest.raises(CodecError, match=r"^timing record: "):
        encode(record)


def test_encode_rejects_non_record() -> None:
    with pytest.raises(CodecError):
        encode({"v": 1})  # type: ignore[arg-type]


def test_encode_refuses_what_decode_would_refuse() -> None:
    huge = TimingRecord((CandidateTiming("a", (1.0,) * (MAX_SIZE // 8 + 1)),))
    with pytest.raises(CodecError, match="exceed the limit"):
        encode(huge)


# --- hostile bytes ---------------------------------------------------------------------------


def tampered(path: tuple[Any, ...], value: Any = None, *, delete: bool = False) -> bytes:
    """The sample record's encoding with one field replaced (or deleted)."""
    obj = wire()
    target = obj
    for step in path[:-1]:
        target = target[step]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return dumps(obj)


def unbounded_cases() -> dict[str, object]:
    """Inputs decode must refuse before cbor2 builds anything: not bytes, or CBOR headers that
    would make it allocate, recurse or loop."""
    valid = encode(sample_record())
    return {
        # layer 1: before cbor2 sees anything
        "str input": valid.decode("latin-1"),
        "int input": 42,
        "none input": None,
        "list input": list(valid),
        "empty": b"",
        "oversize": b"\x00" * (MAX_SIZE + 1),
        # layer 2: headers that would make cbor2 allocate, recurse or loop
        "deep arrays": b"\x81" * 100_000 + b"\x00",
        "deep maps": b"\xa1\x00" * 100_000 + b"\x00",
        "bstr 2**64-1": b"\x5b" + b"\xff" * 8,
        "tstr 2**64-1": b"\x7b" + b"\xff" * 8,
        "bstr 4 GiB": b"\x5a\xff\xff\xff\xff" + b"\x00" * 16,
        "array 2**64-1": b"\x9b" + b"\xff" * 8 + b"\x00" * 8,
        "map 2**64-1": b"\xbb" + b"\xff" * 8 + b"\x00" * 8,
        "map 2**63 pairs": b"\xbb\x80" + b"\x00" * 7 + b"\x00" * 8,
        "array of 200k items": b"\x9a\x00\x03\x0d\x40" + b"\x00" * 200_000,
        "tag chain": b"\xd8\x1c" * 1000 + b"\x00",
        "shareable tag": b"\xd8\x1c\x81\xd8\x1d\x00",
        "shared reference": b"\xd8\x1d\x00",
        "bignum tag": b"\xc2\x49" + b"\xff" * 9,
        "string reference namespace": b"\xd9\x01\x00\x80",
        "indefinite bstr": b"\x5f\x41\x00\xff",
        "indefinite tstr": b"\x7f\x61a\xff",
        "indefinite array": b"\x9f" * 1000 + b"\xff" * 1000,
        "indefinite map": b"\xbf\xff",
        "lone break": b"\xff",
        "reserved info 28": b"\x1c",
        "reserved info 30": b"\x9e",
        "truncated argument": b"\x1b\x00\x00",
        "trailing byte": valid + b"\x00",
        "two records": valid + valid,
    }


def malformed_cases() -> dict[str, object]:
    """Inputs whose headers are bounded, so cbor2 reads them, and that are still no v1 record."""
    many = 2_000_000  # 16 MB of samples, a bad one last, still under MAX_SIZE
    big_samples = f64(*([1e-3] * (many - 1)), math.nan)
    big = dumps(
        {
            "v": 1,
            "c": [{"n": "a", "s": big_samples, "l": 1, "e": None, "p": False}],
            "settings": {},
            "env": {},
        }
    )
    return {
        # layer 3: well-formed headers that cbor2 itself refuses
        "duplicate top key": b"\xa2\x61v\x01\x61v\x01",
        "duplicate candidate key": (
            b"\xa4\x61v\x01\x61c\x81\xa2\x61n\x61a\x61n\x61b\x68settings\xa0\x63env\xa0"
        ),
        "invalid utf-8": b"\x62\xff\xfe",
        "invalid simple value": b"\xf8\x05",
        # layer 4: valid CBOR, not a v1 record
        "top level array": dumps([1]),
        "top level int": dumps(1),
        "no version": tampered(("v",), delete=True),
        "version 0": tampered(("v",), 0),
        "version -1": tampered(("v",), -1),
        "version true": tampered(("v",), True),
        "version float": tampered(("v",), 1.0),
        "version str": tampered(("v",), "1"),
        "version 7": tampered(("v",), 7),
        "version 2**64-1": tampered(("v",), 2**64 - 1),
        "unknown top key": tampered(("extra",), 1),
        "missing c": tampered(("c",), delete=True),
        "missing settings": tampered(("settings",), delete=True),
        "missing env": tampered(("env",), delete=True),
        "c is a map": tampered(("c",), {}),
        "candidate is a list": tampered(("c", 0), []),
        "unknown candidate key": tampered(("c", 0, "x"), 1),
        "missing n": tampered(("c", 0, "n"), delete=True),
        "missing s": tampered(("c", 0, "s"), delete=True),
        "missing l": tampered(("c", 0, "l"), delete=True),
        "missing e": tampered(("c", 0, "e"), delete=True),
        "missing p": tampered(("c", 0, "p"), delete=True),
        "name int": tampered(("c", 0, "n"), 1),
        "name bytes": tampered(("c", 0, "n"), b"a"),
        "name empty": tampered(("c", 0, "n"), ""),
        "duplicate names": tampered(("c", 1, "n"), "mkl_nt4"),
        "samples text": tampered(("c", 0, "s"), "abc"),
        "samples array": tampered(("c", 0, "s"), [1.0]),
        "samples 7 bytes": tampered(("c", 0, "s"), b"\x00" * 7),
        "samples nan": tampered(("c", 0, "s"), f64(1.0, math.nan)),
        "samples inf": tampered(("c", 0, "s"), f64(math.inf)),
        "samples negative": tampered(("c", 0, "s"), f64(1.0, -1.0)),
        "samples 16 MB, nan last": big,
        "loops zero": tampered(("c", 0, "l"), 0),
        "loops negative": tampered(("c", 0, "l"), -3),
        "loops float": tampered(("c", 0, "l"), 16.0),
        "loops bool": tampered(("c", 0, "l"), True),
        "loops null": tampered(("c", 0, "l"), None),
        "error int": tampered(("c", 0, "e"), 1),
        "error bytes": tampered(("c", 0, "e"), b"boom"),
        "pruned int": tampered(("c", 0, "p"), 0),
        "pruned null": tampered(("c", 0, "p"), None),
        "settings array": tampered(("settings",), [1]),
        "settings null": tampered(("settings",), None),
        "env text": tampered(("env",), "x"),
        "settings int key": tampered(("settings", 1), 1),
        "settings array value": tampered(("settings", "x"), [1]),
        "settings map value": tampered(("settings", "x"), {}),
        "settings bytes value": tampered(("settings", "x"), b"x"),
        "settings nan value": tampered(("settings", "x"), math.nan),
        "env inf value": tampered(("env", "x"), math.inf),
        "env undefined value": tampered(("env", "x"), cbor2.undefined),
        "env simple value": tampered(("env", "x"), cbor2.CBORSimpleValue(16)),
    }


def hostile_cases() -> dict[str, object]:
    """Inputs decode must refuse with CodecError, in bounded work and memory."""
    return {**unbounded_cases(), **malformed_cases()}


UNBOUNDED = frozenset(unbounded_cases())
HOSTILE = hostile_cases()


@pytest.mark.parametrize("name", HOSTILE)
def test_decode_rejects_hostile(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[bytes] = []
    loads = cbor2.loads

    def counted(data: bytes, **options: Any) -> object:
        built.append(data)
        return loads(data, **options)

    monkeypatch.setattr(cbor2, "loads", counted)
    with pytest.raises(CodecError) as info:
        decode(HOSTILE[name])  # type: ignore[arg-type]
    # What bounds the work is that cbor2 never sees an unbounded header: the pre-scan, linear
    # in the bytes, refuses it first. (Counted, not timed: a loaded machine is no failure.)
    if name in UNBOUNDED:
        assert built == []
    message = str(info.value)
    assert message.startswith("timing record: ") and "\n" not in message and len(message) < 300


def test_every_prefix_is_truncated() -> None:
    data = encode(sample_record())
    for end in range(len(data)):
        with pytest.raises(CodecError):
            decode(data[:end])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b"\x5b\x7f" + b"\xff" * 7 + b"\x00" * 12,
            "timing record: declared length 9223372036854775807 at byte 0"
            " exceeds the 12 bytes left",
        ),
        (
            tampered(("v",), 7),
            "timing record: format version 7 is newer than this tunecache reads (1)",
        ),
        (b"\x81" * 100 + b"\x00", "timing record: nesting deeper than 16 at byte 16"),
        (b"\xd8\x1c\x00", "timing record: tag 28 at byte 0 is not allowed"),
        (b"\x9f\xff", "timing record: indefinite-length item at byte 0"),
    ],
)
def test_error_messages(data: bytes, message: str) -> None:
    with pytest.raises(CodecError) as info:
        decode(data)
    assert str(info.value) == message


def test_cbor2_errors_are_chained() -> None:
    with pytest.raises(CodecError) as info:
        decode(b"\xa2\x61v\x01\x61v\x01")
    assert isinstance(info.value.__cause__, cbor2.CBORDecodeError)


def test_limits_are_parameters() -> None:
    data = encode(sample_record())
    assert decode(data, max_size=len(data), max_depth=3, max_items=100) == sample_record()
    for limits in ({"max_size": len(data) - 1}, {"max_depth": 2}, {"max_items": 20}):
        with pytest.raises(CodecError):
            decode(data, **limits)


def test_a_large_valid_record_costs_a_few_items_whatever_its_samples() -> None:
    # A million samples are one byte string: the pre-scan walks 20 items, not a million, and
    # cbor2 builds one bytes object. Counted, not timed.
    record = TimingRecord((CandidateTiming("a", tuple(float(i) for i in range(1_000_000))),))
    data = encode(record)
    assert decode(data, max_items=20, max_depth=3) == record
    with pytest.raises(CodecError, match="more than 19 items"):
        decode(data, max_items=19)


CHILD = """
import pickle, resource, sys
limit = 512 << 20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from tunecache.codec import decode
from tunecache.errors import CodecError
failures = []
for name, data in pickle.loads(sys.stdin.buffer.read()):
    try:
        decode(data)
    except CodecError:
        pass
    except BaseException as e:
        failures.append(f"{name}: {type(e).__name__}: {e}"[:300])
    else:
        failures.append(f"{name}: decoded")
print("\\n".join(failures))
sys.exit(1 if failures else 0)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is only enforced on Linux")
def test_hostile_in_bounded_memory() -> None:
    """Every hostile case, in a child process that cannot map more than 512 MiB."""
    data = encode(sample_record())
    cases = list(HOSTILE.items()) + [(f"prefix {n}", data[:n]) for n in range(len(data))]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=pickle.dumps(cases),
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert child.returncode == 0, (child.stdout + child.stderr).decode(errors="replace")


# --- fuzzing ---------------------------------------------------------------------------------


def check_decodes_or_refuses(data: bytes) -> None:
    """The fuzz property: a valid record that round-trips, or CodecError; never anything else."""
    try:
        record = decode(data)
    except CodecError:
        return
    assert isinstance(record, TimingRecord)
    assert decode(encode(record)) == record


@given(st.binary(max_size=1024))
def test_fuzz_random_bytes(data: bytes) -> None:
    check_decodes_or_refuses(data)


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "insert", "delete", "truncate"]),
        st.integers(0, 10**6),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=8,
)


def mutate(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for op, where, value in ops:
        i = where % (len(buf) + 1)
        if op == "insert":
            buf[i:i] = bytes([value])
        elif op == "truncate":
            del buf[i:]
        elif i < len(buf):
            if op == "flip":
                buf[i] ^= 1 << (value % 8)
            elif op == "set":
                buf[i] = value
            else:
                del buf[i]
    return bytes(buf)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(records, mutations)
def test_fuzz_mutated_records(record: TimingRecord, ops: list[tuple[str, int, int]]) -> None:
    check_decodes_or_refuses(mutate(encode(record), ops))


@given(mutations)
def test_fuzz_mutated_sample(ops: list[tuple[str, int, int]]) -> None:
    check_decodes_or_refuses(mutate(encode(sample_record()), ops))


cbor_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)
    | st.floats()
    | st.text(max_size=10)
    | st.binary(max_size=24)
    | st.sampled_from(["v", "c", "n", "s", "l", "e", "p", "settings", "env"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["v", "c", "n", "s", "l", "e", "p", "settings", "env", "x"]),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@given(cbor_values)
def test_fuzz_structured(value: object) -> None:
    check_decodes_or_refuses(dumps(value))


def _cbor_items(obj: object) -> int:
    """The CBOR items of a decoded value: one for it, and one for each key and value inside."""
    if isinstance(obj, dict):
        return 1 + sum(1 + _cbor_items(value) for value in obj.values())
    if isinstance(obj, list):
        return 1 + sum(_cbor_items(value) for value in obj)
    return 1


@given(records)
def test_the_item_count_encode_checks_is_the_records_own(record: TimingRecord) -> None:
    data = encode(record)
    counted = _cbor_items(cbor2.loads(data))
    assert counted == wire_items(len(record.candidates), len(record.settings), len(record.env))
    # The limit encode holds to is the one decode holds to.
    assert decode(data, max_items=counted) == record
    with pytest.raises(CodecError, match="more than"):
        decode(data, max_items=counted - 1)


@given(st.lists(st.floats(width=64), max_size=12))
@settings(max_examples=300)
def test_samples_are_refused_exactly_when_one_is_not_finite_and_non_negative(
    samples: list[float],
) -> None:
    """The check's fast path (a minimum and a sum) and its walk agree with the rule itself,
    for any mix of NaNs, infinities, negatives, zeros and values near the float limit."""
    record = TimingRecord(candidates=(CandidateTiming("a", tuple(samples)),))
    bad = [j for j, x in enumerate(samples) if not (x >= 0.0 and math.isfinite(x))]
    if not bad:
        assert decode(encode(record)).candidates[0].samples == tuple(samples)
        return
    with pytest.raises(CodecError, match=rf"sample {bad[0]} is "):
        encode(record)


def test_samples_whose_sum_overflows_are_still_accepted() -> None:
    """Finite samples near the float limit overflow the fast path's sum; the walk accepts them."""
    big = (1.7e308, 1.7e308)
    record = TimingRecord(candidates=(CandidateTiming("a", big),))
    assert decode(encode(record)).candidates[0].samples == big
