"""The tunecache command, run as a real process."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tunecache._version import __version__
from tunecache.cache import Cache
from tunecache.cli import EXIT_USAGE, main
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.device import detect


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunecache", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_version() -> None:
    done = _run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"tunecache {__version__}"


def test_where_creates_the_cache_and_prints_its_path(_isolated_cache_root: Path) -> None:
    done = _run("where")
    assert done.returncode == 0, done.stderr
    device = detect()
    db = _isolated_cache_root / "tune" / __version__ / f"{device.cpu}-t{device.threads}"
    assert re.search(rf"^database: +{re.escape(str(db / 'cache.db'))}$", done.stdout, re.MULTILINE)
    assert re.search(r"^revision: +0003$", done.stdout, re.MULTILINE)
    assert re.search(r"^entries: +0$", done.stdout, re.MULTILINE)
    assert (db / "cache.db").is_file()


def test_where_json_is_stable_for_scripts(_isolated_cache_root: Path) -> None:
    done = _run("where", "--json", "--threads", "3", "--accelerator", "NVIDIA H200")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert set(info) == {"device", "fingerprint", "database", "revision", "entries", "writable"}
    assert info["device"]["threads"] == 3
    assert info["device"]["accelerator"] == "nvidia-h200"
    assert info["database"].endswith("-t3/cache.db")
    assert info["writable"] is True


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("where", "--threads", "0"), 2, "threads must be between 1 and 65536"),
        (("where", "--client", "myruntime"), 2, "needs a client_version"),
        (("where", "--threads", "many"), EXIT_USAGE, "invalid int value"),
        (("frobnicate",), EXIT_USAGE, "invalid choice"),
        ((), EXIT_USAGE, "required"),
    ],
)
def test_errors_are_one_line_without_traceback(
    args: tuple[str, ...], status: int, message: str
) -> None:
    done = _run(*args)
    assert done.returncode == status
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tunecache")
    assert message in last


def test_a_broken_database_is_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite at all " * 64)
    done = _run("where", "--db", str(bad))
    assert done.returncode == 5
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert bad.read_bytes() == b"not sqlite at all " * 64


def test_main_is_callable_as_a_library_function(
    capsys: pytest.CaptureFixture[str], _isolated_cache_root: Path
) -> None:
    assert main(["where", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0


def test_help_exists_for_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    done = _run("--help")
    assert done.returncode == 0
    assert "usage: tunecache" in done.stdout
    # Every subcommand the parser knows, aliases included, so one added later is covered too.
    names = sorted(_subcommands())
    assert {"where", "list", "show", "inspect", "models", "prune", "export", "import"} <= set(names)
    assert {"merge", "doctor", "sql"} <= set(names)
    for name in names:
        with pytest.raises(SystemExit) as stop:
            main([name, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        # An alias prints its command's usage: `show` is `list`.
        assert re.match(rf"usage: tunecache {name if name != 'show' else 'list'} ", out), name
        assert "--json" in out and "--db" in out, name
        # The description says what the subcommand is for, not only its flags.
        assert len(out.split("\n\n")[1].strip()) > 20, name


def _subcommands() -> dict[str, object]:
    import argparse

    from tunecache.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_a_newer_schema_is_one_warning_line_even_under_w_error(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    assert _run("where", "--db", str(db)).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'fff9'")
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "tunecache", "where", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("tunecache: warning: ") and "newer than this tunecache" in lines[0]
    assert re.search(r"^read-only: +cache database", done.stdout, re.MULTILINE)


def test_an_empty_root_is_refused_and_a_relative_one_made_absolute(tmp_path: Path) -> None:
    done = _run("where", "--root", "")
    assert done.returncode == 2
    assert "must not be empty" in done.stderr
    done = _run("where", "--json", "--root", "rel", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["database"].startswith(str(tmp_path / "rel" / "tune"))


# --- the maintenance subcommands, in process against a cache filled through the library -------

NAMES = ("direct", "im2col", "winograd")


@pytest.fixture
def filled(_isolated_cache_root: Path) -> Iterator[Cache]:
    """This machine's own cache (where the command looks by default), with a few entries."""
    record = TimingRecord(
        candidates=(
            CandidateTiming("direct", (3e-5, 3.1e-5)),
            CandidateTiming("im2col", (1e-5, 1.2e-5)),
            CandidateTiming("winograd", error="unsupported"),
        ),
        settings={"min_time": 0.01},
    )
    with Cache.open() as cache:
        with cache.run("tune", "from the tests") as run_id:
            good = cache.put(
                "conv_F32_m64_k3",
                choice="im2col",
                candidates=NAMES,
                heuristic="direct",
                record=record,
                speedup=2.5,
                run_id=run_id,
            )
        masked = cache.put("conv_F32_m128_k3", choice="winograd", candidates=NAMES)
        cache.put("matmul_F32_m8_n8", choice="direct", candidates=NAMES)
        cache.validate(
            good, model="resnet", fingerprint="r1", verdict="validated", rounds=3, confirmations=3
        )
        cache.validate(masked, model="resnet", fingerprint="r1", verdict="masked", rounds=3)
        yield cache


