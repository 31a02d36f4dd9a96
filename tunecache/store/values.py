"""The rows a write makes, as plain values: what `tunecache.writes` checks and builds, and what
the store's writers write.

Nothing here imports SQLAlchemy: the batch writer (`tunecache.store.bulk`, on SQLAlchemy's
connections) and the stdlib-sqlite3 writer (`tunecache.store.direct`) write the same values, so
an entry is stored as the same rows whichever one writes it. The status and verdict words the
schema's checks allow live here too (`tunecache.store.models` builds its constraints from them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NamedTuple

from tunecache import codec
from tunecache.keys import Key

__all__ = [
    "ENTRY_STATUSES",
    "ENTRY_VALUES",
    "RECORD_VALUES",
    "TIMING_VALUES",
    "VERDICTS",
    "EntryWrite",
    "OldEntry",
    "Slot",
    "RecordRow",
    "TimingRow",
    "VerdictFacts",
    "VerdictWrite",
    "collapse",
    "dims_text",
    "record_row",
]

#: unvalidated: measured, not yet confirmed by a whole model; accepted: kept by whole-model
#: acceptance; rejected: measured and not kept (recorded so it is not re-tuned for nothing)
ENTRY_STATUSES = ("unvalidated", "accepted", "rejected")
VERDICTS = ("validated", "masked")

#: the columns of an entry that a write sets, besides its device, key, list and creation time,
#: in the order every writer binds them (`EntryWrite` has them by name)
ENTRY_VALUES = ("choice", "heuristic", "status", "speedup", "run_id", "updated_at")
#: the columns of a timing record besides its entry and creation time (`RecordRow`'s names)
RECORD_VALUES = (
    "format_version",
    "best",
    "best_median_s",
    "heuristic_median_s",
    "candidates_count",
    "samples_count",
    "failures_count",
    "data",
)
#: the columns of one candidate's timing row besides its record (`TimingRow`'s fields, in order)
TIMING_VALUES = ("name", "samples", "inner_loops", "median_s", "min_s", "max_s", "pruned", "error")


def dims_text(key: Key) -> str:
    """A key's dims as the `keys.dims` column keeps them: `b=1 m=288 k=96 n=64`."""
    return " ".join(f"{name}={value}" for name, value in key.dims)


@dataclass(frozen=True, slots=True)
class VerdictFacts:
    """What a model's verdict on an entry says: the model, the verdict, the evidence behind it."""

    model: str
    fingerprint: str
    verdict: str
    gain: float | None
    rounds: int
    confirmations: int

    def facts(self) -> dict[str, Any]:
        """These fields alone, by name: to build another kind of verdict from this one."""
        return {f.name: getattr(self, f.name) for f in fields(VerdictFacts)}


class TimingRow(NamedTuple):
    """One candidate's summary row of a timing record: the columns of `candidate_timings` but
    its record's id."""

    name: str
    #: how many samples, and how many calls each one averaged
    samples: int
    inner_loops: int
    #: seconds: the median, fastest and slowest sample (None without samples)
    median_s: float | None
    min_s: float | None
    max_s: float | None
    pruned: bool
    error: str | None


@dataclass(frozen=True, slots=True)
class RecordRow:
    """A timing record as the store keeps it: its CBOR bytes, as they are written, and the
    summary columns and per-candidate rows that SQL reads without decoding them."""

    data: bytes
    best: str | None
    best_median_s: float | None
    heuristic_median_s: float | None
    candidates_count: int
    samples_count: int
    failures_count: int
    timings: tuple[TimingRow, ...]
    format_version: int = codec.FORMAT_VERSION


