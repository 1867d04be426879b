"""The commands of ``danube-admin`` (parsing and errors are in :mod:`danube_sdk.cli.admin`).

Each command takes the :class:`Admin` stubs and the parsed arguments, makes its calls and
prints a table (for people) or JSON (``--output json``, for scripts; keys are the protobuf
field names). gRPC errors propagate to ``admin.main``, which explains them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc

from danube_common.errors import MD_ERROR_CODE
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_sdk.cli.output import emit, render_table

# ---------------------------------------------------------------------------- client


@dataclass
class Admin:
    """The three admin stubs on one channel, every call with the same deadline."""

    brokers: apb_grpc.BrokerAdminStub
    namespaces: apb_grpc.NamespaceAdminStub
    topics: apb_grpc.TopicAdminStub
    timeout_s: float
    cluster: apb_grpc.ClusterAdminStub | None = None

    @classmethod
    def connect(cls, channel: grpc.Channel, timeout_s: float) -> Admin:
        return cls(
            apb_grpc.BrokerAdminStub(channel),
            apb_grpc.NamespaceAdminStub(channel),
            apb_grpc.TopicAdminStub(channel),
            timeout_s,
            apb_grpc.ClusterAdminStub(channel),
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
        "durability": t.durability,
        "retention_time_s": t.retention_time_s,
        "retention_size_bytes": t.retention_size_bytes,
        "compaction_threshold_bytes": t.compaction_threshold_bytes,
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
                "durability": t.durability,
            }
        )
        for p in t.partition_topics:
            rows.append(
                {
                    "topic": f"  {p.name}",
                    "dispatch": p.dispatch_strategy,
                    "partitions": "",
                    "broker": p.broker_id,
                    "durability": p.durability,
                }
            )
    return rows


TOPIC_COLUMNS = ("topic", "dispatch", "partitions", "broker", "durability")


# ---------------------------------------------------------------------------- commands


def broker_dict(b: apb.BrokerInfo) -> dict[str, Any]:
    d: dict[str, Any] = {
        "broker_id": b.broker_id,
        "broker_addr": b.broker_addr,
        "advertised_url": b.advertised_url,
        "state": b.state,
        "admin_state": b.admin_state,
        "topic_count": b.topic_count,
        "registered_at_ms": b.registered_at_ms,
        "load": None,
    }
    if b.has_load:
        d["load"] = {
            "at_ms": b.load_at_ms,
            "cpu_usage": round(b.cpu_usage, 3),
            "cpu_cores": b.cpu_cores,
            "mem_rss_bytes": b.mem_rss_bytes,
            "msg_rate_in": round(b.msg_rate_in, 1),
            "msg_rate_out": round(b.msg_rate_out, 1),
            "byte_rate_in": round(b.byte_rate_in, 1),
            "byte_rate_out": round(b.byte_rate_out, 1),
            "backlog": b.backlog,
            "producers": b.producers,
            "consumers": b.consumers,
        }
    return d


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def brokers_list(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.brokers.ListBrokers(apb.ListBrokersRequest(), timeout=admin.timeout_s)
    data = [broker_dict(b) for b in resp.brokers]
    rows = []
    for b in data:
        load = b["load"] or {}
        rows.append(
            {
                "broker_id": b["broker_id"],
                "url": b["advertised_url"],
                "state": b["state"],
                "topics": b["topic_count"],
                "msg/s in": f"{load['msg_rate_in']:,.0f}" if load else "",
                "msg/s out": f"{load['msg_rate_out']:,.0f}" if load else "",
                "backlog": load.get("backlog", ""),
                "cpu": f"{load['cpu_usage']:.2f}/{load['cpu_cores']}" if load else "",
                "memory": _mib(load["mem_rss_bytes"]) if load else "",
                "registered": _time(b["registered_at_ms"]),
            }
        )
    emit(
        rows,
        fmt=args.output,
        columns=(
            "broker_id",
            "url",
            "state",
            "topics",
            "msg/s in",
            "msg/s out",
            "backlog",
            "cpu",
            "memory",
            "registered",
        ),
        json_data=data,
    )


def brokers_set_state(admin: Admin, args: argparse.Namespace, state: str) -> None:
    b = admin.brokers.SetBrokerState(
        apb.SetBrokerStateRequest(broker_id=args.broker_id, state=state), timeout=admin.timeout_s
    )
    text = (
        f"broker {b.broker_id} is draining: the load manager moves its topics away "
        f"({b.topic_count} left; `danube-admin brokers list` shows it drained when none is left)"
        if state == "draining"
        else f"broker {b.broker_id} is active: it takes new topics again"
    )
    _done(args, text, broker_dict(b))


def brokers_drain(admin: Admin, args: argparse.Namespace) -> None:
    brokers_set_state(admin, args, "draining")


def brokers_activate(admin: Admin, args: argparse.Namespace) -> None:
    brokers_set_state(admin, args, "active")


def leaders_list(admin: Admin, args: argparse.Namespace) -> None:
    assert admin.cluster is not None
    resp = admin.cluster.ListLeaders(apb.ListLeadersRequest(), timeout=admin.timeout_s)
    data = [
        {"role": li.role, "candidate_id": li.candidate_id, "term": li.term, "metadata": dict(li.metadata)}
        for li in resp.leaders
    ]
    rows = [
        {
            "role": d["role"],
            "leader": d["candidate_id"],
            "term": d["term"],
            "metadata": " ".join(f"{k}={v}" for k, v in sorted(d["metadata"].items())),
        }
        for d in data
    ]
    emit(rows, fmt=args.output, columns=("role", "leader", "term", "metadata"), json_data=data)


def topics_move(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.topics.MoveTopic(
        apb.MoveTopicRequest(name=args.topic, to_broker=args.to or ""), timeout=admin.timeout_s
    )
    target = resp.to_broker or "the least-loaded other broker"
    _done(
        args,
        f"move of {resp.name} from broker {resp.from_broker} to {target} requested; "
        f"`danube-admin topics describe {resp.name}` shows the owner once it is done",
        {"name": resp.name, "from_broker": resp.from_broker, "to_broker": resp.to_broker},
    )


def topics_force_takeover(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.topics.ForceTakeover(
        apb.ForceTakeoverRequest(name=args.topic, accept_loss=args.accept_loss, reason=args.reason),
        timeout=admin.timeout_s,
    )
    lost = [(g.start_offset, g.next_offset) for g in resp.lost]
    given_up = (
        "; ".join(f"offsets {a}..{b - 1} ({b - a}) recorded as lost" for a, b in lost)
        if lost
        else "object storage held everything: nothing lost"
    )
    _done(
        args,
        f"takeover of {resp.name} forced: broker {resp.writer}'s log ends at offset {resp.next_offset}; {given_up}",
        {
            "name": resp.name,
            "writer": resp.writer,
            "next_offset": resp.next_offset,
            "lost": [{"start_offset": a, "next_offset": b} for a, b in lost],
        },
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
        name=args.topic,
        partitions=args.partitions,
        dispatch_strategy=args.dispatch_strategy or "",
        durability=args.durability or "",
        retention_time_s=args.retention_time_s,
        retention_size_bytes=args.retention_size_bytes,
        unclean_takeover_after_s=args.unclean_takeover_after_s,
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
    if t.durability:  # reliable topics
        fields[2:2] = [
            {"field": "durability", "value": t.durability},
            {"field": "retention", "value": retention_text(t.retention_time_s, t.retention_size_bytes)},
            {"field": "compaction", "value": threshold_text(t.compaction_threshold_bytes)},
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


def retention_text(time_s: int, size_bytes: int) -> str:
    """How long acknowledged messages are kept, for a person."""
    if not time_s and not size_bytes:
        return "until acknowledged by every subscription"
    parts = ([f"{time_s} s"] if time_s else []) + ([f"{size_bytes} bytes"] if size_bytes else [])
    return "up to " + " / ".join(parts)


def threshold_text(threshold_bytes: int) -> str:
    """When the topic is compacted on its own, for a person."""
    if not threshold_bytes:
        return "on request (no compaction_threshold_bytes here; a broker default may apply)"
    return f"after every {threshold_bytes} bytes published (and on request)"


# ---------------------------------------------------------------------------- topic stats

SUBSCRIPTION_COLUMNS = (
    "subscription",
    "type",
    "consumers",
    "backlog",
    "cursor",
    "unacked",
    "delivered",
    "redelivered",
    "dead_lettered",
    "skipped",
    "rate",
)


def subscription_stats_dict(s: apb.SubscriptionStats) -> dict[str, Any]:
    return {
        "name": s.name,
        "type": s.type,
        "consumers": s.consumers,
        "backlog": s.backlog,
        "cursor": s.cursor if s.has_cursor else None,
        "unacked_in_flight": s.unacked_in_flight,
        "delivered_total": s.delivered_total,
        "redelivered_total": s.redelivered_total,
        "dead_lettered_total": s.dead_lettered_total,
        "dropped_total": s.dropped_total,
        "skipped_total": s.skipped_total,
        "read_error": s.read_error,
        "delayed": s.delayed,
        "msg_rate_out": s.msg_rate_out,
    }


def topic_stats_dict(st: apb.TopicStats) -> dict[str, Any]:
    return {
        "name": st.name,
        "broker_id": st.broker_id,
        "dispatch_strategy": st.dispatch_strategy,
        "durability": st.durability,
        "first_offset": st.first_offset,
        "next_offset": st.next_offset,
        "wal_bytes": st.wal_bytes,
        "wal_segments": st.wal_segments,
        "local_first_offset": st.local_first_offset,
        "uploaded": (
            {"first_offset": st.uploaded_first_offset, "next_offset": st.uploaded_next_offset}
            if st.has_uploaded
            else None
        ),
        "remote_reads": st.remote_reads,
        "remote_entries": st.remote_entries,
        "remote_gets": st.remote_gets,
        "remote_bytes_fetched": st.remote_bytes_fetched,
        "remote_errors": st.remote_errors,
        "last_remote_error": st.last_remote_error,
        "retention_deleted_segments": st.retention_deleted_segments,
        "retention_deleted_bytes": st.retention_deleted_bytes,
        "compaction": compaction_dict(st.compaction) if st.has_compaction else None,
        "msgs_in_total": st.msgs_in_total,
        "bytes_in_total": st.bytes_in_total,
        "msg_rate_in": st.msg_rate_in,
        "bytes_rate_in": st.bytes_rate_in,
        "producers": st.producers,
        "subscriptions": [subscription_stats_dict(s) for s in st.subscriptions],
        "state": st.state,
        "log_writer": st.log_writer,
        "log_epoch": st.log_epoch,
        "log_start_offset": st.log_start_offset,
        "reserved_to": st.reserved_to,
        "accepted_gaps": [
            {
                "start_offset": g.start_offset,
                "next_offset": g.next_offset,
                "lost_offsets": g.next_offset - g.start_offset,
                "reason": g.reason,
                "decided_by": g.decided_by,
                "at_ms": g.at_ms,
                "writer": g.writer,
            }
            for g in st.accepted_gaps
        ],
    }


def compaction_dict(c: apb.CompactionInfo) -> dict[str, Any]:
    return {
        "horizon": c.horizon,
        "keys": c.keys,
        "entries": c.entries,
        "bytes": c.bytes,
        "compacted_at_ms": c.compacted_at_ms,
        "duration_s": round(c.duration_s, 3),
        "messages_read": c.messages_read,
        "stored_in": c.stored_in,
    }


def compaction_text(c: apb.CompactionInfo) -> str:
    """The compacted view in one line, for a person."""
    return (
        f"below offset {c.horizon}: {c.keys} key(s), {c.entries} message(s), {c.bytes} bytes; "
        f"compacted at {_time(c.compacted_at_ms)} in {c.duration_s:.2f}s, in {c.stored_in}"
    )


def topics_compact(admin: Admin, args: argparse.Namespace) -> None:
    """Compact now on the owning broker (through the lookup), waiting up to --wait-s."""
    try:
        c = admin.topics.CompactTopic(apb.CompactTopicRequest(name=args.topic), timeout=args.wait_s)
    except grpc.RpcError as exc:
        from_danube = any(item[0] == MD_ERROR_CODE for item in exc.trailing_metadata() or ())
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and not from_danube:
            raise SystemExit(
                f"error: no answer within {args.wait_s:g}s: the compaction may still finish on the broker "
                f"(see `danube-admin topics stats {args.topic}`); raise --wait-s for a large topic"
            ) from exc
        raise
    if args.output == "json":
        emit([], fmt="json", json_data={"name": c.name, **compaction_dict(c)})
        return
    print(
        f"{c.name} compacted below offset {c.horizon}: readers with read_compacted get its newest message "
        "per key there"
    )
    rows = [
        {"field": "horizon", "value": c.horizon},
        {"field": "keys", "value": c.keys},
        {"field": "entries", "value": f"{c.entries} message(s), {c.bytes} bytes"},
        {"field": "messages read", "value": c.messages_read},
        {"field": "duration", "value": f"{c.duration_s:.2f}s"},
        {"field": "stored in", "value": c.stored_in},
        {"field": "compacted at", "value": _time(c.compacted_at_ms)},
    ]
    print(render_table(rows, ("field", "value")))


def _rate(per_s: float) -> str:
    return f"{per_s:,.1f}/s"


def topics_stats(admin: Admin, args: argparse.Namespace) -> None:
    st = admin.topics.GetTopicStats(apb.TopicStatsRequest(name=args.topic), timeout=admin.timeout_s)
    if args.output == "json":
        emit([], fmt="json", json_data=topic_stats_dict(st))
        return
    kept = f"{st.first_offset} .. {st.next_offset - 1}" if st.next_offset > st.first_offset else "none"
    fields = [
        {"field": "topic", "value": st.name},
        {"field": "broker", "value": st.broker_id},
        {"field": "dispatch_strategy", "value": st.dispatch_strategy},
        {"field": "durability", "value": st.durability},
        {"field": "offsets kept", "value": kept},
        {"field": "next offset", "value": st.next_offset},
        {
            "field": "wal",
            "value": f"{st.wal_bytes} bytes in {st.wal_segments} segment(s)"
            + (f", from offset {st.local_first_offset}" if st.local_first_offset > st.first_offset else ""),
        },
        {"field": "messages in", "value": f"{st.msgs_in_total} ({st.bytes_in_total} bytes)"},
        {"field": "rate in", "value": f"{_rate(st.msg_rate_in)} msg, {_rate(st.bytes_rate_in)} bytes"},
        {"field": "producers", "value": st.producers},
    ]
    if st.state:
        fields.insert(2, {"field": "state", "value": st.state})
    if st.has_uploaded:
        fields.append(
            {
                "field": "object storage",
                "value": f"offsets {st.uploaded_first_offset} .. {st.uploaded_next_offset - 1}; "
                f"{st.remote_reads} read(s) of {st.remote_entries} message(s) ({st.remote_gets} GETs, "
                f"{st.remote_bytes_fetched} bytes), {st.remote_errors} failed"
                + (f" (last: {st.last_remote_error})" if st.remote_errors else "")
                + f"; retention deleted {st.retention_deleted_segments} segment(s), "
                f"{st.retention_deleted_bytes} bytes",
            }
        )
    if st.has_compaction:
        fields.append({"field": "compaction", "value": compaction_text(st.compaction)})
    if st.log_writer:
        fields.append(
            {
                "field": "log",
                "value": f"written by broker {st.log_writer} since offset {st.log_start_offset} "
                f"(epoch {st.log_epoch}; offsets reserved below {st.reserved_to})",
            }
        )
    for g in st.accepted_gaps:
        fields.append(
            {
                "field": "LOST (accepted)",
                "value": f"offsets {g.start_offset}..{g.next_offset - 1} ({g.next_offset - g.start_offset}) of "
                f"broker {g.writer}: {g.decided_by}: {g.reason}",
            }
        )
    print(render_table(fields, ("field", "value")))
    print()
    rows = [
        {
            "subscription": s.name,
            "type": s.type,
            "consumers": s.consumers,
            "backlog": s.backlog,
            "cursor": s.cursor if s.has_cursor else None,
            "unacked": s.unacked_in_flight,
            "delivered": s.delivered_total,
            "redelivered": s.redelivered_total,
            "dead_lettered": s.dead_lettered_total,
            "skipped": s.skipped_total,
            "rate": _rate(s.msg_rate_out),
        }
        for s in st.subscriptions
    ]
    print(render_table(rows, SUBSCRIPTION_COLUMNS) if rows else "no subscriptions")


# ---------------------------------------------------------------------------- subscription policies

POLICY_FIELDS = (
    "max_redeliveries",
    "ack_timeout_ms",
    "redelivery_backoff_base_ms",
    "redelivery_backoff_max_ms",
    "poison_policy",
    "dead_letter_topic",
)


#: How the table shows a field the stored policy leaves out (JSON: null).
BROKER_DEFAULT = "(broker default)"


def policy_dict(p: apb.SubscriptionPolicy) -> dict[str, Any]:
    """Every policy field; None for one that is not set (the owning broker's default applies)."""
    return {name: getattr(p, name) if p.HasField(name) else None for name in POLICY_FIELDS}


def _print_policy(resp: apb.SubscriptionPolicyResponse, args: argparse.Namespace, heading: str) -> None:
    has = resp.HasField("policy")
    if args.output == "json":
        data = {
            "topic": resp.topic,
            "subscription": resp.subscription,
            "policy": policy_dict(resp.policy) if has else None,
        }
        emit([], fmt="json", json_data=data)
        return
    if not has:
        print(f"subscription {resp.subscription} on {resp.topic}: defaults (broker config)")
        return
    print(heading)
    rows = [
        {"field": name, "value": BROKER_DEFAULT if value is None else value}
        for name, value in policy_dict(resp.policy).items()
    ]
    print(render_table(rows, ("field", "value")))


def subscriptions_set_policy(admin: Admin, args: argparse.Namespace) -> None:
    """Send only the options given: the request replaces the stored policy, and a field left
    out uses the broker's default."""
    given = {
        "max_redeliveries": args.max_redeliveries,
        "ack_timeout_ms": args.ack_timeout_ms,
        "redelivery_backoff_base_ms": args.backoff_base_ms,
        "redelivery_backoff_max_ms": args.backoff_max_ms,
        "poison_policy": args.poison_policy,
        "dead_letter_topic": args.dead_letter_topic,
    }
    policy = apb.SubscriptionPolicy(**{k: v for k, v in given.items() if v is not None})
    req = apb.SetSubscriptionPolicyRequest(topic=args.topic, subscription=args.subscription, policy=policy)
    resp = admin.topics.SetSubscriptionPolicy(req, timeout=admin.timeout_s)
    _print_policy(resp, args, f"set the policy of subscription {resp.subscription} on {resp.topic}")
    if args.max_redeliveries == 0:
        which = f"the {args.poison_policy} policy" if args.poison_policy else "the poison policy"
        print(f"note: --max-redeliveries 0 means unlimited: {which} never applies", file=sys.stderr)


def subscriptions_get_policy(admin: Admin, args: argparse.Namespace) -> None:
    req = apb.GetSubscriptionPolicyRequest(topic=args.topic, subscription=args.subscription)
    resp = admin.topics.GetSubscriptionPolicy(req, timeout=admin.timeout_s)
    _print_policy(resp, args, f"policy of subscription {resp.subscription} on {resp.topic}")


# ---------------------------------------------------------------------------- rebalancing


def _cluster(admin: Admin) -> apb_grpc.ClusterAdminStub:
    assert admin.cluster is not None
    return admin.cluster


def cluster_load(admin: Admin, args: argparse.Namespace) -> None:
    doc = json.loads(_cluster(admin).GetLoadReport(apb.GetLoadReportRequest(), timeout=admin.timeout_s).json)
    if args.output == "json":
        emit([], fmt="json", json_data=doc)
        return
    imb = doc.get("imbalance", {})
    print(
        f"cluster load report of {_time(int(doc.get('generated_at_ms', 0)))}: imbalance (CV of broker scores) "
        f"{imb.get('cv', 0):.3f} over {imb.get('active_brokers', 0)} active broker(s)"
    )
    rows = [
        {
            "broker_id": b["broker_id"],
            "state": b.get("state", ""),
            "score": f"{b.get('score', 0):.3f}",
            "topics": b.get("topics", 0),
            "msg/s in": f"{b.get('msg_rate_in', 0):,.0f}",
            "msg/s out": f"{b.get('msg_rate_out', 0):,.0f}",
            "MB/s in": f"{b.get('byte_rate_in', 0) / 1e6:.2f}",
            "backlog": b.get("backlog", 0),
        }
        for b in doc.get("brokers", [])
    ]
    emit(
        rows,
        fmt="table",
        columns=("broker_id", "state", "score", "topics", "msg/s in", "msg/s out", "MB/s in", "backlog"),
    )
    hot = doc.get("hot_topics", [])[: args.hot]
    if hot:
        print("\nhot topics:")
        emit(
            [{"topic": t["topic"], "broker": t["broker_id"], "load": f"{t['load']:.3f}",
              "msg/s in": f"{t.get('msg_rate_in', 0):,.0f}"} for t in hot],
            fmt="table",
            columns=("topic", "broker", "load", "msg/s in"),
        )  # fmt: skip


def _plan_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"topic": m.get("topic"), "from": m.get("from"), "to": m.get("to"), "load": f"{m.get('load', 0):.3f}",
         "status": m.get("status"), "reason": m.get("reason", "")}
        for m in doc.get("moves", [])
    ]  # fmt: skip


