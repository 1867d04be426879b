"""Failure policies (backoff, exhaustion, stored JSON) and the retention rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from danube_broker.dispatch.reliable.policy import PolicyError, SubscriptionPolicy
from danube_broker.dispatch.reliable.retention import (
    archive_cut,
    estimated_segments,
    retention_point,
    size_point,
)
from danube_broker.reliable_topic import TopicPolicies
from danube_common.records import TopicRecord
from danube_common.storage import SegmentDescriptor
from tests.unit.broker.helpers import config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("failures", "delay_s"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (64, 10.0), (10_000, 10.0)]
)
def test_backoff_doubles_and_is_capped(failures: int, delay_s: float) -> None:
    policy = SubscriptionPolicy(redelivery_backoff_base_ms=1000, redelivery_backoff_max_ms=10_000)
    assert policy.backoff_s(failures) == delay_s


def test_exhaustion_counts_redeliveries_and_zero_is_unlimited() -> None:
    assert not SubscriptionPolicy(max_redeliveries=0).exhausted(1_000_000)
    policy = SubscriptionPolicy(max_redeliveries=2)
    assert [policy.exhausted(n) for n in (1, 2, 3)] == [False, False, True]


def test_stored_json_overrides_only_the_fields_it_has() -> None:
    defaults = SubscriptionPolicy(ack_timeout_ms=30_000, poison_policy="block")
    merged = defaults.merged({"max_redeliveries": 3, "poison_policy": "drop"})
    assert (merged.max_redeliveries, merged.poison_policy, merged.ack_timeout_ms) == (3, "drop", 30_000)
    assert defaults.merged(None) is defaults
    assert defaults.merged({"poison_policy": ""}).poison_policy == "block"
    assert SubscriptionPolicy(ack_timeout_ms=0).ack_timeout_s == float("inf")


def test_a_partial_stored_policy_keeps_the_defaults_it_does_not_name() -> None:
    """What the admin API stores for `set-policy --max-redeliveries 5`: the ack timeout and the
    backoff stay the broker's (not 0, which would switch redelivery off)."""
    defaults = SubscriptionPolicy(
        ack_timeout_ms=30_000, redelivery_backoff_base_ms=1_000, redelivery_backoff_max_ms=60_000
    )
    merged = defaults.merged({"max_redeliveries": 5})
    assert merged == SubscriptionPolicy(
        max_redeliveries=5,
        ack_timeout_ms=30_000,
        redelivery_backoff_base_ms=1_000,
        redelivery_backoff_max_ms=60_000,
        poison_policy="block",
        dead_letter_topic="",
    )
    assert merged.ack_timeout_s == 30.0 and merged.backoff_s(1) == 1.0
    # No poison_policy and no dead_letter_topic stored: both stay the defaults.
    assert defaults.merged({"ack_timeout_ms": 5_000}).poison_policy == "block"
    drop = SubscriptionPolicy(poison_policy="drop")
    assert drop.merged({"redelivery_backoff_max_ms": 10}) == replace(drop, redelivery_backoff_max_ms=10)
    # A dead_letter_topic alone (the poison policy left to the broker) is accepted and kept.
    assert defaults.merged({"dead_letter_topic": "/d/dlq"}).dead_letter_topic == "/d/dlq"
    # A base above the default cap is capped, not refused.
    assert defaults.merged({"redelivery_backoff_base_ms": 120_000}).backoff_s(1) == 60.0


@pytest.mark.parametrize(
    ("stored", "match"),
    [
        ({"poison_policy": "explode"}, "poison_policy"),
        ({"poison_policy": "dead_letter"}, "dead_letter_topic"),
        ({"max_redeliveries": -1}, "max_redeliveries"),
        ({"ack_timeout_ms": "soon"}, "ack_timeout_ms"),
        ({"colour": "red"}, "unknown"),
        (["not", "an", "object"], "JSON object"),
    ],
)
def test_bad_stored_policies_say_what_is_wrong(stored: object, match: str) -> None:
    with pytest.raises(PolicyError, match=match):
        SubscriptionPolicy().merged(stored)  # type: ignore[arg-type]


SEGMENTS = [(0, 100), (10, 100), (20, 100), (30, 100)]


