"""Explanations: each step in words, the memo and counters untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.resolve.conftest import CANDS, mm, put, table
from tunecache.cache import Cache, Entry
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.resolve import Answer, Table


def test_explain_says_why(judged: dict[str, Entry], store: Cache, db: Path, device: Device) -> None:
    put(store, mm(1024), "blas")
    gpt = table(db, device, model="gpt")
    masked = gpt.explain(mm(256), CANDS, "naive")
    assert masked.answer == Answer("naive", "masked", judged["shared"].id, 0.0)
    assert any("masked for 'gpt'" in step for step in masked.steps)
    near = table(db, device).explain("matmul_F32_m800_k256_n256")  # candidates from the cache
    assert near.answer is not None and near.answer.source == "nearest"
    assert any("m=1024 k=256 n=256: distance" in step for step in near.steps)
    assert near.as_dict()["borrowed_from"] == "matmul_F32_m1024_k256_n256"
    far = table(db, device).explain(mm(100_000), CANDS, "blas")
    assert far.answer == Answer("blas", "heuristic")
    assert any("beyond the cap" in step for step in far.steps)
    assert gpt.counters() == dict.fromkeys(("exact", "nearest", "masked", "heuristic"), 0)


def test_explain_says_where_nothing_is_stored(tmp_path: Path, device: Device) -> None:
    missing = table(tmp_path / "none.db", device).explain(mm(256))
    assert missing.answer is None
    assert any("no cache at" in step for step in missing.steps)
    assert missing.steps[-1] == "no candidate list is stored for matmul_F32"
    in_memory = Table.empty().explain(mm(256), CANDS)
    assert in_memory.steps[1] == "an in-memory table"
    assert in_memory.answer == Answer("", "heuristic")  # no heuristic given: the caller's pick
    with pytest.raises(BadArgumentError, match="heuristic"):
        Table.empty().explain(mm(256), CANDS, "cublas")
