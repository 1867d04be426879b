"""The schema registry served by the lookup service (client and admin ports) on real etcd."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from danube_common.errors import MD_ERROR_CODE
from danube_common.keys import Keys
from danube_common.pb import SchemaRegistry_pb2 as spb
from danube_common.pb import SchemaRegistry_pb2_grpc as spb_grpc
from danube_common.resources import Resources
from danube_common.service import ServiceReady
from danube_common.topic_name import TopicName

pytestmark = pytest.mark.integration


def person(*, required: tuple[str, ...] = ("name",), extra: dict[str, object] | None = None) -> bytes:
    props: dict[str, object] = {"name": {"type": "string"}, "age": {"type": "integer"}, **(extra or {})}
    return json.dumps({"type": "object", "properties": props, "required": list(required)}).encode()


@pytest.fixture
async def registry(lookup: ServiceReady) -> AsyncIterator[spb_grpc.SchemaRegistryStub]:
    async with grpc.aio.insecure_channel(lookup.addr) as channel:
        yield spb_grpc.SchemaRegistryStub(channel)


async def register(
    stub: spb_grpc.SchemaRegistryStub, subject: str, definition: bytes, schema_type: str = "json_schema"
) -> spb.RegisterSchemaResponse:
    req = spb.RegisterSchemaRequest(
        subject=subject, schema_type=schema_type, schema_definition=definition, created_by="test"
    )
    return await stub.RegisterSchema(req, timeout=10)


def code_of(err: grpc.aio.AioRpcError) -> str:
    return dict(err.trailing_metadata() or ()).get(MD_ERROR_CODE, "")


async def test_versions_ids_and_idempotent_registration(registry: spb_grpc.SchemaRegistryStub) -> None:
    first = await register(registry, "people", person())
    assert first.version == 1 and first.is_new_version and first.fingerprint.startswith("sha256:")
    # The same definition, other whitespace and key order: the same version, nothing written.
    same = json.dumps(json.loads(person()), indent=4, sort_keys=True).encode()
    again = await register(registry, "people", same)
    assert (again.schema_id, again.version, again.is_new_version) == (first.schema_id, 1, False)
    # An optional property added: backward compatible (the default mode).
    second = await register(registry, "people", person(extra={"email": {"type": "string"}}))
    assert (second.schema_id, second.version, second.is_new_version) == (first.schema_id, 2, True)

    latest = await registry.GetLatestSchema(spb.GetLatestSchemaRequest(subject="people"), timeout=5)
    assert (latest.version, latest.subject, latest.schema_type) == (2, "people", "json_schema")
    assert latest.compatibility_mode == "backward" and latest.created_by == "test"
    old = await registry.GetSchema(spb.GetSchemaRequest(schema_id=first.schema_id, version=1), timeout=5)
    assert json.loads(old.schema_definition) == json.loads(person()) and old.fingerprint == first.fingerprint
    newest = await registry.GetSchema(spb.GetSchemaRequest(schema_id=first.schema_id), timeout=5)
    assert newest.version == 2
    versions = await registry.ListVersions(spb.ListVersionsRequest(subject="people"), timeout=5)
    assert [v.version for v in versions.versions] == [1, 2]
    assert {v.schema_id for v in versions.versions} == {first.schema_id}

    other = await register(registry, "orders", b'{"type": "record", "name": "O", "fields": []}', "avro")
    assert other.schema_id != first.schema_id
    subjects = await registry.ListSubjects(spb.ListSubjectsRequest(), timeout=5)
    summary = {s.subject: (s.schema_type, s.latest_version, s.schema_id) for s in subjects.subjects}
    assert summary == {"orders": ("avro", 1, other.schema_id), "people": ("json_schema", 2, first.schema_id)}


async def test_incompatible_changes_are_refused_with_the_reason(
    registry: spb_grpc.SchemaRegistryStub,
) -> None:
    await register(registry, "people", person())
    breaking = person(required=("name", "age"))  # old data without "age" no longer validates
    check = await registry.CheckCompatibility(
        spb.CheckCompatibilityRequest(
            subject="people", new_schema_definition=breaking, schema_type="json_schema"
        ),
        timeout=5,
    )
    assert not check.is_compatible and any("age" in e for e in check.errors)
    loose = await registry.CheckCompatibility(
        spb.CheckCompatibilityRequest(
            subject="people",
            new_schema_definition=breaking,
            schema_type="json_schema",
            compatibility_mode="none",
        ),
        timeout=5,
    )
    assert loose.is_compatible and not loose.errors
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await register(registry, "people", breaking)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(info.value) == "INCOMPATIBLE_SCHEMA" and "backward" in (info.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await register(registry, "people", b'{"type": "record", "name": "R", "fields": []}', "avro")
    assert "json_schema" in (info.value.details() or "")  # a subject holds one type

    await registry.SetCompatibilityMode(
        spb.SetCompatibilityModeRequest(subject="people", compatibility_mode="none"), timeout=5
    )
    assert (await register(registry, "people", breaking)).version == 2
    latest = await registry.GetLatestSchema(spb.GetLatestSchemaRequest(subject="people"), timeout=5)
    assert latest.compatibility_mode == "none"


@pytest.mark.parametrize(
    ("subject", "schema_type", "definition", "needle"),
    [
        ("bad/subject", "json_schema", person(), "invalid schema subject"),
        ("s", "yaml", person(), "unknown schema type"),
        ("s", "json_schema", b"{not json", "not valid JSON"),
        ("s", "avro", b'{"type": "record", "name": "R"}', "avro"),
        ("s", "protobuf", b"syntax = 'proto3'; message M { int32 a = 1", "protobuf"),
    ],
)
async def test_bad_registrations_say_what_is_wrong(
    registry: spb_grpc.SchemaRegistryStub, subject: str, schema_type: str, definition: bytes, needle: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await register(registry, subject, definition, schema_type)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle.lower() in (info.value.details() or "").lower()
    subjects = await registry.ListSubjects(spb.ListSubjectsRequest(), timeout=5)
    assert not subjects.subjects  # nothing half-written


async def test_concurrent_registrations_get_unique_ids_and_versions(
    registry: spb_grpc.SchemaRegistryStub,
) -> None:
    subjects = [f"s{i}" for i in range(12)]
    firsts = await asyncio.gather(*(register(registry, s, person()) for s in subjects))
    assert len({r.schema_id for r in firsts}) == len(subjects)
    # Many compatible versions of one subject at once: each gets its own number, none lost.
    variants = [person(extra={f"f{i}": {"type": "string"}}) for i in range(10)]
    results = await asyncio.gather(*(register(registry, "s0", v) for v in variants))
    assert sorted(r.version for r in results) == list(range(2, 12))
    versions = await registry.ListVersions(spb.ListVersionsRequest(subject="s0"), timeout=5)
    assert [v.version for v in versions.versions] == list(range(1, 12))


async def test_deleting_versions(registry: spb_grpc.SchemaRegistryStub) -> None:
    await register(registry, "people", person())
    await register(registry, "people", person(extra={"email": {"type": "string"}}))
    await registry.DeleteSchemaVersion(spb.DeleteSchemaVersionRequest(subject="people", version=1), timeout=5)
    versions = await registry.ListVersions(spb.ListVersionsRequest(subject="people"), timeout=5)
    assert [v.version for v in versions.versions] == [2]
    for version, status in ((1, grpc.StatusCode.NOT_FOUND), (2, grpc.StatusCode.FAILED_PRECONDITION)):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await registry.DeleteSchemaVersion(
                spb.DeleteSchemaVersionRequest(subject="people", version=version), timeout=5
            )
        assert info.value.code() == status
    # Numbers are never reused.
    assert (await register(registry, "people", person(extra={"x": {"type": "string"}}))).version == 3


async def test_topic_schema_configuration(
    lookup: ServiceReady, registry: spb_grpc.SchemaRegistryStub, etcd_resources: Resources, keys: Keys
) -> None:
    topic = TopicName.parse("/default/typed")
    await etcd_resources.create_partitioned_topic(topic, 2)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await registry.ConfigureTopicSchema(
            spb.ConfigureTopicSchemaRequest(topic_name=str(topic), schema_subject="people"), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND  # no such subject yet
    reg = await register(registry, "people", person())
    # The admin port serves the registry too.
    async with grpc.aio.insecure_channel(lookup.admin_addr) as channel:
        admin = spb_grpc.SchemaRegistryStub(channel)
        await admin.ConfigureTopicSchema(
            spb.ConfigureTopicSchemaRequest(
                topic_name=str(topic), schema_subject="people", validation_policy="enforce",
                enable_payload_validation=True,
            ),
            timeout=5,
        )  # fmt: skip
    got = await registry.GetTopicSchemaConfig(
        spb.GetTopicSchemaConfigRequest(topic_name=str(topic)), timeout=5
    )
    assert (got.schema_subject, got.validation_policy, got.enable_payload_validation, got.schema_id) == (
        "people", "enforce", True, reg.schema_id,
    )  # fmt: skip
    for part in (topic.partition(0), topic.partition(1)):  # brokers own partitions
        assert await etcd_resources.store.get(keys.topic_schema(part)) is not None
    await registry.UpdateTopicValidationPolicy(
        spb.UpdateTopicValidationPolicyRequest(topic_name=str(topic), validation_policy="warn"), timeout=5
    )
    got = await registry.GetTopicSchemaConfig(
        spb.GetTopicSchemaConfigRequest(topic_name=str(topic)), timeout=5
    )
    assert (got.validation_policy, got.enable_payload_validation) == ("warn", False)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await registry.UpdateTopicValidationPolicy(
            spb.UpdateTopicValidationPolicyRequest(topic_name=str(topic), validation_policy="strict"),
            timeout=5,
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "none, warn, enforce" in (
        info.value.details() or ""
    )
    # Deleting the topic deletes its schema configuration (a new topic of that name starts bare).
    await etcd_resources.delete_topic(topic)
    assert await etcd_resources.store.get(keys.topic_schema(topic)) is None
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await registry.GetTopicSchemaConfig(spb.GetTopicSchemaConfigRequest(topic_name=str(topic)), timeout=5)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
