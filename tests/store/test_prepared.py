"""tunecache.store.prepared: statements compiled once per dialect and run on the driver's cursor,
positional or named, with timestamps converted as SQLAlchemy itself converts them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, bindparam, create_engine, insert, select

from tunecache.errors import StoreError
from tunecache.store import models as tables
from tunecache.store.prepared import LOOKUP_SIZES, Lookup, Prepared

_M = tables.MODELS
WHEN = datetime(2031, 2, 3, 4, 5, 6, 7, tzinfo=UTC)
INSERT = Prepared(insert(_M), ("name", "fingerprint", "created_at"))
RENAME = Prepared(_M.update().where(_M.c.name == bindparam("w_name")), ("fingerprint", "w_name"))
BY_NAME = Lookup(select(_M.c.id, _M.c.name, _M.c.created_at), _M.c.name)


@pytest.fixture(params=["qmark", "named"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A plain SQLAlchemy engine on a new file with the cache's tables, in each parameter
    style the stdlib driver takes: the positional one tunecache uses, and a named one."""
    made = create_engine(f"sqlite:///{tmp_path / 'p.db'}", paramstyle=request.param)
    tables.Base.metadata.create_all(made)
    yield made
    made.dispose()


def test_rows_go_in_one_or_many_at_once_and_times_are_stored_as_sqlalchemy_stores_them(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        assert INSERT.run(conn, []) == 0
        assert INSERT.run(conn, [("a", "1", WHEN)]) == 1
        assert INSERT.run(conn, [(name, "1", WHEN) for name in "bcd"]) == 3
        conn.execute(insert(_M), {"name": "core", "fingerprint": "1", "created_at": WHEN})
        assert RENAME.run(conn, [("2", "b"), ("3", "c"), ("4", "nobody")]) == 2
    with engine.connect() as conn:
        stored = conn.exec_driver_sql("SELECT name, fingerprint, created_at FROM models")
        found = sorted(stored.fetchall())
        read = conn.execute(select(_M.c.created_at).where(_M.c.name == "a")).scalar()
    assert [row[:2] for row in found] == [
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("core", "1"),
        ("d", "1"),
    ]
    assert {row[2] for row in found} == {"2031-02-03 04:05:06.000007"}
    assert read == WHEN


@pytest.mark.parametrize("count", [0, 1, 2, 5, 17, LOOKUP_SIZES[-1] + 3])
def test_a_lookup_finds_the_rows_of_any_number_of_values(engine: Engine, count: int) -> None:
    names = [f"m{i}" for i in range(count)]
    with engine.begin() as conn:
        INSERT.run(conn, [(name, "f", WHEN) for name in [*names, "other"]])
        found = list(BY_NAME.rows(conn, [*names, "missing"]))
    assert sorted(name for _, name, _ in found) == sorted(names)
    assert {when for _, _, when in found} <= {WHEN}  # read back as aware datetimes


def test_a_lookup_takes_the_querys_own_parameters_first(engine: Engine) -> None:
    lookup = Lookup(
        select(_M.c.name).where(_M.c.fingerprint == bindparam("w_fingerprint")),
        _M.c.name,
        ("w_fingerprint",),
    )
    with engine.begin() as conn:
        INSERT.run(conn, [("a", "1", WHEN), ("b", "2", WHEN), ("c", "1", WHEN)])
        assert sorted(lookup.rows(conn, ["a", "b", "c"], "1")) == [("a",), ("c",)]


def test_a_statement_outside_a_transaction_is_refused(engine: Engine) -> None:
    # The engine issues BEGIN itself and leaves the driver in autocommit mode: run outside a
    # transaction, every row of a batch would commit on its own.
    with engine.connect() as conn:
        with pytest.raises(StoreError, match="inside a transaction"):
            INSERT.run(conn, [("a", "1", WHEN), ("b", "1", WHEN)])
        with pytest.raises(StoreError, match="inside a transaction"):
            list(BY_NAME.rows(conn, ["a"]))
        conn.rollback()
        assert conn.exec_driver_sql("SELECT count(*) FROM models").scalar() == 0
