"""Publishing dead-letter copies to a reliable topic that may live on any broker.

The topic's owner is found like a client would (Discovery's resolver: an unowned topic is
placed first). Owned here: the copy goes through the registry's own publish path. Owned
elsewhere: through that broker's ``danube.ProducerService`` (CreateProducer, then the unary
SendMessage, which answers only once the copy is durable there), at its internal listener when
it registered one (mTLS: this broker's certificate is its identity there), else at its client
address. Either way the producer is named ``dead-letter-<broker id>`` and asks for a reliable
topic, so a dead-letter topic is created reliable if it does not exist (``auto_create_topics``).

Any failure raises; the caller (the dead-letter worker) retries with backoff and acks the
original message only after :meth:`publish` returned.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio

from danube_broker.dispatch.base import Msg
from danube_broker.registry import BrokerRegistry
from danube_common.errors import DanubeError, Unavailable, error_from_rpc
from danube_common.grpc_util import open_channel
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.records import BrokerRecord
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)

#: Topic -> the registration of its live owner (``placement.Resolver.resolve_broker``).
Resolve = Callable[[TopicName], Awaitable[BrokerRecord]]


class DeadLetterPublisher:
    def __init__(
        self,
        registry: BrokerRegistry,
        resolve: Resolve,
        *,
        rpc_timeout_s: float = 10.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._reg = registry
        self._resolve = resolve
        self._timeout_s = rpc_timeout_s
        #: TLS towards the owning broker (this broker's own certificate: mTLS); None: plaintext.
        self._credentials = credentials
        self.producer_name = f"dead-letter-{registry.broker_id}"
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: (broker address, topic) -> producer id there
        self._remote_producers: dict[tuple[str, str], int] = {}

    async def publish(self, topic: str, msg: Msg) -> None:
        name = TopicName.parse(topic)
        owner = await self._resolve(name)
        if owner.broker_id == self._reg.broker_id:
            producer = await self._reg.create_producer(
                str(name), self.producer_name, exclusive=False, dispatch_strategy="reliable"
            )
            msgs = [msg]
            await self._reg.publish(producer, msgs, self._reg.payload_bytes(msgs))
            return
        addr = owner.service_addr
        try:
            await self._publish_remote(addr, str(name), msg)
        except grpc.aio.AioRpcError as exc:
            self._remote_producers.pop((addr, str(name)), None)
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise Unavailable(
                    f"broker {owner.broker_id} at {addr} did not recognise this broker when it sent a "
                    f"dead-letter copy for {name} ({exc.details()}); with auth on, give that broker an internal "
                    "listener (internal_listen_addr: it requires client certificates, which are how "
                    "brokers prove who they are), and this broker a certificate named in its "
                    "auth.internal_identities"
                ) from exc
            raise error_from_rpc(exc) from exc
        except DanubeError:
            self._remote_producers.pop((addr, str(name)), None)
            raise

    async def _publish_remote(self, addr: str, topic: str, msg: Msg) -> None:
        stub = pb_grpc.ProducerServiceStub(self._channel(addr))
        key = (addr, topic)
        producer_id = self._remote_producers.get(key)
        if producer_id is None:
            resp = await stub.CreateProducer(
                pb.ProducerRequest(
                    producer_name=self.producer_name, topic_name=topic, dispatch_strategy=pb.Reliable
                ),
                timeout=self._timeout_s,
            )
            producer_id = self._remote_producers[key] = int(resp.producer_id)
        msg.msg_id.producer_id = producer_id
        msg.msg_id.topic_name = topic
        await stub.SendMessage(msg, timeout=self._timeout_s)

    def _channel(self, addr: str) -> grpc.aio.Channel:
        channel = self._channels.get(addr)
        if channel is None:
            channel = self._channels[addr] = open_channel(addr, self._credentials)
        return channel

    async def aclose(self) -> None:
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()
