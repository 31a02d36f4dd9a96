"""`tunecache.triton.autotune`: a drop-in, persistent replacement for `triton.autotune`.

    import tunecache.triton

    @tunecache.triton.autotune(configs=[triton.Config({"BLOCK_M": 128, ...}, num_warps=8), ...],
                               key=["M", "N", "K"])
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ...): ...

    matmul_kernel[grid](a, b, c, M, N, K, ...)

Each key is tuned once per device and kept in the tunecache store, with every config's timings;
a key next to a tuned one is served its neighbour's config at once (docs/triton.md).

Triton, torch and the store are imported lazily: `import tunecache.triton` needs none of them,
and only applying the decorator to a kernel imports Triton and torch. A warm process answers a
stored key through the stdlib sqlite3 module; SQLAlchemy loads only when something is tuned.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tunecache._triton_keys import config_name
from tunecache._triton_logic import UNSEEN, Autotuner, Backend, Options, Pending
from tunecache.errors import BadArgumentError
from tunecache.resolve import DEFAULT_MAX_DISTANCE

__all__ = [
    "GPU_BENCH",
    "UNSEEN",
    "Autotuner",
    "Pending",
    "autotune",
    "config_name",
    "driver_version",
    "gpu_device",
]

#: `tunecache.bench.bench` options for a GPU kernel (override any with `bench=`):
#: 1 ms samples are ~100x the cost of a synchronisation, and 3 rounds of them separate configs
#: 5% apart; 0.1 s caps a key of 12 configs at a tenth of what Triton's 25 + 100 ms per config
#: takes; one warm-up call, because every config was launched once before the bench starts.
GPU_BENCH: Mapping[str, Any] = {
    "sample_time": 1e-3,
    "min_samples": 3,
    "max_samples": 8,
    "budget": 0.1,
    "warmup": 1,
}


def autotune(
    configs: Sequence[Any],
    key: Sequence[str],
    prune_configs_by: Mapping[str, Any] | None = None,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    warmup: int | None = None,
    rep: int | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable[..., Any] | None = None,
    cache_results: bool = False,
    *,
    max_distance: float = DEFAULT_MAX_DISTANCE,
    unseen: str = "borrow",
    dims: Sequence[str] | None = None,
    name: str | None = None,
    revision: str | None = "auto",
    root: Any = None,
    path: Any = None,
    device: Any = None,
    bench: Mapping[str, Any] | None = None,
    flush_l2: bool = True,
    pending_limit: int = 32,
) -> Callable[[Any], Autotuner]:
    """Decorate a `@triton.jit` kernel so its configs are tuned once per device and key, and
    kept in the tunecache store.

    The arguments Triton's `autotune` takes mean what they mean there: `configs`, `key`,
    `prune_configs_by` (`perf_model`, `top_k`, `early_config_prune`), `reset_to_zero`,
    `restore_value`, `pre_hook`, `post_hook` and `do_bench` (a timer `do_bench(fn, quantiles)`
    in ms, used instead of tunecache's adaptive bench). `warmup`, `rep` and `use_cuda_graph`
    (deprecated in Triton) are accepted and ignored: the bench stops on evidence, within
    `bench["budget"]`. `cache_results` is accepted and ignored: results always persist.

    Ours: `max_distance` caps how far (summed |log2| ratio of the sizes) an unseen key may
    borrow a tuned neighbour's config; `unseen` is "borrow" (serve the neighbour's config now,
    tune on `kernel.tune_pending()`), "background" (a daemon thread tunes it) or "tune" (tune
    now, as Triton). `dims` names the key arguments that are sizes (default: every key argument
    whose value is a non-negative int). `name` replaces the kernel's name in keys; `revision`
    ("auto": a digest of the kernel's source; None: none; or your own string) makes an edited
    kernel start afresh. `root` and `path` place the store as `tunecache.open` does; `device`
    (a `tunecache.Device`) replaces the detected GPU identity. `bench` overrides `GPU_BENCH`;
    `flush_l2` evicts the L2 cache before each timed launch, as Triton's `do_bench` does.
    `pending_limit` caps how many borrowed keys keep their first call's arguments.

    Bad arguments raise BadArgumentError here, before any kernel is seen.
    """
    options = Options(
        configs,
        key,
        prune_configs_by,
        reset_to_zero,
        restore_value,
        pre_hook,
        post_hook,
        do_bench,
        max_distance=max_distance,
        unseen=unseen,
        dims=dims,
        name=name,
        revision=revision,
        root=root,
        path=path,
        bench=bench,
        pending_limit=pending_limit,
    )
    for what, value in (("warmup", warmup), ("rep", rep)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise BadArgumentError(f"{what} is a number of milliseconds, got {value!r}")
    if device is not None:
        from tunecache.device import Device

        if not isinstance(device, Device):
            raise BadArgumentError(f"device is a tunecache.Device, got {device!r}")
    if not isinstance(flush_l2, bool):
        raise BadArgumentError(f"flush_l2 is a bool, got {flush_l2!r}")

    def decorator(fn: Any) -> Autotuner:
        # What a warm process's first call needs to find the store, imported now, with the
        # kernel's module (as Triton's own modules are), not inside that first call.
        for module in ("tunecache.device", "tunecache.identity", "tunecache.paths"):
            importlib.import_module(module)
        return Autotuner(fn, options, _backend(device, flush_l2))

    return decorator


# -- the GPU, through torch and Triton ----------------------------------------------------------


def _triton() -> Any:
    try:
        # import_module: Triton and torch ship no type information, and need not be installed.
        triton = importlib.import_module("triton")
    except ImportError as error:
        raise BadArgumentError(
            f"tunecache.triton.autotune needs Triton to decorate a kernel: {error}"
        ) from None
    return triton


def _torch() -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError as error:
        raise BadArgumentError(f"tunecache.triton needs torch for the GPU: {error}") from None


def driver_version() -> str:
    """The GPU driver's version ("580.159.04"), or the CUDA driver API's ("cuda-13.0")."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]*)", fh.read())
        if found:
            return found.group(1)
    except OSError:
        pass
    torch = _torch()
    hip = getattr(torch.version, "hip", None)
    if hip:
        return f"hip-{hip}"
    get = getattr(torch._C, "_cuda_getDriverVersion", None)
    if callable(get):
        number = int(get())
        return f"cuda-{number // 1000}.{number % 1000 // 10}"
    return "unknown"


