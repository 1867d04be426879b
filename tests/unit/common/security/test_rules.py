"""The RULES table covers exactly every RPC of every service, and each rule reads its request."""

from __future__ import annotations

import pytest
from google.protobuf import message_factory

from danube_common.errors import InvalidArgument
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.security.rbac import CLUSTER, Permission, Resource
from danube_common.security.rules import PB_MODULES, RULES, Handle, all_methods

pytestmark = pytest.mark.unit


def _input_types() -> dict[str, type]:
    out = {}
    for module in PB_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                out[f"/{service.full_name}/{method.name}"] = message_factory.GetMessageClass(
                    method.input_type
                )
    return out


def test_every_rpc_has_exactly_one_rule() -> None:
    methods = list(all_methods())
    assert len(methods) == len(set(methods))
    missing = sorted(set(methods) - set(RULES))
    stale = sorted(set(RULES) - set(methods))
    assert not missing, f"RPCs without an authorization rule (add them to security/rules.py): {missing}"
    assert not stale, f"rules for RPCs that no longer exist: {stale}"


def test_the_table_covers_every_service_module() -> None:
    import danube_common.pb as pkg

    generated = {m.name for m in __import__("pkgutil").iter_modules(pkg.__path__) if m.name.endswith("_pb2")}
    assert generated == {m.__name__.rsplit(".", 1)[1] for m in PB_MODULES}


@pytest.mark.parametrize("method", sorted(RULES))
def test_each_rule_reads_its_request(method: str) -> None:
    """No typo in a field name: a default request gives a target or an InvalidArgument (empty name)."""
    request = _input_types()[method]()
    try:
        target = RULES[method].target(request)
    except InvalidArgument:
        return
    if isinstance(target, tuple):  # a multiplexed frame: the handles it names
        assert all(isinstance(t, Handle) for t in target)
        return
    assert isinstance(target, Resource | Handle)


@pytest.mark.parametrize(
    ("method", "request_", "permission", "target"),
    [
        (
            "/danube.ProducerService/CreateProducer",
            pb.ProducerRequest(topic_name="/ns/t"),
            "produce",
            Resource.topic("/ns/t"),
        ),
        (
            "/danube.ProducerService/PublishBatches",
            pb.PublishBatch(producer_id=7),
            "produce",
            Handle("producer", 7),
        ),
        (
            "/danube.ConsumerService/Ack",
            pb.AckRequest(msg_id=pb.MsgID(topic_name="/ns/t")),
            "consume",
            Resource.topic("/ns/t"),
        ),
        (
            "/danube.ConsumerService/AckBatch",
            pb.AckBatchRequest(consumer_id=3),
            "consume",
            Handle("consumer", 3),
        ),
        ("/danube.ConsumerService/Seek", pb.SeekRequest(consumer_id=3), "consume", Handle("consumer", 3)),
        (
            "/danube.HealthCheck/HealthCheck",
            pb.HealthCheckRequest(client=pb.HealthCheckRequest.Consumer, id=4),
            "lookup",
            Handle("consumer", 4),
        ),
        (
            "/danube.Discovery/TopicLookup",
            pb.TopicLookupRequest(topic="/ns/t"),
            "lookup",
            Resource.topic("/ns/t"),
        ),
        (
            "/danube.admin.v1.NamespaceAdmin/CreateNamespace",
            apb.NamespaceRequest(name="ns"),
            "manage_namespace",
            Resource.namespace("ns"),
        ),
        ("/danube.admin.v1.TopicAdmin/ListTopics", apb.ListTopicsRequest(), "lookup", CLUSTER),
        (
            "/danube.admin.v1.BrokerAdmin/SetBrokerState",
            apb.SetBrokerStateRequest(broker_id="b1"),
            "manage_broker",
            Resource.broker("b1"),
        ),
        (
            "/danube.admin.v1.BrokerStatsService/GetBrokerStats",
            apb.BrokerStatsRequest(),
            "cluster_internal",
            CLUSTER,
        ),
        (
            "/danube.admin.v1.TopicAdmin/CompactTopic",
            apb.CompactTopicRequest(name="/ns/t"),
            "manage_topic",
            Resource.topic("/ns/t"),
        ),
        (
            "/danube.admin.v1.BrokerStatsService/CompactTopic",
            apb.CompactTopicRequest(name="/ns/t"),
            "cluster_internal",
            CLUSTER,
        ),
    ],
)
def test_sample_rules(method: str, request_: object, permission: str, target: object) -> None:
    rule = RULES[method]
    assert rule.permission is Permission(permission)
    assert rule.target(request_) == target
