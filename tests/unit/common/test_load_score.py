"""The shared load score against the hand-worked table (tests/support/score_table.py)."""

from __future__ import annotations

import pytest

from danube_common.load_score import FLOORS, BrokerLoad, ScoreWeights, floored_means, scores
from tests.support.score_table import CASES, Case

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_scores_match_the_table(case: Case) -> None:
    loads = [BrokerLoad.of(b.broker_id, b.topics, b.report(0)) for b in case.brokers]
    assert scores(loads, case.weights) == pytest.approx(case.expected)


def test_means_are_floored_and_an_empty_set_scores_nothing() -> None:
    assert floored_means([]) == FLOORS
    assert scores([], ScoreWeights()) == {}
    means = floored_means([BrokerLoad("a", 0, cpu=0.5), BrokerLoad("b", 4, cpu=0.1)])
    assert means == pytest.approx(
        {"topics": 2.0, "msgs": 100.0, "bytes": 100_000.0, "cpu": 0.3, "memory": 0.1}
    )


def test_a_report_without_machine_memory_counts_no_memory() -> None:
    report = CASES[0].brokers[0].report(0)
    assert report.mem_total_bytes == 0
    assert BrokerLoad.of("a", 1, report).memory == 0.0
    assert BrokerLoad.of("a", 3, None) == BrokerLoad("a", 3)


def test_weights_are_one_config_section_with_non_negative_values() -> None:
    assert ScoreWeights().to_json() == {"topics": 1.0, "msgs": 1.0, "bytes": 1.0, "cpu": 0.5, "memory": 0.25}
    with pytest.raises(ValueError):
        ScoreWeights(cpu=-1)
