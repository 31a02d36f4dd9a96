"""Entries of an import, checked and set aside in a temporary file until the whole export has
been read: only then does one write transaction apply them, a chunk at a time.

Why a staging file, not one transaction around the reading: an export is refused as soon as
any part of it is bad, and the last item may be the bad one (a stream cut short has no end
item). Read inside the transaction, a refused export larger than SQLite's page cache would
have spilled pages into the WAL before the rollback, so the cache's files would no longer be
byte-equal to what they were; and the write lock would be held for as long as the stream
takes to arrive (a pipe from another host), keeping every other writer waiting. Staged, a bad
export never touches the cache's files at all, and the lock is held only to compare and write.

The file lies in the cache's own folder (the disk the entries are going to; the system's
temporary folder may be memory) and has no name there; it goes when the import ends.
"""

from __future__ import annotations

import contextlib
import errno
import marshal
import struct
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, NamedTuple

from tunecache.errors import StoreError
from tunecache.exchange.checking import Summary
from tunecache.exchange.wire import ExportedEntry, ExportedVerdict, Set
from tunecache.keys import Key
from tunecache.store.bulk import EntryWrite, RecordRow, TimingRow, VerdictWrite

__all__ = ["CHUNK", "CHUNK_BYTES", "Staged", "Staging"]

#: the most entries applied in one chunk
CHUNK = 500
#: the most timing-record bytes applied in one chunk (a chunk ends after the entry past it)
CHUNK_BYTES = 8 * 1024 * 1024

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_LENGTH = struct.Struct("<I")

#: a verdict as it is staged: the facts of ExportedVerdict, its times in microseconds
_Verdict = tuple[str, str, str, float | None, int, int, int, int]


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


def _time(micros: int) -> datetime:
    return _EPOCH + micros * _MICROSECOND


class Staged(NamedTuple):
    """A checked entry as it was staged, read back: plain values, from which the import makes
    what it needs of each entry (most entries only need their write)."""

    key: str
    dims: tuple[tuple[str, int], ...]
    set: Set
    choice: str
    heuristic: str | None
    status: str
    speedup: float | None
    created_us: int
    updated_us: int
    blob: bytes | None
    samples: int
    verdicts: tuple[_Verdict, ...]
    summary: Summary | None

    @property
    def ident(self) -> tuple[str, str]:
        """Key and candidate set: what makes two entries the same decision."""
        return (self.key, self.set.checksum)

    def entry(self) -> ExportedEntry:
        """The entry, to compare with a local one."""
        return ExportedEntry(
            key=self.key,
            signature=self.set.signature,
            checksum=self.set.checksum,
            names=self.set.names,
            choice=self.choice,
            heuristic=self.heuristic,
            status=self.status,
            speedup=self.speedup,
            created_at=_time(self.created_us),
            updated_at=_time(self.updated_us),
            blob=self.blob,
            samples=self.samples,
            verdicts=tuple(
                ExportedVerdict(*v[:6], created_at=_time(v[6]), updated_at=_time(v[7]))
                for v in self.verdicts
            ),
        )

    def write(self, run_id: int) -> EntryWrite:
        """The write of this entry by run `run_id`: the export's decision, times, record and
        verdicts, in place of whatever the device had for its key and set (its verdicts
        included)."""
        record = None
        if self.summary is not None and self.blob is not None:
            best, best_median, heuristic_median, candidates, samples, failures, rows = self.summary
            record = RecordRow(
                data=self.blob,
                best=best,
                best_median_s=best_median,
                heuristic_median_s=heuristic_median,
                candidates_count=candidates,
                samples_count=samples,
                failures_count=failures,
                timings=tuple(TimingRow(*row) for row in rows),
            )
        return EntryWrite(
            key=Key(self.set.signature, self.dims),
            names=self.set.names,
            checksum=self.set.checksum,
            run_id=run_id,
            updated_at=_time(self.updated_us),
            choice=self.choice,
            heuristic=self.heuristic,
            status=self.status,
            speedup=self.speedup,
            created_at=_time(self.created_us),
            record=record,
            verdicts=tuple(
                VerdictWrite(*v[:6], run_id=run_id, updated_at=_time(v[7]), created_at=_time(v[6]))
                for v in self.verdicts
            ),
            keep_verdicts=False,
        )


def _staging_error(error: OSError) -> StoreError:
    """The one-line error of a write to the staging file that failed."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    said = "disk full: " if full else ""
    return StoreError(f"{said}cannot stage the import: {error.strerror or error}")


class Staging:
    """A temporary file of checked entries, written one by one and read back in chunks.

    Each entry is kept as a marshal record of plain values, with its timing record's rows:
    marshal reads back only what this process wrote to a file with no name, so
    nothing untrusted is ever unmarshalled. Candidate sets are kept in memory, once each.
    """

    def __init__(self, folder: Path) -> None:
        self.file: IO[bytes] = _temporary(folder)
        #: how many entries are staged
        self.count = 0
        self._sets: dict[tuple[str, str], int] = {}
        self._set_list: list[Set] = []

    def close(self) -> None:
        """Drop the file (it has no name: closing it frees its space). What its buffer still
        held is dropped too: a flush that fails here (a full disk) must not hide the error
        that ended the import."""
        with contextlib.suppress(OSError):
            self.file.close()

    def add(self, e: ExportedEntry, summary: Summary | None) -> None:
        """Stage one checked entry, as read from a file (its key parsed), with the rows of its
        record (checked: see `tunecache.exchange.checking`), if it has one."""
        assert e.parsed is not None, "only an entry read from a file is staged"
        at = self._sets.get((e.signature, e.checksum))
        if at is None:
            at = self._sets[e.signature, e.checksum] = len(self._set_list)
            self._set_list.append(Set(e.signature, e.checksum, e.names))
        values = (
            e.key,
            e.parsed.dims,
            at,
            e.choice,
            e.heuristic,
            e.status,
            e.speedup,
            _micros(e.created_at),
            _micros(e.updated_at),
            e.blob,
            0 if summary is None else summary[4],
            tuple(
                (*v.facts().values(), _micros(v.created_at), _micros(v.updated_at))
                for v in e.verdicts
            ),
            summary,
        )
        data = marshal.dumps(values)
        try:
            self.file.write(_LENGTH.pack(len(data)) + data)
        except OSError as error:
            raise _staging_error(error) from error
        self.count += 1

    def chunks(self) -> Iterator[list[Staged]]:
        """The staged entries in the order they came, at most CHUNK of them (and about
        CHUNK_BYTES of records) at a time."""
        try:
            self.file.flush()
        except OSError as error:
            raise _staging_error(error) from error
        self.file.seek(0)
        read, loads, sets, size = self.file.read, marshal.loads, self._set_list, _LENGTH.size
        chunk: list[Staged] = []
        length = 0
        for _ in range(self.count):
            values = loads(read(_LENGTH.unpack(read(size))[0]))
            staged = Staged(values[0], values[1], sets[values[2]], *values[3:])
            chunk.append(staged)
            length += 0 if staged.blob is None else len(staged.blob)
            if len(chunk) >= CHUNK or length >= CHUNK_BYTES:
                yield chunk
                chunk, length = [], 0
        if chunk:
            yield chunk


def _temporary(folder: Path) -> IO[bytes]:
    """A file with no name, in `folder` if it can be made there, else in the system's
    temporary folder (a read-only cache's folder: the write will say why it cannot)."""
    try:
        return tempfile.TemporaryFile(dir=folder)
    except OSError:
        try:
            return tempfile.TemporaryFile()
        except OSError as error:
            raise StoreError(f"cannot stage the import: {error.strerror or error}") from error
