"""Namespace policies end to end: set through the lookup's admin API (and the real
`danube-admin`), stored in real etcd, followed by an in-process broker's watch, pushed against
with the SDK. Every limit answers its own typed error; a change reaches running topics within a
second; the publish rate slows producers without dropping anything."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc.aio
import pytest

from danube_common.etcd_server import EtcdProcess
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.resources import Resources
from danube_common.service import ServiceReady
from danube_common.topic_name import TopicName
from danube_sdk import DanubeClient, DispatchStrategy, SubType
from danube_sdk.errors import (
    MessageTooLarge,
    QuotaExceeded,
    TooManyConsumers,
    TooManyProducers,
    TooManySubscriptions,
    TooManyTopics,
)
from tests.integration.test_admin_cli import cli
from tests.integration.test_broker_grpc import Broker, start_broker
from tests.support import unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

NS = "team"


class Env:
    def __init__(
        self,
        broker: Broker,
        admin: apb_grpc.NamespaceAdminStub,
        topics: apb_grpc.TopicAdminStub,
        res: Resources,
    ) -> None:
        self.broker = broker
        self.res = res
        self.admin = admin
        self.topics = topics
        self.client = DanubeClient(broker.info.url)

    async def set(self, *, clear: tuple[str, ...] = (), **policies: Any) -> apb.NamespacePolicies:
        resp = await self.admin.SetNamespacePolicies(
            apb.SetNamespacePoliciesRequest(name=NS, policies=apb.NamespacePolicies(**policies), clear=clear),
            timeout=5,
        )
        await self.seen()
        return resp.policies

    async def seen(self) -> None:
        """Wait until the broker's namespace view holds the namespace record as it is now: the
        view is fed by a watch, so a request right after a change may still meet the old policies."""
        kv = await self.res.store.get(self.res.keys.namespace(NS))
        assert kv is not None, f"namespace {NS} not in etcd"
        limits = self.broker.registry.ns_limits
        assert limits is not None, "the broker applies no namespace policies"
        assert await limits.view.wait_revision(kv.mod_revision), "the broker's namespace view lags"

    async def applied(self, topic: str, check: Any) -> float:
        """Seconds until the broker's loaded ``topic`` satisfies ``check(limits)``."""
        start = time.monotonic()
        await wait_until(
            lambda: topic in self.broker.registry.topics and check(self.broker.registry.topics[topic].limits),
            timeout_s=5,
            what=f"policy applied to {topic}",
        )
        return time.monotonic() - start


@pytest.fixture
async def env(
    etcd_server: EtcdProcess, cluster_name: str, lookup: ServiceReady, etcd_resources: Resources
) -> AsyncIterator[Env]:
    broker = await start_broker(etcd_server, cluster_name)
    channel = grpc.aio.insecure_channel(lookup.admin_addr)
    e = Env(broker, apb_grpc.NamespaceAdminStub(channel), apb_grpc.TopicAdminStub(channel), etcd_resources)
    await e.admin.CreateNamespace(apb.NamespaceRequest(name=NS), timeout=5)
    await e.seen()
    try:
        yield e
    finally:
        await e.client.close()
        await channel.close()
        await broker.channel.close()
        if not broker.task.done():
            await broker.shutdown()


