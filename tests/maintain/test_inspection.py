"""Inspecting one entry's evidence, verdicts and run (tunecache.maintain.inspection)."""

from __future__ import annotations

import contextlib

import pytest

from tests.maintain.conftest import Filled
from tests.store_helpers import NAMES, sql
from tunecache import maintain
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError, BadKeyError
from tunecache.keys import parse
from tunecache.store.reading import CacheReader


def test_inspect_shows_the_record_verdicts_and_run(filled: Filled) -> None:
    [item] = maintain.inspect(filled.cache, filled.mixed.id)
    assert item.entry.key == "conv_F32_m64_k3" and item.has_record and item.record_error is None
    by_name = {c.name: c for c in item.candidates}
    assert by_name["im2col"].chosen and by_name["direct"].heuristic
    assert by_name["im2col"].median_s == pytest.approx(1.1e-5)
    assert (by_name["direct"].min_s, by_name["direct"].max_s) == (2.9e-5, 3.2e-5)
    assert (by_name["direct"].samples, by_name["direct"].inner_loops) == (3, 10)
    assert by_name["winograd"].error == "RuntimeError: unsupported stride"
    assert item.settings == {"min_time": 0.01} and item.env == {"python": "3.11"}
    assert [(v.model, v.verdict) for v in item.verdicts] == [
        ("bert", "masked"),
        ("resnet", "validated"),
    ]
    assert item.run is not None and item.run.kind == "tune" and item.run.status == "finished"
    assert item.as_dict()["candidates"][1]["median_s"] == pytest.approx(1.1e-5)


def test_inspect_by_key_shows_every_candidate_set(filled: Filled) -> None:
    c = filled.cache
    c.put("conv_F32_m64_k3", choice="direct", candidates=NAMES[:2])
    found = maintain.inspect(c, "conv_F32_m64_k3")
    assert len(found) == 2
    bare = next(i for i in found if not i.has_record)
    assert [x.measured for x in bare.candidates] == [False, False]
    assert bare.run is None and bare.verdicts == ()


def test_inspect_of_nothing_and_of_nonsense(filled: Filled) -> None:
    with pytest.raises(maintain.NotFoundError, match="entry 999"):
        maintain.inspect(filled.cache, 999)
    with pytest.raises(maintain.NotFoundError, match="key gemm_F32_m1"):
        maintain.inspect(filled.cache, "gemm_F32_m1")
    with pytest.raises(BadKeyError):
        maintain.inspect(filled.cache, "gemm__F32")


def test_inspect_reports_an_unreadable_record_instead_of_failing(filled: Filled) -> None:
    sql(filled.cache.path, "UPDATE timing_records SET data = x'ff'")
    [item] = maintain.inspect(filled.cache, filled.mixed.id)
    assert item.has_record and item.record_error is not None
    assert not any(c.measured for c in item.candidates)


def test_inspect_by_a_key_value_and_only_on_this_device(filled: Filled, twin: Cache) -> None:
    [by_key] = maintain.inspect(filled.cache, parse("conv_F32_m64_k3"))
    [by_text] = maintain.inspect(filled.cache, "conv_F32_m64_k3")
    assert by_key == by_text and by_key.entry.id == filled.mixed.id
    theirs = twin.put("gemm_F32_m1", choice="direct", candidates=NAMES)
    with pytest.raises(maintain.NotFoundError, match=f"entry {theirs.id}"):
        maintain.inspect(filled.cache, theirs.id)
    with pytest.raises(BadArgumentError, match="its id or its key"):
        maintain.inspect(filled.cache, True)


def test_a_reader_of_the_file_inspects_what_the_cache_inspects(filled: Filled) -> None:
    c = filled.cache
    found = CacheReader.open(c.path, c.device.fingerprint)
    assert found is not None
    with contextlib.closing(found):
        assert maintain.inspect(found, filled.mixed.id) == maintain.inspect(c, filled.mixed.id)
        with pytest.raises(maintain.NotFoundError, match="entry 999"):
            maintain.inspect(found, 999)
