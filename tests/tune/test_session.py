"""tunecache.tune.session: a session's writes, each its own commit, with the current table
following each at once."""

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


def test_an_accepted_entry_is_written_unvalidated_then_vouched_and_served(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _session(cache)
    (heavy,) = profile(session, Screening())
    functions = {name: partial(f, tm.X) for name, f in tm.loop.functions.items()}
    record = bench.bench(functions).record
    writes: list[tuple[str, str | None]] = []
    put, validate = cache.put, cache.validate

    def spied_put(*args: Any, **kwargs: Any) -> Any:
        writes.append(("put", kwargs["status"]))
        return put(*args, **kwargs)

    def spied_validate(*args: Any, **kwargs: Any) -> None:
        writes.append((kwargs["verdict"], kwargs["status"]))
        validate(*args, **kwargs)

    monkeypatch.setattr(cache, "put", spied_put)
    monkeypatch.setattr(cache, "validate", spied_validate)
    with cache.run("tune") as run_id:
        session.run_id = run_id
        entry = session.accept_entry(heavy, "vectorized", record, WON, "loop")

    # Two commits, each safe to be killed after: served to no model, then vouched and accepted.
    assert writes == [("put", "unvalidated"), ("validated", "accepted")]
    stored = cache.get(NORM, candidates=NORM_NAMES)
    assert stored is not None and stored.id == entry.id and stored.status == "accepted"
    assert stored.speedup is not None and stored.speedup > 1  # the bench's, from the record
    assert session.table.resolve(NORM, NORM_NAMES, "loop").entry_id == entry.id


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
