"""The export document: one versioned CBOR map of a device's entries with their evidence.

`document` builds it from entries; `decode_document` reads it back from untrusted bytes, checking
every field against the format before anything uses it (bounded by `tunecache._cbor`), so a bad
file is refused with one line that says where it is wrong.
"""

# Format versions of the export document (the "v" key):
#
# - version 1 (tunecache 0.1): first format.
#
# A reader refuses any version newer than FORMAT_VERSION, and every map has a fixed set of keys:
# a writer that adds a field bumps the version, so an old reader says "newer tunecache" instead
# of silently dropping what it does not understand (the codec's rule for timing records).

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import cbor2

from tunecache import _cbor, codec
from tunecache._cbor import kind, short
from tunecache._version import __version__
from tunecache.candidates import candidate_names, checksum
from tunecache.checks import is_int, is_real
from tunecache.device import Device
from tunecache.errors import CodecError, TunecacheError
from tunecache.keys import parse
from tunecache.store.models import ENTRY_STATUSES, VERDICTS
from tunecache.store.queries import VerdictFacts

if TYPE_CHECKING:
    from tunecache.cache import Progress

__all__ = [
    # the document
    "Document",
    "ExportedEntry",
    "ExportedVerdict",
    "decode_document",
    "document",
    "iso",
    # its format and limits
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
FORMAT_VERSION = 1
# The defaults bound what a hostile file can cost (the pre-scan walks about 2.5 million items a
# second; cbor2 then builds them) while leaving room for ~200,000 entries with their records.
#: default limit on the size of an export to decode, in bytes
MAX_SIZE = 512 * 1024 * 1024
#: default limit on nesting (a valid v1 document nests 5 deep; timing records are byte strings)
MAX_DEPTH = 8
#: default limit on the number of CBOR items (a v1 entry takes about 25, a verdict about 15)
MAX_ITEMS = 5_000_000
#: what every message about a bad export file starts with
PREFIX = "export file: "
#: the first bytes of every SQLite database file
SQLITE_HEADER = b"SQLite format 3\x00"
_TOP_KEYS = frozenset(
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
    record: codec.TimingRecord | None = None

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


# --- writing an export ----------------------------------------------------------------------


def iso(value: datetime) -> str:
    """A time as the format writes it: ISO 8601 in UTC."""
    return value.astimezone(UTC).isoformat()


def document(
    device: Device,
    entries: Sequence[ExportedEntry],
    *,
    exported_at: datetime,
    progress: Progress | None = None,
) -> bytes:
    """The export document of `device`'s entries, as canonical CBOR.

    Each timing record is decoded on the way out: an export that its own importer would refuse
    is an error now (run `tunecache doctor --repair`), not a surprise on another machine; and
    so is a document over the default import limits.
    """
    sets = sorted({(e.signature, e.checksum): e.names for e in entries}.items())
    set_index = {ident: i for i, (ident, _) in enumerate(sets)}
    models = sorted({(v.model, v.fingerprint) for e in entries for v in e.verdicts})
    model_index = {m: i for i, m in enumerate(models)}
    wire_entries = []
    for done, e in enumerate(entries):
        if progress is not None and done % 256 == 0:
            progress("export", done, len(entries))
        if e.blob is not None:
            try:
                codec.decode(e.blob)
            except CodecError as error:
                raise CodecError(
                    f"the timing record of {e.key} cannot be exported ({error}); "
                    "`tunecache doctor --repair` removes unreadable records"
                ) from error
        wire_entries.append(_wire_entry(e, set_index[(e.signature, e.checksum)], model_index))
    if progress is not None:
        progress("export", len(entries), len(entries))
    doc = {
        "format": FORMAT,
        "v": FORMAT_VERSION,
        "tool": __version__,
        "exported_at": iso(exported_at),
        "device": device.as_dict(),
        "fingerprint": device.fingerprint,
        "candidate_sets": [
            {"signature": sig, "checksum": sum_, "names": list(names)}
            for (sig, sum_), names in sets
        ],
        "models": [{"name": name, "fingerprint": fp} for name, fp in models],
        "entries": wire_entries,
    }
    data: bytes = cbor2.dumps(doc, canonical=True)
    # Never write what the default importer would refuse to read back.
    try:
        _cbor.check_bounds(
            data, max_size=MAX_SIZE, max_depth=MAX_DEPTH, max_items=MAX_ITEMS, prefix=""
        )
    except CodecError as error:
        raise CodecError(
            f"this cache is too large for one export file ({error}); prune it first"
        ) from None
    return data


def _wire_entry(
    e: ExportedEntry, set_index: int, model_index: dict[tuple[str, str], int]
) -> dict[str, Any]:
    """One entry as the document carries it: its candidate set and models by their index."""
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


# --- decoding an export ----------------------------------------------------------------------


class Document(NamedTuple):
    """A decoded, fully checked export."""

    tool: str
    exported_at: datetime
    device: Device
    entries: tuple[ExportedEntry, ...]


def _fail(message: str) -> CodecError:
    return CodecError(PREFIX + message)


def decode_document(
    data: bytes | bytearray | memoryview, max_size: int, max_depth: int, max_items: int
) -> Document:
    """Decode and check an export from untrusted bytes, raising CodecError for anything else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise _fail(f"expected bytes, got {type(data).__name__}")
    raw = bytes(data)
    if raw.startswith(SQLITE_HEADER):
        raise _fail("this is an SQLite database, not an export (merge accepts a database)")
    obj = _cbor.decode_bounded(
        raw, max_size=max_size, max_depth=max_depth, max_items=max_items, prefix=PREFIX
    )
    return _from_wire(obj)


def _map(obj: object, keys: frozenset[str], where: str) -> dict[str, Any]:
    """The object as a map with exactly `keys`, else CodecError."""
    if not isinstance(obj, dict):
        raise _fail(f"{where} is {kind(obj)}, not a map")
    _cbor.check_keys(obj, keys, f"{PREFIX}{where}: ")
    return cast(dict[str, Any], obj)


def _list(obj: object, where: str) -> list[Any]:
    if not isinstance(obj, list):
        raise _fail(f"{where} is {kind(obj)}, not an array")
    return obj


def _text(obj: object, where: str, *, empty: bool = False, max_len: int = _MAX_TEXT) -> str:
    if not isinstance(obj, str):
        raise _fail(f"{where} is {kind(obj)}, not text")
    if not obj and not empty:
        raise _fail(f"{where} is empty")
    if len(obj) > max_len:
        raise _fail(f"{where} is longer than {max_len} characters")
    return obj


def _when(obj: object, where: str) -> datetime:
    text = _text(obj, where, max_len=64)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise _fail(f"{where} {short(text)} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise _fail(f"{where} {short(text)} has no time zone")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01 in a zone east of UTC falls before year 1
        raise _fail(f"{where} {short(text)} is out of range") from None


def _positive(obj: object, where: str) -> float | None:
    if obj is None:
        return None
    if not is_real(obj):
        raise _fail(f"{where} is {kind(obj)}, not a number")
    if not math.isfinite(obj) or obj <= 0:
        raise _fail(f"{where} must be a finite positive number, got {obj!r}")
    return float(obj)


def _count(obj: object, where: str) -> int:
    if not is_int(obj) or not 0 <= obj <= _MAX_COUNT:
        raise _fail(f"{where} must be a non-negative integer, got {short(obj)}")
    return obj


def _index(obj: object, size: int, where: str) -> int:
    if not is_int(obj) or not 0 <= obj < size:
        raise _fail(f"{where} {short(obj)} names nothing in the file")
    return obj


def _from_wire(obj: object) -> Document:
    """Check a decoded export against the v1 schema and build its entries."""
    if not isinstance(obj, dict):
        raise _fail(f"top level is {kind(obj)}, not a map")
    # The format and version come first, so a newer export is reported as newer, not as bad.
    if obj.get("format") != FORMAT:
        raise _fail("not a tunecache export (no 'format': 'tunecache-export')")
    version = obj.get("v")
    if not is_int(version) or version < 1:
        raise _fail(f"invalid format version {short(version)}")
    if version > FORMAT_VERSION:
        raise _fail(
            f"format version {version} is newer than this tunecache reads ({FORMAT_VERSION}); "
            "upgrade tunecache to import it"
        )
    top = _map(obj, _TOP_KEYS, "the document")
    tool = _text(top["tool"], "'tool'", max_len=64)
    exported_at = _when(top["exported_at"], "'exported_at'")
    device = _device(top["device"])
    if top["fingerprint"] != device.fingerprint:
        raise _fail("'fingerprint' does not match the device fields")
    sets = _sets(_list(top["candidate_sets"], "'candidate_sets'"))
    models = _models(_list(top["models"], "'models'"))
    seen: set[tuple[str, str]] = set()
    entries = []
    for i, wire in enumerate(_list(top["entries"], "'entries'")):
        entry = _entry(wire, i, sets, models)
        if entry.ident in seen:
            raise _fail(f"entry {i}: {entry.key} appears twice for one candidate set")
        seen.add(entry.ident)
        entries.append(entry)
    return Document(tool, exported_at, device, tuple(entries))


def _device(obj: object) -> Device:
    wire = _map(obj, _DEVICE_KEYS, "'device'")
    try:
        return Device(**wire)
    except TunecacheError as error:
        raise _fail(f"'device': {error}") from None


def _sets(items: list[Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    out = []
    seen: set[tuple[str, str]] = set()
    for i, obj in enumerate(items):
        where = f"candidate set {i}"
        wire = _map(obj, _SET_KEYS, where)
        signature = _text(wire["signature"], f"{where} signature", max_len=4096)
        raw_names = _list(wire["names"], f"{where} names")
        try:
            names = candidate_names(raw_names)
        except TunecacheError as error:
            raise _fail(f"{where}: {error}") from None
        if wire["checksum"] != checksum(names):
            raise _fail(f"{where}: checksum does not match its names")
        if (signature, wire["checksum"]) in seen:
            raise _fail(f"{where} appears twice")
        seen.add((signature, wire["checksum"]))
        out.append((signature, wire["checksum"], names))
    return out


def _models(items: list[Any]) -> list[tuple[str, str]]:
    out = []
    seen: set[tuple[str, str]] = set()  # a set: a list would make a hostile file quadratic
    for i, obj in enumerate(items):
        wire = _map(obj, _MODEL_KEYS, f"model {i}")
        model = (
            _text(wire["name"], f"model {i} name"),
            _text(wire["fingerprint"], f"model {i} fingerprint", empty=True),
        )
        if model in seen:
            raise _fail(f"model {i} appears twice")
        seen.add(model)
        out.append(model)
    return out


def _entry(
    obj: object,
    i: int,
    sets: list[tuple[str, str, tuple[str, ...]]],
    models: list[tuple[str, str]],
) -> ExportedEntry:
    where = f"entry {i}"
    wire = _map(obj, _ENTRY_KEYS, where)
    try:
        key = parse(_text(wire["key"], f"{where} key", max_len=4096))
    except TunecacheError as error:
        raise _fail(f"{where}: {error}") from None
    where = f"entry {i} ({short(key.text)})"
    signature, sum_, names = sets[_index(wire["set"], len(sets), f"{where} set")]
    if signature != key.signature:
        raise _fail(f"{where}: its candidate set is for signature {short(signature)}")
    choice = _text(wire["choice"], f"{where} choice")
    if choice not in names:
        raise _fail(f"{where}: choice {short(choice)} is not one of its candidates")
    heuristic = wire["heuristic"]
    if heuristic is not None and heuristic not in names:
        raise _fail(f"{where}: heuristic {short(heuristic)} is not one of its candidates")
    status = wire["status"]
    if status not in ENTRY_STATUSES:
        raise _fail(f"{where}: status {short(status)} is not one of {ENTRY_STATUSES}")
    blob = wire["record"]
    record = None
    if blob is not None:
        if not isinstance(blob, bytes):
            raise _fail(f"{where} record is {kind(blob)}, not a byte string")
        try:
            record = codec.decode(blob)
        except CodecError as error:
            raise _fail(f"{where}: {error}") from None
        unknown = [c.name for c in record.candidates if c.name not in names]
        if unknown:
            raise _fail(f"{where}: its timing record names unknown candidates")
        # Stored canonically, so an export of the import is byte-equal to the file's record.
        blob = codec.encode(record)
    verdicts = _verdicts(_list(wire["validations"], f"{where} validations"), where, models)
    return ExportedEntry(
        key=key.text,
        signature=signature,
        checksum=sum_,
        names=names,
        choice=choice,
        heuristic=heuristic,
        status=status,
        speedup=_positive(wire["speedup"], f"{where} speedup"),
        created_at=_when(wire["created_at"], f"{where} created_at"),
        updated_at=_when(wire["updated_at"], f"{where} updated_at"),
        blob=blob,
        samples=0 if record is None else sum(len(c.samples) for c in record.candidates),
        verdicts=verdicts,
        record=record,
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
        model = _index(v["model"], len(models), f"{vwhere} model")
        if model in seen:
            raise _fail(f"{vwhere}: a second verdict of the same model")
        seen.add(model)
        if v["verdict"] not in VERDICTS:
            raise _fail(f"{vwhere}: verdict {short(v['verdict'])} is not one of {VERDICTS}")
        rounds = _count(v["rounds"], f"{vwhere} rounds")
        confirmations = _count(v["confirmations"], f"{vwhere} confirmations")
        if confirmations > rounds:
            raise _fail(f"{vwhere}: confirmations exceed rounds")
        verdicts.append(
            ExportedVerdict(
                *models[model],
                v["verdict"],
                _positive(v["gain"], f"{vwhere} gain"),
                rounds,
                confirmations,
                _when(v["created_at"], f"{vwhere} created_at"),
                _when(v["updated_at"], f"{vwhere} updated_at"),
            )
        )
    verdicts.sort(key=lambda v: (v.model, v.fingerprint))
    return tuple(verdicts)
