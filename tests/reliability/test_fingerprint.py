"""A decision is served only to the device and candidate list it was tuned for.

Each checked device field changed in turn, a candidate dropped, renamed or added, the order
changed, a file imported from another device: always a miss or a refusal, never a choice served
from the other identity, in 100% of the cases (the count is printed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.harness import DEVICE, NAMES
from tunecache import exchange, paths
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.errors import DeviceMismatchError
from tunecache.keys import Key, make_key

KEYS = [make_key("matmul_F32", m=m, k=k, n=64) for m in (64, 128, 256, 512, 1024) for k in (32, 96)]
# Shapes never tuned, near the tuned ones: a resolver could borrow for them (nearest).
NEAR = [make_key("matmul_F32", m=m, k=k, n=64) for m in (96, 192, 384, 768) for k in (48, 64)]
HEURISTIC = NAMES[3]

CHANGES: dict[str, dict[str, Any]] = {
    "cpu": {"cpu": "another-cpu-7000"},
    "threads": {"threads": 8},
    "client_version": {"client_version": "0.2.0"},
    "accelerator": {"accelerator": "nvidia-h200"},
    "client": {"client": "another-runtime"},
}


def _choice(i: int) -> str:
    return NAMES[i % 3]  # never the heuristic: a served decision always differs from it


def _tune(cache: Cache) -> None:
    for i, key in enumerate(KEYS):
        cache.put(key, choice=_choice(i), candidates=NAMES, heuristic=HEURISTIC, status="accepted")


@pytest.fixture(params=["managed location", "one shared file"])
def layout(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Path]:
    """Where both devices open their cache: each its own location under one root, or one file
    named explicitly (devices then share it, told apart by their rows)."""
    if request.param == "managed location":
        return {"root": tmp_path / "root"}
    return {"path": tmp_path / "shared.db"}


def _open(device: Device, where: dict[str, Path]) -> Cache:
    return Cache.open(device=device, root=where.get("root"), path=where.get("path"))


def _answers(device: Device, where: dict[str, Path], names: tuple[str, ...]) -> Iterator[Any]:
    """What `device` is served for every tuned and near key: (key, Cache.get, resolver answer)."""
    resolver = None
    try:
        from tunecache.resolve import Table

        resolver = Table.open(
            device=device,
            use="all",
            max_distance=4.0,
            root=where.get("root"),
            path=where.get("path"),
        )
    except ImportError:
        pass
    with _open(device, where) as cache:
        for key in KEYS + NEAR:
            got = cache.get(key, candidates=names)
            answer = None if resolver is None else resolver.resolve(key, names, names[-1])
            yield key, got, answer
    if resolver is not None:
        resolver.close()


def _served(results: list[tuple[Key, Any, Any]]) -> list[str]:
    """Every case where something other than a miss came back."""
    wrong = []
    for key, got, answer in results:
        if got is not None:
            wrong.append(f"Cache.get({key.text}) -> {got.choice}")
        if answer is not None and answer.source != "heuristic":
            wrong.append(f"resolve({key.text}) -> {answer.choice} ({answer.source})")
    return wrong


@pytest.mark.parametrize("field", CHANGES)
def test_another_device_never_sees_this_devices_decisions(
    field: str, layout: dict[str, Path]
) -> None:
    with _open(DEVICE, layout) as cache:
        _tune(cache)
    other = DEVICE.replace(**CHANGES[field])
    assert other.differences(DEVICE) == [field]
    results = list(_answers(other, layout, NAMES))
    wrong = _served(results)
    print(f"{field} changed ({', '.join(layout)}): {len(results)} keys asked, {len(wrong)} served")
    assert wrong == []
    # The tuned device itself still gets every decision: the misses above are not a broken cache.
    mine = list(_answers(DEVICE, layout, NAMES))
    assert [got.choice for _, got, _ in mine[: len(KEYS)]] == [_choice(i) for i in range(len(KEYS))]
    if mine[0][2] is not None:
        assert {a.source for _, _, a in mine[: len(KEYS)]} == {"exact"}


VARIANTS = {
    "chosen candidate dropped": tuple(n for n in NAMES if n != NAMES[0]),
    "other candidate dropped": tuple(n for n in NAMES if n != NAMES[2]),
    "chosen candidate renamed": tuple(n + "_v2" if n == NAMES[1] else n for n in NAMES),
    "candidate added": (*NAMES, "mmm_16x16"),
    "order changed": tuple(reversed(NAMES)),
}


@pytest.mark.parametrize("names", VARIANTS.values(), ids=VARIANTS.keys())
def test_a_changed_candidate_list_never_gets_a_decision_tuned_for_the_old_one(
    names: tuple[str, ...], tmp_path: Path
) -> None:
    where = {"root": tmp_path / "root"}
    with _open(DEVICE, where) as cache:
        _tune(cache)
    results = list(_answers(DEVICE, where, names))
    wrong = _served(results)
    print(f"candidate list {names}: {len(results)} keys asked, {len(wrong)} served")
    assert wrong == []
    for _, _, answer in results:
        assert answer is None or answer.choice in names


def test_an_export_of_another_device_is_refused_or_arrives_unvalidated(tmp_path: Path) -> None:
    root = tmp_path / "root"
    with Cache.open(device=DEVICE, root=root) as cache:
        _tune(cache)
        data = exchange.export_cache(cache)
    cases = 0
    for field, change in CHANGES.items():
        other = DEVICE.replace(**change)
        db = paths.database_path(other, root)
        with Cache.open(device=other, root=root) as cache:
            before = cache.count()
            with pytest.raises(DeviceMismatchError, match=field):
                exchange.import_cache(cache, data)
            assert cache.count() == before  # refused: nothing written
            # Allowed explicitly, the entries arrive unvalidated: a decision measured on one
            # device is only a candidate on another until its own models confirm it.
            exchange.import_cache(cache, data, allow_other_device=True)
            assert {e.status for e in cache.entries()} == {"unvalidated"}
        from tunecache.resolve import Table

        table = Table.open(device=other, root=root)  # the default: validated or accepted only
        served = [table.resolve(k, NAMES, HEURISTIC) for k in KEYS]
        table.close()
        assert {a.source for a in served} == {"heuristic"}, (field, db)
        cases += len(served) + 1
    print(f"imports from another device: {cases} cases, 0 wrong choices served")
