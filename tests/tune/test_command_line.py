"""The tuner through the command line: `tunecache tune` and `tunecache evaluate` print and write
what the library calls do, refuse bad model specs in one line, and a SIGINT keeps what was
accepted.
"""

from __future__ import annotations

import json
import os
import platform
import select
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import tunecache
from tests import tune_models as tm
from tests.tune.support import NORM
from tunecache import cli
from tunecache.device import Device
from tunecache.tune.claims import Claims, session_key

MODELS_FILE = str(Path(tm.__file__))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_:  # argparse's usage errors
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_tune_prints_and_writes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, device: Device
) -> None:
    db = str(tmp_path / "cli.db")
    code, out, err = _cli(capsys, "tune", f"{MODELS_FILE}:ENCODER", "--db", db, "--json")
    assert code == 0, err
    (report,) = json.loads(out)
    assert report["model"] == "encoder"
    actions = {k["key"]: k["action"] for k in report["keys"]}
    assert actions[NORM.text] == "accepted"
    code, out, err = _cli(capsys, "tune", "tests.tune_models:MODELS", "--db", db)
    assert code == 0, err
    assert "encoder" in out and "scorer" in out and "final guard" in out
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select choice, status from decisions").fetchall()
    assert ("vectorized", "accepted") in rows


def test_cli_evaluate_reports_every_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "eval.db")
    code, out, err = _cli(
        capsys,
        "evaluate",
        "--tune", "tests.tune_models:ENCODER",
        "--held-out", "tests.tune_models:SCORER",
        "--held-out", "tests.tune_models:PROJECTOR",
        "--measure-pairs", "7",
        "--db", db,
        "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert [r["model"] for r in result["rows"]] == ["encoder", "scorer", "projector"]
    assert sum(result["counts"]["held-out"].values()) == 2
    code, out, err = _cli(
        capsys, "evaluate", "--tune", "tests.tune_models:ENCODER", "--measure-pairs", "2",
        "--db", db,
    )  # fmt: skip
    # Two pairs can never reach alpha 0.01: refused up front, before any tuning.
    assert code == 2 and "at least 7" in err, err
    code, out, err = _cli(
        capsys, "evaluate", "--tune", "tests.tune_models:ENCODER", "--measure-pairs", "7",
        "--db", db,
    )  # fmt: skip
    assert code == 0, err
    assert "held-out evaluation" in out and "tuned:" in out


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ("nocolon", cli.EXIT_USAGE, "MODULE:ATTR"),
        ("no.such.module:x", 2, "cannot import"),
        ("tests.tune_models:NOPE", 2, "no attribute"),
        ("/no/such/file.py:x", 2, "no file"),
        ("tests.tune_models:X", 2, "Model or a callable"),
    ],
)
def test_cli_bad_model_specs_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: str, code: int, message: str
) -> None:
    code_, _, err = _cli(capsys, "tune", spec, "--db", str(tmp_path / "bad.db"))
    assert code_ == code
    # One line says what is wrong (after argparse's usage lines, for a usage error).
    assert message in err.strip().splitlines()[-1] and "Traceback" not in err
    if code != cli.EXIT_USAGE:
        assert len(err.strip().splitlines()) == 1


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_to_a_tuning_process_keeps_what_was_accepted(tmp_path: Path) -> None:
    # The child says on a pipe when a run of the model first meets the row norms' committed
    # entry (tests/tune_models.py: INTERRUPTIBLE), and waits there for the signal: the SIGINT
    # always lands inside the session, after the accept, and the child can never finish first.
    db = tmp_path / "sigint.db"
    ready, child_end = os.pipe()
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(tm.__file__).resolve().parent.parent),
        "TT_SIGINT_FD": str(child_end),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tunecache",
            "tune",
            "tests.tune_models:INTERRUPTIBLE",
            "--db",
            str(db),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=(child_end,),
        # A shell that starts this suite in the background without job control ignores SIGINT,
        # and the child would inherit that: Python then installs no KeyboardInterrupt handler.
        # A user's Ctrl-C reaches a tunecache whose SIGINT is at its default.
        preexec_fn=_default_sigint,
    )
    os.close(child_end)
    try:
        with os.fdopen(ready, "rb") as pipe:
            readable, _, _ = select.select([pipe], [], [], 120)
            assert readable and pipe.readline() == b"accepted\n", process.communicate()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == cli.EXIT_INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err
    assert "interrupted: what was accepted before is stored" in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("select status from runs").fetchall() == [("interrupted",)]
        assert ("vectorized", "accepted") in conn.execute(
            "select choice, status from decisions"
        ).fetchall()
        assert conn.execute("pragma integrity_check").fetchone() == ("ok",)


