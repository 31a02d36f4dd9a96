"""Keys for tuning decisions and their one canonical text form.

A key is an op signature plus named integer dims. Its text form is the RFC one::

    einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided

Grammar of the text form (every key has exactly one, and ``parse`` accepts only that one):

- The text is tokens joined by ``_``; no token is empty (no ``__``, no leading or trailing ``_``).
  Every character is visible ASCII (``!`` to ``~``); ``_`` only separates tokens.
- Token 0 is the op name and always belongs to the signature, whatever it looks like.
- A token at index >= 1 matching ``[a-z]+[0-9]+`` is a *dim token*: a name of lowercase letters,
  then a decimal value. The value has no leading zero (``m0`` is fine, ``m0288`` is not) and is at
  most ``MAX_DIM``; dim names are unique within a key.
- Every other token is a *signature token*. Hence a type such as ``f32`` cannot be a signature
  token: it would read as dim ``f=32``, so types are written in uppercase (``F32``).
- A *flag* is a signature token at index >= 1 of lowercase letters only (``aconst``). The dims form
  one contiguous block, in the client's order, placed just before the first flag, or at the end
  when there is none. A key may have no dims.
- The signature is the signature tokens joined by ``_``, in order; the whole text is at most
  ``MAX_TEXT_LEN`` characters.

Everything here is a pure value: no I/O.
"""

from __future__ import annotations

import operator
from collections import namedtuple
from collections.abc import Iterable, Mapping

from tunecache.errors import BadKeyError

# Not `typing` at run time: the Triton client's first call of a stored key makes a key, and
# typing.NamedTuple costs twice what collections.namedtuple does.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple, TypeGuard

    class _KeyFields(NamedTuple):
        signature: str
        dims: tuple[tuple[str, int], ...] = ()

else:
    # Named as it is bound here, so the base pickles by reference as any class does.
    _KeyFields = namedtuple("_KeyFields", ("signature", "dims"), defaults=((),))

__all__ = [
    "MAX_DIM",
    "MAX_TEXT_LEN",
    "Key",
    "format_key",
    "is_dim_name",
    "make_key",
    "parse",
]

#: largest dim value: dims are stored in SQLite INTEGER columns, which are signed 64-bit
MAX_DIM = 2**63 - 1
#: longest key text accepted; real keys are under 200 characters, so longer input is an error
MAX_TEXT_LEN = 4096

# The grammar's character classes, tested with str methods rather than regular expressions:
# compiling the patterns cost every process that makes its first key about 0.5 ms, more than
# the rest of this module. Each helper below says the pattern it stands for.
_DIGITS = "0123456789"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
# Longest decimal a value <= MAX_DIM can have; longer digit runs are rejected before int().
_MAX_DIM_DIGITS = len(str(MAX_DIM))


def _lowercase(text: str) -> bool:
    """Whether `text` is one or more of a-z: `re.fullmatch("[a-z]+", text)`."""
    return bool(text) and not text.strip(_LOWER)


def _dim_like(token: str) -> tuple[str, str] | None:
    """A dim token's name and digits, or None: `re.fullmatch("([a-z]+)([0-9]+)", token)`."""
    name = token.rstrip(_DIGITS)
    if len(name) == len(token) or not _lowercase(name):
        return None
    return name, token[len(name) :]


def _bad_char(token: str) -> int | None:
    """Where the first character that is not visible ASCII or is "_" (0x5f) is, or None:
    `re.search("[^\\x21-\\x5e\\x60-\\x7e]", token)` (str.isprintable() alone would let
    non-ASCII letters through)."""
    if token.isascii() and token.isprintable() and " " not in token and "_" not in token:
        return None
    return next(i for i, c in enumerate(token) if not "!" <= c <= "~" or c == "_")


class Key(_KeyFields):
    """An op signature plus its named dims: what one tuning decision is about."""

    # A named tuple, not a dataclass: the resolver builds and hashes one per call. The raw
    # constructor therefore validates nothing; make_key and parse do.
    __slots__ = ()

    @property
    def text(self) -> str:
        """The canonical text form of this key, as parse accepts it."""
        return format_key(self)


def _error(what: str, pos: int, token: str, reason: str) -> BadKeyError:
    """Build the error for a bad token, naming its position in the text."""
    shown = token if len(token) <= 60 else token[:57] + "..."
    return BadKeyError(f"bad {what} at position {pos} ({shown!r}): {reason}")


def _uppercase_hint(token: str) -> str:
    """Say how to write a dim-looking token that was meant as a type."""
    return f"if {token!r} is a type, not a dim, write it in uppercase ({token.upper()!r})"


def _check_signature_token(token: str, index: int, pos: int, what: str) -> None:
    """Raise unless token is a legal signature token that is not dim-like."""
    if not token:
        if index == 0:
            raise _error(what, pos, token, "the op name is empty")
        raise _error(what, pos, token, "empty token (doubled, leading or trailing '_')")
    bad = _bad_char(token)
    if bad is not None:
        # Point at the character itself: in a long token the token start would not find it.
        raise _error(
            what,
            pos + bad,
            token,
            f"character {token[bad]!r} is not allowed (visible ASCII other than '_' only)",
        )


def _dims_index(signature_tokens: list[str]) -> int:
    """Return where the dims block goes among the signature tokens: before the first flag."""
    for i in range(1, len(signature_tokens)):
        if _lowercase(signature_tokens[i]):
            return i
    return len(signature_tokens)


