"""What a timing record carries besides samples: the environment, and failures as one line."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT
from tunecache import codec
from tunecache.evidence import environment, error_text


def test_an_error_is_one_bounded_line_with_its_type() -> None:
    assert error_text(ValueError("bad\n  value")) == "ValueError: bad value"
    assert error_text(KeyError()) == "KeyError"
    long = error_text(RuntimeError("x" * 10_000))
    assert long.startswith("RuntimeError: ") and len(long) == len("RuntimeError: ") + 300


def test_an_error_with_a_lone_surrogate_still_goes_into_a_record() -> None:
    text = error_text(ValueError("half \ud800 a pair"))
    record = codec.TimingRecord((codec.CandidateTiming("a", error=text),))
    assert codec.decode(codec.encode(record)) == record


def test_the_environment_is_scalars_a_record_can_carry() -> None:
    env = environment()
    assert {"python", "implementation", "numpy", "machine", "cpu_count"} <= set(env)
    record = codec.TimingRecord(env=env)
    assert codec.decode(codec.encode(record)).env == env


def test_the_environment_names_numpy_without_importing_it() -> None:
    probe = (
        "import sys\nfrom tunecache.evidence import environment\n"
        "version = environment()['numpy']\nprint('numpy' in sys.modules, version is not None)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split() == ["False", "True"]
