"""A tiny in-process broker for the lookup's stats forwarding: ``BrokerStatsService`` only.

A real grpc.aio server on loopback port 0 with the real ``ErrorInterceptor``, answering
``GetTopicStats`` and ``CompactTopic`` from dicts (``TOPIC_NOT_OWNED`` for topics it does not
have), recording every request, and able to hold answers (``hold``) to exercise deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc.aio

from danube_common.errors import DanubeError, TopicNotOwned
from danube_common.grpc_util import bind, new_server
from danube_common.keys import Keys
from danube_common.metadata.store import MetadataStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.records import BrokerRecord


class FakeStatsBroker(apb_grpc.BrokerStatsServiceServicer):
    def __init__(self, broker_id: str) -> None:
        self.broker_id = broker_id
        self.addr = ""
        self.stats: dict[str, apb.TopicStats] = {}
        self.requests: list[apb.TopicStatsRequest] = []
        #: What CompactTopic answers per topic, and the CompactTopic requests received.
        self.compactions: dict[str, apb.CompactionInfo] = {}
        self.compact_requests: list[apb.CompactTopicRequest] = []
        #: Cleared: answers wait until it is set again.
        self.hold = asyncio.Event()
        self.hold.set()
        #: Set: every call is refused with it (e.g. the broker does not recognise the caller).
        self.refuse: DanubeError | None = None

    async def GetTopicStats(self, request: apb.TopicStatsRequest, context: object) -> apb.TopicStats:
        self.requests.append(request)
        await self.hold.wait()
        if self.refuse is not None:
            raise self.refuse
        found = self.stats.get(request.name)
        if found is None:
            raise TopicNotOwned(f"topic {request.name} is not served by {self.broker_id}")
        return found

    async def CompactTopic(self, request: apb.CompactTopicRequest, context: object) -> apb.CompactionInfo:
        self.compact_requests.append(request)
        await self.hold.wait()
        if self.refuse is not None:
            raise self.refuse
        found = self.compactions.get(request.name)
        if found is None:
            raise TopicNotOwned(f"topic {request.name} is not served by {self.broker_id}")
        return found

    def compaction_sample(self, topic: str) -> apb.CompactionInfo:
        """Put a recognisable CompactionInfo for ``topic`` and return it."""
        info = apb.CompactionInfo(
            name=topic,
            horizon=1000,
            entries=42,
            keys=40,
            bytes=12_345,
            compacted_at_ms=1_700_000_000_000,
            duration_s=1.25,
            messages_read=1000,
            stored_in="object storage",
        )
        self.compactions[topic] = info
        return info

    async def GetBrokerStats(self, request: apb.BrokerStatsRequest, context: object) -> apb.BrokerStats:
        return apb.BrokerStats(broker_id=self.broker_id, topics=len(self.stats))

    def sample(self, topic: str) -> apb.TopicStats:
        """Put a recognisable TopicStats for ``topic`` (two subscriptions) and return it."""
        st = apb.TopicStats(
            name=topic,
            broker_id=self.broker_id,
            dispatch_strategy="reliable",
            durability="fsync",
            first_offset=10,
            next_offset=110,
            wal_bytes=4096,
            wal_segments=2,
            local_first_offset=60,
            has_uploaded=True,
            uploaded_first_offset=10,
            uploaded_next_offset=100,
            remote_reads=3,
            remote_entries=50,
            remote_gets=4,
            remote_bytes_fetched=5000,
            retention_deleted_segments=6,
            retention_deleted_bytes=60_000,
            msgs_in_total=110,
            bytes_in_total=11_000,
            msg_rate_in=12.5,
            bytes_rate_in=1250.0,
            producers=1,
            subscriptions=[
                apb.SubscriptionStats(
                    name="billing",
                    type="exclusive",
                    consumers=1,
                    backlog=7,
                    cursor=102,
                    has_cursor=True,
                    unacked_in_flight=3,
                    delivered_total=105,
                    redelivered_total=4,
                    dead_lettered_total=1,
                    msg_rate_out=9.5,
                ),
                apb.SubscriptionStats(name="fresh", type="shared", backlog=100, has_cursor=False),
            ],
        )
        self.stats[topic] = st
        return st


@contextlib.asynccontextmanager
async def stats_broker(broker_id: str) -> AsyncIterator[FakeStatsBroker]:
    """Serve a FakeStatsBroker on loopback for the duration of the block."""
    fake = FakeStatsBroker(broker_id)
    server: grpc.aio.Server = new_server()
    apb_grpc.add_BrokerStatsServiceServicer_to_server(fake, server)
    port = bind(server, "127.0.0.1:0")
    await server.start()
    fake.addr = f"127.0.0.1:{port}"
    try:
        yield fake
    finally:
        fake.hold.set()
        await server.stop(grace=None)


async def register(
    store: MetadataStore, keys: Keys, broker_id: str, addr: str, *, internal_addr: str = ""
) -> int:
    """Act as a broker's registration (under a lease; revoking it = the broker is gone);
    ``internal_addr``: its internal listener, which the lookup dials instead of ``addr``."""
    lease = await store.grant_lease(30)
    rec = BrokerRecord(broker_id, addr, f"http://{addr}", "active", 1, internal_addr=internal_addr)
    await store.put(keys.broker(broker_id), rec.to_json(), lease=lease)
    return lease
