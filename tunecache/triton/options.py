"""The arguments of `tunecache.triton.autotune`, checked once, before any kernel is seen.

Every check raises `BadArgumentError` with a one-line message, in the order the arguments are
listed; nothing here imports Triton, torch, the store or the resolver (making the decorator
costs no more than remembering its arguments).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

# Not `typing` at run time, nor the errors' module: applying the decorator loads neither
# (tests/triton/test_decorator.py holds what it loads).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeGuard

    from tunecache.errors import BadArgumentError

__all__ = [
    "DEFAULTS",
    "DEFAULT_MAX_DISTANCE",
    "UNSEEN",
    "Options",
    "bad_argument",
    "check_max_distance",
    "key_problem",
]

#: `max_distance`'s default: the resolver's own (`tunecache.resolve.DEFAULT_MAX_DISTANCE`,
#: which a test keeps equal), spelled out so that making the decorator imports no resolver
DEFAULT_MAX_DISTANCE = 1.0

#: what an unseen key gets: a tuned neighbour's config now (tuned later on request, or by a
#: daemon thread), or a tune right away as Triton does
UNSEEN = ("borrow", "background", "tune")


def key_problem(op: str, arg_names: Sequence[str], key: Sequence[str]) -> str | None:
    """What is wrong with `key` as the tuning key of kernel `op` with these arguments (a name
    that is no argument, or one named twice), in one line, or None."""
    names = list(arg_names)
    unknown = [k for k in key if k not in names]
    if unknown:
        return f"key names {unknown}, which are not arguments of {op} (its arguments: {names})"
    if len(set(key)) != len(key):
        return f"key names an argument twice: {list(key)}"
    return None


def bad_argument(message: str) -> BadArgumentError:
    """The BadArgumentError saying `message`, its module imported now: making and applying the
    decorator define no exception class unless an argument is bad."""
    from tunecache.errors import BadArgumentError

    return BadArgumentError(message)


_PRUNE_KEYS = frozenset({"perf_model", "top_k", "early_config_prune"})
_BENCH_KEYS = frozenset(
    {
        "min_samples",
        "max_samples",
        "drop_ratio",
        "lower_bound",
        "bound_threshold",
        "budget",
        "sample_time",
        "warmup",
    }
)


#: every argument of `autotune` after `configs` and `key`, with its default there (Triton's
#: first, then ours): the one list of them that `Options` knows
DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "prune_configs_by": None,
        "reset_to_zero": None,
        "restore_value": None,
        "pre_hook": None,
        "post_hook": None,
        "warmup": None,
        "rep": None,
        "use_cuda_graph": False,
        "do_bench": None,
        "cache_results": False,
        "max_distance": DEFAULT_MAX_DISTANCE,
        "unseen": "borrow",
        "dims": None,
        "name": None,
        "revision": "auto",
        "root": None,
        "path": None,
        "device": None,
        "bench": None,
        "flush_l2": True,
        "pending_limit": 32,
        "check_outputs": False,
        "check_tolerance": None,
    }
)


class Options:
    """The decorator's arguments, checked once, before any kernel is seen.

    `arguments` are `autotune`'s own, by name (`DEFAULTS` for those not given); they are
    checked in the order `autotune` lists them, Triton's `warmup` and `rep` (accepted, and
    ignored) and the GPU backend's `device` and `flush_l2` last.
    """

    def __init__(self, configs: Sequence[Any], key: Sequence[str], **arguments: Any) -> None:
        unknown = sorted(set(arguments) - set(DEFAULTS))
        if unknown:
            raise TypeError(f"Options() got unexpected keyword arguments: {', '.join(unknown)}")
        given = {**DEFAULTS, **arguments}
        #: the configs as given, each checked to be config-shaped
        self.given_configs = _check_configs(configs)
        self._configs: dict[str, Any] | None = None
        self.key = _check_key(key)
        self.perf_model, self.top_k, self.early_prune = _check_prune(given["prune_configs_by"])
        self.reset_to_zero = _names_list(given["reset_to_zero"], "reset_to_zero")
        self.restore_value = _names_list(given["restore_value"], "restore_value")
        for what in ("pre_hook", "post_hook", "do_bench"):
            if given[what] is not None and not callable(given[what]):
                raise bad_argument(f"{what} must be callable, got {given[what]!r}")
        self.pre_hook: Callable[..., Any] | None = given["pre_hook"]
        self.post_hook: Callable[..., Any] | None = given["post_hook"]
        self.do_bench: Callable[..., Any] | None = given["do_bench"]
        self.unseen: str = _check_unseen(given["unseen"])
        self.max_distance = check_max_distance(given["max_distance"])
        self.dims = _check_dims(given["dims"], self.key)
        self.name: str | None = _check_name(given["name"])
        self.revision: str | None = _check_revision(given["revision"])
        self.root, self.path = given["root"], given["path"]
        self.bench = _check_bench(given["bench"])
        self.pending_limit: int = _check_pending_limit(given["pending_limit"])
        _check_milliseconds(given["warmup"], given["rep"])
        #: the GPU identity to use instead of the detected one (a `tunecache.Device`), or None
        self.device = _check_device(given["device"])
        #: whether the GPU backend evicts the L2 cache before each timed launch
        self.flush_l2: bool = _check_flush_l2(given["flush_l2"])
        #: the arguments whose values each config's output is checked on (True: every tensor
        #: argument; [] : none), and the relative tolerance for floats (None: the dtype's)
        self.check_outputs: bool | list[str] = _check_outputs(given["check_outputs"])
        self.check_tolerance: float | None = _check_tolerance(given["check_tolerance"])

    @property
    def named_configs(self) -> dict[str, Any]:
        """The configs by name, in order, duplicates dropped (the first of equal names stays;
        a copy): named when first asked, by the kernel's first call, so that applying the
        decorator names none."""
        if self._configs is None:
            from tunecache.triton.warm import config_name

            names: dict[str, Any] = {}
            for config in self.given_configs:
                names.setdefault(config_name(config), config)
            self._configs = names
        return dict(self._configs)


def _real(value: object) -> TypeGuard[int | float]:
    """`tunecache.checks.is_real`, which loads only for a value that is not a float (a float
    is always one: the defaults are, and making the decorator loads one module less)."""
    if type(value) is float:
        return True
    from tunecache.checks import is_real

    return is_real(value)


def check_max_distance(value: object) -> float:
    """A nearest-shape cap as a float, or BadArgumentError: the resolver's rule and words
    (`tunecache.resolve.check_max_distance`, which a test holds to the same answers)."""
    if not _real(value) or not 0 <= value < math.inf:
        raise bad_argument(
            f"max_distance is a finite number >= 0 (0 borrows nothing), got {value!r}"
        )
    return float(value)


def _check_unseen(unseen: Any) -> Any:
    if unseen not in UNSEEN:
        raise bad_argument(f"unseen must be one of {UNSEEN}, got {unseen!r}")
    return unseen


def _check_name(name: Any) -> Any:
    if name is not None and (not isinstance(name, str) or not name.strip("_")):
        raise bad_argument(f"name must be a non-empty string, got {name!r}")
    return name


def _check_revision(revision: Any) -> Any:
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise bad_argument(f"revision is 'auto', None or a non-empty string: {revision!r}")
    return revision


def _check_pending_limit(limit: Any) -> Any:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise bad_argument(f"pending_limit is an int >= 0, got {limit!r}")
    return limit


def _check_milliseconds(warmup: Any, rep: Any) -> None:
    # Triton's own timings: accepted for compatibility, and ignored (the bench stops on
    # evidence, within `bench["budget"]`).
    for what, value in (("warmup", warmup), ("rep", rep)):
        if value is not None and (not _real(value)):
            raise bad_argument(f"{what} is a number of milliseconds, got {value!r}")


def _check_flush_l2(flush_l2: Any) -> Any:
    if not isinstance(flush_l2, bool):
        raise bad_argument(f"flush_l2 is a bool, got {flush_l2!r}")
    return flush_l2


def _check_outputs(value: Any) -> bool | list[str]:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise bad_argument(
            f"check_outputs is a bool or a non-empty list of argument names, got {value!r}"
        )
    return _names_list(value, "check_outputs")


def _check_tolerance(value: Any) -> Any:
    if value is not None and (not _real(value) or not 0 <= value < math.inf):
        raise bad_argument(f"check_tolerance is None or a finite number >= 0, got {value!r}")
    return None if value is None else float(value)


def _check_configs(configs: Sequence[Any]) -> list[Any]:
    if isinstance(configs, str | bytes) or not isinstance(configs, Sequence):
        raise bad_argument(f"configs is a list of triton.Config, got {configs!r}")
    # A config that is not config-shaped fails here, with its position (`warm.config_name`,
    # which names it at the first call, says the same of one).
    for i, config in enumerate(configs):
        if not isinstance(getattr(config, "kwargs", None), Mapping):
            raise bad_argument(
                f"config {i}: a config is a triton.Config (with .kwargs and .num_warps), "
                f"got {type(config).__name__}"
            )
    return list(configs)


def _check_key(key: Sequence[str]) -> list[str]:
    if isinstance(key, str) or not isinstance(key, Sequence):
        raise bad_argument(f"key is a list of argument names, got {key!r}")
    if not all(isinstance(k, str) for k in key):
        raise bad_argument(f"key is a list of argument names, got {list(key)!r}")
    return list(key)


def _check_dims(dims: Sequence[str] | None, key: list[str]) -> list[str] | None:
    if dims is not None and (
        isinstance(dims, str)
        or not isinstance(dims, Sequence)
        or not all(isinstance(d, str) for d in dims)
    ):
        raise bad_argument(f"dims is a list of key argument names, got {dims!r}")
    stray = [d for d in dims or () if d not in key]
    if stray:
        raise bad_argument(f"dims names {stray}, which are not in key {key}")
    return None if dims is None else list(dims)


def _check_device(device: Any) -> Any:
    if device is not None:
        # Only when one is given: making the decorator imports nothing it does not use.
        from tunecache.device import Device

        if not isinstance(device, Device):
            raise bad_argument(f"device is a tunecache.Device, got {device!r}")
    return device


def _names_list(value: Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise bad_argument(f"{what} is a list of argument names, got {value!r}")
    return list(value)


def _check_prune(
    prune: Mapping[str, Any] | None,
) -> tuple[Callable[..., Any] | None, int | float, Callable[..., Any] | None]:
    if not prune:
        return None, 1.0, None
    if not isinstance(prune, Mapping):
        raise bad_argument(f"prune_configs_by is a dict, got {prune!r}")
    unknown = sorted(set(prune) - _PRUNE_KEYS)
    if unknown:
        raise bad_argument(
            f"prune_configs_by has unknown fields {unknown}; known: {sorted(_PRUNE_KEYS)}"
        )
    perf_model = prune.get("perf_model")
    early = prune.get("early_config_prune")
    for what, fn in (("perf_model", perf_model), ("early_config_prune", early)):
        if fn is not None and not callable(fn):
            raise bad_argument(f"prune_configs_by[{what!r}] must be callable, got {fn!r}")
    top_k = prune.get("top_k", 1.0)
    if isinstance(top_k, bool) or not (
        (isinstance(top_k, float) and 0 < top_k <= 1.0) or (isinstance(top_k, int) and top_k >= 1)
    ):
        raise bad_argument(
            f"prune_configs_by['top_k'] is a float in (0, 1] or an int >= 1, got {top_k!r}"
        )
    return perf_model, top_k, early


def _check_bench(options: Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise bad_argument(f"bench is a dict of tunecache.bench.bench options, got {options!r}")
    unknown = sorted(set(options) - _BENCH_KEYS)
    if unknown:
        raise bad_argument(f"bench has unknown options {unknown}; known: {sorted(_BENCH_KEYS)}")
    return dict(options)
