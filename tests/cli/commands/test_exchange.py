"""The subcommands that move entries between caches: export, import and merge."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cbor2
import pytest

from tests.cli.conftest import NAMES, rows, run_human, run_json
from tunecache.cache import Cache
from tunecache.cli import main


@pytest.fixture
def exported(filled: Cache, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The filled cache, exported to a file by the command."""
    path = tmp_path / "a.cbor"
    assert run_json(capsys, "export", "-o", str(path))["path"] == str(path)
    return path


def test_export_then_import_elsewhere_round_trips(
    filled: Cache, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first, second, other = tmp_path / "a.cbor", tmp_path / "b.cbor", tmp_path / "other.db"
    summary = run_json(capsys, "export", "-o", str(first))
    assert summary["entries"] == 3 and summary["bytes"] == first.stat().st_size
    report = run_json(capsys, "import", str(first), "--db", str(other))
    assert report["counts"]["added"] == 3 and report["run_id"] is not None
    assert "exported 3 entries" in run_human(
        capsys, "export", "-o", str(second), "--db", str(other)
    )
    one, two = cbor2.loads(first.read_bytes()), cbor2.loads(second.read_bytes())
    one.pop("exported_at")
    two.pop("exported_at")
    assert one == two
    assert "unchanged" in run_human(capsys, "import", str(first), "--db", str(other))


def test_a_truncated_or_foreign_file_is_refused_and_changes_nothing(
    exported: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    export = exported
    target = tmp_path / "target.db"
    assert main(["where", "--db", str(target)]) == 0
    capsys.readouterr()
    before = rows(target)
    truncated = tmp_path / "cut.cbor"
    truncated.write_bytes(export.read_bytes()[:-7])
    assert main(["import", str(truncated), "--db", str(target)]) == 3
    assert capsys.readouterr().err.startswith("tunecache: error: export file: ")
    assert main(["import", str(tmp_path / "missing.cbor"), "--db", str(target)]) == 2
    capsys.readouterr()
    # Another thread count is another device: refused unless allowed, then unvalidated.
    assert main(["import", str(export), "--db", str(target), "--threads", "97"]) == 4
    assert "allow another device" in capsys.readouterr().err
    assert rows(target) == before
    report = run_json(
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
    statuses = run_json(capsys, "list", "--db", str(target), "--threads", "97")["entries"]
    assert {e["status"] for e in statuses} == {"unvalidated"}


def test_merge_a_database_and_an_export(
    filled: Cache, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "target.db"
    with Cache.open(path=target) as cache:
        cache.put("conv_F32_m64_k3", choice="direct", candidates=NAMES)
    report = run_json(capsys, "merge", str(filled.path), "--db", str(target), "--policy", "both")
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
    out = run_human(capsys, "merge", str(export), "--db", str(target), "--policy", "evidence")
    assert "replaced" in out and "conv_F32_m64_k3" in out
    assert main(["merge", str(tmp_path / "nothing.db")]) == 2


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
    assert not (tmp_path / "t.db").exists() or rows(tmp_path / "t.db")["entries"] == []


def test_an_export_with_a_time_before_year_one_is_a_bad_file_not_a_crash(
    exported: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad, other = tmp_path / "bad.cbor", tmp_path / "other.db"
    doc = cbor2.loads(exported.read_bytes())
    doc["exported_at"] = "0001-01-01T00:00:00+05:00"  # in UTC, before year 1
    bad.write_bytes(cbor2.dumps(doc))
    assert main(["import", str(bad), "--db", str(other)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("tunecache: error:") and "out of range" in err and err.count("\n") == 1
