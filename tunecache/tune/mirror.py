"""A tuning session's view of a fleet store: its tables read a local SQLite mirror of the
device's rows (`tunecache.store.mirror`), made again after each write of the session and
whenever it reads what other tuners wrote, and removed when the session ends."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tunecache.resolve.misses import never_record

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = ["Mirror"]


class Mirror:
    """A temporary SQLite copy of what `cache` (a fleet store) holds for its device that the
    session's tables read."""

    def __init__(self, cache: Cache) -> None:
        from tunecache.cache import Cache

        self.cache = cache
        self.folder = Path(tempfile.mkdtemp(prefix="tunecache-mirror-"))
        #: the mirror's own file, for `tunecache.resolve.Table.open(path=...)`
        self.path = self.folder / "cache.db"
        never_record(self.path)  # the session's tables are no serving process's
        self.local = Cache.open(device=cache.device, path=self.path)
        self.update()

    def update(self) -> int:
        """Copy the fleet store's rows of the device again; how many entries it holds."""
        from tunecache.store.mirror import copy_device

        with self.cache.transaction() as source, self.local.transaction(write=True) as target:
            return copy_device(source.conn, target.conn, self.cache.device.fingerprint)

    def close(self) -> None:
        """Remove the mirror."""
        self.local.close()
        shutil.rmtree(self.folder, ignore_errors=True)
