"""A short produce/consume round trip through the Python SDK, run in-process by ``danube-local up --demo``.

It creates a producer (which creates the topic), subscribes before sending anything (so nothing
may be missed), sends a handful of messages, receives them back, acks each one and checks that
every payload arrived exactly once and in order. The SDK is imported lazily so that the
launcher works, and explains itself, without it.

Against a secured cluster (:class:`DemoSecurity`) the producer and the consumer are two clients
with two narrow tokens (roles ``producer`` and ``consumer`` on the namespace), over TLS with a
client certificate; afterwards the producer's token tries to delete the topic, which RBAC must
refuse with PERMISSION_DENIED (the demo fails if it does not).
"""

from __future__ import annotations

import asyncio
import importlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TOPIC = "/default/demo"
DEFAULT_SUBSCRIPTION = "demo-sub"


class DemoError(RuntimeError):
    """The demo could not run (SDK missing) or its messages did not come back."""


@dataclass(frozen=True, slots=True)
class DemoSecurity:
    """How the demo reaches a secured cluster."""

    ca_file: Path
    #: The client certificate every server asks for (mTLS); identity comes from the tokens.
    cert_file: Path
    key_file: Path
    producer_token: str
    consumer_token: str
    #: The admin API, where the producer's token tries (and must fail) to delete the topic.
    admin_url: str
    producer: str = "user:demo-producer"
    consumer: str = "user:demo-consumer"

    def tls_options(self) -> Any:
        return importlib.import_module("danube_sdk").TlsOptions(
            ca_file=self.ca_file, cert_file=self.cert_file, key_file=self.key_file
        )


@dataclass
class DemoResult:
    produced: int = 0
    consumed: int = 0
    elapsed_ms: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.produced == self.consumed

    def summary(self) -> str:
        return f"demo: produced {self.produced}, consumed {self.consumed} in {self.elapsed_ms:.0f} ms"


def load_sdk() -> tuple[Any, Any]:
    """(DanubeClient, SubType) from ``danube_sdk``, or a DemoError that says what to do."""
    try:
        sdk = importlib.import_module("danube_sdk")
        return sdk.DanubeClient, sdk.SubType
    except (ImportError, AttributeError) as exc:
        raise DemoError(
            f"the demo needs the Python SDK (package danube_sdk), which is not usable here: {exc}. "
            "Install the project with `./quickstart.sh` (or `pip install -e .` in the venv) and retry."
        ) from exc


def check_delivery(sent: list[bytes], received: list[bytes]) -> list[str]:
    """What is wrong with ``received`` as the delivery of ``sent`` (lost ones are counted elsewhere)."""
    problems = []
    unknown = [p for p in received if p not in sent]
    if unknown:
        problems.append(f"{len(unknown)} message(s) arrived that were never sent (altered?)")
    order = [sent.index(p) for p in received if p in sent]
    if len(set(order)) != len(order):
        problems.append(f"{len(order) - len(set(order))} message(s) arrived more than once")
    elif order != sorted(order):
        problems.append("messages arrived out of order")
    return problems


def _offset(message_id: Any) -> Any:
    return getattr(message_id, "offset", message_id)