async def test_admission_limits_each_answer_their_own_error(env: Env, etcd_resources: Resources) -> None:
    await env.set(
        max_producers_per_topic=1, max_consumers_per_topic=2, max_subscriptions_per_topic=1, max_topics=2
    )
    topic = f"/{NS}/{unique('adm')}"
    p = await env.client.create_producer(topic, producer_name="p1")
    with pytest.raises(TooManyProducers, match="max_producers_per_topic=1"):
        await env.client.create_producer(topic, producer_name="p2")
    await env.client.subscribe(topic, subscription="s1", consumer_name="c1", sub_type=SubType.SHARED)
    with pytest.raises(TooManySubscriptions):
        await env.client.subscribe(topic, subscription="s2", consumer_name="c1", sub_type=SubType.SHARED)
    await env.client.subscribe(topic, subscription="s1", consumer_name="c2", sub_type=SubType.SHARED)
    with pytest.raises(TooManyConsumers):
        await env.client.subscribe(topic, subscription="s1", consumer_name="c3", sub_type=SubType.SHARED)
    await env.client.create_producer(f"/{NS}/{unique('second')}", producer_name="p")
    third = f"/{NS}/{unique('third')}"
    with pytest.raises(TooManyTopics, match="max_topics"):
        await env.client.create_producer(third, producer_name="p")
    # Refused before placement: no ownership, no record, nothing loaded for it.
    assert await etcd_resources.get_owner(TopicName.parse(third)) is None
    assert await etcd_resources.get_topic(TopicName.parse(third)) is None
    assert third not in env.broker.registry.topics
    await p.send(b"still fine")
    # The SDK is told the namespace's smaller size at CreateProducer.
    await env.set(max_message_size_bytes=64, clear=("max_producers_per_topic",))
    small = await env.client.create_producer(topic, producer_name="p2", enable_chunking=False)
    with pytest.raises(MessageTooLarge):
        await small.send(b"x" * 65)
    # A chunking producer (the default) sends it in chunks within the namespace's limit.
    chunking = await env.client.create_producer(topic, producer_name="p3")
    await chunking.send(b"x" * 65)


async def test_a_change_reaches_a_running_topic_within_a_second(env: Env) -> None:
    topic = f"/{NS}/{unique('live')}"
    p = await env.client.create_producer(topic, producer_name="p")
    await p.send(b"y" * 200)
    start = time.monotonic()
    await env.set(max_message_size_bytes=100)
    await env.applied(topic, lambda lim: lim is not None and lim.max_message_bytes == 100)
    assert time.monotonic() - start < 1.0
    with pytest.raises(MessageTooLarge, match="namespace team accepts at most 100 bytes"):
        await p.send(b"y" * 200)
    start = time.monotonic()
    await env.set(clear=("max_message_size_bytes",))
    await env.applied(topic, lambda lim: lim is None)
    assert time.monotonic() - start < 1.0
    await p.send(b"y" * 200)


