"""Drives the unmodified PyPI ``danube-client==0.5.0`` against our cluster.

Runs ONLY under the separate venv ``.venv-danube-client`` (its top-level package is also
named ``danube`` and its generated protobufs clash with ours), started as a subprocess by
tests/e2e/test_interop_danube_client.py (plaintext) and tests/e2e/test_interop_secure.py (TLS,
tokens, mTLS). Prints one JSON object per line on stdout:

    {"event": "ready"}                       consumer stream open (after the warm-up)
    {"event": "sent", "i": N, "request_id": R}
    {"event": "received", "payload": "...", "offset": O, "topic": T, "attributes": {...}}
    {"event": "done", ...summary...}
    {"event": "error", "type": "...", "message": "...",      (exit code 1)
     "code": "UNAUTHENTICATED", "details": "...", "error_code": "..."}   (the last three when
                                             a gRPC call failed: its status, details and the
                                             x-danube-error-code trailer, else null)

Modes:
  roundtrip  create a producer, subscribe, warm up until a probe arrives (new subscriptions
             start at the live tail), send --count messages, receive and ack them all
             (--nack-first: nack each one first and expect it again at the same offset).
  produce    create a producer and send --count messages.
  consume    subscribe, print "ready" once the stream delivered the first message (the test
             sends probes until then), then receive --count non-probe messages and ack them.
  schema     through client.schema(): register a JSON schema under --subject, read it back
             (latest, by id, versions, a compatibility check), create a producer with
             with_schema_subject (the topic takes the subject), have the topic's validation
             set to enforce with payload validation, send --count valid messages, then one
             invalid payload, which must be refused ({"event": "refused", ...}).
  topics     subscribe only: the first call is Discovery.TopicPartitions on the service URL
             (which the client does not swallow, unlike TopicLookup); prints the partitions.

Security, mapped onto the client's builder (a token forces TLS in the client):
  --ca FILE                        with_tls(FILE): verify the servers with this CA
  --client-cert F --client-key K   with_mtls(--ca, F, K): present a client certificate
  --token T                        with_token(T): `authorization: Bearer T` on every RPC
  --token-file F                   with_token_supplier(...): F is read again on every RPC
The service URL's scheme does not choose TLS (the client strips http:// and https://); the
options do. The server certificate must name the URL's host (the brokers' URLs come from the
lookup: 127.0.0.1 here).
Every await is bounded by a timeout: the client sets no deadlines of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import grpc
from danube import DanubeClientBuilder, DispatchStrategy, SubType
from danube.schema import SchemaType

SUB_TYPES = {
    "exclusive": SubType.EXCLUSIVE,
    "shared": SubType.SHARED,
    "failover": SubType.FAILOVER,
    "key-shared": SubType.KEY_SHARED,
}


def emit(**obj: object) -> None:
    print(json.dumps(obj), flush=True)


async def make_producer(client, args):  # type: ignore[no-untyped-def]
    b = client.new_producer().with_topic(args.topic).with_name(args.producer_name)
    if args.reliable:
        b = b.with_dispatch_strategy(DispatchStrategy.RELIABLE)
    if args.partitions:
        b = b.with_partitions(args.partitions)
    producer = b.build()
    await asyncio.wait_for(producer.create(), args.timeout_s)
    return producer


async def make_consumer(client, args):  # type: ignore[no-untyped-def]
    consumer = (
        client.new_consumer()
        .with_topic(args.topic)
        .with_consumer_name(args.consumer_name)
        .with_subscription(args.subscription)
        .with_subscription_type(SUB_TYPES[args.sub_type])
        .build()
    )
    await asyncio.wait_for(consumer.subscribe(), args.timeout_s)
    queue = await asyncio.wait_for(consumer.receive(), args.timeout_s)
    return consumer, queue


def describe(msg) -> dict:  # type: ignore[no-untyped-def]
    return {
        "payload": msg.payload.decode(errors="replace"),
        "offset": msg.msg_id.topic_offset,
        "topic": msg.msg_id.topic_name,
        "producer_id": msg.msg_id.producer_id,
        "attributes": dict(msg.attributes),
        "subscription": msg.subscription_name,
    }


async def receive_real(queue, consumer, count: int, timeout_s: float, nack_first: bool = False) -> list:  # type: ignore[no-untyped-def]
    got = []
    nacked: set[int] = set()
    while len(got) < count:
        msg = await asyncio.wait_for(queue.get(), timeout_s)
        probe = msg.attributes.get("probe") == "1"
        if nack_first and not probe and msg.msg_id.topic_offset not in nacked:
            nacked.add(msg.msg_id.topic_offset)
            await asyncio.wait_for(consumer.nack(msg, delay_ms=50, reason="interop test"), timeout_s)
            emit(event="nacked", **describe(msg))
            continue
        await asyncio.wait_for(consumer.ack(msg), timeout_s)
        if probe:
            continue
        emit(event="received", **describe(msg))
        got.append(msg)
    return got


def builder(args: argparse.Namespace) -> DanubeClientBuilder:
    b = DanubeClientBuilder().service_url(args.service_url)
    if args.client_cert or args.client_key:
        if not (args.ca and args.client_cert and args.client_key):
            raise SystemExit("--client-cert and --client-key go together, with --ca")
        b = b.with_mtls(args.ca, args.client_cert, args.client_key)
    elif args.ca:
        b = b.with_tls(args.ca)
    if args.token is not None:
        b = b.with_token(args.token)
    elif args.token_file:
        token_file = Path(args.token_file)
        b = b.with_token_supplier(lambda: token_file.read_text().strip())
    return b


def grpc_failure(exc: BaseException) -> dict[str, object]:
    """The gRPC status behind ``exc`` (the client wraps some, e.g. UnrecoverableError)."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, grpc.aio.AioRpcError):
        seen = seen.__cause__ or seen.__context__
    if seen is None:
        return {"code": None, "details": None, "error_code": None}
    error_code = None
    for key, value in seen.trailing_metadata() or ():
        if key == "x-danube-error-code":
            error_code = value.decode() if isinstance(value, bytes) else str(value)
    return {"code": seen.code().name, "details": seen.details(), "error_code": error_code}


