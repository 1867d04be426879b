"""Every key builder has a parser that inverts it, and parsers reject keys that are not theirs."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danube_common.keys import Keys
from danube_common.topic_name import TopicName

pytestmark = pytest.mark.unit

ALLOWED = string.ascii_letters + string.digits + "_.-"
word = st.text(alphabet=ALLOWED, min_size=1, max_size=30).filter(lambda s: s not in (".", ".."))
topics = st.builds(TopicName, word, word)
clusters = word
broker_ids = st.text(alphabet=ALLOWED, min_size=1, max_size=20)


@given(clusters, broker_ids, topics)
def test_assignment_round_trip(cluster: str, broker: str, topic: TopicName) -> None:
    k = Keys(cluster)
    key = k.assignment(broker, topic)
    assert key.startswith(k.broker_assignments_prefix(broker))
    assert key.startswith(k.assignments_prefix())
    assert k.parse_assignment(key) == (broker, topic)


@given(clusters, topics)
def test_topic_round_trip(cluster: str, topic: TopicName) -> None:
    k = Keys(cluster)
    key = k.topic(topic)
    assert key.startswith(k.topics_prefix(topic.namespace)) and key.startswith(k.topics_prefix())
    assert k.parse_topic(key) == topic


@given(clusters, topics)
def test_owner_round_trip(cluster: str, topic: TopicName) -> None:
    k = Keys(cluster)
    assert k.parse_owner(k.owner(topic)) == topic


@given(clusters, topics, word)
def test_keys_below_a_topic_are_not_topics(cluster: str, topic: TopicName, sub: str) -> None:
    k = Keys(cluster)
    sub_key = k.subscription(topic, sub)
    assert sub_key.startswith(k.subscriptions_prefix(topic))
    assert sub_key.startswith(k.topic(topic) + "/")
    assert k.parse_topic(sub_key) is None


@given(clusters, topics, word)
def test_subscription_policies_round_trip_and_sit_apart_from_cursors(
    cluster: str, topic: TopicName, sub: str
) -> None:
    k = Keys(cluster)
    key = k.subscription_policy(topic, sub)
    assert k.parse_subscription_policy(key) == (topic, sub)
    assert key.startswith(k.subscription_policies_prefix(topic))
    assert key.startswith(k.subscription_policies_prefix())
    assert not k.subscription_cursor(topic, sub).startswith(k.subscription_policies_prefix())
    assert k.parse_subscription_policy(k.subscription_cursor(topic, sub)) is None
    assert k.parse_subscription_policy(k.subscription_policies_prefix(topic)) is None


@given(clusters, clusters, topics)
def test_parsers_ignore_other_roots(cluster: str, other: str, topic: TopicName) -> None:
    k, o = Keys(cluster), Keys(other)
    if cluster == other:
        return
    assert k.parse_topic(o.topic(topic)) is None
    assert k.parse_owner(o.owner(topic)) is None
    assert k.parse_assignment(o.assignment("b1", topic)) is None


def test_parsers_reject_other_kinds_of_key() -> None:
    k = Keys("c")
    t = TopicName("ns", "t")
    assert k.parse_topic(k.owner(t)) is None
    assert k.parse_owner(k.topic(t)) is None
    assert k.parse_assignment(k.owner(t)) is None
    assert k.parse_assignment(k.broker_assignments_prefix("b1") + "ns") is None


def test_layout() -> None:
    k = Keys("prod")
    t = TopicName("ns", "orders")
    assert k.root == "/prod/"
    assert k.broker("7") == "/prod/brokers/7"
    assert k.load("7") == "/prod/load/7"
    assert k.unassigned(t) == "/prod/unassigned/ns/orders"
    assert k.owner(t) == "/prod/owners/ns/orders"
    assert k.assignment("7", t) == "/prod/assignments/7/ns/orders"
    assert k.leader("load-manager") == "/prod/leaders/load-manager"
    assert k.namespace("ns") == "/prod/namespaces/ns"
    assert k.topic(t) == "/prod/topics/ns/orders"
    assert k.subscription(t, "s") == "/prod/topics/ns/orders/subscriptions/s"
    assert k.subscription_policy(t, "s") == "/prod/subscription_policies/ns/orders/s"
    assert k.segment(t, 42) == "/prod/storage/ns/orders/segments/00000000000000000042"
    assert k.counter("broker-id") == "/prod/counters/broker-id"


@given(st.lists(st.integers(min_value=0, max_value=10**19), min_size=2, max_size=20, unique=True))
def test_segment_keys_sort_like_their_offsets(offsets: list[int]) -> None:
    k = Keys("c")
    t = TopicName("ns", "t")
    by_key = sorted(offsets, key=lambda o: k.segment(t, o))
    assert by_key == sorted(offsets)


def test_every_key_lives_under_the_root() -> None:
    k = Keys("c")
    t = TopicName("ns", "t")
    built = [
        k.brokers_prefix(), k.broker("1"), k.load_prefix(), k.load("1"), k.unassigned_prefix(),
        k.unassigned(t), k.owners_prefix(), k.owner(t), k.assignments_prefix(), k.assignment("1", t),
        k.leader("r"), k.load_report(), k.rebalance_plan("p"), k.namespaces_prefix(), k.namespace("ns"),
        k.topics_prefix(), k.topic(t), k.subscription(t, "s"), k.segments_prefix(t), k.schemas_prefix(),
        k.auth_prefix(), k.counter("n"),
    ]  # fmt: skip
    assert all(key.startswith(k.root) for key in built)
    assert not any(key.startswith(Keys("c2").root) for key in built)
