"""The subcommands that tune and measure: tune, demo and evaluate."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tunecache.cli import render, sharing
from tunecache.cli.device import open_cache
from tunecache.cli.exits import UsageError
from tunecache.cli.options import TUNE, option_values
from tunecache.cli.usercode import spec_roots, user_code
from tunecache.errors import BadArgumentError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["cmd_tune", "cmd_demo", "cmd_evaluate", "complete"]


def _load_models(spec: str) -> list[Any]:
    """The models a MODULE:ATTR or FILE.py:ATTR spec names: a Model, a callable, or a list or
    dict of them."""
    from tunecache import tune
    from tunecache.tune.loading import load_module

    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise UsageError(f"a model is named MODULE:ATTR or FILE.py:ATTR, got {spec!r}")
    value: Any = load_module(where, "_tunecache_models_", cannot_import=True)
    for part in attr.split("."):
        if not hasattr(value, part):
            raise BadArgumentError(f"{where!r} has no attribute {attr!r}")
        value = getattr(value, part)
    if isinstance(value, dict):
        return [tune.as_model(v, name=str(k)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [tune.as_model(v) for v in value]
    return [tune.as_model(value, name=attr)]


def _tune_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The tuner's settings the options give, as tune.tune takes them; one not given is left
    out, so the tuner's own default holds."""
    return {name: value for name, value in option_values(args, TUNE).items() if value is not None}


def _measuring(args: argparse.Namespace, cache: Any, progress: Any) -> dict[str, Any]:
    """What the demo and an evaluation take beside their models: the cache, the measurement's
    pairs and alpha, the tuner's settings and the progress callback."""
    return {
        "cache": cache,
        "pairs": args.measure_pairs,
        "alpha": args.alpha,
        "tune_options": _tune_kwargs(args),
        "progress": progress,
    }


# --- tune --------------------------------------------------------------------------------------


def _print_tune(console: Console, report: Any) -> None:
    """One model's tuning report: each heavy key's fate, the counts, and the final guard."""
    title = f"{report.model} (fingerprint {report.fingerprint}, {len(report.scenarios)} scenarios)"
    columns = ("key", "share", "action", "runs", "heuristic", "change", "p", "pairs")
    keys = render.table(title, *columns, rows=map(_key_cells, report.keys))
    console.print(keys)
    counts = {a: report.count(a) for a in ("accepted", "validated", "masked", "rejected")}
    if report.count("budget cut"):
        counts["budget cut"] = report.count("budget cut")
    console.print(
        f"{len({k.key for k in report.keys})} heavy keys, {report.screened} screened out; "
        + ", ".join(f"{n} {a}" for a, n in counts.items())
    )
    for outcome in report.keys:
        for line in _refusals(outcome):
            console.print(line, highlight=False)
    console.print(_guard_line(report))
    if report.interrupted:
        console.print("interrupted: what was accepted before is stored")
    elif report.budget_spent:
        console.print("the time budget ran out: some keys were skipped")
    waited = (
        f" ({report.waited:.1f} s of it waiting for other tuners)" if report.waited >= 0.05 else ""
    )
    console.print(f"{report.seconds:.1f} s, run {report.run_id}{waited}")


def _refusals(outcome: Any) -> list[str]:
    """What a key's bench refused or doubted, a line each: wrong outputs, calls too slow for
    the key's budget, and stored evidence benched again."""
    lines = []
    if outcome.wrong:
        lines.append(f"{outcome.key}: wrong output, never benched: {', '.join(outcome.wrong)}")
    if outcome.too_slow:
        names = ", ".join(outcome.too_slow)
        lines.append(f"{outcome.key}: one call outlasted the key's budget: {names}")
    if outcome.doubt:
        lines.append(f"{outcome.key}: {outcome.doubt}")
    return lines


