"""Tests for tunecache.keys: the key text form and its validation.

Bucketing, which rounds a key's dims, is tested in test_bucketing.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tunecache.errors import BadKeyError
from tunecache.keys import MAX_DIM, MAX_TEXT_LEN, Key, format_key, make_key, parse

RFC_TEXT = "einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided"
RFC_SIGNATURE = "einsum_nk,km->mn_F32_F32_F32_aconst_nstrided"
RFC_DIMS = (("b", 1), ("m", 288), ("k", 96), ("n", 64))

# Visible ASCII other than "_": every character a token may hold.
TOKEN_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "_")
DIM_LIKE = re.compile(r"[a-z]+[0-9]+")


# --- strategies -------------------------------------------------------------------------------

op_names = st.one_of(
    st.from_regex(r"[a-z][a-z0-9]{0,9}", fullmatch=True),
    st.text(TOKEN_CHARS, min_size=1, max_size=10),
)
flags = st.from_regex(r"[a-z]{1,8}", fullmatch=True)
types = st.from_regex(r"[A-Z][A-Z0-9]{0,4}", fullmatch=True)
expressions = st.from_regex(r"[a-z]{1,3},[a-z]{1,3}->[a-z]{1,3}", fullmatch=True)
other_tokens = st.text(TOKEN_CHARS, min_size=1, max_size=10).filter(
    lambda t: not DIM_LIKE.fullmatch(t)
)
signature_tokens = st.one_of(flags, types, expressions, other_tokens)
signatures = st.builds(
    lambda op, rest: "_".join([op, *rest]),
    op_names,
    st.lists(signature_tokens, max_size=8),
)
dim_names = st.from_regex(r"[a-z]{1,4}", fullmatch=True)
dim_values = st.one_of(st.integers(0, 5000), st.integers(0, MAX_DIM))
dim_lists = st.lists(st.tuples(dim_names, dim_values), max_size=6, unique_by=lambda d: d[0])
keys = st.builds(make_key, signatures, dim_lists)


def flag_index(tokens: list[str]) -> int:
    """Return where the spec puts the dims block among signature tokens."""
    for i in range(1, len(tokens)):
        if re.fullmatch(r"[a-z]+", tokens[i]):
            return i
    return len(tokens)


def refusal(call: Callable[[str], object], text: str) -> str:
    """Return the message of the BadKeyError call(text) raises, failing the test if it raises
    none."""
    with pytest.raises(BadKeyError) as info:
        call(text)
    return str(info.value)


def bad_position(text: str) -> int:
    """Return the position parse names for text, failing the test if it accepts it."""
    message = refusal(parse, text)
    match = re.match(r"bad key text at position (\d+) \(", message)
    assert match, message
    return int(match.group(1))


# --- the RFC example --------------------------------------------------------------------------


def test_rfc_text_parses_to_its_signature_and_dims() -> None:
    key = parse(RFC_TEXT)
    assert key.signature == RFC_SIGNATURE
    assert key.dims == RFC_DIMS
    assert key == Key(RFC_SIGNATURE, RFC_DIMS)


def test_rfc_key_formats_back_to_the_text() -> None:
    assert format_key(parse(RFC_TEXT)) == RFC_TEXT
    assert Key(RFC_SIGNATURE, RFC_DIMS).text == RFC_TEXT


def test_make_key_with_keywords_gives_the_rfc_text() -> None:
    key = make_key(RFC_SIGNATURE, b=1, m=288, k=96, n=64)
    assert key.text == RFC_TEXT
    assert key == parse(RFC_TEXT)


def test_make_key_accepts_mapping_pairs_and_keywords_in_order() -> None:
    from_mapping = make_key(RFC_SIGNATURE, {"b": 1, "m": 288, "k": 96, "n": 64})
    from_pairs = make_key(RFC_SIGNATURE, [("b", 1), ("m", 288), ("k", 96), ("n", 64)])
    mixed = make_key(RFC_SIGNATURE, {"b": 1, "m": 288}, k=96, n=64)
    assert from_mapping == from_pairs == mixed == Key(RFC_SIGNATURE, RFC_DIMS)


def test_dim_order_is_part_of_the_key() -> None:
    a = make_key("mm_F32", m=2, n=3)
    b = make_key("mm_F32", n=3, m=2)
    assert a != b
    assert a.text == "mm_F32_m2_n3"
    assert b.text == "mm_F32_n3_m2"


def test_keyword_names_may_be_signature_or_dims() -> None:
    # The parameters are positional-only so that any lowercase dim name works as a keyword.
    key = make_key("op", signature=1, dims=2)
    assert key.dims == (("signature", 1), ("dims", 2))


# --- canonical placement ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signature", "dims", "text"),
    [
        ("mm", (), "mm"),
        ("mm", (("m", 0),), "mm_m0"),
        ("mm_F32", (("m", 4),), "mm_F32_m4"),
        ("mm_same_F32", (("m", 4),), "mm_m4_same_F32"),
        ("b1", (("m", 2),), "b1_m2"),  # token 0 is the op name, even if it looks like a dim
        ("conv_3x3_NCHW", (("c", 8), ("h", 7)), "conv_3x3_NCHW_c8_h7"),
    ],
)
def test_dims_block_goes_before_the_first_flag(
    signature: str, dims: tuple[tuple[str, int], ...], text: str
) -> None:
    key = make_key(signature, dims)
    assert key.text == text
    assert parse(text) == key


# --- properties -------------------------------------------------------------------------------


@given(keys)
def test_parse_inverts_format(key: Key) -> None:
    assert parse(format_key(key)) == key
    assert parse(key.text) == key


@given(signatures, dim_lists)
def test_make_key_keeps_what_it_was_given(signature: str, dims: list[tuple[str, int]]) -> None:
    key = make_key(signature, dims)
    assert key.signature == signature
    assert key.dims == tuple(dims)


@given(keys, keys)
def test_distinct_keys_have_distinct_texts(a: Key, b: Key) -> None:
    assert (a == b) == (a.text == b.text)


@given(keys, st.data())
def test_dims_block_anywhere_else_is_rejected(key: Key, data: st.DataObject) -> None:
    tokens = key.signature.split("_")
    assume(key.dims and len(tokens) > 1)
    block = [f"{name}{value}" for name, value in key.dims]
    canonical = flag_index(tokens)
    at = data.draw(st.sampled_from([i for i in range(1, len(tokens) + 1) if i != canonical]))
    text = "_".join([*tokens[:at], *block, *tokens[at:]])
    position = bad_position(text)
    # The first misplaced dim token is the one named.
    assert position == len("_".join(tokens[:at])) + 1


@given(keys, st.data())
def test_split_dims_block_is_rejected(key: Key, data: st.DataObject) -> None:
    assume(len(key.dims) >= 2)
    tokens = key.text.split("_")
    dims_at = [i for i, t in enumerate(tokens) if i and DIM_LIKE.fullmatch(t)]
    moved = tokens.pop(data.draw(st.sampled_from(dims_at)))
    # The other dims still form one run, from first to first + len(dims) - 2; inserting the moved
    # dim anywhere from first to just past that run would only reorder the block.
    first = dims_at[0]
    last = first + len(dims_at) - 1
    outside = [i for i in range(1, len(tokens) + 1) if not first <= i <= last]
    assume(outside)
    tokens.insert(data.draw(st.sampled_from(outside)), moved)
    with pytest.raises(BadKeyError):
        parse("_".join(tokens))


@given(
    st.one_of(
        st.text(TOKEN_CHARS + "____", max_size=40),
        st.lists(
            st.one_of(signature_tokens, st.from_regex(r"[a-z]{1,3}[0-9]{1,4}", fullmatch=True))
        ).map("_".join),
        st.text(max_size=20),
    )
)
def test_every_accepted_text_is_canonical(text: str) -> None:
    try:
        key = parse(text)
    except BadKeyError:
        return
    assert format_key(key) == text
    assert make_key(key.signature, key.dims) == key


# --- rejected text, with the position named ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "token"),
    [
        ("", 0, ""),
        ("_mm", 0, ""),
        ("mm__F32", 3, ""),
        ("mm_F32_", 7, ""),
        ("mm_F 32", 4, "F 32"),  # the bad character itself
        ("mm_F32\n", 6, "F32\n"),
        ("mm_F32_caf\u00e9", 10, "caf\u00e9"),
        ("mm_m\u0661", 4, "m\u0661"),  # an Arabic-Indic digit is not a digit here
        ("mm_m0288", 3, "m0288"),
        ("mm_m00", 3, "m00"),
        ("mm_m1_m2", 6, "m2"),
        ("mm_m1_F32_n2", 3, "m1"),
        ("mm_F32_m1_X_n2", 7, "m1"),
        ("mm_F32_aconst_m1", 14, "m1"),
        ("mm_m9223372036854775808", 3, "m9223372036854775808"),
        ("mm_m99999999999999999999999", 3, "m99999999999999999999999"),
        (
            "einsum_nk,km->mn_f32_F32_F32_b1_m288_k96_n64_aconst_nstrided",
            17,
            "f32",
        ),
    ],
)
def test_bad_text_names_position_and_token(text: str, position: int, token: str) -> None:
    assert refusal(parse, text).startswith(f"bad key text at position {position} ({token!r}): ")


def test_lowercase_type_error_says_to_write_it_in_uppercase() -> None:
    with pytest.raises(BadKeyError, match=r"uppercase \('F32'\)"):
        parse("einsum_nk,km->mn_f32_F32_F32_b1_m288_k96_n64_aconst_nstrided")


def test_largest_dim_is_accepted() -> None:
    assert parse(f"mm_m{MAX_DIM}").dims == (("m", MAX_DIM),)


@pytest.mark.parametrize("value", [None, 42, b"mm_m1", ["mm"]])
def test_parse_rejects_non_str(value: object) -> None:
    with pytest.raises(BadKeyError, match="must be a str"):
        parse(value)  # type: ignore[arg-type]


def test_parse_rejects_long_text_by_length() -> None:
    assert parse("m" * MAX_TEXT_LEN) == Key("m" * MAX_TEXT_LEN)
    with pytest.raises(BadKeyError, match=f"at most {MAX_TEXT_LEN}"):
        parse("m" * (MAX_TEXT_LEN + 1))
    with pytest.raises(BadKeyError, match="at most"):
        parse("_" * 10_000_000)


# --- make_key validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signature", "position", "token"),
    [
        ("", 0, ""),
        ("mm_f32", 3, "f32"),
        ("mm_F32_m0288", 7, "m0288"),
        ("mm__F32", 3, ""),
        ("mm_F32 x", 6, "F32 x"),
    ],
)
def test_make_key_names_bad_signature_token(signature: str, position: int, token: str) -> None:
    message = refusal(make_key, signature)
    assert message.startswith(f"bad signature at position {position} ({token!r}): ")


def test_make_key_says_to_write_types_in_uppercase() -> None:
    with pytest.raises(BadKeyError, match=r"uppercase \('F32'\)"):
        make_key("einsum_nk,km->mn_f32_F32_F32_aconst", b=1)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ({"m": True}, "bool"),
        ({"m": -1}, "between 0"),
        ({"m": MAX_DIM + 1}, "between 0"),
        ({"m": 2.0}, "float"),
        ({"m": "2"}, "str"),
        ({"M": 2}, "bad dim name"),
        ({"m1": 2}, "bad dim name"),
        ({"": 2}, "bad dim name"),
        ({"\u00e9": 2}, "bad dim name"),
        ([("m", 1), ("m", 2)], "duplicate"),
        ([("m", 1, 2)], "pairs"),
        ("m288", "mapping"),
    ],
)
def test_make_key_rejects_bad_dims(dims: object, message: str) -> None:
    with pytest.raises(BadKeyError, match=message):
        make_key("mm_F32", dims)  # type: ignore[arg-type]


def test_make_key_rejects_a_dim_given_twice_positionally_and_by_keyword() -> None:
    with pytest.raises(BadKeyError, match="duplicate dim name 'm'"):
        make_key("mm_F32", {"m": 1}, m=2)


def test_make_key_rejects_non_str_signature() -> None:
    with pytest.raises(BadKeyError, match="must be a str"):
        make_key(None)  # type: ignore[arg-type]


def test_make_key_rejects_a_key_too_long_to_parse() -> None:
    with pytest.raises(BadKeyError, match="at most"):
        make_key("m" * (MAX_TEXT_LEN - 3), m=1000)


def test_make_key_takes_integer_like_values_as_plain_ints() -> None:
    class Size:
        def __index__(self) -> int:
            return 7

    key = make_key("mm", m=Size())  # type: ignore[arg-type]
    assert key.dims == (("m", 7),)
    assert type(key.dims[0][1]) is int


def test_raw_constructor_is_a_plain_hashable_tuple() -> None:
    key = Key(RFC_SIGNATURE, RFC_DIMS)
    assert {key: 1}[parse(RFC_TEXT)] == 1
    assert Key("mm").dims == ()


# The grammar's character classes are str methods, not patterns (compiling those cost every
# process's first key ~0.5 ms): each answers as the pattern it stands for, on any text.
tokens_anywhere = st.one_of(
    st.text(max_size=12),
    st.text("az09AZ_ \n\x7f\u00e9\u0663", max_size=12),
    st.from_regex(r"[a-z]{1,4}[0-9]{1,4}", fullmatch=True),
)


@given(tokens_anywhere)
def test_the_character_classes_answer_as_their_patterns(token: str) -> None:
    from tunecache import keys

    pair = re.fullmatch(r"([a-z]+)([0-9]+)", token)
    assert keys._dim_like(token) == (None if pair is None else pair.groups())
    assert keys._lowercase(token) == (re.fullmatch(r"[a-z]+", token) is not None)
    bad = re.search(r"[^\x21-\x5e\x60-\x7e]", token)
    assert keys._bad_char(token) == (None if bad is None else bad.start())


def test_the_key_is_a_named_tuple_of_its_own_name() -> None:
    import pickle

    key = make_key("mm_F32", m=4)
    assert isinstance(key, tuple) and Key._fields == ("signature", "dims")
    assert repr(key) == "Key(signature='mm_F32', dims=(('m', 4),))"
    assert pickle.loads(pickle.dumps(key)) == key and type(pickle.loads(pickle.dumps(key))) is Key
    assert key._replace(dims=()) == Key("mm_F32") and type(key._replace(dims=())) is Key
    assert Key("a").dims == () and Key("a").text == "a"