async def run(args: argparse.Namespace) -> None:
    client = await builder(args).build()
    if args.mode == "topics":
        consumer = (
            client.new_consumer()
            .with_topic(args.topic)
            .with_consumer_name(args.consumer_name)
            .with_subscription(args.subscription)
            .build()
        )
        await asyncio.wait_for(consumer.subscribe(), args.timeout_s)
        emit(event="subscribed", partitions=sorted(consumer._consumers))
        await consumer.close()
        emit(event="done")
        return
    if args.mode == "produce":
        producer = await make_producer(client, args)
        for i in range(args.count):
            rid = await asyncio.wait_for(
                producer.send(f"{args.prefix}{i}".encode(), {"i": str(i)}), args.timeout_s
            )
            emit(event="sent", i=i, request_id=rid)
        await producer.close()
        emit(event="done", sent=args.count)
        return

    if args.mode == "consume":
        consumer, queue = await make_consumer(client, args)
        # The test publishes probes until we report one: only then is the stream attached.
        first = await asyncio.wait_for(queue.get(), args.timeout_s)
        await consumer.ack(first)
        emit(event="ready")
        pending_first = [] if first.attributes.get("probe") == "1" else [first]
        for m in pending_first:
            emit(event="received", **describe(m))
        got = await receive_real(queue, consumer, args.count - len(pending_first), args.timeout_s)
        await consumer.close()
        emit(event="done", received=len(got) + len(pending_first))
        return

    if args.mode == "schema":
        await run_schema(client, args)
        return

    # roundtrip
    producer = await make_producer(client, args)
    consumer, queue = await make_consumer(client, args)
    probes = 0
    while True:  # warm-up: the subscription starts at the live tail once the stream is attached
        await asyncio.wait_for(producer.send(b"probe", {"probe": "1"}), args.timeout_s)
        probes += 1
        try:
            msg = await asyncio.wait_for(queue.get(), 0.2)
        except TimeoutError:
            if probes * 0.2 > args.timeout_s:
                raise
            continue
        await consumer.ack(msg)
        break
    emit(event="ready", probes=probes)
    for i in range(args.count):
        rid = await asyncio.wait_for(
            producer.send(f"{args.prefix}{i}".encode(), {"i": str(i)}), args.timeout_s
        )
        emit(event="sent", i=i, request_id=rid)
    got = await receive_real(queue, consumer, args.count, args.timeout_s, nack_first=args.nack_first)
    await producer.close()
    await consumer.close()
    emit(event="done", sent=args.count, received=len(got))


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


