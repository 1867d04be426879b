"""Admin servicers over the in-memory store: listing shape, placement, refusals, bad input."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from danube_common.cluster_view import ClusterView
from danube_common.errors import (
    InvalidArgument,
    InvalidNamespaceName,
    InvalidTopicName,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    TopicAlreadyExists,
    TopicNotFound,
)
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.placement import Resolver
from danube_common.records import BrokerRecord, Ownership, TopicRecord
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from danube_lookup.admin_api import BrokerAdminApi, NamespaceAdminApi, TopicAdminApi
from danube_lookup.broker_stats import BrokerStatsClient
from danube_lookup.catalog import Catalog, TopicView, group_topics

pytestmark = pytest.mark.unit

CTX: Any = None  # the servicers never touch the context; errors are raised, not aborted


class Admin:
    def __init__(
        self, res: Resources, *, broker_rpc_timeout_s: float = 5.0, placement: Resolver | None = None
    ) -> None:
        # An unstarted view knows of no load manager: placement falls back to topic counts.
        catalog = Catalog(res, placement or Resolver(res, ClusterView(res)))
        self.stats = BrokerStatsClient(res, rpc_timeout_s=broker_rpc_timeout_s)
        self.brokers = BrokerAdminApi(catalog)
        self.namespaces = NamespaceAdminApi(catalog)
        self.topics = TopicAdminApi(catalog, self.stats)


@pytest.fixture
async def res(memory_store: MemoryStore) -> Resources:
    r = Resources(memory_store, Keys("c"))
    await r.create_namespace("default")
    for b in ("b1", "b2"):
        lease = await memory_store.grant_lease(30)
        rec = BrokerRecord(b, f"{b}:6650", f"http://{b}:6650", "active", 1000)
        await memory_store.put(r.keys.broker(b), rec.to_json(), lease=lease)
    return r


@pytest.fixture
def admin(res: Resources) -> Admin:
    return Admin(res)


async def create(admin: Admin, name: str, partitions: int = 0, dispatch: str = "") -> apb.TopicInfo:
    req = apb.CreateTopicRequest(name=name, partitions=partitions, dispatch_strategy=dispatch)
    return (await admin.topics.CreateTopic(req, CTX)).topic


async def test_partitioned_topic_is_listed_once_with_its_partitions_spread(
    admin: Admin, res: Resources
) -> None:
    created = await create(admin, "/default/p", 4, "reliable")
    assert created.partitions == 4 and created.broker_id == ""
    assert [p.name for p in created.partition_topics] == [f"/default/p-part-{i}" for i in range(4)]
    await create(admin, "/default/a")

    listed = (await admin.topics.ListTopics(apb.ListTopicsRequest(), CTX)).topics
    assert [t.name for t in listed] == ["/default/a", "/default/p"]
    parent = listed[1]
    assert parent.partitions == 4 and parent.dispatch_strategy == "reliable" and parent.broker_id == ""
    assert [p.name for p in parent.partition_topics] == [f"/default/p-part-{i}" for i in range(4)]
    assert all(p.dispatch_strategy == "reliable" and p.partitions == 0 for p in parent.partition_topics)
    per_broker: dict[str, int] = {}
    for p in parent.partition_topics:
        per_broker[p.broker_id] = per_broker.get(p.broker_id, 0) + 1
    assert per_broker == {"b1": 2, "b2": 2}
    assert listed[0].broker_id in ("b1", "b2") and not listed[0].partition_topics

    brokers = (await admin.brokers.ListBrokers(apb.ListBrokersRequest(), CTX)).brokers
    # 4 partitions alternate b1, b2; then /default/a breaks the 2-2 tie by broker id.
    assert [(b.broker_id, b.topic_count) for b in brokers] == [("b1", 3), ("b2", 2)]
    assert {b.advertised_url for b in brokers} == {"http://b1:6650", "http://b2:6650"}


async def test_namespace_filter_and_unknown_namespace(admin: Admin, res: Resources) -> None:
    await admin.namespaces.CreateNamespace(apb.NamespaceRequest(name="other"), CTX)
    await create(admin, "/default/a")
    await create(admin, "/other/b", 2)
    only = (await admin.topics.ListTopics(apb.ListTopicsRequest(namespace="other"), CTX)).topics
    assert [t.name for t in only] == ["/other/b"]
    with pytest.raises(NamespaceNotFound):
        await admin.topics.ListTopics(apb.ListTopicsRequest(namespace="missing"), CTX)
    with pytest.raises(InvalidNamespaceName):
        await admin.topics.ListTopics(apb.ListTopicsRequest(namespace="bad/ns"), CTX)


async def test_namespaces_create_list_delete(admin: Admin) -> None:
    ns = admin.namespaces
    assert (await ns.CreateNamespace(apb.NamespaceRequest(name="zeta"), CTX)).name == "zeta"
    await ns.CreateNamespace(apb.NamespaceRequest(name="alpha"), CTX)
    assert list((await ns.ListNamespaces(apb.ListNamespacesRequest(), CTX)).namespaces) == [
        "alpha",
        "default",
        "zeta",
    ]
    with pytest.raises(NamespaceAlreadyExists):
        await ns.CreateNamespace(apb.NamespaceRequest(name="alpha"), CTX)
    await ns.DeleteNamespace(apb.NamespaceRequest(name="alpha"), CTX)
    assert "alpha" not in (await ns.ListNamespaces(apb.ListNamespacesRequest(), CTX)).namespaces
    with pytest.raises(NamespaceNotFound):
        await ns.DeleteNamespace(apb.NamespaceRequest(name="alpha"), CTX)


async def test_deleting_a_non_empty_namespace_is_refused(admin: Admin) -> None:
    await admin.namespaces.CreateNamespace(apb.NamespaceRequest(name="busy"), CTX)
    await create(admin, "/busy/t")
    with pytest.raises(NamespaceNotEmpty) as info:
        await admin.namespaces.DeleteNamespace(apb.NamespaceRequest(name="busy"), CTX)
    assert info.value.grpc_status == grpc.StatusCode.FAILED_PRECONDITION
    assert "/busy/t" in info.value.message and "delete them first" in info.value.message
    await admin.topics.DeleteTopic(apb.DeleteTopicRequest(name="/busy/t"), CTX)
    await admin.namespaces.DeleteNamespace(apb.NamespaceRequest(name="busy"), CTX)


@pytest.mark.parametrize(
    ("name", "partitions", "dispatch", "error"),
    [
        ("bad", 0, "", InvalidTopicName),
        ("/default", 0, "", InvalidTopicName),
        ("/default/a/b", 0, "", InvalidTopicName),
        ("/default/sp ace", 0, "", InvalidTopicName),
        ("/default/t", 0, "fast", InvalidArgument),
        ("/default/t", 2000, "", InvalidArgument),
        ("/default/t-part-1", 2, "", InvalidArgument),
        ("/missing/t", 0, "", NamespaceNotFound),
        ("/missing/t", 3, "", NamespaceNotFound),
    ],
)
async def test_create_topic_rejects_bad_input(
    admin: Admin, name: str, partitions: int, dispatch: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await create(admin, name, partitions, dispatch)
    assert not (await admin.topics.ListTopics(apb.ListTopicsRequest(), CTX)).topics


async def test_invalid_namespace_names(admin: Admin) -> None:
    for bad in ("", "a/b", "..", "x" * 65, "sp ace"):
        with pytest.raises(InvalidNamespaceName):
            await admin.namespaces.CreateNamespace(apb.NamespaceRequest(name=bad), CTX)


async def test_duplicate_topic(admin: Admin) -> None:
    await create(admin, "/default/t")
    with pytest.raises(TopicAlreadyExists):
        await create(admin, "/default/t")
    with pytest.raises(TopicAlreadyExists):
        await create(admin, "/default/t", 2)


async def test_describe_with_subscriptions(admin: Admin, res: Resources) -> None:
    await create(admin, "/default/p", 2)
    await create(admin, "/default/t", 0, "reliable")
    for topic, sub in [
        ("/default/t", "s1"),
        ("/default/p-part-0", "s2"),
        ("/default/p-part-1", "s2"),
        ("/default/p-part-1", "s3"),
    ]:
        await res.store.put(res.keys.subscription(TopicName.parse(topic), sub), {"type": "shared"})
    t = await admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/default/t"), CTX)
    assert (t.dispatch_strategy, list(t.subscriptions), t.partitions) == ("reliable", ["s1"], 0)
    assert t.broker_id in ("b1", "b2") and t.created_at_ms > 0
    p = await admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/default/p"), CTX)
    assert list(p.subscriptions) == ["s2", "s3"]
    assert [list(x.subscriptions) for x in p.partition_topics] == [["s2"], ["s2", "s3"]]
    with pytest.raises(TopicNotFound):
        await admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/default/nope"), CTX)


async def test_delete_topic(admin: Admin, res: Resources) -> None:
    await create(admin, "/default/p", 3)
    with pytest.raises(InvalidArgument, match="partition of /default/p"):
        await admin.topics.DeleteTopic(apb.DeleteTopicRequest(name="/default/p-part-1"), CTX)
    deleted = (await admin.topics.DeleteTopic(apb.DeleteTopicRequest(name="/default/p"), CTX)).deleted
    assert sorted(deleted) == ["/default/p", *[f"/default/p-part-{i}" for i in range(3)]]
    assert not (await admin.topics.ListTopics(apb.ListTopicsRequest(), CTX)).topics
    assert await res.topic_counts() == {}
    owners, _ = await res.list_owners()
    assert owners == {}
    with pytest.raises(TopicNotFound):
        await admin.topics.DeleteTopic(apb.DeleteTopicRequest(name="/default/p"), CTX)


async def test_create_without_brokers_leaves_topics_unassigned(memory_store: MemoryStore) -> None:
    r = Resources(memory_store, Keys("c"))
    await r.create_namespace("default")
    admin = Admin(r)
    created = await create(admin, "/default/p", 2)
    assert [p.broker_id for p in created.partition_topics] == ["", ""]


def test_group_topics_table() -> None:
    recs = [
        TopicRecord("/n/z"),
        TopicRecord("/n/p", "reliable", partitions=2),
        TopicRecord("/n/p-part-1", "reliable", partition_of="/n/p"),
        TopicRecord("/n/p-part-0", "reliable", partition_of="/n/p"),
        TopicRecord("/n/q-part-0", partition_of="/n/q"),  # no parent entry: an ordinary topic
    ]
    owners = {"/n/p-part-0": Ownership("/n/p-part-0", "b1", 7), "/n/z": Ownership("/n/z", "b2", 9)}
    assert group_topics(recs, owners) == [
        TopicView(
            "/n/p",
            "reliable",
            2,
            "",
            (TopicView("/n/p-part-0", "reliable", 0, "b1"), TopicView("/n/p-part-1", "reliable", 0, "")),
        ),
        TopicView("/n/q-part-0", "non_reliable"),
        TopicView("/n/z", "non_reliable", 0, "b2"),
    ]
