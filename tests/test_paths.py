"""Where caches live: the layout, and who decides the root."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunecache import paths
from tunecache.device import Device


def test_layout_is_root_tune_version_device(device: Device, tmp_path: Path) -> None:
    assert paths.database_path(device, tmp_path) == (
        tmp_path / "tune" / "0.1.0" / "test-cpu-9000-t4" / "cache.db"
    )
    assert paths.device_dir(device.with_threads(1), tmp_path).name == "test-cpu-9000-t1"


def test_explicit_root_beats_the_environment_which_beats_the_user_cache(
    device: Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNECACHE_DIR", str(tmp_path / "from-env"))
    assert paths.cache_root(root=tmp_path / "explicit") == tmp_path / "explicit"
    assert paths.cache_root() == tmp_path / "from-env"

    monkeypatch.delenv("TUNECACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # platformdirs' user cache folder of the client application
    assert paths.cache_root("myruntime") == tmp_path / "xdg" / "myruntime"
    other = Device(
        cpu="test-cpu-9000",
        threads=4,
        accelerator=None,
        client="myruntime",
        client_version="2.0",
    )
    assert paths.database_path(other) == (
        tmp_path / "xdg" / "myruntime" / "tune" / "2.0" / "test-cpu-9000-t4" / "cache.db"
    )


def test_an_empty_environment_variable_means_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNECACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_root() == tmp_path / "xdg" / "tunecache"