async def run_demo(
    service_url: str,
    *,
    topic: str = DEFAULT_TOPIC,
    subscription: str = DEFAULT_SUBSCRIPTION,
    count: int = 10,
    receive_timeout_s: float = 10.0,
    out: Callable[[str], None] = print,
    security: DemoSecurity | None = None,
) -> DemoResult:
    """Subscribe, produce ``count`` messages, consume and ack them; report what happened."""
    DanubeClient, SubType = load_sdk()
    # Messages of earlier runs on the same topic are told apart by this run id.
    run_id = uuid.uuid4().hex[:8]
    result = DemoResult()
    started = time.perf_counter()
    clients: list[Any] = []
    consumer: Any = None
    producer: Any = None
    try:
        if security is None:
            clients.append(DanubeClient(service_url))
        else:
            tls = security.tls_options()
            clients.append(DanubeClient(service_url, tls=tls, token=security.producer_token))
            clients.append(DanubeClient(service_url, tls=tls, token=security.consumer_token))
            out(
                f"demo: over TLS; producing as {security.producer}, consuming as {security.consumer} "
                "(each token holds one role, bound at namespace scope)"
            )
        producer_client, consumer_client = clients[0], clients[-1]
        # The producer creates the topic (subscribing to a topic nobody produced to yet is an
        # error); the subscription exists before the first message is sent, so none is missed.
        producer = await producer_client.create_producer(topic)
        out(f"demo: producer ready on {topic}; subscribing as {subscription!r} (exclusive)")
        consumer = await consumer_client.subscribe(
            topic, subscription=subscription, sub_type=SubType.EXCLUSIVE
        )
        sent: list[bytes] = []
        for n in range(count):
            payload = f"hello #{n} from danube-local ({run_id})".encode()
            msg_id = await producer.send(payload, properties={"demo-run": run_id, "n": str(n)})
            sent.append(payload)
            result.produced += 1
            out(f"  produced #{n}  offset={_offset(msg_id)}")
        received: list[bytes] = []
        while len(received) < count:
            try:
                msg = await consumer.receive(timeout_s=receive_timeout_s)
            except Exception as exc:  # the SDK's own Timeout, or a plain TimeoutError
                msg = None
                why = f"{type(exc).__name__}: {exc}"
            else:
                why = f"nothing more within {receive_timeout_s:g}s"
            if msg is None:
                result.problems.append(f"received {len(received)} of {count} messages ({why})")
                break
            props = dict(getattr(msg, "properties", {}) or {})
            await consumer.ack(msg)
            if props.get("demo-run") != run_id:
                out(f"  skipped a message of an earlier run (offset={_offset(msg.message_id)})")
                continue
            received.append(bytes(msg.payload))
            result.consumed += 1
            out(
                f"  consumed offset={_offset(msg.message_id)}  {bytes(msg.payload).decode(errors='replace')!r}"
            )
        result.problems += check_delivery(sent, received)
        if security is not None:
            result.problems += await refused_delete(security, topic, out=out)
    finally:
        for closable in (producer, consumer, *clients):
            if closable is not None:
                try:
                    await closable.close()
                except Exception as exc:  # closing must not hide the demo's own outcome
                    out(f"  (warning: close failed: {exc})")
    result.elapsed_ms = (time.perf_counter() - started) * 1000
    return result


async def refused_delete(
    security: DemoSecurity, topic: str, *, out: Callable[[str], None], timeout_s: float = 10.0
) -> list[str]:
    """The producer's token tries to delete ``topic`` (needs ``manage_topic``, which role
    ``producer`` lacks): PERMISSION_DENIED is the expected answer; anything else is a problem."""
    import grpc
    import grpc.aio

    from danube_common.pb import DanubeAdmin_pb2 as apb
    from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
    from danube_sdk.auth import ChannelSecurity

    out(f"demo: {security.producer} tries to delete {topic} (needs manage_topic; role producer has not)")
    channels = ChannelSecurity(security.admin_url, tls=security.tls_options(), token=security.producer_token)
    async with channels.open_channel(security.admin_url) as channel:
        try:
            await apb_grpc.TopicAdminStub(channel).DeleteTopic(
                apb.DeleteTopicRequest(name=topic), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.PERMISSION_DENIED:
                out(f"  refused, as expected: PERMISSION_DENIED: {exc.details()}")
                return []
            return [
                f"deleting {topic} with {security.producer}'s token failed with {exc.code().name} "
                f"({exc.details()}); expected PERMISSION_DENIED"
            ]
    return [f"{security.producer}'s token deleted {topic}: RBAC did not refuse it"]


def run_demo_sync(service_url: str, *, out: Callable[[str], None] = print, **kwargs: Any) -> bool:
    """Run the demo on a fresh event loop; print the summary (and problems). True on success."""
    try:
        result = asyncio.run(run_demo(service_url, out=out, **kwargs))
    except DemoError as exc:
        out(f"demo FAILED: {exc}")
        return False
    except Exception as exc:
        out(f"demo FAILED: {type(exc).__name__}: {exc}")
        return False
    out(result.summary())
    for problem in result.problems:
        out(f"demo FAILED: {problem}")
    return result.ok
