"""Dispatch: a tunable function runs the candidate the current table picks, and profiles keys."""

from __future__ import annotations

import inspect
import pydoc
from pathlib import Path

import numpy as np
import pytest

from tunecache import Key, make_key
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.dispatch import Tunable, profile, registry, tunable
from tunecache.errors import BadArgumentError
from tunecache.resolve import Table, using

calls: list[str] = []


def _shape(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    return a.shape[0], a.shape[1], b.shape[1]


def _dtype(a: np.ndarray, b: np.ndarray) -> tuple[str]:
    return (a.dtype.name.upper(),)


@tunable("dmm", dims=("m", "k", "n"), shape=_shape, facts=_dtype)
def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The product of a (m, k) and b (k, n), as numpy computes it."""
    calls.append("matmul")
    return a @ b


@matmul.candidate("einsum")
def _einsum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    calls.append("einsum")
    return np.einsum("ij,jk->ik", a, b)


@matmul.candidate("dot")
def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    calls.append("dot")
    return np.dot(a, b)


def arrays(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.ones((m, k), dtype=np.float32), np.ones((k, n), dtype=np.float32)


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.clear()


def test_the_key_comes_from_the_arguments() -> None:
    a, b = arrays(8, 16, 4)
    assert matmul.key(a, b) == make_key("dmm_FLOAT32", m=8, k=16, n=4)
    assert matmul.candidates == ("matmul", "einsum", "dot")
    assert registry()["dmm"] is matmul


def test_without_a_table_every_call_runs_the_heuristic() -> None:
    a, b = arrays(8, 16, 4)
    out = matmul(a, b)
    assert np.array_equal(out, a @ b)
    assert calls == ["matmul"]
    assert matmul.resolve(a, b).source == "heuristic"


def test_each_call_runs_the_candidate_the_current_table_picks(
    tmp_path: Path, device: Device
) -> None:
    db = tmp_path / "cache.db"
    with Cache.open(path=db, device=device) as c:
        for shape, choice in [((8, 16, 4), "einsum"), ((64, 64, 64), "dot")]:
            key = make_key("dmm_FLOAT32", m=shape[0], k=shape[1], n=shape[2])
            c.put(key, choice=choice, candidates=matmul.candidates, status="accepted")
    tuned = Table.open(path=db, device=device)
    with using(tuned):
        for _ in range(3):
            matmul(*arrays(8, 16, 4))  # exact
        matmul(*arrays(70, 64, 64))  # nearest to 64^3
        matmul(*arrays(5000, 64, 64))  # far from both: the heuristic
        assert np.array_equal(matmul(*arrays(8, 16, 4)), np.full((8, 4), 16, dtype=np.float32))
    matmul(*arrays(8, 16, 4))  # outside the block: the default table (empty)
    assert calls == ["einsum"] * 3 + ["dot", "matmul", "einsum", "matmul"]
    # Another dtype is another signature, with no entries.
    with using(tuned):
        matmul(np.ones((8, 16)), np.ones((16, 4)))
    assert calls[-1] == "matmul"


def test_switching_tables_switches_choices_back_to_back() -> None:
    a, b = arrays(32, 32, 32)
    key = matmul.key(a, b)
    with_entry = Table.empty().derive(add=[(key, matmul.candidates, "dot")])
    without = Table.empty()
    for _ in range(2):
        with using(with_entry):
            matmul(a, b)
        with using(without):
            matmul(a, b)
    assert calls == ["dot", "matmul", "dot", "matmul"]


def test_a_heuristic_may_depend_on_the_dims() -> None:
    order: list[str] = []
    op = Tunable(
        "pick",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={
            "small": lambda n: order.append("small"),
            "large": lambda n: order.append("large"),
        },
        heuristic=lambda n: "small" if n < 100 else "large",
        register=False,
    )
    op(5)
    op(500)
    assert order == ["small", "large"]
    bad = Tunable(
        "bad",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"x": print},
        heuristic=lambda n: "y",
        register=False,
    )
    with pytest.raises(BadArgumentError, match="unknown 'y'"):
        bad(1)


def test_adding_a_candidate_changes_the_list_and_forgets_old_answers() -> None:
    op = Tunable(
        "grow",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"a": lambda n: "a"},
        heuristic="a",
        register=False,
    )
    key = make_key("grow", n=4)
    t = Table.empty().derive(add=[(key, ("a", "b"), "b")])
    with using(t):
        assert op(4) == "a"  # the entry is for the list (a, b); the op's list is (a,)
        op.add("b", lambda n: "b")
        assert op(4) == "b"


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(BadArgumentError):
        Tunable(
            "Bad Sig", dims=("n",), shape=lambda n: (n,), candidates={"a": print}, heuristic="a"
        )
    with pytest.raises(BadArgumentError):
        Tunable("ok", dims=("N",), shape=lambda n: (n,), candidates={"a": print}, heuristic="a")
    with pytest.raises(BadArgumentError):
        Tunable("ok", dims=("n",), shape=lambda n: (n,), candidates={"a": print}, heuristic="b")
    with pytest.raises(BadArgumentError):
        Tunable("ok", dims=("n",), shape=lambda n: (n,), candidates={}, heuristic="b")
    op = Tunable(
        "ok",
        dims=("n",),
        shape=lambda n: (n, n),
        candidates={"a": print},
        heuristic="a",
        register=False,
    )
    with pytest.raises(BadArgumentError, match="2 sizes"):
        op(3)


def _op(**declared: object) -> Tunable[..., object]:
    return Tunable(
        "dcmp",
        dims=("n",),
        shape=lambda x: (len(x),),
        candidates={"a": list, "b": list},
        heuristic="a",
        register=False,
        **declared,  # type: ignore[arg-type]
    )


def test_an_op_compares_a_candidates_output_with_the_heuristics() -> None:
    x = np.linspace(0.0, 1.0, 5)
    assert matmul.compare(x, x + 1e-12) is None
    assert matmul.compare(x, x + 0.1) is not None
    # A declared tolerance: relative to the reference's largest magnitude.
    assert _op(tolerance=0.2).compare(x, x + 0.1) is None
    assert _op(tolerance=0.0).compare(x, x + 1e-12) is not None
    # A check hook replaces the comparison: True or None agree, False or a text differ.
    assert _op(check=lambda e, a: True).compare(x, x + 5) is None
    assert _op(check=lambda e, a: None).compare(x, x + 5) is None
    assert _op(check=lambda e, a: False).compare(x, x) == "the op's check says it differs"
    assert _op(check=lambda e, a: "rows\nswapped").compare(x, x) == "rows swapped"
    with pytest.raises(BadArgumentError, match="check returned int"):
        _op(check=lambda e, a: 3).compare(x, x)
    with pytest.raises(ZeroDivisionError):  # the op's own bug, not the candidate's
        _op(check=lambda e, a: 1 / 0).compare(x, x)
    for bad in ({"tolerance": -1.0}, {"tolerance": True}, {"tolerance": float("inf")}):
        with pytest.raises(BadArgumentError, match="tolerance"):
            _op(**bad)
    with pytest.raises(BadArgumentError, match="check is a function"):
        _op(check="yes")
    declared = tunable("dcmp2", dims=("n",), shape=lambda x: (len(x),), tolerance=0.5)(list)
    assert declared.compare(x, x * 1.2) is None


def test_profiling_records_calls_and_time_per_key_only_while_on() -> None:
    small, large = arrays(4, 4, 4), arrays(256, 256, 256)
    matmul(*small)  # before: not recorded
    with profile() as p:
        for _ in range(5):
            matmul(*small)
        for _ in range(2):
            matmul(*large)
    matmul(*large)  # after: not recorded
    rows = p.rows()
    assert {(r.key, r.calls) for r in rows} == {
        (matmul.key(*small), 5),
        (matmul.key(*large), 2),
    }
    assert all(r.seconds > 0 and r.choice == "matmul" and r.source == "heuristic" for r in rows)
    assert rows == sorted(rows, key=lambda r: -r.seconds)
    heavy = p.heavy(0.5)
    assert len(heavy) == 1 and heavy[0].key == rows[0].key
    assert [r.key for r in p.heavy(1.0)] == [r.key for r in rows]
    assert p.counters()["heuristic"] == 7
    with pytest.raises(BadArgumentError):
        p.heavy(0)


def test_a_profile_says_the_candidate_its_calls_ran_whatever_another_table_answered() -> None:
    a, b = arrays(16, 16, 16)
    key = matmul.key(a, b)
    plain = Table.empty()
    dot = plain.derive(add=[(key, matmul.candidates, "dot")])
    with using(plain):
        matmul(a, b)  # the plain table's own memo now holds the heuristic's function
    with using(dot):
        matmul(a, b)  # the op's last answer is now dot's
    with profile() as p, using(plain):
        matmul(a, b)  # a hit of the plain table's memo: the heuristic ran
    (row,) = p.rows()
    assert (row.choice, row.source) == ("matmul", "")  # the last answer (dot's) is not it
    # Calls of one key under two tables ran two candidates: no one choice stands for them.
    with profile() as both:
        with using(plain):
            matmul(a, b)
        with using(dot):
            matmul(a, b)
    (row,) = both.rows()
    assert row.calls == 2 and row.choice == ""


def test_a_capturing_profile_keeps_the_first_call_of_each_key() -> None:
    first, second, other = arrays(8, 4, 2), arrays(8, 4, 2), arrays(3, 3, 3)
    with profile() as plain:
        matmul(*first)
    assert plain.captured() == {}
    with profile(capture=True) as p:
        matmul(*first)
        matmul(*second)
        matmul(*other)
    captured = p.captured()
    assert set(captured) == {matmul.key(*first), matmul.key(*other)}
    kept = captured[matmul.key(*first)]
    assert kept.op is matmul and kept.kwargs == {}
    assert kept.args[0] is first[0] and kept.args[1] is first[1]


def test_profiling_passes_exceptions_through_and_still_counts_the_call() -> None:
    def boom(n: int) -> None:
        raise ValueError("candidate failed")

    op = Tunable(
        "boom",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"x": boom},
        heuristic="x",
        register=False,
    )
    with profile() as p, pytest.raises(ValueError, match="candidate failed"):
        op(1)
    assert [(r.key, r.calls) for r in p.rows()] == [(Key("boom", (("n", 1),)), 1)]


def _plain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b


def test_a_decorated_op_keeps_the_functions_name_docstring_and_signature() -> None:
    function = matmul.functions["matmul"]
    assert (matmul.__name__, matmul.__qualname__, matmul.__module__) == (
        "matmul",
        "matmul",
        __name__,
    )
    assert matmul.__doc__ == "The product of a (m, k) and b (k, n), as numpy computes it."
    assert matmul.__wrapped__ is function
    assert inspect.signature(matmul) == inspect.signature(function)
    # What help(matmul) prints: the user's own text, not the Tunable class's.
    shown = pydoc.render_doc(matmul, renderer=pydoc.plaintext)
    assert "The product of a (m, k) and b (k, n)" in shown
    assert (Tunable.__doc__ or "").splitlines()[0] not in shown
    # The class keeps its own docstring, and so does another op.
    assert Tunable.__doc__ != matmul.__doc__
    assert tunable("dplain", dims=("n",), shape=lambda a, b: (1,))(_plain).__doc__ is None


def test_the_functions_own_attributes_never_replace_the_ops() -> None:
    def shadowing(n: int) -> int:
        return n

    shadowing.dims = "not the dims"  # type: ignore[attr-defined]
    shadowing.signature = "not the signature"  # type: ignore[attr-defined]
    op = tunable("dshadow", dims=("n",), shape=lambda n: (n,))(shadowing)
    assert (op.signature, op.dims) == ("dshadow", ("n",))
    assert op(3) == 3 and op.__name__ == "shadowing"
