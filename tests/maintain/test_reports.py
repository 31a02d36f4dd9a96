"""What every maintenance report shares (tunecache.maintain.reports): its JSON form, and times
that must carry a zone."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from tunecache.errors import BadArgumentError
from tunecache.frozen import Frozen, fill
from tunecache.maintain.reports import Report, aware, jsonable


@dataclass(frozen=True, slots=True)
class _Inner:
    when: datetime
    raw: bytes


@dataclass(frozen=True, slots=True)
class _Shown(Report):
    names: tuple[str, ...]
    inner: _Inner
    by: dict[int, list[str]]
    nothing: None = None


def test_a_report_is_json_data_field_by_field() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    shown = _Shown(("a", "b"), _Inner(when, b"\x00\xff"), {1: ["x"]})
    assert shown.as_dict() == {
        "names": ["a", "b"],
        "inner": {"when": "2026-01-02T03:04:05+00:00", "raw": "00ff"},
        "by": {"1": ["x"]},
        "nothing": None,
    }
    assert jsonable([when, (1, 2.5, "s")]) == ["2026-01-02T03:04:05+00:00", [1, 2.5, "s"]]
    assert jsonable(_Inner) is _Inner  # a class is a value, not a report


class _Plain(Frozen, Report):
    __match_args__ = ("when", "inner")
    __slots__ = __match_args__
    when: datetime
    inner: _Inner

    def __init__(self, when: datetime, inner: _Inner) -> None:
        fill(self, when, inner)


def test_a_frozen_report_is_json_data_as_a_dataclass_would_be() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    shown = _Plain(when, _Inner(when, b"\x01"))
    assert shown.as_dict() == {
        "when": "2026-01-02T00:00:00+00:00",
        "inner": {"when": "2026-01-02T00:00:00+00:00", "raw": "01"},
    }


def test_a_time_without_a_zone_is_refused() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    assert aware(when, "older_than") is when
    assert aware(None, "older_than") is None
    with pytest.raises(BadArgumentError, match=r"^newer_than must be a timezone-aware datetime$"):
        aware(datetime(2026, 1, 2), "newer_than")
