"""The lookup's Discovery service against real etcd, with fake brokers registered in etcd."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from danube_common.errors import MD_ERROR_CODE
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.records import BrokerRecord
from danube_common.resources import Resources
from danube_common.service import ServiceReady
from danube_common.topic_name import TopicName
from tests.support import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
async def discovery(lookup: ServiceReady) -> AsyncIterator[pb_grpc.DiscoveryStub]:
    async with grpc.aio.insecure_channel(lookup.addr) as channel:
        yield pb_grpc.DiscoveryStub(channel)


async def register(store: EtcdStore, keys: Keys, broker_id: str, port: int) -> int:
    """Act as a broker: a registration under a lease (revoking it = the broker dies)."""
    lease = await store.grant_lease(30)
    rec = BrokerRecord(broker_id, f"127.0.0.1:{port}", f"http://127.0.0.1:{port}", "active", 1)
    await store.put(keys.broker(broker_id), rec.to_json(), lease=lease)
    return lease


async def lookup_url(discovery: pb_grpc.DiscoveryStub, topic: str, request_id: int = 1) -> str:
    resp = await discovery.TopicLookup(pb.TopicLookupRequest(request_id=request_id, topic=topic), timeout=5)
    assert resp.request_id == request_id
    assert resp.response_type == pb.TopicLookupResponse.Redirect
    assert resp.connect_url == resp.broker_url and not resp.proxy
    return resp.connect_url


async def redirects_to(discovery: pb_grpc.DiscoveryStub, topic: str, url: str) -> bool:
    return await lookup_url(discovery, topic) == url


async def test_new_topic_goes_to_least_loaded_broker_and_stays(
    discovery: pb_grpc.DiscoveryStub, etcd_store: EtcdStore, etcd_resources: Resources, keys: Keys
) -> None:
    await register(etcd_store, keys, "b1", 7001)
    await register(etcd_store, keys, "b2", 7002)
    await etcd_resources.assign_if_unowned(TopicName("default", "busy"), "b1")

    assert await lookup_url(discovery, "/default/new") == "http://127.0.0.1:7002"
    owner = await etcd_resources.get_owner(TopicName("default", "new"))
    assert owner is not None and owner.broker_id == "b2"
    for i in range(5):
        assert await lookup_url(discovery, "/default/new", request_id=10 + i) == "http://127.0.0.1:7002"
    assert await etcd_resources.get_owner(TopicName("default", "new")) == owner  # same epoch
    # The next new topic sees b2 busy too and ties break by id.
    assert await lookup_url(discovery, "/default/second") == "http://127.0.0.1:7001"


async def test_topic_partitions(discovery: pb_grpc.DiscoveryStub, etcd_resources: Resources) -> None:
    await etcd_resources.create_topic(TopicName("default", "plain"))
    await etcd_resources.create_partitioned_topic(TopicName("default", "parted"), 3)

    async def partitions(topic: str) -> list[str]:
        resp = await discovery.TopicPartitions(pb.TopicLookupRequest(request_id=7, topic=topic), timeout=5)
        assert resp.request_id == 7
        return list(resp.partitions)

    assert await partitions("/default/plain") == ["/default/plain"]
    assert await partitions("/default/parted") == [f"/default/parted-part-{i}" for i in range(3)]
    assert await partitions("/default/unknown") == []


async def test_dead_owner_is_replaced_by_the_next_lookup(
    discovery: pb_grpc.DiscoveryStub, etcd_store: EtcdStore, etcd_resources: Resources, keys: Keys
) -> None:
    topic = TopicName("default", "moving")
    lease1 = await register(etcd_store, keys, "b1", 7001)
    assert await lookup_url(discovery, str(topic)) == "http://127.0.0.1:7001"
    before = await etcd_resources.get_owner(topic)
    assert before is not None
    await register(etcd_store, keys, "b2", 7002)

    await etcd_store.revoke_lease(lease1)  # b1 dies
    # The lookup's cache learns of the death through its watch; poll rather than sleep.
    await wait_until(
        lambda: redirects_to(discovery, str(topic), "http://127.0.0.1:7002"),
        timeout_s=10,
        what="the topic to be re-placed on b2",
    )
    after = await etcd_resources.get_owner(topic)
    assert after is not None and after.broker_id == "b2" and after.epoch > before.epoch
    assert await etcd_store.get(keys.assignment("b1", topic)) is None
    assert await etcd_store.get(keys.assignment("b2", topic)) is not None
    for _ in range(3):
        assert await lookup_url(discovery, str(topic)) == "http://127.0.0.1:7002"
    assert await etcd_resources.get_owner(topic) == after


@pytest.mark.parametrize(
    ("topic", "status", "code"),
    [
        ("no-slash", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_TOPIC_NAME"),
        ("/missing/t", grpc.StatusCode.NOT_FOUND, "NAMESPACE_NOT_FOUND"),
        ("/default/t", grpc.StatusCode.UNAVAILABLE, "NO_BROKER_AVAILABLE"),  # no broker registered
    ],
)
async def test_lookup_errors(
    discovery: pb_grpc.DiscoveryStub, topic: str, status: grpc.StatusCode, code: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await discovery.TopicLookup(pb.TopicLookupRequest(request_id=1, topic=topic), timeout=5)
    assert info.value.code() == status
    assert (MD_ERROR_CODE, code) in tuple(info.value.trailing_metadata() or ())


async def test_bootstrap_namespace_and_ready_info(lookup: ServiceReady, etcd_resources: Resources) -> None:
    assert await etcd_resources.namespace_exists("default")
    assert lookup.url == f"http://{lookup.addr}" and lookup.addr.startswith("127.0.0.1:")
    assert lookup.admin_addr != lookup.addr
