"""What tunecache checks about its surroundings: SQLite's WAL defects, network filesystems."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tunecache.errors import BadArgumentError, StoreError, TunecacheWarning
from tunecache.store import filesystems, health, wal
from tunecache.store.engine import make_engine


@pytest.mark.parametrize(
    ("version", "affected"),
    [
        ((3, 6, 23), False),  # before WAL existed
        ((3, 7, 0), True),
        ((3, 40, 1), True),  # Debian 12
        ((3, 44, 5), True),
        ((3, 44, 6), False),  # backport
        ((3, 45, 1), True),  # Ubuntu 24.04: no backport to 3.45
        ((3, 50, 6), True),
        ((3, 50, 7), False),  # backport
        ((3, 51, 2), True),
        ((3, 51, 3), False),  # the fix
        ((3, 52, 0), False),
        ((3, 53, 1), False),
    ],
)
def test_the_wal_reset_bug_is_known_for_exactly_its_versions(
    version: tuple[int, int, int], affected: bool
) -> None:
    assert bool(health.wal_defects(version)) is affected


WRITES = textwrap.dedent(
    """
    import json, sqlite3, sys, warnings
    from tunecache.cache import Cache
    from tunecache.device import Device

    device = Device("test-cpu", 4, None, "tunecache", "0.1.0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Cache.open(device=device, path=sys.argv[1] + "/a.db") as cache:
            cache.count()
            for i in range(3):
                cache.put(f"conv_F32_h{i + 1}", choice="a", candidates=["a", "b"])
            cache.checkpoint()
    print(json.dumps([str(w.message) for w in caught]))
    """
)


def test_writes_warn_of_no_wal_defect_since_tunecache_cannot_meet_it(tmp_path: Path) -> None:
    # docs/reliability.md, "SQLite versions": every commit and checkpoint holds the writers'
    # lock and readers never checkpoint, so the warning is a line of doctor and where instead
    # (tests/reliability/test_wal.py).
    import json

    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", WRITES, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert json.loads(done.stdout) == []
    assert done.stderr == ""


def test_the_wal_defect_note_is_one_short_line_naming_the_fix() -> None:
    affected = health.wal_defects((3, 40, 1))
    assert [d.name for d in affected] == ["the WAL-reset bug"]
    line = wal.note((3, 40, 1))
    assert "\n" not in line and len(line) < 160
    assert line.startswith("3.40.1, with the WAL-reset bug") and "docs/reliability.md" in line
    assert wal.note((3, 51, 3)) == "3.51.3"


MOUNTINFO = textwrap.dedent(
    """\
    22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
    40 22 0:35 / /home rw,relatime shared:20 - nfs4 fileserver:/home rw,vers=4.2
    41 40 253:2 / /home/alice/local\\040disk rw,relatime - xfs /dev/vdb1 rw
    42 22 0:36 / /mnt/share rw - cifs //nas/share rw
    43 22 0:37 / /mnt/share rw - tmpfs tmpfs rw
    """
)


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/var/cache/tunecache", "ext4"),
        ("/home/alice/.cache/tunecache", "nfs4"),
        ("/home/alice/local disk/cache", "xfs"),  # a local disk mounted inside the share
        ("/mnt/share/cache", "tmpfs"),  # the later mount hides the earlier one
        ("/homework", "ext4"),  # a prefix of the name is not a parent folder
    ],
)
def test_the_filesystem_of_a_path_is_its_longest_mount(path: str, kind: str) -> None:
    found = health.filesystem_of(Path(path), MOUNTINFO)
    assert found is not None and found[1] == kind


def test_this_machines_own_mount_table_is_read(tmp_path: Path) -> None:
    if sys.platform != "linux":
        pytest.skip("mountinfo is Linux's")
    found = health.filesystem_of(tmp_path)
    print(f"{tmp_path} is on {found}")
    assert found is not None and found[1]


def test_a_cache_on_a_network_filesystem_is_refused_unless_one_host_is_promised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = Path("/home/alice/.cache/tunecache/tune/0.1.0/cpu-t4/cache.db")
    monkeypatch.delenv(health.ALLOW_NETWORK_FS_ENV, raising=False)
    with pytest.raises(StoreError, match="network filesystem \\(nfs4 at /home\\)") as info:
        health.check_filesystem(db, MOUNTINFO)
    assert "TUNECACHE_DIR" in str(info.value) and "\n" not in str(info.value)
    health.check_filesystem(Path("/var/cache/x/cache.db"), MOUNTINFO)  # a local disk: fine

    monkeypatch.setenv(health.ALLOW_NETWORK_FS_ENV, "1")
    monkeypatch.setattr(filesystems, "_warned_network", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        health.check_filesystem(db, MOUNTINFO)
        health.check_filesystem(db, MOUNTINFO)
    assert [w.category for w in caught] == [TunecacheWarning]  # once per mount point
    assert "only this host uses it" in str(caught[0].message)


def test_only_a_read_only_engine_may_treat_its_file_as_immutable(tmp_path: Path) -> None:
    with pytest.raises(BadArgumentError, match="immutable"):
        make_engine(tmp_path / "c.db", immutable=True)
