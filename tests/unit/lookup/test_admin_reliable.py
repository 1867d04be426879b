"""The admin API for reliable topics over the in-memory store: durability and retention at
creation, subscription policies (validation, storage), and GetTopicStats forwarded to the
owning broker (a fake BrokerStatsService on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from danube_common.errors import (
    FailedPrecondition,
    InvalidArgument,
    InvalidTopicName,
    NotFound,
    Timeout,
    TopicNotFound,
    TopicNotOwned,
    Unauthenticated,
    Unavailable,
)
from danube_common.etcd_server import free_port
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.policies import SubscriptionPolicyRecord, topic_policies
from danube_common.resources import Resources
from danube_common.topic_name import TopicName
from tests.unit.lookup.fake_stats import register, stats_broker
from tests.unit.lookup.test_admin_api import Admin

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

CTX: Any = None


@pytest.fixture
async def res(memory_store: MemoryStore) -> Resources:
    r = Resources(memory_store, Keys("c"))
    await r.create_namespace("default")
    return r


@pytest.fixture
async def admin(res: Resources) -> AsyncIterator[Admin]:
    a = Admin(res, broker_rpc_timeout_s=0.5)
    yield a
    await a.stats.aclose()


async def create(admin: Admin, name: str, **fields: Any) -> apb.TopicInfo:
    return (await admin.topics.CreateTopic(apb.CreateTopicRequest(name=name, **fields), CTX)).topic


# ---------------------------------------------------------------------------- durability, retention


async def test_reliable_topic_keeps_durability_and_retention_in_every_record(
    admin: Admin, res: Resources
) -> None:
    created = await create(
        admin,
        "/default/p",
        partitions=2,
        dispatch_strategy="reliable",
        durability="cloud",
        retention_time_s=3600,
        retention_size_bytes=10_000,
    )
    expected = {"durability": "cloud", "retention_time_s": 3600, "retention_size_bytes": 10_000}
    for name in ("/default/p", "/default/p-part-0", "/default/p-part-1"):
        rec = await res.get_topic(TopicName.parse(name))
        assert rec is not None and rec.policies == expected, name
    assert (created.durability, created.retention_time_s, created.retention_size_bytes) == (
        "cloud",
        3600,
        10_000,
    )
    assert {p.durability for p in created.partition_topics} == {"cloud"}

    await create(admin, "/default/r", dispatch_strategy="reliable")  # durability defaults to fsync
    await create(admin, "/default/plain")
    listed = {t.name: t for t in (await admin.topics.ListTopics(apb.ListTopicsRequest(), CTX)).topics}
    assert (listed["/default/r"].durability, listed["/default/r"].retention_time_s) == ("fsync", 0)
    assert listed["/default/plain"].durability == "" and listed["/default/p"].retention_size_bytes == 10_000
    described = await admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/default/r"), CTX)
    assert described.durability == "fsync"
    plain = await res.get_topic(TopicName.parse("/default/plain"))
    assert plain is not None and plain.policies == {}


async def test_list_and_describe_show_the_compaction_threshold_in_force(admin: Admin, res: Resources) -> None:
    """The namespace's default, a topic's own over it (on a partitioned topic: every partition),
    nothing on a non-reliable topic."""
    await res.update_namespace_policies("default", {"compaction_threshold_bytes": 4096})
    await create(admin, "/default/r", dispatch_strategy="reliable")
    await create(admin, "/default/p", partitions=2, dispatch_strategy="reliable")
    await create(admin, "/default/plain")
    await admin.topics.SetTopicPolicies(
        apb.SetTopicPoliciesRequest(
            name="/default/p", policies=apb.NamespacePolicies(compaction_threshold_bytes=1 << 20)
        ),
        CTX,
    )
    listed = {t.name: t for t in (await admin.topics.ListTopics(apb.ListTopicsRequest(), CTX)).topics}
    assert listed["/default/r"].compaction_threshold_bytes == 4096
    assert listed["/default/p"].compaction_threshold_bytes == 1 << 20
    assert {p.compaction_threshold_bytes for p in listed["/default/p"].partition_topics} == {1 << 20}
    assert listed["/default/plain"].compaction_threshold_bytes == 0
    described = await admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/default/p-part-1"), CTX)
    assert described.compaction_threshold_bytes == 1 << 20
    described = await admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/default/r"), CTX)
    assert described.compaction_threshold_bytes == 4096


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"durability": "fsync"}, "apply to reliable topics only"),
        ({"retention_time_s": 60}, "retention_time_s=60"),
        ({"dispatch_strategy": "non_reliable", "retention_size_bytes": 1}, "reliable topics only"),
        ({"dispatch_strategy": "reliable", "durability": "sometimes"}, "fsync, none, cloud"),
        ({"dispatch_strategy": "reliable", "durability": "none", "partitions": 2000}, "partitions"),
    ],
)
async def test_create_refuses_bad_reliability_options(
    admin: Admin, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message) as info:
        await create(admin, "/default/t", **fields)
    assert info.value.grpc_status == grpc.StatusCode.INVALID_ARGUMENT
    assert not (await admin.topics.ListTopics(apb.ListTopicsRequest(), CTX)).topics


def test_topic_policies_table() -> None:
    assert topic_policies("non_reliable") == {}
    assert topic_policies("reliable") == {
        "durability": "fsync",
        "retention_time_s": 0,
        "retention_size_bytes": 0,
    }
    assert topic_policies("reliable", durability="none", retention_size_bytes=5)["durability"] == "none"
    with pytest.raises(InvalidArgument, match="retention_time_s must be 0"):
        topic_policies("reliable", retention_time_s=-1)


# ---------------------------------------------------------------------------- subscription policies


def policy(**fields: Any) -> apb.SubscriptionPolicy:
    return apb.SubscriptionPolicy(**fields)


async def set_policy(
    admin: Admin, topic: str, sub: str, p: apb.SubscriptionPolicy
) -> apb.SubscriptionPolicyResponse:
    req = apb.SetSubscriptionPolicyRequest(topic=topic, subscription=sub, policy=p)
    return await admin.topics.SetSubscriptionPolicy(req, CTX)


async def get_policy(admin: Admin, topic: str, sub: str) -> apb.SubscriptionPolicyResponse:
    req = apb.GetSubscriptionPolicyRequest(topic=topic, subscription=sub)
    return await admin.topics.GetSubscriptionPolicy(req, CTX)


async def test_subscription_policy_is_stored_for_the_topic_and_its_partitions(
    admin: Admin, res: Resources
) -> None:
    await create(admin, "/default/p", partitions=3, dispatch_strategy="reliable")
    p = policy(
        max_redeliveries=5,
        ack_timeout_ms=30_000,
        redelivery_backoff_base_ms=100,
        redelivery_backoff_max_ms=10_000,
        poison_policy="dead_letter",
        dead_letter_topic="/default/p-dlq",
    )
    resp = await set_policy(admin, "/default/p", "billing", p)
    assert resp.policy == p and (resp.topic, resp.subscription) == ("/default/p", "billing")
    expected = {
        "max_redeliveries": 5,
        "ack_timeout_ms": 30_000,
        "redelivery_backoff_base_ms": 100,
        "redelivery_backoff_max_ms": 10_000,
        "poison_policy": "dead_letter",
        "dead_letter_topic": "/default/p-dlq",
    }
    for name in ("/default/p", *(f"/default/p-part-{i}" for i in range(3))):
        kv = await res.store.get(res.keys.subscription_policy(TopicName.parse(name), "billing"))
        assert kv is not None and kv.json() == expected, name
    assert (await get_policy(admin, "/default/p", "billing")).policy == p
    assert (await get_policy(admin, "/default/p-part-2", "billing")).policy == p
    # Replacing it replaces every copy, and nothing of the earlier policy is kept.
    await set_policy(admin, "/default/p", "billing", policy(poison_policy="drop"))
    got = await get_policy(admin, "/default/p-part-1", "billing")
    assert got.policy == policy(poison_policy="drop")
    assert [f.name for f, _ in got.policy.ListFields()] == ["poison_policy"]
    for name in ("/default/p", *(f"/default/p-part-{i}" for i in range(3))):
        kv = await res.store.get(res.keys.subscription_policy(TopicName.parse(name), "billing"))
        assert kv is not None and kv.json() == {"poison_policy": "drop"}, name
    # The policy key is below the subscription, not a subscription of its own.
    described = await admin.topics.DescribeTopic(apb.DescribeTopicRequest(name="/default/p"), CTX)
    assert list(described.subscriptions) == []


async def test_a_partial_policy_stores_only_the_given_fields(admin: Admin, res: Resources) -> None:
    """The bug this pins: fields not given must not be stored as 0 (ack_timeout_ms 0 would
    switch redelivery off); the broker's defaults apply to them."""
    await create(admin, "/default/r", dispatch_strategy="reliable")
    p = policy(max_redeliveries=5, poison_policy="dead_letter", dead_letter_topic="/default/r-dlq")
    resp = await set_policy(admin, "/default/r", "s", p)
    assert resp.policy == p
    assert not any(resp.policy.HasField(f) for f in ("ack_timeout_ms", "redelivery_backoff_base_ms"))
    kv = await res.store.get(res.keys.subscription_policy(TopicName.parse("/default/r"), "s"))
    assert kv is not None
    assert kv.json() == {
        "max_redeliveries": 5,
        "poison_policy": "dead_letter",
        "dead_letter_topic": "/default/r-dlq",
    }
    got = await get_policy(admin, "/default/r", "s")
    assert got.policy == p and not got.policy.HasField("ack_timeout_ms")
    # One field alone is a policy too; an explicit 0 is stored (it is not "unset").
    await set_policy(admin, "/default/r", "s", policy(ack_timeout_ms=0))
    kv = await res.store.get(res.keys.subscription_policy(TopicName.parse("/default/r"), "s"))
    assert kv is not None and kv.json() == {"ack_timeout_ms": 0}
    # A dead_letter_topic with the poison policy left to the broker is accepted.
    await set_policy(admin, "/default/r", "s", policy(dead_letter_topic="/default/r-dlq"))
    kv = await res.store.get(res.keys.subscription_policy(TopicName.parse("/default/r"), "s"))
    assert kv is not None and kv.json() == {"dead_letter_topic": "/default/r-dlq"}


