"""What a timing record carries besides samples: the environment, and failures as one line."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT
from tunecache import codec, evidence
from tunecache.evidence import (
    TOO_SLOW,
    WRONG,
    environment,
    error_text,
    refusal,
    refusal_text,
    waited,
)

#: the real reader, taken before any test's fixture hides it
REAL_CPU_WAIT = evidence.cpu_wait


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


def test_a_refusal_says_its_kind_first_and_is_told_apart_from_an_exception() -> None:
    slow = refusal_text(TOO_SLOW, "one call took\n5.3 s")
    assert slow == "too slow: one call took 5.3 s"
    assert refusal(slow) == TOO_SLOW
    assert refusal(refusal_text(WRONG, "largest difference 1")) == WRONG
    assert refusal("ValueError: too slow: not ours") is None and refusal(None) is None
    assert len(refusal_text(WRONG, "x" * 1000)) == 300


def test_cpu_wait_reads_this_process_or_says_nothing() -> None:
    # The autouse fixture hides the machine's waits from every test; this one reads them.
    first, second = REAL_CPU_WAIT(), REAL_CPU_WAIT()
    if first is None:
        assert second is None  # a system that does not say (no Linux schedstat)
    else:
        assert isinstance(first, float) and first >= 0
        assert isinstance(second, float)
    assert waited(1.0, 1.5, 2.0) == 0.25
    assert waited(2.0, 1.0, 1.0) == 0.0  # a thread that exited took its share with it
    assert waited(None, 1.0, 1.0) is None and waited(0.0, 1.0, 0.0) is None