async def run_schema(client, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    registry = client.schema()
    definition = json.dumps(PERSON).encode()
    schema_id = await asyncio.wait_for(
        registry.register_schema(args.subject)
        .with_type(SchemaType.JSON_SCHEMA)
        .with_schema_data(definition)
        .execute(),
        args.timeout_s,
    )
    latest = await asyncio.wait_for(registry.get_latest_schema(args.subject), args.timeout_s)
    by_id = await asyncio.wait_for(registry.get_schema_by_id(schema_id), args.timeout_s)
    versions = await asyncio.wait_for(registry.list_versions(args.subject), args.timeout_s)
    breaking = dict(PERSON, required=["name", "age"])
    compatible, errors = await asyncio.wait_for(
        registry.check_compatibility(args.subject, json.dumps(breaking).encode(), SchemaType.JSON_SCHEMA),
        args.timeout_s,
    )
    emit(
        event="registered",
        schema_id=schema_id,
        latest_version=latest.version,
        latest_subject=latest.subject,
        by_id_subject=by_id.subject,
        versions=versions,
        same_definition=json.loads(by_id.schema_definition) == PERSON,
        breaking_compatible=compatible,
        breaking_errors=errors,
    )
    producer = client.new_producer().with_topic(args.topic).with_name(args.producer_name)
    producer = producer.with_schema_subject(args.subject).build()
    await asyncio.wait_for(producer.create(), args.timeout_s)
    ok, message = await asyncio.wait_for(
        registry.configure_topic_schema(args.topic, args.subject, "enforce", True), args.timeout_s
    )
    config = await asyncio.wait_for(registry.get_topic_schema_config(args.topic), args.timeout_s)
    emit(
        event="configured",
        ok=ok,
        message=message,
        policy=config.validation_policy,
        payload_validation=config.enable_payload_validation,
        schema_id=config.schema_id,
    )
    for i in range(args.count):
        body = json.dumps({"name": f"n{i}", "age": i}).encode()
        rid = await asyncio.wait_for(producer.send(body, {"i": str(i)}), args.timeout_s)
        emit(event="sent", i=i, request_id=rid)
    try:
        await asyncio.wait_for(producer.send(json.dumps({"age": "old"}).encode(), None), args.timeout_s)
    except Exception as exc:  # the broker refuses it: report what the client saw
        emit(event="refused", type=type(exc).__name__, message=str(exc))
    else:
        emit(event="accepted-invalid")
    await producer.close()
    emit(event="done", sent=args.count)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["roundtrip", "produce", "consume", "schema", "topics"])
    p.add_argument("--subject", default="interop-people", help="schema mode: the schema subject")
    p.add_argument("--service-url", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--prefix", default="m")
    p.add_argument("--producer-name", default="interop-producer")
    p.add_argument("--consumer-name", default="interop-consumer")
    p.add_argument("--subscription", default="interop-sub")
    p.add_argument("--sub-type", choices=sorted(SUB_TYPES), default="exclusive")
    p.add_argument("--partitions", type=int, default=0)
    p.add_argument("--reliable", action="store_true")
    p.add_argument("--nack-first", action="store_true", help="nack each message once before acking it")
    p.add_argument("--timeout-s", type=float, default=20.0)
    p.add_argument("--ca", metavar="FILE", help="TLS: the CA that signed the servers' certificates")
    p.add_argument("--client-cert", metavar="FILE", help="mTLS: this client's certificate (with --ca)")
    p.add_argument("--client-key", metavar="FILE", help="mTLS: the key of --client-cert")
    token = p.add_mutually_exclusive_group()
    token.add_argument("--token", metavar="JWT", help="bearer token sent on every RPC (forces TLS)")
    token.add_argument("--token-file", metavar="FILE", help="bearer token read from FILE on every RPC")
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except Exception as exc:  # report every failure as data for the test
        emit(event="error", type=type(exc).__name__, message=str(exc), **grpc_failure(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
