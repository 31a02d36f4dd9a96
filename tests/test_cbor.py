"""The bounded CBOR decoder shared by the record codec and the export format (tunecache._cbor),
and its helpers that keep hostile values out of error messages.

test_codec.py and tests/exchange/test_wire.py feed it hostile records and documents through
their decoders; these ask it directly, with a prefix of their own.
"""

from __future__ import annotations

import cbor2
import pytest

from tunecache import _cbor
from tunecache.errors import CodecError

LIMITS = {"max_size": 64, "max_depth": 4, "max_items": 8}


@pytest.mark.parametrize(
    ("data", "limits", "message"),
    [
        (b"\x18", {}, "truncated at byte 0"),  # a one-byte argument, missing
        (b"\x19\x01", {}, "truncated at byte 0"),  # a two-byte argument, half there
        (b"\x82\x18\x01", {}, "truncated at byte 3"),  # an array of two, one item long
        (b"\x9f\xff", {}, "indefinite-length item at byte 0"),
        (b"\xff", {}, "indefinite-length item at byte 0"),  # a lone break
        (b"\x1c", {}, "reserved additional information 28 at byte 0"),
        (b"\x83\x01\x02\x03", {"max_items": 3}, "more than 3 items"),
        (b"\x42\x01", {}, "declared length 2 at byte 0 exceeds the 1 bytes left"),
        (b"\x81\xa1\x00", {}, "declared length 1 at byte 1 exceeds the 1 bytes left"),
        (b"\xc1\x00", {}, "tag 1 at byte 0 is not allowed"),
        (b"\x81\x81\x00", {"max_depth": 1}, "nesting deeper than 1 at byte 1"),
        (b"\x00\x00", {}, "1 trailing byte(s) after the record at byte 1"),
    ],
)
def test_the_prescan_refuses_what_is_unbounded_or_unused(
    data: bytes, limits: dict[str, int], message: str
) -> None:
    bounds = {"max_depth": 4, "max_items": 8, **limits}
    with pytest.raises(CodecError) as info:
        _cbor.prescan(data, prefix="p: ", **bounds)
    assert str(info.value) == "p: " + message


def test_the_prescan_accepts_bounded_cbor_up_to_its_limits() -> None:
    data = cbor2.dumps({"a": [1, b"xy", "z"], "b": {"c": None}}, canonical=True)
    items = 1 + 2 + 1 + 3 + 1 + 2  # the map, keys, the array, its items, the inner map, pair
    _cbor.prescan(data, max_depth=2, max_items=items, prefix="p: ")
    with pytest.raises(CodecError, match=f"more than {items - 1} items"):
        _cbor.prescan(data, max_depth=2, max_items=items - 1, prefix="p: ")
    with pytest.raises(CodecError, match="nesting deeper than 1"):
        _cbor.prescan(data, max_depth=1, max_items=items, prefix="p: ")


def test_bounds_are_checked_size_first() -> None:
    with pytest.raises(CodecError, match=r"^p: 65 bytes exceed the limit of 64$"):
        _cbor.check_bounds(b"\x9f" * 65, prefix="p: ", **LIMITS)
    with pytest.raises(CodecError, match=r"^p: empty input$"):
        _cbor.check_bounds(b"", prefix="p: ", **LIMITS)
    _cbor.check_bounds(b"\x00", prefix="p: ", **LIMITS)


def test_decode_bounded_builds_the_item_only_within_the_limits() -> None:
    data = cbor2.dumps({"a": [1, 2]})
    assert _cbor.decode_bounded(data, prefix="p: ", **LIMITS) == {"a": [1, 2]}
    with pytest.raises(CodecError, match=r"^p: more than 3 items"):
        _cbor.decode_bounded(data, prefix="p: ", **{**LIMITS, "max_items": 3})


@pytest.mark.parametrize(
    "data",
    [
        b"\xa2\x01\x02\x01\x03",  # a duplicate map key
        b"\xa1\x80\x00",  # an unhashable (array) key
        b"\x62\xff\xfe",  # text that is not UTF-8
    ],
)
def test_what_cbor2_refuses_is_an_invalid_cbor_error_chained_to_its_cause(data: bytes) -> None:
    with pytest.raises(CodecError) as info:
        _cbor.decode_bounded(data, prefix="p: ", **LIMITS)
    assert str(info.value).startswith("p: invalid CBOR: ") and "\n" not in str(info.value)
    assert isinstance(info.value.__cause__, cbor2.CBORDecodeError)


@pytest.mark.parametrize("prefix", ["timing record: ", "export file: ", ""])
@pytest.mark.parametrize("data", [b"", b"\x00" * 65, b"\xc1\x00", b"\xa2\x01\x02\x01\x03"], ids=str)
def test_every_refusal_starts_with_the_callers_prefix(prefix: str, data: bytes) -> None:
    with pytest.raises(CodecError) as info:
        _cbor.decode_bounded(data, prefix=prefix, **LIMITS)
    with pytest.raises(CodecError) as plain:
        _cbor.decode_bounded(data, prefix="", **LIMITS)
    assert str(info.value) == prefix + str(plain.value)


# --- what a message may say of a hostile value ------------------------------------------------


class Apple:
    """A class whose name starts with an upper-case vowel."""


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (1, "an int"),
        ("x", "a str"),
        (1.5, "a float"),
        (b"", "a bytes"),
        ([], "a list"),
        (None, "a NoneType"),
        (object(), "an object"),
        (Apple(), "an Apple"),
    ],
)
def test_kind_names_a_type_with_its_article(value: object, said: str) -> None:
    assert _cbor.kind(value) == said


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("a" * 40, repr("a" * 40)),
        ("a" * 41, repr("a" * 40) + "..."),
        ("\n" * 10**6, repr("\n" * 40) + "..."),
        (7, "7"),
        (2.5, "2.5"),
        (True, "True"),
        (None, "None"),
        ([1, 2], "<list>"),
        (b"x" * 10**6, "<bytes>"),
        ({"k": "v"}, "<dict>"),
    ],
)
def test_short_is_a_bounded_repr(value: object, said: str) -> None:
    assert _cbor.short(value) == said


def test_one_line_squeezes_an_error_onto_one_bounded_line() -> None:
    assert _cbor.one_line(ValueError("a\n  b\tc ")) == "a b c"
    assert _cbor.one_line(ValueError("x" * 500)) == "x" * 200
    assert _cbor.one_line(ValueError()) == "ValueError"
    assert _cbor.one_line(KeyError("k")) == "'k'"
