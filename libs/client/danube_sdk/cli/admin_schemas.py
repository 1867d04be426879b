"""``danube-admin schemas ...`` and the schema commands of ``danube-admin topics``.

They use the SDK's :class:`~danube_sdk.schema_registry.SchemaRegistryClient` on the admin URL
(the lookup's admin port serves ``danube_schema.SchemaRegistry`` as well as the client port).
Errors are the SDK's DanubeErrors; ``admin.main`` explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, TypeVar

from danube_sdk.cli.auth_flags import resolve_auth
from danube_sdk.cli.output import emit, render_table
from danube_sdk.schema_registry import (
    COMPATIBILITY_MODES,
    VALIDATION_POLICIES,
    SchemaInfo,
    SchemaRegistryClient,
)

T = TypeVar("T")

#: Types a definition can be registered as from the command line (bytes/string/number need none).
SCHEMA_TYPE_CHOICES = ("json_schema", "avro", "protobuf", "string", "bytes", "number")

Leaf = Callable[..., argparse.ArgumentParser]


def _run(args: argparse.Namespace, work: Callable[[SchemaRegistryClient], Awaitable[T]]) -> T:
    async def go() -> T:
        auth = resolve_auth(args)
        async with SchemaRegistryClient.connect(
            args.admin_url, rpc_timeout_s=args.timeout_s, tls=auth.tls, token=auth.token
        ) as registry:
            return await work(registry)

    return asyncio.run(go())


def _done(args: argparse.Namespace, text: str, data: Any) -> None:
    if args.output == "json":
        emit([], fmt="json", json_data=data)
    else:
        print(text)


def _time_s(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if seconds else ""


def read_definition(args: argparse.Namespace) -> bytes:
    """The definition from ``--file`` (bytes as they are: a .proto, a JSON document, or a binary
    FileDescriptorSet) or ``--schema`` (text); bytes/string/number need neither."""
    if args.file is not None:
        with open(args.file, "rb") as fh:
            return fh.read()
    if args.schema is not None:
        return str(args.schema).encode()
    if args.schema_type in ("bytes", "string", "number"):
        return b""
    raise SystemExit(
        f"error: a {args.schema_type} schema needs its definition: give --file PATH or --schema TEXT"
    )


def schema_info_dict(info: SchemaInfo) -> dict[str, Any]:
    d = asdict(info)
    d.pop("definition")
    d["tags"] = list(info.tags)
    try:
        d["definition"] = info.definition.decode("utf-8")
    except UnicodeDecodeError:  # a binary FileDescriptorSet
        d["definition_base64"] = base64.b64encode(info.definition).decode("ascii")
    return d


def definition_text(info: SchemaInfo) -> str:
    """The definition for a person: JSON pretty-printed, text as is, binary described."""
    try:
        text = info.definition.decode("utf-8")
    except UnicodeDecodeError:
        return f"({len(info.definition)} bytes: a serialized FileDescriptorSet; -o json shows it in base64)"
    try:
        return json.dumps(json.loads(text), indent=2)
    except ValueError:
        return text


# ---------------------------------------------------------------------------- schemas


def schemas_register(admin: object, args: argparse.Namespace) -> None:
    definition = read_definition(args)
    tags = [t.strip() for t in (args.tags or "").split(",") if t.strip()]
    reg = _run(
        args,
        lambda r: r.register(
            args.subject,
            args.schema_type,
            definition,
            description=args.description,
            created_by="danube-admin",
            tags=tags,
        ),
    )
    what = "registered" if reg.is_new_version else "already registered (identical definition)"
    _done(
        args,
        f"{what}: subject {reg.subject} version {reg.version} (schema id {reg.schema_id}, {reg.fingerprint})",
        asdict(reg),
    )


def schemas_get(admin: object, args: argparse.Namespace) -> None:
    if (args.subject is None) == (args.id is None):
        raise SystemExit("error: give a SUBJECT or --id N (one of them)")

    async def work(r: SchemaRegistryClient) -> SchemaInfo:
        if args.id is not None:
            return await r.get(args.id, args.version)
        if args.version is not None:
            return await r.version(args.subject, args.version)
        return await r.latest(args.subject)

    info = _run(args, work)
    if args.output == "json":
        emit([], fmt="json", json_data=schema_info_dict(info))
        return
    fields: list[dict[str, Any]] = [
        {"field": "subject", "value": info.subject},
        {"field": "version", "value": info.version},
        {"field": "schema_id", "value": info.schema_id},
        {"field": "type", "value": info.schema_type},
        {"field": "compatibility", "value": info.compatibility_mode},
        {"field": "fingerprint", "value": info.fingerprint},
        {"field": "created", "value": f"{_time_s(info.created_at_s)} by {info.created_by or '-'}"},
        {"field": "description", "value": info.description},
        {"field": "tags", "value": list(info.tags)},
    ]
    print(render_table(fields, ("field", "value")))
    print()
    print(definition_text(info))


def schemas_versions(admin: object, args: argparse.Namespace) -> None:
    versions = _run(args, lambda r: r.versions(args.subject))
    rows = [
        {
            "version": v.version,
            "schema_id": v.schema_id,
            "created": _time_s(v.created_at_s),
            "created_by": v.created_by,
            "fingerprint": v.fingerprint,
            "description": v.description,
        }
        for v in versions
    ]
    emit(
        rows,
        fmt=args.output,
        columns=("version", "schema_id", "created", "created_by", "fingerprint", "description"),
        json_data=[asdict(v) for v in versions],
    )


def schemas_list(admin: object, args: argparse.Namespace) -> None:
    subjects = _run(args, lambda r: r.subjects())
    rows = [
        {
            "subject": s.subject,
            "type": s.schema_type,
            "latest": s.latest_version,
            "schema_id": s.schema_id,
            "compatibility": s.compatibility_mode,
            "tags": list(s.tags),
        }
        for s in subjects
    ]
    emit(
        rows,
        fmt=args.output,
        columns=("subject", "type", "latest", "schema_id", "compatibility", "tags"),
        json_data=[{**asdict(s), "tags": list(s.tags)} for s in subjects],
    )


def schemas_check(admin: object, args: argparse.Namespace) -> None:
    definition = read_definition(args)
    check = _run(args, lambda r: r.check(args.subject, args.schema_type, definition, mode=args.mode))
    mode = f"{args.mode} (this check only)" if args.mode else "the subject's mode"
    if args.output == "json":
        emit([], fmt="json", json_data={"compatible": check.compatible, "errors": list(check.errors)})
    elif check.compatible:
        print(f"compatible with subject {args.subject} under {mode}")
    else:
        print(f"NOT compatible with subject {args.subject} under {mode}:")
        for err in check.errors:
            print(f"  - {err}")
    if not check.compatible:
        raise SystemExit(1)


def schemas_delete(admin: object, args: argparse.Namespace) -> None:
    if not args.confirm:
        raise SystemExit(
            f"error: deleting version {args.version} of {args.subject} cannot be undone: add --confirm "
            "(producers pinned to it can no longer be created; its number is never reused)"
        )
    message = _run(args, lambda r: r.delete_version(args.subject, args.version))
    _done(args, message, {"subject": args.subject, "version": args.version, "deleted": True})


def schemas_set_compatibility(admin: object, args: argparse.Namespace) -> None:
    message = _run(args, lambda r: r.set_compatibility(args.subject, args.mode))
    _done(args, message, {"subject": args.subject, "compatibility_mode": args.mode})


def schemas_get_compatibility(admin: object, args: argparse.Namespace) -> None:
    mode = _run(args, lambda r: r.get_compatibility(args.subject))
    _done(args, f"{args.subject}: {mode}", {"subject": args.subject, "compatibility_mode": mode})


# ---------------------------------------------------------------------------- topics


def topics_set_schema(admin: object, args: argparse.Namespace) -> None:
    message = _run(
        args,
        lambda r: r.configure_topic(
            args.topic,
            args.subject,
            validation_policy=args.validation_policy,
            enable_payload_validation=args.enable_payload_validation,
        ),
    )
    _done(
        args,
        message,
        {
            "topic": args.topic,
            "subject": args.subject,
            "validation_policy": args.validation_policy,
            "enable_payload_validation": args.enable_payload_validation,
        },
    )


def topics_set_validation(admin: object, args: argparse.Namespace) -> None:
    message = _run(
        args,
        lambda r: r.set_topic_validation(
            args.topic, args.validation_policy, enable_payload_validation=args.enable_payload_validation
        ),
    )
    _done(
        args,
        message,
        {
            "topic": args.topic,
            "validation_policy": args.validation_policy,
            "enable_payload_validation": args.enable_payload_validation,
        },
    )


def topics_get_schema(admin: object, args: argparse.Namespace) -> None:
    cfg = _run(args, lambda r: r.topic_config(args.topic))
    if args.output == "json":
        emit([], fmt="json", json_data=asdict(cfg))
        return
    fields: list[dict[str, Any]] = [
        {"field": "topic", "value": cfg.topic},
        {"field": "subject", "value": cfg.subject},
        {"field": "schema_id", "value": cfg.schema_id},
        {"field": "validation_policy", "value": cfg.validation_policy},
        {"field": "payload_validation", "value": cfg.enable_payload_validation},
    ]
    print(render_table(fields, ("field", "value")))


# ---------------------------------------------------------------------------- parsers


def _definition_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("subject", help="schema subject: letters, digits, '_', '-' and '.'")
    p.add_argument(
        "--schema-type",
        "-t",
        required=True,
        choices=SCHEMA_TYPE_CHOICES,
        help="json_schema, avro, protobuf (a .proto file or a FileDescriptorSet from protoc "
        "--include_imports --descriptor_set_out), or string, bytes, number (no definition)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--file", "-f", metavar="PATH", help="read the definition from this file")
    src.add_argument("--schema", metavar="TEXT", help="the definition inline")


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {raw}")
    return value


def add_schema_parsers(
    group: Callable[[str, str, Sequence[str]], argparse._SubParsersAction[Any]],
    leaf: Leaf,
    topics: argparse._SubParsersAction[Any],
) -> None:
    """The ``schemas`` group, and ``set-schema``/``get-schema``/``set-validation`` under ``topics``."""
    s = group(
        "schemas",
        "the schema registry: subjects, versions, compatibility",
        [
            "danube-admin schemas register orders --schema-type json_schema --file orders.json",
            "danube-admin schemas list",
            "danube-admin schemas get orders",
        ],
    )
    p = leaf(
        s,
        "register",
        "register a schema under a subject (created on first use). An identical definition returns "
        "its existing version; a new one must be compatible under the subject's mode",
        schemas_register,
        [
            "danube-admin schemas register orders --schema-type json_schema --file orders.schema.json",
            'danube-admin schemas register clicks -t avro --schema \'{"type": "record", "name": "Click", '
            '"fields": [{"name": "url", "type": "string"}]}\'',
            "danube-admin schemas register events -t protobuf -f events.proto --description 'v2: adds source'",
        ],
    )
    _definition_args(p)
    p.add_argument("--description", default="", help="recorded with the version")
    p.add_argument("--tags", metavar="A,B", help="comma-separated tags")
    p = leaf(
        s,
        "get",
        "show a schema: by subject (latest, or --version) or by --id",
        schemas_get,
        [
            "danube-admin schemas get orders",
            "danube-admin schemas get orders --version 1",
            "danube-admin schemas get --id 3 -o json",
        ],
    )
    p.add_argument("subject", nargs="?", help="schema subject")
    p.add_argument("--id", type=_positive_int, metavar="N", help="schema id (as messages carry it)")
    p.add_argument("--version", type=_positive_int, metavar="V", help="this version (default: the latest)")
    p = leaf(
        s,
        "versions",
        "list a subject's versions",
        schemas_versions,
        ["danube-admin schemas versions orders", "danube-admin schemas versions orders -o json"],
    )
    p.add_argument("subject", help="schema subject")
    p = leaf(
        s,
        "list",
        "list subjects with their type, latest version and compatibility mode",
        schemas_list,
        ["danube-admin schemas list", "danube-admin schemas list -o json"],
        aliases=["list-subjects"],
    )
    p = leaf(
        s,
        "check",
        "would this definition be accepted as the subject's next version? (nothing is registered; "
        "exit status 1 when it is not compatible)",
        schemas_check,
        [
            "danube-admin schemas check orders --schema-type json_schema --file orders-v2.schema.json",
            "danube-admin schemas check orders -t json_schema -f v2.json --mode full",
        ],
    )
    _definition_args(p)
    p.add_argument(
        "--mode", choices=COMPATIBILITY_MODES, help="check under this mode instead of the subject's"
    )
    p = leaf(
        s,
        "delete",
        "delete one version of a subject (not its only one); its number is never reused",
        schemas_delete,
        ["danube-admin schemas delete orders --version 1 --confirm"],
    )
    p.add_argument("subject", help="schema subject")
    p.add_argument("--version", type=_positive_int, required=True, metavar="V", help="the version to delete")
    p.add_argument("--confirm", action="store_true", help="required: the deletion cannot be undone")
    p = leaf(
        s,
        "set-compatibility",
        "set the compatibility mode checked when a new version is registered: none, backward "
        "(default: new readers read old data), forward, full, or their _transitive forms (against "
        "every version, not only the latest)",
        schemas_set_compatibility,
        [
            "danube-admin schemas set-compatibility orders --mode full",
            "danube-admin schemas set-compatibility orders --mode none",
        ],
    )
    p.add_argument("subject", help="schema subject")
    p.add_argument("--mode", required=True, choices=COMPATIBILITY_MODES, help="the compatibility mode")
    p = leaf(
        s,
        "get-compatibility",
        "show a subject's compatibility mode",
        schemas_get_compatibility,
        ["danube-admin schemas get-compatibility orders"],
    )
    p.add_argument("subject", help="schema subject")

    p = leaf(
        topics,
        "set-schema",
        "bind a topic (every partition) to a schema subject. Validation policy: none (default), warn "
        "(the broker logs mismatches), enforce (producers with another subject or none are refused); "
        "--enable-payload-validation makes the broker check every payload (refused under enforce)",
        topics_set_schema,
        [
            "danube-admin topics set-schema /default/orders --subject orders",
            "danube-admin topics set-schema /default/orders --subject orders --validation-policy enforce \\",
            "    --enable-payload-validation",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic (it must exist)")
    p.add_argument("--subject", required=True, help="schema subject (register it first)")
    p.add_argument("--validation-policy", choices=VALIDATION_POLICIES, default="none", help="default none")
    p.add_argument("--enable-payload-validation", action="store_true", help="check every payload")
    p = leaf(
        topics,
        "set-validation",
        "change the validation policy of a topic that has a schema (the subject stays); "
        "payload validation is off unless --enable-payload-validation is given",
        topics_set_validation,
        [
            "danube-admin topics set-validation /default/orders --validation-policy warn",
            "danube-admin topics set-validation /default/orders --validation-policy enforce "
            "--enable-payload-validation",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")
    p.add_argument("--validation-policy", required=True, choices=VALIDATION_POLICIES, help="the new policy")
    p.add_argument("--enable-payload-validation", action="store_true", help="check every payload")
    p = leaf(
        topics,
        "get-schema",
        "show a topic's schema subject, schema id and validation policy",
        topics_get_schema,
        [
            "danube-admin topics get-schema /default/orders",
            "danube-admin topics get-schema /default/orders -o json",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")
