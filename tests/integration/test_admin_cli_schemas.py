"""The real `danube-admin schemas ...`/`topics set-schema ...` and `danube-cli produce --schema-*`
console scripts against an in-process lookup service on real etcd (no broker: what needs one is in
tests/e2e/test_schemas.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from danube_common.resources import Resources
from danube_common.service import ServiceReady
from danube_common.topic_name import TopicName
from tests.integration.test_admin_cli import Result

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BIN = Path(sys.executable).parent
PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
PERSON_V2 = {**PERSON, "properties": {"name": {"type": "string"}, "email": {"type": "string"}}}
BREAKING = {**PERSON, "required": ["name", "email"], "properties": PERSON_V2["properties"]}


async def run(tool: str, *args: str) -> Result:
    """Run a console script without blocking the event loop that serves the in-process lookup."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DANUBE_")}
    proc = await asyncio.create_subprocess_exec(
        str(BIN / tool), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def write(tmp_path: Path, name: str, doc: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


async def test_schemas_commands(lookup: ServiceReady, tmp_path: Path) -> None:
    url = ("--admin-url", lookup.admin_url)
    v1 = write(tmp_path, "v1.json", PERSON)
    r = await run("danube-admin", *url, "schemas", "register", "people", "-t", "json_schema", "-f", v1,
                  "--description", "first", "--tags", "hr,pii")  # fmt: skip
    assert r.code == 0 and r.out.startswith("registered: subject people version 1 (schema id "), r.err
    r = await run("danube-admin", *url, "-o", "json", "schemas", "register", "people", "-t", "json_schema",
                  "--schema", json.dumps(PERSON, indent=3))  # fmt: skip
    assert r.code == 0 and r.json()["version"] == 1 and r.json()["is_new_version"] is False
    r = await run("danube-admin", *url, "schemas", "register", "people", "-t", "json", "-f", v1)
    assert r.code == 2 and "invalid choice: 'json'" in r.err

    breaking = write(tmp_path, "breaking.json", BREAKING)
    r = await run("danube-admin", *url, "schemas", "check", "people", "-t", "json_schema", "-f", breaking)
    assert r.code == 1 and r.out.startswith("NOT compatible with subject people under the subject's mode:")
    assert "email" in r.out
    r = await run("danube-admin", *url, "-o", "json", "schemas", "check", "people", "-t", "json_schema",
                  "-f", breaking, "--mode", "none")  # fmt: skip
    assert r.code == 0 and r.json() == {"compatible": True, "errors": []}
    r = await run("danube-admin", *url, "schemas", "register", "people", "-t", "json_schema", "-f", breaking)
    assert r.code == 1 and "error: the schema is not backward-compatible" in r.err
    assert "hint: see why with `danube-admin schemas check" in r.err

    v2 = write(tmp_path, "v2.json", PERSON_V2)
    r = await run("danube-admin", *url, "schemas", "register", "people", "-t", "json_schema", "-f", v2)
    assert r.code == 0 and "version 2" in r.out
    r = await run("danube-admin", *url, "schemas", "versions", "people")
    assert r.code == 0 and [line.split()[0] for line in r.out.splitlines()] == ["VERSION", "1", "2"]
    r = await run("danube-admin", *url, "schemas", "get", "people")
    assert r.code == 0 and "compatibility  backward" in r.out and '"email"' in r.out
    r = await run("danube-admin", *url, "-o", "json", "schemas", "get", "people", "--version", "1")
    doc = r.json()
    assert (doc["version"], doc["description"], doc["tags"]) == (1, "first", ["hr", "pii"])
    assert json.loads(doc["definition"]) == PERSON
    r = await run("danube-admin", *url, "-o", "json", "schemas", "get", "--id", str(doc["schema_id"]))
    assert r.json()["version"] == 2
    r = await run("danube-admin", *url, "schemas", "get")
    assert r.code == 1 and "give a SUBJECT or --id N" in r.err

    r = await run("danube-admin", *url, "schemas", "set-compatibility", "people", "--mode", "full")
    assert r.code == 0 and "full" in r.out
    r = await run("danube-admin", *url, "-o", "json", "schemas", "get-compatibility", "people")
    assert r.json() == {"subject": "people", "compatibility_mode": "full"}
    r = await run("danube-admin", *url, "-o", "json", "schemas", "list")
    assert [(s["subject"], s["latest_version"], s["compatibility_mode"]) for s in r.json()] == [
        ("people", 2, "full")
    ]
    r = await run("danube-admin", *url, "schemas", "delete", "people", "--version", "1")
    assert r.code == 1 and "add --confirm" in r.err
    r = await run("danube-admin", *url, "schemas", "delete", "people", "--version", "1", "--confirm")
    assert r.code == 0 and "deleted version 1" in r.out
    r = await run("danube-admin", *url, "schemas", "get", "people", "--version", "1")
    assert r.code == 1 and "no version 1" in r.err
    r = await run("danube-admin", *url, "schemas", "versions", "nobody")
    assert r.code == 1 and "does not exist" in r.err and "hint:" in r.err


async def test_topic_schema_commands(lookup: ServiceReady, etcd_resources: Resources, tmp_path: Path) -> None:
    url = ("--admin-url", lookup.admin_url)
    topic = "/default/typed"
    await etcd_resources.create_partitioned_topic(TopicName.parse(topic), 2)
    r = await run("danube-admin", *url, "topics", "set-schema", topic, "--subject", "people")
    assert r.code == 1 and "schema subject 'people' does not exist" in r.err
    r = await run("danube-admin", *url, "schemas", "register", "people", "-t", "json_schema",
                  "-f", write(tmp_path, "p.json", PERSON))  # fmt: skip
    assert r.code == 0, r.err
    r = await run("danube-admin", *url, "topics", "get-schema", topic)
    assert r.code == 1 and "has no schema" in r.err
    r = await run("danube-admin", *url, "topics", "set-schema", topic, "--subject", "people",
                  "--validation-policy", "enforce", "--enable-payload-validation")  # fmt: skip
    assert r.code == 0 and "uses schema subject 'people'" in r.out, r.err
    r = await run("danube-admin", *url, "-o", "json", "topics", "get-schema", topic)
    got = r.json()
    assert (got["subject"], got["validation_policy"], got["enable_payload_validation"]) == (
        "people",
        "enforce",
        True,
    )
    r = await run("danube-admin", *url, "topics", "set-validation", topic, "--validation-policy", "warn")
    assert r.code == 0, r.err
    r = await run("danube-admin", *url, "topics", "get-schema", topic)
    assert "validation_policy   warn" in r.out and "payload_validation  no" in r.out
    r = await run("danube-admin", *url, "topics", "set-schema", "/default/missing", "--subject", "people")
    assert r.code == 1 and "does not exist" in r.err and "danube-admin topics list" in r.err


async def test_cli_registers_the_schema_file_and_refuses_a_bad_message(
    lookup: ServiceReady, tmp_path: Path
) -> None:
    schema = write(tmp_path, "person.json", PERSON)
    r = await run("danube-cli", "produce", "-s", lookup.url, "-t", "/default/p", "-m", '{"name": 7}',
                  "--schema-subject", "people", "--schema-file", schema, "--schema-type", "json_schema",
                  "--connect-timeout-s", "1")  # fmt: skip
    assert r.code == 1
    assert "schema registered: subject people version 1" in r.err
    assert (
        "error: the message does not match json_schema schema 'people' version 1: at $.name: 7 is not of type 'string'"
        in r.err
    )
    assert "\n  fix the message (JSON text) to match the schema" in r.err
    r = await run("danube-cli", "produce", "-s", lookup.url, "-t", "/default/p", "-m", "{}",
                  "--schema-subject", "people", "--schema-version", "4", "--connect-timeout-s", "1")  # fmt: skip
    assert r.code == 1 and "no version 4 (latest is 1)" in r.err
    r = await run("danube-cli", "produce", "-m", "{}", "--schema-subject", "p", "--schema-type", "avro")
    assert r.code == 2 and "--schema-type goes with --schema-file" in r.err
    r = await run("danube-cli", "produce", "--help")
    assert r.code == 0 and "--schema-min-version" in r.out and "--schema-file" in r.out
