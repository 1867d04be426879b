"""The admin API over gRPC against real etcd: namespaces, topics, partitions spread over brokers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import grpc.aio
import pytest

from danube_common.config import EtcdConfig
from danube_common.errors import MD_ERROR_CODE, NamespaceNotEmpty, NotFound, error_from_rpc
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.records import BrokerRecord
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_lookup.app import running
from danube_lookup.config import LookupConfig
from tests.unit.lookup.fake_stats import register as register_stats
from tests.unit.lookup.fake_stats import stats_broker

pytestmark = pytest.mark.integration


@dataclass
class Admin:
    brokers: apb_grpc.BrokerAdminStub
    namespaces: apb_grpc.NamespaceAdminStub
    topics: apb_grpc.TopicAdminStub


@pytest.fixture
async def admin(etcd_server: EtcdProcess, cluster_name: str) -> AsyncIterator[Admin]:
    cfg = LookupConfig(
        listen_addr="127.0.0.1:0",
        admin_listen_addr="127.0.0.1:0",
        etcd=EtcdConfig(endpoints=[etcd_server.endpoint], cluster=cluster_name),
    )
    async with running(cfg) as info, grpc.aio.insecure_channel(info.admin_addr) as channel:
        yield Admin(
            apb_grpc.BrokerAdminStub(channel),
            apb_grpc.NamespaceAdminStub(channel),
            apb_grpc.TopicAdminStub(channel),
        )


async def register(store: EtcdStore, keys: Keys, broker_id: str, port: int) -> None:
    lease = await store.grant_lease(30)
    rec = BrokerRecord(broker_id, f"127.0.0.1:{port}", f"http://127.0.0.1:{port}", "active", 1)
    await store.put(keys.broker(broker_id), rec.to_json(), lease=lease)


async def test_namespaces(admin: Admin) -> None:
    ns = admin.namespaces
    assert list((await ns.ListNamespaces(apb.ListNamespacesRequest(), timeout=5)).namespaces) == ["default"]
    await ns.CreateNamespace(apb.NamespaceRequest(name="analytics"), timeout=5)
    assert list((await ns.ListNamespaces(apb.ListNamespacesRequest(), timeout=5)).namespaces) == [
        "analytics",
        "default",
    ]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await ns.CreateNamespace(apb.NamespaceRequest(name="analytics"), timeout=5)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await ns.CreateNamespace(apb.NamespaceRequest(name="bad/name"), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await ns.DeleteNamespace(apb.NamespaceRequest(name="analytics"), timeout=5)
    assert list((await ns.ListNamespaces(apb.ListNamespacesRequest(), timeout=5)).namespaces) == ["default"]


async def test_partitions_spread_over_brokers_and_round_trip(
    admin: Admin, etcd_store: EtcdStore, etcd_resources: Resources, keys: Keys
) -> None:
    for i, b in enumerate(("b1", "b2", "b3")):
        await register(etcd_store, keys, b, 7001 + i)
    await admin.namespaces.CreateNamespace(apb.NamespaceRequest(name="shop"), timeout=5)
    req = apb.CreateTopicRequest(name="/shop/orders", partitions=6, dispatch_strategy="reliable")
    created = (await admin.topics.CreateTopic(req, timeout=5)).topic
    assert created.name == "/shop/orders" and created.partitions == 6
    brokers = [p.broker_id for p in created.partition_topics]
    assert sorted(brokers) == ["b1", "b1", "b2", "b2", "b3", "b3"]
    await admin.topics.CreateTopic(apb.CreateTopicRequest(name="/shop/audit"), timeout=5)

    listed = (await admin.topics.ListTopics(apb.ListTopicsRequest(namespace="shop"), timeout=5)).topics
    assert [t.name for t in listed] == ["/shop/audit", "/shop/orders"]
    assert listed[0].broker_id in ("b1", "b2", "b3") and listed[0].dispatch_strategy == "non_reliable"
    assert [p.name for p in listed[1].partition_topics] == [f"/shop/orders-part-{i}" for i in range(6)]
    assert [p.broker_id for p in listed[1].partition_topics] == brokers
    # The ownership written by the admin API is what Discovery and brokers read.
    for p in listed[1].partition_topics:
        own = await etcd_resources.get_owner(TopicName.parse(p.name))
        assert own is not None and own.broker_id == p.broker_id
        assert await etcd_store.get(keys.assignment(own.broker_id, TopicName.parse(p.name))) is not None

    infos = (await admin.brokers.ListBrokers(apb.ListBrokersRequest(), timeout=5)).brokers
    assert [b.broker_id for b in infos] == ["b1", "b2", "b3"]
    assert sum(b.topic_count for b in infos) == 7 and all(b.state == "active" for b in infos)
    assert infos[0].advertised_url == "http://127.0.0.1:7001"

    await etcd_store.put(keys.subscription(TopicName("shop", "orders-part-2"), "billing"), {"type": "shared"})
    described = await admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/shop/orders"), timeout=5)
    assert list(described.subscriptions) == ["billing"] and described.dispatch_strategy == "reliable"

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.namespaces.DeleteNamespace(apb.NamespaceRequest(name="shop"), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (MD_ERROR_CODE, "NAMESPACE_NOT_EMPTY") in tuple(info.value.trailing_metadata() or ())
    assert isinstance(error_from_rpc(info.value), NamespaceNotEmpty)

    deleted = (await admin.topics.DeleteTopic(apb.DeleteTopicRequest(name="/shop/orders"), timeout=5)).deleted
    assert len(deleted) == 7
    await admin.topics.DeleteTopic(apb.DeleteTopicRequest(name="/shop/audit"), timeout=5)
    assert not (await admin.topics.ListTopics(apb.ListTopicsRequest(), timeout=5)).topics
    assert await etcd_resources.topic_counts() == {}
    await admin.namespaces.DeleteNamespace(apb.NamespaceRequest(name="shop"), timeout=5)


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (apb.CreateTopicRequest(name="orders"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            apb.CreateTopicRequest(name="/default/t", dispatch_strategy="fast"),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (apb.CreateTopicRequest(name="/nope/t"), grpc.StatusCode.NOT_FOUND),
    ],
)
async def test_create_topic_errors(
    admin: Admin, request_: apb.CreateTopicRequest, status: grpc.StatusCode
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.topics.CreateTopic(request_, timeout=5)
    assert info.value.code() == status


async def test_describe_and_delete_unknown_topic(admin: Admin) -> None:
    for call in (
        admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/default/ghost"), timeout=5),
        admin.topics.DeleteTopic(apb.DeleteTopicRequest(name="/default/ghost"), timeout=5),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


# ---------------------------------------------------------------------------- reliable topics


async def test_reliable_topic_options_are_stored_and_shown(
    admin: Admin, etcd_resources: Resources, keys: Keys
) -> None:
    req = apb.CreateTopicRequest(
        name="/default/ledger",
        partitions=2,
        dispatch_strategy="reliable",
        durability="none",
        retention_time_s=600,
    )
    created = (await admin.topics.CreateTopic(req, timeout=5)).topic
    assert (created.durability, created.retention_time_s) == ("none", 600)
    for name in ("/default/ledger", "/default/ledger-part-0", "/default/ledger-part-1"):
        rec = await etcd_resources.get_topic(TopicName.parse(name))
        assert rec is not None
        assert rec.policies == {"durability": "none", "retention_time_s": 600, "retention_size_bytes": 0}
    listed = (await admin.topics.ListTopics(apb.ListTopicsRequest(), timeout=5)).topics
    assert [(t.name, t.durability) for t in listed] == [("/default/ledger", "none")]
    assert [p.retention_time_s for p in listed[0].partition_topics] == [600, 600]

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.topics.CreateTopic(
            apb.CreateTopicRequest(name="/default/fast", durability="fsync"), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reliable topics only" in (info.value.details() or "")


async def test_subscription_policy_round_trip(admin: Admin, etcd_store: EtcdStore, keys: Keys) -> None:
    await admin.topics.CreateTopic(
        apb.CreateTopicRequest(name="/default/jobs", dispatch_strategy="reliable"), timeout=5
    )
    empty = await admin.topics.GetSubscriptionPolicy(
        apb.GetSubscriptionPolicyRequest(topic="/default/jobs", subscription="workers"), timeout=5
    )
    assert not empty.HasField("policy")
    policy = apb.SubscriptionPolicy(
        max_redeliveries=3,
        ack_timeout_ms=5000,
        poison_policy="dead_letter",
        dead_letter_topic="/default/jobs-dlq",
    )
    await admin.topics.SetSubscriptionPolicy(
        apb.SetSubscriptionPolicyRequest(topic="/default/jobs", subscription="workers", policy=policy),
        timeout=5,
    )
    key = keys.subscription_policy(TopicName("default", "jobs"), "workers")
    kv = await etcd_store.get(key)
    # Only the fields given: the backoffs are left to the broker's defaults, not stored as 0.
    assert kv is not None and kv.json() == {
        "max_redeliveries": 3,
        "ack_timeout_ms": 5000,
        "poison_policy": "dead_letter",
        "dead_letter_topic": "/default/jobs-dlq",
    }
    got = await admin.topics.GetSubscriptionPolicy(
        apb.GetSubscriptionPolicyRequest(topic="/default/jobs", subscription="workers"), timeout=5
    )
    assert got.policy == policy and not got.policy.HasField("redelivery_backoff_base_ms")

    # A set replaces the stored policy: the fields not given now are gone too.
    await admin.topics.SetSubscriptionPolicy(
        apb.SetSubscriptionPolicyRequest(
            topic="/default/jobs", subscription="workers", policy=apb.SubscriptionPolicy(max_redeliveries=5)
        ),
        timeout=5,
    )
    kv = await etcd_store.get(key)
    assert kv is not None and kv.json() == {"max_redeliveries": 5}

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.topics.SetSubscriptionPolicy(
            apb.SetSubscriptionPolicyRequest(
                topic="/default/jobs", subscription="workers", policy=apb.SubscriptionPolicy()
            ),
            timeout=5,
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pass at least one option" in (info.value.details() or "")

    bad = apb.SubscriptionPolicy(poison_policy="dead_letter")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.topics.SetSubscriptionPolicy(
            apb.SetSubscriptionPolicyRequest(topic="/default/jobs", subscription="workers", policy=bad),
            timeout=5,
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "needs a dead_letter_topic" in (info.value.details() or "")
    kv = await etcd_store.get(key)
    assert kv is not None and kv.json() == {"max_redeliveries": 5}  # refusals store nothing


async def test_topic_stats_are_forwarded_to_the_owning_broker(
    admin: Admin, etcd_store: EtcdStore, etcd_resources: Resources, keys: Keys
) -> None:
    async with stats_broker("b1") as b1:
        await register_stats(etcd_store, keys, "b1", b1.addr)
        await admin.topics.CreateTopic(
            apb.CreateTopicRequest(name="/default/metered", dispatch_strategy="reliable"), timeout=5
        )
        expected = b1.sample("/default/metered")
        got = await admin.topics.GetTopicStats(apb.TopicStatsRequest(name="/default/metered"), timeout=5)
        assert got == expected and [r.name for r in b1.requests] == ["/default/metered"]

    # The broker is gone but still registered: UNAVAILABLE naming it.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.topics.GetTopicStats(apb.TopicStatsRequest(name="/default/metered"), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "broker b1 (owner of /default/metered)" in (info.value.details() or "")

    # Created while no broker can take it: nobody owns it yet.
    await etcd_store.delete(keys.broker("b1"))
    await admin.topics.CreateTopic(
        apb.CreateTopicRequest(name="/default/orphan", dispatch_strategy="reliable"), timeout=5
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.topics.GetTopicStats(apb.TopicStatsRequest(name="/default/orphan"), timeout=5)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert "not assigned to a broker yet" in (info.value.details() or "")
    assert isinstance(error_from_rpc(info.value), NotFound)
