"""The ``danube.Discovery`` service, served by the lookup service and by every broker.

TopicLookup answers with the owner's URL. For a topic nobody owns yet it places the topic
first (least-topics placement, race-free through a transaction) and then redirects, because
Danube clients fall back to the service URL when lookup fails. A broker answering for a
topic it owns itself says ``Connect``; everything else is ``Redirect``.
"""

from __future__ import annotations

import logging

import grpc.aio

from danube_common.cluster_view import ClusterView
from danube_common.errors import NoBrokerAvailable, TopicNotFound
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.resources import Resources
from danube_common.topic_name import TopicName

log = logging.getLogger(__name__)


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
        self._view = view
        self._self_id = self_broker_id
        self._auto_create = auto_create_topics

    async def resolve(self, topic: TopicName) -> tuple[str, str]:
        """(broker_id, advertised_url) of the topic's owner, placing the topic if unowned."""
        name = str(topic)
        own = self._view.owners.get(name)
        if own is None or own.broker_id not in self._view.brokers:
            # The cache may lag a fresh placement or a broker's registration: ask etcd.
            own = await self._res.get_owner(topic)
            if own is None:
                if not self._auto_create:
                    raise TopicNotFound(f"topic {name} does not exist and auto-creation is off")
                await self._res.require_namespace(topic.namespace)
                own = await self._res.place_new_topic(topic)
                log.info("placed topic %s on broker %s (epoch %d)", name, own.broker_id, own.epoch)
        broker = self._view.brokers.get(own.broker_id) or await self._res.get_broker(own.broker_id)
        if broker is None:
            raise NoBrokerAvailable(
                f"topic {name} is owned by broker {own.broker_id}, which is not registered; retry shortly"
            )
        return own.broker_id, broker.advertised_url

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
