"""The subcommands that keep a cache in shape: prune and doctor."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.cli.conftest import NAMES, rows, run_human, run_json, run_on_terminal
from tunecache.cache import Cache
from tunecache.cli import main


def test_prune_dry_run_then_for_real(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    before = rows(filled.path)
    dry = run_json(capsys, "prune", "--masked", "--unvalidated", "--dry-run")
    assert dry["dry_run"] is True
    assert sorted(e["key"] for e in dry["entries"]) == ["conv_F32_m128_k3", "matmul_F32_m8_n8"]
    assert rows(filled.path) == before
    assert "would remove 2 entries" in run_human(
        capsys, "prune", "--masked", "--unvalidated", "--dry-run"
    )
    real = run_json(capsys, "prune", "--masked", "--unvalidated")
    assert real["entries"] == dry["entries"] and real["dry_run"] is False
    assert [e.key.text for e in filled.entries()] == ["conv_F32_m64_k3"]


def test_prune_stale_against_a_candidates_file(
    filled: Cache, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lists = tmp_path / "lists.json"
    lists.write_text(json.dumps({"conv_F32": ["direct", "im2col"]}))
    out = run_json(capsys, "prune", "--candidates", str(lists), "--dry-run")
    assert sorted(e["key"] for e in out["entries"]) == ["conv_F32_m128_k3", "conv_F32_m64_k3"]
    lists.write_text("[1, 2]")
    assert main(["prune", "--candidates", str(lists)]) == 2
    assert "must map each signature" in capsys.readouterr().err


def test_prune_versions(
    filled: Cache, capsys: pytest.CaptureFixture[str], _isolated_cache_root: Path
) -> None:
    old = filled.device.replace(client_version="0.0.1")
    with Cache.open(device=old) as stale:
        stale.put("conv_F32_m1", choice="direct", candidates=NAMES)
        folder = stale.path.parent.parent
    out = run_json(capsys, "prune", "--versions")
    assert [(v["version"], v["removed"]) for v in out["versions"]] == [("0.0.1", True)]
    assert not folder.exists() and filled.count() == 3


def test_doctor(filled: Cache, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, "doctor")
    assert report["healthy"] is True and report["integrity"] == ["ok"]
    conn = sqlite3.connect(filled.path)
    conn.execute("INSERT INTO keys (text, signature, dims) VALUES ('pool_F32', 'pool_F32', '')")
    conn.commit()
    conn.close()
    report = run_json(capsys, "doctor", status=1)
    assert [p["kind"] for p in report["problems"]] == ["orphaned-keys"]
    assert "--repair would delete them" in run_human(capsys, "doctor", status=1)
    assert "repaired: delete them" in run_human(capsys, "doctor", "--repair")
    assert run_json(capsys, "doctor")["problems"] == []


def test_prune_prints_its_entries_as_a_plain_table(
    filled: Cache, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_human(capsys, "prune", "--masked", "--unvalidated", "--dry-run").splitlines()
    assert out[0] == "entries would remove:"
    assert out[1].split() == ["id", "key", "choice", "status", "updated", "why"]
    assert [line.split()[1] for line in out[2:4]] == ["conv_F32_m128_k3", "matmul_F32_m8_n8"]
    assert out[2].endswith("unvalidated, masked") and out[3].endswith("unvalidated")
    assert out[4].startswith("would remove 2 entries") and len(out) == 5


def test_prune_on_a_terminal_lists_a_screen_of_entries_unless_all(filled: Cache) -> None:
    from tunecache.cache import NewEntry

    filled.put_many([NewEntry(f"gemm_F32_m{i}", "direct", NAMES) for i in range(60)])
    status, out = run_on_terminal("prune", "--unvalidated", "--dry-run")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2 + 50 + 2, out
    assert lines[-2].startswith("50 of 62 entries shown, 12 more: --all shows every one")
    assert lines[-1].startswith("would remove 62 entries")
    status, out = run_on_terminal("prune", "--unvalidated", "--dry-run", "--all")
    assert status == 0 and len(out.splitlines()) == 2 + 62 + 1
