"""tunecache.triton on a real GPU: the behaviours tests/triton/ checks on the CPU.

    TUNECACHE_DIR=/tmp/tc python tools/gpu/check_triton.py

CI has no GPU, so this runs on the device machine beside the benchmark. Each check prints one
line and stops the script with an AssertionError if the behaviour is wrong. The records of tuned
keys are written behind their launches: `stored` flushes the writer before it reads the store.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

import layernorm as ln  # noqa: E402
import matmul as mm  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import tunecache.triton as tct  # noqa: E402
from tunecache.cache import Cache  # noqa: E402


@triton.jit
def add_into(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def bump(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


@triton.jit
def scale(x_ptr, out_ptr, n, EVEN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2.0)
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@triton.jit
def shifted(x_ptr, out_ptr, n, OFF: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + OFF, mask=mask)


BLOCKS = [triton.Config({"BLOCK": b}, num_warps=4) for b in (256, 1024, 4096)]


def vgrid(meta: dict[str, Any]) -> tuple[int]:
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


def ok(text: str) -> None:
    print(f"ok  {text}", flush=True)


def stored(kernel: Any, *args: Any) -> Any:
    assert tct.flush(timeout=120), "the writer did not finish in 120 s"
    with Cache.open(device=tct.gpu_device()) as cache:
        entry = cache.get(kernel.key(*args), candidates=kernel.candidates)
        return entry, (cache.record(entry) if entry is not None else None)


def _recorded_wrong(kernel: Any, name: str, x: Any, out: Any) -> str:
    """The error the stored record of `kernel`'s call (x, out, n) gives its one refused config,
    which must be `name`, recorded as a wrong output of out_ptr."""
    entry, record = stored(kernel, x, out, x.numel())
    assert entry is not None and record is not None
    refused = {t.name: t.error for t in record.candidates if t.error}
    assert list(refused) == [name], refused
    text = refused[name] or ""
    assert text.startswith("wrong output: out_ptr: largest difference 1"), text
    return text


def main() -> None:
    device = tct.gpu_device()
    ok(f"device {device.cpu}-t{device.threads}, {device.accelerator}")

    configs = [*mm.CONFIGS[:4], mm.OVERSIZED]
    kernel = tct.autotune(configs=configs, key=["M", "N", "K"])(mm.matmul_kernel)
    a, b, c = mm.operands(256)
    kernel[mm.grid](*mm.args(a, b, c))
    torch.cuda.synchronize()
    err = float((c.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm())
    assert err < 1e-2, err
    entry, record = stored(kernel, *mm.args(a, b, c))
    assert entry is not None and record is not None
    errors = {t.name: t.error for t in record.candidates if t.error}
    assert list(errors) == [tct.config_name(mm.OVERSIZED)], errors
    assert "OutOfResources" in errors[tct.config_name(mm.OVERSIZED)], errors
    assert all(t.samples for t in record.candidates if not t.error)
    ok(f"tuned M=256 in {kernel.bench_time:.3f} s: {entry.choice}; the oversized config failed")
    ok(f"  ({errors[tct.config_name(mm.OVERSIZED)][:90]}...)")

    # 240 = 16 x 15: Triton compiles it as it does 256 (a size compiled apart is tuned at once)
    a, b, c = mm.operands(240)
    kernel[mm.grid](*mm.args(a, b, c))
    assert kernel.stats["borrowed"] == 1 and len(kernel.pending) == 1
    c.fill_(7.0)
    torch.cuda.synchronize()
    assert stored(kernel, *mm.args(a, b, c))[0] is None
    done = kernel.tune_pending()
    assert len(done) == 1 and stored(kernel, *mm.args(a, b, c))[0] is not None
    assert bool((c == 7.0).all()), "tune_pending wrote the caller's output"
    ok(
        "M=240 borrowed M=256's config at once, then tune_pending() tuned it on copies of its"
        " arguments (the caller's output untouched) and stored it"
    )

    background = tct.autotune(configs=configs, key=["M", "N", "K"], unseen="background")(
        mm.matmul_kernel
    )
    a, b, c = mm.operands(272)
    background[mm.grid](*mm.args(a, b, c))
    assert background.stats["borrowed"] == 1
    assert background.wait_pending(timeout=120) and background.errors == [], background.errors
    assert stored(background, *mm.args(a, b, c))[0] is not None
    ok("M=272 borrowed, then tuned by the background thread on its own stream")

    adder = tct.autotune(configs=BLOCKS, key=["n"], reset_to_zero=["out_ptr"])(add_into)
    x = torch.randn(100_000, device="cuda")
    out = torch.zeros_like(x)
    adder[vgrid](x, out, x.numel())
    torch.cuda.synchronize()
    assert torch.equal(out, x), float((out - x).abs().max())
    ok("reset_to_zero: an atomic-add kernel's output holds one launch's sum after tuning")

    bumper = tct.autotune(configs=BLOCKS, key=["n"], restore_value=["x_ptr"])(bump)
    x = torch.randn(100_000, device="cuda")
    before = x.clone()
    bumper[vgrid](x, x.numel())
    torch.cuda.synchronize()
    assert torch.equal(x, before + 1.0)
    ok("restore_value: an in-place kernel's input moved by one launch after tuning")

    seen = []

    def early(cfgs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        seen.append(sorted(kwargs))
        return [cfg for cfg in cfgs if cfg.kwargs["BLOCK"] <= max(256, nargs["n"])]

    pruned = tct.autotune(
        configs=BLOCKS, key=["n"], prune_configs_by={"early_config_prune": early}
    )(bump)
    x = torch.randn(300, device="cuda")
    pruned[vgrid](x, x.numel())
    assert pruned.stats["single"] == 1 and pruned.best_config.kwargs == {"BLOCK": 256}
    assert seen == [["grid", "warmup"]], seen
    ok("early_config_prune: one legal config is used without a bench")

    stacked = tct.autotune(configs=BLOCKS, key=["n"])(
        triton.heuristics({"EVEN": lambda args: args["n"] % 4096 == 0})(scale)
    )
    x = torch.randn(8192, device="cuda")
    out = torch.empty_like(x)
    stacked[vgrid](x, out, x.numel())
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2.0)
    assert stacked.spec.op == "scale", stacked.spec.op
    ok("autotune over triton.heuristics over triton.jit: launches, and keys by the kernel name")
    drop_in_checks()
    second_family()
    output_checks()
    gaps_checks()
    jitkey_checks()
    print("all GPU checks passed", flush=True)


def _never_bench(fn: Any, quantiles: Any) -> Any:
    raise AssertionError("pruning left one config, and it was benched")


def drop_in_checks() -> None:
    """Where Triton's own autotuner tests found tunecache differing from Triton (issue 17)."""

    def model(**meta: Any) -> float:
        return float(meta["BLOCK"])  # the smallest block predicted fastest

    one = tct.autotune(
        configs=BLOCKS,
        key=["n"],
        prune_configs_by={"perf_model": model, "top_k": 1},
        do_bench=_never_bench,
    )(bump)
    x = torch.randn(5000, device="cuda")
    before = x.clone()
    one[vgrid](x, x.numel())
    torch.cuda.synchronize()
    assert torch.equal(x, before + 1.0)
    assert one.best_config.kwargs == {"BLOCK": 256} and one.stats["single"] == 1, one.stats
    assert stored(one, x, x.numel())[0] is None
    ok("perf_model with top_k=1: its one config launched without a bench (do_bench raises)")

    def keep_none(cfgs: list[Any], nargs: dict[str, Any], **kwargs: Any) -> list[Any]:
        return []

    empty = tct.autotune(
        configs=BLOCKS, key=["n"], prune_configs_by={"early_config_prune": keep_none}
    )(bump)
    try:
        empty[vgrid](x, x.numel())
    except triton.TritonError as error:
        assert isinstance(error, tct.NoConfigError), type(error).__mro__
        assert "No valid autotuner configs after pruning" in str(error), str(error)
        shown = str(error)
    else:
        raise AssertionError("an early_config_prune that keeps nothing raised nothing")
    ok(f"early_config_prune keeping nothing: `except triton.TritonError` catches {shown[:60]}...")


