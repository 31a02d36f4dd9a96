"""The tuner: make a model faster through the cache, and never slower than its heuristic.

    model = tunecache.tune.Model("encoder", run=encoder, scenarios={"s": (1, 64, 256)})
    report = tunecache.tune.tune(model)          # profile, screen, bench, accept, write
    tunecache.tune.validate(other_model)          # judge entries other models tuned
    tunecache.tune.evaluate(tuned=[...], held_out=[...])

One tuning session, for each scenario of the model (each set of sizes of its symbolic dims):

1. **Profile.** Run the model once to warm up, then once under `dispatch.profile(capture=True)`
   to learn each key's share of the run's time, and keep one real call's arguments per key.
2. **Screen.** Keys below `share` (default 1%) of their scenario's time are left alone: a
   whole-model run cannot see a change that small, so no entry for them could be confirmed.
3. **Validate** what other models tuned: an entry that already serves a heavy key, and that this
   model has not judged, is run with and without (paired, `accept.accept`); the model records
   `validated` or `masked` for itself. Its mask stops the entry applying to it only.
4. **Bench** each remaining heavy key's candidates in isolation on the captured arguments
   (`bench.bench`); this only prunes them to a few. An entry already stored for the key and
   candidate list lends its timing record instead, so a key is not benched again (unless the
   budget cut that bench short, or `retune`). Another model's decision is never rewritten.
5. **Accept** through whole-model runs: the scenario with the current table (A) against the
   table plus the candidate entry (B), in pairs of random order; the first survivor B wins with
   is written as accepted, with this model's `validated` verdict. If none wins, the best is kept
   as a `rejected` entry: the evidence stays, the decision is never served. Where nothing beats
   what runs now, the evidence is kept as an `unvalidated` entry choosing what runs now.
6. **Profile again** after a pass that changed the table: keys that a faster run makes heavy
   are taken too (at most `PASSES` passes), so a second session has nothing new to do.
7. **Guard.** The finished table must beat no table at all over every scenario, end to end;
   otherwise every entry the model uses is masked for it (and this session's own entries are
   rejected), so its runs fall back to the heuristic.

Every write is its own transaction, made as soon as a decision is reached: Ctrl-C (or a crash)
keeps what was accepted so far, and the session's row in `runs` says it was interrupted. The
session's `budget` stops new keys and new survivors, never a trial already started (a trial cut
short would read as "no", and a "no" is remembered). docs/tuning.md says it at length.
"""

from __future__ import annotations

import inspect
import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunecache import accept as _accept
from tunecache import bench as _bench
from tunecache import dispatch, stats
from tunecache._digest import sha256
from tunecache.errors import BadArgumentError, TuneInterrupted
from tunecache.keys import Key
from tunecache.resolve import Table, using

if TYPE_CHECKING:
    from tunecache.cache import Cache, Entry
    from tunecache.codec import TimingRecord

__all__ = [
    "Evaluation",
    "EvaluationRow",
    "KeyOutcome",
    "Model",
    "TuneInterrupted",
    "TuneReport",
    "as_model",
    "evaluate",
    "tune",
    "validate",
]

#: a progress callback: (what, done, total), as the command line's progress bar takes it
Progress = Callable[[str, int, int], None]

#: what happened to a key in a session
ACTIONS = (
    "accepted",  # a new entry won its paired whole-model runs and is served to this model
    "rejected",  # no survivor beat the current table; the evidence is kept, never served
    "kept",  # the bench found nothing faster than what the model already runs
    "validated",  # another model's entry helps this one too
    "masked",  # another model's entry does not help this one; it stops applying here
    "known",  # this model already judged what serves the key in an earlier session
    "failed",  # every candidate raised on the captured arguments
    "skipped",  # the session's time budget ran out first
)


# --- models ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """A whole workload: `run(**scenario)` runs one inference, calling tunable ops.

    `scenarios` gives the sizes to tune each symbolic dim at (an LLM's prefill length s:
    ``{"s": (1, 64, 256, 1024)}``); the model is tuned at every combination. `fingerprint`
    identifies this version of the model; by default it is derived from the keys its runs use,
    so a model whose ops change gets a new one, and its old verdicts stop applying.
    """

    name: str
    run: Callable[..., object]
    scenarios: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    fingerprint: str | None = None
    #: waits for queued device work (GPU: torch.cuda.synchronize), so runs and benches are
    #: timed to their end; None for a model that runs synchronously
    sync: Callable[[], object] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise BadArgumentError("a model is named by a non-empty string")
        if not callable(self.run):
            raise BadArgumentError(f"model {self.name!r}: run is not callable")
        if not isinstance(self.scenarios, Mapping):
            raise BadArgumentError(
                f"model {self.name!r}: scenarios map each symbolic dim to its sizes, "
                f"got {type(self.scenarios).__name__}"
            )
        checked: dict[str, tuple[int, ...]] = {}
        for dim, sizes in dict(self.scenarios).items():
            values = tuple(sizes) if isinstance(sizes, Iterable) else (sizes,)
            if not values or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values
            ):
                raise BadArgumentError(
                    f"model {self.name!r}: scenario {dim!r} needs positive integer sizes, "
                    f"got {sizes!r}"
                )
            checked[str(dim)] = values
        object.__setattr__(self, "scenarios", checked)
        if self.fingerprint is not None and not isinstance(self.fingerprint, str):
            raise BadArgumentError(f"model {self.name!r}: a fingerprint is a string")
        if self.sync is not None and not callable(self.sync):
            raise BadArgumentError(f"model {self.name!r}: sync is not callable")
        try:
            signature = inspect.signature(self.run)
        except (TypeError, ValueError):  # a builtin without one: its calls will tell
            return
        try:
            signature.bind(**dict.fromkeys(checked, 1))
        except TypeError as error:
            raise BadArgumentError(
                f"model {self.name!r}: run cannot take its scenario dims {list(checked)}: {error}"
            ) from None

    def cases(self) -> list[dict[str, int]]:
        """Every scenario to run: each combination of the symbolic dims' sizes ([{}] if none)."""
        names = list(self.scenarios)
        return [
            dict(zip(names, values, strict=True))
            for values in itertools.product(*(self.scenarios[n] for n in names))
        ]