def _key_cells(outcome: Any) -> list[str]:
    """One heavy key as a row: its share, what became of it, and its paired verdict."""
    verdict = outcome.verdict
    return [
        outcome.key,
        f"{outcome.share * 100:.1f}%",
        outcome.action,
        outcome.choice,
        outcome.heuristic,
        render.change(verdict.speedup) if verdict else "-",
        f"{verdict.p_value:.3g}" if verdict else "-",
        f"{verdict.rounds} ({verdict.confirmations}/{verdict.needed})" if verdict else "-",
    ]


def _guard_line(report: Any) -> str:
    """What the final guard (no table against the whole table) said, in one line."""
    if report.guard_error:
        return (
            f"final guard: a run with this table raised {report.guard_error}; "
            "every entry it used is masked for the model"
        )
    if report.guard_skipped:
        return "final guard: passed in an earlier session over this same table"
    if report.guard_left_to:
        return (
            f"final guard: not run, another tuner ({report.guard_left_to}) still ran its guard "
            "over this model when the claim wait ended"
        )
    if report.guard is None:
        return "final guard: not needed, the model uses no entry (it runs its heuristic)"
    guard = report.guard
    word = "kept" if guard.accepted else "dropped (every entry it used is masked for it)"
    return (
        f"final guard, no table vs this table: {render.change(guard.speedup)} "
        f"[{render.change(guard.high)}, {render.change(guard.low)}], p={guard.p_value:.3g}, "
        f"{guard.confirmations}/{guard.needed} blocks: table {word}"
    )


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune models on this device: profile, screen heavy keys, bench their candidates, accept
    an entry only when the whole model gets faster (paired runs), and write it to the cache.
    MODEL is MODULE:ATTR or FILE.py:ATTR naming a tunecache.tune.Model, a callable, or a list or
    dict of them. Ctrl-C keeps what was accepted (exit 130); an exception from the model's own
    code is reported with its type, message and line (exit 9). With --pending, it benches
    this device's pending keys instead (tunecache pending). An identical tune command started
    while one runs on this host waits for it and reports its session, unless --alone."""
    if args.pending:
        from tunecache.cli.commands.offline import tune_pending

        return tune_pending(args)
    if not args.model:
        raise UsageError("tune needs a MODEL (MODULE:ATTR or FILE.py:ATTR), or --pending")
    # Before the tuner is imported: a command that shares another's session needs none of it.
    gate = sharing.gate(args)
    if gate is None:
        return _tune(args, None)
    try:
        if not gate.take():
            by = gate.holder()
            print(
                f"tunecache: an identical tune command runs on this host"
                f"{f' ({by})' if by else ''}: waiting to report its session (--alone: not)",
                file=sys.stderr,
            )
            if gate.wait():
                found = gate.result()
                if found is not None:
                    _emit_shared(args, found)
                    return 0
                gate.own()
        return _tune(args, gate)
    finally:
        gate.release()


def _tune(args: argparse.Namespace, gate: sharing.Gate | None) -> int:
    """Tune the models of `args` in a session of this command's own; where it holds the
    `gate` of its request, publish its output for the identical commands waiting there (a
    command whose wait outlasted the gate's limit holds none, and tunes beside the other,
    whose session it then waits for as any tuner would). What it waited at the gate is taken
    off the first model's --budget."""
    from tunecache import tune

    # Every option is checked before a model is loaded or the cache is opened.
    tune.check_tune_options(_tune_kwargs(args))
    models = [m for spec in args.model for m in _load_models(spec)]
    roots = spec_roots(args.model)
    reports = []
    with open_cache(args) as cache, render.progress(args) as progress:
        for number, model in enumerate(models):
            options = _tune_kwargs(args)
            if number == 0 and gate is not None and "budget" in options:
                # The wait at the gate was the first session's, as a wait inside it would be.
                options["budget"] = max(0.0, options["budget"] - gate.waited)
            try:
                with user_code(f"model {model.name!r}", roots):
                    report = tune.tune(model, cache=cache, progress=progress, **options)
            except tune.TuneInterrupted as stop:
                reports.append(stop.report)
                _emit_tune(args, reports)
                raise
            reports.append(report)
        database, device = cache.path, cache.device.fingerprint
        shared = gate is not None and gate.held and complete(reports)
        # The mark as the session left the store, before anything is printed (a pipe may hold
        # the output up while another process writes).
        mark = sharing.change_mark(database, device) if shared else None
    _emit_tune(args, reports)
    if gate is not None and mark is not None:
        gate.publish(_output(args, reports), database, device, mark)
    return 0


