"""A version 2 export as a stream: items framed as CBOR byte strings, written one at a time and
read back one at a time, in bounded memory, each checked before the next is read.

`Writer` turns entries into encoded items (the header, each set and model before the first
entry that names it, the entries, the end); `frame` puts the byte-string head before one.
`read_export` reads an export from a binary stream, whichever its version: a version 1 map is
read whole (it cannot be read any other way), a version 2 stream through `Reader`, which takes
the items' bytes from any source (`frames` of a stream, or a `Writer` directly, which is how a
merge of a cache reads it) and checks every item, its place in the stream, and the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, BinaryIO, NamedTuple

import cbor2

from tunecache import _cbor
from tunecache._cbor import kind, short
from tunecache.checks import is_int
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.exchange.wire import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_SIZE,
    PREFIX,
    SQLITE_HEADER,
    ExportedEntry,
    Header,
    Set,
    decode_document,
    entry_item,
    fail,
    header_item,
    model_item,
    read_entry,
    read_header,
    read_model,
    read_set,
    set_item,
)

__all__ = [
    "ITEM_MAX_ITEMS",
    "ITEM_MAX_SIZE",
    "MAX_TABLES",
    "Export",
    "Reader",
    "Writer",
    "frame",
    "frames",
    "read_export",
    "read_from",
]

#: the largest item of a stream, in bytes: an entry with a timing record at the codec's own
#: limit (16 MiB) and its verdicts
ITEM_MAX_SIZE = 32 * 1024 * 1024
#: default limit on the CBOR items of one item of a stream (an entry takes about 25, and 15
#: more for each verdict; a set 8, and one more for each name)
ITEM_MAX_ITEMS = 200_000
#: the most bytes of set and model items one stream may declare: a reader keeps them all
MAX_TABLES = 16 * 1024 * 1024
# How much of a stream is read at once: small items are cut out of one block.
_BLOCK = 256 * 1024
_END_KEYS = frozenset({"entries", "candidate_sets", "models", "validations"})
_KINDS = ("set", "model", "entry", "end")


def frame(payload: bytes) -> bytes:
    """The head of a CBOR byte string of len(payload) bytes: what goes before each item."""
    size = len(payload)
    if size < 24:
        return bytes((0x40 | size,))
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if size < 1 << (8 * width):
            return bytes((0x40 | info,)) + size.to_bytes(width, "big")
    raise ValueError(f"{size} bytes do not fit a CBOR byte string")  # pragma: no cover


def _encode(obj: Any) -> bytes:
    """One item as the stream carries it. Deterministic, not canonical: maps in the fixed order
    of the wire module's builders, floats in 8 bytes; sorting keys and shrinking floats for
    every item cost a sixth of an export's time."""
    data: bytes = cbor2.dumps(obj)
    return data


# --- writing -----------------------------------------------------------------------------------


class Writer:
    """The items of a version 2 export of `device`'s entries, encoded, in stream order.

    `header` is the first item; `entry` gives the items of one entry (the sets and models it
    names that no earlier entry named, then the entry), given in ascending (key, checksum)
    order; `end` the last. An item the reader would refuse for its size is refused here.
    """

    def __init__(self, device: Device, exported_at: datetime, entries: int) -> None:
        self.device = device
        self.exported_at = exported_at
        self.entries = entries
        self._sets: dict[tuple[str, str], int] = {}
        self._models: dict[tuple[str, str], int] = {}
        self._written = 0
        self._verdicts = 0

    def header(self) -> bytes:
        """The header item."""
        return _encode(header_item(self.device, self.exported_at, self.entries))

    def entry(self, e: ExportedEntry) -> Iterator[bytes]:
        """The items of one entry: the sets and models new to the stream, then the entry."""
        at = self._sets.get((e.signature, e.checksum))
        if at is None:
            at = self._sets[e.signature, e.checksum] = len(self._sets)
            yield self._checked(["set", set_item(e.signature, e.checksum, e.names)], e)
        for v in e.verdicts:
            if (v.model, v.fingerprint) not in self._models:
                self._models[v.model, v.fingerprint] = len(self._models)
                yield self._checked(["model", model_item(v.model, v.fingerprint)], e)
        self._written += 1
        self._verdicts += len(e.verdicts)
        yield self._checked(["entry", entry_item(e, at, self._models)], e)

    def end(self) -> bytes:
        """The end item: the counts of what was written."""
        counts = {
            "entries": self._written,
            "candidate_sets": len(self._sets),
            "models": len(self._models),
            "validations": self._verdicts,
        }
        return _encode(["end", counts])

    @staticmethod
    def _checked(item: list[Any], e: ExportedEntry) -> bytes:
        data = _encode(item)
        if len(data) > ITEM_MAX_SIZE:
            raise fail(
                f"the {item[0]} item of {short(e.key)} takes {len(data)} bytes, more than "
                f"an importer reads ({ITEM_MAX_SIZE}); `tunecache doctor` checks its record"
            )
        return data


