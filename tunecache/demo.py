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

from tunecache import tune
from tunecache.errors import BadArgumentError
from tunecache.tune.reports import PlainRow, count_outcomes

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = ["DemoReport", "DemoRow", "demo", "example_models"]


@dataclass(frozen=True)
class DemoRow(PlainRow):
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


@dataclass(frozen=True)
class DemoReport:
    """Every model's row, the tuning reports behind them, and where the cache is."""

    rows: tuple[DemoRow, ...]
    reports: tuple[tune.TuneReport, ...]
    database: str
    seconds: float

    def counts(self) -> dict[str, int]:
        """How many models had each outcome against their heuristic."""
        return count_outcomes(row.outcome for row in self.rows)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values: the rows, their counts, and the tuning reports."""
        return {
            "database": self.database,
            "rows": [row.as_dict() for row in self.rows],
            "counts": self.counts(),
            "reports": [report.as_dict() for report in self.reports],
            "seconds": self.seconds,
        }


def example_models(names: Sequence[str] | None = None) -> list[tune.Model]:
    """The example workload's models (`tunecache.examples.MODELS`), or those named."""
    from tunecache import examples

    models: list[tune.Model] = list(examples.MODELS)
    if not names:
        return models
    by_name = {model.name: model for model in models}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise BadArgumentError(
            f"no example model {', '.join(map(repr, unknown))}: "
            f"the examples are {', '.join(by_name)}"
        )
    return [by_name[name] for name in dict.fromkeys(names)]


def demo(
    models: Sequence[tune.Model | Callable[..., object]] | None = None,
    *,
    cache: Cache | None = None,
    pairs: int | None = None,
    alpha: float | None = None,
    tune_options: Mapping[str, Any] | None = None,
    progress: tune.Progress | None = None,
    **open_options: Any,
) -> DemoReport:
    """Tune `models` (by default the example workload) on this device and measure each one.

    The cache is this device's own (`tunecache.open(**open_options)`) unless `cache` is given.
    Every model is measured with `pairs` (tunecache.tune.MEASURE_PAIRS when None) interleaved
    back-to-back pairs of runs, heuristic
    against cache, and classified at `alpha` (`tunecache.stats.classify`; the acceptance
    rule's default when None).
    """
    from tunecache.cache import Cache

    started = time.perf_counter()
    tune.check_evaluate_options(pairs, alpha, tune_options)
    chosen = example_models() if models is None else [tune.as_model(model) for model in models]
    if not chosen:
        raise BadArgumentError("the demo needs at least one model")
    store = cache if cache is not None else Cache.open(**open_options)
    try:
        result = tune.evaluate(
            chosen, [], cache=store, pairs=pairs, alpha=alpha, tune_options=tune_options,
            progress=progress,
        )  # fmt: skip
        rows = [
            _row(model, report, measured, store.verdicts(model.name, report.fingerprint))
            for model, report, measured in zip(chosen, result.reports, result.rows, strict=True)
        ]
        return DemoReport(
            tuple(rows), result.reports, str(store.path), time.perf_counter() - started
        )
    finally:
        if cache is None:
            store.close()


def _row(
    model: tune.Model,
    report: tune.TuneReport,
    measured: tune.EvaluationRow,
    verdicts: Mapping[int, str],
) -> DemoRow:
    """One model's demo row, from its tuning report, its measurement and its verdicts."""
    return DemoRow(
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
        kept=sum(verdict == "validated" for verdict in verdicts.values()),
        masked=sum(verdict == "masked" for verdict in verdicts.values()),
        tune_seconds=report.seconds,
        accepted=report.count("accepted"),
        note=measured.note,
    )