async def test_backoff_bounds_are_compared_only_when_both_are_given(admin: Admin, res: Resources) -> None:
    await create(admin, "/default/r", dispatch_strategy="reliable")
    key = res.keys.subscription_policy(TopicName.parse("/default/r"), "s")
    # Either one alone is fine, whatever the broker's default of the other is.
    for p in (policy(redelivery_backoff_base_ms=120_000), policy(redelivery_backoff_max_ms=10)):
        await set_policy(admin, "/default/r", "s", p)
        kv = await res.store.get(key)
        assert kv is not None and kv.json() == {f.name: v for f, v in p.ListFields()}
    with pytest.raises(InvalidArgument, match=r"redelivery_backoff_max_ms \(10\) must be at least"):
        await set_policy(
            admin, "/default/r", "s", policy(redelivery_backoff_base_ms=20, redelivery_backoff_max_ms=10)
        )
    kv = await res.store.get(key)
    assert kv is not None and kv.json() == {"redelivery_backoff_max_ms": 10}  # the refused one left no trace


async def test_an_unset_policy_comes_back_empty(admin: Admin) -> None:
    await create(admin, "/default/r", dispatch_strategy="reliable")
    resp = await get_policy(admin, "/default/r", "nobody-set-this")
    assert not resp.HasField("policy") and resp.subscription == "nobody-set-this"


