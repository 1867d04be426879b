"""The SDK's schema registry client (``client.schemas()``) against the lookup service on real etcd."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pydantic
import pytest

from danube_common.errors import (
    FailedPrecondition,
    IncompatibleSchema,
    InvalidArgument,
    InvalidSchema,
    NotFound,
    TopicNotFound,
    Unavailable,
)
from danube_common.resources import Resources
from danube_common.service import ServiceReady
from danube_common.topic_name import TopicName
from danube_sdk import (
    AvroSchema,
    CompatibilityCheck,
    DanubeClient,
    JsonSchema,
    SchemaReference,
    SchemaRegistryClient,
    TopicSchemaConfig,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class Person(pydantic.BaseModel):
    name: str
    age: int | None = None


def person(*, required: tuple[str, ...] = ("name",), extra: dict[str, object] | None = None) -> bytes:
    props: dict[str, object] = {"name": {"type": "string"}, "age": {"type": "integer"}, **(extra or {})}
    return json.dumps({"type": "object", "properties": props, "required": list(required)}).encode()


@pytest.fixture
async def client(lookup: ServiceReady) -> AsyncIterator[DanubeClient]:
    async with DanubeClient(lookup.url, rpc_timeout_s=5) as c:
        yield c


async def test_every_rpc_through_client_schemas(client: DanubeClient) -> None:
    registry = client.schemas()
    first = await registry.register("people", "json_schema", person(), description="v1", tags=["hr"])
    assert (first.subject, first.version, first.is_new_version) == ("people", 1, True)
    again = await registry.register("people", "JSON", json.dumps(json.loads(person()), indent=2))
    assert (again.version, again.is_new_version, again.schema_id) == (1, False, first.schema_id)
    second = await registry.register("people", "json_schema", person(extra={"email": {"type": "string"}}))
    assert (second.version, second.schema_id) == (2, first.schema_id)

    latest = await registry.latest("people")
    assert (latest.version, latest.schema_type, latest.compatibility_mode) == (2, "json_schema", "backward")
    v1 = await registry.version("people", 1)
    assert json.loads(v1.definition_text) == json.loads(person()) and v1.description == "v1"
    assert v1.tags == ("hr",) and v1.created_at_s > 1_600_000_000
    assert (await registry.get(first.schema_id)).version == 2
    assert (await registry.get(first.schema_id, 1)).fingerprint == first.fingerprint
    assert [v.version for v in await registry.versions("people")] == [1, 2]

    breaking = person(required=("name", "age"))
    check = await registry.check("people", "json_schema", breaking)
    assert not check.compatible and any("age" in e for e in check.errors)
    assert await registry.check("people", "json_schema", breaking, mode="none") == CompatibilityCheck(
        True, ()
    )
    with pytest.raises(IncompatibleSchema, match="backward"):
        await registry.register("people", "json_schema", breaking)
    assert "none" in await registry.set_compatibility("people", "NONE")
    assert await registry.get_compatibility("people") == "none"
    assert (await registry.register("people", "json_schema", breaking)).version == 3

    await registry.delete_version("people", 1)
    assert [v.version for v in await registry.versions("people")] == [2, 3]
    with pytest.raises(NotFound):
        await registry.version("people", 1)

    await registry.register("clicks", "avro", b'{"type": "record", "name": "C", "fields": []}')
    summary = {s.subject: (s.schema_type, s.latest_version) for s in await registry.subjects()}
    assert summary == {"clicks": ("avro", 1), "people": ("json_schema", 3)}


async def test_topic_configuration(client: DanubeClient, etcd_resources: Resources) -> None:
    registry = client.schemas()
    topic = "/default/typed"
    with pytest.raises(NotFound, match="schema subject 'people' does not exist"):
        await registry.configure_topic(topic, "people")
    reg = await registry.register("people", "json_schema", person())
    with pytest.raises(TopicNotFound):
        await registry.configure_topic(topic, "people")
    await etcd_resources.create_partitioned_topic(TopicName.parse(topic), 2)
    with pytest.raises(NotFound, match="has no schema"):
        await registry.topic_config(topic)
    with pytest.raises(FailedPrecondition, match="configure one first"):
        await registry.set_topic_validation(topic, "warn")
    reg = await registry.register("people", "json_schema", person())
    await registry.configure_topic(
        topic, "people", validation_policy="enforce", enable_payload_validation=True
    )
    assert await registry.topic_config(topic) == TopicSchemaConfig(
        topic, "people", "enforce", True, reg.schema_id
    )
    await registry.set_topic_validation(topic, "warn")
    cfg = await registry.topic_config(topic)
    assert (cfg.validation_policy, cfg.enable_payload_validation) == ("warn", False)
    with pytest.raises(InvalidArgument, match="none, warn, enforce"):
        await registry.set_topic_validation(topic, "strict")  # refused client-side


async def test_bad_input_says_what_is_wrong(client: DanubeClient) -> None:
    registry = client.schemas()
    with pytest.raises(InvalidSchema, match="not valid JSON"):
        await registry.register("s", "json_schema", b"{nope")
    with pytest.raises(InvalidSchema, match="unknown schema type 'yaml'"):
        await registry.register("s", "yaml", b"{}")
    with pytest.raises(InvalidArgument, match="invalid schema subject 'bad/subject': use 1-200"):
        await registry.register("bad/subject", "json_schema", person())
    with pytest.raises(NotFound, match="does not exist"):
        await registry.latest("nobody")
    with pytest.raises(NotFound, match="no schema with id 999"):
        await registry.get(999)


async def test_typed_schema_registration_and_references(client: DanubeClient) -> None:
    registry = client.schemas()
    bound = await registry.bind_producer(JsonSchema(Person, subject="persons"))
    info = await registry.latest("persons")
    assert (bound.schema_id, bound.version) == (info.schema_id, 1)
    assert json.loads(info.definition) == Person.model_json_schema()
    # The same model again: the same version, nothing new registered.
    assert await registry.bind_producer(JsonSchema(Person, subject="persons")) == bound
    assert (await registry.resolve(SchemaReference("persons", min_version=1))).version == 1
    with pytest.raises(NotFound, match="no version >= 2"):
        await registry.resolve(SchemaReference("persons", min_version=2))
    with pytest.raises(InvalidSchema, match="holds json_schema schemas"):
        await registry.bind_producer(AvroSchema({"type": "string"}, subject="persons", register=False))


async def test_standalone_client_on_the_admin_port(lookup: ServiceReady) -> None:
    async with SchemaRegistryClient.connect(lookup.admin_url, rpc_timeout_s=5) as registry:
        reg = await registry.register("people", "json_schema", person())
        assert (await registry.get(reg.schema_id)).subject == "people"
    async with SchemaRegistryClient.connect("http://127.0.0.1:1", rpc_timeout_s=2) as dead:
        with pytest.raises(Unavailable, match=r"cannot reach the service at http://127\.0\.0\.1:1"):
            await dead.subjects()
