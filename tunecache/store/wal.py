"""The WAL: known defects of SQLite releases in WAL mode, and how tunecache's readers stay
clear of them.

tunecache's own connections are immune to the WAL-reset bug by construction (docs/reliability.md
gives the argument): every commit and every checkpoint holds the writers' lock, and readers never
checkpoint (`never_checkpoint`). So no command warns about it; `tunecache where` and `doctor`
name it in one line each (`note`), since another program writing a cache could still meet it.
Stdlib only: the resolver and the read commands use it without SQLAlchemy.
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple

# Not `typing` at run time: `tunecache where` starts without it (tests/test_import.py).
TYPE_CHECKING = False

__all__ = [
    "SQLITE_VERSION",
    "WAL_DEFECTS",
    "Version",
    "WalDefect",
    "never_checkpoint",
    "note",
    "wal_defects",
]

#: a SQLite release, as (major, minor, patch)
Version = tuple[int, int, int]

#: the version of the SQLite library this Python uses
SQLITE_VERSION = sqlite3.sqlite_version


if TYPE_CHECKING:
    from typing import NamedTuple

    class _WalDefectFields(NamedTuple):
        name: str
        #: what goes wrong, in a few words
        summary: str
        #: the first release that has it
        first: Version
        #: the first release of the main line without it
        fixed: Version
        #: the first patched release of older series that got the fix backported
        backports: tuple[Version, ...]
        url: str

else:
    _WalDefectFields = namedtuple(
        "_WalDefectFields", ("name", "summary", "first", "fixed", "backports", "url")
    )


class WalDefect(_WalDefectFields):
    """A known SQLite defect in WAL mode, and the releases that have it (a named tuple, built
    by collections: a dataclass or typing's NamedTuple would cost every read command a
    millisecond to define or import)."""

    __slots__ = ()

    def affects(self, version: Version) -> bool:
        """Whether SQLite `version` has this defect."""
        if not self.first <= version < self.fixed:
            return False
        return not any(version[:2] == b[:2] and version >= b for b in self.backports)


#: Known WAL defects. Source: SQLite's own WAL page, https://sqlite.org/wal.html#walresetbug
#: (3.51.3 of 2026-03-13 fixed it; 3.44.6 and 3.50.7 carry the backported fix; 3.52.0, which
#: also has the fix, was withdrawn for unrelated reasons).
WAL_DEFECTS = (
    WalDefect(
        name="the WAL-reset bug",
        summary=(
            "a checkpoint racing another connection's commit that resets the WAL can corrupt "
            "the database or lose committed writes"
        ),
        first=(3, 7, 0),
        fixed=(3, 51, 3),
        backports=((3, 44, 6), (3, 50, 7)),
        url="https://sqlite.org/wal.html#walresetbug",
    ),
)


def wal_defects(version: Version | None = None) -> list[WalDefect]:
    """The known WAL defects of SQLite `version` (by default, the library this Python uses)."""
    if version is None:
        major, minor, patch = sqlite3.sqlite_version_info
        version = (major, minor, patch)
    return [defect for defect in WAL_DEFECTS if defect.affects(version)]


def note(version: Version | None = None) -> str:
    """This SQLite's version, with its known WAL defects and what they mean here, in one line."""
    shown = SQLITE_VERSION if version is None else ".".join(map(str, version))
    found = wal_defects(version)
    if not found:
        return shown
    names = ", ".join(d.name for d in found)
    return (
        f"{shown}, with {names}: tunecache's own connections cannot meet it, another program "
        "writing the cache can (docs/reliability.md)"
    )


def never_checkpoint(conn: sqlite3.Connection) -> None:
    """Keep a reader's connection from checkpointing. No automatic checkpoint: a reader commits
    nothing, so it would never run one, and this makes it so whatever it runs. Nor one when it
    closes last, as long as it is opened `mode=ro`: SQLite would have to write the database, and
    leaves the WAL as it is (tests/reliability/test_wal.py shows both)."""
    conn.execute("PRAGMA wal_autocheckpoint = 0")
