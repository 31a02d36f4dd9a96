"""Bounded CBOR decoding, shared by the timing-record codec and the export format.

Both decode bytes nobody vouches for: a cache file someone handed over, an export from another
machine. cbor2 trusts declared lengths and follows tags, which is where memory and time bombs
live, so `decode_bounded` walks the item headers first (`prescan`) and only then lets cbor2 build
anything, with indefinite lengths, duplicate keys and unhashable keys refused. Every error is a
CodecError whose message starts with the caller's prefix ("timing record: ", "export file: ").

The message helpers (`kind`, `short`, `one_line`) keep what a hostile value puts in an error
message short and on one line.
"""

from __future__ import annotations

import cbor2

from tunecache.errors import CodecError

__all__ = [
    "check_bounds",
    "check_keys",
    "decode_bounded",
    "kind",
    "one_line",
    "prescan",
    "short",
]


def check_bounds(
    data: bytes, *, max_size: int, max_depth: int, max_items: int, prefix: str
) -> None:
    """Refuse bytes over the size limit, empty bytes, or bytes whose CBOR item headers break
    the depth or item limits (see `prescan`)."""
    if len(data) > max_size:
        raise CodecError(f"{prefix}{len(data)} bytes exceed the limit of {max_size}")
    if not data:
        raise CodecError(f"{prefix}empty input")
    prescan(data, max_depth=max_depth, max_items=max_items, prefix=prefix)


def decode_bounded(
    data: bytes, *, max_size: int, max_depth: int, max_items: int, prefix: str
) -> object:
    """Decode one CBOR item from untrusted bytes within the limits, or raise CodecError."""
    check_bounds(data, max_size=max_size, max_depth=max_depth, max_items=max_items, prefix=prefix)
    try:
        return cbor2.loads(
            data,
            max_depth=max_depth,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            strict_hashable_types=True,
        )
    except Exception as e:  # whatever cbor2 raises, the bytes are not what was expected
        raise CodecError(f"{prefix}invalid CBOR: {one_line(e)}") from e


def prescan(data: bytes, *, max_depth: int, max_items: int, prefix: str) -> None:
    """Walk the CBOR item headers without building items, refusing anything unbounded or unused:
    truncation, indefinite lengths, reserved values, tags, more than `max_items` items, nesting
    deeper than `max_depth`, declared lengths longer than the bytes left, trailing bytes.

    One loop on purpose: it is a byte-level state machine whose speed bounds what a hostile
    file can cost (about 2.5 million items a second), and iterative so depth costs no stack.
    """
    n = len(data)
    pos = 0
    items = 0
    # Items still expected by each open container, innermost last.
    open_counts: list[int] = []
    while True:
        if pos >= n:
            raise CodecError(f"{prefix}truncated at byte {pos}")
        start = pos
        initial = data[pos]
        pos += 1
        major = initial >> 5
        info = initial & 0x1F
        if info < 24:
            arg = info
        elif info < 28:
            width = 1 << (info - 24)
            if width > n - pos:
                raise CodecError(f"{prefix}truncated at byte {start}")
            arg = int.from_bytes(data[pos : pos + width], "big")
            pos += width
        elif info == 31:
            # Indefinite lengths (and the break byte) let a container grow without a
            # declared bound; canonical records never use them.
            raise CodecError(f"{prefix}indefinite-length item at byte {start}")
        else:
            raise CodecError(f"{prefix}reserved additional information {info} at byte {start}")
        items += 1
        if items > max_items:
            raise CodecError(f"{prefix}more than {max_items} items")
        children = 0
        left = n - pos
        if major in (2, 3):  # byte and text strings: skip the payload
            if arg > left:
                raise _too_long(prefix, arg, start, left)
            pos += arg
        elif major in (4, 5):  # arrays and maps: every child takes at least one byte
            children = arg if major == 4 else 2 * arg
            if children > left:
                raise _too_long(prefix, arg, start, left)
        elif major == 6:
            # No format of tunecache uses tags; refusing them all shuts out shared references,
            # tag chains, bignums and every semantic decoder cbor2 would otherwise run.
            raise CodecError(f"{prefix}tag {arg} at byte {start} is not allowed")
        if children:
            if len(open_counts) >= max_depth:
                raise CodecError(f"{prefix}nesting deeper than {max_depth} at byte {start}")
            open_counts.append(children)
            continue
        # The item is complete: close every container it completes.
        while open_counts:
            open_counts[-1] -= 1
            if open_counts[-1]:
                break
            open_counts.pop()
        if not open_counts:
            break
    if pos != n:
        raise CodecError(f"{prefix}{n - pos} trailing byte(s) after the record at byte {pos}")


def check_keys(obj: dict[object, object], expected: frozenset[str], where: object) -> None:
    """Refuse a decoded map that lacks a key of its schema or has one outside it; messages
    start with `where`."""
    missing = expected.difference(obj)
    if missing:
        raise CodecError(f"{where}missing key {sorted(missing)[0]!r}")
    unknown = [k for k in obj if k not in expected]
    if unknown:
        raise CodecError(f"{where}unknown key {short(unknown[0])}")


def _too_long(prefix: str, length: int, start: int, left: int) -> CodecError:
    """The error for a declared length that cannot fit in the bytes left."""
    return CodecError(
        f"{prefix}declared length {length} at byte {start} exceeds the {left} bytes left"
    )


def kind(obj: object) -> str:
    """An object's type for a message, with its article: "an int"."""
    name = type(obj).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def short(obj: object) -> str:
    """A bounded repr for a message."""
    # Hostile records can hold megabyte strings: cut before repr, not after.
    if isinstance(obj, str):
        return repr(obj[:40]) + ("..." if len(obj) > 40 else "")
    if isinstance(obj, int | float | bool) or obj is None:
        return repr(obj)
    return f"<{type(obj).__name__}>"


def one_line(e: BaseException) -> str:
    """An exception's text squeezed onto one bounded line."""
    text = " ".join(str(e).split())
    return text[:200] or type(e).__name__