def gpu_device(index: int | None = None) -> Any:
    """The identity of GPU `index` (default: the current one) for Triton's kernels.

    cpu = the GPU's name as a slug (nvidia-h200), threads = its multiprocessor count (so a MIG
    slice is another device), accelerator = name, compute capability and driver version,
    client = "triton" at Triton's version: a new driver or Triton starts a fresh cache.
    """
    from tunecache.device import Device, slugify

    torch = _torch()
    if index is None:
        index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    capability = f"sm{props.major}{props.minor}"
    accelerator = slugify(f"{props.name} {capability} driver {driver_version()}")
    return Device(
        cpu=slugify(props.name),
        threads=int(props.multi_processor_count),
        accelerator=accelerator,
        client="triton",
        client_version=str(_triton().__version__),
    )


def _failures() -> tuple[type[Exception], ...]:
    """What Triton's own autotuner treats as "this config does not fit": skip, not raise."""
    found: list[type[Exception]] = []
    for module, names in (
        ("triton.runtime.errors", ("OutOfResources", "PTXASError")),
        ("triton.compiler.errors", ("CompileTimeAssertionFailure",)),
    ):
        with contextlib.suppress(ImportError):
            loaded = importlib.import_module(module)
            found.extend(getattr(loaded, n) for n in names if hasattr(loaded, n))
    return tuple(found)


def _backend(device: Any, flush_l2: bool) -> Backend:
    triton = _triton()
    torch = _torch()
    streams: dict[int, Any] = {}
    flushes: dict[int, Callable[[], object]] = {}

    def identity(index: int) -> Any:
        return device if device is not None else gpu_device(index)

    def sync() -> None:
        # The stream this thread launches on: a background tuner's own stream, or the
        # caller's; the host clock is read only once that work is done.
        torch.cuda.current_stream().synchronize()

    @contextlib.contextmanager
    def context(index: int, background: bool) -> Iterator[None]:
        with torch.cuda.device(index):
            if not background:
                yield
                return
            # The pending key's copies were queued on the caller's stream: wait for them
            # before benching on a stream of this thread's own.
            torch.cuda.synchronize(index)
            stream = streams.get(index)
            if stream is None:
                stream = streams[index] = torch.cuda.Stream(index)
            with torch.cuda.stream(stream):
                yield

    def flush(index: int) -> Callable[[], object] | None:
        if not flush_l2:
            return None
        found = flushes.get(index)
        if found is None:
            # Twice the L2 size, zeroed before each timed launch, as Triton's do_bench does
            # with 256 MB: a config's time then includes reading its inputs from memory.
            size = 2 * int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0))
            buffer = torch.empty(max(size, 1 << 20), dtype=torch.int8, device=f"cuda:{index}")
            found = flushes[index] = buffer.zero_
        return found

    return Backend(
        device=identity,
        current=torch.cuda.current_device,
        sync=sync,
        failures=_failures(),
        context=context,
        flush=flush,
        bench=GPU_BENCH,
        default_config=lambda: triton.Config({}, num_warps=4, num_stages=3, num_ctas=1),
    )
