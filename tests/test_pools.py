"""The thread pools that run the work (tunecache.pools): the identity's default threads, and the
tuner's one warning about pools of different sizes."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest
import threadpoolctl  # type: ignore[import-untyped]  # no stubs, no py.typed

import tunecache
from tests import tune_models as tm
from tests.conftest import python_output
from tunecache import identity, pools, tune
from tunecache.errors import TunecacheWarning


def _blas_threads() -> list[int]:
    return [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]


def test_with_numpys_openblas_loaded_the_default_is_what_its_pool_runs() -> None:
    assert np.ones(2).sum() == 2  # numpy is loaded, and with it its OpenBLAS
    assert pools.native_pools_loaded()
    running = _blas_threads()
    assert running, "numpy loads a BLAS, so threadpoolctl must find a pool"
    device = tunecache.detect()
    assert device.threads == max(running)
    _, sources, counted = identity.settle()
    assert (sources["threads"], counted) == ("default", "the BLAS pools")
    # Limited to one thread, the pool runs one: so does the identity opened meanwhile.
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        assert tunecache.detect().threads == 1
        with tunecache.open() as cache:
            assert cache.path.parent.name.endswith("-t1")
        # An explicit count still wins.
        assert tunecache.detect(threads=2).threads == 2


def test_before_any_blas_is_loaded_threadpoolctl_is_not_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in pools.SETTINGS:
        monkeypatch.delenv(var, raising=False)
    probe = (
        "import sys\n"
        "import tunecache\n"
        "from tunecache import identity\n"
        "d = tunecache.detect()\n"
        "assert d.threads == identity.usable_cpus(), d\n"
        "print(identity.settle()[2], 'threadpoolctl' in sys.modules, 'numpy' in sys.modules)\n"
    )
    assert python_output(probe).split() == ["usable", "CPUs", "False", "False"]


def test_before_a_blas_loads_the_environment_says_what_its_pool_will_run() -> None:
    # `tunecache where` loads no BLAS: it must name the folder a numpy program will use.
    probe = (
        "import tunecache\n"
        "from tunecache import identity\n"
        "print(tunecache.detect().threads, identity.settle()[2])\n"
        "import numpy\n"
        "print(tunecache.detect().threads, identity.settle()[2])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in pools.SETTINGS}
    printed = python_output(probe, {**env, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "2"})
    assert printed.splitlines() == ["1 OPENBLAS_NUM_THREADS", "1 the BLAS pools"]


def test_a_setting_numpys_openblas_ignores_predicts_nothing() -> None:
    # MKL_NUM_THREADS and BLIS_NUM_THREADS: numpy's OpenBLAS runs as many threads as it would
    # without them, and `where` must name that folder too.
    probe = (
        "import tunecache\n"
        "from tunecache import identity\n"
        "print(tunecache.detect().threads, identity.settle()[2])\n"
        "import numpy\n"
        "print(tunecache.detect().threads)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in pools.SETTINGS}
    for var in ("MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        before, after = python_output(probe, {**env, var: "1"}).splitlines()
        assert before.split(" ", 1)[1] == "usable CPUs", var
        assert before.split()[0] == after, var  # one folder, before numpy and after


def test_a_setting_above_the_cpus_runs_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    _plant(monkeypatch, [])
    for var in pools.SETTINGS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "64,2")
    assert pools.default_threads(4) == (4, "OMP_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "x")
    assert pools.default_threads(4) == (4, "usable CPUs")


def _plant(monkeypatch: pytest.MonkeyPatch, view: list[dict[str, Any]]) -> None:
    """Make threadpoolctl see `view` (this machine has one pool only)."""
    monkeypatch.setattr(pools, "native_pools_loaded", lambda: True)
    monkeypatch.setattr(pools, "threadpool_info", lambda: view)


NUMPY = {
    "user_api": "blas",
    "internal_api": "openblas",
    "num_threads": 2,
    "prefix": "libscipy_openblas",
    "filepath": "/site/numpy.libs/libscipy_openblas64_-a.so",
}
SCIPY = {**NUMPY, "num_threads": 1, "filepath": "/site/scipy.libs/libscipy_openblas-b.so"}
OMP = {
    "user_api": "openmp",
    "internal_api": "openmp",
    "num_threads": 4,
    "filepath": "/l/libgomp.so",
}


def test_the_default_takes_the_largest_blas_pool_else_openmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _plant(monkeypatch, [NUMPY, SCIPY, OMP])
    assert pools.default_threads(16) == (2, "the BLAS pools")
    _plant(monkeypatch, [OMP])
    assert pools.default_threads(16) == (4, "the OpenMP pools")
    _plant(monkeypatch, [])
    for var in pools.SETTINGS:
        monkeypatch.delenv(var, raising=False)
    assert pools.default_threads(16) == (16, "usable CPUs")


def test_pools_of_different_sizes_are_warned_about_once_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _plant(monkeypatch, [NUMPY, {**NUMPY, "filepath": "/other/libopenblas.so"}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pools.warn_if_mixed() is None  # the same settings: nothing to say
    monkeypatch.setattr(pools, "_warned", set())
    _plant(monkeypatch, [NUMPY, SCIPY])
    with pytest.warns(TunecacheWarning, match="different thread counts") as seen:
        named = pools.warn_if_mixed()
    assert named is not None
    text = str(seen[0].message)
    assert "libscipy_openblas64_-a.so" in text and "libscipy_openblas-b.so" in text
    assert "openblas 2 threads" in text and "openblas 1 thread " in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pools.warn_if_mixed() == named  # said once per process


def test_the_tuner_warns_once_about_mixed_pools(
    monkeypatch: pytest.MonkeyPatch, cache: tunecache.Cache
) -> None:
    monkeypatch.setattr(pools, "_warned", set())
    _plant(monkeypatch, [NUMPY, SCIPY])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tune.tune(tm.ENCODER, cache=cache, share=0.0)
        tune.tune(tm.ENCODER, cache=cache, share=0.0)
    mixed = [w for w in seen if "different thread counts" in str(w.message)]
    assert len(mixed) == 1 and issubclass(mixed[0].category, TunecacheWarning)
