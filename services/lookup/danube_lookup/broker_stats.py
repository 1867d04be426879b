"""Live topic figures, asked of the broker that owns the topic (``BrokerStatsService``); and
compaction (``CompactTopic``), which only the owner can do.

Only the owner has them (WAL size, cursors, rates), so the lookup finds the owner in etcd
(owner key -> broker registration -> its internal listener ``internal_addr``, else its client
address ``broker_addr``) and forwards the call on a cached channel, with the deadline
``broker_rpc_timeout_s`` (``compaction_rpc_timeout_s`` for a compaction, which reads the log
from the previous horizon on). With auth on, the broker recognises the lookup by its client
certificate, which only an mTLS listener sees (the broker's internal listener). What can go
wrong is said plainly:

- the topic does not exist -> ``TOPIC_NOT_FOUND``; it exists but no broker owns it yet, or it
  is a partitioned parent (stats are per partition) -> ``NOT_FOUND`` with what to do;
- compaction of a partitioned parent (each partition is compacted on its own) or of a
  non-reliable topic -> ``FAILED_PRECONDITION``, without asking a broker;
- the owner is not registered (dead, lease expired) or does not answer -> ``UNAVAILABLE``
  naming the broker; no answer in time -> ``TIMEOUT`` naming the broker;
- the broker does not recognise the lookup (UNAUTHENTICATED: it has auth on but no internal
  listener, nor client certificates required on its client port) -> ``FAILED_PRECONDITION``
  saying how to configure it (the admin's own credentials are not the problem);
- errors the broker itself sends (e.g. ``TOPIC_NOT_OWNED`` while the topic moves) pass through.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import grpc.aio

from danube_common.errors import (
    MD_ERROR_CODE,
    FailedPrecondition,
    NotFound,
    Timeout,
    TopicNotFound,
    Unavailable,
    error_from_rpc,
)
from danube_common.grpc_util import open_channel
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)

#: Channels kept open to brokers (least recently used ones are closed beyond this).
MAX_CACHED_CHANNELS = 64

_T = TypeVar("_T")

_TRANSPORT_FAILURES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)


class BrokerStatsClient:
    """Forwards stats (and compaction) requests to topic owners; owns its channels (close with
    :meth:`aclose`)."""

    def __init__(
        self,
        resources: Resources,
        *,
        rpc_timeout_s: float,
        compaction_timeout_s: float = 300.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._res = resources
        self._timeout_s = rpc_timeout_s
        #: The deadline of a forwarded CompactTopic (the lookup's ``compaction_rpc_timeout_s``).
        self._compaction_timeout_s = compaction_timeout_s
        #: TLS towards the brokers (the lookup's own certificate: mTLS); None: plaintext.
        self._credentials = credentials
        self._channels: collections.OrderedDict[str, grpc.aio.Channel] = collections.OrderedDict()

    async def topic_stats(self, name: str) -> apb.TopicStats:
        topic = TopicName.parse(name)
        own = await self._res.get_owner(topic)
        if own is None:
            rec = await self._res.get_topic(topic)
            if rec is None:
                raise TopicNotFound(f"topic {topic} does not exist; see `danube-admin topics list`")
            if rec.partitions > 0:
                raise NotFound(
                    f"{topic} is partitioned and stats are per partition: ask for one of "
                    f"{topic.partition(0)} .. {topic.partition(rec.partitions - 1)}"
                )
            raise NotFound(
                f"topic {topic} is not assigned to a broker yet, so no broker has figures for it; "
                "it is placed when a producer or consumer first looks it up"
            )
        request = apb.TopicStatsRequest(name=str(topic))
        return await self._forward(
            topic,
            own.broker_id,
            lambda stub: stub.GetTopicStats(request, timeout=self._timeout_s),
            what="topic stats",
            timeout_s=self._timeout_s,
        )

    async def compact_topic(self, name: str) -> apb.CompactionInfo:
        """Compact ``name`` on its owner now (deadline ``compaction_timeout_s``). Only a reliable,
        non-partitioned topic can be: the others are refused here, without asking a broker."""
        topic = TopicName.parse(name)
        rec = await self._res.get_topic(topic)
        if rec is None:
            raise TopicNotFound(f"topic {topic} does not exist; see `danube-admin topics list`")
        if rec.partitions > 0:
            raise FailedPrecondition(
                f"{topic} is partitioned and each partition is compacted on its own broker: compact "
                f"each of {topic.partition(0)} .. {topic.partition(rec.partitions - 1)}"
            )
        if rec.dispatch_strategy != "reliable":
            raise FailedPrecondition(
                f"{topic} is a {rec.dispatch_strategy} topic, which keeps nothing to compact: only reliable "
                "topics can be compacted"
            )
        own = await self._res.get_owner(topic)
        if own is None:
            raise NotFound(
                f"topic {topic} is not assigned to a broker yet, so no broker can compact it; it is "
                "placed when a producer or consumer first looks it up"
            )
        request = apb.CompactTopicRequest(name=str(topic))
        info = await self._forward(
            topic,
            own.broker_id,
            lambda stub: stub.CompactTopic(request, timeout=self._compaction_timeout_s),
            what="compaction",
            timeout_s=self._compaction_timeout_s,
            late=f"; the compaction may still finish there (see `danube-admin topics stats {topic}`), "
            "and a large topic needs a larger compaction_rpc_timeout_s",
        )
        log.info(
            "topic %s compacted by broker %s: horizon %d, %d key(s), %d bytes, %.2fs",
            topic,
            own.broker_id,
            info.horizon,
            info.keys,
            info.bytes,
            info.duration_s,
        )
        return info

    async def _forward(
        self,
        topic: TopicName,
        broker_id: str,
        call: Callable[[apb_grpc.BrokerStatsServiceStub], Awaitable[_T]],
        *,
        what: str,
        timeout_s: float,
        late: str = "",
    ) -> _T:
        """``call`` on the stats service of ``broker_id`` (the owner of ``topic``), its failures
        said plainly (``what``: the figures or action asked for; ``late``: added to a timeout)."""
        broker = await self._res.get_broker(broker_id)
        if broker is None:
            raise Unavailable(
                f"topic {topic} is owned by broker {broker_id}, which is not registered (down?); "
                "the topic moves to a live broker at its next lookup"
            )
        addr = broker.service_addr
        stub = apb_grpc.BrokerStatsServiceStub(await self._channel(addr))
        try:
            return await call(stub)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                raise FailedPrecondition(
                    f"broker {broker_id} (owner of {topic}) at {addr} did not recognise the lookup "
                    f"service ({exc.details()}): with auth on, give the broker an internal listener "
                    "(internal_listen_addr, mTLS) and the lookup a certificate named in the broker's "
                    "auth.internal_identities"
                ) from exc
            from_broker = any(item[0] == MD_ERROR_CODE for item in exc.trailing_metadata() or ())
            if from_broker:
                raise error_from_rpc(exc) from exc
            if code in _TRANSPORT_FAILURES:
                await self._drop(addr)  # a restarted broker gets a fresh connection next time
                raise Unavailable(
                    f"broker {broker_id} (owner of {topic}) at {addr} is unreachable: {exc.details()}"
                ) from exc
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise Timeout(
                    f"broker {broker_id} (owner of {topic}) at {addr} did not answer within {timeout_s:g}s"
                    + late
                ) from exc
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise FailedPrecondition(
                    f"broker {broker_id} at {addr} does not serve {what} (BrokerStatsService); "
                    "it runs an older version"
                ) from exc
            raise error_from_rpc(exc) from exc

    async def _channel(self, addr: str) -> grpc.aio.Channel:
        channel = self._channels.get(addr)
        if channel is not None:
            self._channels.move_to_end(addr)
            return channel
        channel = open_channel(addr, self._credentials)
        self._channels[addr] = channel  # before any await: concurrent callers share it
        while len(self._channels) > MAX_CACHED_CHANNELS:
            _, oldest = self._channels.popitem(last=False)
            await oldest.close()
        return channel

    async def _drop(self, addr: str) -> None:
        channel = self._channels.pop(addr, None)
        if channel is not None:
            await channel.close()

    async def aclose(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            await channel.close()
