"""Immutable values of named fields, as frozen dataclasses behave, without `dataclasses`.

`dataclasses` pulls in `inspect` (and `ast`, `dis`, `tokenize`): about 6 ms of a process's
start, more than the rest of `tunecache where` imports. The values every command builds at its
start (the device identity, the rows of `tunecache list`) subclass `Frozen` instead: each names
its fields in order as `__match_args__`, makes them its `__slots__`, and sets them in its
`__init__` with `fill`. `Frozen` gives what `@dataclass(frozen=True,
slots=True)` would, field by field: equality with a value of the same class, a hash, the same
repr, refusal to assign or delete a field, and copying and pickling through the constructor.
"""

from __future__ import annotations

__all__ = ["Frozen", "FrozenError", "fill"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Self


class FrozenError(AttributeError):
    """A field of a frozen value was assigned or deleted (as dataclasses' FrozenInstanceError)."""


class Frozen:
    """An immutable value whose fields are its class's `__match_args__`, in order."""

    __slots__ = ()
    #: the fields' names, in order, as a dataclass gives them; a subclass's `__slots__` too
    __match_args__: tuple[str, ...] = ()

    def values(self) -> tuple[Any, ...]:
        """The fields' values, in order."""
        return tuple([getattr(self, name) for name in self.__match_args__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Frozen)
        return self.values() == other.values()

    def __hash__(self) -> int:
        return hash(self.values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[type[Self], tuple[Any, ...]]:
        # Rebuilt through the constructor, which checks what it is given.
        return self.__class__, self.values()


def fill(value: Frozen, *values: object) -> None:
    """Set every field of a Frozen value, in order: for its own `__init__`, once."""
    setter = object.__setattr__
    for name, field in zip(value.__match_args__, values, strict=True):
        setter(value, name, field)
