"""The nearest-shape index: the search against brute force, caps, symbolic dims, parsing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.resolve.conftest import CANDS, brute_force, mm, put, table
from tunecache import Key, make_key
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.resolve import Answer, Table, check_max_distance
from tunecache.resolve.grid import check_scenarios, parse_dims


def test_the_cap_is_configurable(store: Cache, db: Path, device: Device) -> None:
    put(store, mm(256), "blocked")
    assert table(db, device, max_distance=3).resolve(mm(2048), CANDS, "blas").choice == "blocked"
    exact_only = table(db, device, max_distance=0)
    assert exact_only.resolve(mm(257), CANDS, "blas").source == "heuristic"
    assert exact_only.resolve(mm(256), CANDS, "blas").source == "exact"
    for bad in (-1, math.inf, math.nan, "2", True):
        with pytest.raises(BadArgumentError):
            table(db, device, max_distance=bad)


def test_check_max_distance_takes_finite_numbers_from_zero_up() -> None:
    assert check_max_distance(0) == 0.0
    assert check_max_distance(2) == 2.0 and isinstance(check_max_distance(2), float)
    for bad in (-0.5, math.inf, math.nan, "1", False, None):
        with pytest.raises(BadArgumentError, match="max_distance"):
            check_max_distance(bad)


def test_dims_text_parses_into_names_and_values() -> None:
    assert parse_dims("m=288 k=96 n=0") == (("m", "k", "n"), (288, 96, 0))
    assert parse_dims("") == ((), ())


# -- scenarios -------------------------------------------------------------------------------------


def attn(s: int, h: int = 4096) -> Key:
    return make_key("attention_F16", s=s, h=h)


def test_a_symbolic_dim_takes_the_nearest_tuned_size(
    store: Cache, db: Path, device: Device
) -> None:
    # An LLM tunes decode (S=1) and prefill (S in 64, 256, 1024).
    for s, choice in [(1, "naive"), (64, "blocked"), (256, "blocked"), (1024, "blas")]:
        put(store, attn(s), choice)
    llm = table(db, device, model="llm", scenarios={"s": (1, 64, 256, 1024)})
    plain = table(db, device)
    assert llm.scenarios == {"s": (1, 64, 256, 1024)}
    # S=6 is 2.6 octaves from decode: beyond the cap, but S is symbolic.
    assert llm.resolve(attn(6), CANDS, "blas").choice == "naive"
    assert plain.resolve(attn(6), CANDS, "blas").source == "heuristic"
    assert llm.resolve(attn(600), CANDS, "blas").choice == "blas"  # nearer 1024 than 256
    assert llm.resolve(attn(20_000), CANDS, "blas").borrowed_from == attn(1024)
    # Dims that are not symbolic keep their cap.
    assert llm.resolve(attn(6, h=16384), CANDS, "blas").source == "heuristic"


def test_bad_scenarios_are_refused(db: Path, device: Device) -> None:
    for bad in ({"S": (1,)}, {"s": ()}, {"s": (-1,)}, {"s": ("x",)}, ["s"]):
        with pytest.raises(BadArgumentError):
            table(db, device, scenarios=bad)


def test_scenarios_are_kept_sorted_without_repeats() -> None:
    assert check_scenarios({"s": [256, 1, 64, 1]}) == {"s": (1, 64, 256)}
    assert check_scenarios(None) == {}


# -- the nearest-shape search against brute force ------------------------------------------------

sizes = st.integers(0, 1 << 20)
shapes = st.tuples(sizes, sizes, sizes)


@settings(max_examples=150, deadline=None)
@given(
    tuned=st.dictionaries(shapes, st.sampled_from(CANDS), min_size=1, max_size=60),
    queries=st.lists(shapes, min_size=1, max_size=8),
    cap=st.sampled_from([0.0, 0.5, 1.0, 2.5]),
    symbolic=st.sampled_from([(), ("m",), ("m", "n")]),
)
def test_the_nearest_search_agrees_with_brute_force(
    tuned: dict[tuple[int, int, int], str],
    queries: list[tuple[int, int, int]],
    cap: float,
    symbolic: tuple[str, ...],
) -> None:
    t = Table.empty(max_distance=cap, scenarios={name: (1,) for name in symbolic}).derive(
        add=[(mm(*shape), CANDS, choice) for shape, choice in tuned.items()]
    )
    indexes = {("m", "k", "n").index(name) for name in symbolic}
    for query in queries:
        answer = t.resolve(mm(*query), CANDS, "blas")
        expected = brute_force(tuned, query, cap, indexes)
        if query in tuned:
            assert answer == Answer(tuned[query], "exact", None, 0.0)
        elif expected is None:
            assert answer == Answer("blas", "heuristic")
        else:
            assert (answer.source, answer.choice, answer.borrowed_from) == (
                "nearest",
                expected[0],
                mm(*expected[1]),
            )