async def test_publish_rate_slows_the_producer_and_drops_nothing(env: Env) -> None:
    rate, n = 200.0, 300
    topic = f"/{NS}/{unique('rate')}"
    await env.set(publish_rate_msgs_per_s=rate)
    p = await env.client.create_producer(
        topic, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    consumer = await env.client.subscribe(
        topic, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE
    )
    start = time.monotonic()
    acks = [await p.send_async(f"{i}".encode()) for i in range(n)]
    ids = await asyncio.gather(*acks)
    elapsed = time.monotonic() - start
    offsets = [m.offset for m in ids]
    assert offsets == sorted(offsets) and len(set(offsets)) == n
    # n messages at the rate take (n / rate) less the burst tolerance and the first batch.
    assert elapsed >= n / rate - 0.5, f"{n} messages in {elapsed:.2f}s: not slowed to {rate}/s"
    got = []
    while len(got) < n:
        msg = await consumer.receive(timeout_s=10)
        got.append(int(msg.payload))
        await consumer.ack(msg)
    assert got == list(range(n))
    limits = env.broker.registry.topics[topic].limits
    assert limits is not None and limits.rate_waits > 0


async def test_backlog_quota_refuse_answers_quota_exceeded(env: Env) -> None:
    topic = f"/{NS}/{unique('quota')}"
    await env.set(backlog_quota_messages=5, backlog_quota_policy="refuse")
    p = await env.client.create_producer(
        topic, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    consumer = await env.client.subscribe(
        topic, subscription="slow", consumer_name="c", sub_type=SubType.EXCLUSIVE
    )
    for i in range(5):
        await p.send(f"{i}".encode())
    with pytest.raises(QuotaExceeded, match="backlog_quota_messages"):
        await p.send(b"over")
    msg = await consumer.receive(timeout_s=10)
    await consumer.ack(msg)
    await consumer.flush_acks()
    await wait_until(
        lambda: env.broker.registry.topics[topic].subscriptions["slow"].backlog() == 4, what="ack applied"
    )
    await p.send(b"room again")


async def test_defaults_for_new_topics_and_bad_values(env: Env) -> None:
    await env.set(default_dispatch_strategy="reliable", default_durability="none", retention_time_s=3600)
    name = f"/{NS}/{unique('dflt')}"
    info = (await env.topics.CreateTopic(apb.CreateTopicRequest(name=name), timeout=10)).topic
    assert (info.dispatch_strategy, info.durability) == ("reliable", "none")
    given = (
        await env.topics.CreateTopic(
            apb.CreateTopicRequest(name=f"{name}-2", dispatch_strategy="reliable", durability="fsync"),
            timeout=10,
        )
    ).topic
    assert given.durability == "fsync"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await env.set(max_producers_per_topic=0)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "clear the policy" in (err.value.details() or "")
    got = await env.admin.GetNamespacePolicies(apb.NamespaceRequest(name=NS), timeout=5)
    assert got.policies.default_durability == "none" and not got.policies.HasField("max_producers_per_topic")


async def test_cli_get_and_set_policies(lookup: ServiceReady, env: Env) -> None:
    url = lookup.admin_url
    r = await cli(
        "namespaces", "set-policies", NS, "--max-topics", "7", "--publish-rate-msgs-per-s", "50", url=url
    )
    assert r.code == 0, r.err
    assert "max_topics" in r.out and "7" in r.out
    r = await cli("-o", "json", "namespaces", "get-policies", NS, url=url)
    assert r.code == 0, r.err
    policies = r.json()["policies"]
    assert policies["max_topics"] == 7 and policies["publish_rate_msgs_per_s"] == 50.0
    assert policies["max_producers_per_topic"] is None
    r = await cli("-o", "json", "namespaces", "set-policies", NS, "--clear", "max_topics", url=url)
    assert r.code == 0 and r.json()["policies"]["max_topics"] is None
    r = await cli("namespaces", "set-policies", NS, "--max-producers-per-topic", "0", url=url)
    assert r.code == 1 and "max_producers_per_topic must be between 1" in r.err
    r = await cli("namespaces", "set-policies", NS, url=url)
    assert r.code == 1 and "nothing to change" in r.err
    r = await cli("namespaces", "get-policies", "nope", url=url)
    assert r.code == 1 and "does not exist" in r.err


async def test_backlog_quota_hold_delays_the_ack_until_consumers_catch_up(env: Env) -> None:
    topic = f"/{NS}/{unique('hold')}"
    await env.set(backlog_quota_messages=5, backlog_quota_policy="hold")
    p = await env.client.create_producer(
        topic, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    consumer = await env.client.subscribe(
        topic, subscription="slow", consumer_name="c", sub_type=SubType.EXCLUSIVE
    )
    for i in range(5):
        await p.send(f"{i}".encode())
    held = await p.send_async(b"5")
    limits = env.broker.registry.topics[topic].limits
    assert limits is not None
    await wait_until(lambda: limits.backlog_waits == 1, what="the sixth message held")
    assert not held.done()
    msg = await consumer.receive(timeout_s=10)
    await consumer.ack(msg)
    await consumer.flush_acks()
    assert (await asyncio.wait_for(held, 10)).offset == 5


async def test_backlog_quota_evict_skips_the_oldest_unacknowledged(env: Env) -> None:
    topic = f"/{NS}/{unique('evict')}"
    await env.set(backlog_quota_messages=5, backlog_quota_policy="evict")
    p = await env.client.create_producer(
        topic, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    await env.client.subscribe(topic, subscription="slow", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    for i in range(8):
        await p.send(f"{i}".encode())
    t = env.broker.registry.topics[topic]
    assert t.subscriptions["slow"].backlog() == 5
    assert t.limits is not None and t.limits.evicted == 3


async def test_message_ttl_expires_unacknowledged_messages_with_a_counter(env: Env) -> None:
    topic = f"/{NS}/{unique('ttl')}"
    p = await env.client.create_producer(
        topic, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    await env.client.subscribe(topic, subscription="slow", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    for i in range(5):
        await p.send(f"{i}".encode())
    t = env.broker.registry.topics[topic]
    assert t.subscriptions["slow"].backlog() == 5
    await env.set(message_ttl_s=1)
    # Published over a second ago once the TTL loop (every second) looks: expired within ~3 s.
    await wait_until(lambda: t.subscriptions["slow"].backlog() == 0, timeout_s=10, what="messages expired")
    assert t.limits is not None and t.limits.expired == 5
    events = env.broker.registry.events
    assert events is not None
    assert events.policy_counts["expired"] == 5  # danube_broker_policy_messages{action="expired"}


async def test_dispatch_rate_paces_deliveries_to_a_subscription(env: Env) -> None:
    rate, n = 40.0, 60
    topic = f"/{NS}/{unique('disp')}"
    p = await env.client.create_producer(
        topic, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    consumer = await env.client.subscribe(topic, subscription="s", consumer_name="c", sub_type=SubType.SHARED)
    await env.set(dispatch_rate_msgs_per_s=rate)
    await env.applied(topic, lambda lim: lim is not None and lim.policies.dispatch_rate_msgs_per_s == rate)
    ids = await asyncio.gather(*[await p.send_async(f"{i}".encode()) for i in range(n)])
    assert len(ids) == n
    start = time.monotonic()
    got = []
    while len(got) < n:
        msg = await consumer.receive(timeout_s=10)
        got.append(int(msg.payload))
        await consumer.ack(msg)
    elapsed = time.monotonic() - start
    assert sorted(got) == list(range(n))
    assert elapsed >= n / rate - 0.5, f"{n} deliveries in {elapsed:.2f}s: not paced to {rate}/s"


async def test_cli_topics_create_in_a_full_namespace_says_what_to_do(lookup: ServiceReady, env: Env) -> None:
    url = lookup.admin_url
    assert (await cli("namespaces", "set-policies", NS, "--max-topics", "1", url=url)).code == 0
    r = await cli("topics", "create", f"/{NS}/one", url=url)
    assert r.code == 0, r.err
    r = await cli("topics", "create", f"/{NS}/two", "--partitions", "2", url=url)
    assert r.code == 1 and "allows 1 (max_topics)" in r.err, r.err
    assert "hint: see the namespace's limits" in r.err


async def test_retention_defaults_reach_running_reliable_topics(env: Env) -> None:
    by_producer = f"/{NS}/{unique('ret')}"
    p = await env.client.create_producer(
        by_producer, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    await p.send(b"x")
    by_admin = f"/{NS}/{unique('ret-admin')}"
    await env.topics.CreateTopic(
        apb.CreateTopicRequest(name=by_admin, dispatch_strategy="reliable", retention_size_bytes=1000),
        timeout=10,
    )
    q = await env.client.create_producer(
        by_admin, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    await q.send(b"x")
    regs = env.broker.registry.topics

    def retention(name: str) -> tuple[int, int]:
        rt = regs[name].reliable
        assert rt is not None
        return rt.policies.retention_time_s, rt.policies.retention_size_bytes

    assert retention(by_producer) == (0, 0) and retention(by_admin) == (0, 1000)
    start = time.monotonic()
    await env.set(retention_time_s=3600, retention_size_bytes=5000)
    # The producer's topic has no retention of its own: it follows the namespace at once. The
    # admin's recorded both (the namespace had no default when it was created): they stay.
    await wait_until(lambda: retention(by_producer) == (3600, 5000), timeout_s=5, what="retention applied")
    assert time.monotonic() - start < 1.0
    assert retention(by_admin) == (0, 1000)
    # Created now, with retention time left at 0: not recorded, so inherited (and followed).
    later = f"/{NS}/{unique('ret-later')}"
    await env.topics.CreateTopic(
        apb.CreateTopicRequest(name=later, dispatch_strategy="reliable", retention_size_bytes=1000),
        timeout=10,
    )
    r = await env.client.create_producer(
        later, producer_name="p", dispatch_strategy=DispatchStrategy.RELIABLE
    )
    await r.send(b"x")
    assert retention(later) == (3600, 1000)
    await env.set(retention_time_s=60)
    await wait_until(lambda: retention(later) == (60, 1000), timeout_s=5, what="the change followed")

    # One topic's own retention (topics set-policies) wins over what it was created with and
    # over its namespace's, on the running topic; cleared, the created one holds again.
    resp = await env.topics.SetTopicPolicies(
        apb.SetTopicPoliciesRequest(name=by_admin, policies=apb.NamespacePolicies(retention_time_s=120)),
        timeout=5,
    )
    assert (resp.own.retention_time_s, resp.effective.retention_time_s) == (120, 120)
    assert resp.effective.retention_size_bytes == 1000, "the size it was created with"
    await wait_until(
        lambda: retention(by_admin) == (120, 1000), timeout_s=5, what="the topic's own retention"
    )
    assert retention(later) == (60, 1000), "other topics keep theirs"
    # What describe and list say is what the brokers apply (own, created, namespace's).
    shown = {}
    for name in (by_admin, by_producer, later):
        info = await env.topics.DescribeTopic(apb.DescribeTopicRequest(name=name), timeout=5)
        shown[name] = (info.retention_time_s, info.retention_size_bytes)
    assert shown == {by_admin: (120, 1000), by_producer: (60, 5000), later: (60, 1000)}
    listed = await env.topics.ListTopics(apb.ListTopicsRequest(namespace=NS), timeout=5)
    assert {
        t.name: (t.retention_time_s, t.retention_size_bytes) for t in listed.topics if t.name in shown
    } == shown
    await env.topics.SetTopicPolicies(
        apb.SetTopicPoliciesRequest(name=by_admin, clear=["retention_time_s"]), timeout=5
    )
    await wait_until(lambda: retention(by_admin) == (0, 1000), timeout_s=5, what="the created retention back")
    with pytest.raises(grpc.aio.AioRpcError, match="non_reliable topic, which keeps nothing"):
        plain = f"/{NS}/{unique('plain')}"
        await env.topics.CreateTopic(apb.CreateTopicRequest(name=plain), timeout=10)
        await env.topics.SetTopicPolicies(
            apb.SetTopicPoliciesRequest(name=plain, policies=apb.NamespacePolicies(retention_size_bytes=1)),
            timeout=5,
        )


async def test_a_topic_overrides_its_namespace_limits_on_the_running_topic(
    lookup: ServiceReady, env: Env
) -> None:
    """``topics set-policies`` (the CLI, through the lookup's admin API) tightens one topic below its
    namespace's limit while the topic runs: the broker applies it within a second, other topics
    of the namespace keep the namespace's; clearing it gives the namespace's back."""
    url = lookup.admin_url
    await env.set(max_producers_per_topic=3)
    tight, other = f"/{NS}/{unique('tight')}", f"/{NS}/{unique('other')}"
    await env.client.create_producer(tight, producer_name="p1")
    await env.client.create_producer(other, producer_name="p1")
    start = time.monotonic()
    r = await cli("topics", "set-policies", tight, "--max-producers-per-topic", "1", url=url)
    assert r.code == 0, r.err
    await env.applied(tight, lambda lim: lim is not None and lim.policies.max_producers_per_topic == 1)
    assert time.monotonic() - start < 1.0 + 2.0  # the CLI's own start-up, then under a second
    with pytest.raises(TooManyProducers, match="max_producers_per_topic=1"):
        await env.client.create_producer(tight, producer_name="p2")
    await env.client.create_producer(other, producer_name="p2")  # the namespace's 3 still hold there
    r = await cli("-o", "json", "topics", "get-policies", tight, url=url)
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["own"]["max_producers_per_topic"] == 1 and doc["effective"]["max_producers_per_topic"] == 1
    assert doc["own"]["publish_rate_msgs_per_s"] is None
    # Only limits: a namespace-wide policy is refused with what a topic may set.
    r = await cli("topics", "set-policies", tight, "--max-producers-per-topic", "0", url=url)
    assert r.code == 1 and "must be between 1" in r.err
    with pytest.raises(grpc.aio.AioRpcError, match="only a namespace sets"):
        await env.topics.SetTopicPolicies(
            apb.SetTopicPoliciesRequest(name=tight, policies=apb.NamespacePolicies(max_topics=1)), timeout=5
        )
    r = await cli(
        "-o", "json", "topics", "set-policies", tight, "--clear", "max_producers_per_topic", url=url
    )
    assert r.code == 0 and r.json()["effective"]["max_producers_per_topic"] == 3
    await env.applied(tight, lambda lim: lim is not None and lim.policies.max_producers_per_topic == 3)
    await env.client.create_producer(tight, producer_name="p2")
    r = await cli("topics", "get-policies", f"/{NS}/no-such-topic", url=url)
    assert r.code == 1 and "does not exist" in r.err
