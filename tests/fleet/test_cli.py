"""TUNECACHE_URL on the command line: the commands that work on a local file only refuse it in
one line, and say how to name a file; none of it needs a server."""

from __future__ import annotations

import pytest

from tunecache.cli import main

URL = "postgresql+psycopg://me:s3cret@/fleet?host=/nowhere"


@pytest.mark.parametrize("command", ["list", "inspect conv_F32_m1_k3", "models", "doctor"])
def test_local_commands_refuse_a_fleet_url(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNECACHE_URL", URL)
    assert main(command.split()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--db" in err
    assert "s3cret" not in err and "me:***@" in err


def test_a_url_of_another_database_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNECACHE_URL", "mysql://me:s3cret@db/x")
    assert main(["where"]) == 2
    err = capsys.readouterr().err
    assert "postgresql+psycopg" in err and "s3cret" not in err