def as_model(value: object, name: str | None = None) -> Model:
    """A Model as it is, or a plain callable as a model without scenarios."""
    if isinstance(value, Model):
        return value
    if callable(value):
        label = name or getattr(value, "__qualname__", None) or getattr(value, "__name__", "")
        return Model(str(label), value)
    raise BadArgumentError(
        f"a model is a tunecache.tune.Model or a callable, got {type(value).__name__}"
    )


def _case_text(case: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in case.items()) or "-"


# --- reports -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyOutcome:
    """What one session did for one key."""

    key: str
    action: str
    #: the key's share of its scenario's profiled time (the largest over scenarios)
    share: float
    scenario: str
    heuristic: str
    #: what the model runs for the key after the session
    choice: str
    entry_id: int | None = None
    #: survivors tried in paired whole-model runs, in order
    tried: tuple[str, ...] = ()
    #: the verdict that decided (the last one tried), if any
    verdict: _accept.Verdict | None = None
    #: the isolated bench's fastest candidate and why it stopped, when it ran
    bench_best: str | None = None
    bench_stopped: str | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "action": self.action,
            "share": self.share,
            "scenario": self.scenario,
            "heuristic": self.heuristic,
            "choice": self.choice,
            "entry_id": self.entry_id,
            "tried": list(self.tried),
            "verdict": None if self.verdict is None else self.verdict.as_dict(),
            "bench_best": self.bench_best,
            "bench_stopped": self.bench_stopped,
            "note": self.note,
        }


@dataclass(frozen=True)
class TuneReport:
    """What a tuning (or validation) session found and wrote for one model."""

    model: str
    fingerprint: str
    run_id: int | None
    scenarios: tuple[str, ...]
    keys: tuple[KeyOutcome, ...]
    #: heavy keys of all scenarios, and keys screened out as too light to confirm
    screened: int
    #: the finished table against no table, end to end; None when the model uses no entry,
    #: when an earlier session's guard passed over this very table (`guard_skipped`), or when a
    #: run with the table raised (`guard_error`)
    guard: _accept.Verdict | None
    #: entries this model uses after the session, and entries masked for it in the session
    kept: tuple[int, ...]
    masked: tuple[int, ...]
    seconds: float
    interrupted: bool = False
    budget_spent: bool = False
    guard_skipped: bool = False
    guard_error: str = ""

    def count(self, action: str) -> int:
        return sum(1 for k in self.keys if k.action == action)

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "fingerprint": self.fingerprint,
            "run_id": self.run_id,
            "scenarios": list(self.scenarios),
            "keys": [k.as_dict() for k in self.keys],
            "screened": self.screened,
            "guard": None if self.guard is None else self.guard.as_dict(),
            "guard_skipped": self.guard_skipped,
            "guard_error": self.guard_error,
            "kept": list(self.kept),
            "masked": list(self.masked),
            "seconds": self.seconds,
            "interrupted": self.interrupted,
            "budget_spent": self.budget_spent,
        }


# --- one session -------------------------------------------------------------------------------


@dataclass
class _Heavy:
    """A key worth tuning: its share, the scenario it weighs most in, and a real call of it."""

    key: Key
    op: dispatch.Tunable[Any, Any]
    call: dispatch.Captured
    case: dict[str, int]
    share: float


@dataclass
class _Options:
    share: float
    keep: int
    confirmations: int
    pairs: int
    alpha: float
    key_budget: float | None
    budget: float | None
    retune: bool
    bench_options: Mapping[str, Any]