@pytest.mark.parametrize(
    ("p", "message"),
    [
        (policy(), "sets nothing: pass at least one option"),
        (policy(poison_policy="retry"), "poison_policy must be one of dead_letter, drop, block"),
        (policy(poison_policy=""), "poison_policy must be one of .* got ''"),
        (policy(poison_policy="dead_letter"), "needs a dead_letter_topic"),
        (policy(poison_policy="dead_letter", dead_letter_topic=""), "needs a dead_letter_topic"),
        (policy(dead_letter_topic=""), "invalid topic name ''"),
        (policy(dead_letter_topic="/default/r"), "is the topic itself"),
        (policy(poison_policy="dead_letter", dead_letter_topic="dlq"), "invalid topic name 'dlq'"),
        (policy(poison_policy="dead_letter", dead_letter_topic="/default/r"), "is the topic itself"),
        (policy(poison_policy="dead_letter", dead_letter_topic="/default/r-part-1"), "is the topic itself"),
        (
            policy(poison_policy="drop", dead_letter_topic="/default/dlq"),
            "only used with poison_policy dead_letter",
        ),
        (
            policy(poison_policy="block", redelivery_backoff_base_ms=500, redelivery_backoff_max_ms=0),
            "must be at least",
        ),
        (
            policy(dead_letter_topic="/default/dlq", poison_policy="block"),
            "only used with poison_policy dead_letter",
        ),
        (policy(max_redeliveries=4_000_000), "max_redeliveries must be between"),
        (policy(poison_policy="block", redelivery_backoff_max_ms=10**12), "between 0 and"),
        (policy(poison_policy="block", ack_timeout_ms=10**12), "ack_timeout_ms must be between"),
        (policy(poison_policy="block", max_redeliveries=4_000_000), "max_redeliveries must be between"),
    ],
)
async def test_bad_policies_are_refused_and_nothing_is_stored(
    admin: Admin, res: Resources, p: apb.SubscriptionPolicy, message: str
) -> None:
    await create(admin, "/default/r", dispatch_strategy="reliable")
    with pytest.raises(InvalidArgument, match=message):
        await set_policy(admin, "/default/r", "s", p)
    assert await res.get_subscription_policy(TopicName.parse("/default/r"), "s") is None


