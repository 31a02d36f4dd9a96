"""Export, import and merge a device's cache as bytes: one versioned CBOR document.

The API takes and returns bytes, never paths, so an embedded or browser build can move a cache
without a filesystem. An import is all-or-nothing: the whole document is decoded and checked
before one write transaction applies it, so a bad file leaves the cache exactly as it was.
"""

# Format versions of the export document (the "v" key):
#
# - version 1 (tunecache 0.1): first format.
#
# A reader refuses any version newer than FORMAT_VERSION, and every map has a fixed set of keys:
# a writer that adds a field bumps the version, so an old reader says "newer tunecache" instead
# of silently dropping what it does not understand (the codec's rule for timing records).

from __future__ import annotations

import hashlib
import math
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import cbor2
from sqlalchemy import Connection, delete, insert, select, update

from tunecache import codec
from tunecache._version import __version__
from tunecache.cache import Cache, _insert
from tunecache.candidates import candidate_names, checksum
from tunecache.device import Device
from tunecache.errors import (
    BadArgumentError,
    CodecError,
    DeviceMismatchError,
    StoreError,
    TunecacheError,
)
from tunecache.keys import parse
from tunecache.store import migrate
from tunecache.store.engine import make_engine
from tunecache.store.models import (
    CANDIDATE_SETS,
    DEVICES,
    ENTRIES,
    ENTRY_STATUSES,
    KEYS,
    MODELS,
    TIMING_RECORDS,
    VALIDATIONS,
    VERDICTS,
    utcnow,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_SIZE",
    "POLICIES",
    "EntryAction",
    "ImportReport",
    "Progress",
    "evidence",
    "export_cache",
    "import_cache",
    "merge",
    "open_source",
    "origin_device",
]

# Short names for the Core tables these statements are built from.
_S, _D, _E, _K, _M, _T, _V = (
    CANDIDATE_SETS,
    DEVICES,
    ENTRIES,
    KEYS,
    MODELS,
    TIMING_RECORDS,
    VALIDATIONS,
)

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
#: conflict policies: keep the local entry, keep the one with stronger evidence, keep both
POLICIES = ("local", "evidence", "both")

#: a progress callback: (what is being done, how much is done, out of how much)
Progress = Callable[[str, int, int], None]

_PREFIX = "export file: "
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
class _Verdict:
    """A model's verdict on an entry, with the model named rather than numbered."""

    model: str
    fingerprint: str
    verdict: str
    gain: float | None
    rounds: int
    confirmations: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class _Entry:
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
    verdicts: tuple[_Verdict, ...]
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


def evidence(validated: int, rounds: int, samples: int) -> tuple[int, int, int]:
    """How strong an entry's evidence is, compared as a tuple: larger is stronger.

    First the number of models that validated it (whole-model confirmations are what the
    design trusts), then the paired whole-model rounds behind all its verdicts, then the raw
    samples in its timing record. Newer is not stronger: a fresh measurement with fewer
    samples does not beat an older, better-supported one.
    """
    return (validated, rounds, samples)


def _evidence_of(entry: _Entry) -> tuple[int, int, int]:
    return evidence(
        sum(1 for v in entry.verdicts if v.verdict == "validated"),
        sum(v.rounds for v in entry.verdicts),
        entry.samples,
    )


