"""The table in force: the process default, and a context's own inside `using`."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.resolve.conftest import CANDS, mm, put, table
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.resolve import Table, contexts, current, set_default, using


def test_using_scopes_a_table_to_a_block_and_restores_the_outer_one(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256), "blocked")
    tuned, empty = table(db, device), Table.empty()
    previous = set_default(tuned)
    try:
        assert current() is tuned
        with using(empty) as inner:
            assert inner is empty and current() is empty
            with using(tuned):
                assert current() is tuned
            assert current() is empty
        assert current() is tuned
    finally:
        set_default(previous)
    with pytest.raises(BadArgumentError):
        using("not a table")  # type: ignore[arg-type]


def test_a_table_set_in_one_thread_stays_in_that_thread(
    store: Cache, db: Path, device: Device
) -> None:
    put(store, mm(256), "blocked")
    tuned = table(db, device)
    seen: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def worker(name: str, t: Table | None) -> None:
        if t is None:
            barrier.wait()
            seen[name] = current().resolve(mm(256), CANDS, "blas").source
            barrier.wait()
            return
        with using(t):
            barrier.wait()
            seen[name] = current().resolve(mm(256), CANDS, "blas").source
            barrier.wait()

    threads = [
        threading.Thread(target=worker, args=("tuned", tuned)),
        threading.Thread(target=worker, args=("default", None)),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert seen == {"tuned": "exact", "default": "heuristic"}


def test_the_places_dispatch_reads_follow_set_default_and_using() -> None:
    # tunecache.dispatch reads these two on every call, without calling current().
    mine, other = Table.empty(), Table.empty()
    assert contexts.context_table.get() is None
    previous = set_default(mine)
    try:
        assert contexts.default_table is mine
        with using(other):
            assert contexts.context_table.get() is other
        assert contexts.context_table.get() is None
    finally:
        set_default(previous)
    assert contexts.default_table is previous
    set_default(None)
    try:
        assert contexts.default_table.path is None and contexts.default_table is current()
        with pytest.raises(BadArgumentError):
            set_default("not a table")  # type: ignore[arg-type]
    finally:
        set_default(previous)
