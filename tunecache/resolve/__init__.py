"""The resolver: which candidate should this call use?

Every op of every model asks this on the hot path, so the answer comes from memory. A `Table` is a
read-only view of one device's decisions as seen by one model; it is filled lazily, one
signature at a time, from the database through the stdlib `sqlite3` module and the versioned
read-contract views (`read_*_v1`, migration 0003). Neither SQLAlchemy nor Alembic is imported here,
and numpy only when a signature first needs a nearest-shape search.

Resolution, for a key, the caller's legal candidates and the caller's heuristic pick:

1. the key's entry is masked for this model -> the heuristic (the entry stays for other models);
2. an entry for the exact key and the same candidate list, whose choice is legal -> its choice;
3. the nearest tuned shape of the same signature and candidate list, within `max_distance`
   (summed |log2 ratio| over the dims; dims a model declared symbolic are not capped) -> its
   choice, reported as borrowed, with the distance;
4. otherwise the heuristic.

A missing cache answers the heuristic everywhere, silently: no cache means no change. An
unreadable one answers the heuristic too, with one `TunecacheWarning`, and the host keeps running.

The modules, bottom up: `answer` (what is answered), `grid` (the nearest-shape index), `columns`
(a signature's entries as arrays, parsed from what the reader loads in bulk), `reader` (the
guarded sqlite3 reader), `explain` (the steps in words), `lookup` (the steps of resolution and
which entries serve), `table` (`Table`: options, memo, hot path), `contexts` (the table in
force: `current`, `set_default`, `using`).
"""

from __future__ import annotations

from tunecache.resolve.answer import SOURCES, Answer, Explanation
from tunecache.resolve.contexts import current, set_default, using
from tunecache.resolve.grid import DEFAULT_MAX_DISTANCE, check_max_distance
from tunecache.resolve.lookup import USES
from tunecache.resolve.table import MEMO_LIMIT, Table

__all__ = [
    "DEFAULT_MAX_DISTANCE",
    "MEMO_LIMIT",
    "SOURCES",
    "USES",
    "Answer",
    "Explanation",
    "Table",
    "check_max_distance",
    "current",
    "set_default",
    "using",
]
