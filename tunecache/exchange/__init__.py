"""Export, import and merge a device's cache as bytes: one versioned CBOR document.

The API takes and returns bytes, never paths, so an embedded or browser build can move a cache
without a filesystem. An import is all-or-nothing: the whole document is decoded and checked
before one write transaction applies it, so a bad file leaves the cache exactly as it was.

- `wire`: the document format, written and read back with limits;
- `export`: a device's entries as the document carries them;
- `importer`: the conflict policies and the one transaction that applies a document;
- `merge`: another cache database (or an export's bytes) merged in;
- `reports`: what an import did, entry by entry, and how evidence compares.
"""

from __future__ import annotations

from tunecache.cache import Progress
from tunecache.exchange.export import export_cache
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
    "ImportReport",
    "Progress",
    "evidence",
    "export_cache",
    "import_cache",
    "merge",
    "open_source",
    "origin_device",
]
