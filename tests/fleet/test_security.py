"""A fleet store shared by many devices and roles: each device keeps its own rows, a read-only
role reads and never writes, credentials never reach an output, a server that is not there
fails in one bounded line, and no connection outlives a command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tests.conftest import PgSchema
from tunecache.cache import Cache, NewEntry
from tunecache.device import Device
from tunecache.errors import ReadOnlyStoreError, StoreError, StoreUnreachableError
from tunecache.store import postgres, urls

CANDIDATES = ["direct", "im2col"]
KEY = "conv_F32_m64_k3"


def _password(url: str) -> str:
    password = make_url(url).password
    assert password, "the test server's roles log in with passwords"
    return str(password)


def _connections(url: str) -> int:
    """How many connections tunecache has open to the test database, this one's excepted."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND application_name = 'tunecache' AND pid <> pg_backend_pid()"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def _tunecache(*args: str, url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TUNECACHE_URL": url, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "tunecache", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


# --- many devices in one store -----------------------------------------------------------------


def test_each_device_keeps_its_own_rows(pg: PgSchema, device: Device) -> None:
    others = [device.with_threads(8), Device("other-cpu", 4, "nvidia-h200", "tunecache", "0.2.0")]
    stores = [Cache.open(url=pg.url, device=d) for d in (device, *others)]
    try:
        for i, store in enumerate(stores):
            store.put(KEY, choice=CANDIDATES[i % 2], candidates=CANDIDATES)
            store.put_many([NewEntry(f"mm_F32_m{i}_n{j}", "direct", CANDIDATES) for j in range(i)])
        for i, store in enumerate(stores):
            assert store.count() == 1 + i
            got = store.get(KEY)
            assert got is not None and got.choice == CANDIDATES[i % 2]
            assert {e.key.text for e in store.entries()} == {KEY} | {
                f"mm_F32_m{i}_n{j}" for j in range(i)
            }
        # A host sees another identity's rows only by asking for it.
        with Cache.open(url=pg.url, device=others[1]) as asked:
            assert asked.count() == 3
    finally:
        for store in stores:
            store.close()
    engine = create_engine(pg.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT device, entries FROM read_devices_v1")).all()
    finally:
        engine.dispose()
    assert sorted(n for _, n in rows) == [1, 2, 3]


# --- a read-only role ------------------------------------------------------------------------


def test_a_read_only_role_reads_and_a_write_fails_in_one_line_writing_nothing(
    pg: PgSchema, device: Device
) -> None:
    with Cache.open(url=pg.url, device=device) as writer:
        writer.put(KEY, choice="im2col", candidates=CANDIDATES)
    with Cache.open(url=pg.ro_url, device=device) as reader:
        got = reader.get(KEY)
        assert got is not None and got.choice == "im2col"
        for write in (
            lambda: reader.put("conv_F32_m1_k3", choice="direct", candidates=CANDIDATES),
            lambda: reader.put_many([NewEntry("conv_F32_m2_k3", "direct", CANDIDATES)]),
            lambda: reader.set_status(got, "accepted"),
        ):
            with pytest.raises(ReadOnlyStoreError) as raised:
                write()
            message = str(raised.value)
            assert "\n" not in message
            assert "INSERT" in message and "tunecache_reader" in message
            assert _password(pg.ro_url) not in message
    with Cache.open(url=pg.url, device=device) as writer:
        assert [e.key.text for e in writer.entries()] == [KEY]
        assert writer.get(KEY).status == "unvalidated"  # type: ignore[union-attr]


def test_a_privilege_the_server_refuses_is_one_line_too(pg: PgSchema, device: Device) -> None:
    # A schema this role may not create tables in: the server itself says no.
    with pytest.raises(ReadOnlyStoreError) as raised:
        Cache.open(url=pg.ro_url, device=device).close()
    assert "permission denied" in str(raised.value) and "\n" not in str(raised.value)


# --- credentials -------------------------------------------------------------------------------


def test_urls_are_masked() -> None:
    url = "postgresql+psycopg://me:s3cr%40t@db.example/fleet?sslpassword=k3y&host=/run/x"
    shown = urls.mask(url)
    assert shown == "postgresql+psycopg://me:***@db.example/fleet?sslpassword=***&host=/run/x"
    assert urls.scrub(f"failed for {url}: s3cr@t k3y", url).count("***") == 4
    assert urls.mask("postgresql+psycopg://me@/fleet") == "postgresql+psycopg://me@/fleet"
    # A query secret as written, not only decoded: "+" and lower-case escapes.
    written = "postgresql+psycopg://me@/fleet?password=a+b&sslpassword=x%2fy"
    assert urls.scrub("saw a+b and x%2fy", written) == "saw *** and ***"


@pytest.mark.parametrize("secret", ["Sup3r/Secret", "s3c#ret", "a?b=c", "Head7@tail9", "x:y"])
def test_a_password_as_sqlalchemy_reads_it_is_never_shown(secret: str, tmp_path: Path) -> None:
    # SQLAlchemy takes "/", "#", "?" and ":" in a password as written (to the first "@"): a
    # split that ends the password earlier would print the rest of it.
    url = f"postgresql+psycopg://tuner:{secret}@127.0.0.1:1/fleet"
    seen = [urls.mask(url), urls.scrub(f"could not connect to {url}", url)]
    if "@" not in secret:
        assert make_url(url).password == secret  # what the driver would be given
        assert urls.mask(url) == "postgresql+psycopg://tuner:***@127.0.0.1:1/fleet"
    for args in (("where",), ("sync", "pull", "--remote", url), ("list", "--db", url)):
        done = _tunecache(*args, url=url, tmp_path=tmp_path)
        assert done.returncode != 0, done.stdout
        seen += [done.stdout, done.stderr]
    for text_ in seen:
        # The whole, and each side of a raw "@" (SQLAlchemy would take the tail for a host).
        assert not any(part in text_ for part in (secret, *secret.split("@"))), text_


def test_no_output_carries_the_password(
    pg: PgSchema, device: Device, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = _password(pg.url)
    with Cache.open(url=pg.url, device=device) as cache:
        cache.put(KEY, choice="im2col", candidates=CANDIDATES)
        seen = [repr(cache), cache.where, str(cache.url)]
    wrong = pg.url.replace(secret, secret[::-1])
    with pytest.raises(StoreError) as refused:
        Cache.open(url=wrong, device=device)
    seen += [str(refused.value), caplog.text]
    for args in (("where",), ("where", "--json"), ("list",), ("prune", "--older-than", "1d")):
        done = _tunecache(*args, url=pg.url, tmp_path=tmp_path)
        seen += [done.stdout, done.stderr]
    done = _tunecache("where", url=wrong, tmp_path=tmp_path)
    assert done.returncode != 0
    seen += [done.stdout, done.stderr]
    assert any("***" in text for text in seen)
    for text_ in seen:
        assert secret not in text_ and secret[::-1] not in text_


# --- a server that is not there ------------------------------------------------------------


def test_a_stopped_server_is_one_line_and_the_local_cache_is_unchanged(
    pg: PgSchema, device: Device, tmp_path: Path
) -> None:
    with Cache.open(device=device, path=tmp_path / "local.db") as local:
        local.put(KEY, choice="im2col", candidates=CANDIDATES)
    before = (tmp_path / "local.db").read_bytes()
    gone = str(make_url(pg.url).set(query={"host": str(tmp_path / "no-server-here")}))
    with pytest.raises(StoreUnreachableError) as raised:
        Cache.open(url=gone, device=device)
    assert "unreachable" in str(raised.value) and "\n" not in str(raised.value)
    assert (tmp_path / "local.db").read_bytes() == before
    done = _tunecache("where", url=gone, tmp_path=tmp_path)
    assert done.returncode == StoreUnreachableError.exit_code
    assert done.stderr.count("\n") == 1 and "unreachable" in done.stderr


@pytest.fixture
def silent_server(tmp_path: Path) -> Iterator[Path]:
    """A Unix socket that accepts connections and never answers: a server that hangs."""
    folder = tmp_path / "silent"
    folder.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / ".s.PGSQL.5432"))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield folder
    finally:
        stop.set()
        thread.join()
        for each in accepted:
            each.close()
        listener.close()


