"""The schema options of danube-cli and the schema commands of danube-admin: parsing, encoding
JSON text per schema type, and produce/consume runs against the fake cluster's registry."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from pathlib import Path

import pytest
from google.protobuf import api_pb2

from danube_common.errors import IncompatibleSchema, InvalidPayload, NotFound, Unavailable
from danube_sdk import DanubeClient
from danube_sdk.cli import admin
from danube_sdk.cli.produce_consume import (
    build_parser,
    check_args,
    explain,
    format_json,
    format_text,
    run_consume,
    run_produce,
)
from danube_sdk.schema_registry import SchemaInfo, encoder_for
from danube_sdk.schemas import ProtobufSchema
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

AVRO = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
JSON_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


def parse(*argv: str) -> argparse.Namespace:
    parser = build_parser({})
    args = parser.parse_args(list(argv))
    check_args(parser, args)
    return args


def test_schema_options_parse() -> None:
    args = parse("produce", "-m", "{}", "--schema-subject", "orders", "--schema-min-version", "2")
    assert (args.schema_subject, args.schema_version, args.schema_min_version) == ("orders", None, 2)
    args = parse(
        "produce", "-m", "{}", "--schema-subject", "o", "--schema-file", "o.avsc", "--schema-type", "avro"
    )
    assert (args.schema_file, args.schema_type) == ("o.avsc", "avro")
    args = parse("consume", "-m", "s", "--raw")
    assert args.raw


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--schema-subject", "o", "--schema-file", "f"], "--schema-file needs --schema-type"),
        (["--schema-subject", "o", "--schema-type", "avro"], "--schema-type goes with --schema-file"),
        (["--schema-version", "2"], "need --schema-subject"),
        (
            ["--schema-subject", "o", "--schema-file", "f", "--schema-type", "avro", "--schema-version", "1"],
            "drop --schema-version",
        ),
        (["--schema-subject", "o", "--schema-version", "1", "--schema-min-version", "1"], "not allowed with"),
        (["--schema-subject", "o", "--schema-version", "0"], "must be at least 1"),
        (["--schema-subject", "o", "--schema-file", "f", "--schema-type", "yaml"], "invalid choice"),
    ],
)
def test_bad_schema_options_are_usage_errors(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse("produce", "-m", "{}", *argv)
    assert info.value.code == 2 and needle in capsys.readouterr().err


def test_size_with_a_schema_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("produce", "--size", "10", "--schema-subject", "o")
    assert "give the message as JSON text" in capsys.readouterr().err


def _info(schema_type: str, definition: bytes) -> SchemaInfo:
    return SchemaInfo(4, 2, "orders", schema_type, definition, "sha256:x", "backward")


def test_json_text_is_encoded_per_schema_type() -> None:
    avro = encoder_for(_info("avro", json.dumps(AVRO).encode()))
    assert avro(b'{"id": 5, "item": "pen"}') == b"\x0a\x06pen"
    js = encoder_for(_info("json_schema", json.dumps(JSON_SCHEMA).encode()))
    assert js(b'{"id": 1}') == b'{"id": 1}'
    proto = ProtobufSchema(api_pb2.Method, subject="m")
    payload = encoder_for(_info("protobuf", proto.definition()))(b'{"name": "x", "requestStreaming": true}')
    assert proto.decode(payload) == api_pb2.Method(name="x", request_streaming=True)
    assert encoder_for(_info("string", b""))(b"text") == b"text"


@pytest.mark.parametrize(
    ("schema_type", "definition", "message", "needle"),
    [
        ("json_schema", json.dumps(JSON_SCHEMA), b'{"id": "x"}', "at $.id: 'x' is not of type 'integer'"),
        ("json_schema", json.dumps(JSON_SCHEMA), b"{id: 1}", "the message is not JSON"),
        ("avro", json.dumps(AVRO), b'{"id": 1}', "Order.item"),
        ("number", "", b"1", "cannot choose its byte order"),
    ],
)
def test_messages_that_do_not_fit_say_why(
    schema_type: str, definition: str, message: bytes, needle: str
) -> None:
    with pytest.raises(InvalidPayload) as info:
        encoder_for(_info(schema_type, definition.encode()))(message)
    assert needle in str(info.value)


def test_explain_schema_errors() -> None:
    assert "danube-admin schemas get SUBJECT" in explain(InvalidPayload("bad"), "u")
    assert "topics get-schema" in explain(IncompatibleSchema("no"), "u")
    assert "danube-admin schemas list" in explain(NotFound("schema subject 'x' does not exist"), "u")


async def test_produce_with_schema_file_then_consume_decodes(cluster: FakeCluster, tmp_path: Path) -> None:
    topic = "/default/typed"
    cluster.create_topic(topic)
    schema_file = tmp_path / "order.avsc"
    schema_file.write_text(json.dumps(AVRO))
    out, err = io.StringIO(), io.StringIO()
    consume_args = parse(
        "consume", "-s", cluster.service_url, "-t", topic, "-m", "s", "-c", "2", "--output", "json"
    )
    consuming = asyncio.create_task(run_consume(consume_args, out=out, err=err, stop=asyncio.Event()))
    await wait_until(lambda: "s" in cluster.topics[topic].subs, timeout_s=5, what="subscribed")
    produce = parse(
        "produce", "-s", cluster.service_url, "-t", topic, "-m", '{"id": 7, "item": "pen"}',
        "--schema-subject", "orders", "--schema-file", str(schema_file), "--schema-type", "avro",
    )  # fmt: skip
    perr = io.StringIO()
    assert await run_produce(produce, out=io.StringIO(), err=perr, stop=asyncio.Event()) == 0
    assert "schema registered: subject orders version 1" in perr.getvalue()
    async with DanubeClient(cluster.service_url, health_check_interval_s=0) as client:
        await (await client.create_producer(topic)).send(b"raw")
    assert await consuming == 0
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    sid = cluster.registry.subjects["orders"].schema_id
    assert (first["schema_id"], first["schema_version"], first["value"]) == (sid, 1, {"id": 7, "item": "pen"})
    assert second["schema_id"] is None and "value" not in second and second["payload"] == "raw"
    # Again with the same file: no new version; pinned to it.
    perr = io.StringIO()
    assert await run_produce(produce, out=io.StringIO(), err=perr, stop=asyncio.Event()) == 0
    assert "schema already registered: subject orders version 1" in perr.getvalue()
    stamps = {(m.schema_id, m.schema_version) for m in cluster.topics[topic].log if m.HasField("schema_id")}
    assert stamps == {(sid, 1)}


async def test_produce_refuses_a_message_that_does_not_match(cluster: FakeCluster) -> None:
    async with DanubeClient(cluster.service_url) as client:
        await client.schemas().register("people", "json_schema", json.dumps(JSON_SCHEMA))
    args = parse(
        "produce",
        "-s",
        cluster.service_url,
        "-t",
        "/default/p",
        "-m",
        '{"id": "x"}',
        "--schema-subject",
        "people",
    )
    with pytest.raises(InvalidPayload, match="does not match json_schema schema 'people' version 1"):
        await run_produce(args, out=io.StringIO(), err=io.StringIO(), stop=asyncio.Event())
    assert not cluster.calls_of("CreateProducer")  # refused before any producer was made


def test_text_format_shows_the_decoded_value_and_schema() -> None:
    from danube_common.pb import DanubeApi_pb2 as pb
    from danube_sdk import Message

    raw = pb.StreamMessage(payload=b"\x0a\x06pen", schema_id=4, schema_version=2)
    raw.msg_id.topic_offset = 9
    msg: Message[bytes] = Message(raw, "/default/t")
    assert format_text(msg, {"id": 5, "item": "pen"}) == '9 - {"id": 5, "item": "pen"} - [schema 4 v2]'
    doc = json.loads(format_json(msg, {"b": b"\x00"}))
    assert doc["value"] == {"b": "AA=="} and doc["schema_version"] == 2


# ---------------------------------------------------------------------------- danube-admin


def admin_parse(*argv: str) -> argparse.Namespace:
    return admin.build_parser().parse_args(list(argv))


def test_admin_schema_commands_parse() -> None:
    args = admin_parse("schemas", "register", "orders", "-t", "avro", "-f", "o.avsc", "--tags", "a,b")
    assert (args.subject, args.schema_type, args.file, args.tags) == ("orders", "avro", "o.avsc", "a,b")
    assert admin_parse("schemas", "list-subjects").func is admin_parse("schemas", "list").func
    args = admin_parse("schemas", "get", "--id", "3", "--version", "2", "-o", "json")
    assert (args.subject, args.id, args.version, args.output) == (None, 3, 2, "json")
    args = admin_parse("schemas", "check", "orders", "-t", "json_schema", "--schema", "{}", "--mode", "full")
    assert args.mode == "full" and args.schema == "{}"
    args = admin_parse("schemas", "set-compatibility", "orders", "--mode", "backward_transitive")
    assert args.mode == "backward_transitive"
    args = admin_parse("topics", "set-schema", "/default/o", "--subject", "orders", "--validation-policy", "enforce",
                       "--enable-payload-validation")  # fmt: skip
    assert (args.validation_policy, args.enable_payload_validation) == ("enforce", True)
    args = admin_parse("topics", "set-validation", "/default/o", "--validation-policy", "warn")
    assert (args.validation_policy, args.enable_payload_validation) == ("warn", False)
    assert admin_parse("topics", "get-schema", "/default/o").topic == "/default/o"


@pytest.mark.parametrize(
    "argv",
    [
        ["schemas", "register", "orders"],  # --schema-type is required
        ["schemas", "register", "orders", "-t", "avro", "--file", "a", "--schema", "b"],
        ["schemas", "set-compatibility", "orders", "--mode", "sideways"],
        ["schemas", "delete", "orders"],  # --version is required
        ["topics", "set-schema", "/default/o", "--subject", "s", "--validation-policy", "strict"],
    ],
)
def test_admin_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin_parse(*argv)
    assert info.value.code == 2


def test_admin_delete_needs_confirm(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        admin.main(["schemas", "delete", "orders", "--version", "1"])
    assert "add --confirm" in str(info.value.code)


def test_admin_explains_sdk_errors() -> None:
    message, hint = admin.explain_error(IncompatibleSchema("not backward-compatible"), "http://a:1", 5)
    assert message == "not backward-compatible" and "schemas check" in hint
    message, _ = admin.explain_error(Unavailable("down"), "http://a:1", 5)
    assert message == "down"
