"""The CBOR codec for timing records: encode them, and decode untrusted bytes within limits."""

# Format versions of the timing record blob (the "v" key):
#
# - version 1 (tunecache 0.1): first format.
#
# A reader refuses any version newer than FORMAT_VERSION, and v1 has no unknown keys: a writer
# that adds a field bumps the version, so an old reader says "newer tunecache" instead of silently
# dropping what it does not understand.

from __future__ import annotations

import statistics
import sys
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import cbor2

from tunecache._cbor import check_keys, decode_bounded, kind, one_line, short
from tunecache.checks import is_int, is_real
from tunecache.errors import CodecError

__all__ = [
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_SIZE",
    "CandidateTiming",
    "Scalar",
    "TimingRecord",
    "decode",
    "encode",
    "wire_items",
]

#: the newest format version this module writes and reads
FORMAT_VERSION = 1
#: default limit on the size of a blob to decode, in bytes
MAX_SIZE = 16 * 1024 * 1024
#: default limit on how deeply containers may nest (a valid v1 record nests 3 deep)
MAX_DEPTH = 16
#: default limit on the number of CBOR items (a valid v1 record uses ~11 per candidate)
MAX_ITEMS = 100_000

#: a settings or env value: CBOR scalars only, so a record stays flat and comparable
Scalar = str | int | float | bool | None

_PREFIX = "timing record: "
_FLOAT_MAX = sys.float_info.max
# CBOR major types 0 and 1 carry an integer in 64 bits; anything wider needs bignum tags,
# which the decoder refuses, so the encoder must refuse it too.
_INT_MIN = -(2**64)
_INT_MAX = 2**64 - 1
_LOOPS_MAX = 2**63 - 1
_TOP_KEYS = frozenset({"v", "c", "settings", "env"})
_CANDIDATE_KEYS = frozenset({"n", "s", "l", "e", "p"})


@dataclass(frozen=True, slots=True)
class CandidateTiming:
    """One candidate's measurements: every raw sample, or the error it raised."""

    name: str
    #: seconds per call, one per sample, in the order they were taken
    samples: tuple[float, ...] = ()
    #: how many calls each sample averaged
    inner_loops: int = 1
    #: the error text if the candidate raised, else None
    error: str | None = None
    #: True if the bencher dropped it early
    pruned: bool = False

    def __post_init__(self) -> None:
        # Accept any iterable (a list, a numpy array) but store a tuple, so equality and
        # hashing do not depend on what the bencher happened to collect samples in.
        if not isinstance(self.samples, tuple):
            object.__setattr__(self, "samples", tuple(self.samples))

    @property
    def median(self) -> float | None:
        """The median sample in seconds, or None without samples."""
        return float(statistics.median(self.samples)) if self.samples else None

    @property
    def min(self) -> float | None:
        """The fastest sample in seconds, or None without samples."""
        return float(min(self.samples)) if self.samples else None

    @property
    def max(self) -> float | None:
        """The slowest sample in seconds, or None without samples."""
        return float(max(self.samples)) if self.samples else None


@dataclass(frozen=True, slots=True)
class TimingRecord:
    """The evidence behind one entry: every candidate's timings, bench settings and environment."""

    candidates: tuple[CandidateTiming, ...] = ()
    settings: Mapping[str, Scalar] = field(default_factory=dict)
    env: Mapping[str, Scalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Copy the mappings so a caller mutating its dict later cannot change a frozen record.
        if not isinstance(self.candidates, tuple):
            object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "settings", dict(self.settings))
        object.__setattr__(self, "env", dict(self.env))

    def best(self) -> CandidateTiming | None:
        """The fastest candidate by median of those that ran, were not pruned and have samples."""
        ran = [c for c in self.candidates if c.error is None and not c.pruned and c.samples]
        # min() keeps the first of equal medians, i.e. the earlier one in candidate-set order.
        return min(ran, key=lambda c: statistics.median(c.samples)) if ran else None

    def candidate(self, name: str) -> CandidateTiming:
        """The candidate called name; KeyError if the record has none."""
        for c in self.candidates:
            if c.name == name:
                return c
        raise KeyError(name)


# --- encoding --------------------------------------------------------------------------------


