"""The broker's schema gate: producers' schema references and publish checks per policy."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import fastavro
import pytest

from danube_broker.schema_gate import ProducerSchema, SchemaGate
from danube_common.errors import FailedPrecondition, IncompatibleSchema, InvalidPayload, NotFound
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.resources import Resources
from danube_common.schema_store import SchemaStore, TopicSchemaConfig
from danube_common.schema_view import SchemaView
from danube_common.topic_name import TopicName

pytestmark = pytest.mark.unit

PERSON = json.dumps(
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name"],
    }
).encode()
AVRO = json.dumps(
    {
        "type": "record",
        "name": "Reading",
        "fields": [{"name": "sensor", "type": "string"}, {"name": "v", "type": "double"}],
    }
).encode()


@dataclass
class Env:
    store: SchemaStore
    view: SchemaView
    gate: SchemaGate
    res: Resources

    async def settle(self, revision: int) -> None:
        assert await self.view.wait_revision(revision)

    async def topic(self, name: str) -> str:
        await self.res.create_topic(TopicName.parse(name))
        return name

    async def configure(self, topic: str, subject: str, policy: str, payloads: bool = True) -> None:
        rev = await self.store.configure_topic(
            TopicName.parse(topic), TopicSchemaConfig(subject, policy, payloads)
        )
        await self.settle(rev)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    mem, keys = MemoryStore(), Keys("c")
    res = Resources(mem, keys)
    await res.create_namespace("default")
    store = SchemaStore(mem, keys)
    view = SchemaView(mem, keys)
    await view.start()
    e = Env(store, view, SchemaGate(view, store), res)
    await e.settle((await store.register("people", "json_schema", PERSON)).revision)
    await e.settle((await store.register("readings", "avro", AVRO)).revision)
    yield e
    await view.aclose()


def ref(subject: str, **version: int) -> pb.SchemaReference:
    return pb.SchemaReference(subject=subject, **(version or {"use_latest": True}))


def msg(
    payload: bytes, schema: ProducerSchema | None = None, *, schema_id: int | None = None
) -> pb.StreamMessage:
    m = pb.StreamMessage(payload=payload)
    if schema_id is not None:
        m.schema_id = schema_id
    elif schema is not None:
        m.schema_id, m.schema_version = schema.schema_id, schema.version
    return m


def avro(record: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(json.loads(AVRO)), record)
    return out.getvalue()


async def test_references_resolve_and_the_first_producer_binds_the_topic(env: Env) -> None:
    topic = await env.topic("/default/t")
    assert await env.gate.bind_producer(topic, None) is None
    bound = await env.gate.bind_producer(topic, ref("people"))
    people = env.view.subjects["people"]
    assert bound == ProducerSchema("people", people.schema_id, 1)
    config = await env.store.topic_config(TopicName.parse(topic))
    assert config == TopicSchemaConfig("people", "none", False, bound_by_producer=True)
    # With policy none, another subject is accepted (the binding stays).
    other = await env.gate.bind_producer(topic, ref("readings"))
    assert other is not None and other.subject == "readings"
    assert (await env.store.topic_config(TopicName.parse(topic))).subject == "people"  # type: ignore[union-attr]

    assert (await env.gate.bind_producer(topic, ref("people", pinned_version=1))) == bound
    with pytest.raises(NotFound, match="no version 7"):
        await env.gate.bind_producer(topic, ref("people", pinned_version=7))
    with pytest.raises(FailedPrecondition, match="at least version 2"):
        await env.gate.bind_producer(topic, ref("people", min_version=2))
    with pytest.raises(NotFound, match="register it first"):
        await env.gate.bind_producer(topic, ref("nobody"))


async def test_enforce_refuses_producers_without_the_topics_subject(env: Env) -> None:
    topic = await env.topic("/default/strict")
    await env.configure(topic, "people", "enforce")
    with pytest.raises(IncompatibleSchema, match="requires schema subject 'people'"):
        await env.gate.bind_producer(topic, None)
    with pytest.raises(IncompatibleSchema, match="uses schema subject 'people'"):
        await env.gate.bind_producer(topic, ref("readings"))
    assert await env.gate.bind_producer(topic, ref("people")) is not None


async def test_enforce_refuses_the_whole_batch_and_names_the_message(env: Env) -> None:
    topic = await env.topic("/default/strict")
    await env.configure(topic, "people", "enforce")
    producer = await env.gate.bind_producer(topic, ref("people"))
    assert producer is not None
    good = [json.dumps({"name": f"n{i}", "age": i}).encode() for i in range(3)]
    batch = [msg(p) for p in good]
    env.gate.check_batch(topic, producer, batch)  # unstamped messages get the producer's version
    assert all((m.schema_id, m.schema_version) == (producer.schema_id, 1) for m in batch)

    bad = [msg(good[0]), msg(good[1]), msg(json.dumps({"age": "old"}).encode())]
    with pytest.raises(InvalidPayload) as info:
        env.gate.check_batch(topic, producer, bad)
    text = info.value.message
    assert (
        "message 2 of the batch" in text and "'people' version 1" in text and "nothing of the batch" in text
    )
    with pytest.raises(InvalidPayload, match="JSON"):
        env.gate.check_batch(topic, producer, [msg(b"{oops")])
    readings = env.view.subjects["readings"].schema_id
    with pytest.raises(InvalidPayload, match=f"carries schema id {readings}"):
        env.gate.check_batch(topic, None, [msg(good[0], schema_id=readings)])
    assert env.gate.refusals[topic] == 3


async def test_enforce_without_payload_validation_checks_only_the_schema_id(env: Env) -> None:
    topic = await env.topic("/default/ids")
    await env.configure(topic, "people", "enforce", payloads=False)
    env.gate.check_batch(topic, None, [msg(b"not json at all")])
    readings = env.view.subjects["readings"].schema_id
    with pytest.raises(InvalidPayload):
        env.gate.check_batch(topic, None, [msg(b"x", schema_id=readings)])


async def test_warn_accepts_and_counts(env: Env) -> None:
    topic = await env.topic("/default/soft")
    await env.configure(topic, "people", "warn")
    batch = [msg(b'{"name": "a"}'), msg(b"[]")]
    env.gate.check_batch(topic, None, batch)
    assert env.gate.warnings[topic] == 1 and not env.gate.refusals


async def test_avro_payloads_are_decoded_against_their_version(env: Env) -> None:
    topic = await env.topic("/default/readings")
    await env.configure(topic, "readings", "enforce")
    producer = await env.gate.bind_producer(topic, ref("readings"))
    env.gate.check_batch(topic, producer, [msg(avro({"sensor": "s1", "v": 1.5}))])
    truncated = avro({"sensor": "s1", "v": 1.5})[:-3]
    with pytest.raises(InvalidPayload, match="avro"):
        env.gate.check_batch(topic, producer, [msg(truncated)])
    with pytest.raises(InvalidPayload, match="version 9"):
        env.gate.check_batch(
            topic, None, [msg(struct.pack("<d", 1.0), ProducerSchema("readings", producer.schema_id, 9))]
        )  # type: ignore[union-attr]


async def test_no_config_and_policy_none_check_nothing(env: Env) -> None:
    bare = await env.topic("/default/bare")
    env.gate.check_batch(bare, None, [msg(b"anything")])
    topic = await env.topic("/default/none")
    await env.configure(topic, "people", "none")
    env.gate.check_batch(topic, None, [msg(b"anything", schema_id=99)])