def _json(capsys: pytest.CaptureFixture[str], *args: str, status: int = 0) -> Any:
    assert main([*args, "--json"]) == status
    return json.loads(capsys.readouterr().out)


def _human(capsys: pytest.CaptureFixture[str], *args: str, status: int = 0) -> str:
    assert main(list(args)) == status
    return capsys.readouterr().out


def _rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables
        }
    finally:
        conn.close()


def test_statuses_match_the_store() -> None:
    from tunecache.cli import STATUSES
    from tunecache.store.models import ENTRY_STATUSES

    assert STATUSES == ENTRY_STATUSES


def test_list_json_and_filters(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "list")
    assert out["count"] == 3
    row = next(e for e in out["entries"] if e["key"] == "conv_F32_m64_k3")
    assert (row["choice"], row["heuristic"], row["speedup"]) == ("im2col", "direct", 2.5)
    assert row["validated_by"] == ["resnet"] and row["masked_by"] == []
    assert datetime.fromisoformat(row["updated_at"]).tzinfo is not None
    assert [e["key"] for e in _json(capsys, "list", "--op", "matmul")["entries"]] == [
        "matmul_F32_m8_n8"
    ]
    assert _json(capsys, "show", "--model", "resnet", "--signature", "conv_F32")["count"] == 2
    assert _json(capsys, "list", "--older-than", "1d")["count"] == 0
    assert _json(capsys, "list", "--newer-than", "2000-01-01")["count"] == 3
    assert _json(capsys, "list", "--limit", "1")["count"] == 1


