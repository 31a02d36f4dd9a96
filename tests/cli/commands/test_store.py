"""The subcommands that read the store: where, list (show), inspect, models, explain, sql."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tests.cli.conftest import NAMES, rows, run_human, run_json, run_on_terminal, run_process
from tunecache._version import __version__
from tunecache.cache import Cache
from tunecache.cli import EXIT_USAGE, main
from tunecache.device import detect
from tunecache.store import migrate


def test_where_prints_where_the_cache_lives_and_creates_nothing(_isolated_cache_root: Path) -> None:
    device = detect()
    db = _isolated_cache_root / "tune" / __version__ / f"{device.cpu}-t{device.threads}"
    done = run_process("where")
    assert done.returncode == 0, done.stderr
    path = re.escape(str(db / "cache.db"))
    assert re.search(rf"^database: +{path} \(not created yet\)$", done.stdout, re.MULTILINE)
    assert not _isolated_cache_root.exists()
    Cache.open().close()
    done = run_process("where")
    assert done.returncode == 0, done.stderr
    assert re.search(rf"^database: +{path}$", done.stdout, re.MULTILINE)
    assert re.search(rf"^revision: +{migrate.HEAD}$", done.stdout, re.MULTILINE)
    assert re.search(r"^entries: +0$", done.stdout, re.MULTILINE)


def test_where_json_is_stable_for_scripts(_isolated_cache_root: Path) -> None:
    done = run_process("where", "--json", "--threads", "3", "--accelerator", "NVIDIA H200")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    keys = {"device", "fingerprint", "database", "exists", "revision", "entries", "writable"}
    keys |= {"sources", "root"}
    assert set(info) == keys
    assert info["device"]["threads"] == 3
    assert info["sources"]["threads"] == info["sources"]["accelerator"] == "argument"
    assert info["sources"]["client"] == "default"
    assert info["device"]["accelerator"] == "nvidia-h200"
    assert info["database"].endswith("-t3/cache.db")
    assert (info["exists"], info["revision"], info["writable"]) == (False, None, True)
    Cache.open(threads=3, accelerator="NVIDIA H200").close()
    info = json.loads(
        run_process("where", "--json", "--threads", "3", "--accelerator", "NVIDIA H200").stdout
    )
    assert set(info) == keys and (info["exists"], info["revision"]) == (True, migrate.HEAD)


def test_list_json_and_filters(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "list")
    assert out["count"] == 3
    row = next(e for e in out["entries"] if e["key"] == "conv_F32_m64_k3")
    assert (row["choice"], row["heuristic"], row["speedup"]) == ("im2col", "direct", 2.5)
    assert row["validated_by"] == ["resnet"] and row["masked_by"] == []
    assert datetime.fromisoformat(row["updated_at"]).tzinfo is not None
    assert [e["key"] for e in run_json(capsys, "list", "--op", "matmul")["entries"]] == [
        "matmul_F32_m8_n8"
    ]
    assert run_json(capsys, "show", "--model", "resnet", "--signature", "conv_F32")["count"] == 2
    assert run_json(capsys, "list", "--older-than", "1d")["count"] == 0
    assert run_json(capsys, "list", "--newer-than", "2000-01-01")["count"] == 3
    assert run_json(capsys, "list", "--limit", "1")["count"] == 1


def test_list_prints_a_table(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_human(capsys, "list")
    header = next(line for line in out.splitlines() if "key" in line and "choice" in line)
    for column in ("heuristic", "speedup", "validated by", "masked by", "updated"):
        assert column in header
    assert re.search(r"conv_F32_m64_k3\s.*im2col\s.*direct\s.*2\.5x.*resnet", out)
    assert "3 entries" in out


def test_inspect_by_id_and_by_key(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    entry = filled.get("conv_F32_m64_k3")
    assert entry is not None
    [by_id] = run_json(capsys, "inspect", str(entry.id))["entries"]
    assert by_id["entry"]["key"] == "conv_F32_m64_k3"
    assert [c["samples"] for c in by_id["candidates"]] == [2, 2, 0]
    assert by_id["candidates"][2]["error"] == "unsupported"
    assert by_id["verdicts"][0]["model"] == "resnet"
    assert by_id["run"]["notes"] == "from the tests"
    out = run_human(capsys, "inspect", "conv_F32_m64_k3")
    assert "im2col" in out and "11 µs" in out and "unsupported" in out
    assert "min_time=0.01" in out and "resnet" in out and "from the tests" in out


def test_inspect_of_a_missing_entry_exits_1(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", "4242"]) == 1
    assert (
        capsys.readouterr().err.strip()
        == "tunecache: error: no entry for entry 4242 on this device"
    )
    assert main(["inspect", "gemm__bad"]) == 2


def test_inspect_of_a_non_ascii_digit_is_a_bad_key_rather_than_a_crash(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", "²"]) == 2  # "²".isdigit() is true, but it is no entry id
    err = capsys.readouterr().err
    assert err.startswith("tunecache: error:") and err.count("\n") == 1


def test_models(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    [model] = run_json(capsys, "models")["models"]
    assert (model["name"], model["validated"], model["masked"]) == ("resnet", 1, 1)
    assert "resnet" in run_human(capsys, "models")


def test_explain_says_how_the_resolver_answers_and_why(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    before = rows(filled.path)
    exact = run_json(capsys, "explain", "conv_F32_m64_k3")
    assert (exact["choice"], exact["source"]) == ("im2col", "exact")
    # resnet masked m128: for it, the heuristic; for a model with no verdict, nothing validated
    # m128, so it is not served either, but m96 borrows from the validated m64.
    masked = run_json(
        capsys, "explain", "conv_F32_m128_k3", "--model", "resnet", "--heuristic", "direct"
    )
    assert (masked["choice"], masked["source"]) == ("direct", "masked")
    near = run_json(capsys, "explain", "conv_F32_m96_k3", "--model", "vgg")
    assert (near["choice"], near["source"], near["borrowed_from"]) == (
        "im2col",
        "nearest",
        "conv_F32_m64_k3",
    )
    assert near["distance"] == pytest.approx(0.585, abs=1e-3)
    text = run_human(capsys, "explain", "conv_F32_m1000_k3", "--candidates", ",".join(NAMES))
    assert "beyond the cap" in text and "(heuristic)" in text
    assert rows(filled.path) == before  # explain only reads


def test_explain_without_a_known_candidate_list_exits_1(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_json(capsys, "explain", "gemm_F16_m8", status=1)
    assert out["source"] is None
    assert any("no candidate list is stored" in step for step in out["steps"])


def test_explain_refuses_bad_input_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "conv__m64"]) == 2  # an empty token: not a key
    assert "tunecache: error:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["explain", "conv_F32_m64", "--scenario", "s=1,x"])
    assert stop.value.code == EXIT_USAGE
    assert main(["explain", "conv_F32_m64", "--candidates", "a,b", "--heuristic", "c"]) == 2


def test_sql(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    info = run_json(capsys, "sql")
    assert info["database"] == str(filled.path)
    assert "decisions" in info["views"] and len(info["examples"]) >= 3
    assert "SELECT" in run_human(capsys, "sql")
    result = run_json(capsys, "sql", "SELECT key, choice FROM decisions ORDER BY key")
    assert result["columns"] == ["key", "choice"] and len(result["rows"]) == 3
    assert "conv_F32_m64_k3" in run_human(capsys, "sql", "SELECT key FROM decisions")
    before = rows(filled.path)
    assert main(["sql", "DELETE FROM entries"]) == 2
    assert "not authorized" in capsys.readouterr().err
    assert rows(filled.path) == before


# --- reading without the store, and output of any size ------------------------------------------

#: every key of a listed entry, as docs/cli.md documents them
ENTRY_KEYS = {
    "id", "key", "signature", "dims", "choice", "heuristic", "speedup", "status", "checksum",
    "validated_by", "masked_by", "run_id", "created_at", "updated_at",
}  # fmt: skip


def _many(count: int) -> Cache:
    """This machine's cache with `count` entries of one signature, m1 oldest."""
    from tunecache.cache import NewEntry

    cache = Cache.open()
    cache.put_many(
        [NewEntry(f"conv_F32_m{i}_k3", "im2col", NAMES, heuristic="direct") for i in range(count)]
    )
    return cache


