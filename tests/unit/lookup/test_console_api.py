"""The web console's JSON API without a browser or sockets: errors to HTTP answers, protobufs to
JSON, each /api call to the admin call it makes (with the browser's token and a deadline), and
the packaged app's files."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from danube_common import errors
from danube_common.errors import MD_ERROR_CODE, DanubeError
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_lookup.console.api import AdminStubs, ConsoleApi
from danube_lookup.console.mapping import (
    admin_target,
    bearer_metadata,
    body_bool,
    body_string,
    error_json,
    http_status,
    message_json,
    query_limit,
)
from danube_lookup.console.server import load_assets

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.InvalidArgument, 400),
        (errors.InvalidTopicName, 400),
        (errors.Unauthenticated, 401),
        (errors.TokenExpired, 401),
        (errors.PermissionDenied, 403),
        (errors.NotFound, 404),
        (errors.TopicNotFound, 404),
        (errors.AlreadyExists, 409),
        (errors.FailedPrecondition, 409),
        (errors.NamespaceNotEmpty, 409),
        (errors.ResourceExhausted, 429),
        (errors.Unavailable, 503),
        (errors.NoBrokerAvailable, 503),
        (errors.TopicNotOwned, 503),
        (errors.Cancelled, 503),
        (errors.Timeout, 504),
        (errors.DataLoss, 500),
        (errors.Internal, 500),
    ],
)
def test_each_error_class_has_its_http_status(error: type[DanubeError], status: int) -> None:
    assert http_status(error("x")) == status


def test_every_error_in_the_catalogue_is_an_http_error() -> None:
    for cls in errors.ERRORS_BY_CODE.values():
        assert 400 <= http_status(cls("x")) <= 599, cls


def test_error_body_keeps_the_admin_apis_code_message_and_retry_hint() -> None:
    err = errors.TopicNotOwned(
        "topic /default/a is no longer served here; look it up again", redirect="http://b:1"
    )
    assert error_json(err) == {
        "error": {
            "code": "TOPIC_NOT_OWNED",
            "status": "UNAVAILABLE",
            "message": "topic /default/a is no longer served here; look it up again",
            "retryable": True,
            "redirect": "http://b:1",
        }
    }
    assert "redirect" not in error_json(errors.PermissionDenied("no"))["error"]


# ---------------------------------------------------------------- small translations
@pytest.mark.parametrize(
    ("header", "metadata"),
    [
        (None, ()),
        ("", ()),
        ("  ", ()),
        ("Bearer abc.def", (("authorization", "Bearer abc.def"),)),
        (" Bearer abc ", (("authorization", "Bearer abc"),)),
    ],
)
def test_the_browsers_authorization_header_becomes_the_calls_metadata(
    header: str | None, metadata: tuple[tuple[str, str], ...]
) -> None:
    assert bearer_metadata(header) == metadata


@pytest.mark.parametrize(
    ("listen", "target"),
    [
        ("0.0.0.0:50051", "127.0.0.1:4000"),
        ("127.0.0.1:0", "127.0.0.1:4000"),
        ("10.1.2.3:50051", "10.1.2.3:4000"),
        ("[::]:50051", "[::1]:4000"),
        ("[::1]:0", "[::1]:4000"),
        ("lookup.internal:50051", "lookup.internal:4000"),
    ],
)
def test_the_console_dials_the_admin_listeners_host_or_loopback(listen: str, target: str) -> None:
    assert admin_target(listen, 4000) == target


def test_message_json_gives_every_field_by_its_proto_name_with_numbers_as_numbers() -> None:
    info = apb.BrokerInfo(broker_id="1", topic_count=3, mem_rss_bytes=2**40, cpu_usage=0.5)
    out = message_json(info)
    assert out["broker_id"] == "1" and out["topic_count"] == 3
    assert out["mem_rss_bytes"] == 2**40  # uint64 stays a number (proto JSON would quote it)
    assert out["has_load"] is False and out["msg_rate_in"] == 0.0  # defaults present
    assert set(out) == {f.name for f in apb.BrokerInfo.DESCRIPTOR.fields}


def test_message_json_nests_repeated_messages_maps_and_unset_presence_as_null() -> None:
    parent = apb.TopicInfo(
        name="/default/p",
        partitions=2,
        partition_topics=[apb.TopicInfo(name="/default/p-part-0", broker_id="1")],
        subscriptions=["s1"],
    )
    out = message_json(parent)
    assert (
        out["partition_topics"][0]["broker_id"] == "1"
        and out["partition_topics"][0]["partition_topics"] == []
    )
    assert out["subscriptions"] == ["s1"]
    leaders = message_json(apb.LeaderInfo(role="load-manager", term=7, metadata={"addr": "h:1"}))
    assert leaders["metadata"] == {"addr": "h:1"} and leaders["term"] == 7
    policy = message_json(apb.SubscriptionPolicyResponse(topic="/default/t"))
    assert policy["policy"] is None
    set_once = message_json(apb.SubscriptionPolicy(max_redeliveries=0))
    assert set_once["max_redeliveries"] == 0 and set_once["ack_timeout_ms"] is None


def test_request_bodies_and_parameters_are_checked_with_what_is_allowed() -> None:
    assert body_string({"state": "draining"}, "state", allowed=("draining", "active")) == "draining"
    with pytest.raises(errors.InvalidArgument, match="state must be one of draining, active; got 'gone'"):
        body_string({"state": "gone"}, "state", allowed=("draining", "active"))
    with pytest.raises(errors.InvalidArgument, match="to_broker must be a string, got 3"):
        body_string({"to_broker": 3}, "to_broker")
    assert body_string({}, "to_broker") == ""
    assert body_bool({}, "dry_run", default=True) is True
    with pytest.raises(errors.InvalidArgument, match='dry_run must be true or false, got "yes"'):
        body_bool({"dry_run": "yes"}, "dry_run", default=True)
    assert query_limit(None, default=20, most=200) == 20
    assert query_limit("5", default=20, most=200) == 5
    for bad in ("0", "201", "x"):
        with pytest.raises(errors.InvalidArgument, match="limit must be a whole number from 1 to 200"):
            query_limit(bad, default=20, most=200)


# ---------------------------------------------------------------- the calls
class FakeService:
    """Stands for one admin stub: each method records (name, request, timeout, metadata) and
    answers from ``answers`` (a message, or an exception to raise)."""

    def __init__(self, calls: list[tuple[str, Any, float, Any]], answers: dict[str, Any]) -> None:
        self._calls = calls
        self._answers = answers

    def __getattr__(self, name: str) -> Callable[..., Any]:
        async def method(request: Any, *, timeout: float, metadata: Any) -> Any:
            self._calls.append((name, request, timeout, metadata))
            answer = self._answers[name]
            if isinstance(answer, BaseException):
                raise answer
            return answer

        return method


def fake_api(answers: dict[str, Any]) -> tuple[ConsoleApi, list[tuple[str, Any, float, Any]]]:
    calls: list[tuple[str, Any, float, Any]] = []
    svc: Any = FakeService(calls, answers)
    return ConsoleApi(AdminStubs(svc, svc, svc, svc), timeout_s=7.5, target="127.0.0.1:1"), calls


def rpc_error(code: grpc.StatusCode, details: str, danube_code: str | None) -> grpc.aio.AioRpcError:
    trailing = grpc.aio.Metadata((MD_ERROR_CODE, danube_code)) if danube_code else grpc.aio.Metadata()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


TOKEN = "Bearer t0k3n"
PLAN = '{"plan_id": "p1", "status": "pending", "moves": []}'


@pytest.mark.parametrize(
    ("call", "rpc", "answer", "request_", "expected"),
    [
        (
            lambda api: api.brokers(TOKEN),
            "ListBrokers",
            apb.ListBrokersResponse(brokers=[apb.BrokerInfo(broker_id="1", state="active")]),
            apb.ListBrokersRequest(),
            lambda out: out["brokers"][0]["broker_id"] == "1" and out["brokers"][0]["state"] == "active",
        ),
        (
            lambda api: api.set_broker_state(TOKEN, "2", "draining"),
            "SetBrokerState",
            apb.BrokerInfo(broker_id="2", state="draining"),
            apb.SetBrokerStateRequest(broker_id="2", state="draining"),
            lambda out: out["state"] == "draining",
        ),
        (
            lambda api: api.leaders(TOKEN),
            "ListLeaders",
            apb.ListLeadersResponse(
                leaders=[apb.LeaderInfo(role="load-manager", candidate_id="lm-1", term=9)]
            ),
            apb.ListLeadersRequest(),
            lambda out: out["leaders"][0]["term"] == 9,
        ),
        (
            lambda api: api.namespaces(TOKEN),
            "ListNamespaces",
            apb.ListNamespacesResponse(namespaces=["default"]),
            apb.ListNamespacesRequest(),
            lambda out: out == {"namespaces": ["default"]},
        ),
        (
            lambda api: api.topics(TOKEN, "default"),
            "ListTopics",
            apb.ListTopicsResponse(topics=[apb.TopicInfo(name="/default/a")]),
            apb.ListTopicsRequest(namespace="default"),
            lambda out: [t["name"] for t in out["topics"]] == ["/default/a"],
        ),
        (
            lambda api: api.topic(TOKEN, "/default/a"),
            "DescribeTopic",
            apb.TopicInfo(name="/default/a", broker_id="1"),
            apb.DescribeTopicRequest(name="/default/a"),
            lambda out: out["broker_id"] == "1",
        ),
        (
            lambda api: api.topic_stats(TOKEN, "/default/a"),
            "GetTopicStats",
            apb.TopicStats(
                name="/default/a",
                has_uploaded=True,
                uploaded_next_offset=40,
                subscriptions=[apb.SubscriptionStats(name="s", backlog=12)],
            ),
            apb.TopicStatsRequest(name="/default/a"),
            lambda out: out["subscriptions"][0]["backlog"] == 12 and out["uploaded_next_offset"] == 40,
        ),
        (
            lambda api: api.move_topic(TOKEN, "/default/a", "2"),
            "MoveTopic",
            apb.MoveTopicResponse(name="/default/a", from_broker="1", to_broker="2"),
            apb.MoveTopicRequest(name="/default/a", to_broker="2"),
            lambda out: (out["from_broker"], out["to_broker"]) == ("1", "2"),
        ),
        (
            lambda api: api.load_report(TOKEN),
            "GetLoadReport",
            apb.JsonDocument(key="/c/load_report", json='{"version": 1, "totals": {"brokers": 2}}'),
            apb.GetLoadReportRequest(),
            lambda out: out == {"key": "/c/load_report", "report": {"version": 1, "totals": {"brokers": 2}}},
        ),
        (
            lambda api: api.plans(TOKEN, 20),
            "ListPlans",
            apb.ListPlansResponse(plans=[apb.JsonDocument(key="/c/p1", json=PLAN)], pending_requests=["r-1"]),
            apb.ListPlansRequest(limit=20),
            lambda out: out["plans"][0]["plan"]["plan_id"] == "p1" and out["pending_requests"] == ["r-1"],
        ),
        (
            lambda api: api.apply_plan(TOKEN, "p1"),
            "ApplyPlan",
            apb.JsonDocument(key="/c/p1", json=PLAN),
            apb.ApplyPlanRequest(plan_id="p1"),
            lambda out: out["plan"]["status"] == "pending",
        ),
        (
            lambda api: api.request_rebalance(TOKEN, dry_run=True),
            "RequestRebalance",
            apb.RequestRebalanceResponse(request_id="r-2"),
            apb.RequestRebalanceRequest(dry_run=True),
            lambda out: out == {"request_id": "r-2"},
        ),
    ],
)
async def test_each_api_call_is_one_admin_call_with_the_token_and_a_deadline(
    call: Callable[[ConsoleApi], Any], rpc: str, answer: Any, request_: Any, expected: Callable[[Any], bool]
) -> None:
    api, calls = fake_api({rpc: answer})
    out = await call(api)
    assert calls == [(rpc, request_, 7.5, (("authorization", TOKEN),))]
    assert expected(out), out


async def test_without_a_token_no_credentials_are_sent() -> None:
    api, calls = fake_api({"ListBrokers": apb.ListBrokersResponse()})
    assert await api.brokers(None) == {"brokers": []}
    assert calls[0][3] == ()


async def test_the_admin_apis_refusal_comes_back_as_its_own_error() -> None:
    refusal = rpc_error(
        grpc.StatusCode.PERMISSION_DENIED,
        "user:bob may not manage_topic on /default/a [PERMISSION_DENIED]",
        "PERMISSION_DENIED",
    )
    api, _ = fake_api({"MoveTopic": refusal})
    with pytest.raises(errors.PermissionDenied) as info:
        await api.move_topic("Bearer x", "/default/a", "")
    assert info.value.message == "user:bob may not manage_topic on /default/a"
    assert http_status(info.value) == 403

    missing = rpc_error(grpc.StatusCode.NOT_FOUND, "topic /default/zz does not exist", "TOPIC_NOT_FOUND")
    api, _ = fake_api({"DescribeTopic": missing})
    with pytest.raises(errors.TopicNotFound):
        await api.topic(None, "/default/zz")


async def test_an_unreachable_admin_port_says_where_the_console_dialed() -> None:
    down = rpc_error(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses", None)
    api, _ = fake_api({"ListBrokers": down})
    with pytest.raises(errors.Unavailable, match=r"cannot reach this lookup's admin API at 127\.0\.0\.1:1"):
        await api.brokers(None)
    # An UNAVAILABLE the admin API itself sends (a topic's broker is down) passes through.
    owner_down = rpc_error(grpc.StatusCode.UNAVAILABLE, "broker 2 is not registered", "UNAVAILABLE")
    api, _ = fake_api({"GetTopicStats": owner_down})
    with pytest.raises(errors.Unavailable) as info:
        await api.topic_stats(None, "/default/a")
    assert info.value.message == "broker 2 is not registered"


# ---------------------------------------------------------------- the packaged app
def test_the_app_and_every_file_it_loads_are_packaged() -> None:
    assets = load_assets()
    assert {"index.html", "app.js", "style.css", "js/core.js", "js/chart.js"} <= set(assets)
    index = assets["index.html"].body.decode()
    wanted = set(re.findall(r'(?:src|href)="/assets/([^"]+)"', index))
    for name, asset in assets.items():
        if name.endswith(".js"):
            base = name.rpartition("/")[0]
            for rel in re.findall(r'from "\./([^"]+)"', asset.body.decode()):
                wanted.add(f"{base}/{rel}" if base else rel)
    assert wanted and wanted <= set(assets), wanted - set(assets)
    assert assets["app.js"].content_type.startswith("text/javascript")
    # No resource from another origin: the console must work without the internet.
    for name, asset in assets.items():
        assert not re.search(rb"https?://(?!www\.w3\.org/2000/svg)", asset.body), name
