"""Paths and files (issue 16, cases 4 and 5): a cache under a folder whose name is not UTF-8
works for the library and every command, and a database path that is not a regular file (a
FIFO, a symlink to a character device, a folder) gets the resolver's one warning and the
store's one-line error, without ever being opened.

Opening a FIFO for reading blocks until someone writes to it, so every open of one here runs in
a forked child with a deadline: a regression is a failed test, not a hung suite. The symlink to
/dev/zero is only ever looked at by the resolver, which reads, and by the store's check of the
file's kind, which refuses it by os.stat before anything opens it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability import harness
from tests.reliability.harness import DEVICE, MARK, NAMES, OPENED, Child, Sender
from tunecache import paths
from tunecache.cache import Cache
from tunecache.errors import StoreError, TunecacheWarning
from tunecache.keys import make_key
from tunecache.resolve import Table
from tunecache.store import quarantine

KEY = make_key("conv_F32_paths", h=8)
#: a folder name that is not UTF-8, as os.listdir would give it back
NOT_UTF8 = os.fsdecode(b"x_\xff")


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """`python -m tunecache ARGS` as a real process, its output as bytes (a path that is not
    UTF-8 is printed as the bytes it is)."""
    return subprocess.run(
        [sys.executable, "-m", "tunecache", *args],
        capture_output=True,
        timeout=120,
        env={**os.environ, **env},
        input=b"",
    )


# -- case 4: a path that is not UTF-8 --------------------------------------------------------------


def test_the_library_works_under_a_folder_whose_name_is_not_utf8(tmp_path: Path) -> None:
    root = tmp_path / NOT_UTF8
    for _ in range(3):  # every later open too, not only the first
        with Cache.open(device=DEVICE, root=root) as cache:
            harness.write_for(0, 0, KEY).put(cache)
            assert cache.count() == 1
    db = paths.database_path(DEVICE, root)
    assert os.fsencode(db).count(b"\xff") == 1 and db.is_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = Table.open(device=DEVICE, root=root, use="all")
        assert table.resolve(KEY, NAMES, NAMES[3]).source == "exact"
        table.close()
    # A damaged cache there is moved aside as anywhere else, and its note names the path.
    data = bytearray(db.read_bytes())
    data[4096:8192] = os.urandom(4096)
    db.write_bytes(data)
    with pytest.warns(TunecacheWarning, match="moved aside"):
        Cache.open(device=DEVICE, root=root).close()
    [moved] = (db.parent / quarantine.QUARANTINE_DIR).iterdir()
    assert os.fsencode(db) in (moved / "REASON.txt").read_bytes()


def test_every_command_works_under_a_folder_whose_name_is_not_utf8(tmp_path: Path) -> None:
    root = tmp_path / NOT_UTF8
    env = {"TUNECACHE_DIR": str(root)}
    raw_root = os.fsencode(root)
    first = _run("where", env=env)
    assert first.returncode == 0, first.stderr
    assert b"not created yet" in first.stdout and raw_root in first.stdout
    source = tmp_path / "source.db"
    with Cache.open(path=source) as cache:  # this machine's identity, as the commands use
        cache.put(KEY, choice=NAMES[1], candidates=NAMES, heuristic=NAMES[0])
    merged = _run("merge", str(source), env=env)
    assert merged.returncode == 0, merged.stderr
    export = root / "e.cbor"
    for args in (
        ("where",),
        ("where", "--json"),
        ("list",),
        ("inspect", KEY.text),
        ("models",),
        ("sql",),
        ("sql", "SELECT count(*) FROM decisions"),
        ("explain", KEY.text),
        ("doctor",),
        ("export", "-o", str(export)),
        ("import", str(export)),
        ("prune", "--dry-run", "--unvalidated"),
    ):
        done = _run(*args, env=env)
        assert done.returncode == 0, (args, done.stderr)
        assert b"internal error" not in done.stderr and b"Traceback" not in done.stderr
    where = json.loads(_run("where", "--json", env=env).stdout)
    assert os.fsencode(where["database"]).startswith(raw_root) and where["entries"] == 1
    assert raw_root in _run("where", env=env).stdout
    assert raw_root in _run("sql", env=env).stdout
    # --db names the same file, as bytes on the command line.
    done = _run("list", "--db", where["database"], env={})
    assert done.returncode == 0 and KEY.text.encode() in done.stdout, done.stderr


# -- case 5: a database path that is not a regular file ------------------------------------------


def _fifo(db: Path) -> None:
    os.mkfifo(db)


def _dev_zero(db: Path) -> None:
    db.symlink_to("/dev/zero")


def _folder(db: Path) -> None:
    db.mkdir()


NOT_REGULAR: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "symlink-to-dev-zero": _dev_zero,
    "folder": _folder,
}


def _in_child(body: Callable[[], dict[str, object]], deadline: float = 60.0) -> dict[str, object]:
    """Run `body` in a forked child and return what it reported; a child still running past
    `deadline` seconds (blocked opening a FIFO) is killed and the test fails."""

    def child(send: Sender) -> None:
        send(MARK, OPENED, text=json.dumps(body()))

    kid = Child(child)
    try:
        kid.finish(timeout=deadline)
    except TimeoutError:
        pytest.fail(f"still blocked after {deadline} s: a FIFO or device was opened")
    assert kid.crashes() == [], kid.crashes()
    [report] = [m.text for m in kid.messages if m.tag == MARK]
    result: dict[str, object] = json.loads(report)
    return result


@pytest.mark.parametrize("make", NOT_REGULAR.values(), ids=NOT_REGULAR.keys())
def test_the_resolver_warns_once_of_a_database_that_is_not_a_regular_file(
    tmp_path: Path, make: Callable[[Path], None]
) -> None:
    db = tmp_path / "cache.db"
    make(db)

    def body() -> dict[str, object]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            table = Table.open(device=DEVICE, path=db)
            answers = [
                table.resolve(make_key("conv_F32_paths", h=h), NAMES, NAMES[0]) for h in (1, 2, 3)
            ]
            table.close()
        return {
            "sources": [a.source for a in answers],
            "warnings": [str(w.message) for w in caught],
        }

    result = _in_child(body)
    assert result["sources"] == ["heuristic"] * 3
    warned = result["warnings"]
    assert isinstance(warned, list) and len(warned) == 1, warned
    assert "not a regular file" in warned[0] and str(db) in warned[0]


@pytest.mark.parametrize("where", ["explicit", "own-location"])
@pytest.mark.parametrize("make", [_fifo, _folder], ids=["fifo", "folder"])
def test_the_store_refuses_a_database_that_is_not_a_regular_file_in_one_line(
    tmp_path: Path, make: Callable[[Path], None], where: str
) -> None:
    root = tmp_path / "root"
    db = paths.database_path(DEVICE, root) if where == "own-location" else tmp_path / "cache.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    make(db)
    kind = os.lstat(db).st_mode
    location = {"root": root} if where == "own-location" else {"path": db}

    def body() -> dict[str, object]:
        try:
            Cache.open(device=DEVICE, **location).close()  # type: ignore[arg-type]
        except StoreError as error:
            return {"error": str(error), "type": type(error).__name__}
        return {"error": None}

    result = _in_child(body)
    message = str(result["error"])
    assert result["type"] == "StoreError" and "\n" not in message
    assert "not a regular file" in message and str(db) in message
    # Left as it was: nothing moved aside, nothing beside it.
    assert stat.S_IFMT(os.lstat(db).st_mode) == stat.S_IFMT(kind)
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]


def test_the_store_refuses_a_symlink_to_a_device_by_its_kind_before_opening_it(
    tmp_path: Path,
) -> None:
    from tunecache.store.filesystems import database_stat

    db = tmp_path / "cache.db"
    db.symlink_to("/dev/zero")
    with pytest.raises(StoreError, match="character device") as refused:
        database_stat(db)  # os.stat only: /dev/zero is never opened
    assert "\n" not in str(refused.value) and str(db) in str(refused.value)
    assert database_stat(tmp_path / "none.db") is None


def test_a_command_given_a_fifo_as_its_database_says_so_and_returns(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    os.mkfifo(db)
    for args in (("list",), ("where",), ("doctor",), ("import", "-")):
        done = subprocess.run(
            [sys.executable, "-m", "tunecache", *args, "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
            input="",
        )
        assert done.returncode == StoreError.exit_code, (args, done.stderr)
        assert "not a regular file" in done.stderr and done.stderr.count("\n") == 1
    assert stat.S_ISFIFO(os.lstat(db).st_mode)
