"""Fixtures of the exchange tests: a filled cache, its export, and an empty cache to import into;
and helpers that take a version 2 export apart into its items and put items back together."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tests.store_helpers import NAMES, RESNET, accepted, judge, timing
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.device import Device
from tunecache.exchange.stream import frame

#: a version 1 export of `fill`, written by tunecache before version 2 (never rewritten)
GOLDEN_V1 = Path(__file__).resolve().parents[1] / "golden" / "export-v1.cbor"


def fill(cache: Cache) -> None:
    """Entries of every kind: with and without records, verdicts of two models, statuses, and
    one key tuned against two candidate lists."""
    record = timing(3e-5, 2e-5, 1e-5)
    masked = ("bert", "masked", None, 2, 0)
    accepted(cache, "conv_F32_m64_k3", "winograd", record, 3.0, RESNET, masked)
    b = cache.put(
        "conv_F32_m128_k3",
        choice="im2col",
        candidates=NAMES,
        heuristic="direct",
        record=timing(3e-5, 1e-5),
    )
    cache.put("conv_F32_m128_k3", choice="direct", candidates=NAMES[:2], status="rejected")
    cache.put("matmul_F32_m8_n8", choice="im2col", candidates=NAMES)
    judge(cache, b, ("bert", "validated", 1.05, 3, 2))


def items(data: bytes) -> list[Any]:
    """The items of a version 2 export, each decoded (the header first, the end last)."""
    out = []
    at = 0
    while at < len(data):
        head = cbor2.loads(data[at:])  # the byte string of one item, and nothing past it
        size = len(head)
        width = len(frame(head))
        out.append(cbor2.loads(data[at + width : at + width + size]))
        at += width + size
    return out


def stream(parts: Iterable[Any]) -> bytes:
    """A version 2 export made of these items, each encoded and framed."""
    out = []
    for part in parts:
        payload = cbor2.dumps(part)
        out.append(frame(payload) + payload)
    return b"".join(out)


def without_time(data: bytes) -> list[Any]:
    """The items of an export, but the time it was made."""
    parts = items(data)
    parts[0].pop("exported_at")
    return parts


@pytest.fixture
def other(cache_at: Callable[..., Cache]) -> Cache:
    """A second, empty cache of the same device."""
    return cache_at("other.db")


@pytest.fixture
def filled(cache: Cache) -> Cache:
    """The `cache` fixture, filled (see `fill`)."""
    fill(cache)
    return cache


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The export of a filled cache, made once for the tests that only read it."""
    device = Device("test-cpu-9000", 4, None, "tunecache", "0.1.0")
    with Cache.open(device=device, path=tmp_path_factory.mktemp("exported") / "c.db") as c:
        fill(c)
        return exchange.export_cache(c)


@pytest.fixture
def golden_v1() -> bytes:
    """The bytes of the golden version 1 export (of `fill`, on the `device` fixture's device)."""
    return GOLDEN_V1.read_bytes()
