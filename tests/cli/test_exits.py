"""The command line's own exit statuses, each documented where users look them up."""

from __future__ import annotations

import re

from tests.conftest import ROOT
from tunecache.cli import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PROBLEMS, EXIT_USAGE
from tunecache.errors import BadOutputError, TunecacheError


def test_each_status_is_in_docs_cli_md_and_apart_from_the_errors_own() -> None:
    documented = set(re.findall(r"^\| (\d+) \|", (ROOT / "docs" / "cli.md").read_text(), re.M))
    ours = {EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED}
    assert {str(status) for status in ours} <= documented
    # A TunecacheError exits 1 to 8: the command's own statuses never mean one of those but 1.
    assert {EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED}.isdisjoint(range(1, 9))
    assert TunecacheError.exit_code == EXIT_PROBLEMS
    # The one error that means bad usage: an output that is not a regular file.
    assert BadOutputError.exit_code == EXIT_USAGE
