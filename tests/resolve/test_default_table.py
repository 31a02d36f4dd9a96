"""The default table decided on first need (tunecache.resolve.contexts.settle): a configured
identity's cache serves a tunable op without set_default; with nothing configured, nothing
changes."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

import tunecache
from tests.conftest import python_output
from tunecache import make_key
from tunecache.dispatch import Tunable
from tunecache.errors import TunecacheWarning
from tunecache.resolve import Table, contexts, current, set_default, using

ran: list[str] = []


def _op() -> Tunable[[int], int]:
    def fast(n: int) -> int:
        ran.append("fast")
        return n

    def slow(n: int) -> int:
        ran.append("slow")
        return n

    return Tunable(
        "dflt",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"slow": slow, "fast": fast},
        heuristic="slow",
        register=False,
    )


IDENTITY = {"client": "myrt", "client_version": "1.0", "threads": 2}


def _tuned(root: Path) -> Path:
    """A cache of IDENTITY under `root` whose entry for dflt_n8 chose `fast`."""
    with tunecache.open(root=root, **IDENTITY) as cache:  # type: ignore[arg-type]
        cache.put(make_key("dflt", n=8), choice="fast", candidates=("slow", "fast"),
                  heuristic="slow", status="accepted")  # fmt: skip
        return cache.path


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ran.clear()


def test_with_nothing_configured_nothing_changes(_isolated_cache_root: Path) -> None:
    _tuned(_isolated_cache_root)  # a tuned cache of another client is there, unused
    op = _op()
    assert op(8) == 8 and ran == ["slow"]
    assert contexts.default_table.path is None and current().path is None
    assert op.resolve(8).source == "heuristic"


def test_a_configured_identity_serves_on_the_first_call(_isolated_cache_root: Path) -> None:
    db = _tuned(_isolated_cache_root)
    tunecache.configure(**IDENTITY)  # type: ignore[arg-type]
    op = _op()
    assert contexts.default_table is contexts.pending  # nothing opened before the first call
    assert op(8) == 8 and op(8) == 8
    assert ran == ["fast", "fast"]
    assert contexts.default_table.path == db and current() is contexts.default_table
    # Another shape answers the heuristic; explain and using still work as before.
    assert op(100) == 100 and ran[-1] == "slow"
    assert op.resolve(8).source == "exact"
    assert "exact" in " ".join(current().explain(make_key("dflt", n=8), ("slow", "fast")).steps)
    with using(Table.empty()):
        op(8)
    assert ran[-1] == "slow"
    op(8)
    assert ran[-1] == "fast"


def test_the_environment_configures_a_process(_isolated_cache_root: Path) -> None:
    _tuned(_isolated_cache_root)
    probe = "from tests.resolve.test_default_table import _op, ran\n_op()(8)\nprint(ran[0])\n"
    env = {**os.environ, "TUNECACHE_CLIENT": "myrt", "TUNECACHE_CLIENT_VERSION": "1.0"}
    env["TUNECACHE_THREADS"] = "2"

    def run(**extra: str) -> str:
        return python_output(probe, {**env, **extra}).strip()

    assert run() == "fast"
    assert run(TUNECACHE_DISABLE="1") == "slow"
    assert run(TUNECACHE_CLIENT_VERSION="9.9") == "slow"  # another version's cache: none


def test_disable_and_set_default_none_say_otherwise(
    _isolated_cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tuned(_isolated_cache_root)
    tunecache.configure(**IDENTITY)  # type: ignore[arg-type]
    monkeypatch.setenv("TUNECACHE_DISABLE", "1")
    op = _op()
    op(8)
    assert ran == ["slow"] and current().path is None
    monkeypatch.delenv("TUNECACHE_DISABLE")
    contexts.forget_default()
    previous = set_default(None)
    try:
        op(8)
        assert ran[-1] == "slow" and current().path is None
    finally:
        set_default(previous)
    op(8)  # the undecided default again: it opens the configured cache now
    assert ran[-1] == "fast"


def test_an_absent_cache_is_the_heuristic_and_nothing_is_created(
    _isolated_cache_root: Path,
) -> None:
    tunecache.configure(**IDENTITY)  # type: ignore[arg-type]
    op = _op()
    assert op(8) == 8 and ran == ["slow"]
    assert current().path is not None and not current().path.exists()  # type: ignore[union-attr]
    assert not _isolated_cache_root.exists()


def test_configure_after_the_first_call_is_followed(_isolated_cache_root: Path) -> None:
    _tuned(_isolated_cache_root)
    op = _op()
    op(8)
    assert ran == ["slow"]
    tunecache.configure(**IDENTITY)  # type: ignore[arg-type]
    op(8)
    assert ran[-1] == "fast"
    tunecache.configure(client_version="2.0")
    op(8)
    assert ran[-1] == "slow"


def test_a_configuration_that_cannot_be_used_is_said_once(
    _isolated_cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNECACHE_CLIENT", "myrt")  # and no version
    op = _op()
    with pytest.warns(TunecacheWarning, match="needs a client_version"):
        op(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op(8)
    assert ran == ["slow", "slow"]


def test_giving_the_default_back_gives_it_back_to_the_configuration(
    _isolated_cache_root: Path,
) -> None:
    _tuned(_isolated_cache_root)
    op = _op()
    op(8)  # decided: nothing is configured
    previous = set_default(Table.empty())
    set_default(previous)
    tunecache.configure(**IDENTITY)  # type: ignore[arg-type]
    op(8)
    assert ran == ["slow", "fast"]
    # set_default's own choice stays, whatever is configured after it.
    mine = Table.empty()
    previous = set_default(mine)
    try:
        tunecache.configure(threads=1)
        assert current() is mine
    finally:
        set_default(previous)


def test_a_configuration_changed_under_set_default_is_followed_once_given_back(
    _isolated_cache_root: Path,
) -> None:
    db = _tuned(_isolated_cache_root)
    op = _op()
    op(8)  # decided: nothing is configured, the empty table
    previous = set_default(Table.empty())
    tunecache.configure(**IDENTITY)  # type: ignore[arg-type]  # while the override stands
    set_default(previous)
    op(8)
    assert ran == ["slow", "fast"]  # the new identity's table, not the one decided before
    assert contexts.default_table.path == db
