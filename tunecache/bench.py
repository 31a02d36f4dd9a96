"""Adaptive benching: time one key's candidates side by side and stop once the answer is known.

Fixed-sample benching (Triton's `do_bench`: 25 ms of warm-up and 100 ms of repetitions for every
candidate) spends most of its time confirming what a few samples already showed. `bench` instead:

1. probes every candidate first: one timed call each, in declaration order, before any is
   calibrated, so no candidate's calibration can spend the budget before the others were seen.
   The probe is also the first of the `warmup` calls. A first call is typically cold (caches,
   lazy initialisation, first-touch pages), so a probe time is pessimistic;
2. finishes each candidate's warm-up (`warmup` - 1 untimed calls) and calibrates its inner loop,
   starting from the probe's time, so one sample lasts about `sample_time`, far above the
   clock's resolution (a candidate whose probe already lasted `sample_time` needs no more
   calibration calls);
3. takes samples round-robin, one per candidate per round, so a slow drift of the machine (another
   process, a clock change) hits every candidate alike instead of whichever ran last;
4. stops as early as the evidence allows, for one of these reasons (`BenchResult.stopped`):

   - ``"converged"``: after `min_samples` rounds the leader (lowest median) is settled against
     every remaining rival: the leader's high quantile is at most (1 + INDIFFERENCE) times the
     rival's low quantile. Either the rival is clearly slower, or both sit so tightly within
     INDIFFERENCE of each other that picking the leader costs at most that much if the rival
     were really faster. The quantiles are the min and max for up to 4 samples and trim one more
     sample from each end for every 4 more, so one outlier of a shared machine can neither fake
     nor forever block a decision.
   - ``"bound"``: a candidate's median over at least 2 samples reached `lower_bound` /
     `bound_threshold`: nothing can be much faster, so further measurement cannot pay off.
   - ``"budget"``: the clock budget for this key is spent, or the next step does not fit in
     what is left of it; the decision rests on what was measured. A candidate stopped before
     its first sample keeps one fallback sample: its last calibration batch, or its (cold,
     pessimistic) probe if calibration never started. A candidate stopped before its probe has
     no samples and no error, and takes no part.
   - ``"max_samples"``: every remaining candidate has `max_samples` samples.
   - ``"single"``: only one candidate could be measured (one was given or the others raised);
     it still gets `min_samples` samples, because the record is evidence.
   - ``"failed"``: every candidate raised, so there is no best.

**The budget bounds the key.** A step is one call or one batch of calls: a probe, an untimed
warm-up call, a calibration batch, a sample. A step under way is never interrupted (clock reads
inside a timed region would distort it), so the budget is read before every step:

- a probe (a first call, whose time nothing predicts) starts only while elapsed < budget;
- any later step starts only if its expected time (the candidate's last measured time per call,
  times the calls in the step) fits in what is left: the first step that does not fit ends the
  bench, and no candidate is called again;
- a candidate one call of which took longer than what was left of the budget when it began is
  recorded as too slow (`tunecache.evidence.TOO_SLOW`: its error says how long the call took
  and how much was left), keeps that call as its one sample, ends the bench, and takes no part
  in the ranking (a budget that cannot hold one of its calls cannot measure it).

So the overrun is at most one call: a first call that outlasted what was left, or a call that
ran slower than the candidate's calls before it; for a fast candidate sampled in batches, one
batch (calibrated to about `sample_time`). That is, elapsed < budget + that one step, plus the
bench's own bookkeeping between clock reads. `BenchResult.complete` (and the record's
``settings["complete"]``) says whether the budget cut the evidence short: a candidate recorded
too slow leaves it incomplete unless its one call is beyond `drop_ratio` of the best anyway.

Between rounds, once every candidate has `min_samples` samples, a candidate whose median is more
than `drop_ratio` times the leader's is dropped (pruned), as cubecl's autotuner does.

**Outputs before speed.** With `compare` (and `reference`, the candidate whose output is the
standard: the heuristic), the reference is probed first and its output kept; every other
candidate's probe output is compared with it, and one that differs (`compare` returns the
difference in words) is refused as wrong (`tunecache.evidence.WRONG`): recorded with that
error and no sample, never calibrated, sampled or ranked. The probes double as the check, so it
costs no call of its own. ``settings["checked"]`` says whether outputs were compared: the
reference's output was had (not when it raised or was refused), so every candidate probed after
it was checked, and one never probed has no sample to rank.

`refused` names candidates the caller will not have called (a call a previous bench found too
slow for this budget): each is recorded with the timing given, and never called.
The record's ``settings["waited"]`` is the fraction of the bench's wall time this process's
threads spent waiting for a CPU (`tunecache.evidence.cpu_wait`; None where the system does not
say): a bench beside other busy work measures its neighbours as much as its candidates.

Everything is timed through the injected `clock`, so tests drive `bench` with a fake clock and
scripted timings, and a GPU caller passes a `sync` that waits for queued work before every clock
read that opens or closes a timed region. `tunecache.sampling` carries out the steps.
"""

