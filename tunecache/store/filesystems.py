"""Whether a cache's folder is on a network filesystem, where SQLite's WAL mode cannot work.

No SQLAlchemy here, and nothing heavier than `re`: the read commands check this before they
read a cache through stdlib sqlite3 (`tunecache.store.health` re-exports these names).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from tunecache.errors import StoreError, TunecacheWarning

__all__ = ["ALLOW_NETWORK_FS_ENV", "NETWORK_FILESYSTEMS", "check_filesystem", "filesystem_of"]

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
