"""danube-cli flags for delayed delivery (produce) and multi-topic consumers (consume)."""

from __future__ import annotations

import argparse
import re
from datetime import datetime
from typing import Any

from danube_sdk import DanubeClient
from danube_sdk.consumer import Consumer

_DURATION = re.compile(r"(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<unit>ms|s|m|h)?")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``250ms``, ``5s``, ``2m``, ``1h`` or a plain number of seconds -> seconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use e.g. 250ms, 5s, 2m, 1h or 1.5")
    return float(m["n"]) * _UNIT_S[m["unit"]]


def parse_when(text: str) -> datetime:
    """An ISO 8601 time (``2026-11-27T12:00:00Z``; without an offset: local time) -> aware datetime."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use ISO 8601, e.g. 2026-11-27T12:00:00Z or 2026-11-27T13:00:00+01:00"
        ) from None
    return when if when.tzinfo is not None else when.astimezone()


def parse_topic_list(text: str) -> list[str]:
    topics = [t.strip() for t in text.split(",") if t.strip()]
    if not topics:
        raise argparse.ArgumentTypeError("--topics needs at least one topic: /ns/a,/ns/b")
    return topics


def add_produce_arguments(prod: argparse.ArgumentParser) -> None:
    group = prod.add_argument_group(
        "delayed delivery",
        "Reliable topics only: shared and key-shared subscriptions receive each message no\n"
        "earlier than asked (exclusive and failover subscriptions deliver in order at once).\n"
        "The due time is stored with the message: it holds across broker restarts and moves.",
    )
    when = group.add_mutually_exclusive_group()
    when.add_argument(
        "--deliver-after",
        type=parse_duration,
        metavar="DURATION",
        help="deliver this long after sending: 250ms, 5s, 2m, 1h (a plain number is seconds)",
    )
    when.add_argument(
        "--deliver-at",
        type=parse_when,
        metavar="ISO_TIME",
        help="deliver at this time (ISO 8601, e.g. 2026-11-27T12:00:00Z; without an offset: local time)",
    )


def send_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``send_async`` for the delayed-delivery flags."""
    after = getattr(args, "deliver_after", None)
    at = getattr(args, "deliver_at", None)
    if after is not None:
        return {"deliver_after": after}
    if at is not None:
        return {"deliver_at": at}
    return {}


def add_consume_arguments(cons: argparse.ArgumentParser) -> None:
    group = cons.add_argument_group(
        "many topics",
        "One consumer over many topics (instead of -t), their messages merged fairly. A pattern\n"
        "names one namespace and a regular expression that must match the whole topic name\n"
        "after it; topics created later that match are picked up within seconds, deleted ones\n"
        "drop out.",
    )
    which = group.add_mutually_exclusive_group()
    which.add_argument(
        "--topics",
        type=parse_topic_list,
        metavar="T1,T2,...",
        help="comma-separated topics, e.g. /default/orders,/default/refunds",
    )
    which.add_argument(
        "--pattern",
        metavar="/NAMESPACE/REGEX",
        help="every topic of the namespace matching REGEX, e.g. '/default/orders-.*'",
    )


async def subscribe(client: DanubeClient, args: argparse.Namespace, **options: Any) -> Consumer[Any]:
    """``subscribe_many`` for --topics/--pattern, else ``subscribe`` to -t."""
    topics = getattr(args, "topics", None)
    pattern = getattr(args, "pattern", None)
    if topics is None and pattern is None:
        return await client.subscribe(args.topic, **options)
    return await client.subscribe_many(topics, pattern=pattern, **options)
