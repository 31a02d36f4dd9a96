"""The tunecache command, run as a real process."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tunecache._version import __version__
from tunecache.cli import EXIT_USAGE, main
from tunecache.device import detect


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunecache", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_version() -> None:
    done = _run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"tunecache {__version__}"


def test_where_creates_the_cache_and_prints_its_path(_isolated_cache_root: Path) -> None:
    done = _run("where")
    assert done.returncode == 0, done.stderr
    device = detect()
    db = _isolated_cache_root / "tune" / __version__ / f"{device.cpu}-t{device.threads}"
    assert re.search(rf"^database: +{re.escape(str(db / 'cache.db'))}$", done.stdout, re.MULTILINE)
    assert re.search(r"^revision: +0003$", done.stdout, re.MULTILINE)
    assert re.search(r"^entries: +0$", done.stdout, re.MULTILINE)
    assert (db / "cache.db").is_file()


def test_where_json_is_stable_for_scripts(_isolated_cache_root: Path) -> None:
    done = _run("where", "--json", "--threads", "3", "--accelerator", "NVIDIA H200")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert set(info) == {"device", "fingerprint", "database", "revision", "entries", "writable"}
    assert info["device"]["threads"] == 3
    assert info["device"]["accelerator"] == "nvidia-h200"
    assert info["database"].endswith("-t3/cache.db")
    assert info["writable"] is True


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("where", "--threads", "0"), 2, "threads must be between 1 and 65536"),
        (("where", "--client", "myruntime"), 2, "needs a client_version"),
        (("where", "--threads", "many"), EXIT_USAGE, "invalid int value"),
        (("frobnicate",), EXIT_USAGE, "invalid choice"),
        ((), EXIT_USAGE, "required"),
    ],
)
def test_errors_are_one_line_without_traceback(
    args: tuple[str, ...], status: int, message: str
) -> None:
    done = _run(*args)
    assert done.returncode == status
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tunecache")
    assert message in last


def test_a_broken_database_is_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite at all " * 64)
    done = _run("where", "--db", str(bad))
    assert done.returncode == 5
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert bad.read_bytes() == b"not sqlite at all " * 64


def test_main_is_callable_as_a_library_function(
    capsys: pytest.CaptureFixture[str], _isolated_cache_root: Path
) -> None:
    assert main(["where", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0


def test_help_exists_for_every_subcommand() -> None:
    for args in (("--help",), ("where", "--help")):
        done = _run(*args)
        assert done.returncode == 0
        assert "usage: tunecache" in done.stdout


def test_a_newer_schema_is_one_warning_line_even_under_w_error(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    assert _run("where", "--db", str(db)).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'fff9'")
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "tunecache", "where", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("tunecache: warning: ") and "newer than this tunecache" in lines[0]
    assert re.search(r"^read-only: +cache database", done.stdout, re.MULTILINE)


def test_an_empty_root_is_refused_and_a_relative_one_made_absolute(tmp_path: Path) -> None:
    done = _run("where", "--root", "")
    assert done.returncode == 2
    assert "must not be empty" in done.stderr
    done = _run("where", "--json", "--root", "rel", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["database"].startswith(str(tmp_path / "rel" / "tune"))
