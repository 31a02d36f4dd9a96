"""Shared fixtures: every test gets its own cache root; none touches the real user cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from tunecache.device import Device

if TYPE_CHECKING:
    from tunecache.cache import Cache

ROOT = Path(__file__).resolve().parent.parent

# CI shares its machine with other work: a property test must fail for what it checks, never for
# one example that ran slow (Hypothesis's default 200 ms deadline would make that a flaky error).
settings.register_profile("tunecache", deadline=None)
settings.load_profile("tunecache")


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
    to the real user cache."""
    import sys

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
    return root


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
