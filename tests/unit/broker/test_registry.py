"""The broker registry on an in-memory metadata store: ownership, ids, expiry, unload."""

from __future__ import annotations

from typing import Any

import pytest

from danube_broker.dispatch.base import SubType
from danube_broker.registry import BrokerRegistry
from danube_common.errors import (
    ConsumerNotFound,
    DispatchStrategyMismatch,
    InvalidTopicName,
    MessageTooLarge,
    NamespaceNotFound,
    PermissionDenied,
    ProducerNotFound,
    ServiceShuttingDown,
    SubscriptionNotFound,
    TopicNotFound,
    TopicNotOwned,
    Unavailable,
)
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.records import BrokerRecord
from danube_common.resources import Resources
from danube_common.security.handles import check_handle_use
from danube_common.security.principal import AuthSource, Principal, PrincipalType
from danube_common.security.rbac import Authorizer, Binding, Resource, Scope, StaticPolicy
from danube_common.security.rules import Handle, HandleInfo
from danube_common.topic_name import TopicName
from tests.unit.broker.fake_log import FakeLogs
from tests.unit.broker.helpers import BROKER_URL, Clock, config, msgs

pytestmark = pytest.mark.unit

TOPIC = "/default/orders"


@pytest.fixture
async def resources(memory_store: MemoryStore) -> Resources:
    res = Resources(memory_store, Keys("unit"))
    await res.create_namespace("default")
    return res


def registry(resources: Resources, clock: Clock | None = None, **cfg: Any) -> BrokerRegistry:
    return BrokerRegistry(
        config(**cfg),
        resources,
        broker_url=BROKER_URL,
        clock=clock or Clock(),
        id_seed=5000,
        open_log=FakeLogs(),
    )


async def test_first_producer_claims_the_topic_and_creates_its_metadata(resources: Resources) -> None:
    reg = registry(resources)
    p = await reg.create_producer(TOPIC, "p1", exclusive=False, dispatch_strategy="non_reliable")
    own = await resources.get_owner(TopicName.parse(TOPIC))
    assert own is not None and own.broker_id == "b1"
    assert reg.topics[TOPIC].epoch == own.epoch
    rec = await resources.get_topic(TopicName.parse(TOPIC))
    assert rec is not None and rec.dispatch_strategy == "non_reliable"
    again = await reg.create_producer(TOPIC, "p1", exclusive=False, dispatch_strategy="non_reliable")
    assert again is p
    other = await reg.create_producer(TOPIC, "p2", exclusive=False, dispatch_strategy="non_reliable")
    assert other.id > p.id > 5000


async def test_reliable_topic_keeps_its_strategy_and_refuses_a_mismatch(resources: Resources) -> None:
    reg = registry(resources)
    await reg.create_producer(TOPIC, "p1", exclusive=False, dispatch_strategy="reliable")
    rec = await resources.get_topic(TopicName.parse(TOPIC))
    assert rec is not None and rec.dispatch_strategy == "reliable"
    with pytest.raises(DispatchStrategyMismatch):
        await reg.create_producer(TOPIC, "p2", exclusive=False, dispatch_strategy="non_reliable")


async def test_topic_owned_by_another_broker_redirects(resources: Resources) -> None:
    t = TopicName.parse(TOPIC)
    await resources.store.put(
        resources.keys.broker("b2"), BrokerRecord("b2", "h2:1", "http://h2:1").to_json()
    )
    await resources.assign_if_unowned(t, "b2")
    reg = registry(resources)
    with pytest.raises(TopicNotOwned) as err:
        await reg.create_producer(TOPIC, "p1", exclusive=False, dispatch_strategy="non_reliable")
    assert err.value.redirect == "http://h2:1"
    assert TOPIC not in reg.topics


async def test_subscribe_needs_an_existing_topic(resources: Resources) -> None:
    reg = registry(resources)
    with pytest.raises(TopicNotFound, match="create"):
        await reg.subscribe(TOPIC, subscription="s", consumer_name="c", sub_type=SubType.SHARED)
    assert await resources.get_owner(TopicName.parse(TOPIC)) is None, "a missing topic is not claimed"
    await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")
    c = await reg.subscribe(TOPIC, subscription="s", consumer_name="c", sub_type=SubType.SHARED)
    assert reg.consumer(c.id) is c


ALICE = Principal(PrincipalType.USER, "alice", AuthSource.JWT, subject="alice")
BOB = Principal(PrincipalType.USER, "bob", AuthSource.JWT, subject="bob")
ROOT = Principal(PrincipalType.USER, "root", AuthSource.JWT, subject="root")