def _count(what: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise BadArgumentError(f"{what} is an integer >= {least}, got {value!r}")


def _seconds(what: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise BadArgumentError(f"{what} is a number of seconds >= 0, got {value!r}")


def _least_pairs(alpha: float) -> int:
    """The fewest pairs that can reach `alpha`: the smallest one-sided p-value n pairs can
    give is 2**-n."""
    return math.ceil(math.log2(1 / alpha))


def _check_options(o: _Options) -> None:
    """Every option checked before anything runs or is written: a bad one is one line."""
    if isinstance(o.share, bool) or not isinstance(o.share, int | float) or not 0 <= o.share < 1:
        raise BadArgumentError(f"share is a fraction in [0, 1), got {o.share!r}")
    _count("keep", o.keep, 1)
    _count("confirmations", o.confirmations, 1)
    _count("pairs", o.pairs, 1)
    if isinstance(o.alpha, bool) or not isinstance(o.alpha, int | float) or not 0 < o.alpha < 1:
        raise BadArgumentError(f"alpha is a probability in (0, 1), got {o.alpha!r}")
    # Fewer pairs can never accept anything: every key tried would be rejected, and
    # remembered so.
    least = max(2, _least_pairs(o.alpha))
    if o.confirmations * o.pairs < least:
        raise BadArgumentError(
            f"{o.confirmations} x {o.pairs} pairs can never reach alpha {o.alpha:g}: "
            f"acceptance needs at least {least} pairs in all (confirmations x pairs)"
        )
    _seconds("budget", o.budget)
    _seconds("key_budget", o.key_budget)
    if o.key_budget == 0:
        raise BadArgumentError("key_budget is a number of seconds > 0 (None: no limit)")
    unknown = sorted(set(o.bench_options) - set(_BENCH_DEFAULTS))
    if unknown:
        raise BadArgumentError(f"unknown bench options {unknown}; known: {sorted(_BENCH_DEFAULTS)}")
    # The values too, by the bench's own rules, before anything runs.
    _bench.check_settings(**{**_BENCH_DEFAULTS, **o.bench_options, "budget": o.key_budget})


#: what `bench_options` may set, with the defaults: every option of `bench.bench` but the key's
#: budget (which is `key_budget`)
_BENCH_DEFAULTS: dict[str, Any] = {
    name: p.default
    for name, p in inspect.signature(_bench.bench).parameters.items()
    if name not in ("candidates", "budget")
}


class _RunFailed(Exception):
    """A whole-model run raised while the session compared two tables (side "A" or "B")."""

    def __init__(self, side: str, error: Exception) -> None:
        super().__init__(side, error)
        self.side = side
        self.error = error

    def text(self) -> str:
        return f"{type(self.error).__name__}: {self.error}".splitlines()[0]


class _Session:
    """The state of one model's session: its cache, its current table and what it did."""

    def __init__(
        self,
        model: Model,
        cache: Cache,
        options: _Options,
        progress: Progress | None,
        max_distance: float,
    ) -> None:
        self.model = model
        self.cache = cache
        self.o = options
        self.progress = progress
        self.started = time.perf_counter()
        self.base = Table.open(
            path=cache.path,
            device=cache.device,
            model=model.name,
            scenarios=model.scenarios,
            max_distance=max_distance,
        )
        #: the table the model runs with now: every decision of this session is in it, masks
        #: as `derive(mask=...)`, which answers exactly as the stored verdict will
        self.table = self.base
        self.fingerprint = model.fingerprint or ""
        self.run_id: int | None = None
        self.outcomes: list[KeyOutcome] = []
        self.verdicts: dict[int, str] = {}
        self.masked: list[int] = []
        self.wrote = False  # whether any verdict or entry was written
        self.screened = 0
        #: keys found heavy, and light, in any profile of this session
        self.heavy_keys: set[Key] = set()
        self.light_keys: set[Key] = set()
        self.profiled = False
        self.guard: _accept.Verdict | None = None
        self.guard_skipped = False
        self.guard_error = ""
        self.budget_spent = False
        self.kept: list[int] | None = None
        self.answers: dict[str, str] = {}
        self.cases = model.cases()

    # -- running the model ----------------------------------------------------------------

    def runner(
        self, table: Table, cases: Sequence[dict[str, int]], *, side: str = ""
    ) -> Callable[[], None]:
        """One whole-model run over `cases` with `table`. With a `side` ("A", "B"), an error
        from the model is wrapped and tagged, so the session can tell which table broke it
        from its own mistakes."""
        one_run = _run_with(self.model, table, cases)
        if not side:
            return one_run

        def tried() -> None:
            try:
                one_run()
            except Exception as error:
                raise _RunFailed(side, error) from error

        return tried

    def out_of_time(self) -> bool:
        """Whether the session's budget is spent; it stops new keys, never a started trial."""
        if self.o.budget is not None and time.perf_counter() - self.started >= self.o.budget:
            self.budget_spent = True
            return True
        return False

    def tell(self, what: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(what, done, total)

    # -- 1, 2: profile and screen -----------------------------------------------------------

    def profile(self) -> list[_Heavy]:
        heavy: dict[Key, _Heavy] = {}
        light: set[Key] = set()
        seen: set[str] = set()
        for case in self.cases:
            run = self.runner(self.table, [case])
            run()  # warm-up: first calls resolve keys, allocate, wake BLAS threads
            with dispatch.profile(capture=True) as p:
                start = time.perf_counter()
                run()
                total = time.perf_counter() - start
            calls = p.captured()
            for row in p.rows():
                seen.add(row.key.text)
                share = row.seconds / total if total > 0 else 0.0
                call = calls.get(row.key)
                if call is None:
                    continue
                if share < self.o.share:
                    light.add(row.key)
                    continue
                known = heavy.get(row.key)
                if known is None or share > known.share:
                    heavy[row.key] = _Heavy(row.key, call.op, call, case, share)
        self.heavy_keys |= set(heavy)
        self.light_keys |= light
        self.screened = len(self.light_keys - self.heavy_keys)
        if not self.profiled:
            self.profiled = True
            if not self.fingerprint:
                # The model's structure: the keys its runs use. Its verdicts belong to this
                # version.
                digest = sha256("\n".join(sorted(seen)).encode()).hexdigest()
                self.fingerprint = digest[:16]
            self.table = self.base = self.base.derive(fingerprint=self.fingerprint)
            self.verdicts = self.cache.verdicts(self.model.name, self.fingerprint)
        return sorted(heavy.values(), key=lambda h: (-h.share, h.key))

    # -- decisions ----------------------------------------------------------------------------

    def trial(
        self, a: Table, b: Table, cases: Sequence[dict[str, int]]
    ) -> tuple[_accept.Verdict | None, _RunFailed | None]:
        """A paired verdict, or None and the failure when a run raises: a change that breaks
        the model (side B) is one it does not take, never fatal to the session."""
        try:
            verdict = _accept.accept(
                self.runner(a, cases, side="A"),
                self.runner(b, cases, side="B"),
                confirmations=self.o.confirmations,
                pairs=self.o.pairs,
                alpha=self.o.alpha,
                sync=self.model.sync,
            )
        except _RunFailed as failed:
            return None, failed
        return verdict, None

    def record_verdict(
        self,
        entry_id: int,
        verdict_name: str,
        verdict: _accept.Verdict | None,
        status: str | None = None,
    ) -> None:
        self.cache.validate(
            entry_id,
            model=self.model.name,
            fingerprint=self.fingerprint,
            verdict=verdict_name,
            gain=_gain(verdict),
            rounds=verdict.rounds if verdict else 0,
            confirmations=verdict.confirmations if verdict else 0,
            run_id=self.run_id,
            status=status,
        )
        self.verdicts[entry_id] = verdict_name
        self.wrote = True
        if verdict_name == "masked":
            if entry_id not in self.masked:
                self.masked.append(entry_id)
            self.table = self.table.derive(mask=[entry_id])

    def outcome(self, h: _Heavy, action: str, **more: Any) -> None:
        heuristic = h.op.heuristic_for(h.key)
        self.outcomes.append(
            KeyOutcome(
                key=h.key.text,
                action=action,
                share=h.share,
                scenario=_case_text(h.case),
                heuristic=heuristic,
                choice=self.table.resolve(h.key, h.op.candidates, heuristic).choice,
                **more,
            )
        )

    def judge(self, h: _Heavy, entry_id: int) -> None:
        """Validate another model's entry that serves this heavy key (step 3)."""
        if entry_id in self.verdicts:
            self.outcome(h, "known", entry_id=entry_id, note=self.verdicts[entry_id])
            return
        verdict, failed = self.trial(self.table.derive(mask=[entry_id]), self.table, [h.case])
        if failed is not None and failed.side == "A":
            # The model breaks without the entry: that is no verdict on the entry.
            note = f"the model raised without this entry: {failed.text()}"
            self.outcome(h, "failed", entry_id=entry_id, note=note)
            return
        accepted = verdict is not None and verdict.accepted
        self.record_verdict(entry_id, "validated" if accepted else "masked", verdict)
        action = "validated" if accepted else "masked"
        note = f"a run with it raised {failed.text()}" if failed else ""
        self.outcome(h, action, entry_id=entry_id, verdict=verdict, note=note)

    def tune_key(self, h: _Heavy) -> None:
        """Bench one heavy key and accept its best survivor through whole-model runs (4, 5)."""
        names = h.op.candidates
        heuristic = h.op.heuristic_for(h.key)
        now = self.table.resolve(h.key, names, heuristic)
        current = now.choice
        stored = self.cache.get(h.key, candidates=names)
        if stored is not None and (
            stored.status == "accepted" or "validated" in self.cache.verdicts_on(stored).values()
        ):
            # Another model's decision that does not serve this one (masked for it, or not
            # legal here): it is theirs, and this session never rewrites it.
            self.outcome(h, "known", entry_id=stored.id, note="another model's decision")
            return
        record: TimingRecord | None = None
        bench_best: str | None
        bench_stopped: str
        complete = True
        fresh = False
        if stored is not None and not self.o.retune:
            record = self.cache.record(stored)
            if record is not None and record.settings.get("complete") is False:
                record = None  # a bench the budget cut short: measure again
        if record is None:
            result = self.bench(h)
            record, fresh, complete = result.record, True, result.complete
            bench_best, bench_stopped = result.best, result.stopped
            ranking = list(result.survivors(self.o.keep))
            if not ranking:
                note = (
                    "every candidate raised"
                    if result.errors
                    else "the key budget ran out before any candidate ran"
                )
                self.outcome(h, "failed", note=note, bench_stopped=bench_stopped)
                return
        else:
            ranking = list(_bench.survivors(record, self.o.keep))
            bench_best, bench_stopped = (ranking[0] if ranking else None), "stored"
            if not ranking:
                self.outcome(h, "failed", note="every candidate raised", bench_stopped="stored")
                return
        tries = [name for name in ranking if name != current]
        if not tries:
            # Nothing beats what runs now. Keep the evidence as an unvalidated entry (served
            # only to tables that ask for everything) so the next session does not bench again.
            entry_id = stored.id if stored is not None else None
            if stored is None or self.o.retune or (fresh and stored.status == "unvalidated"):
                entry_id = self.put(h, ranking[0], record, "unvalidated").id
            self.outcome(
                h,
                "kept",
                entry_id=entry_id,
                bench_best=bench_best,
                bench_stopped=bench_stopped,
            )
            return
        first: _accept.Verdict | None = None
        tried: list[str] = []
        errors: list[str] = []
        for name in tries:
            if tried and self.out_of_time():
                break
            tried.append(name)
            candidate = self.table.derive(add=[(h.key, names, name)])
            verdict, failed = self.trial(self.table, candidate, [h.case])
            if failed is not None and failed.side == "A":
                # The model breaks with what it runs now, in this scenario: not this key's doing.
                note = f"the model raised with the current table: {failed.text()}"
                self.outcome(h, "failed", note=note, tried=tuple(tried))
                return
            if failed is not None:
                errors.append(f"{name}: a run with it raised {failed.text()}")
            if len(tried) == 1:
                first = verdict
            if verdict is not None and verdict.accepted:
                entry = self.accept_entry(h, name, record, verdict, current)
                self.outcome(
                    h,
                    "accepted",
                    entry_id=entry.id,
                    tried=tuple(tried),
                    verdict=verdict,
                    bench_best=bench_best,
                    bench_stopped=bench_stopped,
                    note="; ".join(errors),
                )
                return
        more = dict(
            tried=tuple(tried), verdict=first, bench_best=bench_best, bench_stopped=bench_stopped
        )
        untried = [name for name in tries if name not in tried]
        if untried or not complete:
            # The budget stopped short of an answer: keep the evidence, remember no "no", so
            # the next session takes the key up again.
            entry = self.put(h, tried[0], record, "unvalidated")
            why = (
                f"the time budget ran out before {untried} were tried"
                if untried
                else "the bench was cut short, so a candidate may be unmeasured"
            )
            self.outcome(h, "skipped", entry_id=entry.id, note="; ".join([why, *errors]), **more)
            return
        if now.source == "nearest" and self.keep_borrowed(h, now.choice, record, more, errors):
            return
        entry = self.put(h, tried[0], record, "rejected")
        self.record_verdict(entry.id, "masked", first)
        self.outcome(h, "rejected", entry_id=entry.id, note="; ".join(errors), **more)

    def keep_borrowed(
        self,
        h: _Heavy,
        choice: str,
        record: TimingRecord,
        more: dict[str, Any],
        errors: list[str],
    ) -> bool:
        """What runs now at this key is a neighbour's `choice`, and no survivor beat it here.

        Rejecting the survivor would mask the key down to the heuristic and lose the
        neighbour's gain; so the choice is tried at this very key, the heuristic here (A)
        against the choice here (B), and written as the key's own accepted entry if it wins.
        """
        names = h.op.candidates
        heuristic = h.op.heuristic_for(h.key)
        if choice == heuristic:
            return False
        a = self.table.derive(add=[(h.key, names, heuristic)])
        b = self.table.derive(add=[(h.key, names, choice)])
        verdict, failed = self.trial(a, b, [h.case])
        if failed is not None or verdict is None or not verdict.accepted:
            return False
        entry = self.accept_entry(h, choice, record, verdict, heuristic)
        note = f"the neighbour's {choice!r} won here against the heuristic; nothing beat it"
        self.outcome(
            h,
            "accepted",
            entry_id=entry.id,
            **{**more, "verdict": verdict},
            note="; ".join([note, *errors]),
        )
        return True

    def accept_entry(
        self,
        h: _Heavy,
        choice: str,
        record: TimingRecord,
        verdict: _accept.Verdict,
        against: str,
    ) -> Entry:
        """Write `choice` for the key as accepted, with this model's verdict, and serve it.

        Two commits, each a state that is safe to be killed in: unvalidated (served to no
        model), then this model's verdict and "accepted" together.
        """
        entry = self.put(h, choice, record, "unvalidated", _speedup(record, choice, against))
        self.record_verdict(entry.id, "validated", verdict, status="accepted")
        self.table = self.table.derive(include=[entry.id])
        return entry

    def put(
        self,
        h: _Heavy,
        choice: str,
        record: TimingRecord,
        status: str,
        speedup: float | None = None,
    ) -> Entry:
        self.wrote = True
        return self.cache.put(
            h.key,
            choice=choice,
            candidates=h.op.candidates,
            heuristic=h.op.heuristic_for(h.key),
            record=record,
            speedup=speedup,
            status=status,
            run_id=self.run_id,
        )

    def bench(self, h: _Heavy) -> _bench.BenchResult:
        args, kwargs = h.call.args, h.call.kwargs
        functions = {
            name: _bound(function, args, kwargs) for name, function in h.op.functions.items()
        }
        options = {"sync": self.model.sync, **self.o.bench_options}
        bound = h.op.lower_bound(h.key)
        if bound is not None:
            options.setdefault("lower_bound", bound)
        return _bench.bench(functions, budget=self.o.key_budget, **options)

    # -- 6: the guard -------------------------------------------------------------------------

    def served(self) -> tuple[list[int], _RunFailed | None]:
        """Entries the current table serves to this model's runs (one profiled pass of each
        scenario), and the failure if a run with the table raised (the entries met until then
        are in the list). `self.answers` keeps what each key was answered, for the guard."""
        answers: dict[str, str] = {}
        failed = None
        for case in self.cases:
            with dispatch.profile(capture=True) as p:
                try:
                    self.runner(self.table, [case], side="B")()
                except _RunFailed as error:
                    failed = error
            answers.update(_served(self.table, p))
            if failed is not None:
                break
        self.answers = answers
        ids = {int(a.split(":")[0]) for a in answers.values()}
        return sorted(ids), failed

    def guard_note(self) -> str:
        """The run note a passing guard leaves: the model, its version, and a digest of what
        every key it ran was answered (entry and choice), so any change is a new table."""
        lines = "\n".join(f"{key} {answer}" for key, answer in sorted(self.answers.items()))
        digest = sha256(lines.encode()).hexdigest()[:32]
        return f"model {self.model.name} ({self.fingerprint}): guard passed over table {digest}"

    def final_guard(self) -> None:
        used, failed = self.served()
        self.kept = used
        if not used:
            if failed is not None:
                raise failed.error  # the model fails with its heuristic: its own bug
            return
        note = self.guard_note()
        if failed is None and not self.wrote and self.cache.runs_noted(note):
            # A finished session's guard passed over exactly this table, and nothing changed.
            self.guard_skipped = True
            self.cache.note(self._run(), note)
            return
        if failed is None:
            # The guard is the promise "never slower": it runs whatever the budget says.
            verdict, failed = self.trial(Table.empty(), self.table, self.cases)
            self.guard = verdict
            if verdict is not None and verdict.accepted:
                self.cache.note(self._run(), note)
                return
        if failed is not None:
            self.guard_error = failed.text()
            if failed.side == "A":
                raise failed.error  # the model fails with no table at all: its own bug
        # Mask everything the model uses, then whatever a masked entry's neighbours serve in
        # its place, until the model runs its heuristic everywhere.
        while used:
            for entry_id in used:
                # An entry no other model vouches for is nobody's decision any more: rejected,
                # in the same commit as the mask, so no state serves it unvouched.
                others = self.cache.verdicts_on(entry_id)
                others.pop(self.model.name, None)
                vouched = "validated" in others.values()
                self.record_verdict(
                    entry_id, "masked", self.guard, status=None if vouched else "rejected"
                )
            used, failed = self.served()
        if failed is not None:
            raise failed.error
        self.kept = []

    def _run(self) -> int:
        assert self.run_id is not None, "a session writes inside its run"
        return self.run_id

    # -- the report ---------------------------------------------------------------------------

    def report(self, *, interrupted: bool = False) -> TuneReport:
        return TuneReport(
            model=self.model.name,
            fingerprint=self.fingerprint,
            run_id=self.run_id,
            scenarios=tuple(_case_text(c) for c in self.cases),
            keys=tuple(self.outcomes),
            screened=self.screened,
            guard=self.guard,
            guard_skipped=self.guard_skipped,
            guard_error=self.guard_error,
            kept=tuple(self.kept if self.kept is not None else ()),
            masked=tuple(self.masked),
            seconds=time.perf_counter() - self.started,
            interrupted=interrupted,
            budget_spent=self.budget_spent,
        )


def _served(table: Table, p: dispatch.Profile) -> dict[str, str]:
    """Key text -> "entry id:choice" for every key of a profiled pass an entry answered."""
    out: dict[str, str] = {}
    for key, call in p.captured().items():
        op = call.op
        answer = table.resolve(key, op.candidates, op.heuristic_for(key))
        if answer.source in ("exact", "nearest") and answer.entry_id is not None:
            out[key.text] = f"{answer.entry_id}:{answer.choice}"
    return out


def _entry_ids(table: Table, p: dispatch.Profile) -> set[int]:
    """The entries behind the answers a profiled pass got from `table`."""
    return {int(answer.split(":")[0]) for answer in _served(table, p).values()}


def _run_with(model: Model, table: Table, cases: Sequence[dict[str, int]]) -> Callable[[], None]:
    """One whole-model run: every case in turn, with `table` as the current table."""
    run = model.run

    def one_run() -> None:
        with using(table):
            for case in cases:
                run(**case)

    return one_run


def _bound(
    function: Callable[..., object], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[], object]:
    def call() -> object:
        return function(*args, **kwargs)

    return call


def _gain(verdict: _accept.Verdict | None) -> float | None:
    """A verdict's speedup as the store keeps it: a finite positive number, or nothing."""
    if verdict is None or not (math.isfinite(verdict.speedup) and verdict.speedup > 0):
        return None
    return verdict.speedup


def _speedup(record: TimingRecord, choice: str, current: str) -> float | None:
    """The isolated bench's speedup of `choice` over what ran before, from the record."""
    try:
        chosen, before = record.candidate(choice).median, record.candidate(current).median
    except KeyError:
        return None
    if not chosen or not before:
        return None
    return before / chosen


# --- the library calls -------------------------------------------------------------------------


def _open_cache(cache: Cache | None, open_options: Mapping[str, Any]) -> tuple[Cache, bool]:
    if cache is not None:
        if open_options:
            raise BadArgumentError("pass either an open cache or options to open one, not both")
        return cache, False
    from tunecache.cache import Cache

    known = set(inspect.signature(Cache.open).parameters)
    unknown = sorted(set(open_options) - known)
    if unknown:
        raise BadArgumentError(f"unknown options {unknown}")
    return Cache.open(**open_options), True


def _session(
    model: object,
    cache: Cache | None,
    open_options: Mapping[str, Any],
    options: _Options,
    progress: Progress | None,
    max_distance: float,
    *,
    tune_keys: bool,
) -> TuneReport:
    _check_options(options)
    m = as_model(model)
    store, owned = _open_cache(cache, open_options)
    try:
        s = _Session(m, store, options, progress, max_distance)
        kind = "tune" if tune_keys else "validate"
        with store.run(kind, notes=f"model {m.name}") as run_id:
            s.run_id = run_id
            try:
                _steps(s, tune_keys=tune_keys)
            except KeyboardInterrupt:
                raise TuneInterrupted(s.report(interrupted=True)) from None
        return s.report()
    finally:
        if owned:
            store.close()


#: profiles per session: a key that speeds up shifts the shares, and a key too light to
#: matter before may carry a real share of the faster run; the session profiles again after a
#: pass that changed its table, so a second session finds nothing new to do
PASSES = 3


def _steps(s: _Session, *, tune_keys: bool) -> None:
    what = f"{'tuning' if tune_keys else 'validating'} {s.model.name}"
    handled: set[Key] = set()
    for n in range(PASSES):
        if n and s.out_of_time():
            break
        try:
            heavy = [h for h in s.profile() if h.key not in handled]
        except Exception:
            if not n:
                raise  # the model fails on its own table, before this session changed it
            break  # this session's table breaks a run: the guard runs it, and masks it
        if n and not heavy:
            break
        before = s.table
        total = len(handled) + len(heavy)
        for done, h in enumerate(heavy, start=len(handled)):
            s.tell(what, done, total)
            _step(s, h, tune_keys=tune_keys)
        s.tell(what, total, total)
        handled |= {h.key for h in heavy}
        if s.table is before or s.budget_spent:
            break  # the shares stand: the runs are what this pass profiled
    s.final_guard()


def _step(s: _Session, h: _Heavy, *, tune_keys: bool) -> None:
    if s.out_of_time():
        s.outcome(h, "skipped", note="time budget spent")
        return
    answer = s.table.resolve(h.key, h.op.candidates, h.op.heuristic_for(h.key))
    if answer.source == "masked":
        s.outcome(h, "known", entry_id=answer.entry_id, note="masked")
        return
    if answer.entry_id is not None:
        s.judge(h, answer.entry_id)
        if answer.source == "exact" or not tune_keys:
            return
    if tune_keys:
        # No entry of its own serves this key (it runs the heuristic or a neighbour's choice):
        # bench it, and accept what wins through the whole model.
        s.tune_key(h)


def tune(
    model: Model | Callable[..., object],
    *,
    cache: Cache | None = None,
    share: float = 0.01,
    keep: int = 3,
    confirmations: int | None = None,
    pairs: int | None = None,
    alpha: float | None = None,
    key_budget: float | None = 1.0,
    budget: float | None = None,
    retune: bool = False,
    max_distance: float = 1.0,
    bench_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    **open_options: Any,
) -> TuneReport:
    """Tune a model on this device and write what it finds to the cache.

    `share` screens out keys lighter than this fraction of a scenario's time; `keep` is how many
    bench survivors may be tried through whole-model runs; `confirmations`, `pairs` and `alpha`
    are the acceptance rule's (`tunecache.accept.accept`'s defaults when None); `key_budget`
    bounds each key's isolated bench and `budget` the whole session, in seconds (the final guard
    always runs). A key that already has an entry for its candidate list reuses that entry's
    timing record unless `retune`. Pass an open `cache`, or the options of `tunecache.open`.

    Ctrl-C raises `TuneInterrupted` (a KeyboardInterrupt) carrying the partial report; every
    entry accepted before it stays stored.
    """
    options = _Options(
        share,
        keep,
        *_accept_options(confirmations, pairs, alpha),
        key_budget,
        budget,
        retune,
        dict(bench_options or {}),
    )
    return _session(model, cache, open_options, options, progress, max_distance, tune_keys=True)


#: the options `evaluate` passes on to `tune` (tune_options=...)
TUNE_OPTIONS = (
    "share",
    "keep",
    "confirmations",
    "pairs",
    "alpha",
    "key_budget",
    "budget",
    "retune",
    "bench_options",
)


def _check_tune_options(options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - set(TUNE_OPTIONS))
    if unknown:
        raise BadArgumentError(f"unknown tune options {unknown}; known: {list(TUNE_OPTIONS)}")
    o = {"share": 0.01, "keep": 3, "key_budget": 1.0, "budget": None, "retune": False, **options}
    _check_options(
        _Options(
            o["share"],
            o["keep"],
            *_accept_options(o.get("confirmations"), o.get("pairs"), o.get("alpha")),
            o["key_budget"],
            o["budget"],
            o["retune"],
            dict(o.get("bench_options") or {}),
        )
    )


def validate(
    model: Model | Callable[..., object],
    *,
    cache: Cache | None = None,
    share: float = 0.01,
    confirmations: int | None = None,
    pairs: int | None = None,
    alpha: float | None = None,
    budget: float | None = None,
    max_distance: float = 1.0,
    progress: Progress | None = None,
    **open_options: Any,
) -> TuneReport:
    """Judge, for this model, the entries other models tuned that serve its heavy keys.

    Each is run with and without, in paired whole-model runs, and recorded as `validated` or
    `masked` for this model only; then the finished table must beat no table end to end, or
    every entry the model uses is masked for it. Keys lighter than `share` are not judged one by
    one (no whole-model run could confirm them); the final guard covers them.
    """
    options = _Options(
        share, 1, *_accept_options(confirmations, pairs, alpha), None, budget, False, {}
    )
    return _session(model, cache, open_options, options, progress, max_distance, tune_keys=False)


def _accept_options(
    confirmations: int | None, pairs: int | None, alpha: float | None
) -> tuple[int, int, float]:
    defaults = {
        name: p.default
        for name, p in inspect.signature(_accept.accept).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    return (
        defaults["confirmations"] if confirmations is None else confirmations,
        defaults["pairs"] if pairs is None else pairs,
        defaults["alpha"] if alpha is None else alpha,
    )


# --- held-out evaluation -----------------------------------------------------------------------


@dataclass(frozen=True)
class EvaluationRow:
    """One model's end-to-end time with the shared cache against its heuristic, paired."""

    model: str
    group: str  # "tuned" or "held-out"
    outcome: str  # "improved", "neutral" or "regressed"
    heuristic_ms: float | None
    cached_ms: float | None
    speedup: float
    low: float
    high: float
    p_faster: float
    p_slower: float
    pairs: int
    #: entries of the cache that serve the model's runs
    entries: int
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Evaluation:
    """The held-out protocol's result: every model's row, and the tuning reports."""

    rows: tuple[EvaluationRow, ...]
    reports: tuple[TuneReport, ...]
    seconds: float

    def counts(self, group: str | None = None) -> dict[str, int]:
        counts = {"improved": 0, "neutral": 0, "regressed": 0}
        for row in self.rows:
            if group is None or row.group == group:
                counts[row.outcome] += 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": [r.as_dict() for r in self.rows],
            "counts": {g: self.counts(g) for g in ("tuned", "held-out")},
            "reports": [r.as_dict() for r in self.reports],
            "seconds": self.seconds,
        }


def check_evaluate_options(
    pairs: int, alpha: float, tune_options: Mapping[str, Any] | None = None
) -> None:
    """Refuse, in one line, options `evaluate` could not use, before anything runs or opens."""
    _count("pairs", pairs, 2)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise BadArgumentError(f"alpha is a probability in (0, 1), got {alpha!r}")
    least = _least_pairs(alpha)
    if pairs < least:
        raise BadArgumentError(
            f"{pairs} pairs can never reach alpha {alpha:g}: measure at least {least}"
        )
    _check_tune_options(tune_options or {})


def evaluate(
    tuned: Sequence[Model | Callable[..., object]],
    held_out: Sequence[Model | Callable[..., object]],
    *,
    cache: Cache | None = None,
    pairs: int = 20,
    alpha: float = 0.01,
    min_change: float = 0.0,
    tune_options: Mapping[str, Any] | None = None,
    max_distance: float = 1.0,
    progress: Progress | None = None,
    **open_options: Any,
) -> Evaluation:
    """Tune on some models, then apply the shared cache, as it is, to held-out models.

    Every model (both groups) is then run `pairs` times with the cache and with no table, in
    interleaved back-to-back pairs, and classified improved / neutral / regressed against its
    heuristic by a paired test at `alpha` (`tunecache.stats.classify`). Held-out models are
    not validated first: the report says what reuse gives before any model-specific judgement.
    """
    started = time.perf_counter()
    check_evaluate_options(pairs, alpha, tune_options)
    tuning = [as_model(m) for m in tuned]
    others = [as_model(m) for m in held_out]
    names = [m.name for m in tuning + others]
    if len(set(names)) != len(names):
        raise BadArgumentError(f"models need distinct names, got {names}")
    store, owned = _open_cache(cache, open_options)
    try:
        reports = [
            tune(
                m,
                cache=store,
                max_distance=max_distance,
                progress=progress,
                **dict(tune_options or {}),
            )
            for m in tuning
        ]
        fingerprints = {r.model: r.fingerprint for r in reports}
        rows = []
        groups = [("tuned", m) for m in tuning] + [("held-out", m) for m in others]
        for done, (group, m) in enumerate(groups):
            if progress is not None:
                progress("measuring", done, len(groups))
            table = Table.open(
                path=store.path,
                device=store.device,
                model=m.name,
                fingerprint=fingerprints.get(m.name),
                scenarios=m.scenarios,
                max_distance=max_distance,
            )
            rows.append(_measure(m, group, table, pairs, alpha, min_change))
        if progress is not None:
            progress("measuring", len(groups), len(groups))
        return Evaluation(tuple(rows), tuple(reports), time.perf_counter() - started)
    finally:
        if owned:
            store.close()


def _measure(
    m: Model, group: str, table: Table, pairs: int, alpha: float, min_change: float
) -> EvaluationRow:
    cases = m.cases()

    entries: set[int] = set()
    for case in cases:
        with dispatch.profile(capture=True) as p, using(table):
            m.run(**case)
        entries |= _entry_ids(table, p)
    if not entries:
        # The cache answers nothing for this model: both sides would run the same code.
        return EvaluationRow(
            m.name, group, "neutral", None, None, 1.0, 1.0, 1.0, 1.0, 1.0, 0, 0,
            note="no entry applies",
        )  # fmt: skip
    a, b = _accept.measure(
        _run_with(m, Table.empty(), cases), _run_with(m, table, cases), pairs=pairs, sync=m.sync
    )
    c = stats.compare(a, b, alpha=alpha)
    outcome = stats.classify(c, alpha=alpha, min_change=min_change)
    return EvaluationRow(
        model=m.name,
        group=group,
        outcome=outcome,
        heuristic_ms=statistics.median(a) * 1e3,
        cached_ms=statistics.median(b) * 1e3,
        speedup=c.speedup,
        low=c.low,
        high=c.high,
        p_faster=c.p_faster,
        p_slower=c.p_slower,
        pairs=c.pairs,
        entries=len(entries),
    )