# --- reading -----------------------------------------------------------------------------------


class _Input:
    """A binary stream read in blocks, counting what it gave against an optional limit."""

    def __init__(self, stream: BinaryIO, limit: int | None, first: bytes) -> None:
        self.stream = stream
        self.limit = limit
        self.buffer = first
        self.at = 0
        self.total = 0

    def take(self, size: int) -> bytes:
        """The next `size` bytes, or fewer where the stream ends."""
        end = self.at + size
        if end <= len(self.buffer):
            data = self.buffer[self.at : end]
            self.at = end
        else:
            parts = [self.buffer[self.at :]]
            have = len(parts[0])
            self.buffer, self.at = b"", 0
            while have < size:
                block = read_from(self.stream, max(_BLOCK, size - have))
                if not block:
                    break
                need = size - have
                if len(block) > need:
                    self.buffer, self.at = block, need
                    block = block[:need]
                parts.append(block)
                have += len(block)
            data = b"".join(parts)
        self.total += len(data)
        if self.limit is not None and self.total > self.limit:
            raise fail(f"the stream exceeds the limit of {self.limit} bytes")
        return data


def read_from(stream: BinaryIO, size: int) -> bytes:
    """Up to `size` bytes of a binary stream (fewer only where it ends), as bytes; a stream
    that fails to read, or gives text, is refused in one line."""
    parts = []
    have = 0
    while have < size:
        try:
            block = stream.read(size - have)
        except OSError as error:
            raise BadArgumentError(f"cannot read the export: {error.strerror or error}") from None
        if not isinstance(block, bytes | bytearray):
            raise fail(f"expected a binary stream, but it gave {kind(block)}")
        if not block:
            break
        parts.append(bytes(block))
        have += len(block)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def frames(stream: BinaryIO, *, max_size: int | None = None, first: bytes = b"") -> Iterator[bytes]:
    """The items of a framed stream (`first` being bytes already read from it), each the
    payload of one CBOR byte string, until the stream ends; a head that is not a byte
    string's, that declares more than ITEM_MAX_SIZE bytes, or more than the stream holds, is
    refused before its bytes are kept; more than `max_size` bytes in all, likewise."""
    source = _Input(stream, max_size, first)
    number = 0
    while True:
        start = source.total
        head = source.take(1)
        if not head:
            return
        initial = head[0]
        info = initial & 0x1F
        if initial >> 5 != 2:
            raise fail(f"item {number} at byte {start} is not a byte string")
        if info < 24:
            size = info
        elif info < 28:
            width = 1 << (info - 24)
            raw = source.take(width)
            if len(raw) < width:
                raise fail(f"truncated at byte {start}")
            size = int.from_bytes(raw, "big")
        else:
            raise fail(f"item {number} at byte {start} has no definite length")
        if size > ITEM_MAX_SIZE:
            raise fail(
                f"item {number} at byte {start} declares {size} bytes, more than {ITEM_MAX_SIZE}"
            )
        payload = source.take(size)
        if len(payload) < size:
            raise fail(f"truncated at byte {source.total} (item {number} has {size} bytes)")
        yield payload
        number += 1


