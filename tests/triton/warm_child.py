"""A process that decorates a kernel with the GPU backend and calls it, for the warm-start
tests (test_warm.py).

    python -m tests.triton.warm_child [--n N]... [--blocks 32,64] [--src TEXT]
                                      [--unseen tune|borrow] [--touch configs|key]
                                      [--describe] [--hold]

It makes stand-ins for torch (one H200) and Triton 3.6.0, as a process that launched its kernel
before has them loaded, decorates a kernel-shaped object with `tunecache.triton.autotune`
(configs BLOCK=32 and BLOCK=64 unless `--blocks` says otherwise, key `n`), then calls it once per
`--n` (64 unless given). The timer makes BLOCK=64 the fastest config by far: a key tuned here
stores it, and the first config (the heuristic's) is another.

It prints one JSON line: the kernel's stats; the modules the first call imported (`first`); each
call's config, by name (`chosen`); whether the kernel has a warm start; tunecache's and SQLite's
modules loaded after the calls (`loaded`); and with `--describe` (asked after everything else,
so that the first call is as it would be) the first key's text, the config list's checksum, the
store's file, the device's fingerprint, and the state the store reader saw and when. `--touch`
asks the kernel's `configs` or its `key(...)` for the first size before the first call (either
builds its flow first). `--hold` then reads lines on stdin: each that is a number calls the
kernel again with that size and prints a JSON line (that call's config, by name, the stats, and
the modules loaded); any other line, or the end of stdin, is the go to exit.

The store is the test's (TUNECACHE_DIR). Nothing is imported before the first call but what
applying the decorator imports and the stdlib modules above: the first call imports what a warm
process's would.
"""

from __future__ import annotations

import itertools
import json
import sys
import types
from typing import Any, ClassVar


class Dtype:
    """A tensor's dtype, as torch's: its text is what Triton's key is made of."""

    def __str__(self) -> str:
        return "torch.float16"


class Tensor:
    shape, dtype = (64, 64), Dtype()


def stand_ins() -> None:
    """torch and triton, as much of them as the GPU backend and the warm start read."""
    props = types.SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, L2_cache_size=60 << 20
    )
    stream = types.SimpleNamespace(synchronize=lambda: None)
    cuda = types.SimpleNamespace(
        current_device=lambda: 0,
        get_device_properties=lambda index: props,
        current_stream=lambda: stream,
        synchronize=lambda index=0: None,
    )
    sys.modules["torch"] = types.SimpleNamespace(  # type: ignore[assignment]
        cuda=cuda,
        version=types.SimpleNamespace(hip=None),
        _C=types.SimpleNamespace(_cuda_getDriverVersion=lambda: 12080),
    )
    sys.modules["triton"] = types.SimpleNamespace(  # type: ignore[assignment]
        __version__="3.6.0", TritonError=type("TritonError", (Exception,), {})
    )


class Config:
    """A triton.Config of one meta-parameter."""

    def __init__(self, block: int) -> None:
        self.kwargs, self.num_warps, self.num_stages, self.num_ctas = {"BLOCK": block}, 4, 3, 1
        self.maxnreg = self.pre_hook = self.ir_override = None


class Kernel:
    """A @triton.jit kernel's shape: its argument names, source and launch."""

    arg_names: ClassVar[list[str]] = ["x", "out", "n"]
    __name__ = "scale"

    def __init__(self, src: str) -> None:
        self.src = src
        self.launched: list[int] = []

    def run(self, *args: Any, grid: Any, warmup: bool, **meta: Any) -> None:
        self.launched.append(meta["BLOCK"])


def main(argv: list[str]) -> None:
    sizes = [int(v) for flag, v in itertools.pairwise(argv) if flag == "--n"] or [64]
    options = dict(itertools.pairwise(argv))
    blocks = [int(b) for b in options.get("--blocks", "32,64").split(",")]
    src = options.get("--src", "def scale(x, out, n, BLOCK): ...")
    stand_ins()
    kernel_fn = Kernel(src)

    def timer(fn: Any, quantiles: Any) -> list[float]:
        fn()
        ms = 1.0 if kernel_fn.launched[-1] == 64 else 5.0
        return [ms, 0.9 * ms, 1.1 * ms]

    import tunecache.triton as tct

    kernel = tct.autotune(
        [Config(b) for b in blocks],
        key=["n"],
        unseen=options.get("--unseen", "borrow"),
        flush_l2=False,
        do_bench=timer,
    )(kernel_fn)
    touch = options.get("--touch")
    if touch == "configs":
        assert len(kernel.configs) == len(blocks)
    elif touch == "key":
        kernel.key(Tensor(), Tensor(), sizes[0])
    chosen = []
    before = set(sys.modules)
    kernel[(1,)](Tensor(), Tensor(), sizes[0])
    first = sorted(set(sys.modules) - before)
    from tunecache.triton import warm

    chosen.append(warm.config_name(kernel.best_config))
    for n in sizes[1:]:
        kernel[(1,)](Tensor(), Tensor(), n)
        chosen.append(warm.config_name(kernel.best_config))
    report: dict[str, Any] = {
        "stats": kernel.stats,
        "first": first,
        "chosen": chosen,
        "warm": kernel.warm_start is not None,
        "loaded": loaded(),
    }
    # The records in the store before the exit; and what waiting for them loads.
    before = set(sys.modules)
    assert kernel.wait_pending(timeout=60)
    report["waited"] = sorted(set(sys.modules) - before)
    if "--describe" in argv:
        args = (Tensor(), Tensor(), sizes[0])
        flow = kernel._ready()
        state = flow.state(0)
        reader = state.reader
        report["describe"] = {
            "key": kernel.key(*args).text,
            "checksum": kernel.checksum,
            "db": str(reader.path),
            "device": reader.device,
            "signature": reader.signature,
            "signed_at": reader.signed_at,
        }
    print(json.dumps(report), flush=True)
    if "--hold" in argv:
        # More calls, one a line, until the parent's go to exit (and keep what it learned).
        for line in sys.stdin:
            if not line.strip().isdigit():
                break
            kernel[(1,)](Tensor(), Tensor(), int(line))
            called = {"chosen": warm.config_name(kernel.best_config), "stats": kernel.stats}
            print(json.dumps({**called, "loaded": loaded()}), flush=True)


def loaded() -> list[str]:
    """tunecache's and SQLite's modules loaded now."""
    return sorted(m for m in sys.modules if m.startswith(("tunecache.", "sqlite3", "_sqlite3")))


if __name__ == "__main__":
    main(sys.argv[1:])
