"""The request each RPC is probed with by the auth table test (tests/integration/
test_auth_every_rpc.py): one that names a valid resource for the RPC's rule, and that changes
nothing worth keeping when a permitted caller sends it (deletes, moves, pins and takeovers name
things that do not exist; Close* calls close handles made for them).

An RPC without an entry in :data:`REQUESTS` is probed with its empty request message; a unit
check in that test fails when an empty request names no valid resource for the rule.
"""

from __future__ import annotations

import inspect
import itertools
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from google.protobuf.message import Message

from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeLeader_pb2 as lpb
from danube_common.pb import DanubeWalUploader_pb2 as upb
from danube_common.pb import SchemaRegistry_pb2 as spb
from tests.support import unique
from tests.support.grpc_probe import Rpc

#: The election role the probes campaign for and watch (nobody else uses it).
PROBE_ROLE = "authz-probe"


async def _no_handle() -> int:
    return 0


@dataclass
class Env:
    """What the requests name. Planned before the servers start (the RBAC bindings are written
    first, so every server loads them at start-up); the ids are filled in once the broker runs."""

    #: The topic the live producer and consumer are attached to.
    topic: str
    subscription: str
    #: CreateTopic / CreateNamespace make these; the "missing" ones never exist (so deletes,
    #: moves, takeovers and pins of the permitted calls find nothing and change nothing).
    new_topic: str
    missing_topic: str
    new_namespace: str
    missing_namespace: str
    producer_id: int = 0
    consumer_id: int = 0
    #: Fresh handles, for the Close* calls (a permitted close must not end the shared ones).
    new_producer: Callable[[], Awaitable[int]] = _no_handle
    new_consumer: Callable[[], Awaitable[int]] = _no_handle

    @classmethod
    def plan(cls) -> Env:
        tag = secrets.token_hex(4)
        return cls(
            topic=f"/default/authz-{tag}",
            subscription=f"authz-sub-{tag}",
            new_topic=f"/default/authz-new-{tag}",
            missing_topic=f"/default/authz-missing-{tag}",
            new_namespace=f"authz-ns-{tag}",
            missing_namespace=f"authz-gone-{tag}",
        )


_seq = itertools.count(1)


def next_request_id() -> int:
    return next(_seq)


Builder = Callable[[Env], Message | Awaitable[Message]]


def _stream_message(e: Env) -> pb.StreamMessage:
    return pb.StreamMessage(
        request_id=next(_seq),
        msg_id=pb.MsgID(producer_id=e.producer_id, topic_name=e.topic),
        payload=b"probe",
        producer_name="authz-probe",
    )


def subscribe_request(topic: str, subscription: str) -> pb.ConsumerRequest:
    return pb.ConsumerRequest(
        request_id=next(_seq),
        topic_name=topic,
        consumer_name=unique("c"),
        subscription=subscription,
        subscription_type=pb.ConsumerRequest.Shared,
    )


async def _close_producer(e: Env) -> pb.CloseProducerRequest:
    return pb.CloseProducerRequest(request_id=next(_seq), producer_id=await e.new_producer())


async def _close_consumer(e: Env) -> pb.CloseConsumerRequest:
    return pb.CloseConsumerRequest(request_id=next(_seq), consumer_id=await e.new_consumer())


