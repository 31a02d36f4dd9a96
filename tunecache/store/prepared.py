"""Statements built once and run on the driver's own cursor: what bulk writes are made of.

A `Prepared` statement is a SQLAlchemy Core statement compiled once per dialect, so its text and
parameter style are the dialect's own, then run on the DBAPI cursor of the connection the
caller's transaction holds, for one row or many at once (executemany). A `Lookup` is a query
for the rows whose column holds one of many values, prepared in a few sizes of IN list.

Why not `Connection.execute`: SQLAlchemy adds about 10 µs a statement (cache key, execution
context, result) and 3 µs a row (parameter processing) to the driver's own 1 µs a row, and a
batch of entries is ten statements and seven rows an entry, while the driver writes a row of
this schema in about 2 µs. Driver errors reach the caller as the driver raised them, and
`tunecache.store.engine.busy_errors` turns them into StoreBusyError or StoreError as it does
SQLAlchemy's. Values reach the driver as the caller gives them, except timestamps, which their
column type (`models.UTCDateTime`) converts both ways, as SQLAlchemy would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Connection, Delete, Select, Table, Update, bindparam
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.expression import ValuesBase

from tunecache.errors import StoreError
from tunecache.store import models as tables
from tunecache.store.queries import CHUNK, chunks

__all__ = ["LOOKUP_SIZES", "Lookup", "Prepared"]

#: the lengths of IN list a Lookup is prepared in (values are padded with NULL to the next one)
LOOKUP_SIZES = (1, 4, 16, 64, 256, CHUNK)

_Convert = Callable[[Any], Any]


class _Form(NamedTuple):
    """A prepared statement as one dialect runs it."""

    sql: str
    #: positions in the caller's row of the driver's parameters, in order (None: the same)
    order: tuple[int, ...] | None
    #: (position, converter) of every timestamp parameter
    stamps: tuple[tuple[int, _Convert], ...]
    #: parameter names, for a driver that takes named parameters (None: positional)
    names: tuple[str, ...] | None
    #: (position, converter) of every timestamp the statement returns
    results: tuple[tuple[int, _Convert], ...]


class Prepared:
    """A statement built once, compiled once per dialect and run on the driver's cursor.

    A row of parameters is a tuple in the order of `params`. The parameters of a WHERE clause
    are `bindparam`s named like no column of the table, so that an INSERT or UPDATE binds a
    column by its own name.
    """

    def __init__(
        self, statement: ValuesBase | Update | Delete | Select[Any], params: Sequence[str]
    ) -> None:
        self.statement = statement
        self.params = tuple(params)
        self._forms: dict[str, _Form] = {}

    def _form(self, dialect: Dialect) -> _Form:
        found = self._forms.get(dialect.name)
        if found is not None:
            return found
        if isinstance(self.statement, Select):
            table = None
            compiled = self.statement.compile(dialect=dialect)
            results = tuple(
                (i, convert)
                for i, column in enumerate(self.statement.selected_columns)
                if isinstance(column.type, tables.UTCDateTime)
                for convert in [column.type.dialect_impl(dialect).result_processor(dialect, None)]
                if convert is not None
            )
        else:
            table = self.statement.table
            assert isinstance(table, Table)
            columns = [p for p in self.params if p in table.c]
            compiled = self.statement.compile(dialect=dialect, column_keys=columns)
            results = ()
        stamps = tuple(
            (i, convert)
            for i, name in enumerate(self.params)
            if table is not None
            and name in table.c
            and isinstance(table.c[name].type, tables.UTCDateTime)
            for convert in [table.c[name].type.dialect_impl(dialect).bind_processor(dialect)]
            if convert is not None
        )
        if compiled.positional:
            order = tuple(self.params.index(name) for name in compiled.positiontup or ())
            same = order == tuple(range(len(self.params)))
            form = _Form(compiled.string, None if same else order, stamps, None, results)
        else:
            form = _Form(compiled.string, None, stamps, self.params, results)
        self._forms[dialect.name] = form
        return form

    def text(self, dialect: Dialect) -> str:
        """The statement as `dialect` runs it (for EXPLAIN, and for reading)."""
        return self._form(dialect).sql

    def _params(self, form: _Form, rows: Sequence[tuple[Any, ...]]) -> list[Any]:
        params: list[Any] = list(rows)
        if form.stamps:
            # A batch's rows share a handful of times: each is converted once.
            memo: dict[Any, Any] = {}
            params = [_converted(row, form.stamps, memo) for row in params]
        if form.order is not None:
            pick = itemgetter(*form.order)
            params = (
                [pick(row) for row in params]
                if len(form.order) > 1
                else [(pick(row),) for row in params]
            )
        if form.names is not None:
            params = [dict(zip(form.names, row, strict=True)) for row in params]
        return params

    def run(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> int:
        """Run the statement once per row, in order; how many rows it changed in all."""
        if not rows:
            return 0
        form = self._form(conn.dialect)
        params = self._params(form, rows)
        cursor = _cursor(conn)
        try:
            if len(params) == 1:
                cursor.execute(form.sql, params[0])
            else:
                cursor.executemany(form.sql, params)
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def fetch(self, conn: Connection, row: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run the query with one row of parameters; every row it returns."""
        form = self._form(conn.dialect)
        cursor = _cursor(conn)
        try:
            cursor.execute(form.sql, self._params(form, [row])[0])
            found = cursor.fetchall()
        finally:
            cursor.close()
        if not form.results:
            return [tuple(r) for r in found]
        memo: dict[Any, Any] = {}
        return [_converted(tuple(r), form.results, memo) for r in found]


