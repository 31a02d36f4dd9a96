"""Small JSON files kept beside the store by `tunecache.triton` (`jitkey`'s `triton-key.json`,
`warm`'s answers): replaced whole (and read whole, by `warm.read_json`).

A reader sees the old file or the new one, never a part of either: the new content goes to a
temporary file in the same folder, renamed over the old one. A writer killed before its rename
leaves its temporary file, which the next writer of that folder removes once it is a minute old
(by the file system's clock, which on a network file system may not be this host's). Such a
file is a cache of what the store or the installation says, never the only copy of anything:
a write that fails leaves the old file, and its caller carries on without.
"""

from __future__ import annotations

import contextlib
import os

# Not `typing` at run time: a warm start's first call reads a file through here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = ["ABANDONED", "replace"]

#: a temporary file this old (seconds) was left by a writer killed before its rename
ABANDONED = 60.0


def replace(path: Path, value: Any, prefix: str) -> None:
    """Replace the file with `value` as JSON (a temporary file named `prefix...` renamed over
    it), making its folder if need be; OSError where the folder does not take it."""
    import json
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    _sweep(path.parent, prefix, os.fstat(fd).st_mtime, os.path.basename(temporary))
    try:
        # Readable by the others who share the folder (mkstemp makes it the owner's only).
        os.fchmod(fd, 0o644)
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(value, fh)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _sweep(folder: Path, prefix: str, now: float, own: str) -> None:
    """Remove the temporary files of writers killed before their rename: older than
    `ABANDONED` seconds by `now`, the modification time of `own`, the caller's new one, so
    that both times are the file system's."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and n != own]
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            if os.stat(folder / name).st_mtime < now - ABANDONED:
                os.unlink(folder / name)
