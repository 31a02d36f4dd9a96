"""tunecache.triton.autotune: making and applying the decorator costs nothing; the first call
sets the rest up, once."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

import tunecache.triton as tct
from tests.conftest import ROOT
from tests.triton.fake import GPU, CpuKernel, configs, launch
from tunecache.errors import BadArgumentError


def test_importing_needs_neither_triton_nor_torch_nor_the_store() -> None:
    code = (
        "import sys, tunecache\n"
        "tunecache.triton.autotune([], key=['M'])\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'triton', 'torch', 'sqlalchemy', 'alembic', 'cbor2'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_kernel_without_triton_says_at_its_first_call_that_it_needs_triton(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton -> ImportError
    kernel = tct.autotune(configs(), key=["M"])(CpuKernel())  # applying it imports nothing
    with pytest.raises(BadArgumentError, match="needs Triton"):
        launch(kernel, 64)


def test_applied_it_gives_the_kernel_the_gpu_backend_with_its_options(
    fake_gpu: SimpleNamespace,
) -> None:
    kernel = tct.autotune(configs(), key=["M"], device=GPU, flush_l2=False)(CpuKernel())
    assert isinstance(kernel, tct.Autotuner)
    assert kernel.backend.device(0) is GPU
    assert kernel.backend.flush is not None and kernel.backend.flush(0) is None
    assert kernel.candidates == tuple(tct.config_name(c) for c in configs())
    # No config: Triton's default one, as triton.autotune does.
    default = tct.autotune([], key=["M"])(CpuKernel())
    assert default.candidates == ("num_warps=4,num_stages=3,num_ctas=1",)


#: every module of tunecache that `import tunecache.triton` and applying the decorator load: the
#: decorator with the kernel it returns, and the checks of its arguments (not the errors, which
#: load when one is raised, nor the config names, the key's form, the digest or the candidate
#: lists: the first call's)
DECORATION = {
    "tunecache",
    "tunecache.triton",
    "tunecache.triton.autotuner",
}

#: a process that applies the decorator to a kernel-shaped object and then calls it; it prints
#: the modules each step loaded
_STEPS = """
import json, sys
from types import SimpleNamespace
sys.modules["triton"] = None  # as where Triton is not installed: the first call stops there
before = set(sys.modules)
import tunecache.triton as tct
class Kernel:
    arg_names = ["x", "n"]
    src = "def scale(x, n): ..."
    __name__ = "scale"
    def run(self, *args, grid, warmup, **meta): pass
configs = [SimpleNamespace(kwargs={"BLOCK": b}, num_warps=4, num_stages=3, num_ctas=1,
                           maxnreg=None, pre_hook=None, ir_override=None) for b in (64, 128)]
kernel = tct.autotune(configs=configs, key=["n"], name="scale")(Kernel())
decorated = set(sys.modules)
from tunecache.errors import BadArgumentError  # counted after the decoration: not its own
try:
    kernel[(1,)](None, 16)
except BadArgumentError as error:  # no Triton here
    print(json.dumps({"error": str(error)}))
print(json.dumps({"decoration": sorted(decorated - before),
                  "first call": sorted(set(sys.modules) - decorated)}))
"""


def test_applying_the_decorator_imports_only_what_remembers_its_arguments() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _STEPS], capture_output=True, text=True, cwd=ROOT, check=True
    )
    error, steps = (json.loads(line) for line in done.stdout.splitlines())
    decoration = set(steps["decoration"])
    assert {m for m in decoration if m.startswith("tunecache")} == DECORATION
    # Of the rest, only what Python itself brings for those modules: no typing, sqlite3,
    # numpy, threading, store, resolver or bench, let alone Triton, torch or SQLAlchemy.
    heavy = {"typing", "sqlite3", "numpy", "threading", "sqlalchemy", "alembic", "cbor2"}
    heavy |= {"triton", "torch"}
    assert not {m.split(".")[0] for m in decoration} & heavy
    # The first call sets the rest up: here it gets as far as the GPU backend, which needs Triton.
    assert "needs Triton" in error["error"]
    assert "tunecache.triton.flow" in steps["first call"]


def test_the_first_call_sets_the_kernel_up_once(fake_gpu: SimpleNamespace) -> None:
    kernel = tct.autotune(configs()[:1], key=["M"], device=GPU)(CpuKernel())
    assert kernel.stats["single"] == 0 and kernel.pending == []
    launch(kernel, 64)
    launch(kernel, 64)
    backend = kernel.backend
    assert kernel.backend is backend and backend.device(0) is GPU
    assert len(kernel.fn.launches) == 2  # one config: launched as it is, no key, no store
