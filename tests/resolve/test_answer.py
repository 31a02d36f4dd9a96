"""Answers and explanations as values: their fields and JSON form."""

from __future__ import annotations

from tests.resolve.conftest import mm
from tunecache.resolve import SOURCES, Answer, Explanation


def test_an_answer_defaults_to_no_entry_and_no_distance() -> None:
    answer = Answer("blas", "heuristic")
    assert (answer.entry_id, answer.distance, answer.borrowed_from) == (None, None, None)
    assert answer.source in SOURCES


def test_an_explanation_has_a_json_form_with_stable_fields() -> None:
    borrowed = Explanation(mm(300), Answer("naive", "nearest", 7, 0.5, mm(256)), ("a", "b"))
    assert borrowed.as_dict() == {
        "key": "matmul_F32_m300_k256_n256",
        "choice": "naive",
        "source": "nearest",
        "entry_id": 7,
        "distance": 0.5,
        "borrowed_from": "matmul_F32_m256_k256_n256",
        "steps": ["a", "b"],
    }
    unanswered = Explanation(mm(300), None, ()).as_dict()
    assert unanswered["choice"] is unanswered["borrowed_from"] is None
    assert unanswered["steps"] == []