def second_family() -> None:
    """The benchmark's second kernel, a layer norm: tuned, correct, its record stored."""
    kernel = tct.autotune(configs=ln.CONFIGS, key=ln.KEY)(ln.KERNEL)
    ops = ln.operands(5000)
    kernel[ln.grid](*ln.args(*ops))
    torch.cuda.synchronize()
    assert ln.error(ops) < 1e-2, ln.error(ops)
    entry, record = stored(kernel, *ln.args(*ops))
    assert entry is not None and record is not None and kernel.stats["tuned"] == 1
    measured = [t for t in record.candidates if t.samples]
    assert len(measured) == len(ln.CONFIGS), [t.name for t in record.candidates]
    ok(f"layer norm N=5000 tuned in {kernel.bench_time:.3f} s, correct: {entry.choice}")


def output_checks() -> None:
    """check_outputs on the GPU (issue 17 item 5, issue 18 item 5): a config whose outputs
    differ is recorded wrong and never chosen, real blockings agree within the tolerance; and a
    key whose nearest neighbour Triton compiles apart is tuned, not borrowed."""
    configs = [
        triton.Config({"BLOCK": 256, "OFF": 0.0}, num_warps=4),
        triton.Config({"BLOCK": 1024, "OFF": 1e-6}, num_warps=4),  # within float32's tolerance
        triton.Config({"BLOCK": 4096, "OFF": 1.0}, num_warps=4),  # off by one: wrong
    ]
    kernel = tct.autotune(configs=configs, key=["n"], check_outputs=["out_ptr"])(shifted)
    x = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    kernel[vgrid](x, out, x.numel())
    torch.cuda.synchronize()
    assert kernel.best_config is not configs[2], kernel.best_config
    assert float((out - x * 2.0).abs().max()) < 1e-5
    text = _recorded_wrong(kernel, tct.config_name(configs[2]), x, out)
    ok(f"check_outputs: the off-by-one config is recorded wrong, never chosen ({text[:70]}...)")

    # A small output (at most gpu.HOST_VALUES values) is compared on the host, by the same rules.
    small = tct.autotune(configs=configs, key=["n"], check_outputs=["out_ptr"])(shifted)
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    small[vgrid](x, out, x.numel())
    torch.cuda.synchronize()
    assert float((out - x * 2.0).abs().max()) < 1e-5 and small.stats["tuned"] == 1, small.stats
    text = _recorded_wrong(small, tct.config_name(configs[2]), x, out)
    ok(f"check_outputs on a 4096-value output, compared on the host: {text[:70]}...")

    # The four configs compiled above, at a size Triton specialises as it did 256 (no compile).
    every = tct.autotune(configs=mm.CONFIGS[:4], key=mm.KEY, check_outputs=True)(mm.matmul_kernel)
    a, b, c = mm.operands(512)
    every[mm.grid](*mm.args(a, b, c))
    torch.cuda.synchronize()
    _, record = stored(every, *mm.args(a, b, c))
    assert record is not None
    refused = {t.name: t.error for t in record.candidates if t.error}
    assert list(refused) == [tct.config_name(mm.OVERSIZED)] or not refused, refused
    ok(
        f"check_outputs=True on the fp16 matmul: no config refused as wrong; the check took"
        f" {every.outputs_time * 1e3:.1f} ms of its {every.bench_time * 1e3:.0f} ms tune"
    )

    tuned = tct.autotune(configs=ln.CONFIGS, key=ln.KEY, unseen="tune")(ln.KERNEL)
    ops = ln.operands(2048)
    tuned[ln.grid](*ln.args(*ops))
    served = tct.autotune(configs=ln.CONFIGS, key=ln.KEY)(ln.KERNEL)
    aligned = ln.operands(2000)  # 2000 = 16 x 125: compiled like 2048, borrows its config
    served[ln.grid](*ln.args(*aligned))
    assert served.stats["borrowed"] == 1 and served.stats["tuned"] == 0, served.stats
    unaligned = ln.operands(2040)  # not a multiple of 16: another kernel, tuned at once
    served[ln.grid](*ln.args(*unaligned))
    torch.cuda.synchronize()
    assert served.stats["borrowed"] == 1 and served.stats["tuned"] == 1, served.stats
    assert ln.error(unaligned) < 1e-2 and ln.error(aligned) < 1e-2
    ok(
        "layer norm beside N=2048: N=2000 (aligned alike) borrowed its config, N=2040 (not a"
        f" multiple of 16) tuned at once in {served.bench_time * 1e3:.0f} ms"
    )