_API, _ADMIN, _SCHEMA = "/danube.", "/danube.admin.v1.", "/danube_schema.SchemaRegistry/"
NO_SUBJECT = "authz-no-such-subject"
#: The request of each RPC whose rule needs a resource from it, or whose empty request would
#: change something; every other RPC gets its empty request message.
REQUESTS: dict[str, Builder] = {
    f"{_API}ProducerService/CreateProducer": lambda e: pb.ProducerRequest(
        request_id=next(_seq), producer_name=unique("p"), topic_name=e.topic
    ),
    f"{_API}ProducerService/SendMessage": _stream_message,
    f"{_API}ProducerService/PublishBatches": lambda e: pb.PublishBatch(
        producer_id=e.producer_id, batch_seq=next(_seq), messages=[_stream_message(e)]
    ),
    f"{_API}ProducerService/PublishMux": lambda e: pb.PublishMuxRequest(
        batches=[
            pb.PublishBatch(
                producer_id=e.producer_id, batch_seq=next(_seq), session=1, messages=[_stream_message(e)]
            )
        ]
    ),
    f"{_API}ProducerService/CloseProducer": _close_producer,
    f"{_API}ConsumerService/Subscribe": lambda e: subscribe_request(e.topic, unique("s")),
    f"{_API}ConsumerService/ReceiveMessages": lambda e: pb.ReceiveRequest(
        request_id=next(_seq), consumer_id=e.consumer_id
    ),
    f"{_API}ConsumerService/Ack": lambda e: pb.AckRequest(
        request_id=next(_seq), msg_id=pb.MsgID(topic_name=e.topic), subscription_name=e.subscription
    ),
    f"{_API}ConsumerService/Nack": lambda e: pb.NackRequest(
        request_id=next(_seq), msg_id=pb.MsgID(topic_name=e.topic), subscription_name=e.subscription
    ),
    f"{_API}ConsumerService/ReceiveBatches": lambda e: pb.ReceiveBatchRequest(
        request_id=next(_seq), consumer_id=e.consumer_id
    ),
    f"{_API}ConsumerService/AckBatch": lambda e: pb.AckBatchRequest(
        request_id=next(_seq),
        consumer_id=e.consumer_id,
        topic_name=e.topic,
        subscription_name=e.subscription,
        topic_offsets=[0],
    ),
    f"{_API}ConsumerService/ConsumeMux": lambda e: pb.ConsumeMuxRequest(
        attach=[pb.MuxAttach(consumer_id=e.consumer_id, credits=1)]
    ),
    f"{_API}ConsumerService/CloseConsumer": _close_consumer,
    f"{_API}ConsumerService/Seek": lambda e: pb.SeekRequest(
        request_id=next(_seq), consumer_id=e.consumer_id, offset=0
    ),
    f"{_API}Discovery/TopicLookup": lambda e: pb.TopicLookupRequest(request_id=next(_seq), topic=e.topic),
    f"{_API}Discovery/TopicPartitions": lambda e: pb.TopicLookupRequest(request_id=next(_seq), topic=e.topic),
    f"{_API}Discovery/NamespaceTopics": lambda e: pb.NamespaceTopicsRequest(
        request_id=next(_seq), namespace="default"
    ),
    f"{_API}HealthCheck/HealthCheck": lambda e: pb.HealthCheckRequest(
        request_id=next(_seq), client=pb.HealthCheckRequest.Producer, id=e.producer_id
    ),
    f"{_SCHEMA}ConfigureTopicSchema": lambda e: spb.ConfigureTopicSchemaRequest(
        topic_name=e.topic, schema_subject=NO_SUBJECT, validation_policy="none"
    ),
    f"{_SCHEMA}UpdateTopicValidationPolicy": lambda e: spb.UpdateTopicValidationPolicyRequest(
        topic_name=e.topic, validation_policy="none"
    ),
    f"{_SCHEMA}GetTopicSchemaConfig": lambda e: spb.GetTopicSchemaConfigRequest(topic_name=e.topic),
    f"{_SCHEMA}GetLatestSchema": lambda e: spb.GetLatestSchemaRequest(subject=NO_SUBJECT),
    f"{_SCHEMA}ListVersions": lambda e: spb.ListVersionsRequest(subject=NO_SUBJECT),
    f"{_SCHEMA}CheckCompatibility": lambda e: spb.CheckCompatibilityRequest(
        subject=NO_SUBJECT, new_schema_definition=b'{"type": "string"}', schema_type="json_schema"
    ),
    f"{_SCHEMA}SetCompatibilityMode": lambda e: spb.SetCompatibilityModeRequest(
        subject=NO_SUBJECT, compatibility_mode="backward"
    ),
    f"{_SCHEMA}DeleteSchemaVersion": lambda e: spb.DeleteSchemaVersionRequest(subject=NO_SUBJECT, version=1),
    f"{_ADMIN}BrokerAdmin/SetBrokerState": lambda e: apb.SetBrokerStateRequest(
        broker_id="no-such-broker", state="draining"
    ),
    f"{_ADMIN}ClusterAdmin/RequestRebalance": lambda e: apb.RequestRebalanceRequest(dry_run=True),
    f"{_ADMIN}ClusterAdmin/ApplyPlan": lambda e: apb.ApplyPlanRequest(plan_id="no-such-plan"),
    f"{_ADMIN}ClusterAdmin/SetTopicPinned": lambda e: apb.SetTopicPinnedRequest(
        name=e.missing_topic, pinned=True
    ),
    f"{_ADMIN}NamespaceAdmin/CreateNamespace": lambda e: apb.NamespaceRequest(name=e.new_namespace),
    f"{_ADMIN}NamespaceAdmin/DeleteNamespace": lambda e: apb.NamespaceRequest(name=e.missing_namespace),
    f"{_ADMIN}NamespaceAdmin/GetNamespacePolicies": lambda e: apb.NamespaceRequest(name="default"),
    f"{_ADMIN}NamespaceAdmin/SetNamespacePolicies": lambda e: apb.SetNamespacePoliciesRequest(
        name=e.missing_namespace, policies=apb.NamespacePolicies(max_topics=5)
    ),
    f"{_ADMIN}TopicAdmin/ListTopics": lambda e: apb.ListTopicsRequest(namespace="default"),
    f"{_ADMIN}TopicAdmin/CreateTopic": lambda e: apb.CreateTopicRequest(name=e.new_topic),
    f"{_ADMIN}TopicAdmin/DeleteTopic": lambda e: apb.DeleteTopicRequest(name=e.missing_topic),
    f"{_ADMIN}TopicAdmin/DescribeTopic": lambda e: apb.DescribeTopicRequest(name=e.topic),
    f"{_ADMIN}TopicAdmin/GetTopicStats": lambda e: apb.TopicStatsRequest(name=e.topic),
    f"{_ADMIN}TopicAdmin/SetSubscriptionPolicy": lambda e: apb.SetSubscriptionPolicyRequest(
        topic=e.topic,
        subscription="authz-no-such-subscription",
        policy=apb.SubscriptionPolicy(max_redeliveries=3),
    ),
    f"{_ADMIN}TopicAdmin/GetSubscriptionPolicy": lambda e: apb.GetSubscriptionPolicyRequest(
        topic=e.topic, subscription="authz-no-such-subscription"
    ),
    f"{_ADMIN}TopicAdmin/MoveTopic": lambda e: apb.MoveTopicRequest(name=e.missing_topic),
    f"{_ADMIN}TopicAdmin/GetTopicPolicies": lambda e: apb.DescribeTopicRequest(name=e.topic),
    f"{_ADMIN}TopicAdmin/SetTopicPolicies": lambda e: apb.SetTopicPoliciesRequest(
        name=e.missing_topic, policies=apb.NamespacePolicies(max_producers_per_topic=5)
    ),
    f"{_ADMIN}TopicAdmin/ForceTakeover": lambda e: apb.ForceTakeoverRequest(
        name=e.missing_topic, reason="authz probe"
    ),
    f"{_ADMIN}TopicAdmin/CompactTopic": lambda e: apb.CompactTopicRequest(name=e.topic),
    f"{_ADMIN}BrokerStatsService/GetTopicStats": lambda e: apb.TopicStatsRequest(name=e.topic),
    # The probe topic is non_reliable: a permitted compaction is refused (FAILED_PRECONDITION).
    f"{_ADMIN}BrokerStatsService/CompactTopic": lambda e: apb.CompactTopicRequest(name=e.topic),
    # A campaign for a role nobody else uses: won at once, resigned when the probe cancels.
    "/danube.leader.v1.LeaderElection/Campaign": lambda e: lpb.CampaignRequest(
        role=PROBE_ROLE, candidate_id="authz-probe", ttl_s=5
    ),
    "/danube.leader.v1.LeaderElection/GetLeader": lambda e: lpb.GetLeaderRequest(role=PROBE_ROLE),
    "/danube.leader.v1.LeaderElection/WatchLeader": lambda e: lpb.WatchLeaderRequest(role=PROBE_ROLE),
    "/danube.uploader.v1.WalUploader/Flush": lambda e: upb.FlushRequest(all_topics=True),
}


async def build_request(rpc: Rpc, env: Env) -> Message:
    builder = REQUESTS.get(rpc.path)
    if builder is None:
        return rpc.request_type()
    made = builder(env)
    return await made if inspect.isawaitable(made) else made
