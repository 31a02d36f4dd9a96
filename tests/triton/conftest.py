"""Fixtures of the tunecache.triton tests: stand-ins for the torch and Triton modules."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest


class FakeCuda:
    """The part of `torch.cuda` the GPU backend uses, recording each call in `events`."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.properties = SimpleNamespace(
            name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, L2_cache_size=60 << 20
        )

    def current_device(self) -> int:
        return 0

    def get_device_properties(self, index: int) -> SimpleNamespace:
        return self.properties

    def current_stream(self) -> SimpleNamespace:
        return SimpleNamespace(synchronize=lambda: self.events.append(("sync",)))

    @contextlib.contextmanager
    def device(self, index: int) -> Iterator[None]:
        self.events.append(("device", index))
        yield

    def synchronize(self, index: int) -> None:
        self.events.append(("synchronize", index))

    def Stream(self, index: int) -> tuple[str, int]:
        self.events.append(("new stream", index))
        return ("stream", index)

    @contextlib.contextmanager
    def stream(self, stream: Any) -> Iterator[None]:
        self.events.append(("on", stream))
        yield


class FakeBuffer:
    """What `torch.empty` returns: its size and device, and how often it was zeroed."""

    def __init__(self, size: int, dtype: Any, device: str) -> None:
        self.size, self.dtype, self.device = size, dtype, device
        self.zeroed = 0

    def zero_(self) -> FakeBuffer:
        self.zeroed += 1
        return self


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Stand-ins for `torch` (one H200, CUDA driver API 12.4) and `triton` (3.6.0) in
    sys.modules, so the GPU backend runs on a CPU; `.torch` and `.triton` are them."""
    torch = SimpleNamespace(
        cuda=FakeCuda(),
        version=SimpleNamespace(hip=None),
        _C=SimpleNamespace(_cuda_getDriverVersion=lambda: 12040),
        int8="int8",
        empty=FakeBuffer,
    )
    triton = SimpleNamespace(
        __version__="3.6.0",
        Config=lambda kwargs, **launch: SimpleNamespace(kwargs=kwargs, **launch),
        # As triton.errors.TritonError: the plain Exception every error of Triton's derives from.
        TritonError=type("TritonError", (Exception,), {}),
    )
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "triton", triton)
    return SimpleNamespace(torch=torch, triton=triton)
