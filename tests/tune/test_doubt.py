"""Evidence that does not stick (tunecache.tune.doubt): a stored record is reused only when it is
complete and nothing contradicts it; a doubtful one is benched again in a later session, a
bounded number of times, and a "no" decided from doubtful evidence is taken up again.

The noise is injected: the bench ranks on a clock the candidates move (`Clock`), the time this
process "waited for a CPU" is a meter the test sets busy or quiet, and a candidate that should
look slow in one session is told so. Whole-model runs sleep for real, with margins of 5x.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import pytest

import tunecache
from tests.tune.support import Clock, outside_the_model
from tunecache import codec
from tunecache.cache import Cache
from tunecache.resolve import Table
from tunecache.tune import TuneReport, doubt
from tunecache.tune.model import Model
from tunecache.tune.options import session_options
from tunecache.tune.session import Running
from tunecache.tune.tuner import run_session


@dataclass
class Noise:
    """What is noisy now: the bench's view of the fast candidate, its real time inside a
    model, and the CPU-wait meter (every read while busy adds an hour)."""

    bench: bool = False
    model: bool = False
    busy: bool = False
    waited: float = 0.0

    def cpu_wait(self) -> float:
        if self.busy:
            self.waited += 3600.0
        return self.waited


def noisy_op(signature: str, noise: Noise, clock: Clock) -> tunecache.Tunable[..., None]:
    """`base` (the heuristic) takes 10 ms; `fast` 2 ms, unless the noise says otherwise: 20 ms
    on the bench's clock while `noise.bench`, 20 ms for real inside a model while
    `noise.model`."""
    in_bench = outside_the_model()

    def base(n: int) -> None:
        clock.advance(0.01)
        time.sleep(0.01)

    def fast(n: int) -> None:
        clock.advance(0.02 if noise.bench else 0.002)
        time.sleep(0.02 if noise.model and not in_bench() else 0.002)

    return tunecache.Tunable(
        signature,
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"base": base, "fast": fast},
        heuristic="base",
        register=False,
    )


def session(model: Model, cache: Cache, noise: Noise, clock: Clock, **options: Any) -> TuneReport:
    """One tuning session with the injected bench clock and CPU-wait meter."""
    options.setdefault("bench_options", {})
    options["bench_options"] = {"clock": clock, **options["bench_options"]}
    how = Running(cpu_wait=noise.cpu_wait, progress=options.pop("progress", None))
    return run_session(model, cache, {}, session_options(**options), how, tune_keys=True)


def served(cache: Cache, model: Model, op: tunecache.Tunable[..., None]) -> str:
    table = Table.open(path=cache.path, device=cache.device, model=model.name)
    return table.resolve(op.key(1), op.candidates, "base").choice


def stored(cache: Cache, op: tunecache.Tunable[..., None]) -> tuple[Any, codec.TimingRecord]:
    entry = cache.get(op.key(1), candidates=op.candidates)
    assert entry is not None
    record = cache.record(entry)
    assert record is not None
    return entry, record


# --- the rules -------------------------------------------------------------------------------


def _record(*candidates: codec.CandidateTiming, **settings: Any) -> codec.TimingRecord:
    return codec.TimingRecord(
        candidates=candidates, settings={"complete": True, "drop_ratio": 1.5, **settings}
    )


def test_a_record_is_doubtful_when_cut_contended_unstable_or_doubted() -> None:
    steady = _record(
        codec.CandidateTiming("a", (1.0, 1.1, 1.0)),
        codec.CandidateTiming("b", (2.0, 2.1, 2.2), pruned=True),
    )
    assert doubt.doubt(steady) is None
    assert doubt.doubt(doubt.with_settings(steady, waited=0.05)) is None
    cut = doubt.doubt(doubt.with_settings(steady, complete=False))
    assert cut is not None and cut.startswith("budget cut")
    busy = doubt.doubt(doubt.with_settings(steady, waited=0.63))
    assert busy == "contended: its bench waited 63% of its time for a CPU"
    # b dropped at 2.6x by its median, but its fastest sample is as fast as a's fastest.
    shaky = _record(
        codec.CandidateTiming("a", (1.0, 1.1, 1.0)),
        codec.CandidateTiming("b", (2.6, 0.9, 2.7), pruned=True),
    )
    said = doubt.doubt(shaky)
    assert said is not None and said.startswith("unstable: b was dropped at 2.60x")
    assert "fastest sample was 0.90x the best's fastest" in said
    # One left out of the survivors (beyond drop_ratio, not pruned) counts as dropped too.
    left_out = _record(
        codec.CandidateTiming("a", (1.0, 1.0, 1.0)), codec.CandidateTiming("b", (1.4, 1.6, 1.7))
    )
    assert doubt.unstable(left_out) is not None
    written = doubt.with_settings(steady, doubt="contradicted: the trial said no")
    assert doubt.doubt(written) == "contradicted: the trial said no"
    assert doubt.rebenches(steady) == 0
    assert doubt.rebenches(doubt.with_settings(steady, rebench=2)) == 2


def test_a_rejection_is_doubted_when_its_trial_was_contended_or_contradicts_the_bench() -> None:
    record = _record(codec.CandidateTiming("a", (1.0,)), codec.CandidateTiming("b", (4.0,)))
    # a at 4x b's speed, at half the model's time: the model should run 1.6x faster.
    predicted = doubt.predicted_gain(record, 0.5, "a", "b")
    assert predicted == pytest.approx(1.6)
    assert doubt.predicted_gain(record, 0.5, "a", "nope") is None

    class Verdict:
        high = 1.02

    said = doubt.trial_doubt(Verdict(), None, predicted)  # type: ignore[arg-type]
    assert said is not None and said.startswith("contradicted: the bench predicted the model")
    assert doubt.trial_doubt(Verdict(), None, 1.01) is None  # too small a gain to contradict
    Verdict.high = 2.0
    assert doubt.trial_doubt(Verdict(), None, predicted) is None  # an interval that holds it
    Verdict.high = math.inf
    assert doubt.trial_doubt(Verdict(), None, predicted) is None
    busy = doubt.trial_doubt(None, 0.5, None)
    assert busy == "contended: the trial that rejected it waited 50% of its time for a CPU"


def test_only_a_candidate_too_slow_for_a_whole_budget_is_kept_out_of_a_later_bench() -> None:
    record = _record(
        codec.CandidateTiming("slow", (5.3,), error="too slow: one call took 5.3 s"),
        codec.CandidateTiming("late", (0.2,), error="too slow: one call took 0.2 s"),
        codec.CandidateTiming("ok", (0.1,)),
    )
    assert doubt.too_slow_for(record, 1.0) == ["slow"]
    assert doubt.too_slow_for(record, 10.0) == []
    assert doubt.too_slow_for(record, None) == []


# --- sessions --------------------------------------------------------------------------------


def test_a_noisy_first_bench_is_benched_again_by_a_quiet_second_session(
    cache: Cache, cache_at: Any
) -> None:
    results = {}
    for rebench, store in ((None, cache), (0, cache_at("old-rule.db"))):
        noise, clock = Noise(bench=True, busy=True), Clock()
        op = noisy_op("ttnoisy_F64", noise, clock)
        model = Model("noisy", lambda op=op: op(1))
        options = {} if rebench is None else {"rebench": rebench}
        first = session(model, store, noise, clock, **options)
        (outcome,) = first.keys
        # The bench saw fast at 20 ms against base's 10 and dropped it: nothing to try.
        assert (outcome.action, outcome.choice) == ("kept", "base")
        _, record = stored(store, op)
        waited = record.settings["waited"]
        assert isinstance(waited, float) and waited > doubt.CONTENDED
        noise.bench = noise.busy = False
        second = session(model, store, noise, clock, **options)
        results[rebench] = (second.keys[0], served(store, model, op), stored(store, op)[1])

    outcome, choice, record = results[None]
    assert outcome.action == "accepted" and choice == "fast"
    assert outcome.doubt.startswith("benched again: contended: its bench waited")
    assert record.settings["rebench"] == 1
    assert str(record.settings["rebenched_for"]).startswith("contended")
    # The old rule (rebench=0) reuses the noisy record: the win stays lost.
    outcome, choice, record = results[0]
    assert (outcome.action, outcome.bench_stopped, choice) == ("kept", "stored", "base")
    assert "rebench" not in record.settings


def test_a_key_is_benched_again_at_most_rebench_times(cache: Cache) -> None:
    noise, clock = Noise(bench=True, busy=True), Clock()
    op = noisy_op("ttnoisier_F64", noise, clock)
    model = Model("noisier", lambda: op(1))
    counts = []
    for _ in range(4):
        report = session(model, cache, noise, clock)
        counts.append(doubt.rebenches(stored(cache, op)[1]))
    assert counts == [0, 1, 2, 2]
    (last,) = report.keys
    assert (last.action, last.bench_stopped) == ("kept", "stored")
    assert last.doubt.startswith("reused, though contended") and "2 times" in last.doubt


def test_a_rejection_by_a_contended_trial_is_tried_again_later(cache: Cache) -> None:
    noise, clock = Noise(model=True, busy=True), Clock()
    op = noisy_op("ttcontended_F64", noise, clock)
    model = Model("contended", lambda: op(1))
    # The bench itself is quiet (its own meter), the trials are not: fast, 5x faster on the
    # bench, runs 2x slower inside the model, and the trial says no.
    quiet_bench = {"cpu_wait": lambda: 0.0}
    first = session(model, cache, noise, clock, bench_options=quiet_bench)
    (outcome,) = first.keys
    assert outcome.action == "rejected"
    assert "not final: contended: the trial that rejected it waited" in outcome.note
    entry, record = stored(cache, op)
    assert entry.status == "rejected" and cache.verdicts("contended") == {entry.id: "masked"}
    assert str(record.settings["doubt"]).startswith("contended: the trial")

    noise.model = noise.busy = False
    second = session(model, cache, noise, clock, bench_options=quiet_bench)
    (outcome,) = second.keys
    assert outcome.action == "accepted" and outcome.doubt.startswith("benched again: contended")
    assert served(cache, model, op) == "fast"
    assert cache.verdicts("contended") == {entry.id: "validated"}


def test_a_trial_that_contradicts_the_bench_is_not_final_either(cache: Cache) -> None:
    noise, clock = Noise(model=True), Clock()
    op = noisy_op("ttcontra_F64", noise, clock)
    model = Model("contra", lambda: op(1))
    first = session(model, cache, noise, clock)
    (outcome,) = first.keys
    # The bench says the model runs ~4x faster with fast; the trial measured it slower.
    assert outcome.action == "rejected" and "not final: contradicted" in outcome.note
    noise.model = False
    second = session(model, cache, noise, clock)
    assert second.keys[0].action == "accepted" and served(cache, model, op) == "fast"
    # Once decided on quiet evidence, nothing is doubted: a third session finds it known.
    third = session(model, cache, noise, clock)
    assert [k.action for k in third.keys] == ["known"]


def test_a_guard_that_lost_while_contended_leaves_its_masks_open(cache: Cache) -> None:
    noise, clock = Noise(), Clock()
    op = noisy_op("ttguard_F64", noise, clock)
    model = Model("guarded", lambda: op(1))

    def slow_down_before_the_guard(what: str, done: int, total: int) -> None:
        if done == total:
            noise.model = noise.busy = True

    first = session(model, cache, noise, clock, progress=slow_down_before_the_guard)
    assert first.keys[0].action == "accepted"
    assert first.guard is not None and not first.guard.accepted
    entry, record = stored(cache, op)
    assert entry.status == "rejected" and cache.verdicts("guarded") == {entry.id: "masked"}
    assert str(record.settings["doubt"]).startswith("contended: the final guard that masked it")

    noise.model = noise.busy = False
    second = session(model, cache, noise, clock)
    assert second.keys[0].action == "accepted"
    assert second.guard is not None and second.guard.accepted
    assert served(cache, model, op) == "fast"


def test_benching_again_in_place_does_not_run_a_passed_guard_again(cache: Cache) -> None:
    noise, clock = Noise(), Clock()
    winner = noisy_op("ttwinner_F64", noise, clock)
    in_bench = outside_the_model()
    flips = iter([0.002, 0.02] * 1000)

    def base(n: int) -> None:
        clock.advance(0.01)
        time.sleep(0.004)

    def shaky(n: int) -> None:
        # On the bench, every other call takes 20 ms: its median drops it, its fastest sample
        # says it belongs. Inside a model it is as slow as it looks (8 ms against 4).
        clock.advance(next(flips) if in_bench() else 0.0)
        time.sleep(0.008)

    unsure = tunecache.Tunable(
        "ttunsure_F64",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"base": base, "shaky": shaky},
        heuristic="base",
        register=False,
    )
    model = Model("both", lambda: (winner(1), unsure(1)))
    first = session(model, cache, noise, clock, bench_options={"max_samples": 4})
    actions = {k.key: k.action for k in first.keys}
    assert actions[winner.key(1).text] == "accepted" and first.guard is not None
    assert first.guard.accepted
    second = session(model, cache, noise, clock, bench_options={"max_samples": 4})
    redone = {k.key: k for k in second.keys}[unsure.key(1).text]
    assert redone.doubt.startswith("benched again: unstable: shaky was dropped")
    # It wrote the new record, in place; what the table serves is what the passed guard saw.
    assert second.guard_skipped and second.guard is None
