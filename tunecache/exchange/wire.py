"""The export format: the items of an export, built from entries and read back from bytes
nobody vouches for, every field checked against the format before anything uses it.

Version 2, the one written, is a stream of small items (`tunecache.exchange.stream` frames and
orders them); version 1, one map holding everything, is still read (`decode_document`). Both
carry the same maps for a candidate set, a model and an entry, built by `set_item`,
`model_item` and `entry_item` and checked by `read_set`, `read_model` and `read_entry`.

A timing record travels as its own CBOR byte string and is stored as the bytes it came in. It
is decoded once on the way in, by `codec.decode` (the bounded pre-scan, then every value
checked against the record's schema), and never encoded again. Not the pre-scan alone: that
would let through sound CBOR that is not a valid v1 record (a sample that is not a number, a
candidate missing), or a record whose candidates are not those of its set, which the cache
would keep and `inspect` would refuse on another machine; and the summary columns the store
keeps beside the bytes (each candidate's median, min and max, the best candidate) are computed
from the decoded samples anyway. What an import no longer does is encode the record again
(version 1 readers stored a canonical re-encoding): the bytes it came in are a valid record,
so they are what is stored, and an export of the import carries the very same bytes. A record
that another program encoded differently from tunecache is therefore kept as it came, and
compares as different content from tunecache's own encoding of the same measurement.
"""

# Format versions of the export (the "v" key of its header, or of its one map):
#
# - version 1 (tunecache 0.1): one canonical CBOR map {format, v, tool, exported_at, device,
#   fingerprint, candidate_sets, models, entries}, entries naming their set and models by their
#   index in those lists. Read whole, within MAX_SIZE, MAX_DEPTH and MAX_ITEMS. Still read; no
#   longer written.
# - version 2 (issue 15, streaming): a CBOR sequence (RFC 8742) of byte strings, each holding
#   one canonical CBOR item (CDDL's `bstr .cbor`), so that a reader finds where an item ends
#   from one head and bounds it before decoding anything: a header map {format, v, tool,
#   exported_at, device, fingerprint, entries}; then ["set", {signature, checksum, names}],
#   ["model", {name, fingerprint}] and ["entry", {...the v1 entry map...}] items, each set and
#   model before the first entry that names it by its index (its position among the items of
#   its kind), the entries in strictly ascending (key, checksum) order, so a duplicate is seen
#   without remembering every key; and last ["end", {entries, candidate_sets, models,
#   validations}], the counts of what came. Memory is bounded by one item and the sets and
#   models, whatever the length of the stream.
#
# A reader refuses any version newer than FORMAT_VERSION, and every map has a fixed set of keys:
# a writer that adds a field bumps the version, so an old reader says "newer tunecache" instead
# of silently dropping what it does not understand (the codec's rule for timing records).

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, cast

from tunecache import _cbor, codec
from tunecache._cbor import kind, short
from tunecache._version import __version__
from tunecache.candidates import candidate_names, checksum
from tunecache.checks import is_int, is_real
from tunecache.device import Device
from tunecache.errors import CodecError, TunecacheError
from tunecache.keys import Key, parse
from tunecache.store.models import ENTRY_STATUSES, VERDICTS
from tunecache.store.queries import VerdictFacts

__all__ = [
    # the entries both sides compare
    "ExportedEntry",
    "ExportedVerdict",
    "iso",
    # the items, both ways
    "Header",
    "Set",
    "entry_item",
    "fail",
    "header_item",
    "model_item",
    "read_entry",
    "read_header",
    "read_model",
    "read_set",
    "set_item",
    # version 1, read whole
    "Document",
    "decode_document",
    # the format and its limits
    "FORMAT",
    "FORMAT_VERSION",
    "PREFIX",
    "SQLITE_HEADER",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_SIZE",
]

