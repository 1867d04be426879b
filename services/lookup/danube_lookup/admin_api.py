"""The admin API (package ``danube.admin.v1``) on the admin port: protobuf <-> Catalog only.

Errors are raised as DanubeError; the server's interceptor maps them to gRPC status codes.
GetTopicStats and CompactTopic are forwarded to the owning broker (:mod:`danube_lookup.broker_stats`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import grpc.aio

from danube_common.errors import InvalidArgument
from danube_common.namespace_policies import NamespacePolicies
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.policies import SubscriptionPolicyRecord
from danube_lookup.broker_stats import BrokerStatsClient
from danube_lookup.catalog import BrokerView, Catalog, TopicView

_POLICY_FIELDS = tuple(f.name for f in dataclasses.fields(SubscriptionPolicyRecord))


def topic_info(view: TopicView) -> apb.TopicInfo:
    return apb.TopicInfo(
        name=view.name,
        dispatch_strategy=view.dispatch_strategy,
        partitions=view.partitions,
        broker_id=view.broker_id,
        partition_topics=[topic_info(p) for p in view.partition_topics],
        subscriptions=list(view.subscriptions),
        created_at_ms=view.created_at_ms,
        durability=view.durability,
        retention_time_s=view.retention_time_s,
        retention_size_bytes=view.retention_size_bytes,
        compaction_threshold_bytes=view.compaction_threshold_bytes,
    )


def policy_record(msg: apb.SubscriptionPolicy) -> SubscriptionPolicyRecord:
    """The fields set in ``msg`` (explicit presence); an unset one stays None (broker default)."""
    return SubscriptionPolicyRecord(
        **{name: getattr(msg, name) for name in _POLICY_FIELDS if msg.HasField(name)}
    )


def policy_message(rec: SubscriptionPolicyRecord) -> apb.SubscriptionPolicy:
    """Only the fields set in ``rec``; the others stay unset (HasField is False)."""
    return apb.SubscriptionPolicy(**rec.to_json())


class BrokerAdminApi(apb_grpc.BrokerAdminServicer):
    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    async def ListBrokers(
        self, request: apb.ListBrokersRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListBrokersResponse:
        return apb.ListBrokersResponse(brokers=[broker_info(b) for b in await self._catalog.list_brokers()])

    async def SetBrokerState(
        self, request: apb.SetBrokerStateRequest, context: grpc.aio.ServicerContext
    ) -> apb.BrokerInfo:
        return broker_info(await self._catalog.set_broker_state(request.broker_id, request.state))


def broker_info(b: BrokerView) -> apb.BrokerInfo:
    info = apb.BrokerInfo(
        broker_id=b.record.broker_id,
        broker_addr=b.record.broker_addr,
        advertised_url=b.record.advertised_url,
        state=b.state,
        topic_count=b.topic_count,
        registered_at_ms=b.record.registered_at_ms,
        admin_state=b.admin_state,
    )
    if b.load is not None:
        r = b.load
        info.has_load = True
        info.load_at_ms = r.at_ms
        info.cpu_usage = r.cpu_usage
        info.cpu_cores = r.cpu_cores
        info.mem_rss_bytes = r.mem_rss_bytes
        info.msg_rate_in = r.msg_rate_in
        info.msg_rate_out = r.msg_rate_out
        info.byte_rate_in = r.byte_rate_in
        info.byte_rate_out = r.byte_rate_out
        info.backlog = r.backlog
        info.producers = r.producers
        info.consumers = r.consumers
    return info


def json_document(key: str, doc: object) -> apb.JsonDocument:
    return apb.JsonDocument(key=key, json=json.dumps(doc, sort_keys=True))


class ClusterAdminApi(apb_grpc.ClusterAdminServicer):
    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    async def GetLoadReport(
        self, request: apb.GetLoadReportRequest, context: grpc.aio.ServicerContext
    ) -> apb.JsonDocument:
        return json_document(*await self._catalog.load_report())

    async def RequestRebalance(
        self, request: apb.RequestRebalanceRequest, context: grpc.aio.ServicerContext
    ) -> apb.RequestRebalanceResponse:
        return apb.RequestRebalanceResponse(
            request_id=await self._catalog.request_rebalance(dry_run=request.dry_run)
        )

    async def ListPlans(
        self, request: apb.ListPlansRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListPlansResponse:
        plans, pending = await self._catalog.list_plans(request.limit)
        return apb.ListPlansResponse(plans=[json_document(k, d) for k, d in plans], pending_requests=pending)

    async def ApplyPlan(
        self, request: apb.ApplyPlanRequest, context: grpc.aio.ServicerContext
    ) -> apb.JsonDocument:
        return json_document(*await self._catalog.apply_plan(request.plan_id))

    async def SetTopicPinned(
        self, request: apb.SetTopicPinnedRequest, context: grpc.aio.ServicerContext
    ) -> apb.SetTopicPinnedResponse:
        await self._catalog.set_pinned(request.name, request.pinned)
        return apb.SetTopicPinnedResponse(name=request.name, pinned=request.pinned)

    async def ListLeaders(
        self, request: apb.ListLeadersRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListLeadersResponse:
        return apb.ListLeadersResponse(
            leaders=[
                apb.LeaderInfo(
                    role=li.role, candidate_id=li.candidate_id, term=li.term, metadata=dict(li.metadata)
                )
                for li in await self._catalog.list_leaders()
            ]
        )


class NamespaceAdminApi(apb_grpc.NamespaceAdminServicer):
    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    async def ListNamespaces(
        self, request: apb.ListNamespacesRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListNamespacesResponse:
        return apb.ListNamespacesResponse(namespaces=await self._catalog.list_namespaces())

    async def CreateNamespace(
        self, request: apb.NamespaceRequest, context: grpc.aio.ServicerContext
    ) -> apb.NamespaceResponse:
        return apb.NamespaceResponse(name=await self._catalog.create_namespace(request.name))

    async def DeleteNamespace(
        self, request: apb.NamespaceRequest, context: grpc.aio.ServicerContext
    ) -> apb.NamespaceResponse:
        return apb.NamespaceResponse(name=await self._catalog.delete_namespace(request.name))

    async def GetNamespacePolicies(
        self, request: apb.NamespaceRequest, context: grpc.aio.ServicerContext
    ) -> apb.NamespacePoliciesResponse:
        policies = await self._catalog.get_namespace_policies(request.name)
        return apb.NamespacePoliciesResponse(name=request.name, policies=namespace_policies_message(policies))

    async def SetNamespacePolicies(
        self, request: apb.SetNamespacePoliciesRequest, context: grpc.aio.ServicerContext
    ) -> apb.NamespacePoliciesResponse:
        policies = await self._catalog.set_namespace_policies(
            request.name, namespace_policy_changes(request.policies), list(request.clear)
        )
        return apb.NamespacePoliciesResponse(name=request.name, policies=namespace_policies_message(policies))


def namespace_policy_changes(msg: apb.NamespacePolicies) -> dict[str, Any]:
    """The fields present in ``msg`` (proto3 ``optional``: absent = not given)."""
    return {f.name: value for f, value in msg.ListFields()}


def namespace_policies_message(p: NamespacePolicies) -> apb.NamespacePolicies:
    return apb.NamespacePolicies(**p.to_json())


class TopicAdminApi(apb_grpc.TopicAdminServicer):
    def __init__(self, catalog: Catalog, stats: BrokerStatsClient) -> None:
        self._catalog = catalog
        self._stats = stats

    async def ListTopics(
        self, request: apb.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListTopicsResponse:
        views = await self._catalog.list_topics(request.namespace)
        return apb.ListTopicsResponse(topics=[topic_info(v) for v in views])

    async def CreateTopic(
        self, request: apb.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> apb.CreateTopicResponse:
        view = await self._catalog.create_topic(
            request.name,
            partitions=request.partitions,
            dispatch_strategy=request.dispatch_strategy,
            durability=request.durability,
            retention_time_s=request.retention_time_s,
            retention_size_bytes=request.retention_size_bytes,
            unclean_takeover_after_s=request.unclean_takeover_after_s,
        )
        return apb.CreateTopicResponse(topic=topic_info(view))

    async def DeleteTopic(
        self, request: apb.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> apb.DeleteTopicResponse:
        return apb.DeleteTopicResponse(deleted=await self._catalog.delete_topic(request.name))

    async def DescribeTopic(
        self, request: apb.DescribeTopicRequest, context: grpc.aio.ServicerContext
    ) -> apb.TopicInfo:
        return topic_info(await self._catalog.describe_topic(request.name))

    async def GetTopicStats(
        self, request: apb.TopicStatsRequest, context: grpc.aio.ServicerContext
    ) -> apb.TopicStats:
        return await self._stats.topic_stats(request.name)

    async def CompactTopic(
        self, request: apb.CompactTopicRequest, context: grpc.aio.ServicerContext
    ) -> apb.CompactionInfo:
        return await self._stats.compact_topic(request.name)

    async def SetSubscriptionPolicy(
        self, request: apb.SetSubscriptionPolicyRequest, context: grpc.aio.ServicerContext
    ) -> apb.SubscriptionPolicyResponse:
        """Replace the stored policy with exactly the fields given; a field not given uses the
        owning broker's default (nothing is kept from an earlier policy)."""
        if not request.HasField("policy"):
            raise InvalidArgument(
                "policy is required: set at least one of its fields (fields not set use the broker's defaults)"
            )
        stored = await self._catalog.set_subscription_policy(
            request.topic, request.subscription, policy_record(request.policy)
        )
        return apb.SubscriptionPolicyResponse(
            topic=request.topic, subscription=request.subscription, policy=policy_message(stored)
        )

    async def GetSubscriptionPolicy(
        self, request: apb.GetSubscriptionPolicyRequest, context: grpc.aio.ServicerContext
    ) -> apb.SubscriptionPolicyResponse:
        """No ``policy`` in the answer: none was set, the owning broker's defaults apply."""
        stored = await self._catalog.get_subscription_policy(request.topic, request.subscription)
        resp = apb.SubscriptionPolicyResponse(topic=request.topic, subscription=request.subscription)
        if stored is not None:
            resp.policy.CopyFrom(policy_message(stored))
        return resp

    async def MoveTopic(
        self, request: apb.MoveTopicRequest, context: grpc.aio.ServicerContext
    ) -> apb.MoveTopicResponse:
        origin, target = await self._catalog.move_topic(request.name, request.to_broker)
        return apb.MoveTopicResponse(name=request.name, from_broker=origin, to_broker=target)

    async def ForceTakeover(
        self, request: apb.ForceTakeoverRequest, context: grpc.aio.ServicerContext
    ) -> apb.ForceTakeoverResponse:
        closed, gap = await self._catalog.force_takeover(
            request.name, accept_loss=request.accept_loss, reason=request.reason
        )
        lost = (
            [
                apb.AcceptedGap(
                    start_offset=gap.start_offset,
                    next_offset=gap.next_offset,
                    reason=gap.reason,
                    decided_by=gap.decided_by,
                    at_ms=gap.at_ms,
                    writer=gap.writer,
                )
            ]
            if gap is not None
            else []
        )
        return apb.ForceTakeoverResponse(
            name=request.name, writer=closed.writer, next_offset=closed.next_offset or 0, lost=lost
        )

    async def GetTopicPolicies(
        self, request: apb.DescribeTopicRequest, context: grpc.aio.ServicerContext
    ) -> apb.TopicPoliciesResponse:
        own, effective = await self._catalog.get_topic_policies(request.name)
        return topic_policies_response(request.name, own, effective)

    async def SetTopicPolicies(
        self, request: apb.SetTopicPoliciesRequest, context: grpc.aio.ServicerContext
    ) -> apb.TopicPoliciesResponse:
        own, effective = await self._catalog.set_topic_policies(
            request.name, namespace_policy_changes(request.policies), list(request.clear)
        )
        return topic_policies_response(request.name, own, effective)


def topic_policies_response(
    name: str, own: NamespacePolicies, effective: NamespacePolicies
) -> apb.TopicPoliciesResponse:
    return apb.TopicPoliciesResponse(
        name=name, own=namespace_policies_message(own), effective=namespace_policies_message(effective)
    )
