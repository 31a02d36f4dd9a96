"""Op-level tuning (tunecache.tune.ops): an op's candidates benched at given shapes, without a
model, on real numpy kernels; the evidence stored as unvalidated (served with use="all", or once
a model validates it), never rewriting a model's decision; `tunecache tune-op` on the command
line, with the op's own exceptions reported as the user's (exit 9).
"""

from __future__ import annotations

import importlib
import json
import platform
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunecache
from tests.tune.support import lock_seen
from tunecache import cli, tune
from tunecache.cache import Cache
from tunecache.cli.exits import EXIT_USER_CODE
from tunecache.device import Device
from tunecache.errors import BadArgumentError
from tunecache.resolve import Table

#: how many times each chain candidate ran
CALLS: dict[str, int] = {"left": 0, "right": 0, "off_by_one": 0}


def _dims(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[int, int, int, int]:
    return (a.shape[0], a.shape[1], b.shape[1], c.shape[1])


@tunecache.tunable("opschain", dims=("m", "k", "n", "p"), shape=_dims)
def left(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """What `a @ b @ c` does: (a @ b) @ c, far slower for a thin c."""
    CALLS["left"] += 1
    return (a @ b) @ c


@left.candidate("right")
def _right(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    CALLS["right"] += 1
    return a @ (b @ c)


@left.candidate("off_by_one")
def _off_by_one(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    # Faster than the heuristic and wrong: never chosen.
    CALLS["off_by_one"] += 1
    return a @ (b @ c) + 1.0


@left.inputs
def _chain_inputs(m: int, k: int, n: int, p: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    return (rng.random((m, k)), rng.random((k, n)), rng.random((n, p)))


@tunecache.tunable("opsplain", dims=("m",), shape=lambda x: (x.shape[0],))
def plain(x: np.ndarray) -> np.ndarray:
    """An op with no input maker."""
    return x * 2


THIN = {"m": 300, "k": 300, "n": 300, "p": 1}


def _key() -> tunecache.Key:
    return left.key(*_chain_inputs(**THIN))


def test_an_op_is_benched_at_a_shape_and_its_evidence_stored_unvalidated(cache: Cache) -> None:
    report = tune.ops(left, [THIN], cache=cache)
    (outcome,) = report.keys
    assert outcome.action == "benched" and outcome.key == _key().text
    assert outcome.choice == "right" and outcome.heuristic == "left"
    assert outcome.wrong == ("off_by_one",)
    assert outcome.speedup is not None and outcome.speedup > 1
    entry = cache.get(_key(), candidates=left.candidates)
    assert entry is not None and entry.status == "unvalidated" and entry.choice == "right"
    record = cache.record(entry)
    assert record is not None and record.settings["checked"]
    # Served to tables that take everything, and to no other until a model validates it.
    everything = Table.open(path=cache.path, device=cache.device, use="all")
    assert everything.resolve(_key(), left.candidates, "left").choice == "right"
    validated = Table.open(path=cache.path, device=cache.device)
    assert validated.resolve(_key(), left.candidates, "left").source == "heuristic"


def test_a_second_run_reuses_the_evidence_and_retune_benches_again(cache: Cache) -> None:
    tune.ops(left, [THIN], cache=cache)
    before = dict(CALLS)
    (kept,) = tune.ops(left, [THIN], cache=cache).keys
    assert kept.action == "kept" and kept.choice == "right"
    assert before == CALLS  # no candidate called: the stored record stood
    (again,) = tune.ops(left, [THIN], cache=cache, retune=True).keys
    assert again.action == "benched" and CALLS["right"] > before["right"]


def test_a_models_decision_is_never_rewritten(cache: Cache) -> None:
    cache.put(
        _key(), choice="left", candidates=left.candidates, heuristic="left", status="rejected"
    )
    (outcome,) = tune.ops(left, [THIN], cache=cache).keys
    assert outcome.action == "known" and outcome.choice == "left"
    entry = cache.get(_key(), candidates=left.candidates)
    assert entry is not None and entry.status == "rejected" and entry.choice == "left"


def test_a_model_validates_op_level_evidence_without_benching_again(cache: Cache) -> None:
    tune.ops(left, [THIN], cache=cache)
    data = _chain_inputs(**THIN)

    def run() -> None:
        for _ in range(5):
            left(*data)

    report = tune.tune(tune.Model("opsmodel", run=run), cache=cache)
    (outcome,) = [k for k in report.keys if k.key == _key().text]
    assert outcome.action == "accepted" and outcome.bench_stopped == "stored"
    served = Table.open(path=cache.path, device=cache.device)
    assert served.resolve(_key(), left.candidates, "left").choice == "right"


def test_bad_shapes_and_ops_without_inputs_are_one_line_and_write_nothing(
    device: Device, tmp_path: Path
) -> None:
    root = tmp_path / "nothing"
    with pytest.raises(BadArgumentError, match=r"declares no input maker \(@op.inputs\)"):
        tune.ops(plain, [{"m": 3}], device=device, root=root)
    off = tunecache.Tunable(
        "opsoff", dims=("m",), shape=lambda x: (x.shape[0],), candidates={"a": abs},
        heuristic="a", register=False,
    )  # fmt: skip
    off.inputs(lambda m: (np.ones(m + 1),))
    with pytest.raises(BadArgumentError, match="resolve opsoff_m4, not those dims"):
        tune.ops(off, [{"m": 3}], device=device, root=root)
    with pytest.raises(BadArgumentError, match="at least one shape"):
        tune.ops(left, [], device=device, root=root)
    assert not root.exists()


# -- the command line ------------------------------------------------------------------------

OPS_FILE = """
    import numpy as np
    import tunecache

    @tunecache.tunable("clichain", dims=("m", "k", "n", "p"),
                       shape=lambda a, b, c: (a.shape[0], a.shape[1], b.shape[1], c.shape[1]))
    def left(a, b, c):
        return (a @ b) @ c

    @left.candidate("right")
    def _(a, b, c):
        return a @ (b @ c)

    @left.inputs
    def _(m, k, n, p):
        if m == 13:
            raise ValueError("thirteen is unlucky")
        rng = np.random.default_rng(0)
        return (rng.random((m, k)), rng.random((k, n)), rng.random((n, p)))

    @tunecache.tunable("clino", dims=("m",), shape=lambda x: (x.shape[0],))
    def bare(x):
        return x
"""


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def ops_file(tmp_path: Path) -> str:
    path = tmp_path / "my_ops.py"
    path.write_text(textwrap.dedent(OPS_FILE))
    return str(path)


DEVICE = ("--client", "opsclient", "--client-version", "1", "--threads", "1")


def test_cli_tune_op_benches_and_writes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, ops_file: str
) -> None:
    db = str(tmp_path / "cli.db")
    code, out, err = _cli(
        capsys, "tune-op", f"{ops_file}:left", "--shape", "m=300,k=300,n=300,p=1",
        "--db", db, "--json", *DEVICE,
    )  # fmt: skip
    assert code == 0, err
    (row,) = json.loads(out)["keys"]
    assert row["action"] == "benched" and row["choice"] == "right"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT key, choice, status FROM decisions").fetchall() == [
            ("clichain_m300_k300_n300_p1", "right", "unvalidated")
        ]
    code, out, _ = _cli(
        capsys,
        "tune-op",
        f"{ops_file}:left",
        "--shape",
        "m=300,k=300,n=300,p=1",
        "--db",
        db,
        *DEVICE,
    )
    assert code == 0 and "kept" in out


def test_cli_tune_op_says_what_is_wrong_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, ops_file: str
) -> None:
    db = tmp_path / "cli.db"
    code, _, err = _cli(
        capsys, "tune-op", f"{ops_file}:bare", "--shape", "m=3", "--db", str(db), *DEVICE
    )
    assert code not in (0, 70) and "declares no input maker" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = _cli(capsys, "tune-op", f"{ops_file}:left", "--db", str(db), *DEVICE)
    assert code == 64 and "--shape" in err
    code, _, err = _cli(
        capsys, "tune-op", f"{ops_file}:nothing", "--shape", "m=1", "--db", str(db), *DEVICE
    )
    assert code not in (0, 70) and "has no attribute 'nothing'" in err


def test_cli_tune_op_reports_the_ops_own_exception_as_the_users(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, ops_file: str
) -> None:
    code, _, err = _cli(
        capsys, "tune-op", f"{ops_file}:left", "--shape", "m=13,k=2,n=2,p=2",
        "--db", str(tmp_path / "cli.db"), *DEVICE,
    )  # fmt: skip
    assert code == EXIT_USER_CODE
    assert "ValueError: thirteen is unlucky" in err and "my_ops.py" in err


def test_a_key_another_tuner_claims_is_waited_for_and_what_it_wrote_kept(
    cache: Cache, cache_at: Any
) -> None:
    # The other tuner is a real process holding the key's claim (tests/tune/claims_child.py);
    # what it "writes" is a model's accepted entry, put while this session waits for it.
    from tests.tune.claims_child import spawn

    key = _key()
    before = dict(CALLS)
    with spawn("hold", str(cache.path), key.text) as (child, out):
        assert out.readline().startswith("claimed")
        told: list[str] = []

        def progress(what: str, done: int, total: int) -> None:
            if what.startswith("waiting for"):
                told.append(what)
                other = cache_at(cache.path)
                other.put(key, choice="left", candidates=left.candidates, status="accepted")
                assert child.stdin is not None
                child.stdin.write(b"release\n")
                child.stdin.flush()
                assert out.readline().strip() == "released"

        report = tune.ops(left, [THIN], cache=cache, progress=progress)
    assert told == [f"waiting for a key claimed by {platform.node()} pid {child.pid}"]
    (outcome,) = report.keys
    assert (outcome.action, outcome.choice) == ("known", "left")
    assert before == CALLS  # nothing benched: the holder decided the key
    entry = cache.get(key, candidates=left.candidates)
    assert entry is not None and entry.status == "accepted"


def test_a_model_decision_made_during_the_bench_is_not_overwritten(
    cache: Cache, cache_at: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The module, not the function `tunecache.tune.ops` that the package names so.
    ops_module = importlib.import_module("tunecache.tune.ops")
    real = ops_module.bench_candidates
    key = _key()

    def racing(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        # A model's session (no claim: validation takes none) accepts the key meanwhile.
        other = cache_at(cache.path)
        other.put(key, choice="left", candidates=left.candidates, status="accepted")
        return result

    monkeypatch.setattr(ops_module, "bench_candidates", racing)
    (outcome,) = tune.ops(left, [THIN], cache=cache).keys
    assert (outcome.action, outcome.choice) == ("known", "left")
    assert "decided the key during the bench (accepted)" in outcome.note
    entry = cache.get(key, candidates=left.candidates)
    assert entry is not None and (entry.status, entry.choice) == ("accepted", "left")


def test_an_op_bench_takes_its_measurement_turn(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunecache.tune.measuring import MeasureLock

    ops_module = importlib.import_module("tunecache.tune.ops")
    real = ops_module.bench_candidates
    seen: list[str] = []

    def looking(*args: Any, **kwargs: Any) -> Any:
        # Another process of this host looks at the device's measure lock during the bench.
        seen.append(lock_seen(MeasureLock(cache.path).path))
        return real(*args, **kwargs)

    monkeypatch.setattr(ops_module, "bench_candidates", looking)
    tune.ops(left, [THIN], cache=cache)
    assert seen == ["busy"]


def test_a_candidate_that_raises_is_said_in_its_shapes_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "raising_op.py"
    script.write_text(
        textwrap.dedent(
            """
            import tunecache

            @tunecache.tunable("opsraise_I64", dims=("n",), shape=lambda n: (n,))
            def op(n):
                return n

            @op.inputs
            def _(n):
                return (n,)

            @op.candidate("b")
            def _(n):
                return 1 / 0
            """
        )
    )
    db = tmp_path / "raise.db"
    code = cli.main(["tune-op", f"{script}:op", "--shape", "n=5", "--db", str(db), "--json"])
    (row,) = json.loads(capsys.readouterr().out)["keys"]
    assert code == 0 and row["action"] == "benched" and row["choice"] == "op"
    assert "b raised ZeroDivisionError" in row["note"]
    code = cli.main(["tune-op", f"{script}:op", "--shape", "n=5", "--db", str(db), "--retune"])
    assert code == 0 and "b raised ZeroDivisionError" in capsys.readouterr().out
