"""The `tunecache` command: a thin layer of argument parsing over library calls.

Every error is one line on stderr and a documented exit status, never a traceback (set
TUNECACHE_DEBUG=1 to see one). Exit statuses: 0 success, 1 a tunecache error (the error's own
status where it has one: 2 bad key, 3 bad record, 4 device mismatch, 5 store error, 6 store busy,
7 schema too new, 8 read-only), 64 bad usage, 70 an internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from tunecache._version import __version__
from tunecache.errors import TunecacheError, TunecacheWarning

__all__ = ["main"]

EXIT_USAGE = 64
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse that exits with EXIT_USAGE on bad arguments, after its one-line message."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _device_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("device")
    group.add_argument("--client", default="tunecache", help="client library name")
    group.add_argument("--client-version", help="client library version (needed with --client)")
    group.add_argument("--threads", type=int, help="thread pool size (default: usable CPUs)")
    group.add_argument("--accelerator", help="accelerator name, e.g. 'NVIDIA H200'")
    group.add_argument("--root", help="cache root (default: $TUNECACHE_DIR, else the user cache)")
    group.add_argument("--db", help="an explicit database file instead of the device's own")


def _open(args: argparse.Namespace) -> Any:
    from tunecache.cache import Cache

    return Cache.open(
        client=args.client,
        client_version=args.client_version,
        threads=args.threads,
        accelerator=args.accelerator,
        root=args.root,
        path=args.db,
    )


def cmd_where(args: argparse.Namespace) -> int:
    """Print the device identity and where its cache lives, creating the cache if needed."""
    with _open(args) as cache:
        info: dict[str, Any] = {
            "device": cache.device.as_dict(),
            "fingerprint": cache.device.fingerprint,
            "database": str(cache.path),
            "revision": cache.revision(),
            "entries": cache.count(),
            "writable": not cache.readonly,
        }
        if cache.readonly_reason:
            info["readonly_reason"] = cache.readonly_reason
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    width = max(len(k) for k in info["device"]) + 1
    for name, value in info["device"].items():
        print(f"{name + ':':<{width + 1}} {'-' if value is None else value}")
    print(f"{'database:':<{width + 1}} {info['database']}")
    print(f"{'revision:':<{width + 1}} {info['revision']}")
    print(f"{'entries:':<{width + 1}} {info['entries']}")
    if cache.readonly_reason:
        print(f"{'read-only:':<{width + 1}} {cache.readonly_reason}")
    return 0


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    if issubclass(category, TunecacheWarning):
        print(f"tunecache: warning: {message}", file=sys.stderr)
    else:
        _original_showwarning(message, category, filename, lineno, file, line)


_original_showwarning = warnings.showwarning


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `tunecache` command."""
    parser = _Parser(
        prog="tunecache",
        description="A persistent, per-device autotuning cache.",
    )
    parser.add_argument("--version", action="version", version=f"tunecache {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    where = sub.add_parser(
        "where",
        help="show this device's identity and its cache database",
        description=cmd_where.__doc__,
    )
    _device_options(where)
    where.add_argument("--json", action="store_true", help="machine-readable output")
    where.set_defaults(func=cmd_where)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        with warnings.catch_warnings():
            # tunecache's own warnings are one line on stderr, and never an error even under
            # `python -W error`: a warning is something the user should read, not a failure.
            warnings.simplefilter("always", TunecacheWarning)
            warnings.showwarning = _show_warning
            return func(args)
    except TunecacheError as error:
        print(f"tunecache: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("tunecache: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into `head` that closed early is not an error worth a message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
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


if __name__ == "__main__":
    sys.exit(main())
