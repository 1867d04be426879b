"""Typed cluster metadata on the in-memory store: namespaces, topics, brokers, placement, ownership."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from danube_common.errors import (
    InvalidArgument,
    InvalidNamespaceName,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    NoBrokerAvailable,
    TopicAlreadyExists,
    TopicNotFound,
)
from danube_common.fallback_placement import place_new_topic
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.metadata.store import Compare, Op, TxnResult
from danube_common.records import BrokerRecord, Ownership, TopicRecord
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

pytestmark = pytest.mark.unit

T = TopicName.parse


@pytest.fixture
def keys() -> Keys:
    return Keys("c")


@pytest.fixture
async def res(memory_store: MemoryStore, keys: Keys) -> AsyncIterator[Resources]:
    r = Resources(memory_store, keys)
    await r.create_namespace("default")
    yield r


async def register(res: Resources, broker_id: str, state: str = "active") -> None:
    rec = BrokerRecord(
        broker_id, f"127.0.0.1:70{broker_id[-1]}", f"http://127.0.0.1:70{broker_id[-1]}", state
    )
    await res.store.put(res.keys.broker(broker_id), rec.to_json())


async def assignment_owners(res: Resources, topic: TopicName) -> list[str]:
    """Brokers holding an assignment key for ``topic`` (the invariant: at most one)."""
    kvs, _ = await res.store.get_prefix(res.keys.assignments_prefix())
    return [b for b, t in (res.keys.parse_assignment(kv.key) or ("", None) for kv in kvs) if t == topic]


# ---------------------------------------------------------------- namespaces


async def test_namespaces(res: Resources) -> None:
    assert await res.create_namespace("ns1") is True
    assert await res.create_namespace("ns1", exist_ok=True) is False
    with pytest.raises(NamespaceAlreadyExists):
        await res.create_namespace("ns1")
    with pytest.raises(InvalidNamespaceName):
        await res.create_namespace("bad/name")
    await res.store.put(res.keys.namespace("ns1") + "/policy", b"{}")  # nested keys are not namespaces
    assert await res.list_namespaces() == ["default", "ns1"]
    assert await res.namespace_exists("ns1") and not await res.namespace_exists("ns2")


async def test_delete_namespace(res: Resources) -> None:
    await res.create_namespace("ns1")
    await res.create_topic(T("/ns1/t"))
    with pytest.raises(NamespaceNotEmpty) as info:
        await res.delete_namespace("ns1")
    assert "/ns1/t" in info.value.message
    await res.delete_topic(T("/ns1/t"))
    await res.delete_namespace("ns1")
    assert not await res.namespace_exists("ns1")
    with pytest.raises(NamespaceNotFound):
        await res.delete_namespace("ns1")


# ---------------------------------------------------------------- topics


async def test_create_topic(res: Resources) -> None:
    rec, created = await res.create_topic(T("/default/t"), dispatch_strategy="reliable")
    assert (
        created
        and rec.name == "/default/t"
        and rec.dispatch_strategy == "reliable"
        and rec.partition_of == ""
    )
    assert await res.get_topic(T("/default/t")) == rec
    again, created = await res.create_topic(T("/default/t"), exist_ok=True)
    assert not created and again == rec, "exist_ok returns the stored record, not the new arguments"
    with pytest.raises(TopicAlreadyExists):
        await res.create_topic(T("/default/t"))


async def test_create_topic_needs_namespace_and_known_dispatch(res: Resources) -> None:
    with pytest.raises(NamespaceNotFound) as info:
        await res.create_topic(T("/nowhere/t"))
    assert "danube-admin namespaces create nowhere" in info.value.message
    with pytest.raises(InvalidArgument) as info2:
        await res.create_topic(T("/default/t"), dispatch_strategy="fast")
    assert "non_reliable" in info2.value.message
    assert await res.get_topic(T("/default/t")) is None


async def test_list_topics_skips_subscriptions(res: Resources) -> None:
    await res.create_namespace("other")
    for name in ["/default/b", "/default/a", "/other/x"]:
        await res.create_topic(T(name))
    await res.store.put(res.keys.subscription(T("/default/a"), "sub"), {"type": "exclusive"})
    assert [r.name for r in await res.list_topics("default")] == ["/default/a", "/default/b"]
    assert [r.name for r in await res.list_topics()] == ["/default/a", "/default/b", "/other/x"]


async def test_partitioned_topics(res: Resources) -> None:
    parent = await res.create_partitioned_topic(T("/default/p"), 3, dispatch_strategy="reliable")
    assert parent.partitions == 3
    names = await res.topic_partitions(T("/default/p"))
    assert names == ["/default/p-part-0", "/default/p-part-1", "/default/p-part-2"]
    part = await res.get_topic(T("/default/p-part-1"))
    assert part is not None and part.incarnation > 0
    assert part == TopicRecord(
        "/default/p-part-1", "reliable", 0, "/default/p", parent.created_at_ms, incarnation=part.incarnation
    )
    await res.create_topic(T("/default/plain"))
    assert await res.topic_partitions(T("/default/plain")) == ["/default/plain"]
    assert await res.topic_partitions(T("/default/unknown")) == []


async def test_partitioned_topic_is_all_or_nothing(res: Resources) -> None:
    await res.create_topic(T("/default/q-part-1"))
    with pytest.raises(TopicAlreadyExists):
        await res.create_partitioned_topic(T("/default/q"), 3)
    assert await res.get_topic(T("/default/q")) is None
    assert await res.get_topic(T("/default/q-part-0")) is None


@pytest.mark.parametrize(("name", "n"), [("/default/x-part-2", 2), ("/default/x", 0), ("/default/x", 1025)])
async def test_partitioned_topic_rejects_bad_requests(res: Resources, name: str, n: int) -> None:
    with pytest.raises(InvalidArgument):
        await res.create_partitioned_topic(T(name), n)


async def test_delete_topic_removes_everything_about_it(res: Resources) -> None:
    await register(res, "b1")
    t = T("/default/t")
    await res.create_topic(t)
    await res.store.put(res.keys.subscription(t, "s"), b"{}")
    await res.store.put(res.keys.unassigned(t), b"{}")
    await res.assign_if_unowned(t, "b1")
    # The log's records go too (a topic created again under the name starts empty).
    for key in (
        res.keys.storage_state(t),
        res.keys.storage_reservation(t),
        res.keys.upload_checkpoint(t),
        res.keys.segment(t, 0),
        res.keys.storage_gap(t, 5),
    ):
        await res.store.put(key, b"{}")
    t2 = T("/default/t2")
    await res.create_topic(t2)  # a neighbour sharing the name prefix survives
    await res.store.put(res.keys.storage_state(t2), b"{}")
    assert await res.delete_topic(t) == ["/default/t"]
    kvs, _ = await res.store.get_prefix(res.keys.root)
    assert [kv.key for kv in kvs if "/default/t" in kv.key] == [
        res.keys.storage_state(t2),
        res.keys.topic(t2),
    ]
    with pytest.raises(TopicNotFound):
        await res.delete_topic(t)


async def test_delete_partitioned_topic(res: Resources) -> None:
    await res.create_partitioned_topic(T("/default/p"), 2)
    assert sorted(await res.delete_topic(T("/default/p"))) == [
        "/default/p",
        "/default/p-part-0",
        "/default/p-part-1",
    ]
    assert await res.list_topics() == []


# ---------------------------------------------------------------- brokers and placement


async def test_list_brokers_skips_nested_keys(res: Resources) -> None:
    await register(res, "b1")
    await register(res, "b2", "draining")
    await res.store.put(res.keys.broker("b1") + "/state", b"active")
    assert [(b.broker_id, b.state) for b in await res.list_brokers()] == [
        ("b1", "active"),
        ("b2", "draining"),
    ]
    assert (await res.get_broker("b2")) == BrokerRecord(
        "b2", "127.0.0.1:702", "http://127.0.0.1:702", "draining"
    )
    assert await res.get_broker("b9") is None


def test_broker_record_internal_address_is_optional_both_ways() -> None:
    """A record written before internal listeners existed reads as having none (services dial
    its client address); a record without one is written in the old shape, so older readers
    and the new field coexist."""
    old = {"broker_id": "b1", "broker_addr": "h:1", "advertised_url": "http://h:1", "state": "active"}
    rec = BrokerRecord.from_json(old)
    assert rec.internal_addr == "" and rec.service_addr == "h:1"
    assert "internal_addr" not in rec.to_json()
    new = BrokerRecord("b1", "h:1", "http://h:1", internal_addr="h:2")
    assert new.to_json()["internal_addr"] == "h:2" and new.service_addr == "h:2"
    assert BrokerRecord.from_json(new.to_json()) == new


async def test_place_new_topic_picks_least_loaded_active_broker(res: Resources) -> None:
    for b in ("b1", "b2", "b3"):
        await register(res, b)
    await register(res, "b0", "draining")
    await res.assign_if_unowned(T("/default/x1"), "b1")
    await res.assign_if_unowned(T("/default/x2"), "b1")
    await res.assign_if_unowned(T("/default/x3"), "b3")
    own = await place_new_topic(res, T("/default/new1"))
    assert own.broker_id == "b2", "fewest topics; a draining broker is never chosen"
    own2 = await place_new_topic(res, T("/default/new2"))
    assert own2.broker_id == "b2", "b2 and b3 tie at one topic: the lower id wins"
    assert await res.topic_counts() == {"b1": 2, "b2": 2, "b3": 1}
    again = await place_new_topic(res, T("/default/new1"))
    assert again == own, "placing an owned topic returns its owner unchanged"


async def test_place_without_active_brokers(res: Resources) -> None:
    await register(res, "b1", "drained")
    with pytest.raises(NoBrokerAvailable):
        await place_new_topic(res, T("/default/t"))


async def test_assign_writes_owner_assignment_and_clears_request(res: Resources) -> None:
    t = T("/default/t")
    await res.store.put(res.keys.unassigned(t), b"{}")
    own = await res.assign_if_unowned(t, "b1")
    assert await res.get_owner(t) == own
    assert own.epoch == (await res.store.get(res.keys.owner(t))).mod_revision  # type: ignore[union-attr]
    assert await assignment_owners(res, t) == ["b1"]
    assert await res.store.get(res.keys.unassigned(t)) is None
    owners, rev = await res.list_owners()
    assert owners == {"/default/t": own} and rev >= own.epoch


class GatedStore(MemoryStore):
    """Holds every caller of the chosen operations at a barrier, so racers interleave for real."""

    def __init__(self, parties: int, *, gate_get_of: str = "", gate_txn: bool = False) -> None:
        super().__init__()
        self.barrier = asyncio.Barrier(parties)
        self.gate_get_of = gate_get_of
        self.gate_txn = gate_txn

    async def get(self, key: str):  # type: ignore[no-untyped-def]
        kv = await super().get(key)
        if self.gate_get_of and key.startswith(self.gate_get_of):
            await self.barrier.wait()
        return kv

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        if self.gate_txn:
            await self.barrier.wait()
        return await super().txn(compares, success, failure)


async def test_concurrent_assignments_agree_on_one_owner(keys: Keys) -> None:
    store = GatedStore(2, gate_txn=True)
    res = Resources(store, keys)
    t = T("/default/t")
    a, b = await asyncio.gather(res.assign_if_unowned(t, "b1"), res.assign_if_unowned(t, "b2"))
    assert a == b, "both callers are told the same owner and epoch"
    assert await res.get_owner(t) == a
    assert await assignment_owners(res, t) == [a.broker_id]
    await store.aclose()


async def test_concurrent_placements_agree_on_one_owner(keys: Keys) -> None:
    store = GatedStore(2, gate_get_of=keys.owners_prefix())
    lookup1, lookup2 = Resources(store, keys), Resources(store, keys)
    for b in ("b1", "b2"):
        await register(lookup1, b)
    t = T("/default/t")
    # Both lookups read "no owner" before either writes; the transaction settles it.
    a, b = await asyncio.gather(place_new_topic(lookup1, t), place_new_topic(lookup2, t))
    assert a == b
    assert await assignment_owners(lookup1, t) == [a.broker_id]
    await store.aclose()


async def test_release_is_fenced_by_epoch(res: Resources) -> None:
    t = T("/default/t")
    own = await res.assign_if_unowned(t, "b1")
    stale = Ownership(own.topic, own.broker_id, own.epoch - 1)
    assert await res.release(stale) is False
    assert await res.get_owner(t) == own
    assert await res.release(own) is True
    assert await res.get_owner(t) is None and await assignment_owners(res, t) == []
    own2 = await res.assign_if_unowned(t, "b2")
    assert own2.epoch > own.epoch, "epochs only grow"
    assert await res.release(own) is False, "the old owner cannot release the new ownership"
    assert await res.get_owner(t) == own2 and await assignment_owners(res, t) == ["b2"]
