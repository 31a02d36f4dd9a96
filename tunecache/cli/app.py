"""`main`: parse, run one subcommand, and turn whatever it raises into one line and a status.

A TunecacheError is its message and its own exit code; a usage error is argparse's usage and
EXIT_USAGE; Ctrl-C is EXIT_INTERRUPTED; anything else is an internal error (EXIT_INTERNAL), with
a traceback only under TUNECACHE_DEBUG=1. tunecache's own warnings are one line on stderr.
`run` is `main` for a process that exits when it returns: the `tunecache` script.
"""

from __future__ import annotations

import gc
import io
import os
import sys
import warnings

from tunecache.cli.exits import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, UsageError
from tunecache.cli.parser import build_parser
from tunecache.errors import TunecacheError, TunecacheWarning

# Not `typing` at run time: the command line starts without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from typing import TextIO

__all__ = ["main", "run", "show_warning"]

_original_showwarning = warnings.showwarning


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Show a tunecache warning as one line on stderr, and any other as Python would."""
    if issubclass(category, TunecacheWarning):
        print(f"tunecache: warning: {message}", file=sys.stderr)
    else:
        _original_showwarning(message, category, filename, lineno, file, line)


def _paths_as_bytes() -> None:
    """Print a path that is not UTF-8 as the bytes it is, never fail on it.

    Python holds such a name as text with surrogate escapes (`os.fsdecode`), which a UTF-8
    stream refuses; standard output writes them back as the bytes they stand for, so a script
    gets the very path (standard error already escapes them, as backslashes).
    """
    stream = sys.stdout
    if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
        stream.reconfigure(errors="surrogateescape")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    _paths_as_bytes()
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    args.argv = tuple(argv)  # as given: identical `tune` commands share a session (sharing)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        with warnings.catch_warnings():
            # tunecache's own warnings are one line on stderr, and never an error even under
            # `python -W error`: a warning is something the user should read, not a failure.
            warnings.simplefilter("always", TunecacheWarning)
            warnings.showwarning = show_warning
            return func(args)
    except UsageError as error:
        args.parser.error(str(error))
        return EXIT_USAGE  # not reached: error() exits
    except TunecacheError as error:
        print(f"tunecache: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("tunecache: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into `head` that closed early is not an error worth a message. What is
        # still buffered goes into a pipe of this process's own that nobody reads (less than
        # its 64 KiB), never into a shared device such as /dev/null, so the flush at exit
        # cannot fail again.
        _, sink = os.pipe()
        os.dup2(sink, sys.stdout.fileno())
        return 0
    except Exception as error:  # the promise: one line, never a traceback
        if os.environ.get("TUNECACHE_DEBUG"):
            raise
        print(
            f"tunecache: internal error: {type(error).__name__}: {error} "
            "(set TUNECACHE_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def run() -> int:
    """Run the command line on sys.argv as the `tunecache` script does, in a process that
    exits next; returns the exit status."""
    try:
        return main()
    finally:
        # The exit collects garbage over every object the run left, more than once: 2 ms of
        # the 20 that `tunecache where` takes. The command has closed what it opened, and the
        # memory goes back to the system either way, so the collector is told to skip them.
        gc.freeze()
