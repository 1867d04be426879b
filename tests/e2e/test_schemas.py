"""Schemas end to end: typed producers and consumers of the SDK (JSON, Avro, Protobuf), the
broker's validation on publish (enforce, payload validation), and danube-cli / danube-admin.

These need the broker's side of the registry (schema references resolved at CreateProducer,
versions stamped, the topic's validation policy applied on publish).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pydantic
import pytest
from google.protobuf import api_pb2

from danube_common.errors import IncompatibleSchema, InvalidPayload
from danube_local.cluster import LocalCluster
from danube_sdk import (
    AvroSchema,
    DanubeClient,
    DispatchStrategy,
    InitialPosition,
    JsonSchema,
    ProtobufSchema,
    SchemaReference,
)
from tests.e2e.conftest import cli, subprocess_env
from tests.support import unique, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ORDER_AVRO = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}


PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class Order(pydantic.BaseModel):
    id: int
    item: str
    qty: int = 1


def run(
    cluster: LocalCluster, tool: str, *args: str, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    url = ("--admin-url", cluster.admin_url) if tool == "danube-admin" else ()
    return subprocess.run(
        [cli(tool), *url, *args], capture_output=True, text=True, timeout=timeout_s, env=subprocess_env()
    )


async def enforced_topic(cluster: LocalCluster, client: DanubeClient, subject: str) -> str:
    """A new topic bound to ``subject`` with policy enforce and payload validation, once the
    broker applies it (a producer without a schema is refused)."""
    topic = f"/default/{unique('typed')}"
    res = run(cluster, "danube-admin", "topics", "create", topic)
    assert res.returncode == 0, res.stderr
    await client.schemas().configure_topic(
        topic, subject, validation_policy="enforce", enable_payload_validation=True
    )

    async def enforced() -> bool:
        try:
            producer = await client.create_producer(topic)
        except IncompatibleSchema:
            return True
        await producer.close()
        return False

    await wait_until(enforced, timeout_s=15, what=f"the broker to enforce {subject} on {topic}")
    return topic


async def test_typed_round_trips_through_a_validating_broker(
    cluster: LocalCluster, client: DanubeClient
) -> None:
    cases = [
        (JsonSchema(Order, subject=unique("orders-json")), [Order(id=1, item="a"), Order(id=2, item="b", qty=3)]),
        (AvroSchema(ORDER_AVRO, subject=unique("orders-avro")), [{"id": 1, "item": "a"}, {"id": 2, "item": "b"}]),
        (
            ProtobufSchema(api_pb2.Method, subject=unique("methods")),
            [api_pb2.Method(name="get"), api_pb2.Method(name="put", request_streaming=True)],
        ),
    ]  # fmt: skip
    for schema, values in cases:
        reg = await client.schemas().register(schema.subject, schema.schema_type, schema.definition())
        topic = await enforced_topic(cluster, client, schema.subject)
        consumer = await client.subscribe(topic, subscription="s", schema=schema)
        producer = await client.create_producer(topic, schema=schema)
        assert producer.schema is not None and producer.schema.version == reg.version
        await producer.send_many(values)
        got = [await consumer.receive(timeout_s=15) for _ in values]
        assert [m.value() for m in got] == values, schema
        assert {(m.schema_id, m.schema_version) for m in got} == {(reg.schema_id, reg.version)}
        await consumer.close()
        await producer.close()


async def test_invalid_payload_is_refused_with_subject_version_and_reason(
    cluster: LocalCluster, client: DanubeClient
) -> None:
    subject = unique("people")
    reg = await client.schemas().register(subject, "json_schema", json.dumps(PERSON))
    topic = await enforced_topic(cluster, client, subject)
    consumer = await client.subscribe(topic, subscription="s")
    producer = await client.create_producer(topic, schema_ref=SchemaReference(subject))
    await producer.send(b'{"name": "ada"}')
    msg = await consumer.receive(timeout_s=15)
    assert msg.payload == b'{"name": "ada"}' and (msg.schema_id, msg.schema_version) == (reg.schema_id, 1)
    with pytest.raises(InvalidPayload) as info:
        await producer.send(b'{"name": 7}')
    text = str(info.value)
    assert subject in text and f"version {reg.version}" in text and "'string'" in text, text
    # Enforce: producers of another subject, or of none, are refused.
    other = unique("other")
    await client.schemas().register(other, "string", b"")
    with pytest.raises(IncompatibleSchema, match=subject):
        await client.create_producer(topic, schema_ref=SchemaReference(other))
    with pytest.raises(IncompatibleSchema, match="requires schema subject"):
        await client.create_producer(topic)


async def test_publishing_goes_on_after_a_refused_batch(cluster: LocalCluster, client: DanubeClient) -> None:
    subject = unique("people")
    await client.schemas().register(subject, "json_schema", json.dumps(PERSON))
    topic = await enforced_topic(cluster, client, subject)
    consumer = await client.subscribe(topic, subscription="s")
    producer = await client.create_producer(topic, schema_ref=SchemaReference(subject))
    with pytest.raises(InvalidPayload):
        await producer.send(b'{"name": 7}')
    await producer.send(b'{"name": "ada"}')
    assert (await consumer.receive(timeout_s=15)).payload == b'{"name": "ada"}'


async def test_packed_batches_are_validated_message_by_message(
    cluster: LocalCluster, client: DanubeClient
) -> None:
    """A compressing producer packs its batches; the broker opens each pack to validate every
    message in it, and refuses the whole batch for one bad message."""
    subject = unique("people")
    await client.schemas().register(subject, "json_schema", json.dumps(PERSON))
    topic = await enforced_topic(cluster, client, subject)
    consumer = await client.subscribe(topic, subscription="s")
    producer = await client.create_producer(
        topic, schema_ref=SchemaReference(subject), compression="zstd", batching_max_messages=4
    )
    good = [json.dumps({"name": f"person-{i}", "note": "x" * 40}).encode() for i in range(8)]
    ids = await producer.send_many(good)
    assert any(i.batch_index is not None for i in ids)  # packs went through validation
    assert [(await consumer.receive(timeout_s=15)).payload for _ in good] == good
    bad = [*good[:3], b'{"name": 7}']  # one batch of 4: one pack
    results = await asyncio.gather(*[await producer.send_async(p) for p in bad], return_exceptions=True)
    assert isinstance(results[3], InvalidPayload) and "'string'" in str(results[3]), results
    kept = [p for p, r in zip(bad, results, strict=True) if not isinstance(r, BaseException)]
    await producer.send(b'{"name": "sentinel"}')
    after = [(await consumer.receive(timeout_s=15)).payload for _ in range(len(kept) + 1)]
    assert after == [*kept, b'{"name": "sentinel"}']  # nothing of a refused batch was stored


async def test_first_producer_binds_a_bare_topic(client: DanubeClient) -> None:
    schema = JsonSchema(Order, subject=unique("bind"))
    topic = f"/default/{unique('bare')}"
    producer = await client.create_producer(topic, schema=schema, dispatch_strategy=DispatchStrategy.RELIABLE)
    await producer.send(Order(id=9, item="z"))
    cfg = await client.schemas().topic_config(topic)
    assert (cfg.subject, cfg.validation_policy) == (schema.subject, "none")
    consumer = await client.subscribe(
        topic, subscription="s", schema=schema, initial_position=InitialPosition.EARLIEST
    )
    assert (await consumer.receive(timeout_s=15)).value() == Order(id=9, item="z")


async def test_cli_produce_with_schema_file_and_consume_decodes(
    cluster: LocalCluster, client: DanubeClient, tmp_path: Path
) -> None:
    subject = unique("cli-orders")
    topic = f"/default/{unique('cli-typed')}"
    avsc = tmp_path / "order.avsc"
    avsc.write_text(json.dumps(ORDER_AVRO))
    res = run(cluster, "danube-admin", "topics", "create", topic)
    assert res.returncode == 0, res.stderr
    consume = await asyncio.create_subprocess_exec(
        cli("danube-cli"), "consume", "-s", cluster.service_url, "-t", topic, "-m", "s", "-c", "1",
        "--output", "json", env=subprocess_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert consume.stderr is not None
    line = await asyncio.wait_for(consume.stderr.readline(), timeout=30)
    assert b"consuming" in line, line
    produce = await asyncio.to_thread(
        run, cluster, "danube-cli", "produce", "-s", cluster.service_url, "-t", topic,
        "-m", '{"id": 3, "item": "pen"}', "--schema-subject", subject, "--schema-file", str(avsc),
        "--schema-type", "avro",
    )  # fmt: skip
    assert produce.returncode == 0, produce.stderr
    assert f"schema registered: subject {subject} version 1" in produce.stderr
    out, err = await asyncio.wait_for(consume.communicate(), timeout=30)
    assert consume.returncode == 0, err
    doc = json.loads(out.decode().splitlines()[0])
    assert doc["value"] == {"id": 3, "item": "pen"} and doc["schema_version"] == 1

    # danube-admin shows the binding the producer made, then enforces it.
    res = run(cluster, "danube-admin", "-o", "json", "topics", "get-schema", topic)
    assert res.returncode == 0 and json.loads(res.stdout)["subject"] == subject, res.stderr
    res = run(cluster, "danube-admin", "topics", "set-validation", topic, "--validation-policy", "enforce",
              "--enable-payload-validation")  # fmt: skip
    assert res.returncode == 0, res.stderr

    def refused() -> bool:
        r = run(cluster, "danube-cli", "produce", "-s", cluster.service_url, "-t", topic, "-m", "no schema")
        return r.returncode == 1 and "requires schema subject" in r.stderr

    await wait_until(
        lambda: asyncio.to_thread(refused), timeout_s=20, what="the broker to enforce the subject"
    )
