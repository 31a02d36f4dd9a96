"""The tuner's options: every default decided here, once, and every value checked before
anything runs or is written (a bad one is a one-line BadArgumentError).

`None` for `confirmations`, `pairs` or `alpha` means the acceptance rule's default
(`tunecache.accept.accept`'s), and so does `alpha=None` for an evaluation's measurement: the
command line passes what the user gave, None included, and never decides a default itself.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunecache import accept, bench
from tunecache.checks import is_int, is_real
from tunecache.errors import BadArgumentError
from tunecache.tune.claims import CLAIM_TTL, CLAIM_WAIT
from tunecache.tune.doubt import REBENCH

__all__ = [
    "ACCEPT_DEFAULTS",
    "BENCH_DEFAULTS",
    "KEEP",
    "KEY_BUDGET",
    "MEASURE_PAIRS",
    "REBENCH",
    "SHARE",
    "TUNE_DEFAULTS",
    "TUNE_OPTIONS",
    "Options",
    "check_evaluate_options",
    "check_tune_options",
    "least_pairs",
    "measure_alpha",
    "measure_pairs",
    "session_options",
]

#: keys lighter than this fraction of a scenario's time are left alone
SHARE = 0.01
#: bench survivors tried through whole-model runs
KEEP = 3
#: seconds one key's isolated bench may take
KEY_BUDGET = 1.0
#: paired runs per model when an evaluation (or the demo) measures the cache
MEASURE_PAIRS = 20

#: the acceptance rule's defaults: confirmations, pairs, alpha (and the rest of its options)
ACCEPT_DEFAULTS: dict[str, Any] = {
    name: parameter.default
    for name, parameter in inspect.signature(accept.accept).parameters.items()
    if parameter.default is not inspect.Parameter.empty
}

#: what `bench_options` may set, with the defaults: every option of `bench.bench` but the key's
#: budget (which is `key_budget`), and the candidates it refuses and the output check it makes
#: (the tuner's own: the op's heuristic and `Tunable.compare`)
BENCH_DEFAULTS: dict[str, Any] = {
    name: parameter.default
    for name, parameter in inspect.signature(bench.bench).parameters.items()
    if name not in ("candidates", "budget", "refused", "reference", "compare")
}


@dataclass(frozen=True)
class Options:
    """One session's options, every default filled in; build them with `session_options`."""

    share: float
    keep: int
    confirmations: int
    pairs: int
    alpha: float
    key_budget: float | None
    budget: float | None
    retune: bool
    bench_options: Mapping[str, Any] = field(default_factory=dict)
    #: how many times a key's doubtful evidence may be benched again (`tunecache.tune.doubt`)
    rebench: int = REBENCH
    #: seconds a tuner waits for a key another tuner claims, and a claim stands unrenewed
    #: (`tunecache.tune.claims`)
    claim_wait: float = CLAIM_WAIT
    claim_ttl: float = CLAIM_TTL


#: `tune`'s options and their defaults, as `session_options` takes them
TUNE_DEFAULTS: dict[str, Any] = {
    "share": SHARE,
    "keep": KEEP,
    "confirmations": None,
    "pairs": None,
    "alpha": None,
    "key_budget": KEY_BUDGET,
    "budget": None,
    "retune": False,
    "bench_options": None,
    "rebench": REBENCH,
    "claim_wait": CLAIM_WAIT,
    "claim_ttl": CLAIM_TTL,
}


def session_options(**given: Any) -> Options:
    """A session's options from `tune`'s arguments (TUNE_DEFAULTS names them): defaults filled
    in, every value checked."""
    unknown = sorted(set(given) - set(TUNE_DEFAULTS))
    if unknown:
        raise BadArgumentError(f"unknown tune options {unknown}; known: {list(TUNE_DEFAULTS)}")
    values = {**TUNE_DEFAULTS, **given}
    options = Options(
        share=values["share"],
        keep=values["keep"],
        confirmations=_or_default("confirmations", values),
        pairs=_or_default("pairs", values),
        alpha=measure_alpha(values["alpha"]),
        key_budget=values["key_budget"],
        budget=values["budget"],
        retune=values["retune"],
        bench_options=dict(values["bench_options"] or {}),
        rebench=values["rebench"],
        claim_wait=values["claim_wait"],
        claim_ttl=values["claim_ttl"],
    )
    _check(options)
    return options