# --- reports ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryAction:
    """What an import did with one entry of the file.

    `action` is one of: "added" (new here), "unchanged" (the same measurement and verdicts were
    already here), "kept-local" (a different local entry stayed, the file's was dropped),
    "replaced" (the file's entry had stronger evidence and took the local one's place),
    "kept-both" (the local entry stayed and the file's was kept beside it under its origin).
    """

    key: str
    checksum: str
    action: str

    def as_dict(self) -> dict[str, str]:
        """The action as JSON-ready values."""
        return {"key": self.key, "checksum": self.checksum, "action": self.action}


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import or merge did, entry by entry."""

    kind: str
    policy: str
    source_device: Mapping[str, str | int | None]
    source_fingerprint: str
    exported_at: datetime
    tool: str
    #: True when the file came from another device identity (entries arrive unvalidated)
    other_device: bool
    #: the `runs` row that logs this import, or None when nothing changed
    run_id: int | None
    #: the device row that holds the file's entries kept beside local ones ("both"), or None
    origin_device: str | None
    actions: tuple[EntryAction, ...] = ()
    #: verdict rows written
    verdicts: int = 0

    @property
    def counts(self) -> dict[str, int]:
        """How many entries took each action, every action named even at zero."""
        out = dict.fromkeys(("added", "unchanged", "kept-local", "replaced", "kept-both"), 0)
        for a in self.actions:
            out[a.action] += 1
        return out

    @property
    def changed(self) -> bool:
        """Whether the import wrote anything."""
        return self.run_id is not None

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (the `--json` schema of import and merge)."""
        return {
            "kind": self.kind,
            "policy": self.policy,
            "source_device": dict(self.source_device),
            "source_fingerprint": self.source_fingerprint,
            "exported_at": self.exported_at.isoformat(),
            "tool": self.tool,
            "other_device": self.other_device,
            "run_id": self.run_id,
            "origin_device": self.origin_device,
            "counts": self.counts,
            "verdicts": self.verdicts,
            "entries": [a.as_dict() for a in self.actions],
        }


# --- export ----------------------------------------------------------------------------------


