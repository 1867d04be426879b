"""The watch-fed view of namespace policies (in-memory store): what it holds, and which
namespaces it reports as changed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from danube_common.errors import InvalidArgument, TopicNotFound
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.namespace_policies import NamespacePolicies
from danube_common.namespace_view import NamespaceView
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


@pytest.fixture
async def setup(memory_store: MemoryStore) -> AsyncIterator[tuple[Resources, NamespaceView, list[set[str]]]]:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("a")
    await res.create_namespace("b", policies={"max_topics": 3})
    changes: list[set[str]] = []
    view = NamespaceView(memory_store, res.keys, on_change=changes.append)
    await view.start()
    yield res, view, changes
    await view.aclose()


async def synced(res: Resources, view: NamespaceView, ns: str) -> None:
    kv = await res.store.get(res.keys.namespace(ns))
    revision = kv.mod_revision if kv is not None else (await res.store.get_prefix("/"))[1]
    assert await view.wait_revision(revision)


async def test_listing_reports_namespaces_with_policies(
    setup: tuple[Resources, NamespaceView, list[set[str]]],
) -> None:
    _, view, changes = setup
    assert changes == [{"b"}]
    assert view.get("b") == NamespacePolicies(max_topics=3)
    assert view.get("a").is_empty() and view.get("unknown").is_empty()


async def test_changes_are_reported_per_namespace_and_only_when_they_change(
    setup: tuple[Resources, NamespaceView, list[set[str]]],
) -> None:
    res, view, changes = setup
    await res.update_namespace_policies("a", {"max_producers_per_topic": 2})
    await synced(res, view, "a")
    assert changes[-1] == {"a"} and view.get("a").max_producers_per_topic == 2
    seen = len(changes)
    await res.update_namespace_policies("a", {"max_producers_per_topic": 2})  # the same again
    await synced(res, view, "a")
    assert len(changes) == seen
    await res.delete_namespace("b")
    await synced(res, view, "b")
    assert changes[-1] == {"b"} and view.get("b").is_empty()


async def test_a_topics_own_limits_are_held_per_topic_and_reported_as_its_namespace(
    setup: tuple[Resources, NamespaceView, list[set[str]]],
) -> None:
    res, view, changes = setup
    plain, parted = TopicName.parse("/a/t"), TopicName.parse("/a/p")
    await res.create_topic(plain)
    await res.create_partitioned_topic(parted, 2)
    assert await res.update_topic_policies(plain, {"max_producers_per_topic": 1}) == NamespacePolicies(
        max_producers_per_topic=1
    )
    await res.update_topic_policies(parted, {"publish_rate_msgs_per_s": 10.0})
    await synced_key(res, view, res.keys.topic_policies(parted.partition(1)))
    assert changes[-1] == {"a"}
    assert view.of_topic("/a/t") == NamespacePolicies(max_producers_per_topic=1)
    for name in ("/a/p", "/a/p-part-0", "/a/p-part-1"):  # every partition carries them
        assert view.of_topic(name) == NamespacePolicies(publish_rate_msgs_per_s=10.0)
    assert view.get("a").is_empty() and await res.list_namespaces() == ["a", "b"]
    # What the topic sees: the namespace's, with its own taking precedence.
    await res.update_namespace_policies("a", {"max_producers_per_topic": 5, "max_consumers_per_topic": 7})
    await synced(res, view, "a")
    seen = view.get("a").overridden_by(view.of_topic("/a/t"))
    assert (seen.max_producers_per_topic, seen.max_consumers_per_topic) == (1, 7)
    # Clearing the last one deletes the key; deleting the topic deletes its policies.
    assert (await res.update_topic_policies(plain, {}, ["max_producers_per_topic"])).is_empty()
    assert await res.store.get(res.keys.topic_policies(plain)) is None
    await res.delete_topic(parted)
    assert await res.store.get(res.keys.topic_policies(parted.partition(0))) is None
    await synced(res, view, "a")
    await view.wait_revision((await res.store.get_prefix("/"))[1])
    assert view.of_topic("/a/t") is None and view.of_topic("/a/p-part-0") is None


async def test_a_topic_may_override_only_the_per_topic_limits(
    setup: tuple[Resources, NamespaceView, list[set[str]]],
) -> None:
    res, _, _ = setup
    topic = TopicName.parse("/a/t")
    with pytest.raises(TopicNotFound):
        await res.update_topic_policies(topic, {"max_producers_per_topic": 1})
    await res.create_topic(topic)
    with pytest.raises(InvalidArgument, match="only a namespace sets"):
        await res.update_topic_policies(topic, {"max_topics": 1})
    with pytest.raises(InvalidArgument, match="must be between"):
        await res.update_topic_policies(topic, {"max_producers_per_topic": 0})
    assert (await res.get_topic_policies(topic)).is_empty()
    # Retention too, on a reliable topic only (a non-reliable one keeps nothing).
    with pytest.raises(InvalidArgument, match="non_reliable topic, which keeps nothing"):
        await res.update_topic_policies(topic, {"retention_time_s": 60})
    kept = TopicName.parse("/a/kept")
    await res.create_topic(kept, dispatch_strategy="reliable")
    own = await res.update_topic_policies(kept, {"retention_time_s": 60, "retention_size_bytes": 1 << 20})
    assert (own.retention_time_s, own.retention_size_bytes) == (60, 1 << 20)


async def synced_key(res: Resources, view: NamespaceView, key: str) -> None:
    kv = await res.store.get(key)
    assert kv is not None and await view.wait_revision(kv.mod_revision)
