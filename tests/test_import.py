"""Importing tunecache stays cheap: the read path never loads SQLAlchemy or Alembic."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import tunecache
from tests.conftest import ROOT
from tunecache import make_key
from tunecache.cache import Cache
from tunecache.device import Device


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(done.stdout.split())


def test_import_and_pure_values_load_no_database_library() -> None:
    loaded = _modules_after(
        "import tunecache\n"
        "k = tunecache.parse('einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided')\n"
        "tunecache.detect(); tunecache.Bucketing.level('balanced').apply(k)\n"
        "import tunecache.paths, tunecache.candidates, tunecache.errors"
    )
    heavy = {m for m in loaded if m.split(".")[0] in ("sqlalchemy", "alembic", "numpy", "cbor2")}
    assert heavy == set()


def test_the_store_loads_on_first_use() -> None:
    loaded = _modules_after("import tunecache\ntunecache.Cache")
    assert "sqlalchemy" in loaded
    assert "alembic" not in loaded  # only creating or upgrading a database needs it


def test_the_tuning_modules_are_attributes_loaded_on_first_use() -> None:
    assert "tunecache.tune" not in _modules_after("import tunecache")
    loaded = _modules_after("import tunecache\ntunecache.tune.Model\ntunecache.stats.compare")
    assert {"tunecache.tune", "tunecache.bench", "tunecache.accept", "tunecache.stats"} <= loaded
    # Tuning needs no store until it opens one: the resolver stays light.
    assert "sqlalchemy" not in loaded


def test_the_hot_path_loads_no_heavy_library_and_explain_only_when_asked() -> None:
    loaded = _modules_after(
        "import tunecache.resolve, tunecache.dispatch\n"
        "t = tunecache.resolve.Table.empty()\n"
        "t.resolve(tunecache.parse('op_n4'), ('a', 'b'), 'a')"
    )
    heavy = {m for m in loaded if m.split(".")[0] in ("sqlalchemy", "alembic", "numpy", "cbor2")}
    assert heavy == set()
    assert "tunecache.resolve.explain" not in loaded  # the first explanation loads it
    assert "tunecache.resolve.explain" in _modules_after(
        "import tunecache.resolve\ntunecache.resolve.Table.empty().explain('op_n4', ('a',))"
    )


def test_a_nearest_miss_loads_numpy_and_still_no_database_library(
    tmp_path: Path, device: Device
) -> None:
    db = tmp_path / "cache.db"
    # mm_F32 loads in bulk; odd_F32 has keys of other dim names and is read row by row.
    keys = [make_key("mm_F32", m=64, k=8), make_key("mm_F32", m=256, k=8)]
    keys += [make_key("odd_F32", m=4), make_key("odd_F32", n=4)]
    with Cache.open(path=db, device=device) as cache:
        for key in keys:
            cache.put(key, choice="b", candidates=("a", "b"), heuristic="a", status="accepted")
    assert "numpy" not in _modules_after("import tunecache.resolve.columns")
    opened = (
        "from tunecache import Device, Table, make_key\n"
        f"t = Table.open(path={str(db)!r}, device=Device(**{device.as_dict()!r}))\n"
    )
    hit = _modules_after(
        opened
        + "assert t.resolve(make_key('mm_F32', m=64, k=8), ('a', 'b'), 'a').source == 'exact'"
    )
    assert "tunecache.resolve.columns" not in hit  # an exact hit needs no bulk loader
    loaded = _modules_after(
        opened + "for key in (make_key('mm_F32', m=300, k=8), make_key('odd_F32', m=5)):\n"
        "    assert t.resolve(key, ('a', 'b'), 'a').source == 'nearest'"
    )
    heavy = {m.split(".")[0] for m in loaded} & {"sqlalchemy", "alembic", "numpy", "cbor2"}
    assert heavy == {"numpy"}


def _command_modules(*argvs: list[str]) -> set[str]:
    """The modules a process has loaded after running each of these command lines in turn."""
    return _modules_after(
        "import contextlib, io\n"
        "from tunecache.cli import main\n"
        f"for argv in {list(argvs)!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main(argv) == 0, argv\n"
    )


def _store_modules(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m.split(".")[0] in ("sqlalchemy", "alembic")}


def test_the_read_commands_load_neither_sqlalchemy_nor_alembic() -> None:
    from tunecache.cache import Cache
    from tunecache.codec import CandidateTiming, TimingRecord

    with Cache.open() as cache, cache.run("tune", "the test's") as run_id:
        entry = cache.put(
            "conv_F32_m64_k3",
            choice="im2col",
            candidates=["direct", "im2col"],
            heuristic="direct",
            record=TimingRecord(
                candidates=(CandidateTiming("direct", (2e-5,)), CandidateTiming("im2col", (1e-5,)))
            ),
            speedup=2.0,
            status="accepted",
            run_id=run_id,
        )
        cache.validate(entry, model="resnet", fingerprint="r1", verdict="validated")
    reads = [
        ["where"], ["where", "--json"],
        ["list"], ["show", "--json"], ["list", "--model", "resnet", "--op", "conv"],
        ["inspect", str(entry.id)], ["inspect", "conv_F32_m64_k3", "--json"],
        ["models"], ["models", "--json"],
        ["sql"], ["sql", "--json", "SELECT key FROM decisions"],
        ["explain", "conv_F32_m96_k3"], ["explain", "conv_F32_m64_k3", "--json"],
    ]  # fmt: skip
    loaded = _command_modules(*reads)
    assert "tunecache.store.reading" in loaded
    assert _store_modules(loaded) == set()


def test_a_read_command_opens_a_cache_that_is_not_ready_through_the_store(tmp_path: Path) -> None:
    # An older revision: `where` upgrades it through the store, which is the store's job; from
    # then on it reads without the store. Where no database is, it creates none (the store
    # never loads) and says the cache is not created yet.
    db = tmp_path / "old.db"
    shutil.copy(ROOT / "tests" / "golden" / "rev0003.db", db)
    assert "alembic" in {m.split(".")[0] for m in _command_modules(["where", "--db", str(db)])}
    assert _store_modules(_command_modules(["where", "--db", str(db)])) == set()
    assert _store_modules(_command_modules(["where"])) == set()
    assert not (tmp_path / "cache-root").exists()


def test_a_command_loads_only_its_own_subcommands_module() -> None:
    with Cache.open() as cache:
        cache.put("op_m4", choice="b", candidates=["a", "b"], heuristic="a")
    commands = "tunecache.cli.commands."
    for argv, home in ((["list"], "store"), (["where"], "store"), (["doctor"], "maintain")):
        loaded = {m for m in _command_modules(argv) if m.startswith(commands)}
        assert loaded == {commands + home}, argv
    # --help describes every subcommand, so it loads them all.
    every = {commands + name for name in ("store", "maintain", "exchange", "tuning")}
    assert every <= _modules_after(
        "import contextlib, io\n"
        "from tunecache.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
    )


def test_where_and_list_start_without_dataclasses_typing_or_the_keys() -> None:
    # Each costs a start of `tunecache where` milliseconds of the 20 or so it takes (dataclasses
    # pulls in inspect and ast, about 6 ms; typing 2 ms; the keys compile their patterns), and
    # the read commands are held to 3x a bare `import sqlite3` (tools/bench_cli.py).
    with Cache.open() as cache:
        cache.put("op_m4", choice="b", candidates=["a", "b"], heuristic="a")
    loaded = _command_modules(["where"], ["list"], ["show", "--limit", "1"])
    assert {"dataclasses", "inspect", "typing", "tunecache.keys"} & loaded == set()
    assert "tunecache.maintain.listing" in loaded


def test_importing_the_package_loads_nothing_and_every_public_name_loads_on_first_use() -> None:
    from tunecache import errors

    assert {m for m in _modules_after("import tunecache") if m.startswith("tunecache")} == {
        "tunecache"
    }
    # The errors' names, spelled out in the package, are tunecache.errors' own, in its order.
    assert tunecache.__all__[-len(errors.__all__) :] == errors.__all__
    for name in tunecache.__all__:
        assert getattr(tunecache, name) is not None, name
    assert tunecache.BadArgumentError is errors.BadArgumentError
    assert tunecache.errors is errors
    namespace: dict[str, object] = {}
    exec("from tunecache import *", namespace)
    assert set(tunecache.__all__) <= set(namespace)


def test_the_digest_takes_hashlibs_sha256_where_hashlib_is_loaded_and_they_agree() -> None:
    import hashlib

    probe = (
        "import hashlib\nfrom tunecache._digest import sha256\n"
        "assert sha256 is hashlib.sha256, sha256\n"
    )
    loaded = _modules_after(probe)
    assert not loaded & {"_sha2", "_sha256"}  # the builtin module is not loaded as well
    alone = _modules_after("from tunecache._digest import sha256")
    assert "hashlib" not in alone  # nor OpenSSL's start-up paid where nothing else paid it
    from tunecache._digest import sha256

    assert sha256(b"tunecache").hexdigest() == hashlib.sha256(b"tunecache").hexdigest()
