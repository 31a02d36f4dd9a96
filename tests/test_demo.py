"""The main job: `tunecache demo` tunes models, measures each against its heuristic, and a
second run only measures; `tunecache evaluate` defaults to the example workload.

The library tests use the tests' tiny models (tests/tune_models.py: a 20x faster row norm), so
what is written is known without asserting any time; the command-line tests run one real
example model from tunecache.examples.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests import tune_models as tm
from tunecache import cli, demo
from tunecache.cache import Cache
from tunecache.errors import BadArgumentError
from tunecache.tune import Model


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_tunes_measures_and_counts_what_each_model_kept(cache: Cache) -> None:
    report = demo.demo([tm.ENCODER, tm.PROJECTOR], cache=cache, pairs=20)

    rows = {r.model: r for r in report.rows}
    assert list(rows) == ["encoder", "projector"]
    encoder = rows["encoder"]
    # The row norm's vectorized candidate is accepted, kept by the encoder, and serves it.
    assert encoder.accepted >= 1 and encoder.kept >= 1 and encoder.used >= 1
    # About 20x faster: the paired estimate says so; the classification at alpha 0.01 can
    # lose a pair or two to a scheduler hiccup on a busy machine, but never calls it slower.
    assert encoder.outcome != "regressed" and encoder.speedup > 2 and encoder.pairs == 20
    assert encoder.heuristic_ms is not None and encoder.tuned_ms is not None
    assert encoder.low <= encoder.speedup <= encoder.high
    # Every entry the encoder keeps is one it validated, as the store says.
    assert encoder.kept == sum(v == "validated" for v in cache.verdicts("encoder").values())
    # The projector's ops have nothing faster: it keeps its heuristic, and nothing is measured.
    projector = rows["projector"]
    assert projector.used == 0 and projector.outcome == "neutral" and projector.pairs == 0
    assert report.counts()["regressed"] == 0
    assert report.database == str(cache.path)
    json.dumps(report.as_dict())


def test_a_second_demo_tunes_nothing_and_only_measures(cache: Cache) -> None:
    first = demo.demo([tm.ENCODER], cache=cache, pairs=8)
    entries = cache.count()

    # rebench=0: on a loaded machine the tiny bias op's bench may well be unstable, and a
    # second session would bench it again (tunecache.tune.doubt); here nothing may be doubted.
    second = demo.demo([tm.ENCODER], cache=cache, pairs=8, tune_options={"rebench": 0})

    (report,) = second.reports
    assert first.rows[0].accepted >= 1 and second.rows[0].accepted == 0
    assert {k.action for k in report.keys} <= {"known", "kept"}
    assert report.guard_skipped
    assert cache.count() == entries
    assert second.rows[0].speedup > 2 and second.rows[0].kept == first.rows[0].kept


def test_demo_refuses_bad_options_before_writing(cache: Cache) -> None:
    with pytest.raises(BadArgumentError):
        demo.demo([], cache=cache)
    with pytest.raises(BadArgumentError, match="pairs"):
        demo.demo([tm.ENCODER], cache=cache, pairs=1)
    # alpha None is the acceptance rule's default, 0.01: six pairs can never reach it.
    with pytest.raises(BadArgumentError, match="measure at least 7"):
        demo.demo([tm.ENCODER], cache=cache, pairs=6, alpha=None)
    with pytest.raises(BadArgumentError, match="no example model 'nope'"):
        demo.example_models(["nope"])
    assert cache.count() == 0


def test_the_example_models_are_the_default(cache: Cache) -> None:
    from tunecache import examples

    assert [m.name for m in demo.example_models()] == [m.name for m in examples.MODELS]
    first = examples.MODELS[0].name
    assert [m.name for m in demo.example_models([first, first])] == [first]


@pytest.mark.slow
def test_cli_demo_leaves_decisions_plain_sql_reads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tunecache import examples

    db = str(tmp_path / "demo.db")
    # The regression chains: one scenario, about 13 ms a run, and a chain order far faster
    # than left to right, so the demo has something to accept.
    name = "regression"
    code, out, err = _cli(
        capsys, "demo", "--model", name, "--db", db, "--measure-pairs", "7", "--json"
    )

    assert code == 0, err
    report = json.loads(out)
    assert [r["model"] for r in report["rows"]] == [name]
    assert report["database"] == db
    (row,) = report["rows"]
    assert row["outcome"] in ("improved", "neutral", "regressed")
    rows = sqlite3.connect(db).execute("select key, choice, status from decisions").fetchall()
    assert rows, "the demo wrote no evidence"
    legal = {c for m in examples.MODELS for c in _candidates(m)}
    assert {choice for _, choice, _ in rows} <= legal

    code, out, err = _cli(capsys, "demo", "--model", name, "--db", db, "--measure-pairs", "7")
    assert code == 0, err
    assert name in out and "select * from decisions" in out and "tuned ms" in out


def test_cli_demo_names_an_unknown_model_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _out, err = _cli(capsys, "demo", "--model", "nope", "--db", str(tmp_path / "x.db"))
    assert code == 2
    assert err.startswith("tunecache: error: no example model 'nope'") and err.count("\n") == 1
    assert not (tmp_path / "x.db").exists() or sqlite3.connect(tmp_path / "x.db").execute(
        "select count(*) from decisions"
    ).fetchone() == (0,)


def test_cli_evaluate_refuses_held_out_models_already_tuned_in_the_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "tuned.db")
    assert _cli(capsys, "tune", "tests.tune_models:SCORER", "--db", db, "--json")[0] == 0
    code, _out, err = _cli(
        capsys, "evaluate", "--tune", "tests.tune_models:ENCODER",
        "--held-out", "tests.tune_models:SCORER", "--db", db,
    )  # fmt: skip
    assert code == 2 and "held-out model 'scorer' was already tuned" in err
    with pytest.raises(SystemExit) as usage:
        cli.main(["evaluate", "--held-out", "tests.tune_models:SCORER"])
    assert usage.value.code == 64
    assert "--held-out needs at least one --tune" in capsys.readouterr().err


def _candidates(m: Model) -> set[str]:
    from tunecache import dispatch

    names: set[str] = set()
    with dispatch.profile(capture=True) as p:
        for case in m.cases():
            m.run(**case)
    for captured in p.captured().values():
        names |= set(captured.op.candidates)
    return names


@pytest.mark.parametrize(
    "options",
    [["--share", "2"], ["--measure-pairs", "1"], ["--alpha", "2"], ["--pairs", "1"]],
)
def test_cli_demo_refuses_bad_options_in_one_line_before_opening_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, options: list[str]
) -> None:
    db = tmp_path / "never.db"
    code, out, err = _cli(capsys, "demo", "--model", "regression", "--db", str(db), *options)
    assert code == 2 and out == ""
    assert err.startswith("tunecache: error: ") and err.count("\n") == 1
    assert not db.exists()
