"""Golden databases of every released schema revision, upgraded while 8 processes open them.

tests/store/test_migrate.py covers one process upgrading rev0001 row by row, and a newer revision
opened read-only and never written; here every golden file is upgraded under concurrency.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.reliability import harness
from tunecache.store import migrate


@pytest.mark.slow
@pytest.mark.parametrize("golden", harness.goldens(), ids=lambda p: p.name)
def test_eight_processes_open_a_golden_database_at_once_and_exactly_one_migrates(
    golden: Path, tmp_path: Path
) -> None:
    db = tmp_path / golden.name
    shutil.copy(golden, db)
    before = harness.all_rows(db)
    outcomes = harness.open_all_at_once(db, 8)
    print(f"{golden.name} -> {migrate.HEAD}, 8 processes at once: {outcomes}")
    if harness.golden_revision(golden) == migrate.HEAD:
        assert outcomes == ["current"] * 8
    else:
        assert outcomes == ["current"] * 7 + ["upgraded"]
    assert harness.revisions(db) == [migrate.HEAD]
    # Every row of every table the old revision had, byte for byte (new tables may be added).
    assert harness.all_rows(db, before) == before
    assert harness.structure_problems(db, every_entry_has_a_record=False) == []


def test_there_is_a_golden_database_for_every_revision_before_head() -> None:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    released = {rev.revision for rev in script.walk_revisions()} - {migrate.HEAD}
    have = {harness.golden_revision(g) for g in harness.goldens()}
    assert released <= have, "make a golden file: python tests/golden/make_golden.py REVISION"
