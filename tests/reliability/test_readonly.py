"""A cache this process may not write: reading works, writing says clearly why not, no crash.

Root ignores permissions, so when the tests run as root each scenario runs in a forked child
that first becomes `nobody` (uid and gid 65534); run as another user, the child stays that user.
The child is forked, not spawned: the interpreter lives under /root, which `nobody` cannot read,
so everything the child needs is imported before the fork.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Imported before any fork: a child running as another user imports nothing itself.
import tunecache.identity  # noqa: F401  (Table.open imports it lazily)
from tests.reliability import harness
from tests.reliability.harness import DEVICE, MARK, NAMES, OPENED, Child, Sender
from tunecache import paths
from tunecache.cache import Cache
from tunecache.errors import ReadOnlyStoreError, StoreError
from tunecache.keys import make_key
from tunecache.resolve import Table

NOBODY = 65534
KEY = make_key("conv_F32_ro", h=8)
WAL_ONLY_KEY = make_key("conv_F32_ro", h=16)


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """A folder `nobody` can reach (pytest's own temporary folders are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="tunecache-ro-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(folder)


def _as_another_user(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `body` in a forked child without root's privileges; its JSON-ready result."""

    def child(send: Sender) -> None:
        if os.geteuid() == 0:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        send(MARK, OPENED, text=json.dumps(body()))

    kid = Child(child)
    kid.finish()
    assert kid.crashes() == [] and os.waitstatus_to_exitcode(kid.status or 0) == 0, kid.crashes()
    [text] = [m.text for m in kid.messages if m.tag == MARK]
    result: dict[str, Any] = json.loads(text)
    return result


def _use(open_cache: Callable[[], Cache], db: Path) -> dict[str, Any]:
    """Open, read, try to write, and resolve; every outcome as data, nothing raised."""
    out: dict[str, Any] = {}
    try:
        cache = open_cache()
    except StoreError as error:
        out["open_error"] = [type(error).__name__, str(error)]
    else:
        with cache:
            out["readonly_reason"] = cache.readonly_reason
            found = cache.get(KEY, candidates=NAMES)
            out["read"] = None if found is None else found.choice
            wal_only = cache.get(WAL_ONLY_KEY, candidates=NAMES)
            out["read_wal_only"] = None if wal_only is None else wal_only.choice
            try:
                harness.write_for(1, 1, make_key("conv_F32_ro", h=32)).put(cache)
                out["write"] = "written"
            except StoreError as error:
                out["write"] = [type(error).__name__, str(error)]
    table = Table.open(device=DEVICE, path=db, use="all")
    answer = table.resolve(KEY, NAMES, NAMES[3])
    out["resolved"] = [answer.choice, answer.source]
    table.close()
    return out


def _cache_with_one_entry(db: Path) -> str:
    with Cache.open(device=DEVICE, path=db) as cache:
        write = harness.write_for(0, 0, KEY)
        write.put(cache)
    return write.choice


def _leave_a_wal(db: Path) -> str:
    """Commit one more entry and die before any checkpoint: it lives only in the -wal."""
    write = harness.write_for(0, 1, WAL_ONLY_KEY)

    def body(send: Sender) -> None:
        cache = Cache.open(device=DEVICE, path=db)
        with cache.engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.execute("PRAGMA wal_autocheckpoint = 0")
        write.put(cache)
        os._exit(0)

    Child(body).finish()
    assert Path(f"{db}-wal").stat().st_size > 0
    return write.choice


def _chmod(mode: int, *paths_: Path) -> None:
    for path in paths_:
        path.chmod(mode)


def _check_readable_and_refusing(result: dict[str, Any], choice: str, why: str) -> None:
    assert "open_error" not in result, result
    assert why in result["readonly_reason"]
    assert result["read"] == choice
    kind, message = result["write"]
    assert kind == "ReadOnlyStoreError" and "is read-only" in message and why in message
    assert "\n" not in message
    # The resolver reads the cache too: the stored choice, exactly.
    assert result["resolved"] == [choice, "exact"]


def test_a_frozen_cache_is_read_and_refuses_writes(shared: Path) -> None:
    # No one may write the folder or the file: read as immutable, without a -shm file.
    folder = shared / "frozen"
    folder.mkdir()
    db = folder / "cache.db"
    choice = _cache_with_one_entry(db)
    _chmod(0o444, db)
    _chmod(0o555, folder)
    before = sorted(p.name for p in folder.iterdir())
    result = _as_another_user(lambda: _use(lambda: Cache.open(device=DEVICE, path=db), db))
    print(f"frozen cache: {result}")
    _check_readable_and_refusing(result, choice, "not writable by this user")
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_read_only_file_in_a_writable_folder_is_read_and_refuses_writes(shared: Path) -> None:
    folder = shared / "open-folder"
    folder.mkdir()
    db = folder / "cache.db"
    choice = _cache_with_one_entry(db)
    _chmod(0o444, db)
    _chmod(0o777, folder)
    before = db.read_bytes()
    result = _as_another_user(lambda: _use(lambda: Cache.open(device=DEVICE, path=db), db))
    print(f"read-only file: {result}")
    _check_readable_and_refusing(result, choice, f"the file {db} is not writable")
    assert db.read_bytes() == before


def test_a_read_only_folder_holding_a_crashed_writers_wal_reads_the_wal(shared: Path) -> None:
    # The -wal holds a commit the main file lacks; reading must see it, so no immutable here.
    folder = shared / "crashed"
    folder.mkdir()
    db = folder / "cache.db"
    choice = _cache_with_one_entry(db)
    wal_choice = _leave_a_wal(db)
    _chmod(0o444, db, Path(f"{db}-wal"))
    _chmod(0o555, folder)
    result = _as_another_user(lambda: _use(lambda: Cache.open(device=DEVICE, path=db), db))
    print(f"read-only folder with a -wal: {result}")
    _check_readable_and_refusing(result, choice, "not writable by this user")
    assert result["read_wal_only"] == wal_choice


def test_a_folder_only_its_owner_may_write_is_refused_clearly(shared: Path) -> None:
    # Not frozen (root may still write it) and no -shm to map: SQLite cannot read a WAL database
    # safely, and Cache.open says so in one line instead of failing on a cryptic error.
    folder = shared / "owners"
    folder.mkdir()
    db = folder / "cache.db"
    _cache_with_one_entry(db)
    _chmod(0o755, folder)
    _chmod(0o644, db)
    if os.geteuid() != 0:
        pytest.skip("needs a second user: only root can run this as someone the folder refuses")
    result = _as_another_user(lambda: _use(lambda: Cache.open(device=DEVICE, path=db), db))
    print(f"owner-only folder: {result}")
    kind, message = result["open_error"]
    assert kind == "StoreError" and "-shm" in message and "\n" not in message
    assert result["resolved"] in (
        [NAMES[3], "heuristic"],
        [harness.write_for(0, 0, KEY).choice, "exact"],
    )


def test_no_cache_in_a_read_only_folder_says_it_cannot_create_one(shared: Path) -> None:
    root = shared / "root"
    folder = paths.device_dir(DEVICE, root)
    folder.mkdir(parents=True)
    _chmod(0o555, folder)

    def body() -> dict[str, Any]:
        out = _use(lambda: Cache.open(device=DEVICE, root=root), paths.database_path(DEVICE, root))
        try:
            Cache.open(device=DEVICE, root=shared / "elsewhere" / "root")
        except StoreError as error:
            out["mkdir_error"] = [type(error).__name__, str(error)]
        return out

    _chmod(0o555, shared)
    result = _as_another_user(body)
    print(f"no cache, read-only folder: {result}")
    kind, message = result["open_error"]
    assert kind == ReadOnlyStoreError.__name__ and "cannot create cache database" in message
    assert result["resolved"] == [NAMES[3], "heuristic"]  # no cache: no change, no crash
    kind, message = result["mkdir_error"]
    assert kind == "StoreError" and "cannot create cache folder" in message
    assert stat.S_IMODE(folder.stat().st_mode) == 0o555
