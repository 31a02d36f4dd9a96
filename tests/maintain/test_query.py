"""Read-only SQL on a cache file (tunecache.maintain.query)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.maintain.conftest import Filled
from tests.store_helpers import sql
from tunecache import maintain
from tunecache.errors import BadArgumentError


def test_every_example_query_runs(filled: Filled) -> None:
    for title, query in maintain.EXAMPLE_QUERIES:
        result = maintain.run_query(filled.cache.path, query)
        assert result.columns and result.rows, title


def test_a_query_returns_rows_and_is_cut_at_max_rows(filled: Filled) -> None:
    result = maintain.run_query(filled.cache.path, "SELECT key FROM decisions ORDER BY key")
    assert result.columns == ("key",) and len(result.rows) == 4 and not result.truncated
    cut = maintain.run_query(filled.cache.path, "SELECT key FROM decisions", max_rows=2)
    assert len(cut.rows) == 2 and cut.truncated
    blob = maintain.run_query(filled.cache.path, "SELECT data FROM timing_records")
    assert isinstance(blob.as_dict()["rows"][0][0], str)


@pytest.mark.parametrize(
    "query",
    [
        "DELETE FROM entries",
        "UPDATE entries SET choice = 'x'",
        "DROP VIEW decisions",
        "CREATE TABLE t (x)",
        "ATTACH DATABASE 'elsewhere.db' AS e",
        "PRAGMA query_only = 0",
        "PRAGMA wal_checkpoint",
        "SELECT 1; DELETE FROM entries",
        "SELEC nonsense",
    ],
)
def test_a_query_can_only_read(
    filled: Filled, query: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    before = sql(filled.cache.path, "SELECT * FROM entries ORDER BY id")
    with pytest.raises(BadArgumentError, match="query"):
        maintain.run_query(filled.cache.path, query)
    assert sql(filled.cache.path, "SELECT * FROM entries ORDER BY id") == before
    assert not (tmp_path / "elsewhere.db").exists()


def test_a_runaway_query_is_interrupted(filled: Filled) -> None:
    forever = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    with pytest.raises(BadArgumentError, match="interrupted"):
        maintain.run_query(filled.cache.path, forever, timeout=0.2)


def test_every_documented_view_can_be_read(filled: Filled) -> None:
    for view in maintain.VIEWS:
        result = maintain.run_query(filled.cache.path, f"SELECT count(*) FROM {view}")
        assert result.rows[0][0] > 0, view


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": "  "}, "the query is empty"),
        ({"max_rows": -1}, "max_rows"),
        ({"max_rows": True}, "max_rows"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"path": "missing.db"}, "no database at"),
    ],
)
def test_a_query_refuses_bad_arguments(
    filled: Filled, tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"path": filled.cache.path, "query": "SELECT 1", **kwargs}
    if args["path"] == "missing.db":
        args["path"] = tmp_path / "missing.db"
    with pytest.raises(BadArgumentError, match=message):
        maintain.run_query(**args)  # type: ignore[arg-type]