def _print_plan(doc: dict[str, Any]) -> None:
    moves = doc.get("moves", [])
    print(
        f"plan {doc.get('plan_id')} ({doc.get('status')}): {len(moves)} move(s), imbalance "
        f"{doc.get('imbalance_before', 0):.3f} -> {doc.get('imbalance_after', 0):.3f} predicted"
    )
    if moves:
        emit(_plan_rows(doc), fmt="table", columns=("topic", "from", "to", "load", "status", "reason"))


def _plans(admin: Admin, limit: int = 0) -> tuple[list[dict[str, Any]], list[str]]:
    resp = _cluster(admin).ListPlans(apb.ListPlansRequest(limit=limit), timeout=admin.timeout_s)
    return [json.loads(p.json) for p in resp.plans], list(resp.pending_requests)


def rebalance(admin: Admin, args: argparse.Namespace) -> None:
    """Request a plan now (--dry-run: proposed only), wait for it, show it; or --apply PLAN_ID."""
    cluster = _cluster(admin)
    if args.apply_plan:
        doc = json.loads(
            cluster.ApplyPlan(apb.ApplyPlanRequest(plan_id=args.apply_plan), timeout=admin.timeout_s).json
        )
        if args.output == "json":
            emit([], fmt="json", json_data=doc)
        else:
            print(f"plan {args.apply_plan} applied: the load manager carries out its moves")
            _print_plan(doc)
        return
    rid = cluster.RequestRebalance(
        apb.RequestRebalanceRequest(dry_run=args.dry_run), timeout=admin.timeout_s
    ).request_id
    if args.output != "json":
        print(
            f"asked the planner for a plan (request {rid}); waiting up to {args.wait_s:g}s ...",
            file=sys.stderr,
        )
    deadline = time.monotonic() + args.wait_s
    while True:
        plans, pending = _plans(admin)
        mine = next((p for p in plans if rid in (p.get("requests") or [])), None)
        if mine is not None or rid not in pending:  # answered (with or without a plan)
            break
        if time.monotonic() > deadline:
            raise SystemExit(
                f"error: no plan within {args.wait_s:g}s: is danube-planner running? "
                "(`danube-admin leaders list` shows who holds spark-planner)"
            )
        time.sleep(0.5)
    if mine is None:
        raise SystemExit("error: the planner answered without a plan (another plan is still pending?); "
                         "see `danube-admin cluster plans` and `danube-admin cluster load`")  # fmt: skip
    if args.output == "json":
        emit([], fmt="json", json_data=mine)
        return
    _print_plan(mine)
    if args.dry_run and mine.get("moves"):
        print(f"dry run: nothing moves until `danube-admin rebalance --apply {mine['plan_id']}`")


