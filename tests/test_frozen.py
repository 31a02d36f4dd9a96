"""Frozen values (tunecache.frozen) behave as frozen, slotted dataclasses of the same fields."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from tunecache.frozen import Frozen, FrozenError, fill


class Pair(Frozen):
    __match_args__ = ("left", "right")
    __slots__ = __match_args__
    left: int
    right: tuple[str, ...]

    def __init__(self, left: int, right: tuple[str, ...] = ()) -> None:
        if left < 0:
            raise ValueError("left must not be negative")
        fill(self, left, right)


@dataclasses.dataclass(frozen=True, slots=True)
class Twin:
    left: int
    right: tuple[str, ...] = ()


def test_a_frozen_value_compares_hashes_and_shows_as_its_dataclass_twin() -> None:
    pair, twin = Pair(1, ("a",)), Twin(1, ("a",))
    assert pair == Pair(1, ("a",)) and pair != Pair(2, ("a",))
    assert hash(pair) == hash(twin) == hash(Pair(1, ("a",)))
    assert repr(pair) == repr(twin).replace("Twin", "Pair")
    assert Pair.__match_args__ == Twin.__match_args__ == ("left", "right")
    assert pair != twin and pair != (1, ("a",))  # only a value of its own class is equal
    assert pair.values() == dataclasses.astuple(twin)
    match pair:
        case Pair(1, right):
            assert right == ("a",)
        case _:
            pytest.fail("a Frozen value matches by position, as a dataclass does")


def test_a_frozen_value_cannot_change() -> None:
    pair = Pair(1)
    with pytest.raises(FrozenError, match="cannot assign to field 'left'"):
        pair.left = 2
    with pytest.raises(AttributeError, match="cannot delete field 'right'"):
        del pair.right
    with pytest.raises(AttributeError):
        pair.other = 3  # type: ignore[attr-defined]
    assert pair.left == 1 and not hasattr(pair, "__dict__")


def test_copies_and_pickles_go_through_the_constructor() -> None:
    pair = Pair(1, ("a", "b"))
    for copied in (copy.copy(pair), copy.deepcopy(pair), pickle.loads(pickle.dumps(pair))):
        assert copied == pair and type(copied) is Pair
    assert pair.__reduce__() == (Pair, (1, ("a", "b")))  # so a copy is checked as it is built