@pytest.mark.parametrize(
    ("acked_before", "time_point", "size", "expected"),
    [
        (25, None, 0, 25),  # acked by everyone, no retention: cut at the cursor
        (None, None, 0, 0),  # no subscription, no limits: keep everything
        (None, 15, 0, 15),  # no subscription: the time rule alone
        (None, None, 250, 20),  # no subscription: the newest 200 bytes of segments fit in 250
        (35, 12, 0, 12),  # time keeps more than the cursor would
        (35, None, 150, 30),  # size keeps the newest segment
        (5, 30, 150, 5),  # the slowest subscription wins over retention
        (40, None, 0, 40),
    ],
)
def test_retention_point(acked_before: int | None, time_point: int | None, size: int, expected: int) -> None:
    got = retention_point(
        first_offset=0,
        next_offset=40,
        acked_before=acked_before,
        time_point=time_point,
        size_limit_bytes=size,
        segments=SEGMENTS,
    )
    assert got == expected


def test_size_point_and_estimated_segments() -> None:
    assert size_point(SEGMENTS, 99, 40) == 40
    assert size_point(SEGMENTS, 400, 40) == 0
    assert estimated_segments(0, 40, 400, 4) == SEGMENTS
    assert estimated_segments(5, 5, 0, 1) == []


def _uploaded(times_ms: list[int]) -> list[SegmentDescriptor]:
    """Segments of ten offsets and 100 bytes each, with these newest publish times."""
    return [
        SegmentDescriptor("t", 10 * i, 10 * i + 10, f"k{i}", 100, 0, max_publish_time_ms=ms)
        for i, ms in enumerate(times_ms)
    ]


@pytest.mark.parametrize(
    ("acked_before", "time_s", "size", "expected"),
    [
        (40, 0, 0, []),  # no limit: object storage keeps everything
        (None, 0, 250, [0, 10]),  # no subscription: the newest 200 bytes fit in 250
        (15, 0, 250, [0]),  # a subscription at 15 holds the second segment
        (40, 0, 1, [0, 10, 20]),  # the newest segment always stays
        (None, 5, 0, [0, 10]),  # older than 5 s (now 10 s): the first two; the third is unknown
        (None, 1, 0, [0, 10]),  # a segment of unknown age (0) is never old enough, nor what follows
        (None, 100, 0, []),
    ],
)
def test_archive_cut(acked_before: int | None, time_s: int, size: int, expected: list[int]) -> None:
    descriptors = _uploaded([1_000, 4_000, 0, 9_500])
    got = archive_cut(
        descriptors,
        acked_before=acked_before,
        now_ms=10_000,
        retention_time_s=time_s,
        retention_size_bytes=size,
    )
    assert [d.start_offset for d in got] == expected
    assert archive_cut([], acked_before=None, now_ms=1, retention_time_s=1, retention_size_bytes=1) == []


def test_a_topics_policies_come_from_its_own_then_its_record_then_its_namespace() -> None:
    """What a reliable topic opens with (ReliableTopic.open): the broker's defaults, under its
    namespace's, under what its record was created with, under its own (topics set-policies)."""
    cfg = config(retention_time_s=1, retention_size_bytes=2)
    record = TopicRecord(
        name="/default/t", dispatch_strategy="reliable", policies={"retention_size_bytes": 1000}
    )
    assert (
        TopicPolicies.of(TopicRecord(name="/default/t", dispatch_strategy="reliable"), cfg).retention_time_s
        == 1
    )
    ns = {"retention_time_s": 60, "retention_size_bytes": 500, "durability": "none"}
    p = TopicPolicies.of(record, cfg, ns)
    assert (p.retention_time_s, p.retention_size_bytes, p.durability.value) == (60, 1000, "none")
    own = {
        "retention_time_s": 3600,
        "retention_size_bytes": None,
        "max_producers_per_topic": 3,
        "durability": "fsync",
    }
    p = TopicPolicies.of(record, cfg, ns, own)
    assert (p.retention_time_s, p.retention_size_bytes, p.durability.value) == (3600, 1000, "none"), (
        "only retention is a topic's own policy; durability stays the record's or namespace's"
    )
