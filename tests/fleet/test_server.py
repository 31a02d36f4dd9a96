"""The PostgreSQL test server of tools/pg_test_server.sh: a writer that may create and write, a
reader that may only read what the writer made, later tables included."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, exc, text
from sqlalchemy.pool import NullPool

from tests.conftest import PgSchema


def test_the_writer_writes_and_the_reader_only_reads(pg: PgSchema) -> None:
    writer = create_engine(pg.url, poolclass=NullPool)
    reader = create_engine(pg.ro_url, poolclass=NullPool)
    try:
        with writer.begin() as conn:
            conn.execute(text("CREATE TABLE later (x integer)"))
            conn.execute(text("INSERT INTO later VALUES (1)"))
        with reader.connect() as conn:
            assert conn.execute(text("SELECT x FROM later")).scalars().all() == [1]
        with reader.connect() as conn, pytest.raises(exc.ProgrammingError, match="permission"):
            conn.execute(text("INSERT INTO later VALUES (2)"))
        with reader.connect() as conn, pytest.raises(exc.ProgrammingError, match="permission"):
            conn.execute(text("CREATE TABLE mine (x integer)"))
    finally:
        writer.dispose()
        reader.dispose()


def test_no_tcp(pg: PgSchema) -> None:
    engine = create_engine(pg.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SHOW listen_addresses")).scalar() == ""
            assert conn.execute(text("SELECT current_schema()")).scalar() == pg.schema
    finally:
        engine.dispose()
