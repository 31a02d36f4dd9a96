"""A tunable op's generated hit path (tunecache.dispatch): it serves exactly what the full path
would, for every table in force, and takes the op's own signature only where that changes
nothing."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Any

from tunecache import make_key, profile
from tunecache.dispatch import Tunable
from tunecache.resolve import Table, set_default, using

CANDS = ("plain", "fast", "other")


def _op(
    shape: Callable[..., tuple[int, ...]], **candidates: Callable[..., Any]
) -> Tunable[..., Any]:
    return Tunable(
        "hp", dims=("n",), shape=shape, candidates=candidates, heuristic="plain", register=False
    )


def _table(choice: str, n: int = 4) -> Table:
    return Table.empty().derive(add=[(make_key("hp", n=n), CANDS, choice)])


def _tagged(tag: str) -> Callable[..., Any]:
    def candidate(a: int, b: int = 0) -> tuple[str, int, int]:
        return tag, a, b

    return candidate


def _parameters(op: Tunable[..., Any]) -> list[str]:
    return list(inspect.signature(type(op).__call__).parameters)


def test_the_ops_own_signature_where_shape_and_candidates_take_it() -> None:
    op = _op(lambda a, b: (a,), plain=_tagged("plain"), fast=_tagged("fast"), other=_tagged("o"))
    assert _parameters(op) == ["self", "a", "b"]
    assert op(4, 1) == ("plain", 4, 1) and op(a=4, b=2) == ("plain", 4, 2)
    with using(_table("fast")):
        assert op(b=3, a=4) == ("fast", 4, 3)
    # A later candidate that names its parameters otherwise: the generic form, same answers.
    op.add("swapped", lambda b, a: ("swapped", a, b))
    assert _parameters(op) == ["self", "args", "kwargs"]
    assert op(a=4, b=5) == ("plain", 4, 5)


def test_a_shape_function_with_defaults_or_odd_names_takes_the_generic_form() -> None:
    defaults = _op(lambda a, b=0: (a,), plain=_tagged("plain"), fast=_tagged("fast"))
    assert _parameters(defaults) == ["self", "args", "kwargs"]
    assert defaults(4) == ("plain", 4, 0)

    def shape(shape: int, self: int) -> tuple[int]:
        return (shape,)

    def plain(shape: int, self: int) -> tuple[int, int]:
        return shape, self

    odd = _op(shape, plain=plain)
    assert _parameters(odd) == ["self", "args", "kwargs"]
    assert odd(self=2, shape=4) == (4, 2)
    swapped = _op(lambda a, b: (a,), plain=lambda b, a: (a, b))
    assert swapped(a=1, b=2) == (1, 2)  # bound by name, as before


def test_every_change_of_the_table_in_force_is_served_at_once() -> None:
    op = _op(lambda a, b: (a,), plain=_tagged("plain"), fast=_tagged("fast"), other=_tagged("o"))
    assert op(4, 0)[0] == "plain"
    previous = set_default(_table("fast"))
    try:
        assert op(4, 0)[0] == "fast" and op(4, 0)[0] == "fast"
        set_default(_table("other"))
        assert op(4, 0)[0] == "o"
        with using(_table("fast")):
            assert op(4, 0)[0] == "fast"
        assert op(4, 0)[0] == "o"
        with profile() as p:
            assert op(4, 0)[0] == "o"
        assert [row.calls for row in p.rows()] == [1]
        assert op(4, 0)[0] == "o"
    finally:
        set_default(previous)
    assert op(4, 0)[0] == "plain"


def test_a_context_copied_inside_a_using_block_keeps_its_table_after_the_block() -> None:
    op = _op(lambda a, b: (a,), plain=_tagged("plain"), fast=_tagged("fast"), other=_tagged("o"))
    op(4, 0)  # the hit path serves the default table from here on

    async def main() -> tuple[str, str]:
        with using(_table("fast")):
            task = asyncio.ensure_future(asyncio.sleep(0, result=None))
            copied = contextvars.copy_context()
            later = asyncio.get_running_loop().create_future()

            async def in_task() -> str:
                await later
                return str(op(4, 0)[0])

            served = asyncio.ensure_future(in_task())
        await task
        later.set_result(None)  # the task runs its call after the block ended
        return await served, copied.run(lambda: str(op(4, 0)[0]))

    assert asyncio.run(main()) == ("fast", "fast")
    assert op(4, 0)[0] == "plain"


def test_threads_each_get_the_table_in_force_for_them() -> None:
    op = _op(lambda a, b: (a,), plain=_tagged("plain"), fast=_tagged("fast"), other=_tagged("o"))
    seen: dict[str, set[str]] = {"plain": set(), "fast": set(), "o": set()}
    start = threading.Barrier(3)

    def work(table: Table | None, tag: str) -> None:
        start.wait()
        for _ in range(2000):
            if table is None:
                seen[tag].add(op(4, 0)[0])
            else:
                with using(table):
                    seen[tag].add(op(4, 0)[0])

    threads = [
        threading.Thread(target=work, args=(None, "plain")),
        threading.Thread(target=work, args=(_table("fast"), "fast")),
        threading.Thread(target=work, args=(_table("other"), "o")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"plain": {"plain"}, "fast": {"fast"}, "o": {"o"}}