from __future__ import annotations

import functools
import inspect
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tunecache import codec, evidence
from tunecache.checks import is_finite, is_int
from tunecache.errors import BadArgumentError
from tunecache.sampling import Sampler, Stopped, is_complete

__all__ = [
    "INDIFFERENCE",
    "SAMPLE_TIME",
    "BenchResult",
    "Stopped",
    "bench",
    "check_settings",
    "settings_defaults",
    "survivors",
]

#: default seconds per sample: ~1000x perf_counter's resolution, yet cheap enough that ten
#: samples of a fast op cost a tenth of what fixed-sample benching spends
SAMPLE_TIME = 2e-3
#: a rival whose time may be at most this fraction better than the leader's is not worth more
#: samples: picking the leader costs at most this much
INDIFFERENCE = 0.05


@dataclass(frozen=True, slots=True)
class BenchResult:
    """What `bench` measured for one key: the full record and the decision read from it."""

    #: every candidate (declaration order), every sample in seconds per call, settings and env
    record: codec.TimingRecord
    #: the fastest median among candidates that ran, raised nothing and were not pruned
    best: str | None
    #: candidates that ran without error (pruned ones included), fastest median first
    ranking: tuple[str, ...]
    #: seconds per call, for every candidate that has samples
    medians: Mapping[str, float]
    #: name -> one-line error text, for candidates that raised or were refused (too slow, a
    #: wrong output: `tunecache.evidence.refusal` tells them apart)
    errors: Mapping[str, str]
    #: candidates dropped early because their median exceeded drop_ratio x the best
    pruned: tuple[str, ...]
    #: why sampling stopped
    stopped: Stopped
    #: seconds of the injected clock spent in `bench`, calibration and warm-up included
    elapsed: float

    @property
    def complete(self) -> bool:
        """False when the budget cut the evidence short: some candidate that did not raise has
        fewer than min_samples samples, was not pruned, and no stopping rule had decided; or a
        candidate recorded too slow could still be within drop_ratio of the best.

        A tuner should treat an incomplete record as a hint, not as a measured ranking: its
        short candidates may rest on one cold probe, or on nothing at all.
        """
        settings = self.record.settings
        minimum, ratio = settings.get("min_samples"), settings.get("drop_ratio")
        return is_complete(
            self.stopped,
            self.record.candidates,
            minimum if isinstance(minimum, int) else 1,
            float(ratio) if isinstance(ratio, int | float) else None,
        )

    @property
    def too_slow(self) -> tuple[str, ...]:
        """Candidates recorded too slow for the key's budget, in declaration order."""
        return tuple(
            name
            for name, error in self.errors.items()
            if evidence.refusal(error) == evidence.TOO_SLOW
        )

    def survivors(self, keep: int = 3, within: float | None = None) -> tuple[str, ...]:
        """The short list worth confirming by whole-model runs (`survivors` of the record)."""
        return survivors(self.record, keep, within)


def survivors(
    record: codec.TimingRecord, keep: int = 3, within: float | None = None
) -> tuple[str, ...]:
    """The best `keep` candidates of a timing record that were not pruned and did not raise,
    fastest median first, each within `within` (default: the bench's drop_ratio) of the best.
    A record read back from the store ranks exactly as the bench that made it did."""
    if not is_int(keep) or keep < 1:
        raise BadArgumentError(f"keep must be an int >= 1, got {keep!r}")
    if within is None:
        ratio = record.settings.get("drop_ratio")
        within = float(ratio) if isinstance(ratio, (int, float)) else math.inf
    elif not is_finite(within) or not within >= 1.0:
        raise BadArgumentError(f"within must be a number >= 1, got {within!r}")
    ran = [c for c in record.candidates if c.error is None and not c.pruned and c.samples]
    medians = {c.name: statistics.median(c.samples) for c in ran}
    # sorted() is stable: equal medians keep declaration order, as the bench's ranking does.
    ranked = sorted(medians, key=lambda name: medians[name])
    if not ranked:
        return ()
    limit = medians[ranked[0]] * within
    return tuple(name for name in ranked if medians[name] <= limit)[:keep]


