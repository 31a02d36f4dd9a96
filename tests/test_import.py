"""Importing tunecache stays cheap: the read path never loads SQLAlchemy or Alembic."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


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
