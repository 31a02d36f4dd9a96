"""What a write to a cache carries, checked before any transaction starts.

`NewEntry` and `NewVerdict` are the values `Cache.put_many` takes (`tunecache.cache` re-exports
them). `entry_writes` checks a batch of them exactly as `Cache.put` checks its arguments, and
turns them into the rows `tunecache.store.bulk.write_entries` writes; a bad one raises a
one-line error that names its position and key, before anything is written. The argument checks
the store API shares (a key, a status, a positive number, a count) live here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tunecache import codec
from tunecache.candidates import candidate_names, checksum
from tunecache.checks import is_finite, is_int
from tunecache.errors import BadKeyError, BadRecordError
from tunecache.keys import Key, parse
from tunecache.store.values import ENTRY_STATUSES, VERDICTS, EntryWrite, VerdictWrite, record_row

__all__ = [
    "NewEntry",
    "NewVerdict",
    "as_key",
    "check_run_id",
    "check_status",
    "count",
    "entry_write",
    "entry_writes",
    "label",
    "positive",
    "verdict_write",
]


@dataclass(frozen=True, slots=True)
class NewVerdict:
    """A model's verdict to write with an entry (`NewEntry.verdicts`): the fields
    `Cache.validate` takes, and the same rules."""

    model: str
    fingerprint: str
    verdict: str
    gain: float | None = None
    rounds: int = 0
    confirmations: int = 0
    run_id: int | None = None


@dataclass(frozen=True, slots=True)
class NewEntry:
    """One entry for `Cache.put_many`: the fields `Cache.put` takes, and the same rules, plus
    the verdicts of models to write with it in the same transaction (each replaces that
    model's earlier verdict on the entry, after the entry is written)."""

    key: Key | str
    choice: str
    candidates: Sequence[str]
    heuristic: str | None = None
    record: codec.TimingRecord | None = None
    speedup: float | None = None
    status: str = "unvalidated"
    run_id: int | None = None
    verdicts: Sequence[NewVerdict] = ()


def as_key(key: Key | str) -> Key:
    """`key` as a validated Key: parsed from its text, or round-tripped through it."""
    if isinstance(key, str):
        return parse(key)
    if isinstance(key, Key):
        # Round-trip through the text form: it validates a Key built by the raw constructor.
        return parse(key.text)
    raise BadRecordError(f"a key must be a Key or its text, got {type(key).__name__}")


def check_status(status: object) -> None:
    """Refuse a status that is not one of ENTRY_STATUSES."""
    if status not in ENTRY_STATUSES:
        raise BadRecordError(f"status must be one of {ENTRY_STATUSES}, got {status!r}")


def positive(value: object, what: str) -> float | None:
    """`value` as a float, refusing anything but None or a finite positive number."""
    if value is None:
        return None
    if not is_finite(value) or value <= 0:
        raise BadRecordError(f"{what} must be a finite positive number, got {value!r}")
    return float(value)


def count(value: object, what: str) -> int:
    """`value`, refusing anything but a non-negative integer."""
    if not is_int(value) or value < 0:
        raise BadRecordError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def check_run_id(run_id: object) -> int | None:
    """`run_id`, refusing anything but None or an integer (whether the run exists is asked
    inside the write transaction, so that a run deleted meanwhile cannot slip through)."""
    if run_id is not None and not is_int(run_id):
        raise BadRecordError(f"run_id must be an integer, got {run_id!r}")
    return run_id


def verdict_write(verdict: NewVerdict, now: datetime) -> VerdictWrite:
    """The checked row of a model's verdict, given now."""
    if verdict.verdict not in VERDICTS:
        raise BadRecordError(f"verdict must be one of {VERDICTS}, got {verdict.verdict!r}")
    model, fingerprint = verdict.model, verdict.fingerprint
    if not isinstance(model, str) or not model or not isinstance(fingerprint, str):
        raise BadRecordError("a model needs a non-empty name and a fingerprint string")
    rounds = count(verdict.rounds, "rounds")
    confirmations = count(verdict.confirmations, "confirmations")
    if confirmations > rounds:
        raise BadRecordError(f"confirmations ({confirmations}) exceed rounds ({rounds})")
    return VerdictWrite(
        model=model,
        fingerprint=fingerprint,
        verdict=verdict.verdict,
        gain=positive(verdict.gain, "gain"),
        rounds=rounds,
        confirmations=confirmations,
        run_id=check_run_id(verdict.run_id),
        updated_at=now,
    )


def entry_write(
    entry: NewEntry, now: datetime, sums: dict[tuple[str, ...], str] | None = None
) -> EntryWrite:
    """The checked rows of one entry, given now: every check `Cache.put` makes before its
    transaction. `sums` remembers the checksums of candidate lists already met in a batch."""
    key = as_key(entry.key)
    names = candidate_names(entry.candidates)
    choice, heuristic = entry.choice, entry.heuristic
    if choice not in names:
        raise BadRecordError(f"choice {choice!r} is not one of the candidates {list(names)}")
    if heuristic is not None and heuristic not in names:
        raise BadRecordError(f"heuristic {heuristic!r} is not one of the candidates")
    check_status(entry.status)
    speedup = positive(entry.speedup, "speedup")
    record = entry.record
    rows = None
    if record is not None:
        if not isinstance(record, codec.TimingRecord):
            raise BadRecordError("record must be a tunecache.codec.TimingRecord")
        unknown = [c.name for c in record.candidates if c.name not in names]
        if unknown:
            raise BadRecordError(f"timing record names unknown candidates {unknown}")
        rows = record_row(record, codec.encode(record), heuristic)
    if isinstance(entry.verdicts, NewVerdict) or not isinstance(entry.verdicts, Sequence):
        raise BadRecordError("verdicts must be a sequence of NewVerdict")
    verdicts = []
    for v in entry.verdicts:
        if not isinstance(v, NewVerdict):
            raise BadRecordError(f"a verdict must be a NewVerdict, got {type(v).__name__}")
        verdicts.append(verdict_write(v, now))
    sums = {} if sums is None else sums
    sum_ = sums.get(names)
    if sum_ is None:
        sum_ = sums[names] = checksum(names)
    return EntryWrite(
        key=key,
        checksum=sum_,
        names=names,
        choice=choice,
        heuristic=heuristic,
        status=entry.status,
        speedup=speedup,
        run_id=check_run_id(entry.run_id),
        updated_at=now,
        record=rows,
        verdicts=tuple(verdicts),
    )


def entry_writes(entries: Iterable[NewEntry], now: datetime) -> list[EntryWrite]:
    """The checked rows of a batch of entries, given now; the first bad one raises its error
    (BadKeyError or BadRecordError, one line) naming its position in the batch and its key."""
    if isinstance(entries, NewEntry | str | bytes) or not isinstance(entries, Iterable):
        raise BadRecordError("a batch is a sequence of NewEntry")
    sums: dict[tuple[str, ...], str] = {}
    out = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, NewEntry):
            raise BadRecordError(f"entry {position} is a {type(entry).__name__}, not a NewEntry")
        try:
            out.append(entry_write(entry, now, sums))
        except (BadKeyError, BadRecordError) as error:
            raise type(error)(f"entry {position} ({label(entry.key)}): {error}") from None
    return out


def label(key: object) -> str:
    """How an error names the key of an entry: its text, kept short and on one line."""
    if isinstance(key, Key):
        key = key.text
    if not isinstance(key, str):
        return f"a {type(key).__name__}"
    return key if len(key) <= 80 and key.isprintable() else repr(key[:77]) + "..."
