"""Make the golden database of a released schema revision:

    python tests/golden/make_golden.py 0002

Run it once per release, from the checkout root, and commit the file it writes; tests upgrade a
copy and check that nothing written at that revision is lost. The rows are inserted with plain
SQL, as that revision's tunecache would have written them (every revision so far has the same
tables; a revision that changes them needs its own rows here). A golden file is history: an
existing one is never overwritten, since rewriting it would hide a change in what old releases
wrote.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from alembic import command  # noqa: E402

from tunecache.codec import CandidateTiming, TimingRecord, encode  # noqa: E402
from tunecache.store.engine import make_engine  # noqa: E402
from tunecache.store.migrate import alembic_config  # noqa: E402

NOW = "2026-11-30 12:00:00.000000"
BLOB = encode(
    TimingRecord(
        candidates=(
            CandidateTiming("mmm_4x4", (2.0e-5, 2.1e-5, 1.9e-5), inner_loops=64),
            CandidateTiming("mmm_8x8", (1.1e-5, 1.0e-5, 1.2e-5), inner_loops=64),
        ),
        settings={"max_samples": 30},
        env={"numpy": "2.4.6"},
    )
)


def main() -> None:
    """Write tests/golden/rev<REVISION>.db for the revision named on the command line."""
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/golden/make_golden.py REVISION (e.g. 0002)")
    revision = sys.argv[1]
    out = HERE / f"rev{revision}.db"
    if out.exists():
        sys.exit(f"{out} exists; golden files are never rewritten")
    engine = make_engine(out)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)
    engine.dispose()

    db = sqlite3.connect(out)
    db.executescript(
        f"""
        INSERT INTO devices VALUES
          (1, 'fp-golden-1', 'golden-cpu', 4, NULL, 'tunecache', '0.1.0', '{NOW}'),
          (2, 'fp-golden-2', 'golden-cpu', 1, NULL, 'tunecache', '0.1.0', '{NOW}');
        INSERT INTO candidate_sets VALUES
          (1, 'einsum_nk,km->mn_F32_F32_F32_aconst_nstrided', 'cs-golden-1', 2, '{NOW}');
        INSERT INTO candidates VALUES (1, 0, 'mmm_4x4'), (1, 1, 'mmm_8x8');
        INSERT INTO keys VALUES
          (1, 'einsum_nk,km->mn_F32_F32_F32_b1_m288_k96_n64_aconst_nstrided',
           'einsum_nk,km->mn_F32_F32_F32_aconst_nstrided', 'b=1 m=288 k=96 n=64'),
          (2, 'einsum_nk,km->mn_F32_F32_F32_b1_m512_k96_n64_aconst_nstrided',
           'einsum_nk,km->mn_F32_F32_F32_aconst_nstrided', 'b=1 m=512 k=96 n=64');
        INSERT INTO runs VALUES
          (1, 'tune', 'finished', 1, '0.1.0', 'golden-host', 'Linux', '3.11.7', 4242,
           '{NOW}', '{NOW}', NULL);
        INSERT INTO entries VALUES
          (1, 1, 1, 1, 'mmm_8x8', 'mmm_4x4', 'accepted', 1.31, 1, '{NOW}', '{NOW}'),
          (2, 1, 2, 1, 'mmm_4x4', 'mmm_4x4', 'rejected', NULL, 1, '{NOW}', '{NOW}'),
          (3, 2, 1, 1, 'mmm_4x4', 'mmm_4x4', 'unvalidated', NULL, NULL, '{NOW}', '{NOW}');
        INSERT INTO timing_records VALUES
          (1, 1, 1, 'mmm_8x8', 1.1e-05, 2.0e-05, 2, 6, 0, '{NOW}', X'{BLOB.hex()}');
        INSERT INTO candidate_timings VALUES
          (1, 'mmm_4x4', 2.0e-05, 1.9e-05, 2.1e-05, 3, 64, 0, NULL),
          (1, 'mmm_8x8', 1.1e-05, 1.0e-05, 1.2e-05, 3, 64, 0, NULL);
        INSERT INTO models VALUES (1, 'llama', 'mf-1', '{NOW}'), (2, 'enhancer', 'mf-2', '{NOW}');
        INSERT INTO validations VALUES
          (1, 1, 1, 'validated', 1.12, 3, 3, 1, '{NOW}', '{NOW}'),
          (2, 2, 1, 'masked', 0.98, 3, 1, 1, '{NOW}', '{NOW}');
        """
    )
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA journal_mode = DELETE")  # one self-contained file to commit
    db.execute("VACUUM")
    db.close()
    print(out)


if __name__ == "__main__":
    main()
