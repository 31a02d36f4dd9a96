"""The exceptions tunecache raises: one root, a few precise kinds."""

from __future__ import annotations

# Not `typing` at run time: every start of tunecache imports this module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from tunecache.tune import TuneReport

__all__ = [
    "BadArgumentError",
    "BadKeyError",
    "BadOutputError",
    "BadRecordError",
    "CodecError",
    "DeviceMismatchError",
    "NoCacheError",
    "NotFoundError",
    "ReadOnlyStoreError",
    "SchemaTooNewError",
    "StoreBusyError",
    "SQLiteDefectWarning",
    "StoreError",
    "StoreMovedError",
    "StoreUnreachableError",
    "TuneInterrupted",
    "TunecacheError",
    "TunecacheWarning",
]


class TunecacheError(Exception):
    """Root of every error tunecache raises on purpose."""

    #: exit status the command line uses for this kind of error
    exit_code = 1


class BadArgumentError(TunecacheError, ValueError):
    """An argument out of its range: a thread count, a timeout, a device field, a root."""

    exit_code = 2


class NoCacheError(BadArgumentError):
    """A command that only reads was pointed where no cache is; it creates none (exit status 2,
    as for any missing file)."""


class BadOutputError(BadArgumentError):
    """An output path tunecache will not write to: not a regular file (a device, a FIFO, a
    socket, a folder). Refused before anything is opened; the command line's usage status."""

    exit_code = 64


class BadKeyError(TunecacheError, ValueError):
    """A key, its text form or its dims are malformed."""

    exit_code = 2


class BadRecordError(TunecacheError, ValueError):
    """An entry, candidate list or timing record that breaks the store's rules."""

    exit_code = 3


class CodecError(BadRecordError):
    """Bytes that are not a valid, bounded tunecache CBOR record."""


class NotFoundError(TunecacheError):
    """Nothing in the cache matches what was asked for (exit status 1)."""


class DeviceMismatchError(TunecacheError):
    """Data from one device identity offered to a cache of another."""

    exit_code = 4


class StoreError(TunecacheError):
    """The cache database cannot do what was asked."""

    exit_code = 5


class StoreBusyError(StoreError):
    """The database stayed locked by another writer past the deadline."""

    exit_code = 6


class StoreMovedError(StoreError):
    """The file a connection opened is no longer the cache at its path: it was moved aside
    (a damaged cache, quarantined) or replaced. `Cache` reopens the live cache and goes on."""


class StoreUnreachableError(StoreError):
    """The fleet store's server could not be reached within the connect timeout, or the
    connection to it was lost; nothing local was changed."""


class SchemaTooNewError(StoreError):
    """The database was written by a newer tunecache; it is opened read-only."""

    exit_code = 7


class ReadOnlyStoreError(StoreError):
    """A write was asked of a cache that can only be read."""

    exit_code = 8


class TunecacheWarning(UserWarning):
    """Something the host program should hear about, that must not stop it."""


class SQLiteDefectWarning(TunecacheWarning):
    """The SQLite library this Python uses has a known defect in WAL mode.

    No longer raised: tunecache's own connections are immune to the WAL-reset bug by
    construction, and `doctor` and `where` name it instead (docs/reliability.md). The class
    stays so that warning filters naming it keep working.
    """


class TuneInterrupted(KeyboardInterrupt):
    """Ctrl-C during a tuning session: what was accepted is stored; `report` says what was done.

    A KeyboardInterrupt, so code that stops on Ctrl-C still stops; `report` is the session's
    `tunecache.tune.TuneReport` up to the interrupt.
    """

    def __init__(self, report: TuneReport) -> None:
        super().__init__("tuning interrupted")
        self.report = report
