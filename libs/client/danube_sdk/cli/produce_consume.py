"""danube-cli: produce to and consume from a Danube cluster from the shell."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from danube_common.aio import cancel_and_wait
from danube_common.errors import (
    ConfigError,
    ConsumerBusy,
    DanubeError,
    InvalidPayload,
    MessageTooLarge,
    NoBrokerAvailable,
    NotFound,
    ProducerBusy,
    SubscriptionTypeMismatch,
    Timeout,
    Unavailable,
)
from danube_common.grpc_util import install_stop_signals
from danube_common.observability.tracing import process_tracing
from danube_sdk import (
    AccessMode,
    Compression,
    DanubeClient,
    DispatchStrategy,
    InitialPosition,
    Message,
    MessageId,
    Reader,
    SchemaReference,
    StartPosition,
    SubType,
)
from danube_sdk.auth import tls_failure
from danube_sdk.cli import delivery_flags
from danube_sdk.cli.argtypes import non_negative_int
from danube_sdk.cli.auth_flags import SECURITY_EPILOG, add_auth_arguments, resolve_auth
from danube_sdk.schema_registry import encoder_for

DEFAULT_SERVICE_URL = "http://127.0.0.1:6650"
DEFAULT_TOPIC = "/default/test_topic"
SUB_TYPES = {
    "exclusive": SubType.EXCLUSIVE,
    "shared": SubType.SHARED,
    "failover": SubType.FAILOVER,
    "key-shared": SubType.KEY_SHARED,
}
INITIAL_POSITIONS = {"latest": InitialPosition.LATEST, "earliest": InitialPosition.EARLIEST}
#: Up to this many messages, produce prints every message id.
PRINT_IDS_MAX = 100
#: Schema types a --schema-file can be registered as.
SCHEMA_FILE_TYPES = ("json_schema", "avro", "protobuf")

EXAMPLES = (
    """\
examples:
  danube-cli produce -t /default/orders -m "hello"
  danube-cli produce -t /default/orders -m "tick" -c 1000 --rate 100 -a source:cli,env:dev
  danube-cli produce -t /default/orders --size 1024 -c 1000000 --reliable
  danube-cli produce -t /default/logs -f ./app.log --compression zstd --reliable
  danube-cli produce -t /default/orders -f ./order.json -k customer-42
  danube-cli produce -t /default/reminders --reliable -m "ping" --deliver-after 30s
  danube-cli produce -t /default/reminders --reliable -m "ping" --deliver-at 2026-11-27T12:00:00Z
  danube-cli produce -t /default/orders --schema-subject orders -m '{"id": 1, "item": "pen"}'
  danube-cli produce -t /default/orders --schema-subject orders --schema-file order.avsc \
      --schema-type avro -m '{"id": 1, "item": "pen"}'
  danube-cli consume -t /default/orders -m my-sub
  danube-cli consume -t /default/orders -m audit --sub-type exclusive -c 10 --output json
  danube-cli consume -t /default/orders -m replay --initial-position earliest
  danube-cli consume -t /default/ledger --reader --start earliest -c 100
  danube-cli consume -t /default/ledger --reader --start @2026-11-27T09:00:00Z
  danube-cli consume -t /default/prices --reader --start earliest --read-compacted
  danube-cli consume -t /default/prices -m snapshot --initial-position earliest --read-compacted
  danube-cli consume --topics /default/orders,/default/refunds -m audit
  danube-cli consume --pattern '/default/orders-.*' -m all-orders
  danube-cli consume -s https://localhost:6650 --tls-ca ca.pem --token-file app.jwt \
      -t /default/orders -m my-sub

The service URL defaults to $DANUBE_SERVICE_URL, else http://127.0.0.1:6650.
Start a local cluster with `danube-local up`.

Tracing: with OTEL_EXPORTER_OTLP_ENDPOINT set (and OTEL_TRACES_SAMPLER, e.g.
traceidratio with OTEL_TRACES_SAMPLER_ARG=0.01), every sampled message gets a `send` span that
the brokers and consumers continue; consume prints nothing extra, its `process` spans join them.

