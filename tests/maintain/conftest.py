"""Fixtures of the maintenance tests: a cache with one entry of each kind that list, prune and
doctor tell apart."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import pytest

from tests.store_helpers import NAMES, RESNET, accepted, backdate, conv_record, judge
from tunecache import maintain
from tunecache.cache import Cache

#: when the oldest entry of a filled cache was last updated
OLD = datetime(2020, 1, 1, tzinfo=UTC)


class Filled:
    """A cache with one entry of each kind prune and list tell apart."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        #: validated by resnet, masked by bert; recorded; old
        self.mixed = accepted(
            cache,
            "conv_F32_m64_k3",
            "im2col",
            conv_record(),
            2.5,
            RESNET,
            ("bert", "masked", None, 3, 0),
        )
        #: masked by every model that judged it
        self.masked = cache.put("conv_F32_m128_k3", choice="winograd", candidates=NAMES)
        #: never judged, tuned against an older list of the same signature
        self.stale = cache.put("conv_F32_m256_k3", choice="direct", candidates=NAMES[:2])
        #: never judged, another op
        self.matmul = cache.put("matmul_F32_m8_n8", choice="direct", candidates=NAMES)
        judge(cache, self.masked, ("bert", "masked", None, 3, 0), ("gpt", "masked", None, 2, 0))
        backdate(cache, self.mixed, OLD)


@pytest.fixture
def filled(cache: Cache) -> Filled:
    """The `cache` fixture, filled (see `Filled`)."""
    return Filled(cache)


def keys_of(entries: Iterable[maintain.EntryInfo | maintain.PrunedEntry]) -> list[str]:
    """The keys of listed or pruned entries, sorted."""
    return sorted(e.key for e in entries)
