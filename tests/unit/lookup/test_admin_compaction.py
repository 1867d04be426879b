"""Admin CompactTopic over the in-memory store: forwarded to the topic's owning broker (a fake
BrokerStatsService on loopback) with its own deadline, and refused without asking a broker
when the topic cannot be compacted (partitioned parent, non-reliable)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from danube_common.cluster_view import ClusterView
from danube_common.errors import (
    FailedPrecondition,
    NotFound,
    Timeout,
    TopicNotFound,
    TopicNotOwned,
    Unauthenticated,
    Unavailable,
)
from danube_common.etcd_server import free_port
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.placement import Resolver
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_lookup.admin_api import TopicAdminApi
from danube_lookup.broker_stats import BrokerStatsClient
from danube_lookup.catalog import Catalog
from tests.unit.lookup.fake_stats import register, stats_broker

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

CTX: Any = None

#: Short deadlines, told apart: stats 0.3 s, compaction 0.8 s.
STATS_TIMEOUT_S = 0.3
COMPACTION_TIMEOUT_S = 0.8


@pytest.fixture
async def res(memory_store: MemoryStore) -> Resources:
    r = Resources(memory_store, Keys("c"))
    await r.create_namespace("default")
    return r


@pytest.fixture
async def topics(res: Resources) -> AsyncIterator[TopicAdminApi]:
    stats = BrokerStatsClient(res, rpc_timeout_s=STATS_TIMEOUT_S, compaction_timeout_s=COMPACTION_TIMEOUT_S)
    yield TopicAdminApi(Catalog(res, Resolver(res, ClusterView(res))), stats)
    await stats.aclose()


async def create(topics: TopicAdminApi, name: str, **fields: Any) -> apb.TopicInfo:
    return (await topics.CreateTopic(apb.CreateTopicRequest(name=name, **fields), CTX)).topic


def compact(name: str) -> apb.CompactTopicRequest:
    return apb.CompactTopicRequest(name=name)


async def test_compaction_is_forwarded_to_each_partitions_owner(
    topics: TopicAdminApi, res: Resources
) -> None:
    async with stats_broker("b1") as b1, stats_broker("b2") as b2:
        await register(res.store, res.keys, "b1", b1.addr)
        await register(res.store, res.keys, "b2", b2.addr)
        created = await create(topics, "/default/p", partitions=2, dispatch_strategy="reliable")
        owners = {p.name: p.broker_id for p in created.partition_topics}
        fakes = {"b1": b1, "b2": b2}
        for name, broker_id in owners.items():
            expected = fakes[broker_id].compaction_sample(name)
            assert await topics.CompactTopic(compact(name), CTX) == expected
        assert sorted(r.name for r in b1.compact_requests + b2.compact_requests) == sorted(owners)
        assert all(len(f.compact_requests) == 1 for f in fakes.values())  # each asked only for its own
        assert not b1.requests and not b2.requests  # no stats call on the way


async def test_what_cannot_be_compacted_is_refused_without_asking_a_broker(
    topics: TopicAdminApi, res: Resources
) -> None:
    async with stats_broker("b1") as b1:
        await register(res.store, res.keys, "b1", b1.addr)
        with pytest.raises(TopicNotFound, match="does not exist"):
            await topics.CompactTopic(compact("/default/ghost"), CTX)
        await create(topics, "/default/p", partitions=2, dispatch_strategy="reliable")
        with pytest.raises(
            FailedPrecondition,
            match=r"/default/p is partitioned .* compact each of /default/p-part-0 \.\. /default/p-part-1",
        ) as info:
            await topics.CompactTopic(compact("/default/p"), CTX)
        assert info.value.grpc_status == grpc.StatusCode.FAILED_PRECONDITION
        await create(topics, "/default/plain", dispatch_strategy="non_reliable")
        with pytest.raises(FailedPrecondition, match="only reliable topics can be compacted"):
            await topics.CompactTopic(compact("/default/plain"), CTX)
        assert not b1.compact_requests


async def test_compaction_errors_say_what_is_wrong(topics: TopicAdminApi, res: Resources) -> None:
    await create(topics, "/default/t", dispatch_strategy="reliable")  # no broker: unassigned
    with pytest.raises(NotFound, match="not assigned to a broker yet, so no broker can compact it"):
        await topics.CompactTopic(compact("/default/t"), CTX)

    await res.assign_if_unowned(TopicName.parse("/default/t"), "ghost-broker")
    with pytest.raises(Unavailable, match="owned by broker ghost-broker, which is not registered"):
        await topics.CompactTopic(compact("/default/t"), CTX)

    await create(topics, "/default/u", dispatch_strategy="reliable")
    await register(res.store, res.keys, "down", f"127.0.0.1:{free_port()}")
    await res.assign_if_unowned(TopicName.parse("/default/u"), "down")
    with pytest.raises(
        Unavailable, match=r"broker down \(owner of /default/u\) at 127\.0\.0\.1:\d+ is unreachable"
    ):
        await topics.CompactTopic(compact("/default/u"), CTX)


async def test_compaction_has_its_own_deadline(topics: TopicAdminApi, res: Resources) -> None:
    """A compaction longer than the stats deadline is waited for; one longer than the
    compaction deadline is a TIMEOUT saying it may still finish on the broker."""
    async with stats_broker("slow") as slow:
        await register(res.store, res.keys, "slow", slow.addr)
        await create(topics, "/default/t", dispatch_strategy="reliable")
        # The broker's own error passes through.
        with pytest.raises(TopicNotOwned, match="not served by slow"):
            await topics.CompactTopic(compact("/default/t"), CTX)
        expected = slow.compaction_sample("/default/t")

        slow.hold.clear()
        asyncio.get_running_loop().call_later(
            STATS_TIMEOUT_S * 2, slow.hold.set
        )  # past the stats deadline, within compaction's
        assert await topics.CompactTopic(compact("/default/t"), CTX) == expected

        slow.hold.clear()
        with pytest.raises(Timeout, match=r"broker slow .* did not answer within 0\.8s") as info:
            await topics.CompactTopic(compact("/default/t"), CTX)
        assert "may still finish there" in info.value.message
        assert "danube-admin topics stats /default/t" in info.value.message
        slow.hold.set()


async def test_a_broker_without_compaction(topics: TopicAdminApi, res: Resources) -> None:
    from danube_common.grpc_util import bind, new_server

    server = new_server()  # serves nothing: every method is UNIMPLEMENTED
    port = bind(server, "127.0.0.1:0")
    await server.start()
    try:
        await register(res.store, res.keys, "old", f"127.0.0.1:{port}")
        await create(topics, "/default/t", dispatch_strategy="reliable")
        with pytest.raises(FailedPrecondition, match=r"does not serve compaction .*older version"):
            await topics.CompactTopic(compact("/default/t"), CTX)
    finally:
        await server.stop(grace=None)


async def test_compaction_goes_to_the_internal_listener(topics: TopicAdminApi, res: Resources) -> None:
    async with stats_broker("b1") as b1:
        await register(res.store, res.keys, "b1", f"127.0.0.1:{free_port()}", internal_addr=b1.addr)
        await create(topics, "/default/t", dispatch_strategy="reliable")
        expected = b1.compaction_sample("/default/t")
        assert await topics.CompactTopic(compact("/default/t"), CTX) == expected
        b1.refuse = Unauthenticated("Authentication credentials are missing (missing)")
        with pytest.raises(FailedPrecondition, match="did not recognise the lookup service"):
            await topics.CompactTopic(compact("/default/t"), CTX)
