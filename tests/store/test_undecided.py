"""The conditional write of op-level tuning (tunecache.store.bulk.write_undecided), on both
backends: an entry is written only where no model decided its key and list yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunecache.cache import Cache, NewEntry, NewVerdict
from tunecache.device import Device
from tunecache.store.bulk import write_undecided
from tunecache.store.models import utcnow
from tunecache.writes import entry_write

NAMES = ("a", "b")


def _undecided(cache: Cache, key: str, choice: str) -> int | None:
    now = utcnow()
    write = entry_write(NewEntry(key, choice, NAMES, heuristic="a"), now)
    with cache.transaction(write=True) as tx:
        written = write_undecided(tx.conn, tx.device_row(), write, now=now)
    return None if written is None else written.id


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_only_an_undecided_key_is_written(
    backend: str, tmp_path: Path, device: Device, request: pytest.FixtureRequest
) -> None:
    if backend == "postgresql":
        cache = Cache.open(url=request.getfixturevalue("pg").url, device=device)
    else:
        cache = Cache.open(path=tmp_path / "c.db", device=device)
    try:
        assert _undecided(cache, "op_n1", "b") is not None  # nothing there: written
        assert _undecided(cache, "op_n1", "a") is not None  # unvalidated, no verdict: rewritten
        cache.put("op_n2", choice="b", candidates=NAMES, heuristic="a", status="accepted")
        assert _undecided(cache, "op_n2", "a") is None
        verdict = NewVerdict("m", "f" * 16, "masked")
        cache.put_many([NewEntry("op_n3", "b", NAMES, heuristic="a", verdicts=(verdict,))])
        assert _undecided(cache, "op_n3", "a") is None
        chosen = {k: cache.get(k, candidates=NAMES) for k in ("op_n1", "op_n2", "op_n3")}
        assert {k: (e.choice, e.status) for k, e in chosen.items() if e is not None} == {
            "op_n1": ("a", "unvalidated"),
            "op_n2": ("b", "accepted"),
            "op_n3": ("b", "unvalidated"),
        }
    finally:
        cache.close()
