"""tunecache.triton.decorator: making the decorator needs no Triton; applying it needs Triton."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

import tunecache.triton as tct
from tests.conftest import ROOT
from tests.triton.fake import GPU, CpuKernel, configs
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


def test_decorating_a_kernel_without_triton_says_it_needs_triton(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton -> ImportError
    decorate = tct.autotune(configs(), key=["M"])
    with pytest.raises(BadArgumentError, match="needs Triton"):
        decorate(CpuKernel())


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
