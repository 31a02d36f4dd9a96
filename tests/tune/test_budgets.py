"""Budgets that bound: a candidate one call of which outlasts what is left of the key's budget
is recorded as too slow, with its sample, and not called again; a key whose bench the budget
ended is reported as "budget cut", never "kept", by the library, its JSON and the command line.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

import tunecache
from tests.tune.support import Clock, outside_the_model
from tunecache import cli
from tunecache.cache import Cache
from tunecache.evidence import TOO_SLOW, refusal
from tunecache.tune import ACTIONS, tune
from tunecache.tune.model import Model


def slow_first_op(clock: Clock) -> tuple[tunecache.Tunable[..., None], dict[str, int]]:
    """`slowpoke` (declared first) takes 5 s a call on the bench's clock, `base` (the
    heuristic) 10 ms and `fast` 2 ms; and how often each was called outside a model."""
    in_bench = outside_the_model()
    calls = {"slowpoke": 0, "base": 0, "fast": 0}

    def make(name: str, seconds: float) -> object:
        def candidate(n: int) -> None:
            if in_bench():
                calls[name] += 1
            clock.advance(seconds)
            time.sleep(min(seconds, 0.01))

        return candidate

    op = tunecache.Tunable(
        "ttslowpoke_F64",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={
            "slowpoke": make("slowpoke", 5.0),
            "base": make("base", 0.01),
            "fast": make("fast", 0.002),
        },
        heuristic="base",
        register=False,
    )
    return op, calls


def test_a_call_longer_than_the_key_budget_is_too_slow_and_the_key_is_budget_cut(
    cache: Cache,
) -> None:
    clock = Clock()
    op, calls = slow_first_op(clock)
    model = Model("slow", lambda: op(1))
    options = {"key_budget": 1.0, "bench_options": {"clock": clock}}

    first = tune(model, cache=cache, **options)

    (outcome,) = first.keys
    # base (the heuristic, whose output is the reference) is probed first; slowpoke's probe
    # took 5 s of a 1 s budget: the bench ended there, before fast was called at all.
    assert outcome.action == "budget cut" and outcome.action in ACTIONS
    assert outcome.too_slow == ("slowpoke",) and outcome.choice == "base"
    assert "may be unmeasured" in outcome.note
    entry = cache.get(op.key(1), candidates=op.candidates)
    assert entry is not None and (entry.status, entry.choice) == ("unvalidated", "base")
    record = cache.record(entry)
    assert record is not None and record.settings["complete"] is False
    slowpoke = record.candidate("slowpoke")
    assert refusal(slowpoke.error) == TOO_SLOW and slowpoke.samples == (5.0,)
    assert str(slowpoke.error).startswith("too slow: one call took 5 s with 0.99 s of the key")
    assert (calls["slowpoke"], calls["fast"]) == (1, 0)  # its probe, its output checked

    # The next session refuses slowpoke (one call of it outlasts the whole budget), measures
    # the others in full, and accepts fast.
    second = tune(model, cache=cache, **options)
    (outcome,) = second.keys
    assert outcome.action == "accepted" and outcome.choice == "fast"
    assert outcome.doubt.startswith("benched again: budget cut")
    assert calls["slowpoke"] == 1  # not called again
    record = cache.record(outcome.entry_id)  # type: ignore[arg-type]
    assert record is not None and record.settings["complete"] is True
    assert record.candidate("slowpoke") == slowpoke


def test_a_budget_cut_bench_is_never_reported_as_kept(cache: Cache) -> None:
    clock = Clock()
    in_bench = outside_the_model()

    def base(n: int) -> None:
        clock.advance(0.4)
        time.sleep(0.002)

    def rival(n: int) -> None:
        clock.advance(0.45 if in_bench() else 0.0)
        time.sleep(0.002)

    op = tunecache.Tunable(
        "ttcut_F64",
        dims=("n",),
        shape=lambda n: (n,),
        candidates={"base": base, "rival": rival},
        heuristic="base",
        register=False,
    )
    # Two probes (0.85 of a 1 s budget): the first sample does not fit, and nothing beat base.
    report = tune(Model("cut", lambda: op(1)), cache=cache, key_budget=1.0,
                  bench_options={"clock": clock})  # fmt: skip
    (outcome,) = report.keys
    assert outcome.action == "budget cut" and outcome.bench_stopped == "budget"
    assert outcome.too_slow == () and "may be unmeasured" in outcome.note
    assert report.as_dict()["keys"][0]["action"] == "budget cut"


SLOW_MODEL = """
import time
import tunecache
from tunecache.tune import Model

@tunecache.tunable("ttclislow_F64", dims=("n",), shape=lambda n: (n,))
def slowpoke(n):
    time.sleep(0.3)

@slowpoke.candidate("base")
def _(n):
    time.sleep(0.002)

MODEL = Model("clislow", lambda: slowpoke(1))
"""


@pytest.mark.parametrize("as_json", [True, False])
def test_the_command_line_says_budget_cut(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, as_json: bool
) -> None:
    models = tmp_path / "slow_models.py"
    models.write_text(SLOW_MODEL)
    db = str(tmp_path / "cut.db")
    # slowpoke is the heuristic here: the model runs it, and one call outlasts the budget.
    argv = ["tune", f"{models}:MODEL", "--db", db, "--key-budget", "0.1", "--share", "0"]
    code = cli.main([*argv, "--json"] if as_json else argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    if as_json:
        (report,) = json.loads(out)
        (key,) = report["keys"]
        assert key["action"] == "budget cut" and key["too_slow"] == ["slowpoke"]
    else:
        assert "budget cut" in out and " kept " not in out
        assert "1 budget cut" in out
        assert "one call outlasted the key's budget: slowpoke" in out
    rows = sqlite3.connect(db).execute("select status from decisions").fetchall()
    assert rows == [("unvalidated",)]
