"""Registration on a lease and the assignment watch, on the in-memory store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from danube_broker.membership import Membership
from danube_broker.registry import BrokerRegistry
from danube_common.errors import MetadataUnavailable
from danube_common.fallback_placement import place_new_topic
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.records import BrokerRecord
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.support import wait_until
from tests.unit.broker.helpers import BROKER_URL, config

pytestmark = pytest.mark.unit

RECORD = BrokerRecord("b1", "127.0.0.1:6651", BROKER_URL)


@pytest.fixture
async def res(memory_store: MemoryStore) -> Resources:
    r = Resources(memory_store, Keys("unit"))
    await r.create_namespace("default")
    return r


@pytest.fixture
async def parts(res: Resources) -> AsyncIterator[tuple[BrokerRegistry, Membership]]:
    reg = BrokerRegistry(config(), res, broker_url=BROKER_URL)
    m = Membership(res, reg, registration_ttl_s=3)
    yield reg, m
    if m.lease is not None:
        await m.lease.aclose()


async def test_register_puts_the_record_on_a_lease(
    res: Resources, parts: tuple[BrokerRegistry, Membership]
) -> None:
    _, m = parts
    lease = await m.register(RECORD)
    kv = await res.store.get(res.keys.broker("b1"))
    assert kv is not None and kv.lease == lease.lease_id
    assert (await res.get_broker("b1")) == RECORD
    await lease.aclose(revoke=True)
    assert await res.get_broker("b1") is None


class Renewals:
    """The renewal thread's client: counts keepalives and the threads they came from."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    async def keepalive(self, lease_id: int) -> int:
        self.threads.append(threading.current_thread().name)
        return 3

    async def aclose(self) -> None:
        pass


async def test_register_can_renew_from_a_thread_of_its_own(res: Resources) -> None:
    reg = BrokerRegistry(config(), res, broker_url=BROKER_URL)
    renewals = Renewals()
    m = Membership(res, reg, registration_ttl_s=3, ack_margin_s=0.6, keepalive_client=lambda: renewals)
    lease = await m.register(RECORD)
    assert lease.threaded and lease.thread is not None and lease.thread.is_alive()
    await wait_until(lambda: len(renewals.threads) >= 2, timeout_s=5, what="renewals")
    assert set(renewals.threads) == {lease.thread.name} != {threading.current_thread().name}
    assert lease.surely_alive()
    await lease.aclose(revoke=True)
    assert not lease.thread.is_alive()
    assert await res.get_broker("b1") is None


async def test_register_waits_for_a_stale_registration_to_expire(
    res: Resources,
    memory_store: MemoryStore,
    parts: tuple[BrokerRegistry, Membership],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, m = parts
    stale_lease = await memory_store.grant_lease(60)
    await memory_store.put(res.keys.broker("b1"), RECORD.to_json(), lease=stale_lease)
    task = asyncio.create_task(m.register(RECORD))
    await wait_until(lambda: "still registered" in caplog.text, what="the wait for the stale registration")
    assert not task.done()
    memory_store.expire_lease(stale_lease)  # the previous run's lease runs out
    lease = await asyncio.wait_for(task, 5)
    kv = await res.store.get(res.keys.broker("b1"))
    assert kv is not None and kv.lease == lease.lease_id


async def test_register_refuses_an_id_held_by_a_live_process(
    res: Resources, memory_store: MemoryStore
) -> None:
    live_lease = await memory_store.grant_lease(60)
    await memory_store.put(res.keys.broker("b1"), RECORD.to_json(), lease=live_lease)
    reg = BrokerRegistry(config(), res, broker_url=BROKER_URL)
    m = Membership(res, reg, registration_ttl_s=3, stale_wait_s=0.3)
    with pytest.raises(MetadataUnavailable, match="another live process"):
        await m.register(RECORD)
    assert m.lease is None
    kv = await res.store.get(res.keys.broker("b1"))
    assert kv is not None and kv.lease == live_lease, "the live registration is untouched"


async def test_assignment_watch_loads_and_unloads_topics(
    res: Resources, parts: tuple[BrokerRegistry, Membership]
) -> None:
    reg, m = parts
    before = TopicName("default", "before")
    await res.assign_if_unowned(before, "b1")
    await res.assign_if_unowned(TopicName("default", "theirs"), "b2")
    rev = await m.load_assignments()
    assert set(reg.topics) == {"/default/before"}
    follower = asyncio.create_task(m.follow_assignments(rev + 1))
    try:
        later = TopicName("default", "later")
        own = await res.assign_if_unowned(later, "b1")
        await wait_until(lambda: "/default/later" in reg.topics, what="topic loaded from the watch")
        assert reg.topics["/default/later"].epoch == own.epoch
        assert await res.release(own)
        await wait_until(lambda: "/default/later" not in reg.topics, what="topic unloaded from the watch")
    finally:
        follower.cancel()
        with pytest.raises(asyncio.CancelledError):
            await follower


async def test_release_all_gives_up_loaded_and_unloaded_assignments(
    res: Resources, parts: tuple[BrokerRegistry, Membership]
) -> None:
    reg, m = parts
    loaded = TopicName("default", "loaded")
    await res.assign_if_unowned(loaded, "b1")
    await m.load_assignments()
    late = TopicName("default", "late")
    await res.assign_if_unowned(late, "b1")  # assigned, never loaded here
    held = reg.close_all("stopping")
    await m.release_all(held)
    assert await res.get_owner(loaded) is None and await res.get_owner(late) is None
    kvs, _ = await res.store.get_prefix(res.keys.broker_assignments_prefix("b1"))
    assert kvs == []


async def test_mark_draining_keeps_the_lease_and_stops_placements(
    res: Resources, parts: tuple[BrokerRegistry, Membership]
) -> None:
    _, m = parts
    lease = await m.register(RECORD)
    await m.mark_draining()
    kv = await res.store.get(res.keys.broker("b1"))
    assert kv is not None and kv.lease == lease.lease_id
    assert (await res.get_broker("b1")).state == "draining"  # type: ignore[union-attr]
    with pytest.raises(Exception, match="no active broker"):
        await place_new_topic(res, TopicName("default", "new"))