def complete(reports: list[Any]) -> bool:
    """Whether reports can be shared: every session did all it would have done, whoever ran
    it (no budget ran out, no key or guard left to another tuner that outlasted the wait)."""
    return not any(r.budget_spent or r.guard_left_to or r.count("skipped") for r in reports)


def _emit_tune(args: argparse.Namespace, reports: list[Any]) -> None:
    """The tuning reports so far, as JSON or one table a model."""
    if args.json:
        render.print_json(_output(args, reports))
        return
    console = render.console()
    for report in reports:
        _print_tune(console, report)


def _output(args: argparse.Namespace, reports: list[Any]) -> Any:
    """What `_emit_tune` prints, as JSON holds it (the reports' dicts, each with its
    `shared_from`, null: its own session; or the text, as off a terminal), for identical
    commands to share."""
    if args.json:
        return [{**report.as_dict(), "shared_from": None} for report in reports]
    text = io.StringIO()
    plain = render.console(file=text)
    for report in reports:
        _print_tune(plain, report)
    return text.getvalue()


def _emit_shared(args: argparse.Namespace, found: dict[str, Any]) -> None:
    """Print the output of the identical command whose session this one shares (`found`, its
    result): the JSON reports with `shared_from` naming it, or its text under a line saying
    whose it is."""
    by = found.get("by") or "another process"
    output = found["output"]
    if args.json:
        render.print_json([{**report, "shared_from": by} for report in output])
        return
    print(
        f"the session of an identical tune command ({by}), which ran while this one waited; "
        "nothing was written to the store since:"
    )
    sys.stdout.write(output)


# --- demo and evaluate: each model against its heuristic ---------------------------------------


def _against_heuristic(row: Any, cached_ms: float | None, p: float) -> list[str]:
    """A model's cells against its heuristic: both times, the change, its interval and p."""
    return [
        render.num(row.heuristic_ms),
        render.num(cached_ms),
        *render.paired(row.pairs, row.speedup, row.low, row.high, p),
    ]


def _outcome(row: Any) -> str:
    """A row's outcome, with its note if it has one."""
    return str(row.outcome) + (f" ({row.note})" if row.note else "")


def _print_against(
    title: str, columns: Sequence[str], rows: Iterable[list[str]], summary: Sequence[str]
) -> None:
    """A table of models against their heuristics, then the lines that sum it up."""
    console = render.console()
    console.print(render.table(title, *columns, rows=rows))
    for line in summary:
        console.print(line)


def _demo_cells(row: Any) -> list[str]:
    """One example model as a row: its times, what it uses, keeps and masks, and its tuning."""
    return [
        row.model,
        str(row.scenarios),
        *_against_heuristic(row, row.tuned_ms, row.p_value),
        str(row.used),
        str(row.kept),
        str(row.masked),
        f"{row.accepted} in {row.tune_seconds:.1f} s",
        _outcome(row),
    ]


