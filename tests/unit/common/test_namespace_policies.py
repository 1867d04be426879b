"""Namespace policies as values: validation, partial updates, JSON, what topics inherit; and
their storage in the namespace record (the in-memory store), with the topic quota."""

from __future__ import annotations

from typing import Any

import pytest

from danube_common.errors import InvalidArgument, NamespaceNotFound, TooManyTopics
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.namespace_policies import FIELD_NAMES, NamespacePolicies
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("changes", "wrong"),
    [
        ({"max_producers_per_topic": 0}, "max_producers_per_topic must be between 1"),
        ({"max_topics": -1}, "max_topics must be between 1"),
        ({"publish_rate_msgs_per_s": 0.0}, "publish_rate_msgs_per_s must be between"),
        ({"backlog_quota_policy": "drop"}, "backlog_quota_policy must be one of hold, refuse, evict"),
        ({"backlog_quota_policy": "refuse"}, "backlog_quota_policy needs backlog_quota_messages"),
        ({"default_durability": "sometimes"}, "default_durability must be one of fsync, none, cloud"),
        ({"default_dispatch_strategy": "fast"}, "default_dispatch_strategy must be one of"),
        ({"retention_time_s": -5}, "retention_time_s must be between 0"),
        ({"max_widgets": 3}, "unknown namespace policy max_widgets"),
    ],
)
def test_bad_policies_are_refused_saying_what_is_allowed(changes: dict[str, Any], wrong: str) -> None:
    with pytest.raises(InvalidArgument, match=wrong):
        NamespacePolicies().updated(changes)


def test_updates_set_and_clear_fields_and_keep_the_others() -> None:
    p = NamespacePolicies().updated({"max_producers_per_topic": 3, "retention_time_s": 0, "max_topics": 9})
    assert p.to_json() == {"max_producers_per_topic": 3, "retention_time_s": 0, "max_topics": 9}
    q = p.updated({"max_topics": 10}, clear=["max_producers_per_topic"])
    assert q.to_json() == {"retention_time_s": 0, "max_topics": 10}
    assert NamespacePolicies.from_json(q.to_json()) == q
    with pytest.raises(InvalidArgument, match="both set and cleared"):
        q.updated({"max_topics": 1}, clear=["max_topics"])


def test_unknown_stored_keys_are_ignored_when_read() -> None:
    assert NamespacePolicies.from_json({"max_topics": 2, "from_the_future": 1}) == NamespacePolicies(
        max_topics=2
    )
    assert NamespacePolicies.from_json(None).is_empty()


def test_topics_inherit_limits_unless_their_record_overrides_them() -> None:
    ns = NamespacePolicies(max_producers_per_topic=2, max_consumers_per_topic=5, max_topics=3)
    mine = ns.with_topic_overrides({"max_producers_per_topic": 10, "durability": "fsync"})
    assert (mine.max_producers_per_topic, mine.max_consumers_per_topic) == (10, 5)
    assert ns.with_topic_overrides({}) is ns
    assert ns.with_topic_overrides({"max_topics": 99}).max_topics == 3  # not a per-topic policy


def test_retention_comes_from_the_topics_own_policies_then_its_record_then_its_namespace() -> None:
    ns = NamespacePolicies(retention_time_s=60, retention_size_bytes=500)
    record = {"durability": "fsync", "retention_time_s": 0, "retention_size_bytes": 1000}
    created = ns.with_topic_overrides(record)
    assert (created.retention_time_s, created.retention_size_bytes) == (0, 1000)
    own = NamespacePolicies(retention_time_s=3600).only_limits()
    seen = created.overridden_by(own)
    assert (seen.retention_time_s, seen.retention_size_bytes) == (3600, 1000)
    with pytest.raises(InvalidArgument, match="only the namespace can set"):
        NamespacePolicies(default_durability="none").only_limits()


def test_reliable_topic_defaults_use_the_topic_record_keys() -> None:
    ns = NamespacePolicies(
        default_durability="none", retention_time_s=60, default_dispatch_strategy="reliable"
    )
    assert ns.topic_defaults() == {"durability": "none", "retention_time_s": 60}
    assert NamespacePolicies().topic_defaults() == {}


def test_every_policy_has_a_description() -> None:
    from danube_common.namespace_policies import DESCRIPTIONS

    assert set(DESCRIPTIONS) == set(FIELD_NAMES)


@pytest.fixture
async def resources(memory_store: MemoryStore) -> Resources:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("default")
    await res.create_namespace("team")
    return res


async def test_policies_are_stored_in_the_namespace_record(resources: Resources) -> None:
    assert (await resources.get_namespace_policies("team")).is_empty()
    await resources.update_namespace_policies("team", {"max_topics": 4, "publish_rate_msgs_per_s": 10.0})
    await resources.update_namespace_policies("team", {"max_topics": 5}, clear=["publish_rate_msgs_per_s"])
    assert await resources.get_namespace_policies("team") == NamespacePolicies(max_topics=5)
    assert await resources.namespace_policies("team") == {"max_topics": 5}
    assert await resources.namespace_exists("team")
    with pytest.raises(NamespaceNotFound, match="danube-admin namespaces create gone"):
        await resources.update_namespace_policies("gone", {"max_topics": 1})


async def test_max_topics_counts_partitions_and_refuses_the_topic_over_it(resources: Resources) -> None:
    await resources.update_namespace_policies("team", {"max_topics": 4})
    await resources.create_partitioned_topic(TopicName.parse("/team/p"), 3)
    await resources.create_topic(TopicName.parse("/team/a"))
    with pytest.raises(TooManyTopics, match="has 4 topic"):
        await resources.create_topic(TopicName.parse("/team/b"))
    with pytest.raises(TooManyTopics):
        await resources.create_partitioned_topic(TopicName.parse("/team/q"), 2)
    # An existing topic asked for again (a producer's auto-create) is not a new one.
    rec, created = await resources.create_topic(TopicName.parse("/team/a"), exist_ok=True)
    assert not created and rec.name == "/team/a"
    await resources.create_topic(TopicName.parse("/default/other"))  # another namespace: no limit
    await resources.update_namespace_policies("team", {}, clear=["max_topics"])
    await resources.create_topic(TopicName.parse("/team/b"))
