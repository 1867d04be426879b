"""The ``danube.Discovery`` service, served by the lookup service and by every broker.

TopicLookup answers with the owner's URL. A topic nobody owns yet is placed first, and a
topic whose owner died is re-placed, before the answer (through :class:`placement.Resolver`: by
the leading load manager, or without one by :mod:`fallback_placement`), because Danube clients
fall back to the service URL when lookup fails. A broker answering for a topic it owns itself
says ``Connect``; everything else is ``Redirect``.
"""

from __future__ import annotations

import grpc.aio

from danube_common.cluster_view import ClusterView
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.placement import Resolver
from danube_common.resources import Resources
from danube_common.topic_name import TopicName


class DiscoveryServicer(pb_grpc.DiscoveryServicer):
    def __init__(
        self,
        resources: Resources,
        view: ClusterView,
        *,
        self_broker_id: str | None = None,
        auto_create_topics: bool = True,
    ) -> None:
        self._res = resources
        self._self_id = self_broker_id
        self.resolver = Resolver(resources, view, auto_create_topics=auto_create_topics)

    async def resolve(self, topic: TopicName) -> tuple[str, str]:
        """(broker_id, advertised_url) of the topic's live owner, placing or taking it over."""
        return await self.resolver.resolve(topic)

    async def TopicLookup(
        self, request: pb.TopicLookupRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicLookupResponse:
        topic = TopicName.parse(request.topic)
        broker_id, url = await self.resolve(topic)
        kind = (
            pb.TopicLookupResponse.Connect if broker_id == self._self_id else pb.TopicLookupResponse.Redirect
        )
        return pb.TopicLookupResponse(
            request_id=request.request_id, response_type=kind, connect_url=url, broker_url=url, proxy=False
        )

    async def TopicPartitions(
        self, request: pb.TopicLookupRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicPartitionsResponse:
        topic = TopicName.parse(request.topic)
        names = await self._res.topic_partitions(topic)
        return pb.TopicPartitionsResponse(request_id=request.request_id, partitions=names)

    async def NamespaceTopics(
        self, request: pb.NamespaceTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.NamespaceTopicsResponse:
        """What pattern subscriptions match against: every topic of the namespace a consumer can
        subscribe to (a partitioned topic's entry is left out; its partitions are listed)."""
        ns = request.namespace.strip("/")
        await self._res.require_namespace(ns)
        topics = [
            pb.NamespaceTopic(name=r.name, partition_of=r.partition_of)
            for r in await self._res.list_topics(ns)
            if r.partitions == 0
        ]
        topics.sort(key=lambda t: t.name)
        return pb.NamespaceTopicsResponse(request_id=request.request_id, topics=topics)