async def test_policy_requests_about_the_wrong_thing(admin: Admin) -> None:
    await create(admin, "/default/plain")
    with pytest.raises(InvalidArgument, match="apply to reliable topics only"):
        await set_policy(admin, "/default/plain", "s", policy(poison_policy="drop"))
    with pytest.raises(TopicNotFound):
        await set_policy(admin, "/default/ghost", "s", policy(poison_policy="drop"))
    with pytest.raises(TopicNotFound):
        await get_policy(admin, "/default/ghost", "s")
    await create(admin, "/default/r", dispatch_strategy="reliable")
    for bad_sub in ("", "a/b", "has space"):
        with pytest.raises(InvalidArgument, match="invalid subscription name"):
            await set_policy(admin, "/default/r", bad_sub, policy(poison_policy="drop"))
    with pytest.raises(InvalidArgument, match="policy is required"):
        await admin.topics.SetSubscriptionPolicy(
            apb.SetSubscriptionPolicyRequest(topic="/default/r", subscription="s"), CTX
        )
    with pytest.raises(InvalidTopicName):
        await get_policy(admin, "r", "s")


def test_policy_record_round_trips_json() -> None:
    rec = SubscriptionPolicyRecord(3, 1000, 10, 20, "dead_letter", "/d/dlq")
    assert SubscriptionPolicyRecord.from_json(rec.to_json()) == rec
    partial = SubscriptionPolicyRecord(max_redeliveries=0, poison_policy="drop")
    assert partial.to_json() == {"max_redeliveries": 0, "poison_policy": "drop"}
    assert SubscriptionPolicyRecord.from_json(partial.to_json()) == partial
    assert SubscriptionPolicyRecord().to_json() == {}
    assert (
        SubscriptionPolicyRecord.from_json({"poison_policy": "drop", "future_field": 1}).poison_policy
        == "drop"
    )


# ---------------------------------------------------------------------------- topic stats


async def test_stats_are_forwarded_to_the_owner(admin: Admin, res: Resources) -> None:
    async with stats_broker("b1") as b1, stats_broker("b2") as b2:
        await register(res.store, res.keys, "b1", b1.addr)
        await register(res.store, res.keys, "b2", b2.addr)
        created = await create(admin, "/default/p", partitions=2, dispatch_strategy="reliable")
        owners = {p.name: p.broker_id for p in created.partition_topics}
        fakes = {"b1": b1, "b2": b2}
        for name, broker_id in owners.items():
            expected = fakes[broker_id].sample(name)
            got = await admin.topics.GetTopicStats(apb.TopicStatsRequest(name=name), CTX)
            assert got == expected
        assert sorted(r.name for r in b1.requests + b2.requests) == sorted(owners)
        assert all(len(f.requests) == 1 for f in fakes.values())  # each asked only for its own


