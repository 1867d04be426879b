"""``danube-admin``: manage brokers, namespaces, topics, subscription policies, schemas and
security (RBAC roles and bindings, JWT tokens) through the lookup's admin API.

Talks gRPC (package ``danube.admin.v1``) to the lookup service's admin port. Listings print
as tables, or as JSON with ``--output json``. Expected failures print ``error: ...`` and a
hint and exit 1; usage errors exit 2. The commands themselves are in ``admin_commands`` (and
``admin_schemas`` for the schema registry, which the admin port serves too, and
``admin_security`` for ``security ...``).

A command gets what its parser's ``connect`` default makes of the channel (``Admin.connect``
unless it says otherwise); ``connect=None`` marks an offline command (``security tokens``):
no channel is opened and the security flags are not read.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from danube_common.errors import MD_ERROR_CODE, ConfigError, DanubeError, error_from_rpc
from danube_sdk.auth import TLS_HINT, ChannelSecurity, tls_failure
from danube_sdk.cli.admin_commands import (
    TOPIC_COLUMNS,
    Admin,
    brokers_activate,
    brokers_drain,
    brokers_list,
    cluster_load,
    leaders_list,
    namespaces_create,
    namespaces_delete,
    namespaces_list,
    rebalance,
    rebalance_history,
    subscriptions_get_policy,
    subscriptions_set_policy,
    topic_dict,
    topic_rows,
    topics_compact,
    topics_create,
    topics_delete,
    topics_describe,
    topics_force_takeover,
    topics_list,
    topics_move,
    topics_pin_cmd,
    topics_stats,
    topics_unpin_cmd,
)
from danube_sdk.cli.admin_ns_policies import add_namespace_policy_parsers, add_topic_policy_parsers
from danube_sdk.cli.admin_schemas import add_schema_parsers
from danube_sdk.cli.admin_security import add_security_parsers
from danube_sdk.cli.argtypes import non_negative_int, positive_float
from danube_sdk.cli.auth_flags import SECURITY_EPILOG, add_auth_arguments, resolve_auth
from danube_sdk.cli.output import FORMATS

__all__ = ["TOPIC_COLUMNS", "Admin", "build_parser", "explain", "main", "topic_dict", "topic_rows"]

DEFAULT_ADMIN_URL = "http://127.0.0.1:50051"
ENV_ADMIN_URL = "DANUBE_ADMIN_URL"
DISPATCH_CHOICES = ("non_reliable", "reliable")
DURABILITY_CHOICES = ("fsync", "none", "cloud")
POISON_POLICY_CHOICES = ("dead_letter", "drop", "block")

_F = argparse.RawDescriptionHelpFormatter


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


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
        type=positive_float,
        metavar="N",
        default=10.0 if defaults else sup,
        help="deadline of each call in seconds (default 10)",
    )
    add_auth_arguments(p, env=dict(os.environ) if defaults else None, suppress=not defaults)
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common(defaults=False)
    root = argparse.ArgumentParser(
        prog="danube-admin",
        description="Manage a Danube cluster (brokers, namespaces, topics, subscription policies, "
        "schemas, security) through the lookup service's admin API.",
        parents=[_common(defaults=True)],
        formatter_class=_F,
        # The top level sees every argument; abbreviating there would read a command's own
        # option (`topics move --to`) as an ambiguous prefix of --token/--token-file.
        allow_abbrev=False,
        epilog=_examples(
            "danube-admin brokers list",
            "danube-admin brokers drain broker-1",
            "danube-admin leaders list",
            "danube-admin topics move /default/orders --to broker-2",
            "danube-admin namespaces create analytics",
            "danube-admin topics create /analytics/clicks --partitions 3 --dispatch-strategy reliable",
            "danube-admin topics stats /analytics/clicks-part-0",
            "danube-admin subscriptions set-policy /analytics/clicks -s etl --max-redeliveries 5 \\",
            "    --poison-policy dead_letter --dead-letter-topic /analytics/clicks-dlq",
            "danube-admin schemas register orders --schema-type json_schema --file orders.schema.json",
            "danube-admin topics set-schema /default/orders --subject orders --validation-policy enforce",
            "danube-admin --output json topics list --namespace analytics",
            "danube-admin security bindings create alice-orders --principal user:alice --role producer \\",
            "    --scope namespace --resource orders",
            "DANUBE_ADMIN_URL=http://10.0.0.5:50051 danube-admin topics describe /analytics/clicks",
            "danube-admin --admin-url https://localhost:50051 --tls-ca ca.pem --tls-cert admin.pem \\",
            "    --tls-key admin.key --token-file admin.jwt brokers list",
        )
        + "\n\n"
        + SECURITY_EPILOG,
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
        aliases: Sequence[str] = (),
    ) -> argparse.ArgumentParser:
        p = subs.add_parser(
            name,
            help=help_,
            description=help_,
            parents=[common],
            formatter_class=_F,
            epilog=_examples(*examples),
            aliases=list(aliases),
        )
        p.set_defaults(func=func)
        return p

    b = group(
        "brokers",
        "registered brokers: state, load, drain",
        ["danube-admin brokers list", "danube-admin brokers drain broker-1"],
    )
    leaf(
        b,
        "list",
        "list brokers with their state (active, draining, drained), topic count and latest load report",
        brokers_list,
        ["danube-admin brokers list", "danube-admin brokers list --output json"],
    )
    p = leaf(
        b,
        "drain",
        "move every topic off a broker (the load manager does it, reliable topics without losing a "
        "message) and give it no new topics; its state reads drained once it owns none",
        brokers_drain,
        ["danube-admin brokers drain broker-1"],
    )
    p.add_argument("broker_id", help="broker id (see `danube-admin brokers list`)")
    p = leaf(
        b,
        "activate",
        "let a drained or draining broker take topics again",
        brokers_activate,
        ["danube-admin brokers activate broker-1"],
    )
    p.add_argument("broker_id", help="broker id")

    cg = group(
        "cluster",
        "the cluster as the Spark planner sees it: load report and rebalancing plans",
        ["danube-admin cluster load", "danube-admin cluster plans"],
    )
    p = leaf(
        cg,
        "load",
        "the planner's latest cluster load report: per broker score, rates, backlog; the imbalance "
        "(coefficient of variation of the scores) and the hottest topics",
        cluster_load,
        [
            "danube-admin cluster load",
            "danube-admin cluster load --hot 20",
            "danube-admin cluster load -o json",
        ],
    )
    p.add_argument(
        "--hot", type=non_negative_int, default=10, metavar="N", help="hot topics shown (default 10)"
    )
    p = leaf(
        cg,
        "plans",
        "plan history: each rebalancing plan, its status and how its moves ended",
        rebalance_history,
        ["danube-admin cluster plans", "danube-admin cluster plans --show 1700000000000-a1b2c3"],
    )
    p.add_argument("--limit", type=non_negative_int, default=20, metavar="N", help="newest N plans (0: all)")
    p.add_argument("--show", dest="plan_id", metavar="PLAN_ID", help="also list this plan's moves")

    rb = groups.add_parser(
        "rebalance",
        help="ask the Spark planner for a rebalancing plan now, show it, and apply it",
        description="Ask the Spark planner (danube-planner) for a plan now and show it. Without "
        "--dry-run the plan is pending at once and the load manager carries it out; with --dry-run "
        "it is only proposed: apply it with --apply PLAN_ID.",
        parents=[common],
        formatter_class=_F,
        epilog=_examples(
            "danube-admin rebalance --dry-run",
            "danube-admin rebalance --apply 1700000000000-a1b2c3",
            "danube-admin rebalance              # plan and execute",
        ),
    )
    rb.set_defaults(func=rebalance)
    mode = rb.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="propose a plan without executing it")
    mode.add_argument("--apply", dest="apply_plan", metavar="PLAN_ID", help="execute a proposed plan")
    rb.add_argument(
        "--wait-s",
        type=positive_float,
        default=120.0,
        metavar="N",
        help="how long to wait for the plan (default 120)",
    )

    lg = group("leaders", "control-plane leadership", ["danube-admin leaders list"])
    leaf(
        lg,
        "list",
        "who leads each role (load-manager, spark-planner, ...) and under which term (fencing token)",
        leaders_list,
        ["danube-admin leaders list", "danube-admin leaders list -o json"],
    )

    n = group(
        "namespaces",
        "namespaces (groups of topics)",
        [
            "danube-admin namespaces list",
            "danube-admin namespaces create analytics",
            "danube-admin namespaces set-policies analytics --max-producers-per-topic 10",
        ],
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
    add_namespace_policy_parsers(n, leaf)

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
            "danube-admin topics create /default/audit --dispatch-strategy reliable --durability cloud \\",
            "    --retention-time-s 86400",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")
    p.add_argument(
        "--partitions",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="0 (default) for a plain topic; N > 0 creates TOPIC-part-0 .. TOPIC-part-(N-1)",
    )
    p.add_argument(
        "--dispatch-strategy",
        choices=DISPATCH_CHOICES,
        help="non_reliable (in memory) or reliable (write-ahead log, at-least-once); default: the "
        "namespace's default_dispatch_strategy policy, else non_reliable",
    )
    p.add_argument(
        "--durability",
        choices=DURABILITY_CHOICES,
        help="reliable topics: when a producer is acknowledged: fsync (default: after the WAL is "
        "on disk), none (at once, faster), cloud (after upload to object storage)",
    )
    p.add_argument(
        "--retention-time-s",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="reliable topics: keep acknowledged messages N seconds (0, default: until every "
        "subscription acknowledged them; with object storage, a limit bounds what it keeps too, "
        "which with no limit is everything)",
    )
    p.add_argument(
        "--retention-size-bytes",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="reliable topics: keep up to N bytes of acknowledged messages (0: none; with object "
        "storage, a limit bounds what it keeps too)",
    )
    p.add_argument(
        "--unclean-takeover-after-s",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="reliable topics: if a dead owner's log end is not recorded within N seconds (its machine "
        "lost), the next owner forces the takeover, giving up what was not uploaded (0, default: never; "
        "an operator decides with `topics force-takeover`)",
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
    p = leaf(
        t,
        "stats",
        "live figures from the owning broker: offsets, WAL, object storage, the compacted view, rates, "
        "and per subscription backlog, cursor, unacked, redeliveries, dead letters",
        topics_stats,
        [
            "danube-admin topics stats /default/orders",
            "danube-admin topics stats /default/clicks-part-0 -o json",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic (one partition of a partitioned topic)")
    p = leaf(
        t,
        "compact",
        "compact a reliable topic now, on its owning broker: its compacted view then holds the newest "
        "message of each routing key below the horizon (an empty payload drops the key, keyless messages "
        "are left out), which consumers and readers with read_compacted read before the live log. Prints "
        "the horizon, keys, entries, bytes, duration and where the view is stored. The policy "
        "compaction_threshold_bytes compacts automatically (`topics set-policies`)",
        topics_compact,
        [
            "danube-admin topics compact /default/prices",
            "danube-admin topics compact /default/prices-part-0 -o json",
            "danube-admin topics compact /default/big --wait-s 1800",
        ],
    )
    p.add_argument("topic", help="reliable topic, /namespace/topic (each partition of a partitioned topic)")
    p.add_argument(
        "--wait-s",
        type=positive_float,
        default=300.0,
        metavar="N",
        help="how long to wait for the compaction to finish (default 300; the lookup service gives the "
        "broker its compaction_rpc_timeout_s, 300 s by default)",
    )
    p.set_defaults(
        hints={
            "TIMEOUT": "the compaction may still finish on the broker: see `danube-admin topics stats {topic}`; "
            "for a large topic raise the lookup service's compaction_rpc_timeout_s",
            "FAILED_PRECONDITION": "only reliable topics are compacted, one partition at a time: see "
            "`danube-admin topics describe {topic}`",
        }
    )
    p = leaf(
        t,
        "move",
        "ask the load manager to move a topic to another broker (clients follow it; reliable "
        "subscriptions lose nothing)",
        topics_move,
        [
            "danube-admin topics move /default/orders --to broker-2",
            "danube-admin topics move /default/clicks-part-1",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic (one partition of a partitioned topic)")
    p.add_argument("--to", metavar="BROKER_ID", help="target broker; default: the least-loaded other broker")
    p = leaf(
        t,
        "force-takeover",
        "end the wait for a dead broker's log end when its disk is lost for good: the topic continues "
        "after every offset that broker may have acknowledged, and what object storage does not hold is "
        "recorded as lost (shown by `topics stats`). Refused while that broker is registered",
        topics_force_takeover,
        [
            "danube-admin topics force-takeover /default/orders --accept-loss --reason 'host lost'",
        ],
    )
    p.add_argument("topic", help="topic name, /namespace/topic (one partition of a partitioned topic)")
    p.add_argument(
        "--accept-loss",
        action="store_true",
        help="required: confirm that what the dead broker did not upload is given up",
    )
    p.add_argument("--reason", default="", help="recorded with the decision (who and why)")
    add_topic_policy_parsers(t, leaf)
    p = leaf(
        t,
        "pin",
        "pin a topic to its broker: rebalancing plans never move it (drains and explicit moves still do)",
        topics_pin_cmd,
        ["danube-admin topics pin /default/orders"],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")
    p = leaf(
        t,
        "unpin",
        "let rebalancing plans move the topic again",
        topics_unpin_cmd,
        ["danube-admin topics unpin /default/orders"],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")

    sp = group(
        "subscriptions",
        "subscription failure policies (reliable topics)",
        [
            "danube-admin subscriptions get-policy /default/orders -s billing",
            "danube-admin subscriptions set-policy /default/orders -s billing --poison-policy drop",
            "danube-admin subscriptions set-policy /default/orders -s etl --max-redeliveries 5",
        ],
    )
    p = leaf(
        sp,
        "set-policy",
        "set how a subscription handles failing messages: redeliveries, ack timeout, backoff, "
        "and what happens to a message delivered too often (applied by the broker at once). The "
        "policy replaces the one stored before: options not given use the broker's defaults "
        "(they are not kept from an earlier set-policy). Give at least one option",
        subscriptions_set_policy,
        [
            "danube-admin subscriptions set-policy /default/orders -s billing --max-redeliveries 5 \\",
            "    --ack-timeout-ms 30000 --backoff-base-ms 100 --backoff-max-ms 10000 \\",
            "    --poison-policy dead_letter --dead-letter-topic /default/orders-dlq",
            "danube-admin subscriptions set-policy /default/orders -s audit --poison-policy block",
            "danube-admin subscriptions set-policy /default/orders -s etl --ack-timeout-ms 60000",
        ],
    )
    p.add_argument("topic", help="reliable topic, /namespace/topic (a partitioned topic: every partition)")
    p.add_argument("-s", "--subscription", required=True, help="subscription name")
    p.add_argument(
        "--max-redeliveries",
        type=non_negative_int,
        metavar="N",
        help="redeliveries of one message after its first delivery before the poison policy "
        "applies: N allows 1 + N deliveries; 0 is unlimited, so the poison policy never applies "
        "(default: the broker's)",
    )
    p.add_argument(
        "--ack-timeout-ms",
        type=non_negative_int,
        metavar="N",
        help="redeliver a message not acknowledged N ms after delivery; 0 is never (default: the broker's)",
    )
    p.add_argument(
        "--backoff-base-ms",
        type=non_negative_int,
        metavar="N",
        help="redelivery delay base * 2^(attempt-1) ...; 0 redelivers at once (default: the broker's)",
    )
    p.add_argument(
        "--backoff-max-ms",
        type=non_negative_int,
        metavar="N",
        help="... capped at N ms; at least --backoff-base-ms when both are given (default: the broker's)",
    )
    p.add_argument(
        "--poison-policy",
        choices=POISON_POLICY_CHOICES,
        help="after --max-redeliveries: dead_letter (publish it to --dead-letter-topic), drop (skip "
        "it), or block (it stalls its slot or key) (default: the broker's)",
    )
    p.add_argument(
        "--dead-letter-topic",
        metavar="TOPIC",
        help="with --poison-policy dead_letter (required there): /namespace/topic",
    )
    p = leaf(
        sp,
        "get-policy",
        "show a subscription's failure policy ('defaults (broker config)' when none was set; "
        "'(broker default)' for a field the policy leaves out, null in JSON)",
        subscriptions_get_policy,
        ["danube-admin subscriptions get-policy /default/orders -s billing -o json"],
    )
    p.add_argument("topic", help="topic name, /namespace/topic")
    p.add_argument("-s", "--subscription", required=True, help="subscription name")
    add_schema_parsers(group, leaf, t)
    add_security_parsers(group, leaf)
    return root


# ---------------------------------------------------------------------------- errors


def explain(
    exc: grpc.RpcError,
    admin_url: str,
    timeout_s: float,
    *,
    namespace: str = "NS",
    group: str = "",
    hints: dict[str, str] | None = None,
) -> tuple[str, str]:
    """A failed call -> (error message, hint) for a person at a terminal."""
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    from_danube = any(item[0] == MD_ERROR_CODE for item in trailing or ())
    status = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else ""
    if not from_danube and status == grpc.StatusCode.UNAVAILABLE and tls_failure(details or ""):
        return (f"cannot connect securely to the admin API at {admin_url}: {details}", TLS_HINT)
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
    return err.message, _hint(err, namespace, group, hints)


def explain_error(err: DanubeError, admin_url: str, timeout_s: float) -> tuple[str, str]:
    """An SDK error -> (error message, hint): explained like the gRPC failure it came from."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, grpc.RpcError):
        cause = cause.__cause__
    if isinstance(cause, grpc.RpcError):
        return explain(cause, admin_url, timeout_s)
    return err.message, _hint(err, "NS")


