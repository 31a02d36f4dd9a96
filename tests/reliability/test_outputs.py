"""Export writes only what it should (issue 16, case 7): standard output for `-o -`, a regular
file replaced whole, a symlink written through to the regular file it names, and anything else
(a FIFO, a folder, a socket, a device) refused in one line with the usage status, untouched.

No test here writes to a device: the non-regular targets are a FIFO, a folder and a socket made
in the test's folder. The FIFO is never opened by the test, and a command that opened it for
writing would block with no reader: the command runs as a real process with a deadline, so a
regression shows as a failure, not a hung suite. The one character device used, /dev/zero, is
only looked at through a symlink by `tunecache.outputs.check_output`, which never opens it.
"""

from __future__ import annotations

import io
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunecache import exchange
from tunecache.cache import Cache

KEY = "conv_F32_m64_k3"
NAMES = ("direct", "im2col")
#: the command line's usage status (tunecache.cli.EXIT_USAGE)
USAGE = 64


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A cache with one entry, at a path the commands name with --db."""
    path = tmp_path / "store" / "cache.db"
    with Cache.open(path=path) as cache:
        cache.put(KEY, choice="im2col", candidates=NAMES, heuristic="direct")
    return path


def _export(db: Path, target: str) -> subprocess.CompletedProcess[bytes]:
    """`tunecache export -o TARGET` as a real process, with a deadline, its output as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "tunecache", "export", "--db", str(db), "-o", target],
        capture_output=True,
        timeout=60,
        input=b"",
    )


def _entries(data: bytes, tmp_path: Path) -> int:
    """How many entries an export holds, imported into a fresh cache."""
    with Cache.open(path=tmp_path / "check" / f"{len(os.listdir(tmp_path))}.db") as other:
        return exchange.import_cache(other, io.BytesIO(data)).counts["added"]


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    """A listening Unix socket in the test's folder (nobody ever connects to it)."""
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    try:
        yield path
    finally:
        server.close()


def _refused(done: subprocess.CompletedProcess[bytes], target: Path) -> None:
    err = done.stderr.decode()
    assert done.returncode == USAGE, err
    assert err.startswith("tunecache: error: ") and err.count("\n") == 1, err
    assert str(target) in err and "regular file" in err
    assert done.stdout == b""


def test_export_to_a_fifo_is_refused_before_the_fifo_is_opened(db: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused(_export(db, str(fifo)), fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["pipe", "store"]


def test_export_to_a_folder_or_a_socket_is_refused_and_leaves_it(
    db: Path, tmp_path: Path, unix_socket: Path
) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    _refused(_export(db, str(folder)), folder)
    assert list(folder.iterdir()) == []
    _refused(_export(db, str(unix_socket)), unix_socket)
    assert stat.S_ISSOCK(os.lstat(unix_socket).st_mode)


def test_a_symlink_to_a_fifo_is_refused_and_stays_a_symlink(db: Path, tmp_path: Path) -> None:
    fifo, link = tmp_path / "pipe", tmp_path / "link"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    _refused(_export(db, str(link)), link)
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)


def test_a_character_device_is_refused_by_its_kind_without_being_opened(tmp_path: Path) -> None:
    from tunecache.errors import BadOutputError
    from tunecache.outputs import check_output

    link = tmp_path / "zero"
    link.symlink_to("/dev/zero")  # only stat()ed: check_output never opens what it refuses
    with pytest.raises(BadOutputError, match="character device") as refused:
        check_output(link)
    assert refused.value.exit_code == USAGE and "\n" not in str(refused.value)
    assert link.is_symlink()


def test_a_regular_file_is_replaced_whole_and_keeps_its_permissions(
    db: Path, tmp_path: Path
) -> None:
    target = tmp_path / "out.cbor"
    target.write_bytes(b"an older export")
    target.chmod(0o600)
    old_inode = os.stat(target).st_ino
    done = _export(db, str(target))
    assert done.returncode == 0, done.stderr
    assert os.stat(target).st_ino != old_inode  # a new file renamed into place, not rewritten
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert _entries(target.read_bytes(), tmp_path) == 1
    assert sorted(os.listdir(tmp_path)) == ["check", "out.cbor", "store"]  # no temporary left


def test_a_symlink_to_a_regular_file_is_written_through_and_stays_a_symlink(
    db: Path, tmp_path: Path
) -> None:
    real = tmp_path / "exports" / "2026-01.cbor"
    real.parent.mkdir()
    real.write_bytes(b"last month")
    link = tmp_path / "latest.cbor"
    link.symlink_to(real)
    done = _export(db, str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert _entries(real.read_bytes(), tmp_path) == 1
    assert os.listdir(real.parent) == ["2026-01.cbor"]


def test_a_dangling_symlink_is_written_through_to_the_file_it_names(
    db: Path, tmp_path: Path
) -> None:
    real = tmp_path / "new.cbor"
    link = tmp_path / "link.cbor"
    link.symlink_to(real.name)  # relative, as `ln -s new.cbor link.cbor` makes it
    done = _export(db, str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and _entries(real.read_bytes(), tmp_path) == 1


def test_dash_writes_standard_output(db: Path, tmp_path: Path) -> None:
    done = _export(db, "-")
    assert done.returncode == 0, done.stderr
    assert _entries(done.stdout, tmp_path) == 1
    assert not (Path.cwd() / "-").exists()


def test_a_missing_folder_is_one_line_and_creates_nothing(db: Path, tmp_path: Path) -> None:
    target = tmp_path / "nx" / "out.cbor"
    done = _export(db, str(target))
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and str(target.parent) in err, err
    assert not target.parent.exists()
