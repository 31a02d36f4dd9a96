"""Fixtures of the exchange tests: a filled cache, its export, and an empty cache to import into."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.store_helpers import NAMES, RESNET, accepted, judge, timing
from tunecache import exchange
from tunecache.cache import Cache
from tunecache.device import Device


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