_SECURITY_HINTS = {
    "NOT_FOUND": "list roles with `danube-admin security roles list`, bindings with "
    "`danube-admin security bindings list`",
    "PERMISSION_DENIED": "the security commands need manage_cluster on the cluster (the built-in "
    "admin role bound at cluster scope, or a super admin's token)",
}


def _hint(
    err: DanubeError, namespace: str, group: str = "", command_hints: dict[str, str] | None = None
) -> str:
    """``command_hints``: the command's own (its parser's ``hints`` default), before the general ones."""
    if command_hints and err.code in command_hints:
        return command_hints[err.code]
    if group == "security" and err.code in _SECURITY_HINTS:
        return _SECURITY_HINTS[err.code]
    hints = {
        "NAMESPACE_NOT_FOUND": "list namespaces with `danube-admin namespaces list`",
        "NAMESPACE_NOT_EMPTY": f"list its topics with `danube-admin topics list --namespace {namespace}`",
        "TOPIC_NOT_FOUND": "list topics with `danube-admin topics list`",
        "BROKER_NOT_FOUND": "list brokers with `danube-admin brokers list`",
        "NO_BROKER_AVAILABLE": "start a broker (`danube-local up` starts a whole cluster)",
        "METADATA_UNAVAILABLE": "the lookup service cannot reach etcd; check that etcd is running",
        "TIMEOUT": "the lookup service, etcd or the owning broker is slow; retry, or raise --timeout-s",
        "UNAVAILABLE": "see which brokers are registered with `danube-admin brokers list`",
        "INCOMPATIBLE_SCHEMA": "see why with `danube-admin schemas check ...`; or change the subject's mode "
        "with `danube-admin schemas set-compatibility SUBJECT --mode ...`",
        "INVALID_SCHEMA": "fix the definition where the message says, then register it again",
        "NOT_FOUND": "list schema subjects with `danube-admin schemas list`",
        "UNAUTHENTICATED": "give a valid token with --token-file, --token or DANUBE_TOKEN (and TLS flags: "
        "a token is only sent over TLS)",
        "PERMISSION_DENIED": "the token's subject lacks the permission; ask an administrator to bind it a role",
        "CONFIG_ERROR": "fix the flag or file the message names",
        "TOO_MANY_TOPICS": "see the namespace's limits with `danube-admin namespaces get-policies NS`; "
        "delete topics, or raise max_topics with `danube-admin namespaces set-policies NS --max-topics N`",
    }
    return hints.get(err.code, "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    connect = getattr(args, "connect", Admin.connect)
    if connect is None:
        return _run_offline(args)
    try:
        auth = resolve_auth(args)
    except ConfigError as err:
        parser.error(err.message)
    try:
        security = ChannelSecurity(args.admin_url, tls=auth.tls, token=auth.token)
        with security.open_sync_channel(args.admin_url) as channel:
            args.func(connect(channel, args.timeout_s), args)
    except grpc.RpcError as exc:
        namespace = getattr(args, "name", None) or getattr(args, "namespace", None) or "NS"
        message, hint = explain(
            exc,
            args.admin_url,
            args.timeout_s,
            namespace=namespace,
            group=getattr(args, "group", ""),
            hints=_command_hints(args),
        )
        print(f"error: {message}", file=sys.stderr)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 1
    except DanubeError as err:  # the schema commands use the SDK's registry client
        message, hint = explain_error(err, args.admin_url, args.timeout_s)
        print(f"error: {message}", file=sys.stderr)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `danube-admin topics list | head -1`
        return 0
    return 0


def _command_hints(args: argparse.Namespace) -> dict[str, str]:
    """The command's own hints (its parser's ``hints`` default), naming its topic."""
    topic = getattr(args, "topic", None) or "TOPIC"
    return {code: text.format(topic=topic) for code, text in getattr(args, "hints", {}).items()}


def _run_offline(args: argparse.Namespace) -> int:
    """A command that calls no server (``security tokens ...``)."""
    try:
        args.func(None, args)
    except DanubeError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
