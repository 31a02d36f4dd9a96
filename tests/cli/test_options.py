"""Argument types and option rows: what a value may be, and how rows become arguments."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest

from tunecache.cli import EXIT_USAGE, STATUSES, main
from tunecache.cli.options import (
    TUNE,
    Option,
    add_options,
    count_arg,
    option,
    option_values,
    positive_int,
    repeatable,
    scenario_arg,
    time_arg,
)


def test_the_help_names_the_tuners_own_defaults() -> None:
    # The options default to None, so the tuner decides; their help texts say what it decides.
    from tunecache import tune
    from tunecache.cli.options import MEASURE

    rows = {row.dest: row for row in (*TUNE, *MEASURE)}
    defaults = {
        "share": tune.SHARE,
        "key_budget": tune.KEY_BUDGET,
        "keep": tune.KEEP,
        "measure_pairs": tune.MEASURE_PAIRS,
    }
    for dest, value in defaults.items():
        assert rows[dest].settings.get("default") is None, dest
        assert f"(default {value})" in rows[dest].settings["help"], dest


def test_statuses_match_the_store() -> None:
    from tunecache.store.models import ENTRY_STATUSES

    assert STATUSES == ENTRY_STATUSES


def test_a_time_is_an_age_back_from_now_or_a_date_in_utc() -> None:
    before = datetime.now(UTC)
    age = time_arg("2d")
    assert (
        before - timedelta(days=2, seconds=5)
        < age
        <= before - timedelta(days=2) + timedelta(seconds=5)
    )
    assert time_arg("2026-01-31") == datetime(2026, 1, 31, tzinfo=UTC)
    assert time_arg("2026-01-31T12:00+02:00") == datetime(2026, 1, 31, 10, tzinfo=UTC)
    with pytest.raises(argparse.ArgumentTypeError, match="neither an age"):
        time_arg("last tuesday")
    with pytest.raises(argparse.ArgumentTypeError, match="outside the calendar"):
        time_arg("99999999d")


def test_an_age_beyond_the_calendar_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["list", "--older-than", "99999999d"])
    assert stop.value.code == EXIT_USAGE
    assert "outside the calendar" in capsys.readouterr().err


def test_counts_and_limits() -> None:
    assert positive_int("0") == 0 and count_arg("3") == 3
    for bad, message in (("x", "not an integer"), ("-1", "is negative")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            positive_int(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="not at least 1"):
        count_arg("0")


def test_a_scenario_is_a_name_and_its_sizes() -> None:
    assert scenario_arg("s=1,64,256") == ("s", (1, 64, 256))
    for bad in ("s", "=1,2", "s=", "s=1,x"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=SIZE"):
            scenario_arg(bad)


def test_a_row_names_its_value_as_argparse_does() -> None:
    assert option("--key-budget").dest == "key_budget"
    assert option("-o", "--output").dest == "output"
    assert option("target").dest == "target"
    assert option("-q").dest == "q"
    assert option("--x", dest="why").dest == "why"


def test_rows_become_arguments_and_their_values_keyword_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser, TUNE)
    args = parser.parse_args(["--key-budget", "2", "--retune"])
    values = option_values(args, TUNE)
    assert list(values) == [row.dest for row in TUNE]
    assert values["key_budget"] == 2.0 and values["retune"] is True
    assert values["share"] is None  # not given: the tuner's own default holds


def test_each_parser_gets_its_own_list_for_a_repeatable_option() -> None:
    rows: tuple[Option, ...] = (repeatable("--model", "NAME", "a model"),)
    first, second = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_options(first, rows)
    add_options(second, rows)
    one, two = first.parse_args([]), second.parse_args([])
    one.model.append("changed")
    assert two.model == [] and rows[0].settings["default"] == []
