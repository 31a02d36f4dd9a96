"""What the autotuner needs from the machine its kernels run on, as plain values and calls.

Everything Triton- or GPU-specific (the device identity, synchronisation, which exceptions mean
"this config does not fit", the L2 flush) comes in through a `Backend`: `tunecache.triton.gpu`
builds the GPU one, and the tests drive the very same machinery with a CPU kernel and a CPU
backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunecache.device import Device
    from tunecache.identity import Fields
    from tunecache.triton.configs import NoConfigError

__all__ = ["Backend", "clone", "difference"]


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


def difference(expected: Any, actual: Any, tolerance: float | None) -> str | None:
    """How one output argument differs from the reference's, or None: `tunecache.compare`'s
    rules, on the host (numpy arrays and numbers)."""
    from tunecache.compare import difference as differ

    return differ(expected, actual, tolerance)


class Backend:
    """What the autotuner needs from the machine its kernels run on.

    - `device(index)`: the identity of device number `index`, for the store's path and rows;
    - `fields(index)`: that identity's checked fields (`Device.fields`), checked as a `Device`
      checks them, where they come cheaper than the `Device` itself (the GPU backend's: the
      first call of a stored key builds none); None: `device(index).fields`;
    - `current()`: the number of the device the calling thread launches on;
    - `sync()`: waits for the work this thread queued (None: work is synchronous);
    - `failures`: exceptions that mean "this config cannot run here" (out of resources),
      recorded as the config's failure and skipped, as Triton does; anything else propagates;
    - `context(index, background)`: makes device `index` current (and, for background tuning,
      gives the tuning thread a stream of its own);
    - `clone(value)`: a private copy of one argument (made when a key is borrowed), so that
      tuning it later never writes the caller's tensors;
    - `flush(index)`: for device `index`, a call that evicts the caches before each timed
      launch, or None;
    - `bench`: default `tunecache.bench.bench` options for this machine (a copy of the mapping
      given, so the caller's dict is never shared);
    - `default_config()`: the config used when the caller gives none (Triton: one `Config`);
    - `no_config_error`: what `early_config_prune` keeping no config raises (a subclass of
      `configs.NoConfigError`, Triton's a `triton.TritonError` too); None: NoConfigError itself;
    - `difference(expected, actual, tolerance)`: how an output argument differs from the
      reference config's, in one line, or None (`check_outputs`): `difference` on the host, the
      GPU's on the device (copying outputs to the host would cost more than the bench).

    A plain class, not a dataclass: `dataclasses` pulls in `inspect`, about 4 ms of every
    process that applies the decorator.
    """

    __slots__ = (
        "bench",
        "clone",
        "context",
        "current",
        "default_config",
        "device",
        "difference",
        "failures",
        "fields",
        "flush",
        "no_config_error",
        "sync",
    )

    def __init__(
        self,
        *,
        device: Callable[[int], Device],
        current: Callable[[], int] = _first_device,
        sync: Callable[[], object] | None = None,
        failures: tuple[type[Exception], ...] = (),
        context: Callable[[int, bool], contextlib.AbstractContextManager[Any]] = _no_context,
        clone: Callable[[Any], Any] = clone,
        flush: Callable[[int], Callable[[], object] | None] | None = None,
        bench: Mapping[str, Any] | None = None,
        default_config: Callable[[], Any] | None = None,
        no_config_error: type[NoConfigError] | None = None,
        difference: Callable[[Any, Any, float | None], str | None] = difference,
        fields: Callable[[int], Fields] | None = None,
    ) -> None:
        self.device, self.current, self.sync, self.failures = device, current, sync, failures
        self.fields = fields
        self.context, self.clone, self.flush = context, clone, flush
        self.bench: dict[str, Any] = dict(bench or {})
        self.default_config = default_config
        self.no_config_error = no_config_error
        self.difference = difference
