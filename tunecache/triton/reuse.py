"""The rule for an entry tuned against another config list: which stored timings still answer.

A kernel's entries are tuned against one config list (its checksum). When the list changes,
`plan_reuse` says what the old entry's record still decides (docs/triton.md, "A changed config
list"), and `kept_record` / `merged_record` write the new entry's record from it. Pure values:
nothing here imports Triton, torch or the store, and the codec (cbor2) loads only when a record
is built.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from tunecache.candidates import checksum

if TYPE_CHECKING:
    # The codec loads cbor2: only a miss that reuses an old record needs it, never a hit.
    from tunecache.codec import CandidateTiming, TimingRecord

__all__ = ["SURVIVORS", "Plan", "kept_record", "merged_record", "plan_reuse"]

#: survivors of an old record benched again beside added configs (plan_reuse)
SURVIVORS = 3


class Plan(NamedTuple):
    """What to do with an entry tuned against another config list, for the current one."""

    #: the config to use without benching, or None when `bench` must run first
    choice: str | None
    #: configs to bench now (current-list order); empty when `choice` is set
    bench: tuple[str, ...]
    #: old timings to keep in the new entry's record, for configs not benched again
    keep: tuple[CandidateTiming, ...]
    #: why, in a few words, for the record and for people
    reason: str


def _measured(timing: CandidateTiming) -> bool:
    return timing.error is None and bool(timing.samples)


def _unanswered(timing: CandidateTiming | None) -> bool:
    """A config the record cannot answer for: absent, or present with neither a sample nor an
    error (a bench the budget cut short before it ran)."""
    return timing is None or (timing.error is None and not timing.samples)


def plan_reuse(
    legal: Sequence[str],
    old_names: Sequence[str],
    old_choice: str,
    record: TimingRecord | None,
    survivors: int = SURVIVORS,
) -> Plan:
    """Reuse what an entry tuned against `old_names` learnt, for the configs `legal` now.

    1. No config was added and the old winner is still legal: it beat every config that is
       left, so it stays, with no bench.
    2. No config was added, the winner is gone, and the old record measured every legal
       config (or saw it fail): the best remaining one by the record's medians, with no bench.
    3. Otherwise bench only what the record cannot answer: the configs it never measured (new
       ones) together with its `survivors` best legal configs, which carry the old ranking
       into the new bench. The other old timings are kept, marked pruned: they lost to the
       survivors then and are not candidates now.
    """
    timings = {c.name: c for c in record.candidates} if record is not None else {}
    old = set(old_names)
    legal_timings = tuple(timings[n] for n in legal if n in timings)
    added = [n for n in legal if n not in old]
    # A config the old bench never got to (its budget ran out) was never beaten by anyone.
    holes = record is not None and any(_unanswered(timings.get(n)) for n in legal if n in old)
    if not added and old_choice in legal and not holes:
        return Plan(old_choice, (), legal_timings, "the winner is still a config: kept")
    missing = [n for n in legal if _unanswered(timings.get(n))]
    ranked = sorted(
        (c for c in legal_timings if _measured(c)),
        key=lambda c: statistics.median(c.samples),
    )
    if not missing and ranked:
        best = ranked[0].name
        return Plan(best, (), legal_timings, "the winner was removed: the best remaining config")
    top = {c.name for c in ranked[:survivors]}
    bench = tuple(n for n in legal if n in top or n in missing)
    if not bench:
        # Every legal config failed last time: try them all again rather than trust that.
        return Plan(None, tuple(legal), (), "every config failed before: benched again")
    keep = tuple(
        c if c.error is not None or c.pruned else _pruned_copy(c)
        for c in legal_timings
        if c.name not in bench and not _unanswered(c)
    )
    reason = f"{len(added)} config(s) added: benched with the {len(top)} best before"
    if not added:
        reason = "the winner was removed and some configs were never measured: benched"
    return Plan(None, bench, keep, reason)


def _pruned_copy(timing: CandidateTiming) -> CandidateTiming:
    from tunecache.codec import CandidateTiming

    return CandidateTiming(
        name=timing.name,
        samples=timing.samples,
        inner_loops=timing.inner_loops,
        error=timing.error,
        pruned=True,
    )


def kept_record(plan: Plan, record: TimingRecord | None, old_names: Sequence[str]) -> TimingRecord:
    """The record of an entry decided by `plan` with no bench: the old timings it keeps, and
    the old settings with where they came from and why."""
    from tunecache.codec import TimingRecord

    settings = dict(record.settings) if record is not None else {}
    settings.update(reused_from=checksum(old_names), reuse=plan.reason)
    env = dict(record.env) if record is not None else {}
    return TimingRecord(candidates=plan.keep, settings=settings, env=env)


def merged_record(
    record: TimingRecord, plan: Plan, old_names: Sequence[str], legal_names: Sequence[str]
) -> TimingRecord:
    """The record of an entry benched by `plan`: the fresh timings, and the old ones it kept
    for the configs not benched again, in the order of `legal_names`."""
    from tunecache.codec import TimingRecord

    fresh = {c.name: c for c in record.candidates}
    kept = {c.name: c for c in plan.keep}
    candidates = tuple(fresh.get(n) or kept[n] for n in legal_names if n in fresh or n in kept)
    settings = dict(record.settings)
    settings.update(reused_from=checksum(old_names), reuse=plan.reason)
    return TimingRecord(candidates=candidates, settings=settings, env=record.env)
