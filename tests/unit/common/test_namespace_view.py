"""The watch-fed view of namespace policies (in-memory store): what it holds, and which
namespaces it reports as changed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.namespace_policies import NamespacePolicies
from danube_common.namespace_view import NamespaceView
from danube_common.resources import Resources

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