@pytest.mark.parametrize("dispatch", ["non_reliable", "reliable"])
async def test_handles_record_their_creator_and_are_not_taken_over_by_name(
    resources: Resources, dispatch: str
) -> None:
    """With auth on, a producer or consumer remembers who created it (the interceptor lets only
    that principal use its id), and a CreateProducer / Subscribe naming another principal's
    producer or consumer is refused: the id it would hand back is not the caller's."""
    authorizer = Authorizer(
        StaticPolicy(bindings=[Binding("b", "user:bob", "producer", Scope.TOPIC, TOPIC)]),
        super_admins=["root"],
    )
    reg = registry(resources)
    reg.takeover_check = lambda who, handle, info, name: check_handle_use(
        authorizer, who, handle, info, by_name=name
    )
    p = await reg.create_producer(TOPIC, "p1", exclusive=False, dispatch_strategy=dispatch, principal=ALICE)
    c = await reg.subscribe(
        TOPIC, subscription="s", consumer_name="c1", sub_type=SubType.SHARED, principal=ALICE
    )
    assert reg.handle_info(Handle("producer", p.id)) == HandleInfo(Resource.topic(TOPIC), "user:alice")
    assert reg.handle_info(Handle("consumer", c.id)) == HandleInfo(Resource.topic(TOPIC), "user:alice")
    assert reg.handle_info(Handle("consumer", 1)) is None

    # The creator reconnects: the same handles.
    again = await reg.create_producer(
        TOPIC, "p1", exclusive=False, dispatch_strategy=dispatch, principal=ALICE
    )
    assert again is p
    back = await reg.subscribe(
        TOPIC, subscription="s", consumer_name="c1", sub_type=SubType.SHARED, principal=ALICE
    )
    assert back is c
    # Another principal naming them is refused; under other names it gets its own.
    with pytest.raises(PermissionDenied, match=r"user:bob may not take over producer \d+ \('p1'\)"):
        await reg.create_producer(TOPIC, "p1", exclusive=False, dispatch_strategy=dispatch, principal=BOB)
    with pytest.raises(PermissionDenied, match="choose another consumer name"):
        await reg.subscribe(
            TOPIC, subscription="s", consumer_name="c1", sub_type=SubType.SHARED, principal=BOB
        )
    mine = await reg.create_producer(TOPIC, "p2", exclusive=False, dispatch_strategy=dispatch, principal=BOB)
    assert mine.creator == "user:bob" and p.creator == "user:alice"
    # A super admin may take one over (it keeps its creator); without auth names are free.
    assert (
        await reg.create_producer(TOPIC, "p1", exclusive=False, dispatch_strategy=dispatch, principal=ROOT)
        is p
    )
    assert p.creator == "user:alice"
    assert await reg.create_producer(TOPIC, "p1", exclusive=False, dispatch_strategy=dispatch) is p


async def test_bad_names_and_missing_namespaces(resources: Resources) -> None:
    reg = registry(resources)
    with pytest.raises(InvalidTopicName, match="/namespace/topic"):
        await reg.create_producer("no-slash", "p", exclusive=False, dispatch_strategy="non_reliable")
    with pytest.raises(NamespaceNotFound):
        await reg.create_producer("/nope/t", "p", exclusive=False, dispatch_strategy="non_reliable")


async def test_auto_create_off_leaves_unowned_topics_to_the_lookup(resources: Resources) -> None:
    reg = registry(resources, auto_create_topics=False)
    with pytest.raises(TopicNotOwned):
        await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")


def test_oversized_payload_names_size_and_limit(resources: Resources) -> None:
    reg = registry(resources, max_message_size_bytes=100)
    assert reg.payload_bytes(msgs(3, size=100)) == 300
    with pytest.raises(MessageTooLarge) as err:
        reg.payload_bytes(msgs(2, size=10) + msgs(1, size=101))
    assert "101" in err.value.message and "100" in err.value.message and "message 2" in err.value.message


async def test_unknown_ids(resources: Resources) -> None:
    reg = registry(resources)
    with pytest.raises(ProducerNotFound):
        reg.producer(42)
    with pytest.raises(TopicNotOwned):
        reg.producer(42, topic_hint="/default/elsewhere")
    with pytest.raises(ConsumerNotFound):
        reg.consumer(43)
    with pytest.raises(Unavailable):
        reg.consumer_for_stream(43)
    with pytest.raises(TopicNotOwned):
        reg.subscription_for_ack("/default/elsewhere", "s")
    await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")
    with pytest.raises(SubscriptionNotFound):
        reg.subscription_for_ack(TOPIC, "nope")
    assert reg.health("producer", 42) is False and reg.health("consumer", 43) is False