def test_list_prints_a_table(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    out = _human(capsys, "list")
    header = next(line for line in out.splitlines() if "key" in line and "choice" in line)
    for column in ("heuristic", "speedup", "validated by", "masked by", "updated"):
        assert column in header
    assert re.search(r"conv_F32_m64_k3\s.*im2col\s.*direct\s.*2\.5x.*resnet", out)
    assert "3 entries" in out


def test_bad_arguments_are_usage_errors_and_touch_nothing(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _rows(filled.path)
    for args in (
        ("list", "--older-than", "last tuesday"),
        ("list", "--status", "golden"),
        ("list", "--limit", "-1"),
        ("prune",),
        ("prune", "--older-than", "soon"),
        ("export", "--json"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(list(args))
        assert stop.value.code == EXIT_USAGE, args
        assert "error:" in capsys.readouterr().err
    assert _rows(filled.path) == before


def test_inspect_by_id_and_by_key(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    entry = filled.get("conv_F32_m64_k3")
    assert entry is not None
    [by_id] = _json(capsys, "inspect", str(entry.id))["entries"]
    assert by_id["entry"]["key"] == "conv_F32_m64_k3"
    assert [c["samples"] for c in by_id["candidates"]] == [2, 2, 0]
    assert by_id["candidates"][2]["error"] == "unsupported"
    assert by_id["verdicts"][0]["model"] == "resnet"
    assert by_id["run"]["notes"] == "from the tests"
    out = _human(capsys, "inspect", "conv_F32_m64_k3")
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


def test_models(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    [model] = _json(capsys, "models")["models"]
    assert (model["name"], model["validated"], model["masked"]) == ("resnet", 1, 1)
    assert "resnet" in _human(capsys, "models")


def test_prune_dry_run_then_for_real(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    before = _rows(filled.path)
    dry = _json(capsys, "prune", "--masked", "--unvalidated", "--dry-run")
    assert dry["dry_run"] is True
    assert sorted(e["key"] for e in dry["entries"]) == ["conv_F32_m128_k3", "matmul_F32_m8_n8"]
    assert _rows(filled.path) == before
    assert "would remove 2 entries" in _human(
        capsys, "prune", "--masked", "--unvalidated", "--dry-run"
    )
    real = _json(capsys, "prune", "--masked", "--unvalidated")
    assert real["entries"] == dry["entries"] and real["dry_run"] is False
    assert [e.key.text for e in filled.entries()] == ["conv_F32_m64_k3"]


def test_prune_stale_against_a_candidates_file(
    filled: Cache, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lists = tmp_path / "lists.json"
    lists.write_text(json.dumps({"conv_F32": ["direct", "im2col"]}))
    out = _json(capsys, "prune", "--candidates", str(lists), "--dry-run")
    assert sorted(e["key"] for e in out["entries"]) == ["conv_F32_m128_k3", "conv_F32_m64_k3"]
    lists.write_text("[1, 2]")
    assert main(["prune", "--candidates", str(lists)]) == 2
    assert "must map each signature" in capsys.readouterr().err


def test_prune_versions(
    filled: Cache, capsys: pytest.CaptureFixture[str], _isolated_cache_root: Path
) -> None:
    old = replace(filled.device, client_version="0.0.1")
    with Cache.open(device=old) as stale:
        stale.put("conv_F32_m1", choice="direct", candidates=NAMES)
        folder = stale.path.parent.parent
    out = _json(capsys, "prune", "--versions")
    assert [(v["version"], v["removed"]) for v in out["versions"]] == [("0.0.1", True)]
    assert not folder.exists() and filled.count() == 3


def test_export_then_import_elsewhere_round_trips(
    filled: Cache, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first, second, other = tmp_path / "a.cbor", tmp_path / "b.cbor", tmp_path / "other.db"
    summary = _json(capsys, "export", "-o", str(first))
    assert summary["entries"] == 3 and summary["bytes"] == first.stat().st_size
    report = _json(capsys, "import", str(first), "--db", str(other))
    assert report["counts"]["added"] == 3 and report["run_id"] is not None
    assert "exported 3 entries" in _human(capsys, "export", "-o", str(second), "--db", str(other))
    one, two = cbor2.loads(first.read_bytes()), cbor2.loads(second.read_bytes())
    one.pop("exported_at")
    two.pop("exported_at")
    assert one == two
    assert "unchanged" in _human(capsys, "import", str(first), "--db", str(other))


def test_a_truncated_or_foreign_file_is_refused_and_changes_nothing(
    filled: Cache, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    export = tmp_path / "a.cbor"
    assert main(["export", "-o", str(export)]) == 0
    capsys.readouterr()
    target = tmp_path / "target.db"
    assert main(["where", "--db", str(target)]) == 0
    capsys.readouterr()
    before = _rows(target)
    truncated = tmp_path / "cut.cbor"
    truncated.write_bytes(export.read_bytes()[:-7])
    assert main(["import", str(truncated), "--db", str(target)]) == 3
    assert capsys.readouterr().err.startswith("tunecache: error: export file: ")
    assert main(["import", str(tmp_path / "missing.cbor"), "--db", str(target)]) == 2
    capsys.readouterr()
    # Another thread count is another device: refused unless allowed, then unvalidated.
    assert main(["import", str(export), "--db", str(target), "--threads", "97"]) == 4
    assert "allow another device" in capsys.readouterr().err
    assert _rows(target) == before
    report = _json(
        capsys,
        "import",
        str(export),
        "--db",
        str(target),
        "--threads",
        "97",
        "--allow-other-device",
    )
    assert report["other_device"] is True and report["counts"]["added"] == 3
    statuses = _json(capsys, "list", "--db", str(target), "--threads", "97")["entries"]
    assert {e["status"] for e in statuses} == {"unvalidated"}


def test_merge_a_database_and_an_export(
    filled: Cache, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "target.db"
    with Cache.open(path=target) as cache:
        cache.put("conv_F32_m64_k3", choice="direct", candidates=NAMES)
    report = _json(capsys, "merge", str(filled.path), "--db", str(target), "--policy", "both")
    assert report["kind"] == "merge"
    assert report["counts"] == {
        "added": 2,
        "unchanged": 0,
        "kept-local": 0,
        "replaced": 0,
        "kept-both": 1,
    }
    assert report["origin_device"] is not None
    export = tmp_path / "a.cbor"
    assert main(["export", "-o", str(export)]) == 0
    capsys.readouterr()
    out = _human(capsys, "merge", str(export), "--db", str(target), "--policy", "evidence")
    assert "replaced" in out and "conv_F32_m64_k3" in out
    assert main(["merge", str(tmp_path / "nothing.db")]) == 2


def test_doctor(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, "doctor")
    assert report["healthy"] is True and report["integrity"] == ["ok"]
    conn = sqlite3.connect(filled.path)
    conn.execute("INSERT INTO keys (text, signature, dims) VALUES ('pool_F32', 'pool_F32', '')")
    conn.commit()
    conn.close()
    report = _json(capsys, "doctor", status=1)
    assert [p["kind"] for p in report["problems"]] == ["orphaned-keys"]
    assert "--repair would delete them" in _human(capsys, "doctor", status=1)
    assert "repaired: delete them" in _human(capsys, "doctor", "--repair")
    assert _json(capsys, "doctor")["problems"] == []


def test_sql(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    info = _json(capsys, "sql")
    assert info["database"] == str(filled.path)
    assert "decisions" in info["views"] and len(info["examples"]) >= 3
    assert "SELECT" in _human(capsys, "sql")
    result = _json(capsys, "sql", "SELECT key, choice FROM decisions ORDER BY key")
    assert result["columns"] == ["key", "choice"] and len(result["rows"]) == 3
    assert "conv_F32_m64_k3" in _human(capsys, "sql", "SELECT key FROM decisions")
    before = _rows(filled.path)
    assert main(["sql", "DELETE FROM entries"]) == 2
    assert "not authorized" in capsys.readouterr().err
    assert _rows(filled.path) == before


def test_export_to_a_pipe_and_a_bad_import_from_stdin(
    filled: Cache, capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    assert main(["export"]) == 0  # stdout is not a terminal here: the CBOR goes to it
    exported = capsysbinary.readouterr().out
    assert cbor2.loads(exported)["format"] == "tunecache-export"
    # A real process, so "one line, never a traceback" is what a user would see.
    imported = subprocess.run(
        [sys.executable, "-m", "tunecache", "import", "-", "--db", str(tmp_path / "t.db")],
        input=exported[:-3],
        capture_output=True,
        timeout=120,
    )
    assert imported.returncode == 3
    assert b"Traceback" not in imported.stderr
    assert imported.stderr.decode().strip().splitlines()[-1].startswith("tunecache: error:")
    assert not (tmp_path / "t.db").exists() or _rows(tmp_path / "t.db")["entries"] == []


# --- explain -------------------------------------------------------------------------------------


def test_explain_says_how_the_resolver_answers_and_why(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _rows(filled.path)
    exact = _json(capsys, "explain", "conv_F32_m64_k3")
    assert (exact["choice"], exact["source"]) == ("im2col", "exact")
    # resnet masked m128: for it, the heuristic; for a model with no verdict, nothing validated
    # m128, so it is not served either, but m96 borrows from the validated m64.
    masked = _json(
        capsys, "explain", "conv_F32_m128_k3", "--model", "resnet", "--heuristic", "direct"
    )
    assert (masked["choice"], masked["source"]) == ("direct", "masked")
    near = _json(capsys, "explain", "conv_F32_m96_k3", "--model", "vgg")
    assert (near["choice"], near["source"], near["borrowed_from"]) == (
        "im2col",
        "nearest",
        "conv_F32_m64_k3",
    )
    assert near["distance"] == pytest.approx(0.585, abs=1e-3)
    text = _human(capsys, "explain", "conv_F32_m1000_k3", "--candidates", ",".join(NAMES))
    assert "beyond the cap" in text and "(heuristic)" in text
    assert _rows(filled.path) == before  # explain only reads


def test_explain_without_a_known_candidate_list_exits_1(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _json(capsys, "explain", "gemm_F16_m8", status=1)
    assert out["source"] is None
    assert any("no candidate list is stored" in step for step in out["steps"])


def test_explain_refuses_bad_input_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "conv__m64"]) == 2  # an empty token: not a key
    assert "tunecache: error:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["explain", "conv_F32_m64", "--scenario", "s=1,x"])
    assert stop.value.code == EXIT_USAGE
    assert main(["explain", "conv_F32_m64", "--candidates", "a,b", "--heuristic", "c"]) == 2


# --- found in review --------------------------------------------------------------------------


def test_an_export_with_a_time_before_year_one_is_a_bad_file_not_a_crash(
    filled: Cache, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good, bad, other = tmp_path / "a.cbor", tmp_path / "bad.cbor", tmp_path / "other.db"
    _json(capsys, "export", "-o", str(good))
    doc = cbor2.loads(good.read_bytes())
    doc["exported_at"] = "0001-01-01T00:00:00+05:00"  # in UTC, before year 1
    bad.write_bytes(cbor2.dumps(doc))
    assert main(["import", str(bad), "--db", str(other)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("tunecache: error:") and "out of range" in err and err.count("\n") == 1


def test_an_age_beyond_the_calendar_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["list", "--older-than", "99999999d"])
    assert stop.value.code == EXIT_USAGE
    assert "outside the calendar" in capsys.readouterr().err


def test_inspect_of_a_non_ascii_digit_is_a_bad_key_rather_than_a_crash(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", "²"]) == 2  # "²".isdigit() is true, but it is no entry id
    err = capsys.readouterr().err
    assert err.startswith("tunecache: error:") and err.count("\n") == 1


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

    [found] = _json(capsys, "inspect", key, "--db", db, *identity)["entries"]
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
