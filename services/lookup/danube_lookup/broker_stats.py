"""Live topic figures, asked of the broker that owns the topic (``BrokerStatsService``).

Only the owner has them (WAL size, cursors, rates), so the lookup finds the owner in etcd
(owner key -> broker registration -> its internal listener ``internal_addr``, else its client
address ``broker_addr``) and forwards the call on a cached channel, with the deadline
``broker_rpc_timeout_s``. With auth on, the broker recognises the lookup by its client
certificate, which only an mTLS listener sees (the broker's internal listener). What can go
wrong is said plainly:

- the topic does not exist -> ``TOPIC_NOT_FOUND``; it exists but no broker owns it yet, or it
  is a partitioned parent (stats are per partition) -> ``NOT_FOUND`` with what to do;
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

_TRANSPORT_FAILURES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)


class BrokerStatsClient:
    """Forwards stats requests to topic owners; owns its channels (close with :meth:`aclose`)."""

    def __init__(
        self,
        resources: Resources,
        *,
        rpc_timeout_s: float,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._res = resources
        self._timeout_s = rpc_timeout_s
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
        broker = await self._res.get_broker(own.broker_id)
        if broker is None:
            raise Unavailable(
                f"topic {topic} is owned by broker {own.broker_id}, which is not registered (down?); "
                "the topic moves to a live broker at its next lookup"
            )
        addr = broker.service_addr
        stub = apb_grpc.BrokerStatsServiceStub(await self._channel(addr))
        try:
            return await stub.GetTopicStats(apb.TopicStatsRequest(name=str(topic)), timeout=self._timeout_s)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                raise FailedPrecondition(
                    f"broker {own.broker_id} (owner of {topic}) at {addr} did not recognise the lookup "
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
                    f"broker {own.broker_id} (owner of {topic}) at {addr} is unreachable: {exc.details()}"
                ) from exc
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise Timeout(
                    f"broker {own.broker_id} (owner of {topic}) at {addr} did not answer within "
                    f"{self._timeout_s:g}s"
                ) from exc
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise FailedPrecondition(
                    f"broker {own.broker_id} at {addr} does not serve topic stats (BrokerStatsService); "
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
