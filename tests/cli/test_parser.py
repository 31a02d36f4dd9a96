"""The parser: every subcommand from the table, its help, and usage errors (exit 64)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from tests.cli.conftest import rows, run_process
from tunecache._version import __version__
from tunecache.cache import Cache
from tunecache.cli import EXIT_USAGE, build_parser, main
from tunecache.cli.parser import SUBCOMMANDS


def test_version() -> None:
    done = run_process("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"tunecache {__version__}"


def test_help_exists_for_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    done = run_process("--help")
    assert done.returncode == 0
    assert "usage: tunecache" in done.stdout
    # Every subcommand the parser knows, aliases included, so one added later is covered too.
    names = sorted(_subcommands())
    assert {"where", "list", "show", "inspect", "models", "prune", "export", "import"} <= set(names)
    assert {"merge", "doctor", "sql"} <= set(names)
    for name in names:
        with pytest.raises(SystemExit) as stop:
            main([name, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        # An alias prints its command's usage: `show` is `list`.
        assert re.match(rf"usage: tunecache {name if name != 'show' else 'list'} ", out), name
        assert "--json" in out and "--db" in out, name
        # The description says what the subcommand is for, not only its flags.
        assert len(out.split("\n\n")[1].strip()) > 20, name


def _subcommands() -> dict[str, object]:
    # argparse has no public way to list a parser's subcommands.
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_the_parser_has_each_subcommand_of_the_table_in_its_order() -> None:
    known = list(_subcommands())
    expected = [name for sub in SUBCOMMANDS for name in (sub.name, *sub.aliases)]
    assert known == expected
    # Each runs its own function, and its description is that function's docstring.
    for subcommand in SUBCOMMANDS:
        args = build_parser().parse_args([subcommand.name, *_required(subcommand.name)])
        assert args.func is subcommand.run
        assert args.parser.description == subcommand.run.__doc__


def _required(name: str) -> list[str]:
    """Positional arguments a subcommand cannot parse without."""
    return {
        "inspect": ["1"],
        "explain": ["k"],
        "import": ["f"],
        "merge": ["s"],
        "tune": ["m:x"],
        "tune-op": ["m:op"],
    }.get(name, [])


def test_bad_arguments_are_usage_errors_and_touch_nothing(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    before = rows(filled.path)
    for args in (
        ("list", "--older-than", "last tuesday"),
        ("list", "--status", "golden"),
        ("list", "--limit", "-1"),
        ("prune",),
        ("prune", "--older-than", "soon"),
        ("export", "--json"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(list(args))
        assert stop.value.code == EXIT_USAGE, args
        assert "error:" in capsys.readouterr().err
    assert rows(filled.path) == before


def test_a_usage_error_prints_the_subcommands_usage_then_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["sql", "--limit", "x"])
    assert stop.value.code == EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("usage: tunecache sql ")
    assert lines[-1] == "tunecache sql: error: argument --limit: 'x' is not an integer"


def test_python_m_tunecache_cli_runs_the_command_too() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tunecache.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == f"tunecache {__version__}"


def test_the_parser_and_its_help_load_neither_rich_nor_the_store() -> None:
    # `tunecache --help` and `--version` stay cheap: the commands import what they drive lazily.
    probe = (
        "import contextlib, io, sys\n"
        "from tunecache.cli import main\n"
        "from tunecache.cli.parser import SUBCOMMANDS\n"
        "for argv in (['--version'], ['--help'], *([s.name, '--help'] for s in SUBCOMMANDS)):\n"
        "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "        main(argv)\n"
        "print('\\n'.join(sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    heavy = ("rich", "sqlalchemy", "alembic", "numpy", "cbor2")
    assert {m for m in done.stdout.split() if m.split(".")[0] in heavy} == set()
