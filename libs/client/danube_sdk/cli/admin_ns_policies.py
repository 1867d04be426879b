"""``danube-admin namespaces get-policies / set-policies``: a namespace's limits and defaults;
``danube-admin topics get-policies / set-policies``: the limits (and retention, and the
compaction threshold) one topic sets over them.

One flag per policy (``--max-producers-per-topic N`` ...), named after the policy with dashes;
``--clear NAME`` (repeatable) unsets one. The policies, their units and meaning come from
:mod:`danube_common.namespace_policies` (the same text as the docs).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from danube_common.namespace_policies import (
    BACKLOG_POLICIES,
    DESCRIPTIONS,
    DISPATCH_STRATEGIES,
    DURABILITIES,
    FIELD_NAMES,
    RETENTION_NAMES,
    TOPIC_NAMES,
)
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_sdk.cli.admin_commands import Admin
from danube_sdk.cli.argtypes import non_negative_int, positive_float
from danube_sdk.cli.output import emit

Leaf = Callable[..., argparse.ArgumentParser]

#: Policy -> (argparse type, choices) for its flag.
_CHOICES: dict[str, tuple[str, ...]] = {
    "backlog_quota_policy": BACKLOG_POLICIES,
    "default_dispatch_strategy": DISPATCH_STRATEGIES,
    "default_durability": DURABILITIES,
}
_FLOATS = ("publish_rate_msgs_per_s", "publish_rate_bytes_per_s")


def add_namespace_policy_parsers(subs: argparse._SubParsersAction[Any], leaf: Leaf) -> None:
    p = leaf(
        subs,
        "get-policies",
        "show a namespace's policies (limits and defaults its topics inherit; '-' = not set: no "
        "limit, or the broker's default)",
        namespaces_get_policies,
        [
            "danube-admin namespaces get-policies analytics",
            "danube-admin namespaces get-policies analytics -o json",
        ],
    )
    p.add_argument("name", help="namespace name")
    p = leaf(
        subs,
        "set-policies",
        "set (or --clear) namespace policies; the others are kept. Brokers apply a change to running "
        "topics within a second. Limits: a producer, consumer or subscription over its limit is refused "
        "when it attaches (those attached stay); a publish over the rate waits (the producer is slowed, "
        "nothing is dropped); a topic's own policies override the namespace's",
        namespaces_set_policies,
        [
            "danube-admin namespaces set-policies analytics --max-producers-per-topic 10 --max-topics 100",
            "danube-admin namespaces set-policies analytics --publish-rate-msgs-per-s 5000 \\",
            "    --publish-rate-bytes-per-s 5000000",
            "danube-admin namespaces set-policies analytics --backlog-quota-messages 100000 \\",
            "    --backlog-quota-policy refuse",
            "danube-admin namespaces set-policies analytics --compaction-threshold-bytes 104857600",
            "danube-admin namespaces set-policies analytics --clear publish_rate_msgs_per_s",
        ],
    )
    p.add_argument("name", help="namespace name")
    _policy_flags(p, FIELD_NAMES, "unset this policy (no limit / the broker's default)")


def add_topic_policy_parsers(subs: argparse._SubParsersAction[Any], leaf: Leaf) -> None:
    p = leaf(
        subs,
        "get-policies",
        "show the limits a topic sets over its namespace's ('own') and those its brokers apply "
        "('effective': the namespace's, with the topic's own over them)",
        topics_get_policies,
        [
            "danube-admin topics get-policies /analytics/clicks",
            "danube-admin topics get-policies /analytics/clicks -o json",
        ],
    )
    p.add_argument(
        "name", help="topic name (/namespace/topic); a partitioned topic's name covers its partitions"
    )
    p = leaf(
        subs,
        "set-policies",
        "set (or --clear) limits, retention and the compaction threshold of one topic over its namespace's "
        "(and, for retention, over what the topic was created with); the others are kept. max_topics and "
        "the defaults for new topics are the namespace's. Brokers apply a change to the running topic "
        "within a second",
        topics_set_policies,
        [
            "danube-admin topics set-policies /analytics/clicks --max-producers-per-topic 50",
            "danube-admin topics set-policies /analytics/clicks --publish-rate-msgs-per-s 20000",
            "danube-admin topics set-policies /analytics/clicks --retention-time-s 604800",
            "danube-admin topics set-policies /analytics/prices --compaction-threshold-bytes 67108864",
            "danube-admin topics set-policies /analytics/clicks --clear publish_rate_msgs_per_s",
        ],
    )
    p.add_argument(
        "name", help="topic name (/namespace/topic); a partitioned topic's name covers its partitions"
    )
    _policy_flags(
        p,
        TOPIC_NAMES,
        "unset this policy (the namespace's applies again; for retention, the topic's creation's)",
    )


def _policy_flags(p: argparse.ArgumentParser, names: tuple[str, ...], clear_help: str) -> None:
    for name in names:
        flag = "--" + name.replace("_", "-")
        if name in _CHOICES:
            p.add_argument(flag, dest=name, choices=_CHOICES[name], help=DESCRIPTIONS[name])
        elif name in _FLOATS:
            p.add_argument(flag, dest=name, type=positive_float, metavar="N", help=DESCRIPTIONS[name])
        else:
            p.add_argument(flag, dest=name, type=non_negative_int, metavar="N", help=_help(name, names))
    p.add_argument(
        "--clear",
        action="append",
        default=[],
        metavar="POLICY",
        choices=names,
        help=f"{clear_help}; repeatable. POLICY is one of: " + ", ".join(names),
    )


def _help(name: str, names: tuple[str, ...]) -> str:
    if name in RETENTION_NAMES and names == TOPIC_NAMES:  # one topic's own retention
        return DESCRIPTIONS[name].replace("reliable topics without their own: ", "reliable topics: ")
    return DESCRIPTIONS[name]


def policies_dict(p: apb.NamespacePolicies) -> dict[str, Any]:
    """Every policy, None when not set."""
    return {name: (getattr(p, name) if p.HasField(name) else None) for name in FIELD_NAMES}


def _show(resp: apb.NamespacePoliciesResponse, args: argparse.Namespace, title: str) -> None:
    d = policies_dict(resp.policies)
    if args.output == "json":
        emit([], fmt="json", json_data={"name": resp.name, "policies": d})
        return
    print(title)
    rows = [
        {"policy": k, "value": "-" if v is None else _text(v), "meaning": DESCRIPTIONS[k]}
        for k, v in d.items()
    ]
    emit(rows, fmt="table", columns=("policy", "value", "meaning"))


def _text(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def namespaces_get_policies(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.namespaces.GetNamespacePolicies(
        apb.NamespaceRequest(name=args.name), timeout=admin.timeout_s
    )
    _show(resp, args, f"policies of namespace {resp.name}:")


def topics_get_policies(admin: Admin, args: argparse.Namespace) -> None:
    resp = admin.topics.GetTopicPolicies(apb.DescribeTopicRequest(name=args.name), timeout=admin.timeout_s)
    _show_topic(resp, args, f"policies of topic {resp.name}:")


def topics_set_policies(admin: Admin, args: argparse.Namespace) -> None:
    given = {name: getattr(args, name) for name in TOPIC_NAMES if getattr(args, name, None) is not None}
    req = apb.SetTopicPoliciesRequest(
        name=args.name, policies=apb.NamespacePolicies(**given), clear=list(args.clear)
    )
    resp = admin.topics.SetTopicPolicies(req, timeout=admin.timeout_s)
    _show_topic(resp, args, f"policies of topic {resp.name} now:")


def _show_topic(resp: apb.TopicPoliciesResponse, args: argparse.Namespace, title: str) -> None:
    own, effective = policies_dict(resp.own), policies_dict(resp.effective)
    if args.output == "json":
        doc = {"name": resp.name, "own": _limits(own), "effective": _limits(effective)}
        emit([], fmt="json", json_data=doc)
        return
    print(title)
    rows = [
        {
            "policy": k,
            "own": "-" if own[k] is None else _text(own[k]),
            "effective": "-" if effective[k] is None else _text(effective[k]),
            "meaning": _help(k, TOPIC_NAMES),
        }
        for k in TOPIC_NAMES
    ]
    emit(rows, fmt="table", columns=("policy", "own", "effective", "meaning"))


def _limits(d: dict[str, Any]) -> dict[str, Any]:
    return {k: d[k] for k in TOPIC_NAMES}


def namespaces_set_policies(admin: Admin, args: argparse.Namespace) -> None:
    given = {name: getattr(args, name) for name in FIELD_NAMES if getattr(args, name, None) is not None}
    req = apb.SetNamespacePoliciesRequest(
        name=args.name, policies=apb.NamespacePolicies(**given), clear=list(args.clear)
    )
    resp = admin.namespaces.SetNamespacePolicies(req, timeout=admin.timeout_s)
    _show(resp, args, f"policies of namespace {resp.name} now:")


__all__ = ["add_namespace_policy_parsers", "add_topic_policy_parsers", "policies_dict"]
