"""The subcommands that move entries between caches: export, import and merge."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import NAMES, rows, run_human, run_json
from tests.exchange.conftest import items, stream, without_time
from tunecache.cache import Cache
from tunecache.cli import main
from tunecache.exchange import stream as streams


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
    assert without_time(first.read_bytes()) == without_time(second.read_bytes())
    assert "unchanged" in run_human(capsys, "import", str(first), "--db", str(other))


def test_a_truncated_or_foreign_file_is_refused_and_changes_nothing(
    exported: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    export = exported
    target = tmp_path / "target.db"
    Cache.open(path=target).close()  # reading (`where`) would create nothing
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
    assert items(exported)[0]["format"] == "tunecache-export"
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
    parts = items(exported.read_bytes())
    parts[0]["exported_at"] = "0001-01-01T00:00:00+05:00"  # in UTC, before year 1
    bad.write_bytes(stream(parts))
    assert main(["import", str(bad), "--db", str(other)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("tunecache: error:") and "out of range" in err and err.count("\n") == 1


def test_a_failed_export_leaves_the_file_as_it_was(
    filled: Cache,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stream is written to a temporary file beside the target, renamed only at its end.
    target = tmp_path / "out" / "a.cbor"
    target.parent.mkdir()
    target.write_bytes(b"an older export")
    monkeypatch.setattr(streams, "ITEM_MAX_SIZE", 100)  # the first entry is refused midway
    assert main(["export", "-o", str(target)]) == 3
    assert capsys.readouterr().err.startswith("tunecache: error: export file: the entry item")
    assert target.read_bytes() == b"an older export"
    assert [p.name for p in target.parent.iterdir()] == ["a.cbor"]


def test_a_version_1_export_still_imports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    golden = Path(__file__).resolve().parents[2] / "golden" / "export-v1.cbor"
    target = tmp_path / "target.db"
    args = ("--db", str(target), "--cpu", "test-cpu-9000", "--threads", "4")
    report = run_json(capsys, "import", str(golden), *args, "--allow-other-device")
    assert report["counts"]["added"] == 4 and report["tool"] == "0.1.0"
    summary = run_json(capsys, "export", "-o", str(tmp_path / "b.cbor"), *args)
    assert summary["format_version"] == 2 and summary["entries"] == 4


def test_import_and_merge_check_records_beside_themselves_on_more_than_one_cpu(
    filled: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunecache import exchange, identity

    export = tmp_path / "a.cbor"
    assert main(["export", "-o", str(export)]) == 0
    seen: list[int] = []

    def spy(real: Any) -> Any:
        def call(*args: Any, **options: Any) -> Any:
            seen.append(options["workers"])
            return real(*args, **options)

        return call

    monkeypatch.setattr(exchange, "import_cache", spy(exchange.import_cache))
    monkeypatch.setattr(exchange, "merge", spy(exchange.merge))
    # The device named whole: its thread count would follow the CPUs this test pretends to have.
    where = ["--db", str(tmp_path / "t.db"), "--threads", str(filled.device.threads), "--json"]
    for cpus in (1, 2):
        monkeypatch.setattr(identity, "usable_cpus", lambda cpus=cpus: cpus)
        assert main(["import", str(export), *where]) == 0
        assert main(["merge", str(export), *where]) == 0
    assert seen == [0, 0, 1, 1]
    assert not gc.isenabled() or gc.get_freeze_count() == 0  # the import unfroze what it froze
