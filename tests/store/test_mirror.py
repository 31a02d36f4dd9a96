"""tunecache.store.mirror and tunecache.tune.mirror: a device's rows copied, with their ids,
into a SQLite file its tables read (a fleet store's are, in tests/fleet/test_claims.py)."""

from __future__ import annotations

from typing import Any

from tunecache.cache import Cache, NewEntry, NewVerdict
from tunecache.device import Device
from tunecache.resolve import Table
from tunecache.tune.mirror import Mirror

NAMES = ("direct", "fft", "im2col")


def test_a_mirror_holds_this_devices_entries_and_verdicts_with_their_ids(
    cache: Cache, device: Device, cache_at: Any
) -> None:
    twin = cache_at(cache.path, device=device.with_threads(8))
    twin.put("conv_F32_m1_k3", choice="direct", candidates=NAMES, status="accepted")
    verdict = NewVerdict("cnn", "fp", "validated", gain=1.5, rounds=3)
    ids = cache.put_many(
        [
            NewEntry(f"conv_F32_m{m}_k3", "fft", NAMES, status="accepted", verdicts=(verdict,))
            for m in (2, 3)
        ]
    )
    mirror = Mirror(cache)
    try:
        assert mirror.update() == 2
        with Cache.open(device=device, path=mirror.path) as copy:
            assert sorted(e.id for e in copy.entries()) == sorted(ids)
            assert copy.verdicts("cnn", "fp") == dict.fromkeys(ids, "validated")
        table = Table.open(path=mirror.path, device=device, model="cnn", fingerprint="fp")
        answer = table.resolve(cache.get("conv_F32_m2_k3").key, NAMES, "direct")  # type: ignore[union-attr]
        assert (answer.choice, answer.entry_id) == ("fft", ids[0])
        table.close()
        cache.set_status(ids[0], "rejected")
        assert mirror.update() == 2  # made again whole: what the store holds now
        with Cache.open(device=device, path=mirror.path) as copy:
            assert copy.get("conv_F32_m2_k3").status == "rejected"  # type: ignore[union-attr]
    finally:
        mirror.close()
    assert not mirror.folder.exists()
