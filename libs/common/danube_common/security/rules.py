"""The authorization rule of every RPC: which permission it needs, on which resource.

:data:`RULES` maps each full method name to a :class:`Rule`; the resource comes from the
request (the first message of a client stream, and every later one). A method without a rule is
denied (default deny), and a unit test checks that the table names exactly the methods of every
service in ``danube_common.pb``: adding an RPC without deciding its rule fails that test.

A multiplexed stream (PublishMux, ConsumeMux) is checked per message like any client stream: a
frame on the topic of every producer or consumer it names; a producer or consumer of another
principal on a shared stream ends it with PERMISSION_DENIED.

Some calls name no topic, only a producer or consumer id (SendMessage, ReceiveMessages, Seek,
HealthCheck, ...): their target is a :class:`Handle`, which the serving broker resolves to the
topic and to the principal that created it (:data:`HandleResolver`): the rule's permission is
checked on that topic, and then the handle must be the caller's own (:mod:`.handles`). Reading
decisions, summarised:

- data plane: producing needs ``produce`` on the topic, consuming ``consume``, finding a topic
  (lookup, partitions, health checks) ``lookup``;
- read-only views (describe, stats, lists, schema reads, leaders, plans, load report, service
  status) need ``lookup`` on what they show (a topic, a namespace, else the cluster);
- writes need the ``manage_*`` permission of what they change; rebalancing, moves, pinning and
  force-takeover are ``manage_cluster``; so is every call of the security admin API (roles and
  bindings), reads included;
- service-to-service RPCs (campaigns, WAL flushes, the brokers' stats service) need
  ``cluster_internal``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from danube_common.pb import (
    DanubeAdmin_pb2,
    DanubeApi_pb2,
    DanubeLeader_pb2,
    DanubeLoadManager_pb2,
    DanubeWalUploader_pb2,
    SchemaRegistry_pb2,
)
from danube_common.security.rbac import CLUSTER, Permission, Resource

#: Every generated module whose services the table must cover.
PB_MODULES: tuple[Any, ...] = (
    DanubeApi_pb2,
    DanubeAdmin_pb2,
    SchemaRegistry_pb2,
    DanubeLeader_pb2,
    DanubeLoadManager_pb2,
    DanubeWalUploader_pb2,
)


@dataclass(frozen=True, slots=True)
class Handle:
    """A producer or consumer named by id: the serving broker knows its topic."""

    kind: Literal["producer", "consumer"]
    id: int

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


@dataclass(frozen=True, slots=True)
class HandleInfo:
    """What the serving broker knows of a handle: where it is attached, and who created it."""

    topic: Resource
    #: The creating principal, as :func:`.handles.creator_of` writes it (``user:alice``); None
    #: for a handle not created by an authenticated call (the broker's own dead-letter producer).
    creator: str | None


#: A tuple: every handle of it (a ConsumeMux frame names many consumers).
Target = Resource | Handle | tuple[Handle, ...]
#: Handle -> its topic and creator; None when this server has no such handle (the call then
#: reaches the servicer, which answers NOT_FOUND: there is nothing to protect).
HandleResolver = Callable[[Handle], HandleInfo | None]


@dataclass(frozen=True, slots=True)
class Rule:
    permission: Permission
    #: The resource the request acts on (may raise InvalidArgument for a malformed name).
    target: Callable[[Any], Target]
    #: Human-readable, for docs and the table summary.
    on: str


def _cluster(_req: Any) -> Target:
    return CLUSTER


def _topic(field: str) -> Callable[[Any], Target]:
    return lambda req: Resource.topic(getattr(req, field))


def _msg_topic(req: Any) -> Target:
    return Resource.topic(req.msg_id.topic_name)


def _producer(field: str) -> Callable[[Any], Target]:
    return lambda req: Handle("producer", int(getattr(req, field)))


def _consumer(req: Any) -> Target:
    return Handle("consumer", int(req.consumer_id))


def _send_message(req: Any) -> Target:
    return Handle("producer", int(req.msg_id.producer_id))


def _ack_batch(req: Any) -> Target:
    # The broker takes the request's topic when given, else the consumer's.
    return Resource.topic(req.topic_name) if req.topic_name else Handle("consumer", int(req.consumer_id))


def _publish_mux(req: Any) -> Target:
    # Every producer the frame's batches name.
    return tuple(Handle("producer", int(i)) for i in dict.fromkeys(b.producer_id for b in req.batches))


def _consume_mux(req: Any) -> Target:
    # Every consumer the frame names; a frame naming none does nothing (authentication only).
    ids = dict.fromkeys(
        [a.consumer_id for a in req.attach]
        + list(req.detach)
        + [c.consumer_id for c in req.credits]
        + [a.consumer_id for a in req.acks]
    )
    return tuple(Handle("consumer", int(i)) for i in ids)


def _health(req: Any) -> Target:
    kind: Literal["producer", "consumer"] = (
        "producer" if req.client == DanubeApi_pb2.HealthCheckRequest.Producer else "consumer"
    )
    return Handle(kind, int(req.id))


def _namespace(req: Any) -> Target:
    return Resource.namespace(req.name)


def _list_topics(req: Any) -> Target:
    return Resource.namespace(req.namespace) if req.namespace else CLUSTER


def _broker(req: Any) -> Target:
    return Resource.broker(req.broker_id)


_P = Permission
_API = "/danube."
_ADMIN = "/danube.admin.v1."
_SCHEMA = "/danube_schema.SchemaRegistry/"

RULES: dict[str, Rule] = {
    # ---- data plane (DanubeApi.proto)
    f"{_API}ProducerService/CreateProducer": Rule(_P.PRODUCE, _topic("topic_name"), "topic_name"),
    f"{_API}ProducerService/SendMessage": Rule(_P.PRODUCE, _send_message, "msg_id.producer_id's topic"),
    f"{_API}ProducerService/PublishBatches": Rule(
        _P.PRODUCE, _producer("producer_id"), "producer_id's topic"
    ),
    f"{_API}ProducerService/PublishMux": Rule(_P.PRODUCE, _publish_mux, "each batch's producer_id's topic"),
    f"{_API}ProducerService/CloseProducer": Rule(_P.PRODUCE, _producer("producer_id"), "producer_id's topic"),
    f"{_API}ConsumerService/Subscribe": Rule(_P.CONSUME, _topic("topic_name"), "topic_name"),
    f"{_API}ConsumerService/ReceiveMessages": Rule(_P.CONSUME, _consumer, "consumer_id's topic"),
    f"{_API}ConsumerService/Ack": Rule(_P.CONSUME, _msg_topic, "msg_id.topic_name"),
    f"{_API}ConsumerService/Nack": Rule(_P.CONSUME, _msg_topic, "msg_id.topic_name"),
    f"{_API}ConsumerService/ReceiveBatches": Rule(_P.CONSUME, _consumer, "consumer_id's topic"),
    f"{_API}ConsumerService/AckBatch": Rule(_P.CONSUME, _ack_batch, "topic_name, else consumer_id's topic"),
    f"{_API}ConsumerService/CloseConsumer": Rule(_P.CONSUME, _consumer, "consumer_id's topic"),
    f"{_API}ConsumerService/Seek": Rule(_P.CONSUME, _consumer, "consumer_id's topic"),
    f"{_API}ConsumerService/ConsumeMux": Rule(_P.CONSUME, _consume_mux, "each named consumer_id's topic"),
    f"{_API}Discovery/TopicLookup": Rule(_P.LOOKUP, _topic("topic"), "topic"),
    f"{_API}Discovery/TopicPartitions": Rule(_P.LOOKUP, _topic("topic"), "topic"),
    f"{_API}Discovery/NamespaceTopics": Rule(_P.LOOKUP, _list_topics, "namespace"),
    f"{_API}HealthCheck/HealthCheck": Rule(_P.LOOKUP, _health, "the producer's / consumer's topic"),
    # ---- schema registry (SchemaRegistry.proto); subjects belong to the cluster
    f"{_SCHEMA}RegisterSchema": Rule(_P.MANAGE_SCHEMA, _cluster, "cluster"),
    f"{_SCHEMA}GetSchema": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_SCHEMA}GetLatestSchema": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_SCHEMA}ListVersions": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_SCHEMA}CheckCompatibility": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_SCHEMA}DeleteSchemaVersion": Rule(_P.MANAGE_SCHEMA, _cluster, "cluster"),
    f"{_SCHEMA}SetCompatibilityMode": Rule(_P.MANAGE_SCHEMA, _cluster, "cluster"),
    f"{_SCHEMA}ConfigureTopicSchema": Rule(_P.MANAGE_SCHEMA, _topic("topic_name"), "topic_name"),
    f"{_SCHEMA}UpdateTopicValidationPolicy": Rule(_P.MANAGE_SCHEMA, _topic("topic_name"), "topic_name"),
    f"{_SCHEMA}GetTopicSchemaConfig": Rule(_P.LOOKUP, _topic("topic_name"), "topic_name"),
    f"{_SCHEMA}ListSubjects": Rule(_P.LOOKUP, _cluster, "cluster"),
    # ---- admin (DanubeAdmin.proto)
    f"{_ADMIN}BrokerAdmin/ListBrokers": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_ADMIN}BrokerAdmin/SetBrokerState": Rule(_P.MANAGE_BROKER, _broker, "broker_id (resolves to cluster)"),
    f"{_ADMIN}ClusterAdmin/ListLeaders": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_ADMIN}ClusterAdmin/GetLoadReport": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_ADMIN}ClusterAdmin/RequestRebalance": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}ClusterAdmin/ListPlans": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_ADMIN}ClusterAdmin/ApplyPlan": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}ClusterAdmin/SetTopicPinned": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}NamespaceAdmin/ListNamespaces": Rule(_P.LOOKUP, _cluster, "cluster"),
    f"{_ADMIN}NamespaceAdmin/CreateNamespace": Rule(_P.MANAGE_NAMESPACE, _namespace, "name"),
    f"{_ADMIN}NamespaceAdmin/DeleteNamespace": Rule(_P.MANAGE_NAMESPACE, _namespace, "name"),
    f"{_ADMIN}NamespaceAdmin/GetNamespacePolicies": Rule(_P.LOOKUP, _namespace, "name"),
    # Quotas bind the namespace's own users: only a cluster administrator may change them.
    f"{_ADMIN}NamespaceAdmin/SetNamespacePolicies": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}TopicAdmin/ListTopics": Rule(_P.LOOKUP, _list_topics, "namespace, else cluster"),
    f"{_ADMIN}TopicAdmin/CreateTopic": Rule(_P.MANAGE_TOPIC, _topic("name"), "name"),
    f"{_ADMIN}TopicAdmin/DeleteTopic": Rule(_P.MANAGE_TOPIC, _topic("name"), "name"),
    f"{_ADMIN}TopicAdmin/DescribeTopic": Rule(_P.LOOKUP, _topic("name"), "name"),
    f"{_ADMIN}TopicAdmin/GetTopicStats": Rule(_P.LOOKUP, _topic("name"), "name"),
    f"{_ADMIN}TopicAdmin/SetSubscriptionPolicy": Rule(_P.MANAGE_TOPIC, _topic("topic"), "topic"),
    f"{_ADMIN}TopicAdmin/GetSubscriptionPolicy": Rule(_P.LOOKUP, _topic("topic"), "topic"),
    f"{_ADMIN}TopicAdmin/MoveTopic": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}TopicAdmin/ForceTakeover": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}TopicAdmin/GetTopicPolicies": Rule(_P.LOOKUP, _topic("name"), "name"),
    # As for a namespace's: a topic's own users may not lift their limits.
    f"{_ADMIN}TopicAdmin/SetTopicPolicies": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    # Rewrites what read_compacted readers see below the horizon: a write to the topic.
    f"{_ADMIN}TopicAdmin/CompactTopic": Rule(_P.MANAGE_TOPIC, _topic("name"), "name"),
    # Roles and bindings decide who may do everything else: reading them is as sensitive as
    # changing them, so every call needs manage_cluster.
    f"{_ADMIN}SecurityAdmin/ListRoles": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}SecurityAdmin/GetRole": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}SecurityAdmin/CreateRole": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}SecurityAdmin/UpdateRole": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}SecurityAdmin/DeleteRole": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}SecurityAdmin/ListBindings": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}SecurityAdmin/GetBinding": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}SecurityAdmin/CreateBinding": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    f"{_ADMIN}SecurityAdmin/DeleteBinding": Rule(_P.MANAGE_CLUSTER, _cluster, "cluster"),
    # Served by brokers, called by the lookup service when it forwards stats (and compaction)
    # requests.
    f"{_ADMIN}BrokerStatsService/GetTopicStats": Rule(_P.CLUSTER_INTERNAL, _cluster, "cluster"),
    f"{_ADMIN}BrokerStatsService/GetBrokerStats": Rule(_P.CLUSTER_INTERNAL, _cluster, "cluster"),
    # The owner's side of TopicAdmin/CompactTopic, called by the lookup service that forwards it.
    f"{_ADMIN}BrokerStatsService/CompactTopic": Rule(_P.CLUSTER_INTERNAL, _cluster, "cluster"),
    # ---- control plane (DanubeLeader, DanubeLoadManager, DanubeWalUploader .proto)
    "/danube.leader.v1.LeaderElection/Campaign": Rule(_P.CLUSTER_INTERNAL, _cluster, "cluster"),
    "/danube.leader.v1.LeaderElection/GetLeader": Rule(_P.LOOKUP, _cluster, "cluster"),
    "/danube.leader.v1.LeaderElection/ListLeaders": Rule(_P.LOOKUP, _cluster, "cluster"),
    "/danube.leader.v1.LeaderElection/WatchLeader": Rule(_P.LOOKUP, _cluster, "cluster"),
    "/danube.loadmanager.v1.LoadManagerStatus/GetStatus": Rule(_P.LOOKUP, _cluster, "cluster"),
    "/danube.uploader.v1.WalUploader/Flush": Rule(_P.CLUSTER_INTERNAL, _cluster, "cluster"),
    "/danube.uploader.v1.WalUploader/Status": Rule(_P.LOOKUP, _cluster, "cluster"),
}


def all_methods() -> Iterator[str]:
    """The full name of every RPC of every service in :data:`PB_MODULES`."""
    for module in PB_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                yield f"/{service.full_name}/{method.name}"
