"""Tests for tunecache.bucketing: rounding a key's dims up to a level's boundaries."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.test_keys import RFC_TEXT, keys
from tunecache.bucketing import Bucketing
from tunecache.errors import BadKeyError
from tunecache.keys import MAX_DIM, Key, make_key, parse


@pytest.mark.parametrize(
    ("n", "bucket"),
    [(0, 0), (1, 1), (2, 2), (3, 4), (768, 1024), (1024, 1024), (1025, 2048), (2**62, 2**62)],
)
def test_base_two_rounds_up_to_powers_of_two(n: int, bucket: int) -> None:
    assert Bucketing.level("balanced").bucket(n) == bucket


def test_top_bucket_is_the_largest_dim() -> None:
    # 2**63 does not fit a dim, so values above 2**62 share the top bucket MAX_DIM.
    balanced = Bucketing.level("balanced")
    assert balanced.bucket(2**62 + 1) == MAX_DIM
    assert balanced.bucket(MAX_DIM) == MAX_DIM


def test_base_three_halves_boundaries_are_exact_ceilings() -> None:
    extensive = Bucketing.level("extensive")
    boundaries = sorted({extensive.bucket(n) for n in range(1, 3000)})
    assert boundaries[:10] == [1, 2, 3, 4, 6, 8, 12, 18, 26, 39]
    # ceil(1.5**j) computed exactly for a power where floats are off by more than one.
    j = 100
    exact = -(-(3**j) // 2**j)
    assert extensive.bucket(exact) == exact
    assert extensive.bucket(exact - 1) == exact
    assert extensive.bucket(exact + 1) > exact


def test_base_five_halves_boundaries() -> None:
    minimal = Bucketing.level("minimal")
    assert [minimal.bucket(n) for n in (1, 2, 3, 4, 7, 16, 17, 40)] == [1, 3, 3, 7, 7, 16, 40, 40]


@pytest.mark.parametrize(
    ("level", "base"),
    [
        ("exact", None),
        ("full", None),
        ("extensive", Fraction(3, 2)),
        ("balanced", Fraction(2)),
        ("minimal", Fraction(5, 2)),
        ("Balanced", Fraction(2)),
        (1.5, Fraction(3, 2)),
        (2, Fraction(2)),
        (2.5, Fraction(5, 2)),
        (Fraction(5, 2), Fraction(5, 2)),
        ("1.5", Fraction(3, 2)),
    ],
)
def test_levels_and_numeric_bases(level: str | float | Fraction, base: Fraction | None) -> None:
    assert Bucketing.level(level).base == base


@pytest.mark.parametrize("level", ["fast", 3, 1, 0, -2, 1.25, True, "", "nan"])
def test_unsupported_levels_are_rejected(level: object) -> None:
    with pytest.raises(BadKeyError, match="bucketing"):
        Bucketing.level(level)  # type: ignore[arg-type]


def test_constructor_validates_too() -> None:
    with pytest.raises(BadKeyError):
        Bucketing(Fraction(3))
    with pytest.raises(BadKeyError, match="bad dim name"):
        Bucketing(Fraction(2), frozenset({"M"}))
    assert Bucketing(2) == Bucketing.level("balanced")  # type: ignore[arg-type]


def test_exact_changes_nothing() -> None:
    key = parse(RFC_TEXT)
    assert Bucketing.exact() == Bucketing()
    assert Bucketing.exact().apply(key) is key
    assert Bucketing.exact().bucket(1025) == 1025


def test_apply_rounds_all_dims_by_default() -> None:
    key = make_key("mm_F32_aconst", b=1, m=768, k=1000, n=1025)
    bucketed = Bucketing.level("balanced").apply(key)
    assert bucketed == make_key("mm_F32_aconst", b=1, m=1024, k=1024, n=2048)
    assert bucketed.text == "mm_F32_b1_m1024_k1024_n2048_aconst"


def test_apply_rounds_only_the_chosen_dims() -> None:
    key = make_key("mm_F32", b=3, m=768, k=1000, n=1025)
    bucketed = Bucketing.level("balanced", dims={"m", "n", "zz"}).apply(key)
    assert bucketed.dims == (("b", 3), ("m", 1024), ("k", 1000), ("n", 2048))


@pytest.mark.parametrize("n", [-1, MAX_DIM + 1])
def test_bucket_rejects_values_that_are_not_dims(n: int) -> None:
    with pytest.raises(BadKeyError, match="cannot bucket"):
        Bucketing.level("balanced").bucket(n)
    # apply takes raw keys too, which nothing validated.
    with pytest.raises(BadKeyError, match="cannot bucket dim 'm'"):
        Bucketing.level("balanced").apply(Key("mm", (("m", n),)))


levels = st.sampled_from(["extensive", "balanced", "minimal"]).map(Bucketing.level)
sizes = st.one_of(st.integers(0, 10_000), st.integers(0, MAX_DIM))


@given(levels, sizes, sizes)
def test_bucket_properties(bucketing: Bucketing, a: int, b: int) -> None:
    low, high = min(a, b), max(a, b)
    bucket = bucketing.bucket
    assert bucket(low) >= low
    assert bucket(low) <= bucket(high)
    assert bucket(bucket(low)) == bucket(low)
    # Every value strictly between a value and its bucket maps to the same bucket.
    assert bucket(max(low, bucket(low) - 1)) == bucket(low)


@given(levels, st.data())
def test_boundaries_are_fixed_points(bucketing: Bucketing, data: st.DataObject) -> None:
    base = bucketing.base
    assert base is not None
    top = 0  # the largest j whose boundary ceil(base**j) is still a dim
    while base ** (top + 1) <= MAX_DIM:
        top += 1
    power = base ** data.draw(st.integers(0, top))
    boundary = -(-power.numerator // power.denominator)
    assert bucketing.bucket(boundary) == boundary
    assert bucketing.bucket(boundary + 1) > boundary


@given(st.integers(1, MAX_DIM))
def test_base_two_bucket_is_less_than_double(n: int) -> None:
    bucket = Bucketing.level("balanced").bucket(n)
    assert n <= bucket < 2 * n


@given(keys, levels)
def test_bucketed_keys_stay_valid(key: Key, bucketing: Bucketing) -> None:
    bucketed = bucketing.apply(key)
    assert bucketed.signature == key.signature
    assert [name for name, _ in bucketed.dims] == [name for name, _ in key.dims]
    assert bucketing.apply(bucketed) == bucketed
    assert parse(bucketed.text) == bucketed