def record_row(record: codec.TimingRecord, blob: bytes, heuristic: str | None) -> RecordRow:
    """The rows of `record`, whose CBOR is `blob`, kept with an entry whose heuristic is
    `heuristic` (the summary names the heuristic's median).

    Each candidate's samples are sorted once for its median, min and max: the same values as
    `CandidateTiming.median`, `.min` and `.max` (statistics.median's own arithmetic), and the
    same best as `TimingRecord.best`, at a third of the cost of asking them one by one.
    """
    timings = []
    best: TimingRow | None = None
    heuristic_median = None
    for c in record.candidates:
        ordered = sorted(c.samples)
        n = len(ordered)
        median = low = high = None
        if n:
            mid = n // 2
            median = float(ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2)
            low, high = float(ordered[0]), float(ordered[-1])
        row = TimingRow(c.name, n, c.inner_loops, median, low, high, c.pruned, c.error)
        timings.append(row)
        # The fastest by median of those that ran and were not pruned; the first of equals.
        ran = c.error is None and not c.pruned and median is not None
        if ran and (best is None or (row.median_s or 0.0) < (best.median_s or 0.0)):
            best = row
        if c.name == heuristic:
            heuristic_median = median
    return RecordRow(
        data=blob,
        best=None if best is None else best.name,
        best_median_s=None if best is None else best.median_s,
        heuristic_median_s=heuristic_median,
        candidates_count=len(timings),
        samples_count=sum(t.samples for t in timings),
        failures_count=sum(1 for t in timings if t.error is not None),
        timings=tuple(timings),
    )


@dataclass(frozen=True, slots=True)
class VerdictWrite(VerdictFacts):
    """A model's verdict on an entry, as `write_entries` writes it with the entry: its facts,
    the run that gave it and when; it replaces that model's earlier verdict on the entry.

    `created_at` is written when the verdict is inserted and when it replaces one (an import
    keeps the export's times); None means `updated_at` for a new verdict, and a replaced one
    keeps its own.
    """

    run_id: int | None
    updated_at: datetime
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class EntryWrite:
    """One entry as `write_entries` writes it: the decision for a key against a candidate list
    (`names`, whose checksum is `checksum`), with its record and verdicts.

    An existing entry of the device, key and list is replaced, as `Cache.put` does: its record
    goes (`record` takes its place, if any), and its verdicts go when the choice changes, or
    always where `keep_verdicts` is False (an import replacing an entry with the export's
    verdicts). `created_at` follows VerdictWrite's rule. Nothing here is checked: the caller
    checked it all before the transaction (`tunecache.writes`).
    """

    key: Key
    names: tuple[str, ...]
    checksum: str
    #: the run that writes it, and when
    run_id: int | None
    updated_at: datetime
    #: the decision
    choice: str
    heuristic: str | None
    status: str
    speedup: float | None
    created_at: datetime | None = None
    record: RecordRow | None = None
    verdicts: tuple[VerdictWrite, ...] = ()
    keep_verdicts: bool = True


class OldEntry(NamedTuple):
    """An entry as it stood before a batch."""

    id: int
    choice: str
    created_at: datetime


@dataclass
class Slot:
    """The rows of one device, key and list that a batch writes, after all of its writes."""

    key_id: int
    set_id: int
    final: EntryWrite
    #: the entry as it was before the batch (None: a new entry)
    old: OldEntry | None
    created_at: datetime | None = None
    #: whether the verdicts the entry had before the batch go
    clear_verdicts: bool = False
    verdicts: dict[tuple[str, str], VerdictWrite] = field(default_factory=dict)
    entry_id: int = 0

    @property
    def created(self) -> datetime:
        """The entry's creation time once the batch is written: the batch's own (an import's),
        else the old entry's, else the time of the write that made it."""
        if self.created_at is not None:
            return self.created_at
        return self.old.created_at if self.old is not None else self.final.updated_at


def collapse(
    entries: Sequence[EntryWrite],
    places: Sequence[tuple[int, int]],
    old: Mapping[tuple[int, int], OldEntry],
) -> dict[tuple[int, int], Slot]:
    """What the writes leave at each (key id, set id) place, in the order the places first
    come: the last write's values, the verdicts that outlive every later write, and whether the
    entry's own verdicts go, exactly as one `put` after another would leave them."""
    slots: dict[tuple[int, int], Slot] = {}
    for write, at in zip(entries, places, strict=True):
        slot = slots.get(at)
        if slot is None:
            slot = slots[at] = Slot(at[0], at[1], write, old.get(at))
            before = None if slot.old is None else slot.old.choice
        else:
            before = slot.final.choice
        if before is not None and (before != write.choice or not write.keep_verdicts):
            # The verdicts judged another choice (or an import brings its own): every one
            # given so far goes, the entry's own and the batch's alike.
            slot.clear_verdicts = True
            slot.verdicts.clear()
        slot.final = write
        if write.created_at is not None:
            slot.created_at = write.created_at
        for v in write.verdicts:
            slot.verdicts[v.model, v.fingerprint] = v
    return slots
