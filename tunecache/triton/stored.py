"""A kernel's own reads of its store: stdlib sqlite3 and the read contract, one connection.

A warm process's first call of a stored key asks one question: which config did this device
choose for this key and config list? That is one indexed read of `read_entries_v1`, which this
reader answers without the resolver (`tunecache.resolve`, whose nearest-shape index a key that
is found never needs). The resolver's `Table` is opened only when a key is not stored and may
borrow a neighbour's config, and it also answers whenever this reader cannot: a store that is
missing views or whose views differ from the contract, a locked or damaged one, a path that is
not a regular file. The reader then raises `Unreadable`, and the table's guarded reads decide
(and warn) as they always have. The same connection reads a key's entries under other config
lists and their timing records (what `reuse.plan_reuse` works from).

Served as the resolver serves a kernel's table (`use="all"`, no model): an entry that is not
rejected, whatever its verdicts.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunecache.triton.warm import store_signature

if TYPE_CHECKING:
    import sqlite3

    from tunecache.triton.warm import Signature
elif "sqlite3" in sys.modules:
    sqlite3 = sys.modules["sqlite3"]
else:
    # The C module `sqlite3` wraps (its connect, its connections, its exceptions: the same
    # objects), as `_thread` serves autotuner's RLock: `sqlite3` itself adds its DB-API module
    # and the registration of its date adapters, which no read here uses, about 0.2 ms of a
    # warm process's first call (0.4 ms on the H200's host). An interpreter without it, or a
    # process that has imported sqlite3 already, reads through sqlite3 itself.
    try:
        import _sqlite3 as sqlite3
    except ImportError:
        import sqlite3

__all__ = ["VIEW_TEXT_DIGEST", "StoreReader", "Unreadable", "is_contract_view"]

# The view this reader answers from, checked as the resolver checks it before its first read.
_VIEW = "read_entries_v1"

#: the SHA-256 (first 32 hex digits) of the view's SQL exactly as every revision's migrations
#: and `create_all` write it: a view of this text is the read contract's without working out
#: its canonical form, whose module (`tunecache.store.schema`) would cost a warm process's first
#: call of a stored key about 0.3 ms. Any other text is compared as before, canonically; a test
#: keeps this digest that of a text whose canonical digest is the contract's.
VIEW_TEXT_DIGEST = "6445d75c96b1a481831c4c338e49d1e1"


def is_contract_view(sql: object) -> bool:
    """Whether `sql` (a row of `sqlite_master`) defines the read contract's view: its text as
    tunecache writes it, or one whose canonical form is that (`tunecache.store.schema`)."""
    if not isinstance(sql, str):
        return False
    from tunecache._digest import sha256

    if sha256(sql.encode()).hexdigest()[:32] == VIEW_TEXT_DIGEST:
        return True
    from tunecache.store import schema

    return schema.digest("view", sql) == schema.OBJECTS[("view", _VIEW)][1]


class Unreadable(Exception):
    """The store cannot be read by this reader here and now: the resolver's table decides."""


class StoreReader:
    """Read-only access to one device's store: its entries by exact key, and their records.

    Every call runs under the kernel's lock (misses and the background tuner hold it), so one
    connection serves the process; a forked child opens its own.
    """

    def __init__(self, path: Path | None, device: str) -> None:
        #: the database file (None: the table has none), and the device's fingerprint
        self.path, self.device = path, device
        #: the store's state (`warm.store_signature`) and the time as this reader first
        #: looked at it, before its first read: the warm start keeps what the reads answered
        #: only while the store still is in that state (None: not looked at yet)
        self.signature: Signature | None = None
        self.signed_at = 0.0
        self._conn: sqlite3.Connection | None = None
        self._pid = -1

    def _connect(self) -> sqlite3.Connection | None:
        """The connection (None: no store yet, so nothing is stored); Unreadable otherwise."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        self._conn = None
        if self.path is None:
            return None
        if self.signature is None:
            self.signature, self.signed_at = store_signature(self.path), time.time()
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise Unreadable(str(error)) from None
        if not stat.S_ISREG(found.st_mode):
            raise Unreadable("not a regular file")  # a FIFO would block the open
        if found.st_size == 0:
            return None  # SQLite made the file and not yet its first page: being created
        from tunecache.paths import sqlite_uri

        try:
            conn = sqlite3.connect(
                sqlite_uri(self.path, mode="ro"), uri=True, timeout=5.0, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise Unreadable(str(error)) from None
        try:
            views = conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?", (_VIEW,)
            ).fetchall()
            contract = len(views) == 1 and is_contract_view(views[0][0])
        except sqlite3.Error:
            contract = False
        if not contract:
            conn.close()
            raise Unreadable(f"view {_VIEW} missing, unreadable or not the read contract's")
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _row(self, sql: str, parameters: tuple[object, ...]) -> Any:
        """The first row a read finds (None: none, or no store yet); Unreadable on an error."""
        conn = self._connect()
        if conn is None:
            return None
        try:
            return conn.execute(sql, parameters).fetchone()
        except sqlite3.Error as error:
            self.close()
            raise Unreadable(str(error)) from None

    def choice(self, key: str, checksum: str) -> str | None:
        """The stored choice of this key and config list on this device, if one is served."""
        row = self._row(
            "SELECT choice FROM read_entries_v1 WHERE key = ? AND checksum = ? AND device = ?"
            " AND status != 'rejected'",
            (key, checksum, self.device),
        )
        return None if row is None else str(row[0])

    def others(
        self, key: str, signature: str, checksum: str
    ) -> list[tuple[int, tuple[str, ...], str]]:
        """This key's entries tuned against other config lists, newest first, as (entry id,
        config list, choice); [] when there are none or the store cannot be read."""
        try:
            conn = self._connect()
            if conn is None:
                return []
            rows = conn.execute(
                # "+device": without it SQLite walks every entry of the device in the order of
                # its (device, updated_at) index instead of sorting the key's one or two rows.
                "SELECT entry_id, checksum, choice FROM read_entries_v1 WHERE key = ?"
                " AND +device = ? AND checksum != ? AND status != 'rejected'"
                " ORDER BY updated_at DESC, entry_id DESC",
                (key, self.device, checksum),
            ).fetchall()
            out = []
            for entry_id, old_sum, choice in rows:
                names = conn.execute(
                    "SELECT name FROM read_candidates_v1 WHERE signature = ? AND checksum = ?"
                    " ORDER BY position",
                    (signature, old_sum),
                ).fetchall()
                out.append((int(entry_id), tuple(n for (n,) in names), str(choice)))
        except (Unreadable, sqlite3.Error):
            return []
        return out

    def record(self, entry_id: int) -> bytes | None:
        """An entry's timing record as stored (CBOR), or None; Unreadable when it cannot be
        read."""
        found = self._row("SELECT data FROM read_records_v1 WHERE entry_id = ?", (entry_id,))
        return None if found is None or found[0] is None else bytes(found[0])

    def close(self) -> None:
        """Close the connection (a later read opens another)."""
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None
