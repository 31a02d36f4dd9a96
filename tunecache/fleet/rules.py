"""How sync settles a key both sides decided: evidence decides, never the clock (docs/fleet.md).

For one device, key and candidate list, the entry coming in (from the side sync reads) meets the
entry here (on the side it writes):

1. none here: the incoming entry is added;
2. the same decision, record summary and verdicts: unchanged, nothing is written;
3. the same choice: one decision, judged on two hosts. Its verdicts are merged model by model
   (below); its record, speedup and status are those of the entry with the stronger evidence
   (`tunecache.exchange.reports.evidence`: models that validated it, then paired rounds, then
   raw samples), the one here on a tie;
4. another choice, and a model masked the entry here: the entry here stays (a model's own mask
   is never overwritten by another host's entry);
5. another choice, and exactly one of the two is validated (a model validated it, or whole-model
   acceptance kept it): the validated one wins;
6. otherwise the stronger evidence wins; on a tie the entry here stays.

A model's verdict on one decision, given on both sides, is merged by the same rule: a mask here
stays, and otherwise the verdict with more confirmations (then more rounds) wins, the one here
on a tie: a verdict is never replaced by one with less evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tunecache.exchange.reports import evidence_of
from tunecache.store.syncing import SyncedEntry, SyncedVerdict

__all__ = ["ACTIONS", "RULES", "Settled", "merge_verdicts", "settle", "validated"]

#: what sync does with one incoming entry
ACTIONS = ("added", "unchanged", "merged", "replaced", "kept", "refused")
#: the rule that settled a conflict (a key both sides decided otherwise)
RULES = ("mask", "validated", "evidence", "tie", "verdicts")


@dataclass(frozen=True, slots=True)
class Settled:
    """What sync does with one incoming entry: its action, the rule that settled it (None where
    there was nothing to settle), and the entry to write (None where nothing is written).

    `written` is the incoming entry, or a merge of both (the fields of `fields_from`, "incoming"
    or "here", and the merged verdicts)."""

    action: str
    rule: str | None
    written: SyncedEntry | None = None
    fields_from: str = "incoming"


def validated(entry: SyncedEntry) -> bool:
    """Whether a model validated the entry, or whole-model acceptance kept it."""
    return entry.status == "accepted" or any(v.verdict == "validated" for v in entry.verdicts)


def _verdict_wins(incoming: SyncedVerdict, here: SyncedVerdict) -> bool:
    if here.verdict == "masked" and incoming.verdict != "masked":
        return False
    return (incoming.confirmations, incoming.rounds) > (here.confirmations, here.rounds)


def merge_verdicts(
    incoming: tuple[SyncedVerdict, ...], here: tuple[SyncedVerdict, ...]
) -> tuple[SyncedVerdict, ...]:
    """Both sides' verdicts on one decision, merged model by model (a mask here stays; else
    the stronger wins, the one here on a tie), in model order."""
    out = {(v.model, v.fingerprint): v for v in here}
    for v in incoming:
        at = (v.model, v.fingerprint)
        if at not in out or _verdict_wins(v, out[at]):
            out[at] = v
    return tuple(out[at] for at in sorted(out))


def settle(incoming: SyncedEntry, here: SyncedEntry | None) -> Settled:
    """What to do with `incoming`, meeting `here` (the entry of the same device, key and list
    on the side written, or None), by the rules of this module's docstring."""
    if here is None:
        return Settled("added", None, incoming)
    if incoming.content() == here.content():
        return Settled("unchanged", None)
    if incoming.choice == here.choice:
        verdicts = merge_verdicts(incoming.verdicts, here.verdicts)
        stronger = evidence_of(incoming) > evidence_of(here)
        base = incoming if stronger else here
        merged = replace(base, verdicts=verdicts)
        if merged.content() == here.content():
            return Settled("kept", "evidence")
        return Settled("merged", "verdicts", merged, fields_from="incoming" if stronger else "here")
    if any(v.verdict == "masked" for v in here.verdicts):
        return Settled("kept", "mask")
    if validated(incoming) != validated(here):
        if validated(incoming):
            return Settled("replaced", "validated", incoming)
        return Settled("kept", "validated")
    if evidence_of(incoming) > evidence_of(here):
        return Settled("replaced", "evidence", incoming)
    if evidence_of(incoming) < evidence_of(here):
        return Settled("kept", "evidence")
    return Settled("kept", "tie")
