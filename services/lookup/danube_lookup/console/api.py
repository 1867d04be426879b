"""The console's JSON API: one method per ``/api/...`` route, each one call to this lookup's
own admin API (package ``danube.admin.v1``) with the browser's bearer token as metadata.

Authentication, RBAC, tracing and the errors are therefore exactly the admin API's: a refused
call raises the same ``DanubeError`` ``danube-admin`` would get, and
:mod:`danube_lookup.console.server` turns it into an HTTP answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio

from danube_common.errors import MD_ERROR_CODE, Unavailable, error_from_rpc
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_lookup.console.mapping import bearer_metadata, document_json, message_json

Resp = TypeVar("Resp")
#: A unary admin stub method: ``await method(request, timeout=..., metadata=...)``.
Method = Callable[..., Awaitable[Resp]]


@dataclass(frozen=True, slots=True)
class AdminStubs:
    """The admin services the console calls (fakes in unit tests)."""

    brokers: apb_grpc.BrokerAdminStub
    cluster: apb_grpc.ClusterAdminStub
    namespaces: apb_grpc.NamespaceAdminStub
    topics: apb_grpc.TopicAdminStub

    @classmethod
    def on(cls, channel: grpc.aio.Channel) -> AdminStubs:
        return cls(
            apb_grpc.BrokerAdminStub(channel),
            apb_grpc.ClusterAdminStub(channel),
            apb_grpc.NamespaceAdminStub(channel),
            apb_grpc.TopicAdminStub(channel),
        )


def _has_danube_code(exc: grpc.aio.AioRpcError) -> bool:
    return any(item[0] == MD_ERROR_CODE for item in exc.trailing_metadata() or ())


class ConsoleApi:
    """``authorization`` in every method is the browser's ``Authorization`` header (None:
    none sent); each call has the deadline ``timeout_s``."""

    def __init__(self, stubs: AdminStubs, *, timeout_s: float, target: str = "the admin port") -> None:
        self._s = stubs
        self.timeout_s = timeout_s
        #: Where the admin API is dialed (for error messages).
        self.target = target

    async def _call(self, method: Method[Resp], request: Any, authorization: str | None) -> Resp:
        try:
            return await method(request, timeout=self.timeout_s, metadata=bearer_metadata(authorization))
        except grpc.aio.AioRpcError as exc:
            err = error_from_rpc(exc)
            if not _has_danube_code(exc) and exc.code() == grpc.StatusCode.UNAVAILABLE:
                # No answer from the admin server itself: it could not be reached.
                raise Unavailable(
                    f"the console cannot reach this lookup's admin API at {self.target}: {exc.details()}. "
                    "With tls.require_client_cert the admin port takes no browser traffic: the console "
                    "presents no client certificate"
                ) from exc
            raise err from exc

    # ------------------------------------------------------------------ brokers and leaders
    async def brokers(self, authorization: str | None) -> dict[str, Any]:
        resp = await self._call(self._s.brokers.ListBrokers, apb.ListBrokersRequest(), authorization)
        return message_json(resp)

    async def set_broker_state(self, authorization: str | None, broker_id: str, state: str) -> dict[str, Any]:
        req = apb.SetBrokerStateRequest(broker_id=broker_id, state=state)
        return message_json(await self._call(self._s.brokers.SetBrokerState, req, authorization))

    async def leaders(self, authorization: str | None) -> dict[str, Any]:
        resp = await self._call(self._s.cluster.ListLeaders, apb.ListLeadersRequest(), authorization)
        return message_json(resp)

    # ------------------------------------------------------------------ namespaces and topics
    async def namespaces(self, authorization: str | None) -> dict[str, Any]:
        req = apb.ListNamespacesRequest()
        return message_json(await self._call(self._s.namespaces.ListNamespaces, req, authorization))

    async def topics(self, authorization: str | None, namespace: str = "") -> dict[str, Any]:
        req = apb.ListTopicsRequest(namespace=namespace)
        return message_json(await self._call(self._s.topics.ListTopics, req, authorization))

    async def topic(self, authorization: str | None, name: str) -> dict[str, Any]:
        req = apb.DescribeTopicRequest(name=name)
        return message_json(await self._call(self._s.topics.DescribeTopic, req, authorization))

    async def topic_stats(self, authorization: str | None, name: str) -> dict[str, Any]:
        req = apb.TopicStatsRequest(name=name)
        return message_json(await self._call(self._s.topics.GetTopicStats, req, authorization))

    async def move_topic(self, authorization: str | None, name: str, to_broker: str) -> dict[str, Any]:
        req = apb.MoveTopicRequest(name=name, to_broker=to_broker)
        return message_json(await self._call(self._s.topics.MoveTopic, req, authorization))

    # ------------------------------------------------------------------ the planner
    async def load_report(self, authorization: str | None) -> dict[str, Any]:
        doc = await self._call(self._s.cluster.GetLoadReport, apb.GetLoadReportRequest(), authorization)
        return document_json(doc, "report")

    async def plans(self, authorization: str | None, limit: int) -> dict[str, Any]:
        req = apb.ListPlansRequest(limit=limit)
        resp = await self._call(self._s.cluster.ListPlans, req, authorization)
        return {
            "plans": [document_json(d, "plan") for d in resp.plans],
            "pending_requests": list(resp.pending_requests),
        }

    async def apply_plan(self, authorization: str | None, plan_id: str) -> dict[str, Any]:
        req = apb.ApplyPlanRequest(plan_id=plan_id)
        return document_json(await self._call(self._s.cluster.ApplyPlan, req, authorization), "plan")

    async def request_rebalance(self, authorization: str | None, *, dry_run: bool) -> dict[str, Any]:
        req = apb.RequestRebalanceRequest(dry_run=dry_run)
        return message_json(await self._call(self._s.cluster.RequestRebalance, req, authorization))
