"""tunecache.tune.runs: a whole-model run with a table, its failures tagged by side, and what a
table served to a profiled run."""

from __future__ import annotations

import pytest

import tunecache
from tests import tune_models as tm
from tests.tune.support import NORM, NORM_NAMES
from tunecache import dispatch
from tunecache.resolve import Table
from tunecache.tune.runs import RunFailed, run_with, served, served_entries, tagged


def test_a_run_makes_its_table_current_for_every_case() -> None:
    table = Table.empty()
    seen = []
    model = tunecache.tune.Model(
        "m", lambda s: seen.append((s, tunecache.current() is table)), scenarios={"s": (1, 2)}
    )

    run_with(model, table, model.cases())()

    assert seen == [(1, True), (2, True)]
    assert tunecache.current() is not table


def test_a_failing_run_is_tagged_with_its_side_in_one_line() -> None:
    def broken() -> None:
        raise ValueError("no good\nsecond line")

    with pytest.raises(RunFailed) as failed:
        tagged(broken, "B")()

    assert failed.value.side == "B" and isinstance(failed.value.error, ValueError)
    assert failed.value.text() == "ValueError: no good"
    with pytest.raises(KeyboardInterrupt):  # not the model's error: never wrapped
        tagged(lambda: (_ for _ in ()).throw(KeyboardInterrupt), "A")()


def test_served_names_the_entry_and_choice_behind_each_answer() -> None:
    table = Table.empty().derive(add=[(NORM, NORM_NAMES, "vectorized")])
    with dispatch.profile(capture=True) as profiled:
        run_with(tm.SCORER, table, [{}])()

    # An in-memory decision is no entry: nothing is served from the store.
    assert served(table, profiled) == {}
    assert served_entries({"a": "3:vectorized", "b": "5:loop", "c": "3:vectorized"}) == {3, 5}
