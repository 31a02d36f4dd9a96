"""tunecache.triton.reuse: what a changed config list reuses of the stored timings."""

from __future__ import annotations

from tunecache.candidates import checksum
from tunecache.codec import CandidateTiming, TimingRecord
from tunecache.triton.reuse import kept_record, merged_record, plan_reuse


def _timings(**medians: float) -> TimingRecord:
    return TimingRecord(candidates=tuple(CandidateTiming(n, (m,) * 3) for n, m in medians.items()))


def test_plan_reuse_benches_only_what_the_old_record_cannot_answer() -> None:
    record = _timings(A=3.0, B=1.0, C=2.0, D=4.0, E=5.0)
    old = "ABCDE"
    kept = plan_reuse(["A", "B", "D"], old, "B", record)
    assert (kept.choice, kept.bench) == ("B", ())
    assert [c.name for c in kept.keep] == ["A", "B", "D"]
    remaining = plan_reuse(["A", "C", "D"], old, "B", record)
    assert (remaining.choice, remaining.bench) == ("C", ())
    added = plan_reuse(["A", "B", "C", "D", "E", "F"], old, "B", record)
    assert added.choice is None and added.bench == ("A", "B", "C", "F")
    assert [(c.name, c.pruned) for c in added.keep] == [("D", True), ("E", True)]
    # A config that failed before is not tried again, unless every legal one failed.
    failed = TimingRecord(candidates=(CandidateTiming("A", error="OutOfResources"),))
    assert plan_reuse(["A", "F"], "AB", "B", failed).bench == ("F",)
    assert plan_reuse(["A"], "AB", "B", failed).bench == ("A",)


def test_plan_reuse_never_trusts_a_config_the_old_bench_did_not_reach() -> None:
    # C has neither samples nor an error: the old bench's budget ran out before it ran. It
    # lost to nobody, so neither "the winner stays" nor "the best remaining" may skip it.
    holes = TimingRecord(
        candidates=(
            CandidateTiming("A", (1.0,) * 3),
            CandidateTiming("B", (0.5,) * 3),
            CandidateTiming("C"),
        )
    )
    removed = plan_reuse(["A", "C"], "ABC", "B", holes)
    assert removed.choice is None and removed.bench == ("A", "C")
    assert [c.name for c in removed.keep] == []
    dropped = plan_reuse(["B", "C"], "ABCD", "B", holes)
    assert dropped.choice is None and "C" in dropped.bench


def test_a_reused_record_says_where_it_came_from_and_keeps_the_old_settings() -> None:
    old = TimingRecord(
        candidates=(CandidateTiming("A", (3.0,) * 3), CandidateTiming("B", (1.0,) * 3)),
        settings={"kernel": "mm", "rounds": 3},
        env={"python": "3.11"},
    )
    old_names = ("A", "B", "C")
    plan = plan_reuse(["A", "B"], old_names, "B", old)
    kept = kept_record(plan, old, old_names)
    assert [c.name for c in kept.candidates] == ["A", "B"] and kept.env == {"python": "3.11"}
    assert kept.settings == {
        "kernel": "mm",
        "rounds": 3,
        "reused_from": checksum(old_names),
        "reuse": plan.reason,
    }
    assert kept_record(plan, None, old_names).settings["reused_from"] == checksum(old_names)

    before = ("A", "B", "C", "D")
    grown = plan_reuse([*before, "E"], before, "B", _timings(A=3.0, B=1.0, C=2.0, D=4.0))
    assert grown.bench == ("A", "B", "C", "E")
    fresh = TimingRecord(
        candidates=tuple(CandidateTiming(n, (0.5,) * 3) for n in grown.bench),
        settings={"rounds": 4},
    )
    merged = merged_record(fresh, grown, before, [*before, "E"])
    assert [(c.name, c.pruned) for c in merged.candidates] == [
        ("A", False),
        ("B", False),
        ("C", False),
        ("D", True),
        ("E", False),
    ]
    assert merged.settings == {"rounds": 4, "reused_from": checksum(before), "reuse": grown.reason}