# A user's models file: the heuristic of its one op calls a helper of the user's that raises
# (RAISES: always; AFTER_ACCEPT: only in a run with no table at all, which only the final guard
# makes, after the vectorized norm was accepted and committed).
USER_MODELS = """
import numpy as np
import tunecache
from tunecache.tune import Model

X = np.random.default_rng(3).standard_normal((400, 48))


def check_rows(x, when):
    if when():
        raise ValueError(f"rows of {x.shape[1]} columns are not supported")  # LINE


@tunecache.tunable("ttuserrows_F64", dims=("m", "n"), shape=lambda x, when: x.shape)
def loop(x, when):
    check_rows(x, when)
    return np.array([float(np.sqrt(np.dot(row, row))) for row in x])


@loop.candidate("vectorized")
def _(x, when):
    return np.sqrt(np.einsum("ij,ij->i", x, x))


RAISES = Model("raises", lambda: loop(X, lambda: True))
AFTER_ACCEPT = Model("after", lambda: loop(X, lambda: tunecache.current().path is None))
"""


@pytest.mark.parametrize("model", ["RAISES", "AFTER_ACCEPT"])
def test_an_exception_from_the_users_model_is_reported_as_theirs(
    tmp_path: Path, model: str
) -> None:
    from tunecache.cli.exits import EXIT_INTERNAL, EXIT_USER_CODE

    models = tmp_path / "user_models.py"
    models.write_text(USER_MODELS)
    line = USER_MODELS.splitlines().index(
        next(text for text in USER_MODELS.splitlines() if text.endswith("# LINE"))
    )
    db = tmp_path / "user.db"
    done = subprocess.run(
        [sys.executable, "-m", "tunecache", "tune", f"{models}:{model}", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == EXIT_USER_CODE != EXIT_INTERNAL, done.stderr
    errors = [text for text in done.stderr.splitlines() if "warning" not in text]
    # One line: the error's type and message, and the innermost frame in the user's file.
    name = "raises" if model == "RAISES" else "after"
    assert errors == [
        f"tunecache: error: model {name!r} raised ValueError: rows of 48 columns are not "
        f"supported (at {models}:{line + 1} in check_rows); the error is in your code"
    ]
    with sqlite3.connect(db) as conn:
        # The session's row says it failed; whatever it decided before is there whole.
        assert conn.execute("select status from runs").fetchall() == [("failed",)]
        decisions = conn.execute("select choice, status from decisions").fetchall()
        assert conn.execute("pragma integrity_check").fetchone() == ("ok",)
    if model == "RAISES":
        assert decisions == []
    else:
        assert decisions == [("vectorized", "accepted")]
        verdicts = sqlite3.connect(db).execute("select verdict from validations").fetchall()
        assert verdicts == [("validated",)]


def test_an_internal_error_is_still_ours(tmp_path: Path) -> None:
    from tunecache.cli.usercode import user_frame

    def inner() -> None:
        raise ValueError("a bug")

    try:
        inner()
    except ValueError as error:
        frame = user_frame(error)
    # This test file is the user's code here: the frame is its own.
    assert frame is not None and frame.function == "inner" and frame.path == __file__
    with pytest.raises(tunecache.TunecacheError) as raised:
        tunecache.parse("Not A Key")
    assert user_frame(raised.value) is None  # raised inside tunecache: never the user's


def test_cli_tune_says_how_long_it_waited_for_another_tuner(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "waits.db")
    with tunecache.open(path=db) as cache:
        # Another live holder of the model's session on this host (this process, its own
        # token), which never lets go: the tuner waits out --claim-wait, then tunes beside it.
        holder = Claims(cache)
        assert holder.claim(session_key("encoder", platform.node())).taken
        try:
            code, out, err = _cli(
                capsys, "tune", f"{MODELS_FILE}:ENCODER", "--db", db, "--claim-wait", "0.2"
            )
            assert code == 0, err
            assert "s of it waiting for other tuners" in out and "final guard" in out
            code, out, err = _cli(
                capsys, "tune", f"{MODELS_FILE}:ENCODER", "--db", db, "--claim-wait", "0", "--json"
            )
        finally:
            holder.release()
        assert code == 0, err
        (report,) = json.loads(out)
        # It waited no longer than its session ran, and then tuned beside the holder: nothing
        # skipped (the session claim is no key's claim).
        assert 0.0 <= report["waited"] <= report["seconds"]
        assert report["keys"] and not [k for k in report["keys"] if k["action"] == "skipped"]
