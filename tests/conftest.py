"""Shared fixtures: every test gets its own cache root; none touches the real user cache."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from tunecache.device import Device

if TYPE_CHECKING:
    from tunecache.cache import Cache

ROOT = Path(__file__).resolve().parent.parent


def python_output(code: str, env: dict[str, str] | None = None) -> str:
    """What `python -c code` prints, run in a fresh interpreter from the checkout's root
    (with `env` as its whole environment, if given); a failure raises with its output."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    return done.stdout


# CI shares its machine with other work: a property test must fail for what it checks, never for
# one example that ran slow (Hypothesis's default 200 ms deadline would make that a flaky error).
settings.register_profile("tunecache", deadline=None)
settings.load_profile("tunecache")

#: the test server's URLs (tools/pg_test_server.sh prints them; .ci/run exports them): the
#: PostgreSQL tests skip only when these are unset, and .ci/run fails if any of them skipped
PG_URL_VARIABLE = "TUNECACHE_TEST_PG_URL"
PG_RO_URL_VARIABLE = "TUNECACHE_TEST_PG_RO_URL"
#: where to write how the PostgreSQL tests ended (JSON counts by outcome), for .ci/run
PG_REPORT_VARIABLE = "TUNECACHE_TEST_PG_REPORT"
_PG_FIXTURES = frozenset({"pg", "pg_server"})
_pg_outcomes: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs the PostgreSQL server `postgres`, so they can be counted
    (and selected with `-m postgres`)."""
    for item in items:
        if _PG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count how the PostgreSQL tests ended."""
    if "postgres" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _pg_outcomes[report.outcome] = _pg_outcomes.get(report.outcome, 0) + 1


@dataclass(frozen=True)
class PgSchema:
    """A fresh schema on the test server: the writer's and the reader's URLs, each with its
    search_path set to it, and its name."""

    url: str
    ro_url: str
    schema: str


def _with_schema(url: str, schema: str) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    query = {**parsed.query, "options": f"-csearch_path={schema}"}
    return parsed.set(query=query).render_as_string(hide_password=False)


@pytest.fixture
def pg_server() -> tuple[str, str]:
    """The test server's writer and reader URLs, as exported; skips when they are unset."""
    url, ro_url = os.environ.get(PG_URL_VARIABLE), os.environ.get(PG_RO_URL_VARIABLE)
    if not url or not ro_url:
        pytest.skip(
            f"{PG_URL_VARIABLE} and {PG_RO_URL_VARIABLE} are unset (tools/pg_test_server.sh)"
        )
    return url, ro_url


@pytest.fixture
def pg(pg_server: tuple[str, str]) -> Iterator[PgSchema]:
    """A schema of its own on the test server for this test, dropped with everything in it
    when the test ends."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    url, ro_url = pg_server
    schema = f"t_{secrets.token_hex(6)}"
    admin = create_engine(url, poolclass=NullPool)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        yield PgSchema(_with_schema(url, schema), _with_schema(ro_url, schema), schema)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


# The user cache folders a leaking test would write (tunecache's own, and the Triton client's:
# its caches live under the client's name), as the session found them.
def _user_caches() -> dict[str, tuple[float, ...]]:
    import platformdirs

    found = {}
    for client in ("tunecache", "triton"):
        folder = Path(platformdirs.user_cache_dir(client, appauthor=False))
        found[str(folder)] = (
            tuple(sorted(p.stat().st_mtime for p in folder.rglob("*") if p.is_file()))
            if folder.is_dir()
            else ()
        )
    return found


_CACHES_BEFORE = _user_caches()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any test (or a thread or process it left behind, writing at exit) wrote
    to the real user cache; write the PostgreSQL tests' counts where PG_REPORT_VARIABLE says,
    if it is set."""
    import sys

    where = os.environ.get(PG_REPORT_VARIABLE)
    if where:
        Path(where).write_text(json.dumps(_pg_outcomes) + "\n")

    writer = sys.modules.get("tunecache.triton.writer")
    if writer is not None:
        writer.flush()  # what the Triton client's writer would write at exit, written now
    after = _user_caches()
    changed = [folder for folder, stamps in after.items() if stamps != _CACHES_BEFORE[folder]]
    if changed:
        print(f"\ntests wrote to the real user cache: {', '.join(changed)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _isolated_cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point TUNECACHE_DIR and the XDG cache folder at temporary folders, for this process
    and every subprocess a test starts."""
    root = tmp_path / "cache-root"
    monkeypatch.setenv("TUNECACHE_DIR", str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    # A fleet store of the developer's own never stands in for the test's cache.
    monkeypatch.delenv("TUNECACHE_URL", raising=False)
    monkeypatch.delenv("TUNECACHE_REMOTE", raising=False)
    return root


@pytest.fixture(autouse=True)
def _nothing_configured(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No identity configured (`tunecache.configure`, TUNECACHE_CLIENT and the rest) and no
    lazily opened default table, before and after each test: a test that configures one
    leaves nothing behind."""
    from tunecache import config
    from tunecache.resolve import contexts

    for var in (*config.ENV_VARS.values(), config.DISABLE_VAR):
        if var != config.ENV_VARS["root"]:
            monkeypatch.delenv(var, raising=False)
    config.reset()
    contexts.forget_default()
    yield
    config.reset()
    contexts.forget_default()


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process's CPU waits unknown (`tunecache.evidence.cpu_wait` returns None), so
    how busy the machine is never decides what a test's tuner re-benches; a test of that rule
    injects its own waits (`Running(cpu_wait=...)`, `bench(cpu_wait=...)`)."""
    monkeypatch.setattr("tunecache.evidence.cpu_wait", lambda: None)


@pytest.fixture
def device() -> Device:
    """A fixed device identity, so tests do not depend on the machine they run on."""
    return Device(
        cpu="test-cpu-9000",
        threads=4,
        accelerator=None,
        client="tunecache",
        client_version="0.1.0",
    )


@pytest.fixture
def cache(device: Device, tmp_path: Path) -> Iterator[Cache]:
    """A fresh cache in a temporary folder."""
    from tunecache.cache import Cache

    c = Cache.open(device=device, root=tmp_path / "store")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def cache_at(device: Device, tmp_path: Path) -> Iterator[Callable[..., Cache]]:
    """Open more caches: `cache_at(name, **open_args)` opens the file `name` in the test's
    folder (or at `name`, if absolute) for `device` unless `open_args` names another; every
    one is closed when the test ends."""
    from tunecache.cache import Cache

    opened: list[Cache] = []

    def open_at(name: str | Path, **open_args: Any) -> Cache:
        open_args.setdefault("device", device)
        opened.append(Cache.open(path=tmp_path / name, **open_args))
        return opened[-1]

    try:
        yield open_at
    finally:
        for each in opened:
            each.close()


@pytest.fixture
def twin(cache: Cache, device: Device, cache_at: Callable[..., Cache]) -> Cache:
    """The file of `cache`, opened for a device that differs from it only in its thread count."""
    return cache_at(cache.path, device=device.with_threads(8))
