"""Export, import and merge a device's cache as bytes or binary streams: one versioned CBOR
export, written and read an item at a time.

The API takes and returns bytes or file-like binary streams, never paths, so an embedded or
browser build can move a cache without a filesystem. An import is all or nothing: the export
is read and checked item by item, in bounded memory, and staged until its end has come; only
then does one write transaction apply it, so a bad file leaves the cache exactly as it was.

- `wire`: the items of the format (both versions), built and checked;
- `stream`: the version 2 stream, framed, ordered and read back with limits;
- `export`: a device's entries, a chunk of keys at a time, as the stream carries them;
- `staging`: an import's checked entries, set aside until the export has been read;
- `importer`: the conflict policies and the one transaction that applies an export;
- `merge`: another cache database (or an export) merged in;
- `reports`: what an import did, entry by entry, and how evidence compares.
"""

from __future__ import annotations

from tunecache.cache import Progress
from tunecache.exchange.export import Exported, export_cache, export_to
from tunecache.exchange.importer import POLICIES, import_cache, origin_device
from tunecache.exchange.merge import merge, open_source
from tunecache.exchange.reports import EntryAction, ImportReport, evidence
from tunecache.exchange.wire import (
    FORMAT,
    FORMAT_VERSION,
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_SIZE,
    SQLITE_HEADER,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_SIZE",
    "POLICIES",
    "SQLITE_HEADER",
    "EntryAction",
    "Exported",
    "ImportReport",
    "Progress",
    "evidence",
    "export_cache",
    "export_to",
    "import_cache",
    "merge",
    "open_source",
    "origin_device",
]