def gaps_checks() -> None:
    """tunecache.triton.gaps's kernel (the output check's common case) against torch's own
    figures and verdicts: agreement, a gap beyond the tolerance, NaNs and infinities on either
    side, fp16/bf16/fp32, lengths that are and are not multiples of 16 or of its block."""
    from tunecache.triton.gaps import BLOCK, float_gaps
    from tunecache.triton.gpu import tensor_difference

    checked = 0
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for n in (1, 1000, BLOCK, 3 * BLOCK + 17, 1 << 20):
            ref = torch.randn(n, device="cuda").to(dtype)
            cases = {"same": ref.clone(), "near": (ref.float() * (1 + 1e-4)).to(dtype)}
            cases["off"] = (ref.float() + 1).to(dtype)
            if n > 1:
                cases["nan"] = ref.clone()
                cases["nan"][n // 2] = float("nan")
                cases["inf"] = ref.clone()
                cases["inf"][n - 1] = float("inf")
            for name, got in cases.items():
                gap, size = float_gaps(torch, ref, got)
                wide_gap = (got.float() - ref.float()).abs()
                if name in ("nan", "inf"):
                    assert gap == float("inf"), (dtype, n, name, gap)
                else:
                    assert gap == float(wide_gap.max()), (dtype, n, name, gap)
                    assert size == float(ref.float().abs().max()), (dtype, n, name, size)
                with_kernel = tensor_difference(torch, ref, got, None, 0, gaps=float_gaps)
                without = tensor_difference(torch, ref, got, None, 0)
                assert with_kernel == without, (dtype, n, name, with_kernel, without)
                assert (with_kernel is None) == (name in ("same", "near")), (name, with_kernel)
                checked += 1
    # NaNs in the same places agree (by the rules); an offset view (not on a 16-byte
    # boundary: another compiled variant) gives torch's figures; nothing to compare, nothing.
    holes = torch.randn(5000, device="cuda")
    holes[[7, 4000]] = float("nan")
    assert tensor_difference(torch, holes, holes.clone(), None, 0, gaps=float_gaps) is None
    base = torch.randn(70001, device="cuda").half()
    view, other = base[1:], (base[1:].float() * (1 + 1e-4)).half()
    gap, size = float_gaps(torch, view, other)
    assert gap == float((other.float() - view.float()).abs().max()), gap
    assert size == float(view.float().abs().max()), size
    empty = torch.empty(0, device="cuda")
    assert float_gaps(torch, empty, empty) == (0.0, 0.0)
    checked += 3
    # Infinities in the reference: equal ones agree, a number where it has one does not.
    ref = torch.randn(5000, device="cuda")
    ref[10] = float("inf")
    finite = ref.clone()
    finite[10] = 3.0
    assert tensor_difference(torch, ref, ref.clone(), None, 0, gaps=float_gaps) is None
    said = tensor_difference(torch, ref, finite, None, 0, gaps=float_gaps)
    assert said == "infinities differ", said
    ok(
        f"the output check's gaps kernel: {checked} cases give torch's own figures and"
        " verdicts (fp16/bf16/fp32, NaN, inf, an offset view, 0 to 2**20 values); an"
        " infinity in the reference is no blank cheque"
    )


#: a fresh process: what tunecache.triton.jitkey serves Triton, against Triton's own hash
_JITKEY_CHILD = """
import json, sys, time
import triton
import triton.runtime.cache as cache
import triton.compiler.compiler as compiler
own = cache.triton_key
from tunecache.triton import jitkey
t0 = time.perf_counter()
said = jitkey.remember(sys.argv[1])
took = time.perf_counter() - t0
served = cache.triton_key()
# Triton 3.6's compiler module looks the hash up in triton.runtime.cache (no name of its own).
elsewhere = getattr(compiler, "triton_key", None)
print(json.dumps({"said": said, "took": took, "same": served == own(),
                  "compiler's": elsewhere is None or elsewhere() == served}))
"""


def jitkey_checks() -> None:
    """Triton's installation hash kept between processes: the second process is served the
    hash Triton itself computes, in both modules that look it up."""
    import json
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix="tc-jitkey-")
    got = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", _JITKEY_CHILD, folder], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        got.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert [g["said"] for g in got] == ["computed", "remembered"], got
    assert all(g["same"] and g["compiler's"] for g in got), got
    ok(
        f"Triton's installation hash: computed and kept in {got[0]['took'] * 1e3:.0f} ms, then"
        f" served to a new process in {got[1]['took'] * 1e3:.1f} ms, equal to Triton's own"
    )


if __name__ == "__main__":
    main()
