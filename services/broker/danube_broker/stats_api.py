"""``danube.admin.v1.BrokerStatsService`` on the broker port: figures only a topic's owner has,
and compaction, which only the owner can do.

GetTopicStats answers for a topic loaded here; a topic that exists but is served elsewhere (or
not loaded) gets TOPIC_NOT_OWNED (with the owner's URL when known), an unknown topic
TOPIC_NOT_FOUND. CompactTopic compacts a reliable topic loaded here now and answers the stored
view's figures (the same errors for a topic not loaded here; FAILED_PRECONDITION for a
non-reliable one). GetBrokerStats sums the broker's topics and reports the free space of the
file system holding ``data_dir``.
"""

from __future__ import annotations

import shutil

import grpc.aio

from danube_broker.config import BrokerConfig
from danube_broker.registry import BrokerRegistry
from danube_broker.stats import SubscriptionStats, TopicStats
from danube_broker.topic import Topic, not_owned
from danube_common.errors import FailedPrecondition, TopicNotFound
from danube_common.pb import DanubeAdmin_pb2 as admin
from danube_common.pb import DanubeAdmin_pb2_grpc as admin_grpc
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

_TYPE_NAMES = {
    "Exclusive": "exclusive",
    "Shared": "shared",
    "Failover": "failover",
    "KeyShared": "key_shared",
}


def subscription_proto(s: SubscriptionStats) -> admin.SubscriptionStats:
    return admin.SubscriptionStats(
        name=s.name,
        type=_TYPE_NAMES.get(s.sub_type, s.sub_type.lower()),
        consumers=s.consumers,
        backlog=s.backlog,
        cursor=s.cursor if s.cursor is not None else 0,
        has_cursor=s.cursor is not None,
        unacked_in_flight=s.unacked_in_flight,
        delivered_total=s.delivered_total or s.msgs_out,
        redelivered_total=s.redelivered_total,
        dead_lettered_total=s.dead_lettered_total,
        dropped_total=s.dropped_total or s.msgs_dropped,
        msg_rate_out=s.msg_rate_out,
        skipped_total=s.skipped_total,
        read_error=s.read_error,
        delayed=s.delayed,
    )


def topic_proto(
    t: TopicStats,
    broker_id: str,
    *,
    uploaded: tuple[int, int] | None = None,
    compaction: admin.CompactionInfo | None = None,
) -> admin.TopicStats:
    """``uploaded``: offsets [first, next) in object storage (None: none, or no object storage);
    ``compaction``: the compacted view (None: never compacted, or not a reliable topic)."""
    tiered = t.tiered
    msg = admin.TopicStats(
        name=t.topic,
        broker_id=broker_id,
        dispatch_strategy=t.dispatch_strategy,
        durability=t.durability,
        first_offset=t.first_offset,
        next_offset=t.next_offset,
        wal_bytes=t.wal_bytes,
        wal_segments=t.wal_segments,
        local_first_offset=t.local_first_offset,
        has_uploaded=uploaded is not None,
        uploaded_first_offset=uploaded[0] if uploaded else 0,
        uploaded_next_offset=uploaded[1] if uploaded else 0,
        msgs_in_total=t.msgs_in,
        bytes_in_total=t.bytes_in,
        msg_rate_in=t.msg_rate_in,
        bytes_rate_in=t.bytes_rate_in,
        producers=t.producers,
        subscriptions=[subscription_proto(s) for s in t.per_subscription.values()],
        log_writer=t.log_stint[0] if t.log_stint else "",
        log_epoch=t.log_stint[1] if t.log_stint else 0,
        log_start_offset=t.log_stint[2] if t.log_stint else 0,
        reserved_to=t.log_stint[3] if t.log_stint else 0,
        state=t.state,
        accepted_gaps=[
            admin.AcceptedGap(
                start_offset=a, next_offset=b, reason=why, decided_by=who, at_ms=at, writer=writer
            )
            for a, b, why, who, at, writer in t.accepted_gaps
        ],
    )
    if tiered is not None:
        msg.remote_reads = tiered.remote_reads
        msg.remote_entries = tiered.remote_entries
        msg.remote_gets = tiered.remote_gets
        msg.remote_bytes_fetched = tiered.remote_bytes_fetched
        msg.remote_errors = tiered.remote_errors
        msg.last_remote_error = tiered.last_remote_error
        msg.retention_deleted_segments = tiered.retention_deleted_segments
        msg.retention_deleted_bytes = tiered.retention_deleted_bytes
    if compaction is not None:
        msg.has_compaction = True
        msg.compaction.CopyFrom(compaction)
    return msg


def disk_free_bytes(cfg: BrokerConfig) -> int:
    """Free bytes where the WAL lives (its nearest existing ancestor before the first topic)."""
    path = cfg.data_path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


class BrokerStatsApi(admin_grpc.BrokerStatsServiceServicer):
    def __init__(self, registry: BrokerRegistry, resources: Resources, cfg: BrokerConfig) -> None:
        self._reg = registry
        self._res = resources
        self._cfg = cfg

    async def _loaded(self, name: TopicName) -> Topic:
        """The topic ``name`` loaded here; TOPIC_NOT_FOUND / TOPIC_NOT_OWNED (with the owner's
        URL when known) otherwise."""
        topic = self._reg.topics.get(str(name))
        if topic is not None:
            return topic
        if await self._res.get_topic(name) is None:
            raise TopicNotFound(f"topic {name} does not exist")
        own = await self._res.get_owner(name)
        if own is None:
            raise not_owned(str(name), "not assigned to any broker")
        if own.broker_id == self._reg.broker_id:
            raise not_owned(str(name), "assigned here but not loaded yet; retry")
        broker = await self._res.get_broker(own.broker_id)
        err = not_owned(str(name), f"served by broker {own.broker_id}")
        err.redirect = broker.advertised_url if broker is not None else None
        raise err

    async def GetTopicStats(
        self, request: admin.TopicStatsRequest, context: grpc.aio.ServicerContext
    ) -> admin.TopicStats:
        name = TopicName.parse(request.name)
        topic = await self._loaded(name)
        rt = topic.reliable
        uploaded = await rt.uploaded_range() if rt is not None else None
        view = rt.compaction_info() if rt is not None else None
        return topic_proto(
            topic.stats(),
            self._reg.broker_id,
            uploaded=uploaded,
            compaction=view.to_proto(str(name)) if view is not None else None,
        )

    async def CompactTopic(
        self, request: admin.CompactTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin.CompactionInfo:
        name = TopicName.parse(request.name)
        topic = await self._loaded(name)
        rt = topic.reliable
        if rt is None:
            raise FailedPrecondition(
                f"{name} is a non_reliable topic, which keeps nothing to compact: only reliable topics "
                "can be compacted"
            )
        info = await rt.compact()  # logged there
        return info.to_proto(str(name))

    async def GetBrokerStats(
        self, request: admin.BrokerStatsRequest, context: grpc.aio.ServicerContext
    ) -> admin.BrokerStats:
        stats = self._reg.stats().values()
        return admin.BrokerStats(
            broker_id=self._reg.broker_id,
            topics=len(stats),
            wal_bytes=sum(t.wal_bytes for t in stats),
            msg_rate_in=sum(t.msg_rate_in for t in stats),
            msg_rate_out=sum(t.msg_rate_out for t in stats),
            disk_free_bytes=disk_free_bytes(self._cfg),
        )