"""
    + SECURITY_EPILOG
)


def parse_attributes(text: str) -> dict[str, str]:
    """``k:v,k2:v2`` -> ``{"k": "v", "k2": "v2"}`` (a value may itself contain ':')."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(
                f"attribute {item!r} is not key:value (e.g. -a source:cli,env:dev)"
            )
        out[key.strip()] = value.strip()
    return out


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _start_position(text: str) -> StartPosition:
    try:
        return StartPosition.parse(text)
    except DanubeError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def build_parser(env: dict[str, str] | None = None) -> argparse.ArgumentParser:
    env = dict(os.environ) if env is None else env
    default_url = env.get("DANUBE_SERVICE_URL") or DEFAULT_SERVICE_URL
    parser = argparse.ArgumentParser(
        prog="danube-cli",
        description="Produce messages to and consume messages from a Danube cluster.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{produce,consume}")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "-s", "--service-url", default=default_url, help=f"cluster service URL (default: {default_url})"
        )
        p.add_argument("-t", "--topic", default=DEFAULT_TOPIC, help=f"topic (default: {DEFAULT_TOPIC})")
        p.add_argument(
            "--connect-timeout-s",
            type=_non_negative_float,
            default=10.0,
            help="how long to keep trying to reach the cluster (default: 10)",
        )
        p.add_argument("-v", "--verbose", action="store_true", help="log reconnects and retries")
        add_auth_arguments(p, env=env)

    prod = sub.add_parser(
        "produce",
        help="send messages",
        description="Send messages to a topic; each is acknowledged by the broker.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common(prod)
    source = prod.add_mutually_exclusive_group(required=True)
    source.add_argument("-m", "--message", help="message text")
    source.add_argument("-f", "--file", help="send the contents of this file as the payload")
    source.add_argument(
        "--size", type=_positive_int, metavar="BYTES", help="send generated payloads of this size"
    )
    prod.add_argument("-c", "--count", type=_positive_int, default=1, help="messages to send (default: 1)")
    prod.add_argument(
        "--rate", type=_non_negative_float, default=0.0, metavar="MSG_PER_S", help="0 = as fast as possible"
    )
    prod.add_argument("-a", "--attributes", type=parse_attributes, default={}, help="k:v,k2:v2")
    prod.add_argument("-k", "--key", help="routing key (same key -> same partition, in order)")
    prod.add_argument(
        "--reliable",
        action="store_true",
        help="reliable dispatch (write-ahead log, at-least-once; resends are deduplicated)",
    )
    prod.add_argument("-n", "--producer-name", help="producer name (default: generated)")
    prod.add_argument("--exclusive", action="store_true", help="exclusive producer access")
    prod.add_argument(
        "--compression",
        choices=[c.name.lower() for c in Compression],
        default="none",
        help="compress with this codec: the messages of a batch with the same key together "
        "(consumers unpack and decompress them; what does not get smaller is sent as it is). "
        "default: none",
    )
    prod.add_argument(
        "--no-pack",
        action="store_true",
        help="with --compression, compress each payload alone instead of packing a batch's "
        "messages into one compressed record (each message then has an offset of its own)",
    )
    prod.add_argument(
        "--no-chunking",
        action="store_true",
        help="fail a payload larger than the broker's max message size (after compression) "
        "instead of sending it in chunks that consumers reassemble (the default)",
    )
    schema = prod.add_argument_group(
        "schema",
        "Produce with a schema of the registry (on the service URL). The message (-m, or -f's "
        "contents) is then JSON text: sent as it is for json_schema (after checking it against the "
        "schema), written as one binary datum for avro, parsed as the protobuf JSON mapping for "
        "protobuf. Every message carries the schema id and version.",
    )
    schema.add_argument("--schema-subject", metavar="SUBJECT", help="the schema subject")
    version = schema.add_mutually_exclusive_group()
    version.add_argument(
        "--schema-version", type=_positive_int, metavar="N", help="use version N (default: the latest)"
    )
    version.add_argument(
        "--schema-min-version", type=_positive_int, metavar="N", help="use the latest, which must be >= N"
    )
    schema.add_argument(
        "--schema-file",
        metavar="PATH",
        help="register this definition under --schema-subject first (an identical one keeps its "
        "version), then produce with that version",
    )
    schema.add_argument("--schema-type", choices=SCHEMA_FILE_TYPES, help="the type of --schema-file")
    delivery_flags.add_produce_arguments(prod)
    prod.set_defaults(func=run_produce)

    cons = sub.add_parser(
        "consume",
        help="receive messages",
        description="Receive messages from a topic through a subscription; Ctrl-C stops.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common(cons)
    source = cons.add_mutually_exclusive_group(required=True)
    source.add_argument("-m", "--subscription", help="subscription name (or --reader)")
    cons.add_argument(
        "-n", "--consumer-name", help="consumer name, or the reader's name (default: generated)"
    )
    source.add_argument(
        "--reader",
        action="store_true",
        help="read a reliable topic without a subscription: nothing is stored in etcd, retention does "
        "not wait for it, nothing is acknowledged on the topic's behalf; it follows the live tail and "
        "continues across topic moves (no -m; --sub-type, --initial-position and --no-ack do not apply)",
    )
    cons.add_argument(
        "--start",
        type=_start_position,
        metavar="earliest|latest|OFFSET|@ISO-TIME",
        help="with --reader: where to start: earliest (the oldest message kept), latest (default: what "
        "is published from now on), an offset (a plain topic or one partition), or @TIME, the first "
        "message published at or after it (ISO 8601, e.g. @2026-11-27T10:00:00Z; no zone: local time)",
    )
    cons.add_argument("--sub-type", choices=list(SUB_TYPES), default="shared", help="default: shared")
    cons.add_argument(
        "--initial-position",
        choices=list(INITIAL_POSITIONS),
        default="latest",
        help="where a NEW subscription of a reliable topic starts: latest (default) or earliest "
        "(replay what the topic keeps); an existing subscription resumes where it was",
    )
    cons.add_argument(
        "--read-compacted",
        action="store_true",
        help="read a reliable topic's compacted view: below its compaction horizon only the newest "
        "message of each key (keyless messages, and keys whose newest message is empty, a tombstone, "
        "are left out), then every message from the horizon on. Fixed when a subscription is created "
        "(an existing one keeps its setting); a reader asks for it each time it attaches",
    )
    cons.add_argument(
        "-c", "--count", type=non_negative_int, default=0, help="stop after N messages (0 = until Ctrl-C)"
    )
    cons.add_argument("--output", choices=["text", "json"], default="text", help="default: text")
    cons.add_argument("--no-ack", action="store_true", help="do not acknowledge (messages will come again)")
    cons.add_argument(
        "--raw",
        action="store_true",
        help="print payloads as they are (by default a message carrying a schema id is decoded with "
        "that schema, fetched from the registry once)",
    )
    delivery_flags.add_consume_arguments(cons)
    cons.set_defaults(func=run_consume)
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations argparse cannot check; a usage error (exit 2) says what to give."""
    if args.command == "consume":
        if args.start is not None and not args.reader:
            parser.error("--start goes with --reader (a subscription starts at --initial-position)")
        if args.reader and (getattr(args, "topics", None) is not None or getattr(args, "pattern", None)):
            parser.error("--reader reads one topic (-t): drop --topics/--pattern")
        return
    if args.command != "produce":
        return
    subject = args.schema_subject
    if args.schema_file is not None and args.schema_type is None:
        parser.error("--schema-file needs --schema-type json_schema|avro|protobuf")
    if args.schema_type is not None and args.schema_file is None:
        parser.error("--schema-type goes with --schema-file (the type of a registered subject is known)")
    if subject is None and (
        args.schema_file is not None or args.schema_version is not None or args.schema_min_version is not None
    ):
        parser.error("--schema-file, --schema-version and --schema-min-version need --schema-subject")
    if args.schema_file is not None and (
        args.schema_version is not None or args.schema_min_version is not None
    ):
        parser.error(
            "--schema-file produces with the version it registers: drop --schema-version/--schema-min-version"
        )
    if subject is not None and args.size is not None:
        parser.error("--size sends generated bytes: with a schema give the message as JSON text (-m or -f)")


# ---------------------------------------------------------------------- produce


def generated_payload(size: int) -> bytes:
    pattern = b"0123456789abcdefghijklmnopqrstuvwxyz"
    return (pattern * (size // len(pattern) + 1))[:size]


def _read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _payload(args: argparse.Namespace) -> bytes:
    if args.message is not None:
        return str(args.message).encode()
    if args.file is not None:
        return _read_file(args.file)
    return generated_payload(int(args.size))


class _Progress:
    def __init__(self, err: TextIO) -> None:
        self.sent = 0
        self.acked = 0
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self._err = err
        self._tty = err.isatty()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return f"sent {self.sent}, acked {self.acked} ({self.acked / elapsed:,.0f} msg/s)"

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            print(self.line(), end="\r" if self._tty else "\n", file=self._err, flush=True)


async def run_produce(
    args: argparse.Namespace,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    stop: asyncio.Event | None = None,
) -> int:
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    payload = _payload(args)
    count: int = args.count
    show_ids = count <= PRINT_IDS_MAX
    progress = _Progress(err)

    def on_done(fut: asyncio.Future[MessageId]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            progress.error = progress.error or exc
            stop.set()
            return
        progress.acked += 1
        if show_ids:
            mid = fut.result()
            print(f"sent {mid.topic} offset {mid.offset}", file=out, flush=True)

    auth = resolve_auth(args)
    async with DanubeClient(
        args.service_url,
        operation_timeout_s=args.connect_timeout_s or 0.001,
        tls=auth.tls,
        token=auth.token,
    ) as client:
        schema_ref = None
        if getattr(args, "schema_subject", None):
            payload, schema_ref = await _with_schema(client, args, payload, err)
        producer = await client.create_producer(
            args.topic,
            producer_name=args.producer_name,
            dispatch_strategy=DispatchStrategy.RELIABLE if args.reliable else DispatchStrategy.NON_RELIABLE,
            enable_idempotence=True,  # resends after a reconnect are dropped by the broker
            access_mode=AccessMode.EXCLUSIVE if args.exclusive else AccessMode.SHARED,
            schema_ref=schema_ref,
            compression=args.compression,
            pack_batches=not args.no_pack,
            enable_chunking=not args.no_chunking,
        )
        progress.started = time.monotonic()
        show_progress = count > PRINT_IDS_MAX or err.isatty()
        ticker = asyncio.create_task(progress.loop()) if show_progress else None
        try:
            for i in range(count):
                if stop.is_set():
                    break
                if args.rate > 0:
                    delay = progress.started + i / args.rate - time.monotonic()
                    if delay > 0 and await _stopped_within(stop, delay):
                        break
                fut = await producer.send_async(
                    payload,
                    properties=args.attributes or None,
                    key=args.key,
                    **delivery_flags.send_options(args),
                )
                fut.add_done_callback(on_done)
                progress.sent += 1
            await producer.flush()
        finally:
            await cancel_and_wait(ticker)
        elapsed = time.monotonic() - progress.started
    if progress.error is not None:
        raise progress.error
    if show_progress and err.isatty():
        print(file=err)
    rate = progress.acked / elapsed if elapsed > 0 else 0.0
    print(f"produced {progress.acked} messages in {elapsed:.2f} s ({rate:,.0f} msg/s)", file=err, flush=True)
    return 0


async def _with_schema(
    client: DanubeClient, args: argparse.Namespace, message: bytes, err: TextIO
) -> tuple[bytes, SchemaReference]:
    """Register --schema-file if given, resolve the version, encode the message with it."""
    registry = client.schemas()
    subject: str = args.schema_subject
    if args.schema_file is not None:
        definition = _read_file(args.schema_file)
        reg = await registry.register(subject, args.schema_type, definition, created_by="danube-cli")
        what = "registered" if reg.is_new_version else "already registered"
        print(
            f"schema {what}: subject {subject} version {reg.version} (id {reg.schema_id})",
            file=err,
            flush=True,
        )
        ref = SchemaReference(subject, version=reg.version)
    else:
        ref = SchemaReference(subject, version=args.schema_version, min_version=args.schema_min_version)
    info = await registry.resolve(ref)
    payload = encoder_for(info)(message)
    return payload, SchemaReference(subject, version=info.version)


async def _stopped_within(stop: asyncio.Event, delay_s: float) -> bool:
    try:
        async with asyncio.timeout(delay_s):
            await stop.wait()
        return True
    except TimeoutError:
        return False


# ---------------------------------------------------------------------- consume


def _partition_label(msg: Message) -> str:
    _, sep, index = msg.topic.rpartition("-part-")
    return f"part-{index}:{msg.offset}" if sep and index.isdigit() else str(msg.offset)


#: ``decoded`` of a message shown as its raw payload.
RAW: Any = object()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)  # datetime, Decimal, UUID (Avro logical types)


def format_text(msg: Message[Any], decoded: Any = RAW) -> str:
    attrs = ",".join(f"{k}={v}" for k, v in sorted(msg.properties.items())) or "-"
    if decoded is RAW:
        payload = msg.payload.decode("utf-8", errors="backslashreplace")
    else:
        payload = json.dumps(decoded, ensure_ascii=False, default=_jsonable)
    line = f"{_partition_label(msg)} {msg.key or '-'} {payload} {attrs}"
    if msg.schema_id is not None:
        line += f" [schema {msg.schema_id} v{msg.schema_version}]"
    return f"{line} (redelivered x{msg.redelivery_count})" if msg.redelivery_count else line


def format_json(msg: Message[Any], decoded: Any = RAW) -> str:
    doc: dict[str, object] = {
        "topic": msg.topic,
        "offset": msg.offset,
        "key": msg.key,
        "attributes": msg.properties,
        "publish_time_ms": msg.publish_time_ms,
        "producer_name": msg.producer_name,
        "redelivery_count": msg.redelivery_count,
        "schema_id": msg.schema_id,
        "schema_version": msg.schema_version,
    }
    if msg.deliver_at_ms:
        doc["deliver_at_ms"] = msg.deliver_at_ms
    if msg.chunk_offsets:
        doc["chunk_offsets"] = list(msg.chunk_offsets)
    if msg.batch_index is not None:
        doc["batch_index"] = msg.batch_index
    if decoded is not RAW:
        doc["value"] = decoded
    try:
        doc["payload"] = msg.payload.decode("utf-8")
    except UnicodeDecodeError:
        doc["payload_base64"] = base64.b64encode(msg.payload).decode("ascii")
    return json.dumps(doc, ensure_ascii=False, default=_jsonable)


async def run_consume(
    args: argparse.Namespace,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    stop: asyncio.Event | None = None,
) -> int:
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    fmt = format_json if args.output == "json" else format_text
    auth = resolve_auth(args)
    async with DanubeClient(
        args.service_url,
        operation_timeout_s=args.connect_timeout_s or 0.001,
        tls=auth.tls,
        token=auth.token,
    ) as client:
        consumer: Any
        view = " (compacted view)" if args.read_compacted else ""
        if args.reader:
            start = args.start or StartPosition.LATEST
            consumer = await client.create_reader(
                args.topic, start=start, reader_name=args.consumer_name, read_compacted=args.read_compacted
            )
            print(
                f"reading {args.topic}{view} from {start} as reader {consumer.reader_name!r} "
                "(nothing stored); Ctrl-C to stop",
                file=err,
                flush=True,
            )
        else:
            consumer = await delivery_flags.subscribe(
                client,
                args,
                subscription=args.subscription,
                consumer_name=args.consumer_name,
                sub_type=SUB_TYPES[args.sub_type],
                initial_position=INITIAL_POSITIONS[args.initial_position],
                read_compacted=args.read_compacted,
            )
            print(
                f"consuming {consumer.topic}{view} as subscription {args.subscription!r} ({args.sub_type}); "
                "Ctrl-C to stop",
                file=err,
                flush=True,
            )
        received = 0
        undecodable: set[tuple[int, int | None]] = set()
        stopped = asyncio.create_task(stop.wait())
        try:
            while args.count == 0 or received < args.count:
                receiving = asyncio.create_task(consumer.receive())
                done, _ = await asyncio.wait({receiving, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if receiving not in done:
                    receiving.cancel()
                    break
                msg = receiving.result()
                decoded = RAW
                if msg.schema_id is not None and not args.raw:
                    decoded = await _decode(client, msg, undecodable, err)
                print(fmt(msg, decoded), file=out, flush=True)
                if not isinstance(consumer, Reader) and not args.no_ack:  # a reader acks as it receives
                    await consumer.ack(msg)
                received += 1
        finally:
            stopped.cancel()
        await consumer.close()
    print(f"received {received} messages", file=err, flush=True)
    return 0


async def _decode(
    client: DanubeClient, msg: Message[Any], undecodable: set[tuple[int, int | None]], err: TextIO
) -> Any:
    """The message decoded by the schema it carries, or RAW (with one warning per schema version)
    when that schema is gone or the payload does not decode."""
    try:
        return await client.schemas().decode(msg)
    except (InvalidPayload, NotFound) as exc:
        key = (msg.schema_id or 0, msg.schema_version)
        if key not in undecodable:
            undecodable.add(key)
            print(f"warning: showing raw payload: {exc.message}", file=err, flush=True)
        return RAW


# ---------------------------------------------------------------------- entry point


def explain(exc: BaseException, service_url: str) -> str:
    """The one-line `error: ...` for an expected failure, with what to do about it."""
    if isinstance(exc, DanubeError):
        text = exc.message
        if isinstance(exc, Unavailable) and tls_failure(text):
            hint = ""  # the message says what to check
        elif isinstance(exc, (Unavailable, Timeout, NoBrokerAvailable)):
            hint = f"is a cluster running at {service_url}? start one with `danube-local up`"
        elif isinstance(exc, ProducerBusy):
            hint = "another producer holds the topic exclusively; stop it, or produce without --exclusive"
        elif isinstance(exc, ConsumerBusy):
            hint = "the subscription is exclusive and already has a consumer; use another -m/--subscription"
        elif isinstance(exc, SubscriptionTypeMismatch):
            hint = "the subscription exists with another type; pass the same --sub-type or a new subscription"
        elif isinstance(exc, MessageTooLarge):
            hint = "send a smaller payload, or leave chunking on (drop --no-chunking)"
        elif exc.code == "UNSUPPORTED_COMPRESSION":
            hint = "upgrade danube-cli, or produce with --compression none, lz4 or zstd"
        elif exc.code == "INVALID_PAYLOAD":
            hint = (
                "fix the message (JSON text) to match the schema; `danube-admin schemas get SUBJECT` shows it"
            )
        elif exc.code == "INCOMPATIBLE_SCHEMA":
            hint = (
                "the topic is bound to another subject (see `danube-admin topics get-schema TOPIC`), or the "
                "registry refused the new definition (see `danube-admin schemas check ...`)"
            )
        elif exc.code == "INVALID_SCHEMA":
            hint = "fix the schema definition where the message says"
        elif isinstance(exc, NotFound):
            hint = "list schema subjects with `danube-admin schemas list`; register one with --schema-file"
        else:
            hint = ""
        return f"error: {text}" + (f"\n  {hint}" if hint else "")
    if isinstance(exc, OSError):
        return f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")
    return f"error: {exc}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    try:
        resolve_auth(args)  # flag combinations and the token file, before anything runs
    except ConfigError as err:
        parser.error(err.message)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    # Traces of every message sent and processed, when OTEL_* configures an exporter.
    with process_tracing("danube-cli") as ok:
        if not ok:
            return 2
        try:
            return int(asyncio.run(args.func(args)))
        except (DanubeError, OSError) as exc:
            print(explain(exc, args.service_url), file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130


if __name__ == "__main__":
    sys.exit(main())
