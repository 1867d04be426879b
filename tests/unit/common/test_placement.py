"""The one placement path (Resolver: through the load manager while one leads), the fallback's
choice, and the fenced take-over of a dead owner's topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from danube_common.cluster_view import ClusterView
from danube_common.discovery import DiscoveryServicer
from danube_common.errors import NamespaceNotFound, NoBrokerAvailable, TopicNotFound
from danube_common.fallback_placement import pick_broker, take_over_dead_owner
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.placement import LOAD_MANAGER_ROLE, Resolver, effective_counts
from danube_common.records import BrokerRecord, Ownership
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.support import wait_until

pytestmark = pytest.mark.unit

CTX: Any = None  # servicers raise DanubeError; they never touch the context


def rec(broker_id: str, state: str = "active") -> BrokerRecord:
    return BrokerRecord(broker_id, f"10.0.0.{broker_id}:6650", f"http://10.0.0.{broker_id}:6650", state)


@pytest.mark.parametrize(
    ("brokers", "counts", "exclude", "expected"),
    [
        ([], {}, (), None),
        ([rec("1", "draining"), rec("2", "drained")], {}, (), None),
        ([rec("1"), rec("2")], {"1": 3, "2": 1}, (), "2"),
        ([rec("2"), rec("1")], {}, (), "1"),  # tie: smallest id
        ([rec("1"), rec("2"), rec("3", "draining")], {"1": 5, "2": 5, "3": 0}, (), "1"),
        ([rec("1"), rec("2")], {"1": 0, "2": 9}, ("1",), "2"),
        ([rec("1")], {}, ("1",), None),
    ],
)
def test_pick_broker(
    brokers: list[BrokerRecord], counts: dict[str, int], exclude: tuple[str, ...], expected: str | None
) -> None:
    got = pick_broker(brokers, counts, exclude=exclude)
    assert (got.broker_id if got else None) == expected


@pytest.fixture
async def res(memory_store: MemoryStore) -> Resources:
    r = Resources(memory_store, Keys("c"))
    await r.create_namespace("default")
    return r


@pytest.fixture
async def view(res: Resources) -> AsyncIterator[ClusterView]:
    v = ClusterView(res)
    await v.start()
    yield v
    await v.aclose()


async def register(res: Resources, broker_id: str, *, state: str = "active") -> int:
    lease = await res.store.grant_lease(30)
    await res.store.put(res.keys.broker(broker_id), rec(broker_id, state).to_json(), lease=lease)
    return lease


T = TopicName("default", "t")


async def test_new_topic_goes_to_least_loaded_broker_and_stays(res: Resources, view: ClusterView) -> None:
    await register(res, "1")
    await register(res, "2")
    await res.assign_if_unowned(TopicName("default", "busy"), "1")
    await wait_until(lambda: view.topic_counts == {"1": 1}, timeout_s=5)  # counts are the view's
    resolver = Resolver(res, view)
    assert await resolver.resolve(T) == ("2", "http://10.0.0.2:6650")
    own = await res.get_owner(T)
    assert own is not None and own.broker_id == "2"
    for _ in range(5):
        assert await resolver.resolve(T) == ("2", "http://10.0.0.2:6650")
    assert (await res.get_owner(T)) == own  # no re-placement: same epoch


async def test_resolve_uses_the_cache_once_it_has_caught_up(
    res: Resources, view: ClusterView, memory_store: MemoryStore
) -> None:
    await register(res, "1")
    resolver = Resolver(res, view)
    await resolver.resolve(T)
    await wait_until(lambda: str(T) in view.owners and "1" in view.brokers, what="view to catch up")
    memory_store.unavailable = True  # any etcd read would now fail
    try:
        assert await resolver.resolve(T) == ("1", "http://10.0.0.1:6650")
    finally:
        memory_store.unavailable = False


async def test_dead_owner_is_replaced_with_a_fenced_move(
    res: Resources, view: ClusterView, memory_store: MemoryStore
) -> None:
    lease1 = await register(res, "1")
    resolver = Resolver(res, view)
    assert (await resolver.resolve(T))[0] == "1"
    before = await res.get_owner(T)
    assert before is not None
    await register(res, "2")
    memory_store.expire_lease(lease1)

    assert await resolver.resolve(T) == ("2", "http://10.0.0.2:6650")
    after = await res.get_owner(T)
    assert after is not None and after.broker_id == "2" and after.epoch > before.epoch
    keys = res.keys
    assert await memory_store.get(keys.assignment("1", T)) is None
    assign = await memory_store.get(keys.assignment("2", T))
    assert assign is not None and assign.mod_revision == after.epoch
    assert await resolver.resolve(T) == ("2", "http://10.0.0.2:6650")


async def test_take_over_is_fenced_on_the_epoch(res: Resources, memory_store: MemoryStore) -> None:
    lease1 = await register(res, "1")
    await register(res, "2")
    await register(res, "3")
    first = await res.assign_if_unowned(T, "1")
    memory_store.expire_lease(lease1)
    moved = await take_over_dead_owner(res, T, first)  # one lookup wins the race...
    assert moved.broker_id == "2" and moved.epoch > first.epoch
    # ...a second one, still holding the epoch it read before, must not move the topic again.
    again = await take_over_dead_owner(res, T, Ownership(str(T), "1", first.epoch))
    assert again == moved  # the stale writer reads the winner's ownership, writes nothing
    assert (await res.get_owner(T)) == moved
    counts = await res.topic_counts()
    assert sum(counts.values()) == 1


async def test_take_over_refused_when_the_owner_came_back(res: Resources, memory_store: MemoryStore) -> None:
    lease1 = await register(res, "1")
    await register(res, "2")
    own = await res.assign_if_unowned(T, "1")
    memory_store.expire_lease(lease1)
    await register(res, "1")  # the broker re-registered before our transaction
    result = await take_over_dead_owner(res, T, own)
    assert result == own
    assert await memory_store.get(res.keys.assignment("1", T)) is not None
    assert await memory_store.get(res.keys.assignment("2", T)) is None


async def test_concurrent_lookups_agree_on_one_new_owner(
    res: Resources, view: ClusterView, memory_store: MemoryStore
) -> None:
    lease1 = await register(res, "1")
    resolver = Resolver(res, view)
    await resolver.resolve(T)
    await register(res, "2")
    await register(res, "3")
    memory_store.expire_lease(lease1)
    answers = await asyncio.gather(*(Resolver(res, view).resolve(T) for _ in range(8)))
    assert len(set(answers)) == 1
    owner = await res.get_owner(T)
    assert owner is not None and answers[0][0] == owner.broker_id
    assert sum((await res.topic_counts()).values()) == 1


async def test_no_broker_left_is_a_retryable_error(
    res: Resources, view: ClusterView, memory_store: MemoryStore
) -> None:
    resolver = Resolver(res, view)
    with pytest.raises(NoBrokerAvailable):
        await resolver.resolve(T)
    lease1 = await register(res, "1")
    await resolver.resolve(T)
    memory_store.expire_lease(lease1)
    with pytest.raises(NoBrokerAvailable) as info:
        await resolver.resolve(T)
    assert info.value.retryable
    owner = await res.get_owner(T)
    assert owner is not None and owner.broker_id == "1"  # left alone until a broker appears


async def test_draining_brokers_get_no_new_topics(res: Resources, view: ClusterView) -> None:
    await register(res, "1", state="draining")
    await register(res, "2")
    assert (await Resolver(res, view).resolve(T))[0] == "2"


async def test_unknown_namespace_and_auto_create_off(res: Resources, view: ClusterView) -> None:
    await register(res, "1")
    with pytest.raises(NamespaceNotFound):
        await Resolver(res, view).resolve(TopicName("nope", "t"))
    with pytest.raises(TopicNotFound):
        await Resolver(res, view, auto_create_topics=False).resolve(T)
    await res.create_topic(T)  # created (e.g. by the admin API) while no broker was up: placed now
    assert (await Resolver(res, view, auto_create_topics=False).resolve(T))[0] == "1"


async def test_discovery_servicer(res: Resources, view: ClusterView) -> None:
    await register(res, "1")
    await res.create_topic(T)
    await res.create_partitioned_topic(TopicName("default", "p"), 3)
    for i in (1, 0):  # partitions created by name (as the Danube producer does), no parent entry
        await res.create_topic(TopicName("default", f"q-part-{i}"))
    servicer = DiscoveryServicer(res, view)

    async def partitions(topic: str) -> list[str]:
        resp = await servicer.TopicPartitions(pb.TopicLookupRequest(request_id=3, topic=topic), CTX)
        assert resp.request_id == 3
        return list(resp.partitions)

    assert await partitions("/default/t") == ["/default/t"]
    assert await partitions("/default/p") == [f"/default/p-part-{i}" for i in range(3)]
    assert await partitions("/default/q") == ["/default/q-part-0", "/default/q-part-1"]
    assert await partitions("/default/unknown") == []

    resp = await servicer.TopicLookup(pb.TopicLookupRequest(request_id=9, topic="/default/p-part-2"), CTX)
    assert (resp.request_id, resp.response_type) == (9, pb.TopicLookupResponse.Redirect)
    assert resp.connect_url == resp.broker_url == "http://10.0.0.1:6650" and not resp.proxy


async def campaign_as_load_manager(res: Resources, view: ClusterView) -> None:
    await res.store.put(res.keys.leader_candidates_prefix(LOAD_MANAGER_ROLE) + "lm-1", {"candidate": "lm-1"})
    await wait_until(lambda: view.has_leader(LOAD_MANAGER_ROLE), what="view to see the load manager")


async def test_created_topics_are_placed_by_the_load_manager_while_one_leads(
    res: Resources, view: ClusterView
) -> None:
    await register(res, "1")
    await register(res, "2")
    await res.assign_if_unowned(TopicName("default", "busy"), "2")  # the fallback would pick "1"
    await campaign_as_load_manager(res, view)
    parts = [TopicName("default", f"p-part-{i}") for i in range(3)]
    for p in parts:
        await res.create_topic(p)

    async def load_manager() -> None:
        """Answers every placement request in one pass, on broker 2 (what the fallback would not do)."""
        prefix = res.keys.unassigned_prefix() + "default/"
        while True:
            kvs, _ = await res.store.get_prefix(prefix)
            if len(kvs) == len(parts):
                for kv in kvs:
                    topic = TopicName("default", kv.key[len(prefix) :])
                    await res.assign_if_unowned(topic, "2")
                    await res.store.delete(kv.key)
                return
            await asyncio.sleep(0.01)

    lm = asyncio.create_task(load_manager())
    assert await Resolver(res, view).place(parts) == []
    await lm
    for p in parts:
        own = await res.get_owner(p)
        assert own is not None and own.broker_id == "2"


async def test_placement_requests_outlive_a_busy_load_manager(res: Resources, view: ClusterView) -> None:
    await register(res, "1")
    await campaign_as_load_manager(res, view)
    await res.create_topic(T)
    assert await Resolver(res, view, wait_s=0.2).place([T]) == [T]
    assert await res.get_owner(T) is None  # nothing placed behind the load manager's back
    assert await res.store.get(res.keys.unassigned(T)) is not None  # it places it when it can


async def test_without_a_load_manager_created_topics_spread_by_topic_count(
    res: Resources, view: ClusterView
) -> None:
    await register(res, "1")
    await register(res, "2")
    parts = [TopicName("default", f"p-part-{i}") for i in range(4)]
    assert await Resolver(res, view).place(parts) == []
    assert await res.topic_counts() == {"1": 2, "2": 2}


async def test_without_any_broker_created_topics_wait_for_one(res: Resources, view: ClusterView) -> None:
    await res.create_topic(T)
    assert await Resolver(res, view).place([T]) == [T]
    await register(res, "1")
    assert (await Resolver(res, view).resolve(T))[0] == "1"


def own(topic: str, broker_id: str) -> Ownership:
    return Ownership(topic, broker_id, 1)


@pytest.mark.parametrize(
    ("counted", "owners", "pending", "expected"),
    [
        ({"1": 2}, {"a": own("a", "1"), "b": own("b", "1")}, {}, {"1": 2}),
        # placed by us, not in the view yet: counted on its broker
        ({"1": 1}, {"a": own("a", "1")}, {"b": ("2", 9)}, {"1": 1, "2": 1}),
        # placed by us and already in the view: not counted twice
        ({"2": 1}, {"b": own("b", "2")}, {"b": ("2", 9)}, {"2": 1}),
        # taken over by us from dead broker 1, the view still has broker 1: moved
        ({"1": 1}, {"b": own("b", "1")}, {"b": ("2", 9)}, {"1": 0, "2": 1}),
    ],
)
def test_effective_counts(
    counted: dict[str, int],
    owners: dict[str, Ownership],
    pending: dict[str, tuple[str, int]],
    expected: dict[str, int],
) -> None:
    assert effective_counts(counted, owners, pending) == expected


async def test_the_views_topic_counts_follow_placements_moves_and_releases(
    res: Resources, view: ClusterView
) -> None:
    a, b, c = (TopicName("default", n) for n in "abc")
    await res.assign_if_unowned(a, "1")
    await res.assign_if_unowned(b, "1")
    held = await res.assign_if_unowned(c, "2")
    await wait_until(lambda: len(view.owners) == 3, timeout_s=5)
    assert view.topic_counts == await res.topic_counts() == {"1": 2, "2": 1}
    await res.store.put(res.keys.owner(a), {"broker_id": "2", "assigned_at_ms": 0})  # owner rewritten
    await wait_until(lambda: view.owners[str(a)].broker_id == "2", timeout_s=5)
    assert view.topic_counts == {"1": 1, "2": 2}
    assert await res.release(held)
    await wait_until(lambda: str(c) not in view.owners, timeout_s=5)
    assert view.topic_counts == {"1": 1, "2": 1}


async def test_fallback_placement_reads_no_assignment_listing_and_stays_balanced(
    res: Resources, view: ClusterView, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many concurrent lookups of new topics (no load manager): each placement balances on the
    view's counts plus the resolver's own placements the view has not applied yet, never on a
    range read of every assignment (O(topics) per placement)."""
    await register(res, "1")
    await register(res, "2")

    async def no_listing() -> dict[str, int]:
        raise AssertionError("placement read every assignment")

    monkeypatch.setattr(res, "topic_counts", no_listing)
    resolver = Resolver(res, view)
    topics = [TopicName("default", f"n-{i}") for i in range(40)]
    owners = await asyncio.gather(*(resolver.resolve(t) for t in topics))
    per_broker = {b: sum(1 for o, _ in owners if o == b) for b in ("1", "2")}
    assert abs(per_broker["1"] - per_broker["2"]) <= 2, per_broker
    await wait_until(lambda: len(view.owners) == 40, timeout_s=5)
    assert view.topic_counts == per_broker