#: the value of the "format" key: what says this CBOR is a tunecache export at all
FORMAT = "tunecache-export"
#: the newest export format version this module writes and reads
FORMAT_VERSION = 2
# The defaults bound what a hostile version 1 file can cost (the pre-scan walks about 2.5
# million items a second; cbor2 then builds them) while leaving room for ~200,000 entries.
#: default limit on the size of a version 1 export, read whole, in bytes
MAX_SIZE = 512 * 1024 * 1024
#: default limit on nesting, of a version 1 export or of one item of a stream (a v1 document
#: nests 5 deep, an entry item 4; timing records are byte strings)
MAX_DEPTH = 8
#: default limit on the number of CBOR items of a version 1 export (a v1 entry takes about 25,
#: a verdict about 15)
MAX_ITEMS = 5_000_000
#: what every message about a bad export file starts with
PREFIX = "export file: "
#: the first bytes of every SQLite database file
SQLITE_HEADER = b"SQLite format 3\x00"
_V1_KEYS = frozenset(
    {
        "format",
        "v",
        "tool",
        "exported_at",
        "device",
        "fingerprint",
        "candidate_sets",
        "models",
        "entries",
    }
)
_HEADER_KEYS = frozenset({"format", "v", "tool", "exported_at", "device", "fingerprint", "entries"})
_DEVICE_KEYS = frozenset({"cpu", "threads", "accelerator", "client", "client_version"})
_SET_KEYS = frozenset({"signature", "checksum", "names"})
_MODEL_KEYS = frozenset({"name", "fingerprint"})
_ENTRY_KEYS = frozenset(
    {
        "key",
        "set",
        "choice",
        "heuristic",
        "status",
        "speedup",
        "created_at",
        "updated_at",
        "record",
        "validations",
    }
)
_VALIDATION_KEYS = frozenset(
    {"model", "verdict", "gain", "rounds", "confirmations", "created_at", "updated_at"}
)
_MAX_TEXT = 1024
_MAX_COUNT = 2**63 - 1


# --- the entries both sides compare ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExportedVerdict(VerdictFacts):
    """A model's verdict on an entry as an export carries it: the model named, not numbered."""

    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ExportedEntry:
    """One decision as an export carries it, read from a file or from a database."""

    key: str
    signature: str
    checksum: str
    names: tuple[str, ...]
    choice: str
    heuristic: str | None
    status: str
    speedup: float | None
    created_at: datetime
    updated_at: datetime
    blob: bytes | None
    samples: int
    verdicts: tuple[ExportedVerdict, ...]
    #: the decoded record, where the entry was read from a file (None from a database)
    record: codec.TimingRecord | None = None
    #: the key parsed, where the entry was read from a file (None from a database)
    parsed: Key | None = None

    @property
    def ident(self) -> tuple[str, str]:
        """What makes two entries the same decision: key and candidate set."""
        return (self.key, self.checksum)

    def content(self) -> tuple[Any, ...]:
        """Everything but the times: equal content means the same measurement and verdicts."""
        return (
            self.choice,
            self.heuristic,
            self.status,
            self.speedup,
            self.blob,
            tuple(
                (v.model, v.fingerprint, v.verdict, v.gain, v.rounds, v.confirmations)
                for v in self.verdicts
            ),
        )


def iso(value: datetime) -> str:
    """A time as the format writes it: ISO 8601 in UTC."""
    # The store reads its times back in UTC already: most need no conversion.
    return (value if value.tzinfo is UTC else value.astimezone(UTC)).isoformat()


# --- the items, written ------------------------------------------------------------------------


def header_item(device: Device, exported_at: datetime, entries: int) -> dict[str, Any]:
    """The header of a version 2 export: what wrote it, when, for which device, and how many
    entries follow."""
    return {
        "format": FORMAT,
        "v": FORMAT_VERSION,
        "tool": __version__,
        "exported_at": iso(exported_at),
        "device": device.as_dict(),
        "fingerprint": device.fingerprint,
        "entries": entries,
    }


def set_item(signature: str, sum_: str, names: tuple[str, ...]) -> dict[str, Any]:
    """A candidate set as both versions carry it."""
    return {"signature": signature, "checksum": sum_, "names": list(names)}


def model_item(name: str, fingerprint: str) -> dict[str, Any]:
    """A model as both versions carry it."""
    return {"name": name, "fingerprint": fingerprint}


