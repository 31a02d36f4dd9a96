"""Reading never creates (issue 16, case 8): a read command pointed where nothing is says so and
leaves the folder tree as it found it; the commands that write create.

Each command runs as a real process, as a user would run it, against a path under the test's
folder whose parents do not exist; the whole tree under the test's folder is listed before and
after, so a folder, an empty database, a -wal or a lock file left behind is caught.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.conftest import run_process
from tunecache import exchange
from tunecache.cache import Cache

KEY = "conv_F32_m64_k3"
NAMES = ("direct", "im2col")

#: every command that only reads, with the arguments it needs besides --db
READ_COMMANDS = (
    ("where",),
    ("list",),
    ("show",),
    ("inspect", KEY),
    ("models",),
    ("sql",),
    ("sql", "SELECT 1"),
    ("doctor",),
    ("doctor", "--repair"),
    ("explain", KEY),
)


def _tree(top: Path) -> list[str]:
    """Every path under `top`, relative, sorted: what a command may not add to."""
    return sorted(str(p.relative_to(top)) for p in top.rglob("*"))


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c))
def test_a_read_command_at_a_mistyped_path_says_no_cache_and_creates_nothing(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    db = tmp_path / "nx" / "a" / "cache.db"
    before = _tree(tmp_path)
    done = run_process(*command, "--db", str(db))
    assert done.returncode == 2, done.stderr  # NoCacheError's status
    assert done.stderr == f"tunecache: error: no cache at {db}\n"
    assert done.stdout == ""
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c))
def test_a_read_command_in_an_existing_folder_creates_no_file(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    # The folder is there, the database is not: no empty cache, -wal or lock file appears.
    folder = tmp_path / "here"
    folder.mkdir()
    done = run_process(*command, "--db", str(folder / "cache.db"))
    assert done.returncode == 2, done.stderr
    assert "no cache at" in done.stderr and done.stderr.count("\n") == 1
    assert list(folder.iterdir()) == []


def test_where_without_db_reports_the_default_location_not_created_yet(
    _isolated_cache_root: Path, tmp_path: Path
) -> None:
    before = _tree(tmp_path)
    human = run_process("where")
    assert human.returncode == 0, human.stderr
    assert "not created yet" in human.stdout
    done = run_process("where", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["exists"] is False and info["revision"] is None and info["entries"] == 0
    assert Path(info["database"]).is_relative_to(_isolated_cache_root)
    assert info["database"] in human.stdout
    assert _tree(tmp_path) == before
    assert not _isolated_cache_root.exists()


@pytest.mark.parametrize("command", [c for c in READ_COMMANDS if c[0] not in ("where", "explain")])
def test_a_read_command_on_the_default_location_creates_nothing_either(
    command: tuple[str, ...], _isolated_cache_root: Path
) -> None:
    done = run_process(*command)
    assert done.returncode == 2, done.stderr
    assert "no cache at" in done.stderr and done.stderr.count("\n") == 1
    assert not _isolated_cache_root.exists()


def test_explain_without_db_answers_as_the_resolver_would_and_creates_nothing(
    _isolated_cache_root: Path,
) -> None:
    # The resolver's answer where no cache is: the caller's heuristic, silently.
    done = run_process("explain", KEY, "--candidates", ",".join(NAMES), "--heuristic", "direct")
    assert done.returncode == 0, done.stderr
    assert "no cache at" in done.stdout
    assert not _isolated_cache_root.exists()


def test_the_commands_that_write_create_the_cache(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    with Cache.open(path=source) as cache:
        cache.put(KEY, choice="im2col", candidates=NAMES, heuristic="direct")
        export = tmp_path / "e.cbor"
        export.write_bytes(exchange.export_cache(cache))
    for verb, what in (("import", export), ("merge", source)):
        db = tmp_path / verb / "new" / "cache.db"
        done = run_process(verb, str(what), "--db", str(db))
        assert done.returncode == 0, done.stderr
        assert db.is_file()
        listed = run_process("list", "--json", "--db", str(db))
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["count"] == 1


def test_a_dangling_symlink_is_no_cache_and_its_target_is_not_created(tmp_path: Path) -> None:
    link = tmp_path / "cache.db"
    link.symlink_to(tmp_path / "elsewhere" / "cache.db")
    done = run_process("list", "--db", str(link))
    assert done.returncode == 2 and "no cache at" in done.stderr, done.stderr
    assert sorted(os.listdir(tmp_path)) == ["cache.db"] and link.is_symlink()


@pytest.mark.parametrize(
    "command",
    [("export", "-o", "OUT"), ("prune", "--dry-run", "--unvalidated")],
    ids=["export", "prune-dry-run"],
)
def test_commands_that_only_read_the_cache_create_none_at_a_mistyped_db(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    folder = tmp_path / "nx" / "a"
    args = tuple(str(tmp_path / "out.cbor") if a == "OUT" else a for a in command)
    done = run_process(*args, "--db", str(folder / "cache.db"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"tunecache: error: no cache at {folder / 'cache.db'}"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_export_over_the_cache_itself_is_refused_and_the_cache_kept(tmp_path: Path) -> None:
    db = tmp_path / "cache.db"
    with Cache.open(path=db) as cache:
        cache.put("conv_F32_m64_k3", choice="b", candidates=("a", "b"))
    before = db.read_bytes()
    done = run_process("export", "--db", str(db), "-o", str(db))
    assert done.returncode == 64, done.stderr
    assert "it is the cache's own" in done.stderr
    assert db.read_bytes() == before