# ---------------------------------------------------------------- expiry (injectable clock)
async def test_idle_producer_expires_unless_it_shows_activity(resources: Resources) -> None:
    clock = Clock()
    reg = registry(resources, clock, producer_idle_timeout_s=30)
    p = await reg.create_producer(TOPIC, "p", exclusive=True, dispatch_strategy="non_reliable")
    clock.advance(20)
    assert reg.health("producer", p.id)  # a health check is activity
    clock.advance(20)
    reg.sweep()
    assert reg.producer(p.id) is p
    reg.publish_stream_opened(p)  # an open stream never expires
    clock.advance(100)
    reg.sweep()
    assert p.live
    reg.publish_stream_closed(p)
    clock.advance(31)
    reg.sweep()
    assert not p.live and p.id not in reg.producers
    assert reg.health("producer", p.id) is False
    # The exclusive slot is free again.
    await reg.create_producer(TOPIC, "other", exclusive=True, dispatch_strategy="non_reliable")


async def test_disconnected_consumer_expires_after_the_grace_and_the_subscription_after_idle(
    resources: Resources,
) -> None:
    clock = Clock()
    reg = registry(resources, clock, consumer_reconnect_grace_s=10, subscription_idle_timeout_s=60)
    await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")
    c = await reg.subscribe(TOPIC, subscription="s", consumer_name="c", sub_type=SubType.EXCLUSIVE)
    session = c.open_stream()
    clock.advance(100)
    reg.sweep()
    assert reg.consumer(c.id) is c, "a connected consumer never expires"
    reg.stream_closed(c, session)
    clock.advance(8)
    assert reg.health("consumer", c.id)  # health checks keep a stream-less consumer
    clock.advance(8)
    reg.sweep()
    assert reg.consumer(c.id) is c
    clock.advance(11)
    reg.sweep()
    assert c.id not in reg.consumers and c.closed
    topic = reg.topics[TOPIC]
    assert "s" in topic.subscriptions
    clock.advance(61)
    reg.sweep()
    assert "s" not in topic.subscriptions


async def test_close_consumer_with_unsubscribe_deletes_the_subscription(resources: Resources) -> None:
    reg = registry(resources)
    await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")
    a = await reg.subscribe(TOPIC, subscription="s", consumer_name="a", sub_type=SubType.SHARED)
    b = await reg.subscribe(TOPIC, subscription="s", consumer_name="b", sub_type=SubType.SHARED)
    await reg.close_consumer(a.id, unsubscribe=False)
    assert a.id not in reg.consumers and "s" in reg.topics[TOPIC].subscriptions
    await reg.close_consumer(b.id, unsubscribe=True)
    assert "s" not in reg.topics[TOPIC].subscriptions
    await reg.close_consumer(b.id, unsubscribe=True)  # idempotent


# ---------------------------------------------------------------- ownership changes
async def test_unassignment_unloads_and_clients_are_told_to_look_up_again(resources: Resources) -> None:
    reg = registry(resources)
    p = await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")
    c = await reg.subscribe(TOPIC, subscription="s", consumer_name="c", sub_type=SubType.SHARED)
    session = c.open_stream()
    epoch = reg.topics[TOPIC].epoch
    reg.on_unassigned(TopicName.parse(TOPIC), epoch)  # an older event: ignored
    assert TOPIC in reg.topics
    reg.on_unassigned(TopicName.parse(TOPIC), epoch + 1)
    assert TOPIC not in reg.topics
    with pytest.raises(TopicNotOwned):
        await c.next_batch(session, 10)
    assert reg.health("consumer", c.id) is False and reg.health("producer", p.id) is False
    with pytest.raises(TopicNotOwned):
        reg.producer(p.id)
    with pytest.raises(TopicNotOwned):
        reg.consumer_for_stream(c.id)
    # A load racing the unload must not resurrect the old epoch.
    reg.on_assigned(TopicName.parse(TOPIC), epoch)
    assert TOPIC not in reg.topics
    reg.on_assigned(TopicName.parse(TOPIC), epoch + 5)
    assert reg.topics[TOPIC].epoch == epoch + 5


async def test_shutdown_unloads_everything_and_refuses_new_clients(resources: Resources) -> None:
    reg = registry(resources)
    await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")
    reg.begin_shutdown()
    held = reg.close_all("stopping")
    assert [(o.topic, o.broker_id) for o in held] == [(TOPIC, "b1")]
    assert not reg.topics
    with pytest.raises(ServiceShuttingDown):
        await reg.create_producer(TOPIC, "p", exclusive=False, dispatch_strategy="non_reliable")
