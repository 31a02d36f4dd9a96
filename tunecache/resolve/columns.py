"""A signature's entries as columns: what the reader loads in bulk and the index is built from.

The reader (`tunecache.resolve.reader`) asks SQLite for each column of a signature's entries as
one text, in one pass: the entry ids with their statuses and verdict flags packed in one integer
a row, the dims, and the choices. Parsing those texts takes a few numpy calls and no Python call
per row: the dims of every key of a signature have the same names in the same order, so the
names are checked and blanked out at once and numpy reads the numbers. A text that is not in that
canonical form (keys of one signature with different dim names, or a damaged value) is not
guessed at: `from_texts` says so, and the reader reads the signature row by row (`from_rows`),
as the resolver always did.

numpy is imported by the first load, never by importing this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from tunecache.keys import is_dim_name
from tunecache.resolve.grid import narrow, parse_dims

__all__ = [
    "ACCEPTED",
    "CHOICE_SEPARATOR",
    "CHUNK",
    "MASKED_BY_US",
    "PACKED",
    "REJECTED",
    "STATUS_CODE",
    "VALIDATED_BY_ANY",
    "VALIDATED_BY_US",
    "VERDICT_BITS",
    "VERDICT_WORD",
    "Columns",
    "from_rows",
    "from_texts",
    "verdicts_from_rows",
    "verdicts_from_text",
    "with_verdicts",
]

#: The status codes of the status column (`STATUS_CODE` in SQL): 3 is any other status.
ACCEPTED, UNVALIDATED, REJECTED = 0, 1, 2
STATUS_CODE = (
    "CASE e.status WHEN 'accepted' THEN 0 WHEN 'unvalidated' THEN 1"
    " WHEN 'rejected' THEN 2 ELSE 3 END"
)

#: The bits of the verdict flags column: an entry validated by any model, masked by the reading
#: table's model, validated by it.
VALIDATED_BY_ANY, MASKED_BY_US, VALIDATED_BY_US = 1, 2, 4

#: An entry's id and status code as one integer, so that one aggregate carries both: SQLite
#: spends about as much on each aggregate of a row as on the row's joins.
PACKED = "e.entry_id * 4 + " + STATUS_CODE

#: A verdict's flags (`VALIDATED_BY_ANY` and, when the verdict is the reading table's model's,
#: `MASKED_BY_US` or `VALIDATED_BY_US`, as `Rules.judge` counts them), in SQL over
#: read_verdicts_v1 v, given `{mine}`: whether the verdict is that model's.
VERDICT_BITS = (
    "(v.verdict IS 'validated') + 2 * ({mine} AND v.verdict IS 'masked')"
    " + 4 * ({mine} AND v.verdict IS NOT 'masked')"
)
#: A verdict's entry id and flags as one integer.
VERDICT_WORD = "v.entry_id * 8 + " + VERDICT_BITS

#: Between two choices in the choices text: a candidate name is printable, this is not.
CHOICE_SEPARATOR = "\x1f"

#: Texts are parsed this many characters at a time: a million choices never sit in one list of
#: Python strings, nor a million rows of dims in one array of positions.
CHUNK = 1 << 20
# What a dims text becomes before numpy reads its numbers: names and "=" turned into spaces.
_BLANK = bytes.maketrans(b"abcdefghijklmnopqrstuvwxyz=", b" " * 27)
_INT64_MAX = 2**63 - 1


class Columns(NamedTuple):
    """The entries of one signature, list and device whose keys have the same dim names."""

    #: the dims' names, in the order of each row of `values`
    names: tuple[str, ...]
    #: entry ids (int32 or int64)
    ids: Any
    #: status codes (uint8): ACCEPTED, UNVALIDATED, REJECTED, or 3 for any other status
    status: Any
    #: verdict flags (uint8): VALIDATED_BY_ANY | MASKED_BY_US | VALIDATED_BY_US
    flags: Any
    #: the dims' values (int32 or int64, one row per entry)
    values: Any
    #: each entry's choice, as a position in `choices` (int32)
    codes: Any
    #: the distinct choices
    choices: list[str]


def _names(text: str) -> tuple[str, ...]:
    """The dim names of the first row of a dims text: up to the first name that repeats."""
    names: list[str] = []
    # A key's text has at most 4,096 characters: its dims are in the first 8,192 of the text.
    for token in text[:8192].split(" "):
        name, equals, _ = token.partition("=")
        if not equals or not is_dim_name(name) or name in names:
            break
        names.append(name)
    return tuple(names)


def _dims_chunk(piece: str, names: tuple[str, ...], np: Any) -> Any:
    """The values of a piece of a dims text that starts at a row, or None unless every row
    there has exactly these names, in this order, each with a value of digits.

    Every "=" must have its slot's name before it, with a space before the name (or the start
    of the piece), and a digit after it; and every other character must be a digit or a space.
    Names are distinct within a key, so rows of other names, or the same names in another
    order, fail: slots of rows of distinct names line up only if every row has these names.
    """
    ndims = len(names)
    raw = piece.encode("ascii")
    buf = np.frombuffer(raw, np.uint8)
    equals = np.flatnonzero(buf == ord("="))
    rows, extra = divmod(equals.size, ndims)
    if extra or not rows or equals[-1] + 1 >= buf.size:
        return None
    digit = (buf - ord("0")) < 10  # uint8 arithmetic: anything below "0" wraps around
    if not bool(digit[equals + 1].all()):
        return None
    if np.count_nonzero(buf != ord(" ")) - np.count_nonzero(digit) != rows * (
        ndims + sum(map(len, names))
    ):
        return None
    for slot, name in enumerate(names):
        start = equals[slot::ndims] - len(name)
        before = start[1:] if slot == 0 else start
        if (slot == 0 and start[0] != 0) or int(before.min(initial=1)) < 1:
            return None
        if not bool((buf[before - 1] == ord(" ")).all()):
            return None
        for offset, letter in enumerate(name.encode("ascii")):
            if not bool((buf[start + offset] == letter).all()):
                return None
    values = np.fromstring(raw.translate(_BLANK), dtype=np.int64, sep=" ")
    # A value too large for 64 bits reads as the largest one: the row-by-row reader decides.
    if values.size != rows * ndims or bool((values == _INT64_MAX).any()):
        return None
    return values.reshape(rows, ndims)


def _dims(text: str, count: int, np: Any) -> tuple[tuple[str, ...], Any] | None:
    """The names and values of a dims text of `count` rows, or None unless every row has the
    same names in the same order (see `_dims_chunk`).

    The text is parsed a piece at a time, cut where a row starts, so that what parsing needs
    beside the text and the values stays a few MB whatever the signature's size.
    """
    names = _names(text)
    ndims = len(names)
    if not ndims:
        return ((), np.empty((count, 0), np.int64)) if not text.strip(" ") else None
    if not text.isascii():
        return None
    values = np.empty((count, ndims), np.int64)
    filled = start = 0
    # In a text of rows of these names, " name=" with the first name is where a row starts.
    row_start = f" {names[0]}="
    while start < len(text):
        cut = text.find(row_start, start + CHUNK)
        end = len(text) if cut < 0 else cut
        chunk = _dims_chunk(text[start:end], names, np)
        if chunk is None or filled + len(chunk) > count:
            return None
        values[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
        start = end + 1
    return (names, values) if filled == count else None


def _codes(text: str | None, count: int, np: Any) -> tuple[Any, list[str]] | None:
    """The choices text as positions in its list of distinct choices, or None if it does not
    hold `count` choices."""
    if text is None:
        return None
    code_of: dict[str, int] = {}
    codes = np.empty(count, np.int32)
    filled = start = 0
    while start <= len(text):
        cut = text.find(CHOICE_SEPARATOR, start + CHUNK)
        end = len(text) if cut < 0 else cut
        parts = text[start:end].split(CHOICE_SEPARATOR)
        if filled + len(parts) > count:
            return None
        for choice in dict.fromkeys(parts):
            code_of.setdefault(choice, len(code_of))
        codes[filled : filled + len(parts)] = np.fromiter(
            map(code_of.__getitem__, parts), np.int32, len(parts)
        )
        filled += len(parts)
        start = end + 1
    return (codes, list(code_of)) if filled == count else None


def _words(text: str | None, count: int | None, np: Any) -> Any:
    """The integers of a comma-separated text (`count` of them, when given), or None unless it
    holds only non-negative integers: an id too large to pack comes as a float, a hostile one
    may be negative, and the row-by-row reader takes those."""
    if text is None:
        return None
    raw = text.encode("ascii")
    buf = np.frombuffer(raw, np.uint8)
    if not bool((((buf - ord("0")) < 10) | (buf == ord(","))).all()):
        return None
    words = np.fromstring(raw, dtype=np.int64, sep=",")
    return words if count is None or words.size == count else None


def from_texts(texts: list[Any]) -> list[Columns] | None:
    """The columns of a signature's entries from the texts of the reader's bulk query, or None
    when the texts are not in the form this reads: then the reader reads row by row.

    `texts` is [count, the entries' ids and statuses (`PACKED`), dims, choices]. The list is
    emptied as it is read, so that each text is freed once it is parsed: a million entries are
    tens of MB of text. The flags are 0: `with_verdicts` sets them.
    """
    import numpy as np

    try:
        count = texts[0]
        if not count:
            return []
        words = _words(texts[1], count, np)
        texts[:2] = []
        if words is None or texts[0] is None:
            return None
        parsed = _dims(texts.pop(0), count, np)
        coded = _codes(texts.pop(0), count, np)
        if parsed is None or coded is None:
            return None
        names, values = parsed
        codes, distinct = coded
        ids = narrow(np, words >> 2)
        status = (words & 3).astype(np.uint8)
        flags = np.zeros(count, np.uint8)
        return [Columns(names, ids, status, flags, narrow(np, values), codes, distinct)]
    finally:
        texts.clear()


def from_rows(rows: Iterable[tuple[int, int, str, str]]) -> list[Columns]:
    """The columns of entries read row by row (entry id, status code, dims, choice), one
    `Columns` for each list of dim names; the flags are 0 (`with_verdicts` sets them)."""
    import numpy as np

    groups: dict[tuple[str, ...], tuple[list[Any], ...]] = {}
    for entry_id, status, dims, choice in rows:
        names, values = parse_dims(dims)
        group = groups.get(names)
        if group is None:
            group = groups[names] = ([], [], [], [])
        for column, value in zip(group, (entry_id, status, values, choice), strict=True):
            column.append(value)
    out = []
    for names, (ids, statuses, shapes, choices) in groups.items():
        distinct = list(dict.fromkeys(choices))
        code_of = {choice: i for i, choice in enumerate(distinct)}
        out.append(
            Columns(
                names,
                np.array(ids, dtype=np.int64),
                np.array(statuses, dtype=np.uint8),
                np.zeros(len(ids), np.uint8),
                np.array(shapes, dtype=np.int64).reshape(len(ids), len(names)),
                np.fromiter(map(code_of.__getitem__, choices), np.int32, len(choices)),
                distinct,
            )
        )
    return out


def verdicts_from_text(text: str | None) -> tuple[Any, Any] | None:
    """The verdicts of the reader's verdict query (`VERDICT_WORD` of each, comma-separated) as
    (entry ids, verdict flags), or None if the text is not of non-negative integers."""
    import numpy as np

    words = _words(text or "", None, np)
    return None if words is None else (words >> 3, (words & 7).astype(np.uint8))


def verdicts_from_rows(rows: Iterable[tuple[int, int]]) -> tuple[Any, Any]:
    """The verdicts read row by row (entry id, its `VERDICT_BITS`), as `verdicts_from_text`
    gives them."""
    import numpy as np

    pairs = list(rows)
    ids = np.array([entry_id for entry_id, _ in pairs], np.int64)
    return ids, np.array([bits for _, bits in pairs], np.uint8)


def with_verdicts(found: list[Columns], ids: Any, flags: Any) -> list[Columns]:
    """`found` with the flags of the verdicts (entry ids, flags) on its entries, each entry's
    verdicts or-ed together; verdicts on other entries are left out."""
    import numpy as np

    if not ids.size or not found:
        return found
    rows = sum(len(columns.ids) for columns in found)
    low = min(int(ids.min()), *(int(c.ids.min()) for c in found if c.ids.size))
    top = max(int(ids.max()), *(int(c.ids.max()) for c in found if c.ids.size))
    if low >= 0 and top < 16 * (rows + ids.size) + 1024:
        # Ids as dense as a store numbers them: a table of flags by entry id, a byte an id.
        table = np.zeros(top + 1, np.uint8)
        np.bitwise_or.at(table, ids, flags)
        return [Columns(*c[:3], table[c.ids], *c[4:]) for c in found]
    order = np.argsort(ids, kind="stable")
    ids, flags = ids[order], flags[order]
    starts = np.flatnonzero(np.append(True, ids[1:] != ids[:-1]))
    ids, flags = ids[starts], np.bitwise_or.reduceat(flags, starts)
    out = []
    for columns in found:
        at = np.minimum(np.searchsorted(ids, columns.ids), ids.size - 1)
        judged = ids[at] == columns.ids
        own = np.zeros(columns.ids.shape, np.uint8)
        own[judged] = flags[at[judged]]
        out.append(Columns(*columns[:3], own, *columns[4:]))
    return out
