"""tunecache.tune.session: a session's writes, each decision its own commit, with the current
table following each at once."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from tests import tune_models as tm
from tests.tune.support import NORM, NORM_NAMES, Clock
from tunecache import bench
from tunecache.accept import Verdict
from tunecache.cache import Cache
from tunecache.tune.options import session_options
from tunecache.tune.profiling import Screening, profile
from tunecache.tune.session import Running, Session

WON = Verdict(True, 20.0, 15.0, 25.0, 0.1, 0.001, 24, 3, 3, (), (), "accepted")


def _session(cache: Cache, **options: Any) -> Session:
    session = Session(tm.SCORER, cache, session_options(**options), Running())
    session.identify([NORM.text])
    return session


def test_a_mask_is_written_and_the_current_table_follows_it_at_once(cache: Cache) -> None:
    entry = cache.put(NORM, choice="vectorized", candidates=NORM_NAMES, status="accepted")
    session = _session(cache)
    assert session.table.resolve(NORM, NORM_NAMES, "loop").choice == "vectorized"

    with cache.run("tune") as run_id:
        session.run_id = run_id
        session.record_verdict(entry.id, "masked", None)

    assert session.table.resolve(NORM, NORM_NAMES, "loop").source == "masked"
    assert session.masked == [entry.id] and session.wrote
    assert cache.verdicts("scorer", session.fingerprint) == {entry.id: "masked"}
    report = session.report()
    assert report.masked == (entry.id,) and report.kept == () and report.guard is None


def test_an_accepted_entry_is_written_with_its_verdict_in_one_commit_and_served(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _session(cache)
    (heavy,) = profile(session, Screening())
    functions = {name: partial(f, tm.X) for name, f in tm.loop.functions.items()}
    record = bench.bench(functions).record
    writes: list[tuple[str, ...]] = []
    put_many = cache.put_many

    def spied(method: str) -> Any:
        def spy(*args: Any, **kwargs: Any) -> Any:
            writes.append((method,))
            return getattr(Cache, method)(cache, *args, **kwargs)

        return spy

    def spied_put_many(entries: Any) -> Any:
        writes.extend(("put_many", e.status, *(v.verdict for v in e.verdicts)) for e in entries)
        return put_many(entries)

    for method in ("put", "validate", "set_status"):
        monkeypatch.setattr(cache, method, spied(method))
    monkeypatch.setattr(cache, "put_many", spied_put_many)
    with cache.run("tune") as run_id:
        session.run_id = run_id
        entry_id = session.accept_entry(heavy, "vectorized", record, WON, "loop")

    # One commit: the entry, accepted, with this model's validated verdict; nothing before it.
    assert writes == [("put_many", "accepted", "validated")]
    stored = cache.get(NORM, candidates=NORM_NAMES)
    assert stored is not None and stored.id == entry_id and stored.status == "accepted"
    assert stored.speedup is not None and stored.speedup > 1  # the bench's, from the record
    assert cache.verdicts("scorer", session.fingerprint) == {entry_id: "validated"}
    assert session.verdicts == {entry_id: "validated"} and session.wrote
    assert session.table.resolve(NORM, NORM_NAMES, "loop").entry_id == entry_id


def test_a_rejected_entry_lands_with_the_models_mask_and_is_masked_at_once(cache: Cache) -> None:
    session = _session(cache)
    (heavy,) = profile(session, Screening())
    functions = {name: partial(f, tm.X) for name, f in tm.loop.functions.items()}
    record = bench.bench(functions).record
    with cache.run("tune") as run_id:
        session.run_id = run_id
        entry_id = session.put_judged(heavy, "vectorized", record, "rejected", ("masked", None))
    stored = cache.get(NORM, candidates=NORM_NAMES)
    assert stored is not None and (stored.id, stored.status) == (entry_id, "rejected")
    assert cache.verdicts("scorer", session.fingerprint) == {entry_id: "masked"}
    assert session.masked == [entry_id]
    assert session.table.resolve(NORM, NORM_NAMES, "loop").source == "masked"


def test_the_budget_is_read_on_the_sessions_clock(cache: Cache) -> None:
    clock = Clock()
    session = Session(tm.SCORER, cache, session_options(budget=5.0), Running(clock=clock))
    clock.advance(4.9)
    assert not session.out_of_time() and not session.budget_spent
    clock.advance(0.1)
    assert session.out_of_time() and session.budget_spent
    assert session.report().seconds == 5.0
    unlimited = Session(tm.SCORER, cache, session_options(), Running(clock=clock))
    clock.spend()
    assert not unlimited.out_of_time()
