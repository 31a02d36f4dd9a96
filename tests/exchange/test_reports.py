"""What an import reports (tunecache.exchange.reports), and how evidence compares."""

from __future__ import annotations

from datetime import UTC, datetime

from tunecache import exchange
from tunecache.exchange.reports import ACTIONS


def _report(*actions: str, run_id: int | None = None) -> exchange.ImportReport:
    return exchange.ImportReport(
        kind="import",
        policy="local",
        source_device={"cpu": "c", "threads": 4},
        source_fingerprint="f" * 32,
        exported_at=datetime(2026, 1, 2, tzinfo=UTC),
        tool="0.1.0",
        other_device=False,
        run_id=run_id,
        origin_device=None,
        actions=tuple(exchange.EntryAction(f"k{i}", "c", a) for i, a in enumerate(actions)),
        verdicts=2,
    )


def test_evidence_orders_models_then_rounds_then_samples() -> None:
    assert exchange.evidence(1, 0, 0) > exchange.evidence(0, 99, 10**6)
    assert exchange.evidence(1, 3, 0) > exchange.evidence(1, 2, 10**6)
    assert exchange.evidence(0, 0, 10) > exchange.evidence(0, 0, 9)


def test_counts_name_every_action_even_at_zero() -> None:
    assert _report().counts == dict.fromkeys(ACTIONS, 0)
    counts = _report("added", "added", "kept-both").counts
    assert counts == {"added": 2, "unchanged": 0, "kept-local": 0, "replaced": 0, "kept-both": 1}


def test_a_report_changed_the_cache_only_if_it_logged_a_run() -> None:
    assert not _report("unchanged").changed
    assert _report("added", run_id=7).changed


def test_the_json_form_of_a_report() -> None:
    report = _report("replaced", run_id=7)
    assert report.as_dict() == {
        "kind": "import",
        "policy": "local",
        "source_device": {"cpu": "c", "threads": 4},
        "source_fingerprint": "f" * 32,
        "exported_at": "2026-01-02T00:00:00+00:00",
        "tool": "0.1.0",
        "other_device": False,
        "run_id": 7,
        "origin_device": None,
        "counts": {"added": 0, "unchanged": 0, "kept-local": 0, "replaced": 1, "kept-both": 0},
        "verdicts": 2,
        "entries": [{"key": "k0", "checksum": "c", "action": "replaced"}],
    }