def _time(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _read_entries(conn: Connection, device_id: int) -> list[tuple[int, _Entry]]:
    """Every entry of one device, by id, with its candidate set, record and verdicts, in key
    order."""
    rows = conn.execute(
        select(
            _E.c.id,
            _K.c.text,
            _K.c.signature,
            _S.c.id.label("set_id"),
            _S.c.checksum,
            _E.c.choice,
            _E.c.heuristic,
            _E.c.status,
            _E.c.speedup,
            _E.c.created_at,
            _E.c.updated_at,
            _T.c.data,
            _T.c.samples_count,
        )
        .join(_K, _K.c.id == _E.c.key_id)
        .join(_S, _S.c.id == _E.c.candidate_set_id)
        .outerjoin(_T, _T.c.entry_id == _E.c.id)
        .where(_E.c.device_id == device_id)
        .order_by(_K.c.text, _S.c.checksum)
    ).all()
    names = Cache._set_names(conn, {row.set_id for row in rows})
    verdicts: dict[int, list[_Verdict]] = {}
    for v in conn.execute(
        select(
            _V.c.entry_id,
            _M.c.name,
            _M.c.fingerprint,
            _V.c.verdict,
            _V.c.gain,
            _V.c.rounds,
            _V.c.confirmations,
            _V.c.created_at,
            _V.c.updated_at,
        )
        .join(_M, _M.c.id == _V.c.model_id)
        .join(_E, _E.c.id == _V.c.entry_id)
        .where(_E.c.device_id == device_id)
        .order_by(_V.c.entry_id, _M.c.name, _M.c.fingerprint)
    ):
        verdicts.setdefault(v.entry_id, []).append(
            _Verdict(
                v.name,
                v.fingerprint,
                v.verdict,
                v.gain,
                v.rounds,
                v.confirmations,
                v.created_at,
                v.updated_at,
            )
        )
    return [
        (
            row.id,
            _Entry(
                key=row.text,
                signature=row.signature,
                checksum=row.checksum,
                names=names[row.set_id],
                choice=row.choice,
                heuristic=row.heuristic,
                status=row.status,
                speedup=row.speedup,
                created_at=row.created_at,
                updated_at=row.updated_at,
                blob=None if row.data is None else bytes(row.data),
                samples=row.samples_count or 0,
                verdicts=tuple(verdicts.get(row.id, ())),
            ),
        )
        for row in rows
    ]


def export_cache(cache: Cache, *, progress: Progress | None = None) -> bytes:
    """Every entry of this cache's device, with its evidence, as one export document.

    Each timing record is decoded on the way out: an export that its own importer would refuse
    is an error now (run `tunecache doctor --repair`), not a surprise on another machine.
    """
    with cache._read() as conn:
        device_id = cache._find_device_id(conn)
        entries = [] if device_id is None else [e for _, e in _read_entries(conn, device_id)]
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
        wire_entries.append(
            {
                "key": e.key,
                "set": set_index[(e.signature, e.checksum)],
                "choice": e.choice,
                "heuristic": e.heuristic,
                "status": e.status,
                "speedup": e.speedup,
                "created_at": _time(e.created_at),
                "updated_at": _time(e.updated_at),
                "record": e.blob,
                "validations": [
                    {
                        "model": model_index[(v.model, v.fingerprint)],
                        "verdict": v.verdict,
                        "gain": v.gain,
                        "rounds": v.rounds,
                        "confirmations": v.confirmations,
                        "created_at": _time(v.created_at),
                        "updated_at": _time(v.updated_at),
                    }
                    for v in e.verdicts
                ],
            }
        )
    if progress is not None:
        progress("export", len(entries), len(entries))
    doc = {
        "format": FORMAT,
        "v": FORMAT_VERSION,
        "tool": __version__,
        "exported_at": _time(utcnow()),
        "device": cache.device.as_dict(),
        "fingerprint": cache.device.fingerprint,
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
        _check_bounds(data, MAX_SIZE, MAX_DEPTH, MAX_ITEMS)
    except CodecError as error:
        raise CodecError(
            f"this cache is too large for one export file ({str(error).removeprefix(_PREFIX)}); "
            "prune it first"
        ) from None
    return data


# --- decoding an export ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Document:
    """A decoded, fully checked export."""

    tool: str
    exported_at: datetime
    device: Device
    entries: tuple[_Entry, ...]


def _fail(message: str) -> CodecError:
    return CodecError(_PREFIX + message)


def _check_bounds(data: bytes, max_size: int, max_depth: int, max_items: int) -> None:
    """Refuse bytes over the size limit, or whose CBOR headers break the item limits."""
    if len(data) > max_size:
        raise _fail(f"{len(data)} bytes exceed the limit of {max_size}")
    if not data:
        raise _fail("empty input")
    try:
        # The codec's bounded pre-scan walks item headers without building anything, so
        # declared lengths, depth, tags and indefinite items are refused before cbor2 allocates.
        codec._prescan(data, max_depth, max_items)
    except CodecError as error:
        raise _fail(str(error).removeprefix("timing record: ")) from None


def _decode_document(
    data: bytes | bytearray | memoryview, max_size: int, max_depth: int, max_items: int
) -> _Document:
    """Decode and check an export from untrusted bytes, raising CodecError for anything else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise _fail(f"expected bytes, got {type(data).__name__}")
    raw = bytes(data)
    if raw.startswith(SQLITE_HEADER):
        raise _fail("this is an SQLite database, not an export (merge accepts a database)")
    _check_bounds(raw, max_size, max_depth, max_items)
    try:
        obj = cbor2.loads(
            raw,
            max_depth=max_depth,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            strict_hashable_types=True,
        )
    except Exception as error:  # whatever cbor2 raises, the bytes are not an export
        raise _fail(f"invalid CBOR: {codec._one_line(error)}") from error
    return _from_wire(obj)


def _map(obj: object, keys: frozenset[str], where: str) -> dict[str, Any]:
    """The object as a map with exactly `keys`, else CodecError."""
    if not isinstance(obj, dict):
        raise _fail(f"{where} is {codec._kind(obj)}, not a map")
    missing = keys.difference(obj)
    if missing:
        raise _fail(f"{where}: missing key {sorted(missing)[0]!r}")
    unknown = [k for k in obj if k not in keys]
    if unknown:
        raise _fail(f"{where}: unknown key {codec._short(unknown[0])}")
    return cast(dict[str, Any], obj)


def _list(obj: object, where: str) -> list[Any]:
    if not isinstance(obj, list):
        raise _fail(f"{where} is {codec._kind(obj)}, not an array")
    return obj


def _text(obj: object, where: str, *, empty: bool = False, max_len: int = _MAX_TEXT) -> str:
    if not isinstance(obj, str):
        raise _fail(f"{where} is {codec._kind(obj)}, not text")
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
        raise _fail(f"{where} {codec._short(text)} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise _fail(f"{where} {codec._short(text)} has no time zone")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01 in a zone east of UTC falls before year 1
        raise _fail(f"{where} {codec._short(text)} is out of range") from None


def _positive(obj: object, where: str) -> float | None:
    if obj is None:
        return None
    if isinstance(obj, bool) or not isinstance(obj, int | float):
        raise _fail(f"{where} is {codec._kind(obj)}, not a number")
    if not math.isfinite(obj) or obj <= 0:
        raise _fail(f"{where} must be a finite positive number, got {obj!r}")
    return float(obj)


def _count(obj: object, where: str) -> int:
    if isinstance(obj, bool) or not isinstance(obj, int) or not 0 <= obj <= _MAX_COUNT:
        raise _fail(f"{where} must be a non-negative integer, got {codec._short(obj)}")
    return obj


def _index(obj: object, size: int, where: str) -> int:
    if isinstance(obj, bool) or not isinstance(obj, int) or not 0 <= obj < size:
        raise _fail(f"{where} {codec._short(obj)} names nothing in the file")
    return obj


def _from_wire(obj: object) -> _Document:
    """Check a decoded export against the v1 schema and build its entries."""
    if not isinstance(obj, dict):
        raise _fail(f"top level is {codec._kind(obj)}, not a map")
    # The format and version come first, so a newer export is reported as newer, not as bad.
    if obj.get("format") != FORMAT:
        raise _fail("not a tunecache export (no 'format': 'tunecache-export')")
    version = obj.get("v")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _fail(f"invalid format version {codec._short(version)}")
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
    return _Document(tool, exported_at, device, tuple(entries))


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
) -> _Entry:
    where = f"entry {i}"
    wire = _map(obj, _ENTRY_KEYS, where)
    try:
        key = parse(_text(wire["key"], f"{where} key", max_len=4096))
    except TunecacheError as error:
        raise _fail(f"{where}: {error}") from None
    where = f"entry {i} ({codec._short(key.text)})"
    signature, sum_, names = sets[_index(wire["set"], len(sets), f"{where} set")]
    if signature != key.signature:
        raise _fail(f"{where}: its candidate set is for signature {codec._short(signature)}")
    choice = _text(wire["choice"], f"{where} choice")
    if choice not in names:
        raise _fail(f"{where}: choice {codec._short(choice)} is not one of its candidates")
    heuristic = wire["heuristic"]
    if heuristic is not None and heuristic not in names:
        raise _fail(f"{where}: heuristic {codec._short(heuristic)} is not one of its candidates")
    status = wire["status"]
    if status not in ENTRY_STATUSES:
        raise _fail(f"{where}: status {codec._short(status)} is not one of {ENTRY_STATUSES}")
    blob = wire["record"]
    record = None
    if blob is not None:
        if not isinstance(blob, bytes):
            raise _fail(f"{where} record is {codec._kind(blob)}, not a byte string")
        try:
            record = codec.decode(blob)
        except CodecError as error:
            raise _fail(f"{where}: {error}") from None
        unknown = [c.name for c in record.candidates if c.name not in names]
        if unknown:
            raise _fail(f"{where}: its timing record names unknown candidates")
        # Stored canonically, so an export of the import is byte-equal to the file's record.
        blob = codec.encode(record)
    verdicts = []
    seen: set[int] = set()
    for j, vobj in enumerate(_list(wire["validations"], f"{where} validations")):
        vwhere = f"{where} verdict {j}"
        v = _map(vobj, _VALIDATION_KEYS, vwhere)
        model = _index(v["model"], len(models), f"{vwhere} model")
        if model in seen:
            raise _fail(f"{vwhere}: a second verdict of the same model")
        seen.add(model)
        if v["verdict"] not in VERDICTS:
            raise _fail(f"{vwhere}: verdict {codec._short(v['verdict'])} is not one of {VERDICTS}")
        rounds = _count(v["rounds"], f"{vwhere} rounds")
        confirmations = _count(v["confirmations"], f"{vwhere} confirmations")
        if confirmations > rounds:
            raise _fail(f"{vwhere}: confirmations exceed rounds")
        verdicts.append(
            _Verdict(
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
    return _Entry(
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
        verdicts=tuple(verdicts),
        record=record,
    )


# --- import ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Plan:
    """The actions an import decided on, before it writes any of them."""

    actions: list[EntryAction] = field(default_factory=list)
    #: entries to write on the local device, with the local entry's id they replace, if any
    local: list[tuple[_Entry, int | None]] = field(default_factory=list)
    #: entries to keep beside a local one, under the origin device
    aside: list[_Entry] = field(default_factory=list)


def origin_device(source: Device, origin: str) -> Device:
    """The device row that holds a source's entries kept beside local ones (policy "both").

    It is the source's own identity with `+origin.<tag>` added to its client version, the tag
    naming the source device and `origin` (a path, or the export's time): a different
    identity, so the resolver of a real device never reads it, while merging the same source
    again updates the same rows instead of piling up copies.
    """
    tag = hashlib.sha256(f"{source.fingerprint}\n{origin}".encode()).hexdigest()[:8]
    suffix = ("." if "+" in source.client_version else "+") + f"origin.{tag}"
    return replace(source, client_version=source.client_version[: 64 - len(suffix)] + suffix)


def _plan(
    incoming: Iterable[_Entry], local: Mapping[tuple[str, str], tuple[int, _Entry]], policy: str
) -> _Plan:
    plan = _Plan()
    for entry in incoming:
        found = local.get(entry.ident)
        if found is None:
            action = "added"
            plan.local.append((entry, None))
        elif found[1].content() == entry.content():
            action = "unchanged"
        elif policy == "evidence" and _evidence_of(entry) > _evidence_of(found[1]):
            action = "replaced"
            plan.local.append((entry, found[0]))
        elif policy == "both":
            action = "kept-both"
            plan.aside.append(entry)
        else:
            action = "kept-local"
        plan.actions.append(EntryAction(entry.key, entry.checksum, action))
    return plan


def _device_row(conn: Connection, device: Device) -> int:
    found = conn.execute(select(_D.c.id).where(_D.c.fingerprint == device.fingerprint)).scalar()
    if found is not None:
        return int(found)
    return _insert(
        conn, _D, fingerprint=device.fingerprint, created_at=utcnow(), **device.as_dict()
    )


class _Writer:
    """Writes planned entries inside one transaction, remembering the model rows it made."""

    def __init__(self, conn: Connection, run_id: int) -> None:
        self.conn = conn
        self.run_id = run_id
        self.verdicts = 0
        self._models: dict[tuple[str, str], int] = {}

    def _model(self, name: str, fingerprint: str) -> int:
        found = self._models.get((name, fingerprint))
        if found is None:
            found = self.conn.execute(
                select(_M.c.id).where(_M.c.name == name, _M.c.fingerprint == fingerprint)
            ).scalar()
            if found is None:
                found = _insert(
                    self.conn, _M, name=name, fingerprint=fingerprint, created_at=utcnow()
                )
            self._models[(name, fingerprint)] = found
        return int(found)

    def write(self, device_id: int, entry: _Entry, replaces: int | None) -> None:
        conn = self.conn
        values = {
            "choice": entry.choice,
            "heuristic": entry.heuristic,
            "status": entry.status,
            "speedup": entry.speedup,
            "run_id": self.run_id,
            "created_at": entry.created_at,
            "updated_at": entry.updated_at,
        }
        if replaces is None:
            # A row of this device may exist even if the plan saw none: an entry kept aside
            # from the same export before, under the same origin device.
            replaces = conn.execute(
                select(_E.c.id)
                .join(_K, _K.c.id == _E.c.key_id)
                .join(_S, _S.c.id == _E.c.candidate_set_id)
                .where(
                    _E.c.device_id == device_id,
                    _K.c.text == entry.key,
                    _S.c.signature == entry.signature,
                    _S.c.checksum == entry.checksum,
                )
            ).scalar()
        if replaces is None:
            entry_id = _insert(
                conn,
                _E,
                device_id=device_id,
                key_id=Cache._key_row(conn, parse(entry.key)),
                candidate_set_id=Cache._set_row(conn, entry.signature, entry.names, entry.checksum),
                **values,
            )
        else:
            entry_id = replaces
            conn.execute(update(_E).where(_E.c.id == entry_id).values(**values))
            conn.execute(delete(_T).where(_T.c.entry_id == entry_id))
            conn.execute(delete(_V).where(_V.c.entry_id == entry_id))
        if entry.record is not None and entry.blob is not None:
            Cache._insert_record(
                conn, entry_id, entry.record, entry.blob, entry.heuristic, entry.updated_at
            )
        for v in entry.verdicts:
            conn.execute(
                insert(_V).values(
                    model_id=self._model(v.model, v.fingerprint),
                    entry_id=entry_id,
                    verdict=v.verdict,
                    gain=v.gain,
                    rounds=v.rounds,
                    confirmations=v.confirmations,
                    run_id=self.run_id,
                    created_at=v.created_at,
                    updated_at=v.updated_at,
                )
            )
            self.verdicts += 1


def import_cache(
    cache: Cache,
    data: bytes,
    *,
    allow_other_device: bool = False,
    policy: str = "local",
    origin: str | None = None,
    kind: str = "import",
    progress: Progress | None = None,
    max_size: int = MAX_SIZE,
    max_depth: int = MAX_DEPTH,
    max_items: int = MAX_ITEMS,
) -> ImportReport:
    """Import an export into this cache, all or nothing, and say what happened to each entry.

    A file from another device identity is refused with DeviceMismatchError unless
    `allow_other_device`; then its entries arrive with status "unvalidated" and without the
    other device's verdicts, which say nothing about this one. Where the file and the cache
    both hold an entry for a key and candidate set, `policy` decides (see POLICIES and the
    `evidence` function). `origin` names the source in the `runs` row that logs the import.
    """
    if policy not in POLICIES:
        raise BadArgumentError(f"policy must be one of {POLICIES}, got {policy!r}")
    doc = _decode_document(data, max_size, max_depth, max_items)
    other = doc.device.fingerprint != cache.device.fingerprint
    if other and not allow_other_device:
        try:
            cache.device.require_same(doc.device, "the export file")
        except DeviceMismatchError as error:
            raise DeviceMismatchError(
                f"{error} (allow another device to import its entries as unvalidated)"
            ) from None
    incoming: Sequence[_Entry] = doc.entries
    if other:
        incoming = [replace(e, status="unvalidated", verdicts=()) for e in incoming]
    source = origin if origin is not None else f"an export made {_time(doc.exported_at)}"
    aside_device = origin_device(doc.device, source)
    report = ImportReport(
        kind=kind,
        policy=policy,
        source_device=doc.device.as_dict(),
        source_fingerprint=doc.device.fingerprint,
        exported_at=doc.exported_at,
        tool=doc.tool,
        other_device=other,
        run_id=None,
        origin_device=None,
    )
    with cache._write() as conn:
        device_id = cache._find_device_id(conn)
        local = [] if device_id is None else _read_entries(conn, device_id)
        plan = _plan(incoming, {e.ident: (i, e) for i, e in local}, policy)
        if not plan.local and not plan.aside:
            return replace(report, actions=tuple(plan.actions))
        notes = (
            f"{kind} from {source}: device {doc.device.dirname} {doc.device.client} "
            f"{doc.device.client_version} ({doc.device.fingerprint}), exported "
            f"{_time(doc.exported_at)} by tunecache {doc.tool}; policy {policy}"
        )
        run_id = cache._insert_run(conn, kind, notes, status="finished")
        writer = _Writer(conn, run_id)
        own = cache._device_row(conn)
        total = len(plan.local) + len(plan.aside)
        for done, (entry, replaces) in enumerate(plan.local):
            if progress is not None and done % 256 == 0:
                progress(kind, done, total)
            writer.write(own, entry, replaces)
        aside_id = _device_row(conn, aside_device) if plan.aside else None
        for entry in plan.aside:
            assert aside_id is not None
            writer.write(aside_id, entry, None)
        if progress is not None:
            progress(kind, total, total)
    return replace(
        report,
        run_id=run_id,
        origin_device=aside_device.fingerprint if plan.aside else None,
        actions=tuple(plan.actions),
        verdicts=writer.verdicts,
    )


# --- merge -----------------------------------------------------------------------------------


def merge(
    cache: Cache,
    source: Cache | bytes,
    *,
    policy: str = "local",
    allow_other_device: bool = False,
    origin: str | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Merge another cache, or an export's bytes, into this cache under a conflict policy.

    Merging a cache is importing its export: the same checks, the same all-or-nothing
    transaction, the same report.
    """
    if isinstance(source, Cache):
        if source.path.resolve() == cache.path.resolve():
            raise BadArgumentError(f"cannot merge {cache.path} into itself")
        origin = origin or str(source.path)
        data = export_cache(source, progress=progress)
    else:
        data = source
    return import_cache(
        cache,
        data,
        allow_other_device=allow_other_device,
        policy=policy,
        origin=origin,
        kind="merge",
        progress=progress,
    )


def open_source(path: str | Path, prefer: Device) -> Cache:
    """Open another cache database read-only, as the source of a merge, without changing it.

    Its entries are those of `prefer` if the file has that device, else of its only device.
    """
    db = Path(path).absolute()
    if not db.is_file():
        raise BadArgumentError(f"no cache database at {db}")
    uri = "file:" + urllib.parse.quote(str(db)) + "?mode=ro"
    try:
        state = migrate.inspect_file(db, 0.0)
        if state.revision != migrate.HEAD:
            raise StoreError(
                f"{db} is at schema revision {state.revision}, not {migrate.HEAD}: open it "
                "once with this tunecache (`tunecache where --db PATH`) to upgrade it first"
            )
        conn = sqlite3.connect(uri, uri=True)
        try:
            rows = conn.execute(
                "SELECT cpu, threads, accelerator, client, client_version FROM devices "
                "WHERE id IN (SELECT device_id FROM entries)"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as error:
        raise StoreError(f"cannot read {db}: {error}") from error
    devices = []
    for cpu, threads, accelerator, client, version in rows:
        try:
            devices.append(Device(cpu, threads, accelerator, client, version))
        except TunecacheError:
            continue  # a row no tunecache wrote; it has no entries to merge from anyway
    if prefer in devices:
        device = prefer
    elif len(devices) == 1:
        device = devices[0]
    else:
        found = ", ".join(sorted(d.dirname for d in devices)) or "none"
        raise BadArgumentError(
            f"{db} holds entries of several devices or none ({found}); export the one to "
            "merge with `tunecache export --db PATH` and its device options"
        )
    engine = make_engine(db, readonly=True)
    return Cache(db, device, engine, busy_timeout=0.0, outcome=None, readonly_reason="merge source")
