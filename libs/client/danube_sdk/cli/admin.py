"""``danube-admin``: manage brokers, namespaces and topics through the lookup's admin API.

Talks gRPC (package ``danube.admin.v1``) to the lookup service's admin port. Listings print
as tables, or as JSON with ``--output json``. Expected failures print ``error: ...`` and a
hint and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc

from danube_common.errors import MD_ERROR_CODE, DanubeError, error_from_rpc
from danube_common.grpc_util import strip_scheme
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_sdk.cli.output import FORMATS, emit, render_table

DEFAULT_ADMIN_URL = "http://127.0.0.1:50051"
ENV_ADMIN_URL = "DANUBE_ADMIN_URL"
DISPATCH_CHOICES = ("non_reliable", "reliable")

_F = argparse.RawDescriptionHelpFormatter


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


# ---------------------------------------------------------------------------- client


@dataclass
class Admin:
    """The three admin stubs on one channel, every call with the same deadline."""

    brokers: apb_grpc.BrokerAdminStub
    namespaces: apb_grpc.NamespaceAdminStub
    topics: apb_grpc.TopicAdminStub
    timeout_s: float

    @classmethod
    def connect(cls, channel: grpc.Channel, timeout_s: float) -> Admin:
        return cls(
            apb_grpc.BrokerAdminStub(channel),
            apb_grpc.NamespaceAdminStub(channel),
            apb_grpc.TopicAdminStub(channel),
            timeout_s,
        )


# ---------------------------------------------------------------------------- formatting


def _time(ms: int) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def topic_dict(t: apb.TopicInfo) -> dict[str, Any]:
    return {
        "name": t.name,
        "dispatch_strategy": t.dispatch_strategy,
        "partitions": t.partitions,
        "broker_id": t.broker_id,
        "partition_topics": [topic_dict(p) for p in t.partition_topics],
        "subscriptions": list(t.subscriptions),
        "created_at_ms": t.created_at_ms,
    }


def topic_rows(topics: Sequence[apb.TopicInfo]) -> list[dict[str, Any]]:
    """Table rows: a partitioned topic, then its partitions indented under it."""
    rows: list[dict[str, Any]] = []
    for t in topics:
        rows.append(
            {
                "topic": t.name,
                "dispatch": t.dispatch_strategy,
                "partitions": t.partitions or "",
                "broker": t.broker_id,
            }
        )
        for p in t.partition_topics:
            rows.append(
                {
                    "topic": f"  {p.name}",
                    "dispatch": p.dispatch_strategy,
                    "partitions": "",
                    "broker": p.broker_id,
                }
            )
    return rows


TOPIC_COLUMNS = ("topic", "dispatch", "partitions", "broker")


# ---------------------------------------------------------------------------- commands


def brokers_list(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.brokers.ListBrokers(apb.ListBrokersRequest(), timeout=admin.timeout_s)
    data = [
        {
            "broker_id": b.broker_id,
            "broker_addr": b.broker_addr,
            "advertised_url": b.advertised_url,
            "state": b.state,
            "topic_count": b.topic_count,
            "registered_at_ms": b.registered_at_ms,
        }
        for b in resp.brokers
    ]
    rows = [
        {
            "broker_id": b["broker_id"],
            "addr": b["broker_addr"],
            "url": b["advertised_url"],
            "state": b["state"],
            "topics": b["topic_count"],
            "registered": _time(b["registered_at_ms"]),
        }
        for b in data
    ]
    emit(
        rows,
        fmt=args.output,
        columns=("broker_id", "addr", "url", "state", "topics", "registered"),
        json_data=data,
    )


def namespaces_list(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.namespaces.ListNamespaces(apb.ListNamespacesRequest(), timeout=admin.timeout_s)
    emit(
        [{"namespace": ns} for ns in resp.namespaces],
        fmt=args.output,
        json_data=[{"name": ns} for ns in resp.namespaces],
    )


def namespaces_create(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.namespaces.CreateNamespace(apb.NamespaceRequest(name=args.name), timeout=admin.timeout_s)
    _done(args, f"created namespace {resp.name}", {"name": resp.name, "created": True})


def namespaces_delete(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.namespaces.DeleteNamespace(apb.NamespaceRequest(name=args.name), timeout=admin.timeout_s)
    _done(args, f"deleted namespace {resp.name}", {"name": resp.name, "deleted": True})


def topics_list(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.topics.ListTopics(
        apb.ListTopicsRequest(namespace=args.namespace or ""), timeout=admin.timeout_s
    )
    emit(
        topic_rows(resp.topics),
        fmt=args.output,
        columns=TOPIC_COLUMNS,
        json_data=[topic_dict(t) for t in resp.topics],
    )


def topics_create(admin: Admin, args: argparse.Namespace) -> None:
    req = apb.CreateTopicRequest(
        name=args.topic, partitions=args.partitions, dispatch_strategy=args.dispatch_strategy
    )
    topic = admin.topics.CreateTopic(req, timeout=admin.timeout_s).topic
    if args.output == "json":
        emit([], fmt="json", json_data=topic_dict(topic))
        return
    what = f" with {topic.partitions} partitions" if topic.partitions else ""
    print(f"created topic {topic.name}{what}")
    print(render_table(topic_rows([topic]), TOPIC_COLUMNS))


def topics_delete(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.topics.DeleteTopic(apb.DeleteTopicRequest(name=args.topic), timeout=admin.timeout_s)
    _done(args, "deleted " + ", ".join(resp.deleted), {"deleted": list(resp.deleted)})


def topics_describe(admin: Admin, args: argparse.Namespace) -> None:
    t = admin.topics.DescribeTopic(apb.DescribeTopicRequest(name=args.topic), timeout=admin.timeout_s)
    if args.output == "json":
        emit([], fmt="json", json_data=topic_dict(t))
        return
    fields = [
        {"field": "name", "value": t.name},
        {"field": "dispatch_strategy", "value": t.dispatch_strategy},
        {"field": "partitions", "value": t.partitions or ""},
        {"field": "broker", "value": t.broker_id},
        {"field": "subscriptions", "value": list(t.subscriptions)},
        {"field": "created", "value": _time(t.created_at_ms)},
    ]
    print(render_table(fields, ("field", "value")))
    if t.partition_topics:
        print()
        parts = [
            {"partition": p.name, "broker": p.broker_id, "subscriptions": list(p.subscriptions)}
            for p in t.partition_topics
        ]
        print(render_table(parts, ("partition", "broker", "subscriptions")))


def _done(args: argparse.Namespace, text: str, data: dict[str, Any]) -> None:
    if args.output == "json":
        emit([], fmt="json", json_data=data)
    else:
        print(text)


# ---------------------------------------------------------------------------- parser


def _common(defaults: bool) -> argparse.ArgumentParser:
    """Options accepted before or after the command (defaults only on the top level)."""
    p = argparse.ArgumentParser(add_help=False)
    sup = argparse.SUPPRESS
    p.add_argument(
        "--admin-url",
        metavar="URL",
        default=os.environ.get(ENV_ADMIN_URL, DEFAULT_ADMIN_URL) if defaults else sup,
        help=f"admin API of the lookup service (env {ENV_ADMIN_URL}; default {DEFAULT_ADMIN_URL})",
    )
    p.add_argument(
        "--output",
        "-o",
        choices=FORMATS,
        default="table" if defaults else sup,
        help="table (default) or json",
    )
    p.add_argument(
        "--timeout-s",
        type=_positive_float,
        metavar="N",
        default=10.0 if defaults else sup,
        help="deadline of each call in seconds (default 10)",
    )
    return p


def _positive_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {raw}")
    return value


def _non_negative_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (a plain topic) or more, got {raw}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = _common(defaults=False)
    root = argparse.ArgumentParser(
        prog="danube-admin",
        description="Manage a Danube cluster (brokers, namespaces, topics) through the lookup service's admin API.",
        parents=[_common(defaults=True)],
        formatter_class=_F,
        epilog=_examples(
            "danube-admin brokers list",
            "danube-admin namespaces create analytics",
            "danube-admin topics create /analytics/clicks --partitions 3 --dispatch-strategy reliable",
            "danube-admin --output json topics list --namespace analytics",
            "DANUBE_ADMIN_URL=http://10.0.0.5:50051 danube-admin topics describe /analytics/clicks",
        ),
    )
    groups = root.add_subparsers(dest="group", metavar="COMMAND", required=True)

    def group(name: str, help_: str, examples: Sequence[str]) -> argparse._SubParsersAction[Any]:
        p = groups.add_parser(
            name, help=help_, description=help_, formatter_class=_F, epilog=_examples(*examples)
        )
        return p.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)

    def leaf(
        subs: argparse._SubParsersAction[Any],
        name: str,
        help_: str,
        func: Callable[[Admin, argparse.Namespace], None],
        examples: Sequence[str],
    ) -> argparse.ArgumentParser:
        p = subs.add_parser(
            name,
            help=help_,
            description=help_,
            parents=[common],
            formatter_class=_F,
            epilog=_examples(*examples),
        )
        p.set_defaults(func=func)
        return p

    b = group("brokers", "registered brokers", ["danube-admin brokers list"])
    leaf(
        b,
        "list",
        "list brokers with their state and topic count",
        brokers_list,
        ["danube-admin brokers list", "danube-admin brokers list --output json"],
    )

    n = group(
        "namespaces",
        "namespaces (groups of topics)",
        ["danube-admin namespaces list", "danube-admin namespaces create analytics"],
    )
    leaf(n, "list", "list namespaces", namespaces_list, ["danube-admin namespaces list"])
    p = leaf(
        n, "create", "create a namespace", namespaces_create, ["danube-admin namespaces create analytics"]
    )
    p.add_argument("name", help="namespace name: letters, digits, '_', '-' and '.'")
    p = leaf(
        n,
        "delete",
        "delete an empty namespace (delete its topics first)",
        namespaces_delete,
        ["danube-admin namespaces delete analytics"],
    )
    p.add_argument("name", help="namespace name")

    t = group(
        "topics",
        "topics (/namespace/topic)",
        ["danube-admin topics list", "danube-admin topics create /default/orders --partitions 3"],
    )
    p = leaf(
        t,
        "list",
        "list topics with their owner broker; partitions are nested under their topic",
        topics_list,
        ["danube-admin topics list", "danube-admin topics list --namespace default -o json"],
    )
    p.add_argument("--namespace", metavar="NS", help="only this namespace")
    p = leaf(
        t,
        "create",
        "create a topic (or a partitioned topic) and place it on brokers",
        topics_create,
        [
            "danube-admin topics create /default/orders",
            "danube-admin topics create /default/clicks --partitions 3 --dispatch-strategy reliable",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")
    p.add_argument(
        "--partitions",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="0 (default) for a plain topic; N > 0 creates TOPIC-part-0 .. TOPIC-part-(N-1)",
    )
    p.add_argument(
        "--dispatch-strategy",
        choices=DISPATCH_CHOICES,
        default="non_reliable",
        help="non_reliable (in memory, default) or reliable (write-ahead log, at-least-once)",
    )
    p = leaf(
        t,
        "delete",
        "delete a topic (every partition of a partitioned topic)",
        topics_delete,
        ["danube-admin topics delete /default/orders"],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")
    p = leaf(
        t,
        "describe",
        "show a topic: dispatch strategy, owner broker, partitions, subscriptions",
        topics_describe,
        [
            "danube-admin topics describe /default/orders",
            "danube-admin topics describe /default/clicks -o json",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")
    return root


# ---------------------------------------------------------------------------- errors


def explain(
    exc: grpc.RpcError, admin_url: str, timeout_s: float, *, namespace: str = "NS"
) -> tuple[str, str]:
    """A failed call -> (error message, hint) for a person at a terminal."""
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    from_danube = any(item[0] == MD_ERROR_CODE for item in trailing or ())
    status = exc.code() if hasattr(exc, "code") else None
    if not from_danube and status == grpc.StatusCode.UNAVAILABLE:
        return (
            f"cannot reach the admin API at {admin_url}",
            f"is the lookup service running at {admin_url}? start a cluster with `danube-local up`, "
            f"or point --admin-url (or {ENV_ADMIN_URL}) at its admin port",
        )
    if not from_danube and status == grpc.StatusCode.DEADLINE_EXCEEDED:
        return (
            f"no answer from {admin_url} within {timeout_s:g}s",
            "raise --timeout-s, or check the lookup service's log (is etcd reachable?)",
        )
    if not from_danube and status == grpc.StatusCode.UNIMPLEMENTED:
        return (
            f"{admin_url} does not serve the admin API",
            "use the lookup service's admin port (default 50051), not the client port (6650)",
        )
    err = error_from_rpc(exc)
    return err.message, _hint(err, namespace)


def _hint(err: DanubeError, namespace: str) -> str:
    hints = {
        "NAMESPACE_NOT_FOUND": "list namespaces with `danube-admin namespaces list`",
        "NAMESPACE_NOT_EMPTY": f"list its topics with `danube-admin topics list --namespace {namespace}`",
        "TOPIC_NOT_FOUND": "list topics with `danube-admin topics list`",
        "NO_BROKER_AVAILABLE": "start a broker (`danube-local up` starts a whole cluster)",
        "METADATA_UNAVAILABLE": "the lookup service cannot reach etcd; check that etcd is running",
        "TIMEOUT": "the lookup service or etcd is slow; retry, or raise --timeout-s",
    }
    return hints.get(err.code, "")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with grpc.insecure_channel(strip_scheme(args.admin_url)) as channel:
            args.func(Admin.connect(channel, args.timeout_s), args)
    except grpc.RpcError as exc:
        namespace = getattr(args, "name", None) or getattr(args, "namespace", None) or "NS"
        message, hint = explain(exc, args.admin_url, args.timeout_s, namespace=namespace)
        print(f"error: {message}", file=sys.stderr)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `danube-admin topics list | head -1`
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