def test_where_says_of_a_ready_cache_what_the_store_says(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(Path(__file__).resolve().parents[2] / "golden" / "rev0003.db", db)
    upgraded = run_process("where", "--json", "--db", str(db))  # through the store: upgraded
    assert upgraded.returncode == 0, upgraded.stderr
    read = run_process("where", "--json", "--db", str(db))  # through the reader
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == json.loads(upgraded.stdout)
    with Cache.open(path=db) as cache:
        info = json.loads(read.stdout)
        assert info["revision"] == cache.revision() == migrate.HEAD
        assert info["entries"] == cache.count() and info["writable"] is not cache.readonly
        assert info["fingerprint"] == cache.device.fingerprint
        assert info["database"] == str(cache.path)


def test_list_json_is_one_object_written_an_entry_a_line() -> None:
    with _many(3):
        pass
    done = run_process("list", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert list(shown) == ["count", "entries"] and shown["count"] == 3
    assert [set(e) for e in shown["entries"]] == [ENTRY_KEYS] * 3
    assert [e["key"] for e in shown["entries"]] == [f"conv_F32_m{i}_k3" for i in (2, 1, 0)]
    lines = done.stdout.splitlines()
    assert len(lines) == 3 + 3 + 2 and all(json.loads(line.rstrip(",")) for line in lines[3:6])
    cut = json.loads(run_process("list", "--json", "--limit", "2").stdout)
    assert cut["count"] == 2 and len(cut["entries"]) == 2
    assert json.loads(run_process("list", "--json", "--op", "gemm").stdout) == {
        "count": 0,
        "entries": [],
    }


def test_list_to_a_pipe_prints_every_entry_aligned() -> None:
    with _many(120):
        pass
    done = run_process("list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "120 entries" and len(lines) == 1 + 120 + 1
    # Columns start where the header's do, on every row.
    starts = [lines[0].index(name) for name in ("key", "choice", "status", "updated")]
    for line in lines[1:-1]:
        assert [line[s - 2 : s] for s in starts] == ["  "] * 4 and line[starts[0]] == "c", line


def test_list_on_a_terminal_shows_a_screen_and_says_how_to_see_the_rest() -> None:
    with _many(60):
        pass
    status, out = run_on_terminal("list")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 1 + 50 + 1, out
    assert lines[1].startswith("60 ") and "conv_F32_m59_k3" in lines[1]  # the newest first
    assert lines[-1].startswith("50 of 60 entries shown, 10 more: --all shows every one")
    status, out = run_on_terminal("list", "--all")
    assert status == 0 and out.splitlines()[-1] == "60 entries"
    status, out = run_on_terminal("list", "--limit", "5")
    assert status == 0 and len(out.splitlines()) == 7 and out.splitlines()[-1] == "5 entries"
    status, out = run_on_terminal("list", "--signature", "gemm_F32")
    assert status == 0 and out.splitlines()[-1] == "0 entries"
    assert run_process("list", "--all", "--limit", "3").returncode == EXIT_USAGE


def test_a_narrow_terminal_cuts_the_key_and_keeps_it_recognisable() -> None:
    from tunecache.cache import NewEntry

    long_key = "einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided"
    with Cache.open() as cache:
        cache.put_many([NewEntry(long_key, "im2col", NAMES)])
    status, out = run_on_terminal("list", columns=100)
    row = out.splitlines()[1]
    # The model lists give way first, then the key, down to 32 characters: the rest wraps.
    assert status == 0 and f"  {long_key[:31]}…  im2col  " in row, out
    status, out = run_on_terminal("list", columns=160)
    assert status == 0 and len(out.splitlines()[1]) <= 160 and long_key in out
    assert long_key in run_process("list", env={"COLUMNS": "80"}).stdout  # a pipe: whole


def test_list_into_a_pipe_closed_early_is_no_error() -> None:
    with _many(3000):
        pass
    child = subprocess.Popen(
        [sys.executable, "-m", "tunecache", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    assert child.stdout.readline().startswith(b"id ")
    child.stdout.close()  # as `| head -1` does
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0 and err == b"", err
