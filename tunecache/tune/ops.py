"""Op-level tuning: bench one op's candidates at given shapes, without a model, and the pending
keys a serving process recorded (`tunecache.record_misses`), offline.

    @matmul.inputs
    def _(m, k, n):
        return (np.ones((m, k), np.float32), np.ones((k, n), np.float32))

    tunecache.tune.ops(matmul, shapes=[{"m": 256, "k": 256, "n": 64}])
    tunecache.tune.pending()          # every pending key of this device whose op can be loaded

Each shape becomes the op's arguments through the op's input maker (`Tunable.inputs`), and its
key is the one a call with them resolves. The candidates are benched as the tuner benches a
heavy key (`tunecache.tune.records.bench_candidates`: outputs compared with the heuristic's
before any timing, the key's budget bounding the bench to within one call, the candidates a
stored record found too slow not called again), and the evidence is stored as an
**unvalidated** entry: served to tables with `use="all"`, and to the others once a model's
session validates it in paired whole-model runs (`tune.tune` finds the entry and reuses its
record instead of benching again). The never-slower rule is unchanged: an isolated bench only
ever proposes; an entry chooses a candidate other than the heuristic only where it measured
faster than the heuristic. A stored record is reused unless it is doubtful
(`tunecache.tune.doubt`, at most `rebench` times) or `retune`; an entry a model decided
(accepted, rejected or with a verdict) is never rewritten.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from tunecache.errors import BadArgumentError, TunecacheError
from tunecache.evidence import TOO_SLOW, WRONG, refusal
from tunecache.keys import Key
from tunecache.tune import doubt
from tunecache.tune.claims import ClaimLost, Claims, Holder
from tunecache.tune.model import scenario_text
from tunecache.tune.options import KEY_BUDGET, REBENCH, Options, session_options
from tunecache.tune.records import bench_candidates, bound_calls, refused_in, speedup_of
from tunecache.tune.reports import KeyOutcome
from tunecache.writes import NewEntry, as_key

if TYPE_CHECKING:
    from tunecache.cache import Cache
    from tunecache.codec import TimingRecord
    from tunecache.dispatch import Tunable
    from tunecache.store.pending import Pending
    from tunecache.tune.reports import Progress

__all__ = ["OP_ACTIONS", "OpOutcome", "OpsReport", "inputs_at", "load_op", "ops", "pending"]

#: what became of a shape: benched now, its stored evidence reused, a model's decision left as
#: it is, benched but cut short by the key's budget, every candidate raised or was refused; and,
#: for a pending key only, left pending (its op could not be loaded or benched: the note says);
#: skipped: another tuner claims the key (`tunecache.tune.claims`) and tunes it
OP_ACTIONS = ("benched", "kept", "known", "budget cut", "failed", "left", "skipped")
#: what hears of each holder a key's claim is waited for
Waiting = Callable[[Holder], object]
#: `ops`'s bench settings, which `pending` takes too (by keyword, beside the open options)
_SETTINGS = frozenset({"key_budget", "retune", "rebench", "bench_options"})
#: the actions after which a pending key is no longer pending
_DONE = frozenset({"benched", "kept", "known", "budget cut", "failed"})


@dataclass(frozen=True)
class OpOutcome(KeyOutcome):
    """What op-level tuning did at one shape: a `KeyOutcome` of the op alone (its share is 1,
    its scenario the shape's dims; nothing is tried in whole-model runs), with the bench's
    speedup of the choice over the heuristic (> 1: faster) and, for a pending key, its op."""

    speedup: float | None = None
    op: str = ""


@dataclass(frozen=True)
class OpsReport:
    """What `ops` or `pending` did: one outcome a shape, in order, and the run that wrote."""

    keys: tuple[OpOutcome, ...]
    seconds: float = 0.0
    run_id: int | None = None
    #: pending keys cleared (tuned, or a model's decision already)
    cleared: int = 0

    def count(self, action: str) -> int:
        """How many shapes ended in `action`."""
        return sum(1 for k in self.keys if k.action == action)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return {
            "keys": [k.as_dict() for k in self.keys],
            "seconds": self.seconds,
            "run_id": self.run_id,
            "cleared": self.cleared,
        }


def inputs_at(
    op: Tunable[Any, Any], shape: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], Key]:
    """The arguments the op's input maker builds at `shape`, and the key a call with them
    resolves; BadArgumentError when the op declares no input maker, or the key's dims are not
    the shape's."""
    maker = op.input_maker
    if maker is None:
        raise BadArgumentError(
            f"op {op.signature!r} declares no input maker (@op.inputs): "
            "it cannot be benched at a shape"
        )
    if not isinstance(shape, Mapping) or not all(isinstance(k, str) for k in shape):
        raise BadArgumentError(f"a shape is a dict of dims by name, got {shape!r}")
    made = maker(**shape)
    if isinstance(made, tuple):
        args, kwargs = made, {}
    elif isinstance(made, dict):
        args, kwargs = (), dict(made)
    else:
        raise BadArgumentError(
            f"{op.signature}: the input maker returned {type(made).__name__}, "
            "not a tuple of arguments or a dict of keyword arguments"
        )
    key = op.key(*args, **kwargs)
    dims = dict(key.dims)
    wrong = {n: v for n, v in shape.items() if n in op.dims and dims.get(n) != v}
    if wrong:
        raise BadArgumentError(
            f"{op.signature}: the inputs made for {dict(shape)} resolve {key.text}, not those dims"
        )
    return args, kwargs, key


def ops(
    op: Tunable[Any, Any],
    shapes: Iterable[Mapping[str, Any]],
    *,
    cache: Cache | None = None,
    key_budget: float | None = KEY_BUDGET,
    retune: bool = False,
    rebench: int = REBENCH,
    bench_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    **open_options: Any,
) -> OpsReport:
    """Bench the op's candidates at each shape and store the evidence as unvalidated entries
    of this device's cache (pass an open `cache`, or the options of `tunecache.open`).

    `key_budget` bounds each shape's bench, in seconds; a shape whose entry already has a
    timing record reuses it unless `retune`, or unless it is doubtful (benched again at most
    `rebench` times). Every shape is turned into arguments first, so a bad shape raises
    (BadArgumentError) before anything is benched or written.
    """
    from tunecache.dispatch import Tunable

    if not isinstance(op, Tunable):
        raise BadArgumentError(f"tune.ops takes a tunable op, got {type(op).__name__}")
    options = session_options(
        key_budget=key_budget, retune=retune, rebench=rebench, bench_options=bench_options
    )
    made = [inputs_at(op, shape) for shape in shapes]
    if not made:
        raise BadArgumentError("tune.ops needs at least one shape")
    from tunecache.tune.tuner import open_cache

    store, owned = open_cache(cache, open_options)
    started = time.perf_counter()
    try:
        with store.run("tune-op", notes=f"op {op.signature}") as run_id:
            claims = Claims(store)
            with claims.renewing():

                def step(at: int, wait: Waiting | None) -> OpOutcome | None:
                    args, kwargs, key = made[at]
                    turn = _Turn(store, claims, options, run_id)
                    return _tune_key(turn, op, key, (args, kwargs), wait=wait)

                outcomes = _in_turn(len(made), step, f"benching {op.signature}", progress)
        return OpsReport(tuple(outcomes), time.perf_counter() - started, run_id)
    finally:
        if owned:
            store.close()


@dataclass(frozen=True)
class _Turn:
    """What every key of one op-level session shares: the cache, the session's claims, its
    settings and its run."""

    cache: Cache
    claims: Claims
    options: Options
    run_id: int | None


def _in_turn(
    count: int,
    step: Callable[[int, Waiting | None], OpOutcome | None],
    what: str,
    progress: Progress | None,
) -> list[OpOutcome]:
    """Each of `count` keys' outcomes, in order: `step(at, None)` takes a key at once unless
    another live tuner claims it (None), and the keys so left are waited for last
    (`step(at, waiting)`, `waiting` telling `progress` whom it waits for), as the tuner's
    `_claimed_step` leaves them."""
    found: list[OpOutcome | None] = []
    for at in range(count):
        if progress is not None:
            progress(what, at, count)
        found.append(step(at, None))
    out = []
    for at, outcome in enumerate(found):
        if outcome is None:

            def waiting(holder: Holder, at: int = at) -> None:
                if progress is not None:
                    progress(f"waiting for a key claimed by {holder.named}", at, count)

            outcome = step(at, waiting)
            assert outcome is not None
        out.append(outcome)
    return out


def _tune_key(
    turn: _Turn,
    op: Tunable[Any, Any],
    key: Key,
    call: tuple[tuple[Any, ...], dict[str, Any]],
    *,
    wait: Waiting | None,
) -> OpOutcome | None:
    """One key under its claim (`tunecache.tune.claims`): None, having done nothing, where
    another live tuner claims it and no `wait` is asked; skipped where the wait outlasts its
    deadline (that tuner tunes the key); else benched or reused, and written."""
    text = key.text
    claim = turn.claims.claim(text) if wait is None else turn.claims.wait(text, waiting=wait)
    if not claim.taken:
        if wait is None:
            return None
        holder = "" if claim.holder is None else f" ({claim.holder.named})"
        note = f"another tuner{holder} still claims it: it tunes the key"
        heuristic = op.heuristic_for(key)
        return OpOutcome(
            action="skipped", choice=heuristic, heuristic=heuristic, key=text, note=note,
            **_alone(key),
        )  # fmt: skip
    try:
        return _claimed_key(turn, op, key, call)
    finally:
        turn.claims.release(text)


def _claimed_key(
    turn: _Turn,
    op: Tunable[Any, Any],
    key: Key,
    call: tuple[tuple[Any, ...], dict[str, Any]],
) -> OpOutcome:
    """Bench one key of the op (or reuse its stored evidence) and write the entry, unless a
    model decided the key meanwhile (the look is in the write's own transaction)."""
    from tunecache.dispatch import Captured
    from tunecache.tune.measuring import MeasureLock
    from tunecache.tune.profiling import Heavy

    cache, options, run_id = turn.cache, turn.options, turn.run_id
    names, heuristic = op.candidates, op.heuristic_for(key)
    said: dict[str, Any] = {"key": key.text, "heuristic": heuristic, **_alone(key)}
    stored = cache.get(key, candidates=names)
    if stored is not None and (stored.status != "unvalidated" or cache.verdicts_on(stored)):
        note = f"a model's decision ({stored.status}): left as it is"
        return OpOutcome(
            action="known", choice=stored.choice, entry_id=stored.id, note=note, **said
        )
    previous = None if stored is None else cache.record(stored)
    why, count = None, 0
    if previous is not None and not options.retune:
        why, count, reused = doubt.reuse(previous, options.rebench)
        if reused is not None:
            assert stored is not None
            return OpOutcome(
                action="kept",
                choice=stored.choice,
                speedup=speedup_of(previous, stored.choice, heuristic),
                entry_id=stored.id,
                note=reused,
                **said,
            )
    heavy = Heavy(key, op, Captured(op, *call), {}, 1.0)
    with MeasureLock(cache.path).held():  # no other tuner of the device times anything meanwhile
        result = bench_candidates(
            op, key, bound_calls(heavy), previous, options.key_budget, options.bench_options
        )
    record, rebench_note = doubt.rebenched(result.record, why, count)
    refusals: dict[str, Any] = {
        "wrong": refused_in(record, WRONG),
        "too_slow": refused_in(record, TOO_SLOW),
    }
    if result.best is None and result.complete:
        note = "every candidate raised or was refused: " + "; ".join(
            f"{name}: {text}" for name, text in result.errors.items()
        )
        return OpOutcome(
            action="failed",
            choice=heuristic,
            bench_stopped=result.stopped,
            note=note,
            **refusals,
            **said,
        )
    choice = _choice(record, result.best, heuristic)
    speedup = speedup_of(record, choice, heuristic)
    entry = _put_undecided(
        turn, NewEntry(key, choice, names, heuristic, record, speedup, "unvalidated", run_id)
    )
    if isinstance(entry, _Unwritten):
        return OpOutcome(**entry._asdict(), **refusals, **said)
    return OpOutcome(
        action="benched" if result.complete else "budget cut",
        choice=choice,
        speedup=speedup,
        entry_id=entry,
        bench_stopped=result.stopped,
        doubt=rebench_note,
        note=_raised(result.errors, "" if result.complete else "the key's budget ended its bench"),
        **refusals,
        **said,
    )


def _raised(errors: Mapping[str, str], note: str) -> str:
    """An outcome's note, with what each candidate that raised said (refusals have columns of
    their own: `wrong`, `too_slow`)."""
    raised = [f"{name} raised {text}" for name, text in errors.items() if refusal(text) is None]
    return "; ".join([*([note] if note else []), *raised])


class _Unwritten(NamedTuple):
    """Why a benched key's entry was not written, as its outcome says it."""

    action: str
    choice: str
    note: str
    entry_id: int | None = None


def _put_undecided(turn: _Turn, entry: NewEntry) -> int | _Unwritten:
    """Write a benched key's unvalidated entry; its id. Not where another live tuner claims
    the key now (this one's claim lapsed during the bench), nor where a model decided it
    meanwhile: the look and the write are one transaction
    (`tunecache.store.bulk.write_undecided`)."""
    from tunecache.store.bulk import write_undecided
    from tunecache.store.models import utcnow
    from tunecache.writes import entry_write

    key = as_key(entry.key)
    heuristic = entry.heuristic or entry.choice
    try:
        turn.claims.confirm(key.text)
    except ClaimLost as lost:
        return _Unwritten("skipped", heuristic, f"{lost}: left to it, nothing written")
    now = utcnow()
    write = entry_write(entry, now)
    with turn.cache.transaction(write=True) as tx:
        written = write_undecided(tx.conn, tx.device_row(), write, now=now)
    if written is not None:
        return written.id
    stored = turn.cache.get(key, candidates=entry.candidates)
    status = "decided" if stored is None else stored.status
    note = f"a model decided the key during the bench ({status}): left as it is"
    choice = heuristic if stored is None else stored.choice
    return _Unwritten("known", choice, note, None if stored is None else stored.id)


def _alone(key: Key) -> dict[str, Any]:
    """The fields of a key's outcome that place it in a model, for an op benched alone."""
    return {"share": 1.0, "scenario": scenario_text(dict(key.dims))}


def _choice(record: TimingRecord, best: str | None, heuristic: str) -> str:
    """The bench's best where it measured faster than the heuristic by more than the bench's
    indifference (`bench.INDIFFERENCE`: a tie is no reason to leave the heuristic), else the
    heuristic."""
    from tunecache.bench import INDIFFERENCE

    medians = {
        c.name: c.median for c in record.candidates if c.error is None and c.median is not None
    }
    if best is None or best == heuristic or best not in medians:
        return heuristic
    theirs = medians.get(heuristic)
    return best if theirs is None or medians[best] * (1 + INDIFFERENCE) < theirs else heuristic


# -- the pending keys --------------------------------------------------------------------------


def pending(
    *, cache: Cache | None = None, progress: Progress | None = None, **options: Any
) -> OpsReport:
    """Bench this device's pending keys (`tunecache.record_misses`) as `ops` benches a shape,
    each through the op recorded with it, and clear each one tuned (or found decided by a
    model meanwhile). A key whose op is unknown or cannot be loaded, declares no input maker,
    or has another candidate list now, stays pending, with a note saying why. `options` are
    `ops`'s bench settings (key_budget, retune, rebench, bench_options) and the options of
    `tunecache.open`."""
    from tunecache.store.pending import pending_keys
    from tunecache.tune.tuner import open_cache

    settings = session_options(**{k: v for k, v in options.items() if k in _SETTINGS})
    store, owned = open_cache(cache, {k: v for k, v in options.items() if k not in _SETTINGS})
    started = time.perf_counter()
    try:
        rows = pending_keys(store.path, store.device.fingerprint)
        outcomes: list[OpOutcome] = []
        run_id = None
        if rows:
            with store.run("tune-pending", notes=f"{len(rows)} pending keys") as run_id:
                claims = Claims(store)
                with claims.renewing():

                    def step(at: int, wait: Waiting | None) -> OpOutcome | None:
                        turn = _Turn(store, claims, settings, run_id)
                        return _tune_pending(turn, rows[at], wait=wait)

                    outcomes = _in_turn(len(rows), step, "benching pending keys", progress)
        done = [
            (row.key, row.checksum)
            for row, outcome in zip(rows, outcomes, strict=True)
            if outcome.action in _DONE
        ]
        cleared = _clear(store, done)
        return OpsReport(tuple(outcomes), time.perf_counter() - started, run_id, cleared)
    finally:
        if owned:
            store.close()


def _tune_pending(turn: _Turn, row: Pending, *, wait: Waiting | None) -> OpOutcome | None:
    """One pending key: its op loaded, its shape's inputs made, benched under its claim (None
    where another tuner claims it and no `wait` is asked: `_tune_key`); or why not."""
    from tunecache.candidates import checksum

    key = row.parsed()
    said: dict[str, Any] = {
        "key": row.key,
        "heuristic": row.heuristic,
        "choice": row.heuristic,
        "op": row.op or "",
        **_alone(key),
    }
    if row.op is None:
        return OpOutcome(action="left", note="no op was recorded with it", **said)
    if row.source == "triton":
        # A kernel's key: its arguments live in the process that launches it, which tunes it
        # (`tune_pending()`, or unseen="tune") and clears the mark; `row.op` is its name only.
        note = "a Triton kernel's key: the kernel's own process tunes it (tune_pending())"
        return OpOutcome(action="left", note=note, **said)
    try:
        op = load_op(row.op)
    except TunecacheError as error:
        return OpOutcome(action="left", note=str(error), **said)
    if checksum(op.candidates) != row.checksum:
        note = f"the op's candidates are {list(op.candidates)} now, not {list(row.candidates)}"
        return OpOutcome(action="left", note=note, **said)
    try:
        args, kwargs, made = inputs_at(op, dict(key.dims))
    except BadArgumentError as error:
        return OpOutcome(action="left", note=str(error), **said)
    if made != key:
        note = f"the op's inputs at its dims resolve {made.text}, not this key"
        return OpOutcome(action="left", note=note, **said)
    outcome = _tune_key(turn, op, key, (args, kwargs), wait=wait)
    return None if outcome is None else replace(outcome, op=row.op)


def _clear(cache: Cache, done: list[tuple[str, str]]) -> int:
    """Clear the pending keys tuned, in the cache's local file."""
    if not done:
        return 0
    from tunecache.store.direct import DirectStore
    from tunecache.store.pending import clear_pending

    store = DirectStore(cache.path, None, busy_timeout=cache.busy_timeout)
    try:
        return clear_pending(store, cache.device.fingerprint, done)
    finally:
        store.close()


def load_op(spec: str) -> Tunable[Any, Any]:
    """The tunable op a MODULE:ATTR or FILE.py:ATTR spec names; any failure is one line
    (BadArgumentError)."""
    from tunecache.dispatch import Tunable

    where, _, attr = spec.rpartition(":")
    if where and attr:
        from tunecache.tune.loading import load_module  # only where an op is named by its spec

        module = load_module(where, "_tunecache_ops_", reuse=True)
    else:
        raise BadArgumentError(f"an op is named MODULE:ATTR or FILE.py:ATTR, got {spec!r}")
    try:
        value = operator.attrgetter(attr)(module)
    except AttributeError:
        raise BadArgumentError(f"{where!r} has no attribute {attr!r}") from None
    if not isinstance(value, Tunable):
        raise BadArgumentError(f"{spec!r} is a {type(value).__name__}, not a tunable op")
    return value
