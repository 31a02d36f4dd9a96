"""tunecache.triton.gpu: the GPU backend, run on a CPU against stand-ins for torch and Triton.

The real thing runs in tools/gpu/check_triton.py on a GPU; these tests pin what the backend asks
of torch and Triton, and what it makes of their answers.
"""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace
from typing import Any

import pytest

import tunecache.triton as tct
from tests.triton.fake import GPU, CpuKernel, configs, launch
from tunecache.device import Device
from tunecache.errors import BadArgumentError, TunecacheError
from tunecache.triton import GPU_BENCH, gpu
from tunecache.triton.configs import NoConfigError
from tunecache.triton.gpu import driver_version, gpu_backend, gpu_device


def _no_proc_file(*args: Any, **kwargs: Any) -> Any:
    raise FileNotFoundError("/proc/driver/nvidia/version")


def test_the_driver_version_comes_from_proc_then_from_torch(
    fake_gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"
    monkeypatch.setattr(gpu, "open", lambda *a, **k: io.StringIO(proc), raising=False)
    assert driver_version() == "580.159.04"
    monkeypatch.setattr(gpu, "open", _no_proc_file, raising=False)
    assert driver_version() == "cuda-12.4"
    fake_gpu.torch.version.hip = "6.2.41133"
    assert driver_version() == "hip-6.2.41133"
    fake_gpu.torch.version.hip = None
    fake_gpu.torch._C = SimpleNamespace()
    assert driver_version() == "unknown"


def test_a_gpus_identity_is_its_name_multiprocessors_capability_driver_and_triton(
    fake_gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu, "driver_version", lambda: "580.159.04")
    # What tests/test_cli.py reads back as an H200's identity.
    h200 = Device("nvidia-h200", 132, "nvidia-h200-sm90-driver-580-159-04", "triton", "3.6.0")
    assert gpu_device() == h200
    assert gpu_device(0) == h200


def test_the_backend_syncs_the_callers_stream_and_tunes_in_the_background_on_its_own(
    fake_gpu: SimpleNamespace,
) -> None:
    backend = gpu_backend(GPU, flush_l2=True)
    cuda = fake_gpu.torch.cuda
    assert backend.device(5) is GPU and backend.current() == 0
    assert backend.bench == dict(GPU_BENCH) and backend.bench is not GPU_BENCH
    assert backend.failures == ()  # the stand-in triton has no triton.runtime.errors
    backend.sync()
    with backend.context(1, False):
        pass
    assert cuda.events == [("sync",), ("device", 1)]
    cuda.events.clear()
    for _ in range(2):
        with backend.context(1, True):
            pass
    # The pending copies are waited for each time; the tuning thread's stream is made once.
    assert cuda.events == [
        ("device", 1),
        ("synchronize", 1),
        ("new stream", 1),
        ("on", ("stream", 1)),
        ("device", 1),
        ("synchronize", 1),
        ("on", ("stream", 1)),
    ]
    default = backend.default_config()
    assert (default.kwargs, default.num_warps, default.num_stages, default.num_ctas) == (
        {},
        4,
        3,
        1,
    )


def test_the_l2_flush_zeroes_twice_the_l2_once_made_per_device(fake_gpu: SimpleNamespace) -> None:
    flush = gpu_backend(None, flush_l2=True).flush
    assert flush is not None
    first = flush(0)
    assert first is not None and flush(0) is first
    first()
    buffer = first.__self__
    assert (buffer.size, buffer.device, buffer.zeroed) == (120 << 20, "cuda:0", 1)
    fake_gpu.torch.cuda.properties.L2_cache_size = 0
    small = flush(1)
    assert small is not None and small.__self__.size == 1 << 20
    off = gpu_backend(None, flush_l2=False).flush
    assert off is not None and off(0) is None


def test_the_backend_without_torch_says_it_needs_torch(
    fake_gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    with pytest.raises(BadArgumentError, match=r"tunecache\.triton needs torch"):
        gpu_backend(None, flush_l2=True)


def test_an_early_prune_that_keeps_nothing_raises_a_triton_error_too(
    fake_gpu: SimpleNamespace,
) -> None:
    error = gpu_backend(GPU, flush_l2=False).no_config_error
    assert error is not None
    assert issubclass(error, NoConfigError) and issubclass(error, BadArgumentError)
    assert issubclass(error, fake_gpu.triton.TritonError)
    assert gpu.triton_no_config_error(fake_gpu.triton) is error  # made once per Triton

    def keep_none(configs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        return []

    kernel = tct.autotune(
        configs(), key=["M"], prune_configs_by={"early_config_prune": keep_none}, device=GPU
    )(CpuKernel())
    with pytest.raises(fake_gpu.triton.TritonError, match="No valid autotuner configs") as caught:
        launch(kernel, 64)
    assert isinstance(caught.value, BadArgumentError)
    # A Triton without TritonError, or with one that cannot be mixed in (here: its bases in
    # the other order, so no method resolution order fits both): tunecache's own error.
    assert gpu.triton_no_config_error(SimpleNamespace()) is NoConfigError
    unmixable = SimpleNamespace(TritonError=type("TritonError", (ValueError, TunecacheError), {}))
    assert gpu.triton_no_config_error(unmixable) is NoConfigError
