"""The main job: tune the example workload on this device and say what the cache changed.

    report = tunecache.demo.demo()            # every model of tunecache.examples.MODELS
    for row in report.rows:
        print(row.model, row.heuristic_ms, row.tuned_ms, row.outcome)

Each model is tuned (`tunecache.tune.tune`, which keeps an entry only when the whole model gets
faster) into this device's cache, then run against its own heuristic in interleaved
back-to-back pairs to report the change with its confidence. A second demo on the same device
finds every key known, skips the guard over the same table, and only measures again: it takes
the time of the measurement, not of the tuning.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunecache import tune as _tune
from tunecache.errors import BadArgumentError

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = ["DemoReport", "DemoRow", "demo", "example_models"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class DemoRow:
    """One model: its time with the heuristic and with the cache, and what it decided."""

    model: str
    scenarios: int
    outcome: str  # "improved", "neutral" or "regressed" against the heuristic
    heuristic_ms: float | None
    tuned_ms: float | None
    #: heuristic time over tuned time, with its 99% interval (1.0 when nothing applies)
    speedup: float
    low: float
    high: float
    p_value: float
    pairs: int
    #: entries that serve this model's runs
    used: int
    #: entries this model validated (kept for it) and masked (refused for it)
    kept: int
    masked: int
    #: this session's tuning time, and what it did
    tune_seconds: float
    accepted: int
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class DemoReport:
    """Every model's row, the tuning reports behind them, and where the cache is."""

    rows: tuple[DemoRow, ...]
    reports: tuple[_tune.TuneReport, ...]
    database: str
    seconds: float

    def counts(self) -> dict[str, int]:
        counts = {"improved": 0, "neutral": 0, "regressed": 0}
        for row in self.rows:
            counts[row.outcome] += 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "rows": [r.as_dict() for r in self.rows],
            "counts": self.counts(),
            "reports": [r.as_dict() for r in self.reports],
            "seconds": self.seconds,
        }


def example_models(names: Sequence[str] | None = None) -> list[_tune.Model]:
    """The example workload's models (`tunecache.examples.MODELS`), or those named."""
    from tunecache import examples

    models: list[_tune.Model] = list(examples.MODELS)
    if not names:
        return models
    by_name = {m.name: m for m in models}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise BadArgumentError(
            f"no example model {', '.join(map(repr, unknown))}: "
            f"the examples are {', '.join(by_name)}"
        )
    return [by_name[n] for n in dict.fromkeys(names)]


def demo(
    models: Sequence[_tune.Model | Callable[..., object]] | None = None,
    *,
    cache: Cache | None = None,
    pairs: int = 20,
    alpha: float = 0.01,
    tune_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    **open_options: Any,
) -> DemoReport:
    """Tune `models` (by default the example workload) on this device and measure each one.

    The cache is this device's own (`tunecache.open(**open_options)`) unless `cache` is given.
    Every model is measured with `pairs` interleaved back-to-back pairs of runs, heuristic
    against cache, and classified at `alpha` (`tunecache.stats.classify`).
    """
    from tunecache.cache import Cache

    started = time.perf_counter()
    _tune.check_evaluate_options(pairs, alpha, tune_options)
    chosen = example_models() if models is None else [_tune.as_model(m) for m in models]
    if not chosen:
        raise BadArgumentError("the demo needs at least one model")
    store = cache if cache is not None else Cache.open(**open_options)
    try:
        result = _tune.evaluate(
            chosen,
            [],
            cache=store,
            pairs=pairs,
            alpha=alpha,
            tune_options=tune_options,
            progress=progress,
        )
        rows = []
        for model, report, measured in zip(chosen, result.reports, result.rows, strict=True):
            verdicts = store.verdicts(model.name, report.fingerprint)
            rows.append(
                DemoRow(
                    model=model.name,
                    scenarios=len(model.cases()),
                    outcome=measured.outcome,
                    heuristic_ms=measured.heuristic_ms,
                    tuned_ms=measured.cached_ms,
                    speedup=measured.speedup,
                    low=measured.low,
                    high=measured.high,
                    p_value=min(measured.p_faster, measured.p_slower),
                    pairs=measured.pairs,
                    used=measured.entries,
                    kept=sum(v == "validated" for v in verdicts.values()),
                    masked=sum(v == "masked" for v in verdicts.values()),
                    tune_seconds=report.seconds,
                    accepted=report.count("accepted"),
                    note=measured.note,
                )
            )
        return DemoReport(
            tuple(rows), result.reports, str(store.path), time.perf_counter() - started
        )
    finally:
        if cache is None:
            store.close()
