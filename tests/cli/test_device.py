"""The device options: the identity they name, and the cache they open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_json, run_process
from tunecache.cache import Cache
from tunecache.cli import EXIT_USAGE, main
from tunecache.codec import CandidateTiming, TimingRecord


def test_an_empty_root_is_refused_and_a_relative_one_made_absolute(tmp_path: Path) -> None:
    done = run_process("where", "--root", "")
    assert done.returncode == 2
    assert "must not be empty" in done.stderr
    done = run_process("where", "--json", "--root", "rel", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["database"].startswith(str(tmp_path / "rel" / "tune"))


def test_a_gpu_identity_is_named_by_cpu_and_its_entries_inspected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What tunecache.triton stores on an H200, read on a machine without the GPU: every
    # config's timings, by naming the identity (the GPU's name goes in --cpu).
    from tunecache.device import Device

    gpu = Device("nvidia-h200", 132, "nvidia-h200-sm90-driver-580-159-04", "triton", "3.6.0")
    db = str(tmp_path / "gpu.db")
    key = "matmul-kernel_F16_F16_F16_RABC_m4096_n4096_k4096"
    configs = ["BLOCK_M=128,num_warps=8", "BLOCK_M=64,num_warps=4"]
    record = TimingRecord(
        candidates=(
            CandidateTiming(configs[0], (2.46e-4, 2.47e-4, 2.45e-4), inner_loops=4),
            CandidateTiming(configs[1], (3.9e-4, 3.8e-4, 3.95e-4), inner_loops=3),
        )
    )
    with Cache.open(device=gpu, path=db) as cache:
        cache.put(key, choice=configs[0], candidates=configs, heuristic=configs[1], record=record)
    identity = [
        "--client", "triton", "--client-version", "3.6.0", "--cpu", "nvidia-h200",
        "--threads", "132", "--accelerator", "nvidia-h200-sm90-driver-580-159-04",
    ]  # fmt: skip

    [found] = run_json(capsys, "inspect", key, "--db", db, *identity)["entries"]
    assert [c["name"] for c in found["candidates"]] == configs
    assert [c["samples"] for c in found["candidates"]] == [3, 3]
    assert found["entry"]["choice"] == configs[0]
    # This machine's own identity sees none of it: the GPU's decisions are the GPU's.
    assert main(["inspect", key, "--db", db]) == 1
    capsys.readouterr()


def test_gpu_option_refuses_a_second_identity_and_needs_torch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["where", "--gpu", "0", "--threads", "4"])
    assert usage.value.code == EXIT_USAGE
    assert "--gpu gives the whole identity: drop --threads" in capsys.readouterr().err
    try:
        import torch  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        # CI has no torch: the one-line error says what is missing, and nothing is created.
        assert main(["where", "--gpu", "0", "--root", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tunecache: error: tunecache.triton needs torch")
        assert err.count("\n") == 1 and not (tmp_path / "r").exists()


def test_gpu_names_every_identity_option_it_replaces(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["where", "--gpu", "0", "--client", "x", "--cpu", "y", "--accelerator", "z"])
    assert usage.value.code == EXIT_USAGE
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith("--gpu gives the whole identity: drop --client --accelerator --cpu")
