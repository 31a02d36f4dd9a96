"""What the autotuner needs from the machine its kernels run on, as plain values and calls.

Everything Triton- or GPU-specific (the device identity, synchronisation, which exceptions mean
"this config does not fit", the L2 flush) comes in through a `Backend`: `tunecache.triton.gpu`
builds the GPU one, and the tests drive the very same machinery with a CPU kernel and a CPU
backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunecache.device import Device

__all__ = ["Backend", "clone"]


def clone(value: Any) -> Any:
    """A private copy of a tensor argument (torch `.clone()`, numpy `.copy()`); others as is."""
    if getattr(value, "dtype", None) is None:
        return value
    for method in ("clone", "copy"):
        fn = getattr(value, method, None)
        if callable(fn):
            return fn()
    return value


@contextlib.contextmanager
def _no_context(index: int, background: bool) -> Iterator[None]:
    yield


def _first_device() -> int:
    return 0


@dataclass(eq=False, kw_only=True, slots=True)
class Backend:
    """What the autotuner needs from the machine its kernels run on."""

    #: the identity of device number `index`, for the store's path and rows
    device: Callable[[int], Device]
    #: the number of the device the calling thread launches on
    current: Callable[[], int] = _first_device
    #: waits for the work this thread queued (None: work is synchronous)
    sync: Callable[[], object] | None = None
    #: exceptions that mean "this config cannot run here" (out of resources): recorded as the
    #: config's failure and skipped, as Triton does; anything else propagates
    failures: tuple[type[Exception], ...] = ()
    #: a context that makes device `index` current (and, for background tuning, a stream of
    #: the tuning thread's own)
    context: Callable[[int, bool], contextlib.AbstractContextManager[Any]] = _no_context
    #: a private copy of one argument (made when a key is borrowed), so that tuning it later
    #: never writes the caller's tensors
    clone: Callable[[Any], Any] = clone
    #: for device `index`, a call that evicts the caches before each timed launch, or None
    flush: Callable[[int], Callable[[], object] | None] | None = None
    #: default `tunecache.bench.bench` options for this machine (copied)
    bench: Mapping[str, Any] = field(default_factory=dict)
    #: the config used when the caller gives none (Triton: one default `Config`)
    default_config: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        # A copy, so that the caller's dict (GPU_BENCH, say) is never shared; None means none.
        self.bench = dict(self.bench or {})