def bench(
    candidates: Mapping[str, Callable[[], object]],
    *,
    min_samples: int = 3,
    max_samples: int = 10,
    drop_ratio: float = 1.5,
    lower_bound: float | None = None,
    bound_threshold: float = 0.8,
    budget: float | None = 1.0,
    sample_time: float = SAMPLE_TIME,
    warmup: int = 1,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    refused: Mapping[str, codec.CandidateTiming] | None = None,
    cpu_wait: Callable[[], float | None] | None = None,
    reference: str | None = None,
    compare: Callable[[Any, Any], str | None] | None = None,
) -> BenchResult:
    """Time each zero-argument candidate, interleaved, and pick the fastest by median.

    `lower_bound` is a time per call no candidate can beat (a roofline estimate); `budget` caps
    the clock seconds spent on this key, calibration and warm-up included (None: no cap), to
    within one call. A candidate that raises an Exception is recorded with its error and
    skipped; KeyboardInterrupt and SystemExit propagate. `refused` maps candidates not to call
    to the timing to record for each (it must carry an error). `compare(reference's output,
    output)`, with `reference` naming a candidate, refuses as wrong each candidate whose
    output it finds different (None: the same). `cpu_wait` reads how long this process has
    waited for a CPU (default `tunecache.evidence.cpu_wait`). Raises BadArgumentError for bad
    options or no candidates.
    """
    _check_candidates(candidates)
    options: dict[str, Any] = {
        "min_samples": min_samples,
        "max_samples": max_samples,
        "drop_ratio": drop_ratio,
        "lower_bound": lower_bound,
        "bound_threshold": bound_threshold,
        "budget": budget,
        "sample_time": sample_time,
        "warmup": warmup,
        "sync": sync,
        "clock": clock,
        "refused": refused,
        "cpu_wait": cpu_wait,
        "reference": reference,
        "compare": compare,
    }
    check_settings(**options)
    given = _check_refused(candidates, refused, reference, compare)
    waiting = evidence.cpu_wait if cpu_wait is None else cpu_wait
    wall, waited = time.perf_counter(), waiting()
    checking = None if reference is None or compare is None else (reference, compare)
    run = Sampler(candidates, given, sample_time, warmup, budget, sync, clock, checking)
    run.probe_all()
    for name in candidates:
        if run.cut:
            break
        if name in run.probes and name not in run.errors:
            run.calibrate(name)
    stopped, rounds = _sample(
        run, min_samples, max_samples, drop_ratio, lower_bound, bound_threshold
    )
    run.fill_fallbacks()
    elapsed = max(0.0, clock() - run.start)
    settings = _settings(options, stopped, rounds, elapsed)
    settings["waited"] = evidence.waited(waited, waiting(), time.perf_counter() - wall)
    settings["checked"] = run.checked
    return run.result(stopped, elapsed, settings, min_samples, drop_ratio)


def _settings(
    options: Mapping[str, Any], stopped: Stopped, rounds: int, elapsed: float
) -> dict[str, codec.Scalar]:
    """The record's settings: how the bench was asked to measure, and how it went."""
    lower_bound, budget, clock = options["lower_bound"], options["budget"], options["clock"]
    return {
        "min_samples": options["min_samples"],
        "max_samples": options["max_samples"],
        "drop_ratio": float(options["drop_ratio"]),
        "lower_bound": None if lower_bound is None else float(lower_bound),
        "bound_threshold": float(options["bound_threshold"]),
        "budget": None if budget is None else float(budget),
        "sample_time": float(options["sample_time"]),
        "warmup": options["warmup"],
        "indifference": INDIFFERENCE,
        "sync": options["sync"] is not None,
        "clock": getattr(clock, "__qualname__", type(clock).__qualname__),
        "stopped": stopped,
        "rounds": rounds,
        "elapsed": elapsed,
    }


# --- the sampling loop -----------------------------------------------------------------------


def _sample(
    run: Sampler,
    min_samples: int,
    max_samples: int,
    drop_ratio: float,
    lower_bound: float | None,
    bound_threshold: float,
) -> tuple[Stopped, int]:
    """Take rounds of samples until a stopping rule fires; return why and how many rounds ran."""
    if not run.active:
        return ("budget" if run.cut else "failed"), 0
    # Decided before sampling: a rival that falls away later (pruned, raised) leaves a leader
    # that was compared, which is convergence, not a lone candidate.
    single = len(run.active) == 1
    limit = None if lower_bound is None else lower_bound / bound_threshold
    rounds = 0
    while rounds < max_samples:
        took = False
        for name in list(run.active):
            took = run.sample(name) or took
            if run.cut:
                return "budget", rounds + int(took)
            # Only a candidate still active may stop the bench: one that just raised is out.
            if limit is not None and name in run.active and run.reached(name, limit):
                return "bound", rounds + 1
        rounds += 1
        if not run.active:
            return "failed", rounds
        if rounds < min_samples:
            continue
        run.prune(drop_ratio)
        if single:
            return "single", rounds
        if run.settled(INDIFFERENCE):
            return "converged", rounds
    return "max_samples", rounds


