"""`main`: every error is one line and a documented exit status, never a traceback."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import run_process
from tunecache.cache import Cache
from tunecache.cli import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, main
from tunecache.cli.app import show_warning
from tunecache.errors import SchemaTooNewError, TunecacheWarning


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
    done = run_process(*args)
    assert done.returncode == status
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tunecache")
    assert message in last


def test_a_broken_database_is_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite at all " * 64)
    done = run_process("where", "--db", str(bad))
    assert done.returncode == 5
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert bad.read_bytes() == b"not sqlite at all " * 64


def test_main_is_callable_as_a_library_function(
    capsys: pytest.CaptureFixture[str], _isolated_cache_root: Path
) -> None:
    assert main(["where", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0


def test_a_newer_schema_is_one_warning_line_even_under_w_error(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    Cache.open(path=db).close()
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


def _where_raises(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """Make `tunecache where` raise `error` where it opens the cache."""

    def read_cache(found: dict[str, object]) -> None:
        raise error

    monkeypatch.setattr("tunecache.cli.commands.store.read_cache", read_cache)


def test_a_tunecache_error_is_its_message_and_its_own_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _where_raises(monkeypatch, SchemaTooNewError("written by a newer tunecache"))
    assert main(["where"]) == SchemaTooNewError.exit_code == 7
    assert capsys.readouterr().err == "tunecache: error: written by a newer tunecache\n"


def test_ctrl_c_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _where_raises(monkeypatch, KeyboardInterrupt())
    assert main(["where"]) == EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "tunecache: interrupted\n"


def test_a_bug_is_one_line_and_exit_70_unless_debugging(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TUNECACHE_DEBUG", raising=False)
    _where_raises(monkeypatch, RuntimeError("boom"))
    assert main(["where"]) == EXIT_INTERNAL == 70
    err = capsys.readouterr().err
    assert err.startswith("tunecache: internal error: RuntimeError: boom (set TUNECACHE_DEBUG=1")
    assert err.count("\n") == 1
    monkeypatch.setenv("TUNECACHE_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["where"])


def test_a_tunecache_warning_is_one_line_and_any_other_left_to_python(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show_warning(TunecacheWarning("read it"), TunecacheWarning, "cache.py", 9)
    assert capsys.readouterr().err == "tunecache: warning: read it\n"
    with pytest.warns(UserWarning, match="not ours"):
        show_warning(UserWarning("not ours"), UserWarning, "some.py", 3)
    assert capsys.readouterr().err == ""


def test_output_into_a_pipe_closed_early_is_exit_0_and_no_message(tmp_path: Path) -> None:
    """`tunecache list | head -1`: the reader closes the pipe with most of the listing unread.
    The command stops quietly, and the rest goes nowhere (a pipe of its own, no device)."""
    from tunecache.cache import NewEntry

    db = tmp_path / "cache.db"
    with Cache.open(path=db) as cache:
        cache.put_many(
            NewEntry(f"conv_F32_m{i + 1}_k3", "im2col", ("direct", "im2col")) for i in range(3000)
        )
    child = subprocess.Popen(
        [sys.executable, "-m", "tunecache", "list", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline()  # the header: the command is writing
    child.stdout.close()
    said = child.stderr.read().decode()
    assert child.wait(timeout=120) == 0, said
    assert b"key" in first
    assert said == ""


def test_the_script_runs_main_and_leaves_what_it_made_to_the_exit() -> None:
    # `run` is what the `tunecache` script and `python -m tunecache` call: main's status, and
    # the objects of the run frozen for the collector, whose passes at exit would walk them.
    probe = (
        "import gc, sys\n"
        "from tunecache.cli import run\n"
        "sys.argv = ['tunecache', 'where', '--json']\n"
        "before = gc.get_freeze_count()\n"
        "status = run()\n"
        "print(status, gc.isenabled(), before, gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split()[-4:] == ["0", "True", "0", "True"]
    assert json.loads(done.stdout[: done.stdout.rindex("}") + 1])["entries"] == 0
