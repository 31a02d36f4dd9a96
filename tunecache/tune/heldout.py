"""The held-out protocol: tune on some models, then apply the shared cache, as it is, to others.

Every model of both groups is then run with the cache and with no table, in interleaved
back-to-back pairs, and classified improved / neutral / regressed against its heuristic
(`tunecache.stats.classify`). Held-out models are not validated first: the result says what
reuse gives before any model-specific judgement, and a held-out model this cache already judged
is refused, since nothing would be held out.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tunecache import accept, dispatch, stats
from tunecache.errors import BadArgumentError
from tunecache.resolve import DEFAULT_MAX_DISTANCE, Table, using
from tunecache.tune.model import Model, as_model
from tunecache.tune.options import check_evaluate_options, measure_alpha, measure_pairs
from tunecache.tune.reports import Evaluation, EvaluationRow, Progress
from tunecache.tune.runs import run_with, served, served_entries
from tunecache.tune.tuner import open_cache, tune

if TYPE_CHECKING:
    from tunecache.cache import Cache

__all__ = ["PAIRED_FIELDS", "check_held_out", "evaluate", "measure_model"]


def evaluate(
    tuned: Sequence[Model | Callable[..., object]],
    held_out: Sequence[Model | Callable[..., object]],
    *,
    cache: Cache | None = None,
    pairs: int | None = None,
    alpha: float | None = None,
    min_change: float = 0.0,
    tune_options: Mapping[str, Any] | None = None,
    max_distance: float = DEFAULT_MAX_DISTANCE,
    progress: Progress | None = None,
    **open_options: Any,
) -> Evaluation:
    """Tune on some models, then apply the shared cache, as it is, to held-out models.

    Every model (both groups) is then run `pairs` times with the cache and with no table, in
    interleaved back-to-back pairs (MEASURE_PAIRS when None), and classified improved / neutral
    / regressed against its heuristic by a paired test at `alpha` (the acceptance rule's
    default when None). Held-out
    models are not validated first: the report says what reuse gives before any model-specific
    judgement; a held-out model that already has verdicts in the cache is refused.
    """
    started = time.perf_counter()
    check_evaluate_options(pairs, alpha, tune_options)
    pairs, alpha = measure_pairs(pairs), measure_alpha(alpha)
    tuning = [as_model(model) for model in tuned]
    others = [as_model(model) for model in held_out]
    names = [model.name for model in tuning + others]
    if len(set(names)) != len(names):
        raise BadArgumentError(f"models need distinct names, got {names}")
    store, owned = open_cache(cache, open_options)
    try:
        check_held_out(store, others)
        reports = [
            tune(
                model,
                cache=store,
                max_distance=max_distance,
                progress=progress,
                **dict(tune_options or {}),
            )
            for model in tuning
        ]
        fingerprints = {report.model: report.fingerprint for report in reports}
        rows = []
        groups = [("tuned", model) for model in tuning] + [("held-out", model) for model in others]
        for done, (group, model) in enumerate(groups):
            if progress is not None:
                progress("measuring", done, len(groups))
            table = Table.open(
                path=store.path,
                device=store.device,
                model=model.name,
                fingerprint=fingerprints.get(model.name),
                scenarios=model.scenarios,
                max_distance=max_distance,
            )
            rows.append(measure_model(model, group, table, pairs, alpha, min_change))
        if progress is not None:
            progress("measuring", len(groups), len(groups))
        return Evaluation(tuple(rows), tuple(reports), time.perf_counter() - started)
    finally:
        if owned:
            store.close()


def check_held_out(cache: Cache, held_out: Sequence[Model]) -> None:
    """Refuse held-out models the cache already has verdicts of: they would not be held out."""
    for model in held_out:
        if cache.verdicts(model.name):
            raise BadArgumentError(
                f"held-out model {model.name!r} was already tuned or validated in {cache.path}: "
                "nothing would be held out; evaluate in a fresh cache (a new root: --root DIR "
                "on the command line)"
            )


#: the fields of a paired comparison (stats.Comparison) an EvaluationRow reports
PAIRED_FIELDS = ("speedup", "low", "high", "p_faster", "p_slower", "pairs")


def measure_model(
    model: Model, group: str, table: Table, pairs: int, alpha: float, min_change: float
) -> EvaluationRow:
    """One model's row: `pairs` paired runs with no table against `table`, classified at
    `alpha` (neutral, unmeasured, when the table serves the model no entry)."""
    cases = model.cases()
    entries: set[int] = set()
    for case in cases:
        with dispatch.profile(capture=True) as profiled, using(table):
            model.run(**case)
        entries |= served_entries(served(table, profiled))
    if not entries:
        # The cache answers nothing for this model: both sides would run the same code.
        return EvaluationRow(
            model.name, group, "neutral", None, None, 1.0, 1.0, 1.0, 1.0, 1.0, 0, 0,
            note="no entry applies",
        )  # fmt: skip
    heuristic_times, cached_times = accept.measure(
        run_with(model, Table.empty(), cases),
        run_with(model, table, cases),
        pairs=pairs,
        sync=model.sync,
    )
    comparison = stats.compare(heuristic_times, cached_times, alpha=alpha)
    # The paired test's own figures, which the row keeps under the same names.
    paired = {name: getattr(comparison, name) for name in PAIRED_FIELDS}
    return EvaluationRow(
        model=model.name,
        group=group,
        outcome=stats.classify(comparison, alpha=alpha, min_change=min_change),
        heuristic_ms=statistics.median(heuristic_times) * 1e3,
        cached_ms=statistics.median(cached_times) * 1e3,
        entries=len(entries),
        **paired,
    )