class Lookup:
    """A query for the rows whose `column` holds one of many values (as many as asked, CHUNK
    at a time), prepared once for each of LOOKUP_SIZES; `params` names the query's own
    parameters, given before the values."""

    def __init__(
        self, query: Select[Any], column: ColumnElement[Any], params: Sequence[str] = ()
    ) -> None:
        self.query = query
        self.column = column
        self.params = tuple(params)
        self._sized: dict[int, Prepared] = {}

    def prepared(self, size: int) -> Prepared:
        """The query for `size` values (one of LOOKUP_SIZES), built on first use."""
        found = self._sized.get(size)
        if found is None:
            names = [f"w_in{i}" for i in range(size)]
            query = self.query.where(self.column.in_([bindparam(n) for n in names]))
            found = self._sized[size] = Prepared(query, (*self.params, *names))
        return found

    def rows(
        self, conn: Connection, values: Sequence[Any], *fixed: Any
    ) -> Iterator[tuple[Any, ...]]:
        """The rows whose column holds one of `values`, `fixed` being the query's parameters."""
        for part in chunks(values):
            size = next(s for s in LOOKUP_SIZES if s >= len(part))
            # NULL matches nothing in an IN list: the padding finds no row.
            padded = (*fixed, *part, *[None] * (size - len(part)))
            yield from self.prepared(size).fetch(conn, padded)


def _cursor(conn: Connection) -> Any:
    """A cursor of the driver's connection under `conn`, inside the transaction it holds."""
    if not conn.in_transaction():
        # The driver runs in autocommit mode (the engine issues BEGIN itself): outside a
        # transaction, each statement would commit on its own.
        raise StoreError("prepared statements run inside a transaction the caller holds")
    return conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]


def _converted(
    row: tuple[Any, ...], converts: tuple[tuple[int, _Convert], ...], memo: dict[Any, Any]
) -> tuple[Any, ...]:
    """`row` with the values at the converters' positions converted, each value once."""
    out = list(row)
    for i, convert in converts:
        value = out[i]
        found = memo.get(value, memo)
        if found is memo:
            found = memo[value] = convert(value)
        out[i] = found
    return tuple(out)
