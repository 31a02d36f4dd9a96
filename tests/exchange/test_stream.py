"""A version 2 export as a stream (tunecache.exchange.stream): framed items, read one at a time
from any binary stream, every item checked in its place, the end item last with the counts of
what came; a hostile or cut stream is refused in one line and changes nothing."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest

from tests.exchange.conftest import items, stream
from tests.store_helpers import snapshot
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError, CodecError
from tunecache.exchange import stream as streams
from tunecache.exchange.export import export_items
from tunecache.store.models import utcnow


def _refused(cache: Cache, data: bytes, message: str) -> None:
    before = snapshot(cache.path)
    with pytest.raises(CodecError, match=message) as refused:
        exchange.import_cache(cache, data)
    assert str(refused.value).startswith("export file: ") and "\n" not in str(refused.value)
    assert snapshot(cache.path) == before


def test_frames_are_byte_string_heads_of_every_width() -> None:
    for size in (0, 23, 24, 255, 256, 65535, 65536):
        payload = bytes(size)
        framed = streams.frame(payload) + payload
        assert list(streams.frames(io.BytesIO(framed))) == [payload]


def test_a_stream_is_read_from_short_reads_as_from_one_buffer(
    exported: bytes, other: Cache
) -> None:
    class Trickle(io.RawIOBase):
        """A pipe that gives at most 7 bytes a read."""

        def __init__(self, data: bytes) -> None:
            self.data = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def read(self, size: int = -1) -> bytes:
            return self.data.read(min(size, 7) if size >= 0 else 7)

    report = exchange.import_cache(other, Trickle(exported))  # type: ignore[arg-type]
    assert report.counts["added"] == 4


def test_a_cache_read_as_it_is_written_gives_the_items_of_its_export(filled: Cache) -> None:
    written = items(exchange.export_cache(filled))
    reader = streams.Reader(export_items(filled))
    made = [e.ident for e in reader.entries()]
    assert made == [(e["key"], _checksum(written, e["set"])) for e in _bodies(written, "entry")]
    assert reader.header.entries == 4 and reader.header.device == filled.device


def _bodies(parts: list[Any], kind: str) -> list[Any]:
    return [body for k, body in parts[1:-1] if k == kind]


def _checksum(parts: list[Any], at: int) -> str:
    checksum: str = _bodies(parts, "set")[at]["checksum"]
    return checksum


# --- hostile streams -----------------------------------------------------------------------------


def _first(kind: str) -> Callable[[list[Any]], int]:
    return lambda parts: next(i for i, p in enumerate(parts) if i and p[0] == kind)


def _first_entry_again_last(parts: list[Any]) -> None:
    parts.insert(-1, parts[_first("entry")(parts)])


def _only_a_header(parts: list[Any]) -> None:
    del parts[1:]


def _entry_before_its_set(parts: list[Any]) -> None:
    parts.insert(1, parts.pop(_first("entry")(parts)))


def _set_twice(parts: list[Any]) -> None:
    at = _first("set")(parts)
    parts.insert(at + 1, parts[at])


def _model_twice(parts: list[Any]) -> None:
    at = _first("model")(parts)
    parts.insert(at + 1, parts[at])


def _end_says(field: str, value: Any) -> Callable[[list[Any]], None]:
    def mutate(parts: list[Any]) -> None:
        parts[-1][1][field] = value

    return mutate


def _header_says(count: int) -> Callable[[list[Any]], None]:
    def mutate(parts: list[Any]) -> None:
        parts[0]["entries"] = count

    return mutate


HOSTILE: dict[str, tuple[Callable[[list[Any]], Any], str]] = {
    "no end item": (lambda parts: parts.pop(), "without its end item"),
    "only a header": (_only_a_header, "after 0 entries, without its end"),
    "an item after the end": (lambda parts: parts.append(parts[1]), "an item after the end"),
    "entries out of order": (_first_entry_again_last, r"entry 4 \('conv_F32_m128_k3'\) is out of"),
    "an entry before its set": (_entry_before_its_set, "set 0 names nothing in the file"),
    "a set twice": (_set_twice, "the set 'conv_F32' appears twice"),
    "a model twice": (_model_twice, "the model 'bert' appears twice"),
    "an unknown kind": (lambda parts: parts.insert(1, ["rumour", {}]), "unknown kind 'rumour'"),
    "an item not a pair": (lambda parts: parts.insert(1, ["set"]), "not a \\[kind, body\\] pair"),
    "an end not a map": (lambda parts: parts.__setitem__(-1, ["end", []]), "end item is a list"),
    "an end without a count": (lambda parts: parts[-1][1].pop("models"), "missing key 'models'"),
    "an end with more entries": (_end_says("entries", 5), "says 5 entries, but 4 came"),
    "an end with fewer sets": (_end_says("candidate_sets", 2), "says 2 candidate_sets, but 3"),
    "an end with more verdicts": (_end_says("validations", 4), "says 4 validations, but 3"),
    "an end with a bool count": (_end_says("models", True), "says True models, but 2 came"),
    "a header with fewer entries": (_header_says(3), "header says 3 entries, but 4 came"),
    "a header of version 1": (lambda parts: parts[0].update(v=1), "version 1 export is one map"),
    "a header without its count": (lambda parts: parts[0].pop("entries"), "missing key"),
    "a header with a negative count": (_header_says(-1), "must be a non-negative integer"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_stream_out_of_its_rules_is_refused_and_changes_nothing(
    exported: bytes, other: Cache, name: str
) -> None:
    mutate, message = HOSTILE[name]
    parts = items(exported)
    mutate(parts)
    _refused(other, stream(parts), message)


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"\x00", "item 11 at byte \\d+ is not a byte string"),
        (b"\x5b" + (2**40).to_bytes(8, "big"), "declares 1099511627776 bytes, more than"),
        (b"\x59\x01", "truncated at byte"),
        (b"\x58\x10" + b"\xa0" * 3, "truncated at byte \\d+ \\(item 11 has 16 bytes\\)"),
        (b"\x41\xa0", "an item after the end"),
    ],
)
def test_bad_frames_after_the_end_are_refused(
    exported: bytes, other: Cache, tail: bytes, message: str
) -> None:
    _refused(other, exported + tail, message)


def test_a_stream_cut_anywhere_before_its_end_is_refused(exported: bytes, other: Cache) -> None:
    parts = items(exported)
    for keep in range(1, len(parts)):
        _refused(other, stream(parts[:keep]), "without its end item|empty input")


def test_a_table_of_sets_and_models_past_its_limit_is_refused(
    exported: bytes, other: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "MAX_TABLES", 100)
    _refused(other, exported, "more than 100 bytes of candidate sets and models")


def test_an_item_larger_than_an_importer_reads_is_never_written(
    filled: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "ITEM_MAX_SIZE", 100)
    with pytest.raises(CodecError, match=r"the entry item of 'conv_F32_m128_k3' takes \d+ bytes"):
        exchange.export_cache(filled)


def test_the_writer_frames_what_the_reader_reads(filled: Cache) -> None:
    writer = streams.Writer(filled.device, utcnow(), 0)
    parts = [writer.header(), writer.end()]
    data = b"".join(streams.frame(p) + p for p in parts)
    export = streams.read_export(io.BytesIO(data))
    assert list(export.entries) == [] and export.header.version == 2


# --- what is not a binary stream -----------------------------------------------------------------


def test_a_text_stream_is_refused_in_one_line(other: Cache) -> None:
    with pytest.raises(CodecError, match="expected a binary stream, but it gave a str"):
        exchange.import_cache(other, io.StringIO("tunecache-export"))  # type: ignore[arg-type]


def test_a_stream_that_fails_to_read_says_why(exported: bytes, other: Cache) -> None:
    class Failing(io.RawIOBase):
        def __init__(self) -> None:
            self.given = False

        def readable(self) -> bool:
            return True

        def read(self, size: int = -1) -> bytes:
            if self.given:
                raise OSError(5, "Input/output error")
            self.given = True
            return exported[:100]

    before = snapshot(other.path)
    with pytest.raises(BadArgumentError, match="cannot read the export: Input/output error"):
        exchange.import_cache(other, Failing())  # type: ignore[arg-type]
    assert snapshot(other.path) == before
