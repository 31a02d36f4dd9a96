"""`tunecache.triton.autotune`: the decorator, a drop-in, persistent `triton.autotune`.

It checks its arguments at once (`options.Options`), and applied to a kernel it builds an
`autotuner.Autotuner` that remembers them, checked against the kernel's, and nothing more: the
GPU backend (`gpu.gpu_backend`, Triton and torch), the store and the bench are set up by the
kernel's first call. Making and applying the decorator imports only `options`, `autotuner` and
the pure values they check with (tests/triton/test_decorator.py holds the list).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tunecache.triton.autotuner import Autotuner
from tunecache.triton.options import DEFAULT_MAX_DISTANCE, Options

if TYPE_CHECKING:
    from tunecache.triton.backend import Backend

__all__ = ["autotune"]


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
    check_outputs: bool | Sequence[str] = False,
    check_tolerance: float | None = None,
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
    `check_outputs` checks configs before timing them: after each config's first launch, the
    arguments it names (True: every tensor argument) are compared with what the first config
    that ran left there (`tunecache.compare`'s rules: integers exactly, floats within
    `check_tolerance` of the reference's largest magnitude, default the square root of the
    dtype's epsilon); a config that differs is recorded as a wrong output, never benched or
    chosen.

    Bad arguments raise BadArgumentError here, before any kernel is seen, or when the
    decorator is applied (names that are not the kernel's arguments); never on a launch.
    """
    # Every argument, by name, as `autotune` was given it: Options checks them all.
    options = Options(
        configs,
        key,
        prune_configs_by=prune_configs_by,
        reset_to_zero=reset_to_zero,
        restore_value=restore_value,
        pre_hook=pre_hook,
        post_hook=post_hook,
        warmup=warmup,
        rep=rep,
        use_cuda_graph=use_cuda_graph,
        do_bench=do_bench,
        cache_results=cache_results,
        max_distance=max_distance,
        unseen=unseen,
        dims=dims,
        name=name,
        revision=revision,
        root=root,
        path=path,
        device=device,
        bench=bench,
        flush_l2=flush_l2,
        pending_limit=pending_limit,
        check_outputs=check_outputs,
        check_tolerance=check_tolerance,
    )

    def decorator(fn: Any) -> Autotuner:
        return _decorate(fn, options)

    return decorator


def _decorate(fn: Any, options: Options) -> Autotuner:
    def backend() -> Backend:
        # At the kernel's first call: Triton and torch are the GPU backend's to import.
        from tunecache.triton.gpu import gpu_backend

        return gpu_backend(options.device, options.flush_l2)

    return Autotuner(fn, options, backend)
