"""How the command prints: cells of numbers and times, tables, JSON, consoles and progress."""

from __future__ import annotations

import argparse
import io
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


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal, as a console's own check sees it."""

    def isatty(self) -> bool:
        return True


def test_a_rows_table_is_aligned_by_its_first_rows_and_loses_nothing_to_a_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(render, "SAMPLE", 2)
    out = io.StringIO()
    rows = [["1", "short", "x"], ["22", "longer one", "y"], ["3", "the longest cell of all", "z"]]
    assert render.rows_table(("id", "name", "end"), iter(rows), title="t:", out=out) == 3
    assert out.getvalue().splitlines() == [
        "t:",
        "id  name        end",
        "1   short       x",
        "22  longer one  y",
        "3   the longest cell of all  z",  # past the sample: whole, the rest moved right
    ]
    empty = io.StringIO()
    assert render.rows_table(("a", "b"), [], out=empty) == 0
    assert empty.getvalue() == "a  b\n"
    # A cell with a format's own characters is text like any other; a row of another size is
    # a caller's mistake, refused, whether it comes among the first rows or after them.
    odd = io.StringIO()
    assert render.rows_table(("a", "b"), [("%s", "{0}"), ("100%", "%d")], out=odd) == 2
    assert odd.getvalue().splitlines() == ["a     b", "%s    {0}", "100%  %d"]
    for late in (0, 3):
        with pytest.raises(ValueError):
            render.rows_table(("a", "b"), [("x", "y")] * late + [("z",)], out=io.StringIO())


def test_a_rows_table_on_a_terminal_narrows_the_columns_it_may_and_cuts_their_cells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "24")
    out = _Terminal()
    rows = [["1", "a very long key indeed", "ok"], ["2", "short", "a long status"]]
    render.rows_table(("id", "key", "status"), rows, narrow=((1, 8),), out=out)
    lines = out.getvalue().splitlines()
    assert lines == [
        "id  key       status",
        "1   a very …  ok",
        "2   short     a long status",
    ]
    # Narrowed no further than asked: the rest is the terminal's to wrap.
    monkeypatch.setenv("COLUMNS", "10")
    out = _Terminal()
    render.rows_table(("id", "key"), [r[:2] for r in rows], narrow=((1, 8),), out=out)
    assert out.getvalue().splitlines()[1] == "1   a very …"


def test_json_streamed_is_the_object_print_json_prints(capsys: pytest.CaptureFixture[str]) -> None:
    items = ({"n": i, "tags": ["a", "b"]} for i in range(600))
    assert render.json_stream({"zeta": 1, "count": 600, "alpha": {"b": 2}}, "items", items) == 600
    out = capsys.readouterr().out
    assert json.loads(out) == {
        "alpha": {"b": 2},
        "count": 600,
        "items": [{"n": i, "tags": ["a", "b"]} for i in range(600)],
        "zeta": 1,
    }
    lines = out.splitlines()
    assert lines[:4] == ["{", '  "alpha": {"b": 2},', '  "count": 600,', '  "items": [']
    assert lines[4] == '    {"n": 0, "tags": ["a", "b"]},'  # one item a line
    assert lines[-3:] == ["  ],", '  "zeta": 1', "}"]
    render.json_stream({"count": 0}, "items", [])
    assert json.loads(capsys.readouterr().out) == {"count": 0, "items": []}
