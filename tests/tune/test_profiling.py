"""Steps 1, 2 and 6 (tunecache.tune.profiling): each key's share of a profiled run, the keys
screened out as too light, and keys a faster table makes heavy.
"""

from __future__ import annotations

import pytest

from tests import tune_models as tm
from tests.tune.support import NORM, encoder_times, scripted, tune_scripted
from tunecache import tune
from tunecache.cache import Cache
from tunecache.keys import make_key
from tunecache.tune.options import session_options
from tunecache.tune.profiling import Screening, profile
from tunecache.tune.session import Running, Session

#: the encoder's profiles with the times it takes unloaded, whatever the machine's load now
ENCODER_PROFILE = scripted(encoder_times, rest=0.005)


def test_light_keys_are_screened_and_never_written(cache: Cache) -> None:
    report = tune_scripted(tm.ENCODER, cache, ENCODER_PROFILE, share=0.5)

    assert [k.key for k in report.keys] == [NORM.text]
    assert report.screened == 2  # the sum and the bias: each far under half of a run
    written = {e.key.signature for e in cache.entries()}
    assert written == {"ttrownorm_F64"}


def test_a_key_made_heavy_by_a_faster_table_is_tried_in_the_same_session(
    cache: Cache,
) -> None:
    # Before tuning, the bias is far below 1% of the encoder's run (the Python-loop row norm
    # carries it); once the norm is 20x faster it is not, and the session profiles again.
    # share 0.5%: the bias is 0.2% of the heuristic's run and 4% of the tuned one.
    bias = tm.BIAS
    first = tune_scripted(tm.ENCODER, cache, ENCODER_PROFILE, share=0.005)

    actions = {k.key: k.action for k in first.keys}
    assert actions[NORM.text] == "accepted" and bias.text in actions
    # Light in the first pass, tried in the second.
    assert [k.key for k in first.keys].index(bias.text) == len(first.keys) - 1
    assert first.keys[0].key == NORM.text
    entries = {e.id: e.updated_at for e in cache.entries()}
    # Nothing is left for a second session: it writes nothing and finds every key decided
    # (rebench=0: the bias's real bench may be unstable on a loaded machine, and evidence
    # that is would be benched again, tunecache.tune.doubt).
    second = tune_scripted(tm.ENCODER, cache, ENCODER_PROFILE, share=0.005, rebench=0)
    assert {k.action for k in second.keys} <= {"known", "kept"}
    assert {k.key for k in second.keys} == set(actions)
    assert {e.id: e.updated_at for e in cache.entries()} == entries
    assert second.guard_skipped


def test_shares_are_the_profiles_times_over_the_runs(cache: Cache) -> None:
    # Through the real profiler: the encoder's row norm carries most of a real run.
    session = Session(tm.ENCODER, cache, session_options(share=0.0), Running())
    shares = {found.key: found.share for found in profile(session, Screening())}
    assert all(0 <= share <= 1 for share in shares.values())
    assert sum(shares.values()) <= 1
    # Through the scripted one: exactly the script's ratios.
    session = Session(
        tm.ENCODER, cache, session_options(share=0.0), Running(profiler=ENCODER_PROFILE)
    )
    shares = {found.key: found.share for found in profile(session, Screening())}
    assert shares[NORM] == pytest.approx(0.9 / 0.917)
    assert shares[tm.BIAS] == pytest.approx(0.002 / 0.917)


def test_the_first_profile_settles_the_fingerprint_from_the_keys_the_model_runs(
    cache: Cache,
) -> None:
    session = Session(tm.ENCODER, cache, session_options(share=0.0), Running())
    screening = Screening()

    heavy = profile(session, screening)

    # share 0: nothing is screened, and the heaviest comes first.
    assert {found.key for found in heavy} == {NORM, tm.TOTAL, tm.BIAS}
    assert [found.share for found in heavy] == sorted((f.share for f in heavy), reverse=True)
    assert session.screened == 0 == screening.screened()
    assert all(found.heuristic == found.op.heuristic_for(found.key) for found in heavy)
    fingerprint = session.fingerprint
    assert session.identified and len(fingerprint) == 16
    # The same model's keys give the same version; a model may name its own.
    again = Session(tm.ENCODER, cache, session_options(share=0.0), Running())
    profile(again, Screening())
    assert again.fingerprint == fingerprint
    named = tune.Model("encoder", tm.encoder, fingerprint="v2")
    mine = Session(named, cache, session_options(share=0.0), Running())
    profile(mine, Screening())
    assert mine.fingerprint == "v2"
    # A key light in some profile and heavy in none is screened.
    screening.light.add(make_key("ttother_F64", [("n", 1)]))
    assert screening.screened() == 1


def test_the_last_profile_stands_for_a_table_that_keeps_answering_what_its_runs_ran() -> None:
    from tunecache.resolve import Table
    from tunecache.tune.profiling import LastProfile

    plain = Table.empty()
    vectorized = plain.derive(add=[(NORM, tm.loop.candidates, "vectorized")])
    last = LastProfile({NORM: tm.loop}, {NORM: "loop"})  # the runs ran the heuristic
    assert last.answers_as(plain)  # answers "loop", and keeps that answer
    assert not last.answers_as(vectorized)  # answers otherwise
    # A key whose runs ran several candidates (""), or none this profile knows, stands for
    # nothing; nor does a profile that captured no call to ask about.
    assert not LastProfile({NORM: tm.loop}, {NORM: ""}).answers_as(plain)
    assert not LastProfile({}, {NORM: "loop"}).answers_as(plain)
    assert not LastProfile({}, {}).answers_as(plain)