def encode(record: TimingRecord) -> bytes:
    """Validate a record and encode it as deterministic (canonical) CBOR."""
    if not isinstance(record, TimingRecord):
        raise CodecError(f"{_PREFIX}expected a TimingRecord, got {kind(record)}")
    names: set[str] = set()
    wire_candidates = []
    for i, c in enumerate(record.candidates):
        if not isinstance(c, CandidateTiming):
            raise CodecError(f"{_PREFIX}candidate {i} is {kind(c)}, not a CandidateTiming")
        where = _Where(i, c.name)
        _check_name(c.name, where, names)
        _check_loops(c.inner_loops, where)
        _check_error(c.error, where)
        if not isinstance(c.pruned, bool):
            raise CodecError(f"{where}pruned must be a bool, got {kind(c.pruned)}")
        samples = _pack(c.samples, where)
        wire_candidates.append(
            {"n": c.name, "s": samples, "l": c.inner_loops, "e": c.error, "p": c.pruned}
        )
    settings, env = _scalars(record.settings, "settings"), _scalars(record.env, "env")
    wire = {"v": FORMAT_VERSION, "c": wire_candidates, "settings": settings, "env": env}
    # Never write what the default decoder would refuse to read back. The wire form is fixed
    # (3 levels deep at most, every value a scalar), so its item count is known without a
    # pre-scan of the bytes, which would cost as much as the encoding itself.
    items = wire_items(len(wire_candidates), len(settings), len(env))
    if items > MAX_ITEMS:
        raise CodecError(f"{_PREFIX}more than {MAX_ITEMS} items")
    try:
        data: bytes = cbor2.dumps(wire, canonical=True)
    except Exception as e:  # what we pass is validated, so this is a bug, but keep the contract
        raise CodecError(f"{_PREFIX}cannot encode: {one_line(e)}") from e
    if len(data) > MAX_SIZE:
        raise CodecError(f"{_PREFIX}{len(data)} bytes exceed the limit of {MAX_SIZE}")
    return data


def wire_items(candidates: int, settings: int, env: int) -> int:
    """How many CBOR items a v1 record with these many candidates, settings and env values
    takes: its top map (4 keys), the version, the candidate array with 11 items a candidate
    (a map of 5 keys and 5 scalar values), and the settings and env maps of scalars."""
    top = 1 + 4  # the map and its keys
    return top + 1 + (1 + 11 * candidates) + (1 + 2 * settings) + (1 + 2 * env)


def _pack(samples: Iterable[object], where: object) -> bytes:
    """Check samples and pack them as little-endian float64 bytes."""
    if isinstance(samples, tuple) and all(type(x) is float for x in samples):
        # The common case, floats a bench measured: packed in one call.
        packed = array("d", samples)
    else:
        packed = _pack_each(samples, where)
    _check_samples(packed, where)
    if sys.byteorder == "big":  # the wire is little-endian float64
        packed.byteswap()
    return packed.tobytes()


def _pack_each(samples: Iterable[object], where: object) -> array[float]:
    """Samples of any kind packed one by one, each refused with its position if it is not a
    real number or does not fit a float64."""
    packed = array("d")
    for j, x in enumerate(samples):
        if not is_real(x):
            raise CodecError(f"{where}sample {j} is {kind(x)}, not a float")
        try:
            packed.append(x)
        except OverflowError:
            raise CodecError(f"{where}sample {j} does not fit a float64") from None
    return packed


# --- decoding --------------------------------------------------------------------------------


