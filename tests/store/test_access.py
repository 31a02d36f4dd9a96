"""Who may write a cache file (tunecache.store.access), and claiming one from every other user.

Version pruning builds on the claim; tests/maintain/test_versions.py covers it from there.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.store_helpers import NAMES, sql
from tunecache.cache import Cache
from tunecache.store.access import claim, frozen, read_only_mount, release


@pytest.fixture
def closed(cache_at: Callable[..., Cache], tmp_path: Path) -> Path:
    """A cache file with one entry that no connection has open."""
    cache = cache_at("claimed.db")
    cache.put("conv_F32_m1", choice="direct", candidates=NAMES)
    cache.close()
    return cache.path


def _journal(db: Path) -> str:
    return str(sql(db, "PRAGMA journal_mode")[0][0])


def _readable(db: Path) -> bool:
    """Whether another connection, with no patience, can read the database now."""
    conn = sqlite3.connect(db, timeout=0)
    try:
        conn.execute("SELECT count(*) FROM entries").fetchall()
        return True
    except sqlite3.OperationalError as error:
        assert "locked" in str(error)
        return False
    finally:
        conn.close()


def test_a_claim_keeps_everyone_out_until_it_is_released(closed: Path) -> None:
    claimed = claim(closed)
    try:
        assert not _readable(closed)
    finally:
        release([claimed], restore=True)
    assert _readable(closed)
    # Given back as tunecache keeps it, in WAL mode.
    assert _journal(closed) == "wal"


def test_a_release_without_restore_leaves_the_file_out_of_wal(closed: Path) -> None:
    release([claim(closed)], restore=False)
    assert _journal(closed) == "delete"
    assert sql(closed, "SELECT count(*) FROM entries") == [(1,)]


def test_a_database_someone_has_open_cannot_be_claimed(
    closed: Path, cache_at: Callable[..., Cache]
) -> None:
    user = cache_at(closed)
    assert user.count() == 1  # its pooled connection now holds the file open
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        claim(closed)
    # Refused without changing anything: the user keeps writing, in WAL mode.
    user.put("conv_F32_m2", choice="direct", candidates=NAMES)
    assert user.count() == 2 and _journal(closed) == "wal"


def test_several_claims_are_released_together(closed: Path, tmp_path: Path) -> None:
    second = tmp_path / "second.db"
    second.write_bytes(closed.read_bytes())
    claims = [claim(closed), claim(second)]
    assert not _readable(closed) and not _readable(second)
    release(claims, restore=True)
    assert _readable(closed) and _readable(second)


def test_a_missing_database_is_not_claimed_into_existence(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        claim(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()


@pytest.fixture
def unwritable(closed: Path) -> Iterator[Path]:
    """The closed cache with write permission taken from everyone, file and folder."""
    modes = [(p, p.stat().st_mode) for p in (closed, closed.parent)]
    closed.chmod(0o444)
    closed.parent.chmod(0o555)
    try:
        yield closed
    finally:
        for path, mode in reversed(modes):
            path.chmod(mode)


def test_a_database_nobody_may_write_is_frozen(closed: Path, unwritable: Path) -> None:
    assert frozen(unwritable)
    assert not read_only_mount(unwritable.parent)


def test_a_writable_or_missing_database_is_not_frozen(closed: Path, tmp_path: Path) -> None:
    assert not frozen(closed)
    assert not frozen(tmp_path / "missing.db")
    assert not read_only_mount(tmp_path / "no-such-folder")