class Reader:
    """A version 2 export read item by item from the items' bytes, every item checked, and
    with it its place: the header first, each set and model before an entry names it, the
    entries in ascending (key, checksum) order, the end last with the counts of what came."""

    def __init__(
        self,
        items: Iterable[bytes],
        *,
        max_depth: int = MAX_DEPTH,
        max_items: int = ITEM_MAX_ITEMS,
    ) -> None:
        self._items = iter(items)
        self._depth = max_depth
        self._max_items = max_items
        self._number = 0
        first = next(self._items, None)
        if first is None:
            raise fail("empty input")
        #: the stream's header
        self.header: Header = read_header(self._decode(first))

    def _decode(self, data: bytes) -> object:
        where = f"{PREFIX}item {self._number}: "
        self._number += 1
        return _cbor.decode_bounded(
            data,
            max_size=ITEM_MAX_SIZE,
            max_depth=self._depth,
            max_items=self._max_items,
            prefix=where,
        )

    def entries(self, *, records: bool = True) -> Iterator[ExportedEntry]:
        """The entries, checked, in stream order; the end is checked after the last. With
        `records` False, their timing records are left for the caller to check (see
        `wire.read_entry`).
        """
        sets: list[Set] = []
        models: list[tuple[str, str]] = []
        known: set[tuple[str, ...]] = set()
        tables = 0
        last: tuple[str, str] | None = None
        count = verdicts = 0
        for data in self._items:
            number = self._number
            kind_, body = self._item(self._decode(data), number)
            if kind_ == "entry":
                entry = read_entry(body, count, sets, models, records=records)
                if last is not None and entry.ident <= last:
                    twice = entry.ident == last
                    raise fail(
                        f"entry {count} ({short(entry.key)}) "
                        + ("appears twice" if twice else "is out of order (keys must ascend)")
                    )
                last = entry.ident
                count += 1
                verdicts += len(entry.verdicts)
                yield entry
                continue
            if kind_ == "end":
                self._end(body, count, len(sets), len(models), verdicts)
                return
            tables += len(data)
            if tables > MAX_TABLES:
                raise fail(f"more than {MAX_TABLES} bytes of candidate sets and models")
            if kind_ == "set":
                found = read_set(body, len(sets))
                ident: tuple[str, ...] = ("set", found.signature, found.checksum)
                sets.append(found)
            else:
                model = read_model(body, len(models))
                ident = ("model", *model)
                models.append(model)
            if ident in known:
                raise fail(f"item {number}: the {kind_} {short(ident[1])} appears twice")
            known.add(ident)
        raise fail(f"truncated: the stream ends after {count} entries, without its end item")

    @staticmethod
    def _item(obj: object, number: int) -> tuple[str, object]:
        if not isinstance(obj, list) or len(obj) != 2:
            raise fail(f"item {number} is {kind(obj)}, not a [kind, body] pair")
        kind_, body = obj
        if kind_ not in _KINDS:
            raise fail(f"item {number} is of an unknown kind {short(kind_)}")
        return kind_, body

    def _end(self, body: object, entries: int, sets: int, models: int, verdicts: int) -> None:
        if not isinstance(body, dict):
            raise fail(f"the end item is {kind(body)}, not a map")
        _cbor.check_keys(body, _END_KEYS, f"{PREFIX}the end item: ")
        came = {
            "entries": entries,
            "candidate_sets": sets,
            "models": models,
            "validations": verdicts,
        }
        for name, value in came.items():
            said = body[name]
            if not is_int(said) or said != value:
                raise fail(f"the end item says {short(said)} {name}, but {value} came")
        if self.header.entries != entries:
            raise fail(f"the header says {self.header.entries} entries, but {entries} came")
        if next(self._items, None) is not None:
            raise fail("an item after the end item")


# --- either version, from a binary stream ------------------------------------------------------


class Export(NamedTuple):
    """An export being read: its header, and its entries, checked as they are read."""

    header: Header
    entries: Iterator[ExportedEntry]


def read_export(
    stream: BinaryIO,
    *,
    max_size: int | None = None,
    max_depth: int = MAX_DEPTH,
    max_items: int | None = None,
    records: bool = True,
) -> Export:
    """Start reading an export from a binary stream, whichever its version (with `records`
    False, the entries of a stream come with their records undecoded, for the caller to check:
    see `Reader.entries`; those of a version 1 export are decoded with it).

    The limits: `max_size` bytes of the whole input (None: MAX_SIZE for a version 1 export,
    which is read whole, and none for a stream, which is read an item at a time, each at
    most ITEM_MAX_SIZE); `max_depth` nesting, of the document or of each item; `max_items`
    CBOR items, of the document or of each item (None: MAX_ITEMS and ITEM_MAX_ITEMS).
    """
    first = read_from(stream, len(SQLITE_HEADER))
    if first.startswith(SQLITE_HEADER):
        raise fail("this is an SQLite database, not an export (merge accepts a database)")
    if not first:
        raise fail("empty input")
    major = first[0] >> 5
    if major == 5:  # a map: version 1, one item that holds everything
        limit = MAX_SIZE if max_size is None else max_size
        data = first + read_from(stream, limit + 1 - len(first))
        if len(data) > limit:
            raise fail(f"the file exceeds the limit of {limit} bytes")
        items = MAX_ITEMS if max_items is None else max_items
        doc = decode_document(data, limit, max_depth, items)
        header = Header(1, doc.tool, doc.exported_at, doc.device, len(doc.entries))
        return Export(header, iter(doc.entries))
    if major != 2:
        raise fail(f"not a tunecache export: it starts with {_MAJORS[major]}")
    reader = Reader(
        frames(stream, max_size=max_size, first=first),
        max_depth=max_depth,
        max_items=ITEM_MAX_ITEMS if max_items is None else max_items,
    )
    return Export(reader.header, reader.entries(records=records))


# What an item of each CBOR major type is, for a message (byte strings and maps never need one).
_MAJORS = (
    "an integer",
    "a negative integer",
    "",
    "a text string",
    "an array",
    "",
    "a tag",
    "a simple value",
)
