"""Read-only SQL on a cache database: the documented views, example queries, one statement.

Runs through the stdlib sqlite3 module on a `mode=ro` connection, with an authorizer that refuses
everything but reads: `tunecache sql` can never change a cache.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunecache.checks import is_int
from tunecache.errors import BadArgumentError
from tunecache.maintain.reports import Report
from tunecache.store.filesystems import no_room, open_for_reading

__all__ = ["EXAMPLE_QUERIES", "VIEWS", "QueryResult", "run_query"]

#: the documented views a person may query; migrations keep their columns
VIEWS = (
    "decisions",
    "read_entries_v1",
    "read_verdicts_v1",
    "read_candidates_v1",
    "read_entry_details_v1",
    "read_verdict_details_v1",
    "read_records_v1",
    "read_runs_v1",
    "read_models_v1",
    "read_devices_v1",
)
#: a few queries to start from, each against the documented views
EXAMPLE_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "every decision, best speedup first",
        "SELECT key, choice, heuristic, speedup, status, validated_by, masked_by "
        "FROM decisions ORDER BY speedup DESC",
    ),
    (
        "decisions no model has validated yet",
        "SELECT key, choice, status, updated_at FROM decisions WHERE validated_by IS NULL",
    ),
    (
        "how often the tuned choice differs from the heuristic, per signature",
        "SELECT signature, count(*) AS entries, sum(choice <> heuristic) AS overridden, "
        "round(avg(speedup), 3) AS mean_speedup FROM decisions GROUP BY signature",
    ),
    (
        "every model's verdicts, with their whole-model gains",
        "SELECT e.key, v.model, v.verdict, v.gain FROM read_verdicts_v1 v "
        "JOIN read_entries_v1 e ON e.entry_id = v.entry_id ORDER BY v.model, e.key",
    ),
    (
        "the candidate lists entries were tuned against",
        "SELECT signature, checksum, group_concat(name, ' ') AS candidates FROM "
        "(SELECT * FROM read_candidates_v1 ORDER BY signature, checksum, position) "
        "GROUP BY signature, checksum",
    ),
)


@dataclass(frozen=True, slots=True)
class QueryResult(Report):
    """The rows a read-only query returned."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    #: whether more rows were left out than max_rows allowed
    truncated: bool


# Statements a read-only query may run. Reading is all `sql` is for; ATTACH in particular could
# create a file, so everything else is refused by the authorizer before it runs.
_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
        "user_version",
        "schema_version",
        "page_count",
        "page_size",
        "freelist_count",
        "compile_options",
        "database_list",
        "function_list",
        "collation_list",
        "pragma_list",
    }
)


def _authorize(action: int, arg1: str | None, arg2: str | None, *rest: object) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 is not None and arg1.lower() in _READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def run_query(
    path: str | os.PathLike[str],
    query: str,
    *,
    max_rows: int = 1000,
    timeout: float = 30.0,
) -> QueryResult:
    """Run one read-only SQL statement on a cache database with the stdlib sqlite3 module.

    The file is opened `mode=ro` with `PRAGMA query_only`, and an authorizer refuses anything
    but reads; a query running past `timeout` seconds is interrupted. A bad query raises
    BadArgumentError with SQLite's message.
    """
    if not isinstance(query, str) or not query.strip():
        raise BadArgumentError("the query is empty")
    if not is_int(max_rows) or max_rows < 0:
        raise BadArgumentError(f"max_rows must be a non-negative integer, got {max_rows!r}")
    if not isinstance(timeout, int | float) or not 0 < timeout <= 86400 or math.isnan(timeout):
        raise BadArgumentError(f"timeout must be seconds from 0 to 86400, got {timeout!r}")
    db = Path(path).absolute()
    if not db.is_file():
        raise BadArgumentError(f"no database at {db}")
    deadline = time.monotonic() + timeout
    try:
        # As every reader opens a cache: mode=ro and query_only (or, on a full disk, the WAL
        # index in this process's memory), never through a FIFO or a device.
        conn, _ = open_for_reading(db, min(timeout, 30.0))
    except sqlite3.Error as error:
        full = no_room(error, db)
        raise BadArgumentError(f"cannot open {db}: {full or error}") from error
    try:
        conn.set_authorizer(_authorize)
        # Returning non-zero interrupts the statement: a runaway recursive CTE stops in time.
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        cursor = conn.execute(query)
        columns = tuple(d[0] for d in cursor.description or ())
        rows = cursor.fetchmany(max_rows + 1) if columns else []
    except sqlite3.Error as error:
        if time.monotonic() > deadline:
            raise BadArgumentError(f"query interrupted after {timeout:g} s") from error
        raise BadArgumentError(f"query failed: {error}") from error
    finally:
        conn.close()
    return QueryResult(
        columns=columns,
        rows=tuple(tuple(row) for row in rows[:max_rows]),
        truncated=len(rows) > max_rows,
    )