def _or_default(name: str, values: Mapping[str, Any]) -> Any:
    value = values[name]
    return ACCEPT_DEFAULTS[name] if value is None else value


#: the options `evaluate` passes on to `tune` (tune_options=...)
TUNE_OPTIONS = tuple(TUNE_DEFAULTS)


def check_tune_options(options: Mapping[str, Any]) -> None:
    """Refuse, in one line, `tune_options` that `tune` would refuse, before anything runs."""
    session_options(**options)


def measure_pairs(pairs: int | None) -> int:
    """`pairs`, or MEASURE_PAIRS when None: how many paired runs an evaluation measures."""
    return MEASURE_PAIRS if pairs is None else pairs


def measure_alpha(alpha: float | None) -> float:
    """`alpha`, or the acceptance rule's default significance level when None."""
    default: float = ACCEPT_DEFAULTS["alpha"]
    return default if alpha is None else alpha


def least_pairs(alpha: float) -> int:
    """The fewest pairs that can reach `alpha`: the smallest one-sided p-value n pairs can
    give is 2**-n."""
    return math.ceil(math.log2(1 / alpha))


def check_evaluate_options(
    pairs: int | None = None,
    alpha: float | None = None,
    tune_options: Mapping[str, Any] | None = None,
) -> None:
    """Refuse, in one line, options `evaluate` could not use, before anything runs or opens
    (None for `pairs` or `alpha`: the default)."""
    pairs = measure_pairs(pairs)
    _count("pairs", pairs, 2)
    alpha = measure_alpha(alpha)
    _probability("alpha", alpha)
    least = least_pairs(alpha)
    if pairs < least:
        raise BadArgumentError(
            f"{pairs} pairs can never reach alpha {alpha:g}: measure at least {least}"
        )
    check_tune_options(tune_options or {})


def _check(options: Options) -> None:
    share = options.share
    if not is_real(share) or not 0 <= share < 1:
        raise BadArgumentError(f"share is a fraction in [0, 1), got {share!r}")
    _count("keep", options.keep, 1)
    _count("rebench", options.rebench, 0)
    _count("confirmations", options.confirmations, 1)
    _count("pairs", options.pairs, 1)
    _probability("alpha", options.alpha)
    # Fewer pairs can never accept anything: every key tried would be rejected, and
    # remembered so.
    least = max(2, least_pairs(options.alpha))
    if options.confirmations * options.pairs < least:
        raise BadArgumentError(
            f"{options.confirmations} x {options.pairs} pairs can never reach alpha "
            f"{options.alpha:g}: acceptance needs at least {least} pairs in all "
            "(confirmations x pairs)"
        )
    _seconds("budget", options.budget)
    _seconds("key_budget", options.key_budget)
    _seconds("claim_wait", options.claim_wait)
    if options.claim_wait is None:  # a wait has a deadline (None would fail at the first wait)
        raise BadArgumentError("claim_wait is a number of seconds >= 0, got None")
    _seconds("claim_ttl", options.claim_ttl)
    if not options.claim_ttl:
        raise BadArgumentError("claim_ttl is a number of seconds > 0")
    if options.key_budget == 0:
        raise BadArgumentError("key_budget is a number of seconds > 0 (None: no limit)")
    unknown = sorted(set(options.bench_options) - set(BENCH_DEFAULTS))
    if unknown:
        raise BadArgumentError(f"unknown bench options {unknown}; known: {sorted(BENCH_DEFAULTS)}")
    # The values too, by the bench's own rules, before anything runs.
    bench.check_settings(
        **{**BENCH_DEFAULTS, **options.bench_options, "budget": options.key_budget}
    )


def _count(what: str, value: object, least: int) -> None:
    if not is_int(value) or value < least:
        raise BadArgumentError(f"{what} is an integer >= {least}, got {value!r}")


def _probability(what: str, value: object) -> None:
    if not is_real(value) or not 0 < value < 1:
        raise BadArgumentError(f"{what} is a probability in (0, 1), got {value!r}")


def _seconds(what: str, value: object) -> None:
    if value is None:
        return
    if not is_real(value) or not 0 <= value < math.inf:
        raise BadArgumentError(f"{what} is a number of seconds >= 0, got {value!r}")
