"""The identity configured once (tunecache.config): argument, then configure(), then the
environment, then the default, for every function and command that names a device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tunecache
from tests import tune_models as tm
from tests.conftest import ROOT, python_output
from tunecache import config, identity, pools, tune
from tunecache._version import __version__
from tunecache.cache import Cache
from tunecache.cli import main
from tunecache.errors import BadArgumentError
from tunecache.resolve import Table


def _fields(**given: object) -> tuple[tuple[object, ...], dict[str, str]]:
    values, sources, _ = identity.settle(**given)  # type: ignore[arg-type]
    return values, sources


def test_an_argument_wins_over_configure_which_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values, sources = _fields()
    assert values[3:] == ("tunecache", __version__)
    assert sources["client"] == sources["client_version"] == sources["threads"] == "default"

    monkeypatch.setenv("TUNECACHE_CLIENT", "envrt")
    monkeypatch.setenv("TUNECACHE_CLIENT_VERSION", "3.0")
    monkeypatch.setenv("TUNECACHE_THREADS", "3")
    values, sources = _fields()
    assert (values[1], values[3], values[4]) == (3, "envrt", "3.0")
    assert set(sources.values()) == {"environment", "default"}

    tunecache.configure(client="confrt", client_version="2.0", threads=2)
    values, sources = _fields()
    assert (values[1], values[3], values[4]) == (2, "confrt", "2.0")
    assert (sources["client"], sources["client_version"], sources["threads"]) == ("configure",) * 3

    values, sources = _fields(client="argrt", client_version="1.0", threads=1)
    assert (values[1], values[3], values[4]) == (1, "argrt", "1.0")
    assert (sources["client"], sources["threads"]) == ("argument", "argument")


def test_a_version_goes_with_its_client_never_with_a_weaker_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TUNECACHE_CLIENT", "envrt")
    monkeypatch.setenv("TUNECACHE_CLIENT_VERSION", "3.0")
    # An explicit tunecache is tunecache at its own version, not at envrt's.
    assert _fields(client="tunecache")[0][3:] == ("tunecache", __version__)
    with pytest.raises(BadArgumentError, match=r"client 'argrt' \(given\) needs a client_version"):
        _fields(client="argrt")
    # A stronger version goes with a weaker client: --client-version for the configured one.
    assert _fields(client_version="3.1")[0][3:] == ("envrt", "3.1")
    monkeypatch.delenv("TUNECACHE_CLIENT_VERSION")
    with pytest.raises(BadArgumentError, match="from TUNECACHE_CLIENT"):
        _fields()


@pytest.mark.parametrize("value", ["abc", "0", "-2", "70000", "1.5"])
def test_a_bad_thread_count_in_the_environment_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TUNECACHE_THREADS", value)
    with pytest.raises(BadArgumentError, match=r"^TUNECACHE_THREADS must be a whole number") as e:
        tunecache.detect()
    assert "\n" not in str(e.value)
    done = subprocess.run(
        [sys.executable, "-m", "tunecache", "where"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "TUNECACHE_THREADS" in line and value in line
    # An explicit count wins, and the bad variable is then never read.
    assert tunecache.detect(threads=2).threads == 2


def test_bad_values_are_refused_where_they_are_given(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad, said in [
        ({"threads": 0}, r"configure\(threads=\) must be a whole number"),
        ({"threads": True}, r"configure\(threads=\)"),
        ({"client": "a b", "client_version": "1"}, r"configure\(client=\): client name must"),
        ({"client": "myrt"}, r"needs a client_version too"),
        ({"root": ""}, r"configure\(root=\) must be a folder"),
    ]:
        with pytest.raises(BadArgumentError, match=said):
            tunecache.configure(**bad)  # type: ignore[arg-type]
        assert config.configured() == dict.fromkeys(config.FIELDS)  # nothing half-set
    monkeypatch.setenv("TUNECACHE_CLIENT", "bad name")
    with pytest.raises(BadArgumentError, match=r"^TUNECACHE_CLIENT: client name must"):
        tunecache.detect(client_version="1")


def test_configure_keeps_what_it_is_not_told_and_returns_what_it_replaced(
    tmp_path: Path,
) -> None:
    previous = tunecache.configure(client="myrt", client_version="1.0")
    assert previous == dict.fromkeys(config.FIELDS)
    tunecache.configure(threads=5, root=tmp_path / "r")
    assert config.configured() == {
        "client": "myrt",
        "client_version": "1.0",
        "threads": 5,
        "root": str(tmp_path / "r"),
    }
    before = tunecache.configure(threads=None)  # None clears one field
    assert config.configured()["threads"] is None and before["threads"] == 5
    tunecache.configure(**before)  # type: ignore[arg-type]
    assert config.configured()["threads"] == 5
    config.reset()
    assert not config.is_configured()


def test_a_root_alone_says_where_not_who(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in config.FIELDS:
        monkeypatch.delenv(config.ENV_VARS[name], raising=False)
    monkeypatch.setenv(config.ENV_VARS["root"], str(tmp_path / "env"))
    assert not config.is_configured()
    monkeypatch.delenv(config.ENV_VARS["root"])
    tunecache.configure(root=tmp_path / "r")
    assert not config.is_configured()  # as TUNECACHE_DIR alone: where, not who
    tunecache.configure(threads=2)
    assert config.is_configured()
    config.reset()


def test_open_table_open_and_detect_read_the_configuration(tmp_path: Path) -> None:
    tunecache.configure(client="myrt", client_version="1.4", threads=3, root=tmp_path / "cfg")
    expected = tmp_path / "cfg" / "tune" / "1.4"
    with tunecache.open() as cache:
        assert cache.path.parent == expected / f"{cache.device.cpu}-t3"
        assert (cache.device.client, cache.device.threads) == ("myrt", 3)
        cache.put("op_m4", choice="b", candidates=["a", "b"], heuristic="a", status="accepted")
    table = Table.open()
    assert table.path == cache.path
    assert table.resolve(tunecache.parse("op_m4"), ("a", "b"), "a").choice == "b"
    # An explicit argument still wins, here a root of its own.
    with tunecache.open(root=tmp_path / "own") as other:
        assert other.path.is_relative_to(tmp_path / "own")
        assert other.device.client == "myrt"


def test_the_root_follows_configure_over_tunecache_dir(
    tmp_path: Path, _isolated_cache_root: Path
) -> None:
    assert config.root(None) == (str(_isolated_cache_root), "environment")
    tunecache.configure(root="relative-root")
    named, source = config.root(None)
    assert source == "configure" and Path(str(named)).is_absolute()
    assert config.root(tmp_path) == (tmp_path, "argument")


def test_tune_reads_the_configuration(tmp_path: Path) -> None:
    tunecache.configure(client="myrt", client_version="1.0", threads=1, root=tmp_path / "cfg")
    report = tune.tune(tm.ENCODER, share=0.0)
    assert report.model == "encoder"
    (db,) = (tmp_path / "cfg" / "tune" / "1.0").glob("*-t1/cache.db")
    with Cache.open(path=db, client="myrt", client_version="1.0", threads=1) as cache:
        assert cache.get(tm.NORM, candidates=tm.loop.candidates) is not None


def test_where_says_where_each_field_came_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNECACHE_CLIENT", "envrt")
    monkeypatch.setenv("TUNECACHE_CLIENT_VERSION", "3.0")
    tunecache.configure(threads=2)
    assert main(["where", "--json", "--cpu", "xeon-9"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["sources"] == {
        "client": "environment",
        "client_version": "environment",
        "threads": "configure",
        "root": "environment",
        "cpu": "argument",
        "accelerator": "default",
    }
    assert "threads_counted" not in info
    assert info["database"].endswith("/tune/3.0/xeon-9-t2/cache.db")
    assert main(["where"]) == 0
    out = capsys.readouterr().out
    assert "envrt  (environment: TUNECACHE_CLIENT)" in out
    assert "2  (configure)" in out
    config.reset()
    monkeypatch.delenv("TUNECACHE_CLIENT")
    monkeypatch.delenv("TUNECACHE_CLIENT_VERSION")
    assert main(["where", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["sources"]["threads"] == "default"
    counted = ("usable CPUs", "the BLAS pools", "the OpenMP pools", *pools.SETTINGS)
    assert info["threads_counted"] in counted
    assert main(["where", "--threads", "4", "--client", "tunecache"]) == 0
    out = capsys.readouterr().out
    assert "4  (argument: --threads)" in out and "tunecache  (argument: --client)" in out


def test_disable_takes_1_or_0(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not config.disabled()
    monkeypatch.setenv("TUNECACHE_DISABLE", "1")
    assert config.disabled()
    monkeypatch.setenv("TUNECACHE_DISABLE", "yes")
    with pytest.raises(BadArgumentError, match=r"^TUNECACHE_DISABLE must be 1 or 0"):
        config.disabled()


def test_the_resolver_settles_its_identity_without_threadpoolctl() -> None:
    # The resolver's cold start, with an identity in the environment: neither threadpoolctl
    # (no BLAS is loaded) nor the store comes with it.
    probe = (
        "import sys\n"
        "from tunecache.resolve import Table\n"
        "from tunecache.keys import Key\n"
        "t = Table.open()\n"
        "t.resolve(Key('op', (('n', 4),)), ('a', 'b'), 'a')\n"
        "print(t.path)\n"
        "print(' '.join(sys.modules))\n"
    )
    env = {"TUNECACHE_CLIENT": "myrt", "TUNECACHE_CLIENT_VERSION": "2.0", "TUNECACHE_THREADS": "3"}
    path, modules = python_output(probe, {**__import__("os").environ, **env}).splitlines()
    assert "/tune/2.0/" in path and path.endswith("-t3/cache.db")
    loaded = {m.split(".")[0] for m in modules.split()}
    assert not loaded & {"threadpoolctl", "sqlalchemy", "alembic", "numpy"}


def test_every_command_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNECACHE_CLIENT", "envrt")
    monkeypatch.setenv("TUNECACHE_CLIENT_VERSION", "3.0")
    monkeypatch.setenv("TUNECACHE_THREADS", "3")
    with tunecache.open() as cache:
        cache.put("op_m4", choice="b", candidates=["a", "b"], heuristic="a", status="accepted")
    assert main(["list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 1
    assert main(["explain", "op_m4", "--json"]) == 0
    assert "exact" in capsys.readouterr().out
    # An option given names another identity, whose cache is not there.
    assert main(["list", "--threads", "2"]) == 2
    assert "no cache at" in capsys.readouterr().err
