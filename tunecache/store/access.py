"""Who may write a cache file: checks shared by the store and the resolver.

No SQLAlchemy here: the resolver imports this on a runtime's hot path.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["frozen", "read_only_mount"]


def read_only_mount(path: Path) -> bool:
    """Whether `path` is on a filesystem mounted read-only."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def frozen(db: Path) -> bool:
    """Whether nobody is meant to write the database at `db`: a read-only mount, or write
    permission taken from everyone on both the file and its folder.

    Only a frozen database is read as SQLite's `immutable`, which needs no -shm file: a reader
    that cannot create one has no other way in, and immutable is safe only if no one writes.
    """
    if read_only_mount(db.parent):
        return True
    try:
        modes = (db.stat().st_mode, db.parent.stat().st_mode)
    except OSError:
        return False
    anyone_writes = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    return not any(mode & anyone_writes for mode in modes)
