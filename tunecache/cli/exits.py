"""The command line's own exit statuses, and the usage error a subcommand raises.

A TunecacheError carries its own status (`exit_code`, 1 to 8, and EXIT_USAGE for an output the
command refuses to write, `BadOutputError`); these are the ones only the command line gives:
docs/cli.md lists them all.
"""

from __future__ import annotations

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_PROBLEMS",
    "EXIT_USAGE",
    "EXIT_USER_CODE",
    "UsageError",
]

#: doctor found problems it did not repair (and explain found no answer)
EXIT_PROBLEMS = 1
#: the user's own code raised: a model or a candidate being tuned (tunecache.cli.usercode)
EXIT_USER_CODE = 9
#: bad usage: an unknown option, a bad value, nothing to prune
EXIT_USAGE = 64
#: an internal error: a bug
EXIT_INTERNAL = 70
#: interrupted (Ctrl-C)
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A combination of arguments argparse cannot express; reported as usage (exit 64)."""
