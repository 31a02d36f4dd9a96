"""What the filesystem under a cache allows: WAL mode (not on a network filesystem), a database
that is a regular file, and room to write.

- A cache on a network filesystem is refused (`check_filesystem`): SQLite's WAL mode needs
  every process on one host.
- A database path holding anything but a regular file (a folder, a FIFO, a socket, a device,
  or a symlink to one) is refused by `database_stat`, which decides by `os.stat` alone: opening
  a FIFO blocks until someone writes to it, and SQLite would write to a device.
- A write that found no room (SQLITE_FULL, or the -shm file SQLite could not grow, or a
  file-size limit) is said to be a full disk (`no_room`), not a "disk I/O error".
- A cache at rest has no -shm file, and on a full disk the first reader cannot make one:
  `open_for_reading` then keeps SQLite's WAL index in the reader's own memory, holding the file
  locked against every other connection for as long as the reader stays open.

No SQLAlchemy here, and nothing heavier than `re`: the read commands and the resolver check
these before they read a cache through stdlib sqlite3 (`tunecache.store.health` re-exports the
network names).
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import stat
import warnings
from pathlib import Path

from tunecache.errors import StoreError, TunecacheWarning
from tunecache.paths import kind_of, sqlite_uri
from tunecache.store.access import frozen

__all__ = [
    "ALLOW_NETWORK_FS_ENV",
    "EXCLUSIVE",
    "IMMUTABLE",
    "NETWORK_FILESYSTEMS",
    "SHARED",
    "check_filesystem",
    "database_stat",
    "filesystem_of",
    "no_room",
    "open_for_reading",
]

#: environment variable that lets a cache live on a network filesystem used by one host only
ALLOW_NETWORK_FS_ENV = "TUNECACHE_ALLOW_NETWORK_FS"

#: Linux filesystem types (as /proc/self/mountinfo names them) whose files other hosts can
#: share: SQLite's WAL index in shared memory cannot span hosts, and their POSIX locks are
#: unreliable. FUSE types cover the common user-space network mounts.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "afs",
        "coda",
        "9p",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "beegfs",
        "orangefs",
        "ocfs2",
        "gfs2",
        "davfs",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "fuse.glusterfs",
        "fuse.cephfs",
        "fuse.ceph-fuse",
        "fuse.davfs2",
        "fuse.juicefs",
        "fuse.goofys",
        "fuse.mountpoint-s3",
    }
)

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
_warned_network: set[str] = set()


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in paths as octal escapes.
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def filesystem_of(path: Path, mountinfo: str | None = None) -> tuple[str, str] | None:
    """The mount point and filesystem type that hold `path`, or None where unknown.

    Reads /proc/self/mountinfo (Linux); elsewhere, or where it cannot be read, returns None.
    `path` need not exist: its nearest existing folder is looked up.
    """
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
                mountinfo = fh.read()
        except OSError:
            return None
    target = Path(os.path.realpath(path))
    best: tuple[str, str] | None = None
    best_len = -1
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        point = _unescape(fields[4])
        if not target.is_relative_to(point):
            continue
        # The longest mount point wins; of equal ones, the later mount (it hides the earlier).
        if len(point) >= best_len:
            best, best_len = (point, right.split()[0]), len(point)
    return best


def check_filesystem(db: Path, mountinfo: str | None = None) -> None:
    """Refuse a cache on a network filesystem, unless the user said only one host uses it.

    `mountinfo` is the mount table's text (by default, this process's own).
    """
    found = filesystem_of(db.parent, mountinfo)
    if found is None or found[1] not in NETWORK_FILESYSTEMS:
        return
    point, kind = found
    if os.environ.get(ALLOW_NETWORK_FS_ENV) == "1":
        if point not in _warned_network:
            _warned_network.add(point)
            warnings.warn(
                f"cache database {db} is on a network filesystem ({kind} at {point}); "
                f"{ALLOW_NETWORK_FS_ENV}=1 says only this host uses it: another host writing "
                "it at the same time would corrupt it",
                TunecacheWarning,
                stacklevel=3,
            )
        return
    raise StoreError(
        f"cache database {db} would be on a network filesystem ({kind} at {point}), where "
        "SQLite's WAL mode can corrupt it (every process must be on one host); set "
        f"TUNECACHE_DIR to a local disk, or {ALLOW_NETWORK_FS_ENV}=1 if only this host ever "
        "uses this cache"
    )


# --- the database file's kind ----------------------------------------------------------------


def database_stat(db: Path) -> os.stat_result | None:
    """The `os.stat` of the cache database at `db`, or None where nothing is there (a symlink
    to nothing counts as nothing).

    Raises a one-line StoreError where something other than a regular file is there: a
    folder, a FIFO, a socket, a device, or a symlink to one. Nothing is opened to decide.
    """
    try:
        found = os.stat(db)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:  # a folder on the way this user may not enter, a symlink loop
        why = error.strerror or error
        raise StoreError(f"cannot look at cache database {db}: {why}") from error
    if stat.S_ISREG(found.st_mode):
        return found
    what = kind_of(found.st_mode)
    if os.path.islink(db):
        what = f"a symlink to {what}"
    raise StoreError(
        f"cache database {db} is {what}, not a regular file; tunecache leaves it as it is "
        "and never opens it: remove it, or name another file"
    )


# --- room to write ----------------------------------------------------------------------------

#: SQLite's result codes that mean a write found no room
_FULL_CODES = ("SQLITE_FULL",)
#: SQLite's result codes of a failed write whose cause it does not give: a full disk among
#: others (the -shm file that could not grow, a write past a file-size limit)
_WRITE_CODES = ("SQLITE_IOERR_SHMSIZE", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_TRUNCATE")
#: below this much free space, a failed write of the kinds above is taken for a full disk
_LITTLE_ROOM = 1 << 20


def _free_bytes(folder: Path) -> int | None:
    try:
        found = os.statvfs(folder)
    except OSError:
        return None
    # Root may write into the blocks kept back from other users.
    blocks = found.f_bfree if os.geteuid() == 0 else found.f_bavail
    return blocks * found.f_frsize


def _size_limit() -> int | None:
    import resource  # only once a write has failed

    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def no_room(error: BaseException, db: Path) -> str | None:
    """Why `error`, met writing the cache database at `db` (or its -wal or -shm), means there
    is no room to write, in words that begin "disk full"; None where it does not.

    SQLITE_FULL, ENOSPC and EDQUOT say so themselves. A write SQLite reports only as an I/O
    error (growing the -shm file, a write past a file-size limit: EFBIG) is taken for a full
    disk where the filesystem has almost no free space or this process has a file-size limit.
    """
    orig = getattr(error, "orig", error)
    code = str(getattr(orig, "sqlite_errorname", "") or "")
    number = orig.errno if isinstance(orig, OSError) else None
    if code in _FULL_CODES or number in (errno.ENOSPC, errno.EDQUOT):
        return "disk full: free some space on its filesystem"
    if code in _WRITE_CODES or number == errno.EFBIG:
        limit = _size_limit()
        if limit is not None:
            return (
                f"disk full for this process: no file may grow past {limit} bytes "
                "(its file-size limit, ulimit -f)"
            )
        free = _free_bytes(db.parent)
        if free is not None and free < _LITTLE_ROOM:
            return f"disk full ({free} bytes free): free some space on its filesystem"
    return None


# --- opening a cache to read ------------------------------------------------------------------

#: how `open_for_reading` reads: as every reader does, through the shared -shm file
SHARED = "shared"
#: ... a frozen cache (nobody may write it), without a -shm file: SQLite's `immutable`
IMMUTABLE = "immutable"
#: ... no room for a -shm file: the WAL index in this process's memory, the file locked against
#: every other connection while the reader is open (close it after each read)
EXCLUSIVE = "exclusive"


def _connect(db: Path, timeout: float, **query: str) -> sqlite3.Connection:
    conn = sqlite3.connect(
        sqlite_uri(db, **query),
        uri=True,
        timeout=timeout,
        isolation_level=None,
        check_same_thread=False,
    )
    # tunecache.store.wal.never_checkpoint, written out: importing that module costs the
    # host's first question about 0.2 ms more (docs/reliability.md, "SQLite versions").
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    return conn


def _probe(conn: sqlite3.Connection) -> None:
    """Read once, so SQLite opens the WAL and its index now, and fails now if it cannot."""
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()


def _wal_is_empty(db: Path) -> bool:
    try:
        return os.stat(db.with_name(db.name + "-wal")).st_size == 0
    except FileNotFoundError:
        return True


def open_for_reading(db: Path, timeout: float) -> tuple[sqlite3.Connection, str]:
    """A connection that reads the cache database at `db` and never writes it (`query_only`),
    and how it reads: SHARED, IMMUTABLE or EXCLUSIVE.

    SHARED is SQLite's `mode=ro`, as every reader reads. Where that cannot read because this
    process may not make the -shm file of a WAL database and nobody is meant to write it (a
    frozen cache, `tunecache.store.access.frozen`), the file is read IMMUTABLE. Where there is
    no room to make the -shm file (a full disk: `no_room`) and the -wal holds nothing, it is
    read EXCLUSIVE: SQLite's exclusive locking mode keeps the WAL index in this process's
    memory and locks the file against every other connection, reader or writer, for as long
    as this one is open, so the caller closes it after each read. Raises sqlite3.Error where
    none of these can read it (the first error met).
    """
    conn = _connect(db, timeout, mode="ro")
    try:
        conn.execute("PRAGMA query_only = 1")
        _probe(conn)
        return conn, SHARED
    except sqlite3.OperationalError as error:
        conn.close()
        first = error
    wal_empty = _wal_is_empty(db)
    if frozen(db) and wal_empty:
        # Committed frames in a -wal would be ignored by an immutable reader: not frozen, then.
        conn = _connect(db, timeout, mode="ro", immutable="1")
        how = IMMUTABLE
    elif no_room(first, db) is not None and wal_empty:
        # mode=rw: SQLite's exclusive lock needs it; query_only keeps every statement from
        # writing, and an empty -wal leaves a closing connection nothing to checkpoint.
        conn = _connect(db, timeout, mode="rw")
        how = EXCLUSIVE
    else:
        raise first
    try:
        if how == EXCLUSIVE:
            conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("PRAGMA query_only = 1")
        _probe(conn)
    except sqlite3.Error:
        conn.close()
        raise first from None
    return conn, how
