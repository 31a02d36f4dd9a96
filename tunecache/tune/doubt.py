"""Evidence that does not stick: when a stored timing record is reused as it is, and when a
later session benches the key again.

A stored record is reused only when it is complete and nothing contradicts it. It is doubtful
(`doubt` says why) when:

- **budget cut**: the key's budget ended its bench before the evidence was complete;
- **contended**: while it was benched, this process waited for a CPU more than CONTENDED of the
  bench's wall time (``settings["waited"]``, `tunecache.evidence.cpu_wait`): it measured its
  neighbours as much as its candidates;
- **unstable**: a candidate was dropped as slower than `drop_ratio` times the best (pruned, or
  left out of the survivors), yet its fastest sample was within `drop_ratio` of the best's
  fastest. Noise on a shared machine only ever adds time, so each candidate's fastest sample is
  its most honest one: when the fastest samples disagree with the medians that dropped it, the
  evidence against it was not unanimous;
- **its decision was doubted** (``settings["doubt"]``, written by the session that decided from
  it): the whole-model trial that rejected its survivor ran while this process waited for a CPU
  more than CONTENDED of the time, or contradicted the bench (the bench predicted the model at
  least CONTRADICTION times faster, and the trial's interval ends below that), or the final
  guard that masked the entry ran while contended.

A doubtful record is benched again in a later session, at most `rebench` times for the key
(``settings["rebench"]`` counts them in the new record, ``settings["rebenched_for"]`` says why the
one before it was doubted); a rejected entry whose record is doubtful stops being final for the
model that masked it, which then tries the new survivors again. After that many re-benches the
record is reused as it is, and the report says it is doubtful.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import TYPE_CHECKING

from tunecache.evidence import TOO_SLOW, refusal

if TYPE_CHECKING:
    from tunecache import accept
    from tunecache.codec import Scalar, TimingRecord

__all__ = [
    "CONTENDED",
    "CONTRADICTION",
    "REBENCH",
    "contended",
    "doubt",
    "predicted_gain",
    "rebenched",
    "rebenches",
    "reuse",
    "too_slow_for",
    "trial_doubt",
    "unstable",
    "with_settings",
]

#: a bench or trial during which this process waited for a CPU more than this fraction of its
#: wall time ran beside other busy work (a quiet machine measures ~0; one busy process per core
#: beside the tuner measured 0.6-0.7 here)
CONTENDED = 0.10
#: a rejected survivor the bench predicted to make the whole model at least this many times
#: faster, where the trial's interval ends below the prediction, contradicts the bench
CONTRADICTION = 1.05
#: how many times a key's doubtful evidence is benched again, in later sessions, by default
REBENCH = 2


def with_settings(record: TimingRecord, **more: Scalar) -> TimingRecord:
    """The record with `more` added to its settings."""
    return dataclasses.replace(record, settings={**record.settings, **more})


def rebenches(record: TimingRecord) -> int:
    """How many times the key's evidence was benched again for doubt, up to this record."""
    count = record.settings.get("rebench")
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def reuse(
    previous: TimingRecord, rebench: int, *, anyway: bool = False
) -> tuple[str | None, int, str | None]:
    """Whether a stored record is reused rather than benched again: its doubt (None: none),
    how many times it was benched again for doubt, and, where it is reused (no doubt, the
    `rebench` bound reached, or `anyway`), the note that says so ("" without doubt), else None.
    The tuner's rule and the op-level tuner's (`tunecache.tune.ops`)."""
    why, count = doubt(previous), rebenches(previous)
    if why is None or count >= rebench or anyway:
        return (
            why,
            count,
            "" if why is None else f"reused, though {why} (benched again {count} times)",
        )
    return why, count, None


def rebenched(record: TimingRecord, why: str | None, count: int) -> tuple[TimingRecord, str]:
    """A fresh bench's record, marked as the `count + 1`-th bench again for `why` where it was
    one, and the note that says so ("" where it was not)."""
    if why is None:
        return record, ""
    return with_settings(record, rebench=count + 1, rebenched_for=why), f"benched again: {why}"


def contended(waited: float | None) -> str | None:
    """Why a measurement that waited `waited` of its time for a CPU is doubtful, or None."""
    if waited is None or not waited > CONTENDED:
        return None
    return f"waited {waited:.0%} of its time for a CPU"


def doubt(record: TimingRecord) -> str | None:
    """Why a stored record should be benched again rather than reused, or None if it stands."""
    settings = record.settings
    if settings.get("complete") is False:
        return "budget cut: the key's budget ended its bench"
    waited = settings.get("waited")
    busy = contended(float(waited)) if isinstance(waited, int | float) else None
    if busy is not None:
        return f"contended: its bench {busy}"
    shaky = unstable(record)
    if shaky is not None:
        return f"unstable: {shaky}"
    written = settings.get("doubt")
    if isinstance(written, str) and written:
        return written
    return None


def unstable(record: TimingRecord) -> str | None:
    """Which candidate the record dropped as slow although its fastest sample was within
    `drop_ratio` of the best's fastest, in words; None if every drop was unanimous."""
    ratio = record.settings.get("drop_ratio")
    limit = float(ratio) if isinstance(ratio, int | float) else 1.5
    ran = [c for c in record.candidates if c.error is None and c.samples]
    medians = {c.name: statistics.median(c.samples) for c in ran}
    kept = [c for c in ran if not c.pruned]
    if not kept:
        return None
    best = min(kept, key=lambda c: medians[c.name])
    median, fastest = medians[best.name], min(best.samples)
    if not (median > 0 and fastest > 0):
        return None
    for c in ran:
        dropped = c.pruned or medians[c.name] > limit * median
        if dropped and min(c.samples) <= limit * fastest:
            return (
                f"{c.name} was dropped at {medians[c.name] / median:.2f}x the best's median, "
                f"yet its fastest sample was {min(c.samples) / fastest:.2f}x the best's fastest"
            )
    return None


def too_slow_for(record: TimingRecord, budget: float | None) -> list[str]:
    """The candidates the record found too slow whose one call outlasts a whole `budget`:
    benching them again within it could only repeat that."""
    if budget is None:
        return []
    return [
        c.name
        for c in record.candidates
        if refusal(c.error) == TOO_SLOW and c.samples and min(c.samples) > budget
    ]


def predicted_gain(record: TimingRecord, share: float, choice: str, current: str) -> float | None:
    """How many times faster the whole model should run with `choice` instead of `current` at
    a key carrying `share` of its time, by the record's medians; None if either is unmeasured."""
    try:
        new, old = record.candidate(choice).median, record.candidate(current).median
    except KeyError:
        return None
    if not new or not old or not 0 < share <= 1:
        return None
    rest = 1.0 - share * (1.0 - new / old)
    return 1.0 / rest if rest > 0 else None


def trial_doubt(
    verdict: accept.Verdict | None, waited: float | None, predicted: float | None
) -> str | None:
    """Why a trial that rejected a survivor should not be final, in words, or None: it ran on a
    contended machine, or its interval contradicts the gain the bench predicted."""
    busy = contended(waited)
    if busy is not None:
        return f"contended: the trial that rejected it {busy}"
    if verdict is None or predicted is None or predicted < CONTRADICTION:
        return None
    high = verdict.high
    if math.isfinite(high) and high < predicted:
        return (
            f"contradicted: the bench predicted the model {predicted:.2f}x faster, "
            f"the trial measured at most {high:.2f}x"
        )
    return None