def _check_length(text_len: int, what: str) -> None:
    """Raise if a key text would be longer than parse accepts."""
    if text_len > MAX_TEXT_LEN:
        raise BadKeyError(f"{what} is {text_len} characters long; at most {MAX_TEXT_LEN} allowed")


def _check_signature(signature: object) -> None:
    """Raise unless signature is the signature part of some valid key."""
    if not isinstance(signature, str):
        raise BadKeyError(f"a signature must be a str, not {type(signature).__name__}")
    _check_length(len(signature), "the signature")
    pos = 0
    for index, token in enumerate(signature.split("_")):
        _check_signature_token(token, index, pos, "signature")
        if index and _dim_like(token) is not None:
            raise _error(
                "signature",
                pos,
                token,
                "a letters-then-digits token is a dim, so it cannot be part of the signature; "
                + _uppercase_hint(token),
            )
        pos += len(token) + 1


def is_dim_name(name: object) -> TypeGuard[str]:
    """Whether `name` is a legal dim name: lowercase letters a-z only, at least one."""
    return isinstance(name, str) and _lowercase(name)


def _check_dim(name: object, value: object, seen: set[str]) -> tuple[str, int]:
    """Return (name, value) as a dim pair, or raise if either is not a legal dim."""
    if not is_dim_name(name):
        raise BadKeyError(f"bad dim name {name!r}: a dim name is lowercase letters a-z only")
    if name in seen:
        raise BadKeyError(f"duplicate dim name {name!r}")
    # bool is an int, but True as a size is always a caller's mistake.
    if isinstance(value, bool):
        raise BadKeyError(f"dim {name!r} is a bool ({value!r}); a dim value is an int")
    try:
        # operator.index takes numpy integers (shapes often come from arrays) but refuses floats.
        number = int(operator.index(value))  # type: ignore[arg-type]
    except TypeError:
        raise BadKeyError(
            f"dim {name!r} is a {type(value).__name__} ({value!r}); a dim value is an int"
        ) from None
    if not 0 <= number <= MAX_DIM:
        raise BadKeyError(f"dim {name!r} is {number}; a dim value is between 0 and {MAX_DIM}")
    seen.add(name)
    return name, number


def make_key(
    signature: str,
    dims: Mapping[str, int] | Iterable[tuple[str, int]] | None = None,
    /,
    **kw: int,
) -> Key:
    """Build a validated Key from a signature and dims given in the op's order."""
    _check_signature(signature)
    pairs: list[tuple[object, object]] = []
    if isinstance(dims, Mapping):
        pairs.extend(dims.items())
    elif isinstance(dims, (str, bytes)):
        # A str is iterable, and "m288" would otherwise fail later with a baffling message.
        raise BadKeyError(f"dims must be a mapping or (name, value) pairs, not {dims!r}")
    elif dims is not None:
        for item in dims:
            if not isinstance(item, tuple) or len(item) != 2:
                raise BadKeyError(f"dims must be (name, value) pairs, got {item!r}")
            pairs.append(item)
    pairs.extend(kw.items())
    seen: set[str] = set()
    checked = tuple(_check_dim(name, value, seen) for name, value in pairs)
    key = Key(signature, checked)
    # parse refuses over-long text, so make_key must too, or a key would not round-trip.
    _check_length(len(format_key(key)), "the key text")
    return key


def format_key(key: Key) -> str:
    """Return the canonical text form of a key built by make_key or parse."""
    signature, dims = key
    if not dims:
        return signature
    block = "_".join([f"{name}{value}" for name, value in dims])
    tokens = signature.split("_")
    at = _dims_index(tokens)
    if at == len(tokens):
        return f"{signature}_{block}"
    return "_".join([*tokens[:at], block, *tokens[at:]])


def parse(text: str) -> Key:
    """Return the key whose canonical text is exactly text, or raise BadKeyError."""
    if not isinstance(text, str):
        raise BadKeyError(f"key text must be a str, not {type(text).__name__}")
    # Checked first so that hostile input costs nothing more than len().
    _check_length(len(text), "the key text")
    what = "key text"
    signature_tokens: list[str] = []
    dims: list[tuple[str, int]] = []
    placed: list[tuple[int, int, str]] = []  # (token index, position, token) of each dim token
    seen: set[str] = set()
    pos = 0
    for index, token in enumerate(text.split("_")):
        match = _dim_like(token) if index else None
        if match is None:
            _check_signature_token(token, index, pos, what)
            signature_tokens.append(token)
        else:
            name, digits = match
            if len(digits) > 1 and digits[0] == "0":
                raise _error(
                    what,
                    pos,
                    token,
                    "a dim value has no leading zero; " + _uppercase_hint(token),
                )
            if name in seen:
                raise _error(
                    what,
                    pos,
                    token,
                    f"dim name {name!r} appears twice; " + _uppercase_hint(token),
                )
            if len(digits) > _MAX_DIM_DIGITS or int(digits) > MAX_DIM:
                raise _error(what, pos, token, f"a dim value is at most {MAX_DIM}")
            seen.add(name)
            dims.append((name, int(digits)))
            placed.append((index, pos, token))
        pos += len(token) + 1
    if placed:
        start = _dims_index(signature_tokens)
        for offset, (index, at, token) in enumerate(placed):
            if index != start + offset:
                raise _error(
                    what,
                    at,
                    token,
                    "the dims must be one block just before the first lowercase flag token "
                    "(or at the end if there is none); " + _uppercase_hint(token),
                )
    return Key("_".join(signature_tokens), tuple(dims))
