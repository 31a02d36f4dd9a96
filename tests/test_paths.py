"""Where caches live: the layout, and who decides the root."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

import tunecache
from tunecache import paths
from tunecache.device import CHECKED_FIELDS, Device


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


def test_locate_takes_a_device_first_and_a_path_over_the_root(tmp_path: Path) -> None:
    device = Device("cpu-x", 2, None, "app", "1.0")
    fields, db = paths.locate(device=device, root=tmp_path, client="other", threads=9)
    assert fields == device.fields
    assert db == tmp_path / "tune" / "1.0" / "cpu-x-t2" / paths.DATABASE_NAME
    fields, db = paths.locate(path=tmp_path / "x.db", client="app", client_version="2", cpu="c")
    assert fields[3:] == ("app", "2") and fields[0] == "c" and db == tmp_path / "x.db"


def test_every_location_option_is_a_keyword_of_locate() -> None:
    assert {*CHECKED_FIELDS, "root", "path", "device"} == paths.LOCATION_OPTIONS
    assert paths.Location.__optional_keys__ == paths.LOCATION_OPTIONS


def test_a_misspelt_option_is_a_type_error_that_names_the_function() -> None:
    with pytest.raises(TypeError, match=r"^Cache.open\(\) got an unexpected keyword .*'thread'"):
        tunecache.open(thread=2)
    with pytest.raises(TypeError, match=r"^Table.open\(\) got an unexpected keyword .*'modle'"):
        tunecache.Table.open(modle="m")
    with pytest.raises(TypeError, match=r"^detect\(\) got an unexpected keyword .*'thread'"):
        tunecache.detect(thread=2)
    # The options are still there for a type checker, and for introspection at run time.
    assert "location" in typing.get_type_hints(tunecache.Cache.open)


def test_a_sqlite_uri_is_built_from_the_path_bytes(tmp_path: Path) -> None:
    import os
    import sqlite3

    name = tmp_path / os.fsdecode(b"odd_\xff ?#%.db")
    uri = paths.sqlite_uri(name, mode="rwc")
    assert uri.startswith("file:/") and uri.endswith("/odd_%FF%20%3F%23%25.db?mode=rwc")
    assert paths.sqlite_uri("rel.db") == paths.sqlite_uri(Path.cwd() / "rel.db")
    sqlite3.connect(uri, uri=True).close()  # SQLite turns the escapes back into the bytes
    assert os.listdir(tmp_path) == [os.fsdecode(b"odd_\xff ?#%.db")]


def test_display_is_utf8_text_whatever_the_bytes() -> None:
    import os

    assert paths.display("/tmp/plain/é.cbor") == "/tmp/plain/é.cbor"
    shown = paths.display(os.fsdecode(b"/tmp/x_\xff"))
    assert shown == "/tmp/x_\\xff" and shown.encode("utf-8")


def test_kind_of_names_every_kind_of_file(tmp_path: Path) -> None:
    import os
    import stat

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_bytes(b"")
    assert paths.kind_of(os.stat(tmp_path / "fifo").st_mode) == "a FIFO"
    assert paths.kind_of(os.stat(tmp_path / "file").st_mode) == "a regular file"
    assert paths.kind_of(os.stat(tmp_path).st_mode) == "a folder"
    assert paths.kind_of(stat.S_IFCHR) == "a character device"
    assert paths.kind_of(stat.S_IFSOCK) == "a socket"