@functools.cache
def settings_defaults() -> MappingProxyType[str, Any]:
    """Every keyword option of `bench` with its default, read from its signature."""
    parameters = inspect.signature(bench).parameters.values()
    return MappingProxyType({p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY})


def _check_refused(
    candidates: Mapping[str, object],
    refused: Mapping[str, codec.CandidateTiming] | None,
    reference: str | None,
    compare: object,
) -> dict[str, codec.CandidateTiming]:
    """The refused candidates as a dict; refuse entries that name no candidate or record no
    reason, and a `compare` without a `reference` among the candidates (or the other way)."""
    if (reference is None) != (compare is None) or (
        reference is not None and reference not in candidates
    ):
        raise BadArgumentError("compare needs a reference, one of the candidates, and back")
    given = dict(refused or {})
    for name, timing in given.items():
        if name not in candidates:
            raise BadArgumentError(f"refused candidate {name!r} is not one of the candidates")
        if not isinstance(timing, codec.CandidateTiming) or timing.name != name:
            raise BadArgumentError(f"refused candidate {name!r} needs its CandidateTiming")
        if timing.error is None:
            raise BadArgumentError(f"refused candidate {name!r} needs an error saying why")
    return given


def _check_candidates(candidates: object) -> None:
    """Refuse candidates that are not a non-empty mapping of names to callables."""
    if not isinstance(candidates, Mapping) or not candidates:
        raise BadArgumentError("candidates must be a non-empty mapping of name -> callable")
    for name, fn in candidates.items():
        if not isinstance(name, str) or not name:
            raise BadArgumentError(f"candidate names must be non-empty str, got {name!r}")
        if not callable(fn):
            raise BadArgumentError(f"candidate {name!r} is not callable")


def check_settings(**settings: Any) -> None:
    """Refuse settings `bench` cannot honour, with one line that names the option.

    `settings` are keyword options of `bench`; those not given take its defaults, and a name
    it does not know is refused too. `bench` calls it first; a caller that passes settings on
    to `bench` later (the tuner) calls it up front, so a bad option is refused before anything
    runs.
    """
    defaults = settings_defaults()
    unknown = sorted(set(settings) - set(defaults))
    if unknown:
        raise BadArgumentError(f"unknown bench options {unknown}; known: {sorted(defaults)}")
    values = {**defaults, **settings}
    min_samples, max_samples = values["min_samples"], values["max_samples"]
    drop_ratio, lower_bound = values["drop_ratio"], values["lower_bound"]
    bound_threshold, budget = values["bound_threshold"], values["budget"]
    sample_time, warmup = values["sample_time"], values["warmup"]
    sync, clock = values["sync"], values["clock"]
    refused, cpu_wait = values["refused"], values["cpu_wait"]
    compare = values["compare"]
    # The annotations say what is meant; callers without a type checker pass anything, so
    # every check is made at run time too.
    if not is_int(min_samples) or min_samples < 1:
        raise BadArgumentError(f"min_samples must be an int >= 1, got {min_samples!r}")
    if not is_int(max_samples) or max_samples < min_samples:
        raise BadArgumentError(
            f"max_samples must be an int >= min_samples ({min_samples}), got {max_samples!r}"
        )
    if not is_finite(drop_ratio) or not drop_ratio > 1.0:
        raise BadArgumentError(f"drop_ratio must be a number > 1, got {drop_ratio!r}")
    if lower_bound is not None and (not is_finite(lower_bound) or not lower_bound > 0):
        raise BadArgumentError(f"lower_bound must be a number > 0 or None, got {lower_bound!r}")
    if not is_finite(bound_threshold) or not 0 < bound_threshold <= 1:
        raise BadArgumentError(f"bound_threshold must be in (0, 1], got {bound_threshold!r}")
    if budget is not None and (not is_finite(budget) or not budget > 0):
        raise BadArgumentError(f"budget must be a number of seconds > 0 or None, got {budget!r}")
    if not is_finite(sample_time) or not sample_time > 0:
        raise BadArgumentError(f"sample_time must be a number of seconds > 0, got {sample_time!r}")
    if not is_int(warmup) or warmup < 0:
        raise BadArgumentError(f"warmup must be an int >= 0, got {warmup!r}")
    if sync is not None and not callable(sync):
        raise BadArgumentError("sync must be a callable or None")
    if not callable(clock):
        raise BadArgumentError("clock must be a callable returning seconds")
    if refused is not None and not isinstance(refused, Mapping):
        raise BadArgumentError("refused must map candidate names to CandidateTimings, or None")
    if cpu_wait is not None and not callable(cpu_wait):
        raise BadArgumentError("cpu_wait must be a callable returning seconds, or None")
    if compare is not None and not callable(compare):
        raise BadArgumentError("compare must be a callable of two outputs, or None")