def test_a_server_that_never_answers_fails_at_the_connect_timeout(
    silent_server: Path, device: Device
) -> None:
    url = f"postgresql+psycopg://u:pw@/db?host={silent_server}&connect_timeout=2"
    with pytest.raises(StoreUnreachableError) as raised:
        Cache.open(url=url, device=device)
    assert "\n" not in str(raised.value) and "pw@" not in str(raised.value)


def test_the_default_connect_timeout_is_at_most_ten_seconds(pg: PgSchema) -> None:
    engine = postgres.make_engine(pg.url, busy_timeout=1)
    given: dict[str, Any] = {}
    event.listen(engine, "do_connect", lambda d, r, cargs, cparams: given.update(cparams))
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()
    assert 0 < given["connect_timeout"] <= 10
    assert engine.pool._pre_ping  # type: ignore[attr-defined]


# --- connection hygiene -----------------------------------------------------------------------


def test_no_connection_is_left_open(pg: PgSchema, device: Device, tmp_path: Path) -> None:
    before = _connections(pg.url)
    with Cache.open(url=pg.url, device=device) as cache:
        cache.put(KEY, choice="im2col", candidates=CANDIDATES)
        assert cache.count() == 1
        assert _connections(pg.url) >= before + 1
    assert _connections(pg.url) == before
    for args in (("where",), ("prune", "--older-than", "1d")):
        done = _tunecache(*args, url=pg.url, tmp_path=tmp_path)
        assert done.returncode in (0, 64), done.stderr
    assert _connections(pg.url) == before