def entry_item(
    e: ExportedEntry, set_index: int, model_index: dict[tuple[str, str], int]
) -> dict[str, Any]:
    """One entry as both versions carry it: its candidate set and models by their index."""
    return {
        "key": e.key,
        "set": set_index,
        "choice": e.choice,
        "heuristic": e.heuristic,
        "status": e.status,
        "speedup": e.speedup,
        "created_at": iso(e.created_at),
        "updated_at": iso(e.updated_at),
        "record": e.blob,
        "validations": [
            {
                "model": model_index[(v.model, v.fingerprint)],
                "verdict": v.verdict,
                "gain": v.gain,
                "rounds": v.rounds,
                "confirmations": v.confirmations,
                "created_at": iso(v.created_at),
                "updated_at": iso(v.updated_at),
            }
            for v in e.verdicts
        ],
    }


# --- the items, read ---------------------------------------------------------------------------


class Header(NamedTuple):
    """Where an export came from: its version, the tool and time that wrote it, its device, and
    how many entries it says it holds."""

    version: int
    tool: str
    exported_at: datetime
    device: Device
    entries: int


class Set(NamedTuple):
    """A candidate set of an export, checked: its signature, checksum and names."""

    signature: str
    checksum: str
    names: tuple[str, ...]


def fail(message: str) -> CodecError:
    """The error for a bad export file: one line starting with PREFIX."""
    return CodecError(PREFIX + message)


def _map(obj: object, keys: frozenset[str], where: str) -> dict[str, Any]:
    """The object as a map with exactly `keys`, else CodecError."""
    if not isinstance(obj, dict):
        raise fail(f"{where} is {kind(obj)}, not a map")
    if obj.keys() != keys:  # then say which key is wrong
        _cbor.check_keys(obj, keys, f"{PREFIX}{where}: ")
    return cast(dict[str, Any], obj)


# The checks of one value take the place (`where`) and the field apart, and join them only in
# a message: a valid file never needs one, and joining them for every field of every entry
# cost a tenth of reading it.


def _at(where: str, field: str) -> str:
    return f"{where} {field}" if field else where


def _list(obj: object, where: str, field: str = "") -> list[Any]:
    if not isinstance(obj, list):
        raise fail(f"{_at(where, field)} is {kind(obj)}, not an array")
    return obj


def _text(
    obj: object, where: str, field: str = "", *, empty: bool = False, max_len: int = _MAX_TEXT
) -> str:
    if not isinstance(obj, str):
        raise fail(f"{_at(where, field)} is {kind(obj)}, not text")
    if not obj and not empty:
        raise fail(f"{_at(where, field)} is empty")
    if len(obj) > max_len:
        raise fail(f"{_at(where, field)} is longer than {max_len} characters")
    return obj


