"""Where tunecache writes a file it is asked to write (`tunecache export -o PATH`), and how.

One rule for every command that writes a file:

- `-` is standard output (`STDOUT`; the caller writes it there).
- A regular file is replaced whole: the new content goes to a temporary file in the same
  folder, flushed and fsynced, with the old file's permission bits (and owner, where this
  process may give it), then renamed over the old one (`os.replace`, atomic) and the folder
  fsynced. A failure, a full disk or Ctrl-C leaves the old file as it was and no temporary
  file behind. A file of that name that does not exist yet is made the same way.
- A symlink is written through: the file it names is replaced (or made) as above, beside it,
  and the symlink stays as it was. A symlink to anything but a regular file is refused.
- Anything else (a folder, a FIFO, a socket, a character or block device) is refused with a
  one-line BadOutputError, the command line's usage status, before anything is opened: the
  decision is `os.stat`'s alone, so a FIFO is never opened (which would block) and a device
  is never written or replaced.

A folder that does not exist is a BadArgumentError: nothing creates it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from tunecache.errors import BadArgumentError, BadOutputError
from tunecache.paths import kind_of

__all__ = ["STDOUT", "check_output", "write_output"]

#: the output name that means standard output
STDOUT = "-"

_T = TypeVar("_T")


def _refuse(given: str, mode: int, through_link: bool) -> BadOutputError:
    what = kind_of(mode)
    if through_link:
        what = f"a symlink to {what}"
    return BadOutputError(
        f"refusing to write {given}: it is {what}, not a regular file; name a regular file, "
        f"or {STDOUT} for standard output"
    )


def check_output(path: str | os.PathLike[str]) -> Path:
    """The regular file that writing to `path` replaces or makes: `path` itself, or the file
    a symlink there names (made absolute, symlinks resolved).

    Raises BadOutputError where that is something else (a folder, a FIFO, a socket, a
    device), decided by `os.stat` without opening anything, and BadArgumentError where the
    folder it would go in does not exist.
    """
    given = os.fspath(path)
    if not given:
        raise BadArgumentError("the output path must not be empty")
    if given.endswith(os.sep):
        raise BadOutputError(f"refusing to write {given}: it names a folder, not a file")
    target = Path(os.path.realpath(given))
    try:
        found = os.stat(target)
    except FileNotFoundError:
        found = None
    except OSError as error:
        raise BadArgumentError(f"cannot write {given}: {error.strerror or error}") from error
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise _refuse(given, found.st_mode, os.path.islink(given))
    if not target.parent.is_dir():
        raise BadArgumentError(f"cannot write {given}: no folder {target.parent}")
    return target


def _failed(given: str, error: OSError) -> BadArgumentError:
    why = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        why = f"disk full ({why})"
    return BadArgumentError(f"cannot write {given}: {why}")


def _sync_folder(folder: Path) -> None:
    """Make a rename in `folder` last through a power cut, where the filesystem allows."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_output(path: str | os.PathLike[str], write: Callable[[BinaryIO], _T]) -> _T:
    """Write the file at `path` whole or not at all, by the module's rule, through `write` on
    a binary stream; returns what `write` returned.

    Raises BadOutputError or BadArgumentError as `check_output` does, before anything is
    written, and BadArgumentError where writing fails (a full disk says so).
    """
    given = os.fspath(path)
    target = check_output(given)
    old = None
    with contextlib.suppress(FileNotFoundError):
        old = os.stat(target)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: never through a name someone put there first; 0o666 less the umask, as any
        # new file gets.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as error:
        raise _failed(given, error) from error
    try:
        with open(fd, "wb", closefd=True) as fh:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
                with contextlib.suppress(OSError):  # only root may give a file away
                    os.fchown(fd, old.st_uid, old.st_gid)
            done = write(fh)
            fh.flush()
            os.fsync(fd)
        # Looked at again just before the rename: a FIFO or device put there meanwhile is
        # refused, never replaced.
        check_output(given)
        os.replace(temp, target)
    except BaseException as error:
        # Also on Ctrl-C: no half-written temporary file is left beside the target.
        with contextlib.suppress(OSError):
            temp.unlink()
        if isinstance(error, OSError):
            raise _failed(given, error) from error
        raise
    _sync_folder(target.parent)
    return done
