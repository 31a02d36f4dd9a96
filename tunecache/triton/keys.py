"""Tuning keys behind `tunecache.triton.autotune`: a call's tunecache key, and its parts.

Nothing here imports Triton, torch or the store: a config is anything shaped like
`triton.Config`, a tensor anything with a `.dtype`. So all of it is tested on a CPU.

- `config_name` (`warm`'s, named here too) is a config's identity: the canonical text of its
  meta-parameters and launch options. The candidate list of a kernel is the list of its
  configs' names, and its checksum (`tunecache.candidates.checksum`) is what an entry is tuned
  against.
- `KeySpec` turns a call's arguments into Triton's tuning key (the values of the `key`
  arguments, then the dtype of every tensor argument), on the hot path as a plain tuple
  (`warm.RawKey`), and on a miss into a tunecache `Key`: the sizes among the key arguments are
  its dims, everything else (kernel name, dtypes, non-size key values, source revision) is its
  signature.
- `kernel_revision` is the signature token that ties entries to a kernel's source.

A kernel's first call builds a `KeySpec` (a warm start answered from its file needs only the
raw key, and loads none of this): the key's form (`tunecache.keys`) and the digest load with
its first tunecache key.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tunecache.errors import BadArgumentError, BadKeyError
from tunecache.triton.autotuner import key_problem
from tunecache.triton.warm import RawKey, config_name, kernel_source, value_text

if TYPE_CHECKING:
    from tunecache.keys import Key

__all__ = [
    "DIVISIBILITY",
    "KeySpec",
    "config_name",
    "dtype_token",
    "escape",
    "kernel_revision",
    "revision_token",
    "same_specialization",
]

# Characters a key's signature token may hold as they are: visible ASCII but "_" (the token
# separator) and "%" (the escape character).
_PLAIN = frozenset(chr(c) for c in range(0x21, 0x7F)) - {"_", "%"}

#: common dtype spellings (torch, numpy, triton.language) -> one uppercase signature token
_DTYPES = {
    "float16": "F16",
    "half": "F16",
    "fp16": "F16",
    "bfloat16": "BF16",
    "bf16": "BF16",
    "float32": "F32",
    "float": "F32",
    "fp32": "F32",
    "float64": "F64",
    "double": "F64",
    "fp64": "F64",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "bool": "BOOL",
    "float8_e4m3fn": "F8E4M3FN",
    "float8_e5m2": "F8E5M2",
    "complex64": "C64",
    "complex128": "C128",
}


# -- specialization ---------------------------------------------------------------------------

#: Triton compiles a kernel apart for an integer argument divisible by this (its
#: `tt.divisibility` hint: aligned, vectorised loads) and for one equal to 1
DIVISIBILITY = 16


def _specialized(value: int) -> tuple[bool, bool]:
    return (value % DIVISIBILITY == 0, value == 1)


def same_specialization(a: Key, b: Key) -> bool:
    """Whether Triton compiles the kernel alike for two keys of one signature: each size is
    divisible by `DIVISIBILITY` in both or in neither, and equal to 1 in both or in neither.

    A config's ranking belongs to one compiled kernel: a layer norm's best warp count for rows
    of 1024 (aligned) is not its best for rows of 1000. So a borrowed config is served as it is
    only from a neighbour compiled alike (`flow.Flow`, docs/triton.md).
    """
    theirs = dict(b.dims)
    return all(
        name in theirs and _specialized(value) == _specialized(theirs[name])
        for name, value in a.dims
    )


# -- keys ---------------------------------------------------------------------------------------


def escape(text: str) -> str:
    """Text as a signature token: plain characters as they are, the rest as %XX (UTF-8)."""
    if all(c in _PLAIN for c in text):
        return text
    return "".join(
        c if c in _PLAIN else "".join(f"%{b:02X}" for b in c.encode("utf-8", "replace"))
        for c in text
    )


def dtype_token(dtype: object) -> str:
    """A dtype (torch.float16, numpy's float16, tl.float16) as one signature token: F16."""
    name = str(dtype).rsplit(".", 1)[-1]
    known = _DTYPES.get(name)
    if known is not None:
        return known
    # Uppercase, so that a name like "int4" cannot read as a dim ("int" = 4) in the key text.
    return escape(name.upper()) or "DTYPE"


def revision_token(source: str) -> str:
    """The source text of a kernel as a short signature token: R + 8 hex digits."""
    from tunecache._digest import sha256

    return "R" + sha256(source.encode("utf-8", "replace")).hexdigest()[:8].upper()


def kernel_revision(fn: Any, revision: str | None) -> str | None:
    """The signature token that ties entries to a kernel's code: a digest of its source
    (`revision="auto"`), the caller's own revision string, or none."""
    if revision != "auto":
        return None if revision is None else "R" + escape(revision)
    source = kernel_source(fn)
    return None if source is None else revision_token(source)


def _dim_names(names: Sequence[str]) -> dict[str, str]:
    """Each key argument's name as a unique dim name of lowercase letters (M -> m,
    n_elements -> nelements); a clash takes a letter suffix, in key order."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        base = "".join(c for c in name.lower() if "a" <= c <= "z") or "d"
        candidate, n = base, 0
        while candidate in taken:
            n += 1
            candidate = base + _letters(n)
        taken.add(candidate)
        out[name] = candidate
    return out


def _letters(n: int) -> str:
    """1 -> a, 26 -> z, 27 -> aa: a suffix of lowercase letters for the n-th clash."""
    out = ""
    while n > 0:
        n, rest = divmod(n - 1, 26)
        out = chr(ord("a") + rest) + out
    return out


def _size(value: Any) -> int | None:
    """The value as a size (a non-negative int that is not a bool), or None."""
    if isinstance(value, bool):
        return None
    try:
        number = operator.index(value)
    except TypeError:
        return None
    return number if number >= 0 else None


def _is_tensor(value: object) -> bool:
    # A numpy integer scalar has a dtype and an empty shape: it is a size, not a tensor.
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):
        return False
    try:
        return len(value.shape) > 0
    except TypeError:
        return True


class KeySpec(RawKey):
    """How a kernel's calls become tuning keys; built by a kernel's first call. Its `raw`
    (`warm.RawKey`'s) is the Triton tuning key, `make` the tunecache key."""

    def __init__(
        self,
        op: str,
        arg_names: Sequence[str],
        key: Sequence[str],
        dims: Sequence[str] | None = None,
        revision: str | None = None,
    ) -> None:
        if isinstance(key, str) or not isinstance(key, Sequence):
            raise BadArgumentError(f"key is a list of argument names, got {key!r}")
        names = list(arg_names)
        problem = key_problem(op, names, key)
        if problem is not None:
            raise BadArgumentError(problem)
        if dims is not None:
            stray = [d for d in dims if d not in key]
            if isinstance(dims, str) or stray:
                raise BadArgumentError(f"dims must be a list of key arguments; not in key: {stray}")
        super().__init__(names, key)
        self.op = op
        #: key arguments that are dims when their value is a size (all of them by default)
        self.dims = frozenset(key if dims is None else dims)
        self.explicit_dims = dims is not None
        self.dim_names = _dim_names(self.key)
        self.op_token = escape(op.strip("_").replace("_", "-")) or "kernel"
        self.revision = revision

    def make(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Key:
        """The tunecache key of a call: kernel, dtypes, non-size key values and revision make
        the signature; the sizes among the key values are the dims, in key order."""
        n = len(args)
        dims: list[tuple[str, int]] = []
        facts: list[str] = []
        for i, name in self.positions:
            if i < n:
                value = args[i]
            elif name in kwargs:
                value = kwargs[name]
            else:
                continue
            if _is_tensor(value):
                raise BadArgumentError(
                    f"{self.op}: key argument {name!r} is a tensor; key on its sizes instead"
                )
            size = _size(value) if name in self.dims else None
            if size is not None:
                dims.append((self.dim_names[name], size))
            elif name in self.dims and self.explicit_dims:
                raise BadArgumentError(
                    f"{self.op}: dims names {name!r}, but its value {value!r} is not a size"
                )
            else:
                facts.append(f"{self.dim_names[name]}={escape(value_text(value))}")
        dtypes = [
            dtype_token(a.dtype)
            for a in (*args[: len(self.arg_names)], *self._kw_values(kwargs))
            if _is_tensor(a)
        ]
        tokens = [self.op_token, *dtypes, *facts]
        if self.revision:
            tokens.append(self.revision)
        from tunecache.keys import make_key

        try:
            return make_key("_".join(tokens), dims)
        except BadKeyError as error:
            raise BadArgumentError(f"{self.op}: cannot make a key of this call: {error}") from None

    def _kw_values(self, kwargs: Mapping[str, Any]) -> list[Any]:
        return [v for name, v in kwargs.items() if name in self.arg_set]
