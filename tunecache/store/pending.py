"""Pending keys: keys a runtime asked for and found no entry for, kept until they are tuned.

The rows of the `pending` table (migration 0007), one per device fingerprint, key and
candidate-list checksum: the candidate names, the heuristic, the op's importable name where the
process knew it (MODULE:ATTR or FILE.py:ATTR), what answered the key (the heuristic, a borrowed
neighbour, or a client's own word such as "triton"), how many times it was asked, and when
first and last. Written by the miss recorder (`tunecache.resolve.misses`) and by any client
with keys to tune later; benched and cleared by `tunecache.tune.pending`.

Stdlib sqlite3 only, so a process that serves from the cache records what it missed without
importing SQLAlchemy: the writes go through `DirectStore.transaction` (the writers' lock,
BEGIN IMMEDIATE, the schema revision checked inside it), and a database that writer refuses
(none yet, an older revision) is the caller's to create or upgrade through `Cache` first. The
reads open the file read-only and find nothing in a file without the table.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tunecache.candidates import candidate_names, checksum
from tunecache.errors import BadArgumentError, StoreError
from tunecache.keys import Key, format_key, parse
from tunecache.paths import sqlite_uri
from tunecache.store.reading import stamp, when

if TYPE_CHECKING:
    from tunecache.store.direct import DirectStore

__all__ = ["MAX_PENDING", "Pending", "clear_pending", "pending_keys", "record_pending"]

#: the most pending keys a device keeps: a key first met beyond it is dropped (and counted)
MAX_PENDING = 10_000

_COLUMNS = "key, checksum, candidates, heuristic, op, source, count, first_seen, last_seen, device"
_UPSERT = (
    "INSERT INTO pending (device, key, signature, checksum, candidates, heuristic, op, source,"
    " count, first_seen, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (device, key, checksum) DO UPDATE SET"
    " count = pending.count + excluded.count,"
    " last_seen = max(pending.last_seen, excluded.last_seen),"
    " first_seen = min(pending.first_seen, excluded.first_seen),"
    " op = coalesce(excluded.op, pending.op), source = excluded.source"
)


class Pending(NamedTuple):
    """One pending key: what was asked, against which candidates, by which op, how often."""

    #: the key's canonical text
    key: str
    #: the candidate list's checksum (`tunecache.candidates.checksum`)
    checksum: str
    candidates: tuple[str, ...]
    heuristic: str
    #: the op as MODULE:ATTR or FILE.py:ATTR, or None where the process did not know it
    op: str | None = None
    #: what answered it: "heuristic", "nearest", or a client's own word
    source: str = "heuristic"
    #: how many times it was asked (the `count` column)
    asked: int = 1
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    #: the device's fingerprint (filled in when read back)
    device: str = ""

    def parsed(self) -> Key:
        """The key as a `Key`."""
        return parse(self.key)


def _checked(item: Pending) -> tuple[str, str]:
    """The key's canonical text and its signature; BadArgumentError for a bad item."""
    if not isinstance(item, Pending):
        raise BadArgumentError(f"a pending key is a tunecache.store.pending.Pending, got {item!r}")
    key = parse(item.key)
    names = item.candidates
    if not names or not all(isinstance(n, str) and n for n in names):
        raise BadArgumentError(f"pending key {item.key}: candidates are non-empty names")
    if item.heuristic not in names:
        raise BadArgumentError(f"pending key {item.key}: heuristic {item.heuristic!r} is not one")
    if checksum(candidate_names(names)) != item.checksum:
        raise BadArgumentError(f"pending key {item.key}: checksum is not its candidates'")
    if not isinstance(item.asked, int) or item.asked < 1:
        raise BadArgumentError(f"pending key {item.key}: asked is an int >= 1")
    return format_key(key), key.signature


def record_pending(
    store: DirectStore, device: str, items: Iterable[Pending], *, now: datetime | None = None
) -> tuple[int, int]:
    """Add `items` to the device's pending keys in one transaction: a key already pending
    counts up and keeps its first sighting; one first met while the device has MAX_PENDING
    keys is dropped. Returns (keys written, keys dropped). Raises DirectWriteRefused, having
    written nothing, for a database `store` leaves to `Cache` (none yet, another revision)."""
    now = datetime.now(UTC) if now is None else now
    rows = []
    for item in items:
        text, signature = _checked(item)
        first = stamp(item.first_seen or now)
        last = stamp(item.last_seen or now)
        names = json.dumps(list(item.candidates))
        rows.append(
            (device, text, signature, item.checksum, names, item.heuristic, item.op,
             item.source, item.asked, first, last)
        )  # fmt: skip
    if not rows:
        return 0, 0
    dropped = 0
    with store.transaction() as conn:
        counted = conn.execute("SELECT count(*) FROM pending WHERE device = ?", (device,))
        held = int(counted.fetchone()[0])
        room = MAX_PENDING - held
        for row in rows:
            known = conn.execute(
                "SELECT 1 FROM pending WHERE device = ? AND key = ? AND checksum = ?",
                (device, row[1], row[3]),
            ).fetchone()
            if known is None:
                if room <= 0:
                    dropped += 1
                    continue
                room -= 1
            conn.execute(_UPSERT, row)
    return len(rows) - dropped, dropped


def clear_pending(store: DirectStore, device: str, keys: Iterable[tuple[str, str]]) -> int:
    """Remove the device's pending keys named by (key text, checksum), in one transaction;
    how many there were."""
    wanted = [(device, format_key(parse(key)), checksum) for key, checksum in keys]
    if not wanted:
        return 0
    with store.transaction() as conn:
        before = conn.total_changes
        conn.executemany(
            "DELETE FROM pending WHERE device = ? AND key = ? AND checksum = ?", wanted
        )
        return conn.total_changes - before


def pending_keys(path: Path, device: str | None = None, *, timeout: float = 30.0) -> list[Pending]:
    """The pending keys in the database at `path` (of one device fingerprint, or of every
    device), the most asked first; none where there is no file or no pending table yet."""
    if not Path(path).is_file():
        return []
    try:
        conn = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True, timeout=timeout)
    except sqlite3.Error as error:
        raise StoreError(f"cache database {path}: {error}") from error
    try:
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pending'"
        ).fetchone()
        if found is None:
            return []
        where, given = ("WHERE device = ?", (device,)) if device is not None else ("", ())
        rows: Sequence[tuple[object, ...]] = conn.execute(
            f"SELECT {_COLUMNS} FROM pending {where} ORDER BY count DESC, key, checksum", given
        ).fetchall()
    except sqlite3.Error as error:
        raise StoreError(f"cache database {path}: {error}") from error
    finally:
        conn.close()
    return [_row(row) for row in rows]


def _row(row: Sequence[object]) -> Pending:
    """One row of the pending table as a `Pending`."""
    key, sum_, names, heuristic, op, source, count, first, last, device = row
    return Pending(
        str(key),
        str(sum_),
        tuple(json.loads(str(names))),
        str(heuristic),
        None if op is None else str(op),
        str(source),
        int(str(count)),
        when(None if first is None else str(first)),
        when(None if last is None else str(last)),
        str(device),
    )
