"""Listing a device's decisions and the models seen (tunecache.maintain.listing)."""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

import pytest

from tests.maintain.conftest import OLD, Filled, keys_of
from tests.store_helpers import NAMES, RESNET, judge
from tunecache import maintain
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError
from tunecache.maintain.listing import checked
from tunecache.maintain.reports import jsonable
from tunecache.store.reading import CacheReader


def test_list_shows_every_entry_with_its_verdicts(filled: Filled) -> None:
    found = maintain.list_entries(filled.cache)
    assert len(found) == 4
    mixed = next(e for e in found if e.id == filled.mixed.id)
    assert (mixed.choice, mixed.heuristic, mixed.speedup) == ("im2col", "direct", 2.5)
    assert mixed.validated_by == ("resnet",) and mixed.masked_by == ("bert",)
    assert mixed.updated_at == OLD
    assert found[-1].id == filled.mixed.id  # most recently updated first


def test_list_filters(filled: Filled) -> None:
    c = filled.cache
    assert keys_of(maintain.list_entries(c, op="matmul")) == ["matmul_F32_m8_n8"]
    assert len(maintain.list_entries(c, op="conv")) == 3
    # "_" is a LIKE wildcard; an op that is a prefix of another matches nothing.
    assert maintain.list_entries(c, op="con") == []
    assert maintain.list_entries(c, signature="conv") == []
    assert len(maintain.list_entries(c, signature="conv_F32")) == 3
    assert keys_of(maintain.list_entries(c, model="gpt")) == ["conv_F32_m128_k3"]
    assert len(maintain.list_entries(c, model="bert")) == 2
    assert keys_of(maintain.list_entries(c, status="accepted")) == ["conv_F32_m64_k3"]
    assert keys_of(maintain.list_entries(c, older_than=OLD + timedelta(days=1))) == [
        "conv_F32_m64_k3"
    ]
    assert len(maintain.list_entries(c, newer_than=OLD + timedelta(days=1))) == 3
    assert len(maintain.list_entries(c, limit=2)) == 2


def test_list_refuses_bad_filters(filled: Filled) -> None:
    with pytest.raises(BadArgumentError, match="status"):
        maintain.list_entries(filled.cache, status="golden")
    with pytest.raises(BadArgumentError, match="timezone"):
        maintain.list_entries(filled.cache, older_than=datetime(2020, 1, 1))
    with pytest.raises(BadArgumentError, match="timezone"):
        maintain.list_entries(filled.cache, newer_than=datetime(2020, 1, 1))
    for limit in (-1, True):
        with pytest.raises(BadArgumentError, match="limit"):
            maintain.list_entries(filled.cache, limit=limit)


def test_list_sees_only_this_device(filled: Filled, twin: Cache) -> None:
    twin.put("gemm_F32_m1", choice="direct", candidates=NAMES)
    assert keys_of(maintain.list_entries(twin)) == ["gemm_F32_m1"]
    assert len(maintain.list_entries(filled.cache)) == 4


def test_a_device_with_nothing_written_lists_nothing(cache: Cache) -> None:
    assert maintain.list_entries(cache) == []
    assert maintain.models(cache) == []


def test_the_json_form_of_a_listed_entry(filled: Filled) -> None:
    [mixed] = maintain.list_entries(filled.cache, status="accepted")
    shown = mixed.as_dict()
    assert shown["updated_at"] == OLD.isoformat()
    assert (shown["validated_by"], shown["masked_by"]) == (["resnet"], ["bert"])
    assert (shown["key"], shown["signature"], shown["dims"]) == (
        "conv_F32_m64_k3",
        "conv_F32",
        "m=64 k=3",
    )


# --- models ------------------------------------------------------------------------------------


def test_models_count_verdicts_on_this_device(filled: Filled) -> None:
    summary = {m.name: m for m in maintain.models(filled.cache)}
    assert (summary["bert"].validated, summary["bert"].masked) == (0, 2)
    assert (summary["resnet"].validated, summary["resnet"].masked) == (1, 0)
    assert (summary["gpt"].validated, summary["gpt"].masked) == (0, 1)
    assert summary["gpt"].last_verdict is not None


def test_a_model_that_judged_only_another_devices_entries_counts_nothing_here(
    filled: Filled, twin: Cache
) -> None:
    judge(twin, twin.put("gemm_F32_m1", choice="direct", candidates=NAMES), ("vit", *RESNET[1:]))
    summary = {m.name: m for m in maintain.models(filled.cache)}
    vit = summary["vit"]  # the model is of the file; its verdicts are the twin's
    assert (vit.fingerprint, vit.validated, vit.masked, vit.last_verdict) == ("v1", 0, 0, None)
    assert {m.name: m.validated for m in maintain.models(twin)}["vit"] == 1


# --- the same answers from a reader of the file --------------------------------------------------


def test_a_reader_of_the_file_lists_what_the_cache_lists(filled: Filled) -> None:
    c = filled.cache
    found = CacheReader.open(c.path, c.device.fingerprint)
    assert found is not None
    with contextlib.closing(found):
        for filters in ({}, {"op": "conv"}, {"model": "bert"}, {"limit": 2}):
            assert maintain.list_entries(found, **filters) == maintain.list_entries(c, **filters)
        assert maintain.models(found) == maintain.models(c)
        streamed = maintain.iter_entries(found, {"status": "accepted"})
        assert list(streamed) == maintain.list_entries(c, status="accepted")
        with pytest.raises(BadArgumentError, match="status"):
            checked({"status": "golden"})


def test_an_entry_as_json_is_every_field_as_reports_write_them(filled: Filled) -> None:
    for entry in maintain.list_entries(filled.cache):
        assert entry.as_dict() == jsonable(entry) and list(entry.as_dict()) == [
            *type(entry).__match_args__
        ]


def test_an_unfinished_listing_closed_late_is_no_error(filled: Filled) -> None:
    c = filled.cache
    found = CacheReader.open(c.path, c.device.fingerprint)
    assert found is not None
    listing = maintain.iter_entries(found)
    assert next(listing).id
    found.close()
    listing.close()  # after its reader: nothing left to end, nothing raised
