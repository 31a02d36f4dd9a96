"""The subcommands that tune and measure: what they refuse before anything runs or opens.

Tuning itself, from the command line, is tested beside the tuner (tests/test_tune.py) and the
demo (tests/test_demo.py), on the tests' tiny models.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tunecache.cli import EXIT_USAGE, main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's usage errors
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


def _models_file(tmp_path: Path, source: str) -> Path:
    """A FILE.py for a MODULE:ATTR spec, holding `source`."""
    path = tmp_path / "some_models.py"
    path.write_text(source)
    return path


def test_a_model_file_that_fails_to_import_is_one_line_and_opens_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = _models_file(tmp_path, "raise ValueError('no models here\\nsecond line')\n")
    db = tmp_path / "never.db"
    loaded = {name for name in sys.modules if name.startswith("_tunecache_models_")}
    code, err = _run(capsys, "tune", f"{models}:MODELS", "--db", str(db))
    assert code == 2
    assert err == f"tunecache: error: importing '{models}' raised ValueError: no models here\n"
    assert not db.exists()
    # The half-imported module is not left behind.
    assert {name for name in sys.modules if name.startswith("_tunecache_models_")} == loaded


def test_a_model_in_a_file_is_found_by_a_dotted_attribute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = _models_file(tmp_path, "class Box:\n    inner = 42\n")
    code, err = _run(capsys, "tune", f"{models}:Box.inner", "--db", str(tmp_path / "t.db"))
    # Found, and then refused for what it is: not a model.
    assert code == 2 and "Model or a callable" in err
    code, err = _run(capsys, "tune", f"{models}:Box.outer", "--db", str(tmp_path / "t.db"))
    assert code == 2 and "has no attribute 'Box.outer'" in err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (("evaluate", "--held-out", "m:x"), EXIT_USAGE, "--held-out needs at least one --tune"),
        (("evaluate", "--tune", "tests.tune_models:ENCODER", "--alpha", "2"), 2, "alpha"),
        (("tune", "tests.tune_models:ENCODER", "--keep", "0"), EXIT_USAGE, "not at least 1"),
        (("tune", "tests.tune_models:ENCODER", "--claim-wait", "-1"), 2, "claim_wait"),
        (("tune", "tests.tune_models:ENCODER", "--budget", "nan"), 2, "budget"),
        (("demo", "--measure-pairs", "0"), EXIT_USAGE, "not at least 1"),
    ],
)
def test_bad_options_are_refused_before_any_cache_is_opened(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    db = tmp_path / "never.db"
    status, err = _run(capsys, *argv, "--db", str(db))
    assert status == code
    assert message in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not db.exists()