def _when(obj: object, where: str, field: str = "") -> datetime:
    text = _text(obj, where, field, max_len=64)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise fail(f"{_at(where, field)} {short(text)} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise fail(f"{_at(where, field)} {short(text)} has no time zone")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01 in a zone east of UTC falls before year 1
        raise fail(f"{_at(where, field)} {short(text)} is out of range") from None


def _positive(obj: object, where: str, field: str = "") -> float | None:
    if obj is None:
        return None
    if not is_real(obj):
        raise fail(f"{_at(where, field)} is {kind(obj)}, not a number")
    if not math.isfinite(obj) or obj <= 0:
        raise fail(f"{_at(where, field)} must be a finite positive number, got {obj!r}")
    return float(obj)


def _count(obj: object, where: str, field: str = "") -> int:
    if not is_int(obj) or not 0 <= obj <= _MAX_COUNT:
        raise fail(f"{_at(where, field)} must be a non-negative integer, got {short(obj)}")
    return obj


def _index(obj: object, size: int, where: str, field: str = "") -> int:
    if not is_int(obj) or not 0 <= obj < size:
        raise fail(f"{_at(where, field)} {short(obj)} names nothing in the file")
    return obj


def _version(obj: object) -> tuple[dict[str, Any], int]:
    """The map and its format version, checked first, so that a newer export is reported as
    newer, not as bad."""
    if not isinstance(obj, dict):
        raise fail(f"top level is {kind(obj)}, not a map")
    if obj.get("format") != FORMAT:
        raise fail("not a tunecache export (no 'format': 'tunecache-export')")
    version = obj.get("v")
    if not is_int(version) or version < 1:
        raise fail(f"invalid format version {short(version)}")
    if version > FORMAT_VERSION:
        raise fail(
            f"format version {version} is newer than this tunecache reads ({FORMAT_VERSION}); "
            "upgrade tunecache to import it"
        )
    return cast(dict[str, Any], obj), version


def _source(top: dict[str, Any]) -> tuple[str, datetime, Device]:
    """The tool, time and device of a v1 document or a v2 header."""
    tool = _text(top["tool"], "'tool'", max_len=64)
    exported_at = _when(top["exported_at"], "'exported_at'")
    wire = _map(top["device"], _DEVICE_KEYS, "'device'")
    try:
        device = Device(**wire)
    except TunecacheError as error:
        raise fail(f"'device': {error}") from None
    if top["fingerprint"] != device.fingerprint:
        raise fail("'fingerprint' does not match the device fields")
    return tool, exported_at, device


def read_header(obj: object) -> Header:
    """Check the header item of a version 2 export (the first item of the stream)."""
    top, version = _version(obj)
    if version < 2:
        raise fail(f"a version {version} export is one map, not a stream of items")
    top = _map(top, _HEADER_KEYS, "the header")
    return Header(version, *_source(top), _count(top["entries"], "the header's 'entries'"))


def read_set(obj: object, i: int) -> Set:
    """Check candidate set number `i`: its names, and its checksum against them."""
    where = f"candidate set {i}"
    wire = _map(obj, _SET_KEYS, where)
    signature = _text(wire["signature"], where, "signature", max_len=4096)
    raw_names = _list(wire["names"], where, "names")
    try:
        names = candidate_names(raw_names)
    except TunecacheError as error:
        raise fail(f"{where}: {error}") from None
    if wire["checksum"] != checksum(names):
        raise fail(f"{where}: checksum does not match its names")
    return Set(signature, wire["checksum"], names)


def read_model(obj: object, i: int) -> tuple[str, str]:
    """Check model number `i`: its (name, fingerprint)."""
    wire = _map(obj, _MODEL_KEYS, f"model {i}")
    return (
        _text(wire["name"], f"model {i}", "name"),
        _text(wire["fingerprint"], f"model {i}", "fingerprint", empty=True),
    )


def read_entry(
    obj: object,
    i: int,
    sets: list[Set],
    models: list[tuple[str, str]],
    *,
    records: bool = True,
) -> ExportedEntry:
    """Check entry number `i`, whose set and models are indexes into `sets` and `models`: its
    key, decision and times, its timing record (decoded, kept as the bytes it came in) and
    its verdicts.

    With `records` False, a record is only checked to be a byte string, and left undecoded
    (`record` None, `samples` 0): the caller checks it (`tunecache.exchange.checking`).
    """
    where = f"entry {i}"
    wire = _map(obj, _ENTRY_KEYS, where)
    text = _text(wire["key"], where, "key", max_len=4096)
    try:
        key = parse(text)  # only a key's canonical text parses: key.text == text
    except TunecacheError as error:
        raise fail(f"{where}: {error}") from None
    where = f"entry {i} ({short(text)})"
    signature, sum_, names = sets[_index(wire["set"], len(sets), where, "set")]
    if signature != key.signature:
        raise fail(f"{where}: its candidate set is for signature {short(signature)}")
    choice = _text(wire["choice"], where, "choice")
    if choice not in names:
        raise fail(f"{where}: choice {short(choice)} is not one of its candidates")
    heuristic = wire["heuristic"]
    if heuristic is not None and heuristic not in names:
        raise fail(f"{where}: heuristic {short(heuristic)} is not one of its candidates")
    status = wire["status"]
    if status not in ENTRY_STATUSES:
        raise fail(f"{where}: status {short(status)} is not one of {ENTRY_STATUSES}")
    blob = wire["record"]
    record = None
    if blob is not None and not isinstance(blob, bytes):
        raise fail(f"{where} record is {kind(blob)}, not a byte string")
    if blob is not None and records:
        try:
            record = codec.decode(blob)
        except CodecError as error:
            raise fail(f"{where}: {error}") from None
        if any(c.name not in names for c in record.candidates):
            raise fail(f"{where}: its timing record names unknown candidates")
    items = _list(wire["validations"], where, "validations")
    verdicts = _verdicts(items, where, models) if items else ()
    return ExportedEntry(
        key=text,
        signature=signature,
        checksum=sum_,
        names=names,
        choice=choice,
        heuristic=heuristic,
        status=status,
        speedup=_positive(wire["speedup"], where, "speedup"),
        created_at=_when(wire["created_at"], where, "created_at"),
        updated_at=_when(wire["updated_at"], where, "updated_at"),
        blob=blob,
        samples=0 if record is None else sum(len(c.samples) for c in record.candidates),
        verdicts=verdicts,
        record=record,
        parsed=key,
    )


def _verdicts(
    items: list[Any], where: str, models: list[tuple[str, str]]
) -> tuple[ExportedVerdict, ...]:
    """An entry's verdicts, checked, one per model, in model order."""
    verdicts = []
    seen: set[int] = set()
    for j, vobj in enumerate(items):
        vwhere = f"{where} verdict {j}"
        v = _map(vobj, _VALIDATION_KEYS, vwhere)
        model = _index(v["model"], len(models), vwhere, "model")
        if model in seen:
            raise fail(f"{vwhere}: a second verdict of the same model")
        seen.add(model)
        if v["verdict"] not in VERDICTS:
            raise fail(f"{vwhere}: verdict {short(v['verdict'])} is not one of {VERDICTS}")
        rounds = _count(v["rounds"], vwhere, "rounds")
        confirmations = _count(v["confirmations"], vwhere, "confirmations")
        if confirmations > rounds:
            raise fail(f"{vwhere}: confirmations exceed rounds")
        verdicts.append(
            ExportedVerdict(
                *models[model],
                v["verdict"],
                _positive(v["gain"], vwhere, "gain"),
                rounds,
                confirmations,
                _when(v["created_at"], vwhere, "created_at"),
                _when(v["updated_at"], vwhere, "updated_at"),
            )
        )
    verdicts.sort(key=lambda v: (v.model, v.fingerprint))
    return tuple(verdicts)


# --- version 1: one map, read whole ------------------------------------------------------------


class Document(NamedTuple):
    """A decoded, fully checked version 1 export."""

    tool: str
    exported_at: datetime
    device: Device
    entries: tuple[ExportedEntry, ...]


def decode_document(
    data: bytes | bytearray | memoryview, max_size: int, max_depth: int, max_items: int
) -> Document:
    """Decode and check a version 1 export from untrusted bytes, raising CodecError for
    anything else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise fail(f"expected bytes, got {type(data).__name__}")
    raw = bytes(data)
    if raw.startswith(SQLITE_HEADER):
        raise fail("this is an SQLite database, not an export (merge accepts a database)")
    obj = _cbor.decode_bounded(
        raw, max_size=max_size, max_depth=max_depth, max_items=max_items, prefix=PREFIX
    )
    top, version = _version(obj)
    if version != 1:
        raise fail(f"a version {version} export is a stream of items, not one map")
    top = _map(top, _V1_KEYS, "the document")
    tool, exported_at, device = _source(top)
    sets = []
    seen_sets: set[tuple[str, str]] = set()
    for i, wire in enumerate(_list(top["candidate_sets"], "'candidate_sets'")):
        found = read_set(wire, i)
        if found[:2] in seen_sets:
            raise fail(f"candidate set {i} appears twice")
        seen_sets.add(found[:2])
        sets.append(found)
    models = []
    seen_models: set[tuple[str, str]] = set()  # a set: a list would make a hostile file quadratic
    for i, wire in enumerate(_list(top["models"], "'models'")):
        model = read_model(wire, i)
        if model in seen_models:
            raise fail(f"model {i} appears twice")
        seen_models.add(model)
        models.append(model)
    seen: set[tuple[str, str]] = set()
    entries = []
    for i, wire in enumerate(_list(top["entries"], "'entries'")):
        entry = read_entry(wire, i, sets, models)
        if entry.ident in seen:
            raise fail(f"entry {i}: {entry.key} appears twice for one candidate set")
        seen.add(entry.ident)
        entries.append(entry)
    return Document(tool, exported_at, device, tuple(entries))