async def test_stats_errors_say_what_is_wrong(admin: Admin, res: Resources) -> None:
    stats = admin.topics.GetTopicStats
    with pytest.raises(TopicNotFound):
        await stats(apb.TopicStatsRequest(name="/default/ghost"), CTX)
    await create(admin, "/default/p", partitions=2, dispatch_strategy="reliable")  # no broker: unassigned
    with pytest.raises(NotFound, match=r"stats are per partition: ask for one of /default/p-part-0"):
        await stats(apb.TopicStatsRequest(name="/default/p"), CTX)
    with pytest.raises(NotFound, match="not assigned to a broker yet") as info:
        await stats(apb.TopicStatsRequest(name="/default/p-part-0"), CTX)
    assert info.value.grpc_status == grpc.StatusCode.NOT_FOUND

    # Owned by a broker whose registration is gone.
    await res.assign_if_unowned(TopicName.parse("/default/p-part-0"), "ghost-broker")
    with pytest.raises(Unavailable, match="owned by broker ghost-broker, which is not registered"):
        await stats(apb.TopicStatsRequest(name="/default/p-part-0"), CTX)

    # Registered, but nothing answers at its address.
    await register(res.store, res.keys, "down", f"127.0.0.1:{free_port()}")
    await res.assign_if_unowned(TopicName.parse("/default/p-part-1"), "down")
    with pytest.raises(
        Unavailable, match=r"broker down \(owner of /default/p-part-1\) at 127\.0\.0\.1:\d+ is unreachable"
    ):
        await stats(apb.TopicStatsRequest(name="/default/p-part-1"), CTX)


async def test_stats_deadline_and_broker_errors(admin: Admin, res: Resources) -> None:
    async with stats_broker("slow") as slow:
        await register(res.store, res.keys, "slow", slow.addr)
        await create(admin, "/default/t", dispatch_strategy="reliable")
        req = apb.TopicStatsRequest(name="/default/t")
        # The broker's own error passes through (it says the topic is not there).
        with pytest.raises(TopicNotOwned, match="not served by slow"):
            await admin.topics.GetTopicStats(req, CTX)
        slow.sample("/default/t")
        slow.hold.clear()
        with pytest.raises(Timeout, match=r"broker slow .* did not answer within 0\.5s"):
            await admin.topics.GetTopicStats(req, CTX)
        slow.hold.set()
        assert (await admin.topics.GetTopicStats(req, CTX)).next_offset == 110


async def test_a_broker_without_stats_service(admin: Admin, res: Resources) -> None:
    from danube_common.grpc_util import bind, new_server

    server = new_server()  # serves nothing: every method is UNIMPLEMENTED
    port = bind(server, "127.0.0.1:0")
    await server.start()
    try:
        await register(res.store, res.keys, "old", f"127.0.0.1:{port}")
        await create(admin, "/default/t", dispatch_strategy="reliable")
        with pytest.raises(FailedPrecondition, match="does not serve topic stats"):
            await admin.topics.GetTopicStats(apb.TopicStatsRequest(name="/default/t"), CTX)
    finally:
        await server.stop(grace=None)


async def test_stats_go_to_the_internal_listener_when_registered(admin: Admin, res: Resources) -> None:
    """A broker registered with an internal listener is asked there (where its mTLS sees the
    lookup's certificate), not at its client address (nothing listens there in this test). A
    broker that does not recognise the lookup is reported as its misconfiguration, not as the
    admin's missing credentials."""
    async with stats_broker("b1") as b1:
        await register(res.store, res.keys, "b1", f"127.0.0.1:{free_port()}", internal_addr=b1.addr)
        await create(admin, "/default/t", dispatch_strategy="reliable")
        expected = b1.sample("/default/t")
        assert await admin.topics.GetTopicStats(apb.TopicStatsRequest(name="/default/t"), CTX) == expected

        b1.refuse = Unauthenticated("Authentication credentials are missing (missing)")
        with pytest.raises(FailedPrecondition, match=r"did not recognise the lookup service") as info:
            await admin.topics.GetTopicStats(apb.TopicStatsRequest(name="/default/t"), CTX)
        assert "internal_listen_addr" in info.value.message and b1.addr in info.value.message
