"""The rule for files a command writes: a regular file replaced whole, anything else refused
before it is opened. (The command line's own cases are in tests/reliability/test_outputs.py.)"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

import pytest

from tunecache.errors import BadArgumentError, BadOutputError
from tunecache.outputs import STDOUT, check_output, write_output


def test_check_output_names_the_file_that_will_be_written(tmp_path: Path) -> None:
    real = tmp_path / "real.cbor"
    real.write_bytes(b"")
    (tmp_path / "link").symlink_to("real.cbor")
    assert check_output(tmp_path / "link") == real
    assert check_output(tmp_path / "new.cbor") == tmp_path / "new.cbor"
    assert STDOUT == "-"


@pytest.mark.parametrize("make", ["fifo", "folder", "trailing-slash"])
def test_check_output_refuses_what_is_not_a_regular_file(tmp_path: Path, make: str) -> None:
    target = tmp_path / "t"
    given = str(target)
    if make == "fifo":
        os.mkfifo(target)
    elif make == "folder":
        target.mkdir()
    else:
        given += "/"
    with pytest.raises(BadOutputError) as refused:
        check_output(given)
    assert given in str(refused.value) and "\n" not in str(refused.value)


def test_check_output_refuses_a_missing_folder_and_an_empty_name(tmp_path: Path) -> None:
    with pytest.raises(BadArgumentError, match="no folder"):
        check_output(tmp_path / "nx" / "a.cbor")
    with pytest.raises(BadArgumentError, match="empty"):
        check_output("")
    assert not (tmp_path / "nx").exists()


def test_write_output_replaces_whole_or_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "a.cbor"
    target.write_bytes(b"old")
    target.chmod(0o640)

    def half(fh: BinaryIO) -> None:
        fh.write(b"half of it")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_output(target, half)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["a.cbor"]
    assert write_output(target, lambda fh: fh.write(b"new")) == 3
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["a.cbor"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_write_that_fails_says_why_in_one_line(tmp_path: Path) -> None:
    def fails(fh: BinaryIO) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(BadArgumentError, match="disk full") as failed:
        write_output(tmp_path / "a.cbor", fails)
    assert "\n" not in str(failed.value) and os.listdir(tmp_path) == []
