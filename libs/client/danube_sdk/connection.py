"""Channels (one per target address, cached), stubs, and the Discovery calls.

Every unary RPC carries a deadline and every gRPC failure is turned into the matching
:class:`~danube_common.errors.DanubeError` class here, at the boundary. Channels are made in
one place, :meth:`ChannelSecurity.open_channel`, so TLS and the bearer token apply to all.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import grpc
import grpc.aio

from danube_common.errors import Unavailable, error_from_rpc
from danube_common.grpc_util import strip_scheme
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.pb import SchemaRegistry_pb2_grpc as spb_grpc
from danube_sdk.auth import TLS_HINT, ChannelSecurity, tls_failure
from danube_sdk.errors import ClientClosed, with_auth_hint

if TYPE_CHECKING:
    from danube_sdk.mux import ConsumeMux, PublishMux, _Shared

log = logging.getLogger(__name__)

T = TypeVar("T")


async def rpc(call: Awaitable[T]) -> T:
    """Await a gRPC call, raising our error classes instead of ``grpc.aio.AioRpcError``."""
    try:
        return await call
    except grpc.aio.AioRpcError as exc:
        raise with_auth_hint(error_from_rpc(exc)) from exc


@dataclass(frozen=True, slots=True)
class Stubs:
    url: str
    discovery: pb_grpc.DiscoveryStub
    producer: pb_grpc.ProducerServiceStub
    consumer: pb_grpc.ConsumerServiceStub
    health: pb_grpc.HealthCheckStub
    registry: spb_grpc.SchemaRegistryStub


class Connections:
    """The client's channels, keyed by ``host:port``, and (``multiplex``) one PublishMux and one
    ConsumeMux stream per broker, opened on first use and shared by every producer and consumer
    attached there (:mod:`danube_sdk.mux`); all closed together by :meth:`aclose`."""

    def __init__(
        self,
        service_url: str,
        *,
        rpc_timeout_s: float,
        security: ChannelSecurity | None = None,
        multiplex: bool = True,
    ) -> None:
        if not service_url:
            raise ValueError("service_url is required, e.g. http://127.0.0.1:6650")
        self.service_url = service_url
        self.security = security or ChannelSecurity(service_url)
        self.rpc_timeout_s = rpc_timeout_s
        self._stubs: dict[str, Stubs] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._closed = False
        self._request_ids = 0
        self.multiplex = multiplex
        self._publish_mux: dict[str, PublishMux] = {}
        self._consume_mux: dict[str, ConsumeMux] = {}
        #: Brokers (``host:port``) that answered UNIMPLEMENTED to a mux RPC: per-topic streams.
        self.no_mux: set[str] = set()

    def next_request_id(self) -> int:
        self._request_ids += 1
        return self._request_ids

    def stubs(self, url: str) -> Stubs:
        """Stubs for the server at ``url`` (``http://host:port`` or ``host:port``)."""
        if self._closed:
            raise ClientClosed("the client is closed")
        target = strip_scheme(url)
        found = self._stubs.get(target)
        if found is not None:
            return found
        channel = self.security.open_channel(url)
        self._channels.append(channel)
        stubs = Stubs(
            url=url,
            discovery=pb_grpc.DiscoveryStub(channel),
            producer=pb_grpc.ProducerServiceStub(channel),
            consumer=pb_grpc.ConsumerServiceStub(channel),
            health=pb_grpc.HealthCheckStub(channel),
            registry=spb_grpc.SchemaRegistryStub(channel),
        )
        self._stubs[target] = stubs
        return stubs

    def publish_mux(self, url: str) -> PublishMux | None:
        """The shared publish stream to the broker at ``url`` (None: use per-topic streams)."""
        from danube_sdk.mux import PublishMux

        target = strip_scheme(url)
        if not self.multiplex or target in self.no_mux:
            return None
        mux = self._publish_mux.get(target)
        if mux is None or mux.error is not None:
            mux = PublishMux(self.stubs(url), self._mux_ended)
            self._publish_mux[target] = mux
        return mux

    def consume_mux(self, url: str) -> ConsumeMux | None:
        """The shared delivery stream from the broker at ``url`` (None: per-topic streams)."""
        from danube_sdk.mux import ConsumeMux

        target = strip_scheme(url)
        if not self.multiplex or target in self.no_mux:
            return None
        mux = self._consume_mux.get(target)
        if mux is None or mux.error is not None:
            mux = ConsumeMux(self.stubs(url), self._mux_ended)
            self._consume_mux[target] = mux
        return mux

    def _mux_ended(self, mux: _Shared) -> None:
        from danube_sdk.mux import MuxUnsupported

        target = strip_scheme(mux.url)
        if isinstance(mux.error, MuxUnsupported):
            log.info("%s does not serve multiplexed streams: per-topic streams there", mux.url)
            self.no_mux.add(target)
        for table in (self._publish_mux, self._consume_mux):
            if table.get(target) is mux:
                del table[target]

    async def partitions(self, topic: str) -> list[str]:
        """``TopicPartitions`` on the service URL: ``[topic]``, ``[topic-part-0..]`` or ``[]``."""
        stub = self.stubs(self.service_url).discovery
        req = pb.TopicLookupRequest(request_id=self.next_request_id(), topic=topic)
        resp = await self._on_service(stub.TopicPartitions(req, timeout=self.rpc_timeout_s))
        return list(resp.partitions)

    async def lookup(self, topic: str) -> str:
        """``TopicLookup`` on the service URL: the URL of the broker owning ``topic``.

        Redirect and Connect answers are treated alike; an empty URL means the service
        itself.
        """
        stub = self.stubs(self.service_url).discovery
        req = pb.TopicLookupRequest(request_id=self.next_request_id(), topic=topic)
        resp = await self._on_service(stub.TopicLookup(req, timeout=self.rpc_timeout_s))
        if resp.response_type == pb.TopicLookupResponse.Failed:
            raise Unavailable(f"lookup of topic {topic} failed at {self.service_url}")
        return resp.connect_url or resp.broker_url or self.service_url

    async def _on_service(self, call: Awaitable[T]) -> T:
        return await self.call_service(call)

    async def call_service(self, call: Awaitable[T], *, url: str | None = None) -> T:
        """Await a call to the service at ``url`` (default: the service URL); a transport
        failure says which address could not be reached."""
        try:
            return await rpc(call)
        except Unavailable as err:
            if type(err) is Unavailable:  # a transport failure, not a broker's answer
                where = url or self.service_url
                hint = f" ({TLS_HINT})" if tls_failure(err.message) else ""
                raise Unavailable(f"cannot reach the service at {where}: {err.message}{hint}") from err
            raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        muxes = [*self._publish_mux.values(), *self._consume_mux.values()]
        for mux in muxes:
            await mux.aclose()
        channels, self._channels = self._channels, []
        self._stubs.clear()
        for channel in channels:
            await channel.close()