def _print_demo(report: Any) -> None:
    """The demo's table: each example model, the cache against its heuristic."""
    counts = report.counts()
    _print_against(
        "the example models on this device: the cache against each model's heuristic",
        (
            "model", "scenarios", "heuristic ms", "tuned ms", "change", "99% interval", "p",
            "entries used", "kept", "masked", "tuned now", "outcome",
        ),
        map(_demo_cells, report.rows),
        [
            f"{counts['improved']} improved, {counts['neutral']} neutral, "
            f"{counts['regressed']} regressed; {report.seconds:.1f} s",
            f"the decisions: sqlite3 {report.database} 'select * from decisions'",
        ],
    )  # fmt: skip


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: tune every example model (tunecache.examples: real numpy convolutions,
    matrix chains, BLAS thread counts) on this device, into its cache, then measure each model
    against its heuristic in paired runs. A second run finds everything tuned and only
    measures. Ctrl-C keeps what was accepted (exit 130)."""
    from tunecache import demo, tune

    models = demo.example_models(args.model)
    # Every option is checked before the cache is opened or a word is printed.
    tune.check_evaluate_options(args.measure_pairs, args.alpha, _tune_kwargs(args))
    with open_cache(args) as cache, render.progress(args) as progress:
        if not args.json:
            render.console(stderr=True).print(
                f"tuning {len(models)} example models into {cache.path}", highlight=False
            )
        report = demo.demo(models, **_measuring(args, cache, progress))
    render.emit(args, report, _print_demo)
    return 0


def _evaluation_cells(row: Any) -> list[str]:
    """One model of an evaluation as a row: its group, times, pairs and the entries it used."""
    return [
        row.model,
        row.group,
        *_against_heuristic(row, row.cached_ms, min(row.p_faster, row.p_slower)),
        str(row.pairs),
        str(row.entries),
        _outcome(row),
    ]


def _print_evaluation(result: Any) -> None:
    """The held-out table: every model against its heuristic, then the counts per group."""
    groups = {group: result.counts(group) for group in ("tuned", "held-out")}
    _print_against(
        "held-out evaluation: the shared cache against each model's heuristic",
        (
            "model", "group", "heuristic ms", "cached ms", "change", "99% interval", "p", "pairs",
            "entries", "outcome",
        ),
        map(_evaluation_cells, result.rows),
        [
            *(
                f"{group}: {counts['improved']} improved, {counts['neutral']} neutral, "
                f"{counts['regressed']} regressed"
                for group, counts in groups.items()
            ),
            f"{result.seconds:.1f} s",
        ],
    )  # fmt: skip


@contextlib.contextmanager
def _evaluation_store(args: argparse.Namespace, examples: bool) -> Iterator[Any]:
    """The cache an evaluation runs in: the one the options name, or, for the example models
    with no --root or --db, a fresh temporary one (the demo may have tuned the held-out half in
    this device's own cache, and then nothing would be held out)."""
    if not examples or args.root is not None or args.db is not None:
        with open_cache(args) as cache:
            yield cache
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tunecache-evaluate-") as root:
        args.root = root
        if not args.json:
            render.console(stderr=True).print(
                f"the example models, in a fresh cache under {root} (removed afterwards)",
                highlight=False,
            )
        with open_cache(args) as cache:
            yield cache


def cmd_evaluate(args: argparse.Namespace) -> int:
    """The held-out protocol: tune on the --tune models, apply the shared cache as it is to the
    --held-out models, and report every model improved / neutral / regressed against its
    heuristic, from paired end-to-end runs. With no models named, it runs on the example
    workload (tunecache.examples.TUNED and HELD_OUT) in a fresh temporary cache, unless --root
    or --db names one."""
    from tunecache import tune

    tune.check_evaluate_options(args.measure_pairs, args.alpha, _tune_kwargs(args))
    examples = not args.tune and not args.held_out
    if examples:
        from tunecache import examples as workload

        tuned, held = list(workload.TUNED), list(workload.HELD_OUT)
    elif not args.tune:
        raise UsageError("--held-out needs at least one --tune model to build the cache from")
    else:
        tuned = [m for spec in args.tune for m in _load_models(spec)]
        held = [m for spec in args.held_out for m in _load_models(spec)]
    roots = () if examples else spec_roots([*args.tune, *args.held_out])
    with (
        _evaluation_store(args, examples) as cache,
        render.progress(args) as progress,
        user_code("a model being evaluated", roots),
    ):
        # tune.evaluate refuses a held-out model this cache already has verdicts of.
        result = tune.evaluate(tuned, held, **_measuring(args, cache, progress))
    render.emit(args, result, _print_evaluation)
    return 0