def rebalance_history(admin: Admin, args: argparse.Namespace) -> None:
    plans, pending = _plans(admin, args.limit)
    if args.output == "json":
        emit([], fmt="json", json_data={"plans": plans, "pending_requests": pending})
        return
    rows = []
    for p in plans:
        moves = p.get("moves", [])
        count = {s: sum(1 for m in moves if m.get("status") == s) for s in ("done", "skipped", "failed")}
        rows.append(
            {
                "plan_id": p.get("plan_id"),
                "created": _time(int(p.get("created_at_ms", 0))),
                "status": p.get("status"),
                "moves": len(moves),
                "done/skipped/failed": f"{count['done']}/{count['skipped']}/{count['failed']}",
                "cv before -> after": f"{p.get('imbalance_before', 0):.3f} -> {p.get('imbalance_after', 0):.3f}",
            }
        )
    emit(
        rows,
        fmt="table",
        columns=("plan_id", "created", "status", "moves", "done/skipped/failed", "cv before -> after"),
    )
    if args.plan_id:
        for p in plans:
            if p.get("plan_id") == args.plan_id:
                print()
                _print_plan(p)


def topics_pin(admin: Admin, args: argparse.Namespace, pinned: bool) -> None:
    _cluster(admin).SetTopicPinned(
        apb.SetTopicPinnedRequest(name=args.topic, pinned=pinned), timeout=admin.timeout_s
    )
    _done(
        args,
        f"{args.topic} {'pinned: plans never move it' if pinned else 'unpinned'}",
        {"name": args.topic, "pinned": pinned},
    )


def topics_pin_cmd(admin: Admin, args: argparse.Namespace) -> None:
    topics_pin(admin, args, True)


def topics_unpin_cmd(admin: Admin, args: argparse.Namespace) -> None:
    topics_pin(admin, args, False)