def decode(
    data: bytes | bytearray | memoryview,
    *,
    max_size: int = MAX_SIZE,
    max_depth: int = MAX_DEPTH,
    max_items: int = MAX_ITEMS,
) -> TimingRecord:
    """Decode a timing record from untrusted bytes, raising CodecError for anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"{_PREFIX}expected bytes, got {kind(data)}")
    # The size is checked before a memoryview is copied; decode_bounded checks it again.
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > max_size:
        raise CodecError(f"{_PREFIX}{size} bytes exceed the limit of {max_size}")
    # The pre-scan bounds what cbor2 will allocate before it allocates anything.
    obj = decode_bounded(
        bytes(data), max_size=max_size, max_depth=max_depth, max_items=max_items, prefix=_PREFIX
    )
    return _from_wire(obj)


def _from_wire(obj: object) -> TimingRecord:
    """Check decoded CBOR against the v1 schema and build the record."""
    if not isinstance(obj, dict):
        raise CodecError(f"{_PREFIX}top level is {kind(obj)}, not a map")
    # The version comes first so a newer record is reported as newer, not as malformed.
    if "v" not in obj:
        raise CodecError(f"{_PREFIX}no format version")
    version = obj["v"]
    if not is_int(version) or version < 1:
        raise CodecError(f"{_PREFIX}invalid format version {short(version)}")
    if version > FORMAT_VERSION:
        raise CodecError(
            f"{_PREFIX}format version {version} is newer than this tunecache reads"
            f" ({FORMAT_VERSION})"
        )
    check_keys(obj, _TOP_KEYS, _PREFIX)
    wire_candidates = obj["c"]
    if not isinstance(wire_candidates, list):
        raise CodecError(f"{_PREFIX}'c' is {kind(wire_candidates)}, not an array")
    names: set[str] = set()
    candidates = []
    for i, wc in enumerate(wire_candidates):
        if not isinstance(wc, dict):
            raise CodecError(f"{_PREFIX}candidate {i} is {kind(wc)}, not a map")
        where = _Where(i, wc.get("n"))
        check_keys(wc, _CANDIDATE_KEYS, where)
        name = _check_name(wc["n"], where, names)
        loops, error, pruned = wc["l"], wc["e"], wc["p"]
        _check_loops(loops, where)
        _check_error(error, where)
        if not isinstance(pruned, bool):
            raise CodecError(f"{where}'p' is {kind(pruned)}, not a bool")
        samples = _unpack(wc["s"], where)
        candidates.append(CandidateTiming(name, samples, loops, error, pruned))
    return TimingRecord(
        candidates=tuple(candidates),
        settings=_scalars(obj["settings"], "settings"),
        env=_scalars(obj["env"], "env"),
    )


def _unpack(raw: object, where: object) -> tuple[float, ...]:
    """Check and unpack a little-endian float64 byte string into samples."""
    if not isinstance(raw, bytes):
        raise CodecError(f"{where}'s' is {kind(raw)}, not a byte string")
    if len(raw) % 8:
        raise CodecError(f"{where}samples take {len(raw)} bytes, not a multiple of 8")
    samples = array("d")
    samples.frombytes(raw)
    if sys.byteorder == "big":
        samples.byteswap()
    _check_samples(samples, where)
    return tuple(samples)


# --- shared checks ---------------------------------------------------------------------------


def _check_samples(samples: array[float], where: object) -> None:
    """Refuse samples that are not finite and >= 0."""
    # Two calls in C settle the common case: a NaN makes the sum NaN, an infinity makes it
    # infinite, a negative sample makes the minimum negative. Only a refusal, or a sum that
    # overflows, walks the samples to name the first bad one.
    if samples and min(samples) >= 0.0 and sum(samples) <= _FLOAT_MAX:
        return
    for j, x in enumerate(samples):
        # One chained comparison rejects NaN (it compares false), infinities and negatives.
        if not 0.0 <= x <= _FLOAT_MAX:
            raise CodecError(f"{where}sample {j} is {x!r}; samples must be finite and >= 0")


def _check_name(name: object, where: object, seen: set[str]) -> str:
    """Refuse a candidate name that is not a non-empty str or repeats an earlier one."""
    if not isinstance(name, str):
        raise CodecError(f"{where}name is {kind(name)}, not a str")
    if not name:
        raise CodecError(f"{where}name is empty")
    _check_text(name, where)
    if name in seen:
        raise CodecError(f"{where}duplicate candidate name")
    seen.add(name)
    return name


def _check_loops(loops: object, where: object) -> None:
    """Refuse an inner_loops that is not an int in [1, 2**63): the store keeps it in a signed
    64-bit SQLite INTEGER, so a larger one would be accepted here and fail at the write."""
    if not is_int(loops) or not 1 <= loops <= _LOOPS_MAX:
        raise CodecError(f"{where}inner_loops must be an int in [1, 2**63), got {short(loops)}")


def _check_error(error: object, where: object) -> None:
    """Refuse an error that is neither None nor text."""
    if error is not None:
        if not isinstance(error, str):
            raise CodecError(f"{where}error must be a str or None, got {kind(error)}")
        _check_text(error, where)


def _check_text(text: str, where: object) -> None:
    """Refuse text with lone surrogates: they have no UTF-8 form, so CBOR cannot carry them."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CodecError(f"{where}text {short(text)} is not valid Unicode") from None


def _scalars(mapping: object, what: str) -> dict[str, Scalar]:
    """Check a settings or env mapping and return it as a plain dict."""
    if not isinstance(mapping, Mapping):
        raise CodecError(f"{_PREFIX}{what} is {kind(mapping)}, not a map")
    out: dict[str, Scalar] = {}
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise CodecError(f"{_PREFIX}{what} key is {kind(key)}, not a str")
        _check_text(key, f"{_PREFIX}{what} ")
        where = _Where(what, key)
        if value is None or isinstance(value, bool):
            pass
        elif isinstance(value, int):
            if not _INT_MIN <= value <= _INT_MAX:
                raise CodecError(f"{where}int of {value.bit_length()} bits does not fit CBOR's 64")
        elif isinstance(value, float):
            # Non-finite values break record equality (NaN != NaN); None says "no limit".
            if not -_FLOAT_MAX <= value <= _FLOAT_MAX:
                raise CodecError(f"{where}float {value!r} is not finite")
        elif isinstance(value, str):
            _check_text(value, where)
        else:
            raise CodecError(f"{where}value is {kind(value)}, not str, int, float, bool or None")
        out[key] = value
    return out


class _Where:
    """The message prefix that names a candidate (an index) or a settings or env value (the
    map's name), formatted only if a message needs it: a valid record never does, and
    building the text for each of its parts cost an eighth of encoding it."""

    __slots__ = ("name", "part")

    def __init__(self, part: int | str, name: object) -> None:
        self.part = part
        self.name = name

    def __format__(self, spec: str) -> str:
        if isinstance(self.part, str):
            return f"{_PREFIX}{self.part}[{short(self.name)}]: "
        if isinstance(self.name, str):
            return f"{_PREFIX}candidate {self.part} ({short(self.name)}): "
        return f"{_PREFIX}candidate {self.part}: "
