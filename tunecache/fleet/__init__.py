"""The fleet: sync a local cache with a fleet store (pull this device's entries down, push
local ones up), incrementally (a push all or nothing, a pull in whole chunks, each with its
mark), conflicts settled by evidence.

`sync(local, remote, direction=...)` returns a `SyncReport`; `tunecache sync` prints it.
docs/fleet.md gives the rules.
"""

from __future__ import annotations

from tunecache.fleet.reports import DirectionReport, SyncReport
from tunecache.fleet.rules import ACTIONS, RULES, settle
from tunecache.fleet.transfer import DIRECTIONS, REMOTE_VAR, open_remote, sync

__all__ = [
    "ACTIONS",
    "DIRECTIONS",
    "REMOTE_VAR",
    "RULES",
    "DirectionReport",
    "SyncReport",
    "open_remote",
    "settle",
    "sync",
]
