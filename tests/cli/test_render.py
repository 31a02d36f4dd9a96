"""How the command prints: cells of numbers and times, tables, JSON, consoles and progress."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tunecache.cli import render


def test_cells_of_numbers_times_and_names() -> None:
    assert [render.seconds(v) for v in (None, 2.5, 0.0123, 11e-6, 4e-9)] == [
        "-", "2.5 s", "12.3 ms", "11 µs", "4 ns",
    ]  # fmt: skip
    assert render.num(None) == "-" and render.num(2.5, "x") == "2.5x"
    assert render.num(1234.5) == "1.23e+03"
    east = timezone(timedelta(hours=2))
    assert render.when(datetime(2026, 1, 31, 12, 0, 1, tzinfo=east)) == "2026-01-31 10:00:01"
    assert render.when(None) == "-"
    assert [render.cell(v) for v in (None, b"abc", 3)] == ["NULL", "<3 bytes>", "3"]
    assert render.names([]) == "-" and render.names(["a", "b"]) == "a, b"


def test_a_speedup_reads_as_the_change_in_time() -> None:
    assert render.change(2.0) == "-50.0%" and render.change(0.5) == "+100.0%"
    assert render.change(None) == "-" and render.change(0.0) == "-"
    # The interval of the time: a faster time is the higher speedup, so high comes first.
    assert render.paired(7, 2.0, 1.6, 2.5, 0.00781) == ["-50.0%", "[-60.0%, -37.5%]", "0.00781"]
    assert render.paired(0, 2.0, 1.6, 2.5, 0.5) == ["-", "-", "-"]


def test_a_table_takes_its_rows_and_prints_wide_off_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    drawn = render.table("title", "a", "b", rows=[["1", "x" * 150], ["2", "y"]])
    assert drawn.row_count == 2 and [c.header for c in drawn.columns] == ["a", "b"]
    console = render.console()
    assert console.width == 200 and console.color_system is None
    console.print(drawn)
    out = capsys.readouterr().out
    assert "x" * 150 in out and "\x1b[" not in out  # one line, no colour: greppable


def test_json_is_indented_and_sorted(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_json({"b": 1, "a": [1, 2]})
    out = capsys.readouterr().out
    assert out == json.dumps({"a": [1, 2], "b": 1}, indent=2) + "\n"


class _Result:
    def as_dict(self) -> dict[str, Any]:
        return {"answer": 42}


def test_emit_prints_json_or_the_human_form(capsys: pytest.CaptureFixture[str]) -> None:
    shown: list[Any] = []
    result = _Result()
    render.emit(argparse.Namespace(json=True), result, shown.append)
    assert json.loads(capsys.readouterr().out) == {"answer": 42} and shown == []
    render.emit(argparse.Namespace(json=False), result, shown.append)
    assert capsys.readouterr().out == "" and shown == [result]


def test_no_progress_bar_for_json_or_off_a_terminal() -> None:
    # Under pytest stderr is not a terminal; --json never draws one either.
    for as_json in (True, False):
        with render.progress(argparse.Namespace(json=as_json)) as progress:
            assert progress is None


def test_when_reads_aware_times_only_in_utc() -> None:
    assert render.when(datetime(2026, 1, 31, tzinfo=UTC)) == "2026-01-31 00:00:00"
