"""The tuner: make a model faster through the cache, and never slower than its heuristic.

    model = tunecache.tune.Model("encoder", run=encoder, scenarios={"s": (1, 64, 256)})
    report = tunecache.tune.tune(model)          # profile, screen, bench, accept, write
    tunecache.tune.validate(other_model)          # judge entries other models tuned
    tunecache.tune.evaluate(tuned=[...], held_out=[...])

One tuning session, for each scenario of the model (each set of sizes of its symbolic dims):

1. **Profile.** Run the model once to warm up, then once under `dispatch.profile(capture=True)`
   to learn each key's share of the run's time, and keep one real call's arguments per key.
2. **Screen.** Keys below `share` (default 1%) of their scenario's time are left alone: a
   whole-model run cannot see a change that small, so no entry for them could be confirmed.
3. **Validate** what other models tuned: an entry that already serves a heavy key, and that this
   model has not judged, is run with and without (paired, `accept.accept`); the model records
   `validated` or `masked` for itself. Its mask stops the entry applying to it only.
4. **Bench** each remaining heavy key's candidates in isolation on the captured arguments
   (`bench.bench`), each one's output compared with the heuristic's on its first call (a wrong
   one is never timed further, chosen or served); this only prunes them to a few. An entry
   already stored for the key and candidate list lends its timing record instead, so a key is
   not benched again, unless the record is doubtful (`doubt`: a budget cut, a contended or
   unstable bench, a contradicted or contended trial; at most `rebench` times) or `retune`.
   Another model's decision is never rewritten.
5. **Accept** through whole-model runs: the scenario with the current table (A) against the
   table plus the candidate entry (B), in pairs of random order; the first survivor B wins with
   is written as accepted, with this model's `validated` verdict. If none wins, the best is kept
   as a `rejected` entry: the evidence stays, the decision is never served. Where nothing beats
   what runs now, the evidence is kept as an `unvalidated` entry choosing what runs now.
6. **Profile again** after a pass that changed the table (some key the profile met is answered
   with another choice now): keys that a faster run makes heavy are taken too (at most
   `PASSES` passes), so a second session has nothing new to do.
7. **Guard.** The finished table must beat no table at all over every scenario, end to end;
   otherwise every entry the model uses is masked for it (and this session's own entries are
   rejected), so its runs fall back to the heuristic.

Every write is its own transaction, made as soon as a decision is reached: Ctrl-C (or a crash)
keeps what was accepted so far, and the session's row in `runs` says it was interrupted. The
session's `budget` stops new keys and new survivors, never a trial already started (a trial cut
short would read as "no", and a "no" is remembered). docs/tuning.md says it at length.

The modules, each one job: `model` (what a model is), `options` (every default and check),
`reports` (what comes back), `runs` (whole-model runs and paired trials), `session` (one
session's state and writes), `profiling` (steps 1, 2), `checking` (outputs before speed),
`doubt` (when stored evidence stands), `records` (a key's evidence: stored or benched),
`benching` (4, 5), `guard` (7), `tuner` (`tune`, `validate`: the passes, and step 3) and
`heldout` (`evaluate`) and `ops` (`ops`, `pending`: op-level tuning, and the pending keys
a serving process recorded).
"""

from __future__ import annotations

from tunecache.errors import TuneInterrupted
from tunecache.tune.heldout import evaluate
from tunecache.tune.model import Model, as_model
from tunecache.tune.ops import OP_ACTIONS, OpOutcome, OpsReport, ops, pending
from tunecache.tune.options import (
    BENCH_DEFAULTS,
    KEEP,
    KEY_BUDGET,
    MEASURE_PAIRS,
    REBENCH,
    SHARE,
    TUNE_OPTIONS,
    check_evaluate_options,
    check_tune_options,
)
from tunecache.tune.reports import (
    ACTIONS,
    OUTCOMES,
    Evaluation,
    EvaluationRow,
    KeyOutcome,
    Progress,
    TuneReport,
)
from tunecache.tune.tuner import PASSES, tune, validate

__all__ = [
    # the library calls
    "tune",
    "validate",
    "evaluate",
    "ops",
    "pending",
    "check_evaluate_options",
    "check_tune_options",
    # what they take
    "Model",
    "as_model",
    "Progress",
    "TUNE_OPTIONS",
    "BENCH_DEFAULTS",
    "SHARE",
    "KEEP",
    "KEY_BUDGET",
    "MEASURE_PAIRS",
    "REBENCH",
    "PASSES",
    # what they give back
    "TuneReport",
    "KeyOutcome",
    "ACTIONS",
    "Evaluation",
    "EvaluationRow",
    "OUTCOMES",
    "OpsReport",
    "OpOutcome",
    "OP_ACTIONS",
    "TuneInterrupted",
]
