"""What the user's own code raised: an exception from a model or a candidate being tuned, told
apart from tunecache's own errors and reported as what it is.

An exception that reaches a tuning command is the user's when the innermost frame of its
traceback outside the libraries (Python's own, and what is installed beside it) is in the
user's code, not in tunecache's package: it is reported as `UserCodeError`, one line with its
type, its message and that frame (file, line, function), and exit status EXIT_USER_CODE (9).
Where that frame is tunecache's own, it is a bug of tunecache's, left to the command line's
internal-error path (exit 70). TUNECACHE_DEBUG=1 lets the original exception through, with its
traceback. Every decision the session reached before the error is stored whole (each is one
transaction); the session's row in `runs` says it failed.
"""

from __future__ import annotations

import contextlib
import os
import site
import sys
import sysconfig
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from tunecache.cli.exits import EXIT_USER_CODE
from tunecache.errors import TunecacheError

__all__ = ["Frame", "UserCodeError", "user_code", "spec_roots", "user_frame", "user_roots"]

_PACKAGE = Path(__file__).resolve().parent.parent


class Frame(NamedTuple):
    """One frame of a traceback: where the user's code was when it raised."""

    path: str
    line: int
    function: str

    def text(self) -> str:
        """The frame as `file:line in function`."""
        return f"{self.path}:{self.line} in {self.function}"


class UserCodeError(TunecacheError):
    """The user's model or candidate raised: what it raised, and where in the user's code."""

    exit_code = EXIT_USER_CODE

    def __init__(self, what: str, error: BaseException, frame: Frame) -> None:
        message = " ".join(str(error).split())[:300]
        said = f"{type(error).__name__}: {message}" if message else type(error).__name__
        super().__init__(f"{what} raised {said} (at {frame.text()}); the error is in your code")
        self.error = error
        self.frame = frame


def user_roots(modules: Iterable[str]) -> tuple[Path, ...]:
    """The folders of the top-level packages of `modules` (dotted names of the user's own
    modules), so that code the user installed beside the libraries still counts as theirs."""
    roots = []
    for name in modules:
        module = sys.modules.get(name.partition(".")[0])
        where = getattr(module, "__file__", None)
        if where:
            roots.append(Path(where).resolve().parent)
    return tuple(roots)


def spec_roots(specs: Iterable[str]) -> tuple[Path, ...]:
    """The `user_roots` of the modules that MODULE:ATTR specs name (a FILE.py spec names
    none)."""
    wheres = (spec.rpartition(":")[0] for spec in specs)
    return user_roots(where for where in wheres if where and not where.endswith(".py"))


def user_frame(error: BaseException, roots: Iterable[Path] = ()) -> Frame | None:
    """The innermost frame of `error`'s traceback in the user's code, or None when the
    innermost frame outside the libraries is tunecache's own (or there is none)."""
    mine = tuple(roots)
    for summary in reversed(traceback.extract_tb(error.__traceback__)):
        path = summary.filename
        if _within(path, (_PACKAGE,)):
            return None
        if _within(path, mine) or not _library(path):
            return Frame(path, summary.lineno or 0, summary.name)
    return None


@contextlib.contextmanager
def user_code(what: str, roots: Iterable[Path] = ()) -> Iterator[None]:
    """Run a block that calls the user's code (`what` names it: "model 'encoder'"): an
    exception it raises is re-raised as a UserCodeError when it is the user's (`user_frame`).
    A TunecacheError, Ctrl-C and tunecache's own bugs go through as they are."""
    try:
        yield
    except TunecacheError:
        raise
    except Exception as error:
        frame = None if os.environ.get("TUNECACHE_DEBUG") else user_frame(error, roots)
        if frame is None:
            raise
        raise UserCodeError(what, error, frame) from error


def _within(path: str, roots: Iterable[Path]) -> bool:
    """Whether a source file lies in one of the folders."""
    try:
        resolved = Path(path).resolve()
    except (OSError, ValueError):
        return False
    return any(resolved.is_relative_to(root) for root in roots)


def _library(path: str) -> bool:
    """Whether a source file belongs to Python or to what is installed beside it (frozen
    modules, the standard library, site-packages)."""
    if path.startswith("<"):
        return True
    paths = sysconfig.get_paths()
    folders = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.update(site.getsitepackages())
    return _within(path, (Path(folder).resolve() for folder in folders))
