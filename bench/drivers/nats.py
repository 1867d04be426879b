"""NATS peers for the benchmarks: JetStream (persistent) and core NATS (in memory, at most once).

Both drivers start their own ``nats-server`` (Debian package ``nats-server``, 2.9 on bookworm) as a
child process in its own session, bound to 127.0.0.1 on a free port, with no monitoring port; stop
terminates the whole process group. Install with ``scripts/setup_bench.sh``.

Topic mapping: ``/default/orders`` becomes the stream ``default_orders`` and the subjects
``bench.default.orders.<i>`` for partition i (one stream holds all partitions; a producer handle
publishes round-robin over them; a consumer reads them all).

JetStream (``nats-jetstream``):
  - producer: ``js.publish_async`` (nats-py's pipelined publish: the message goes out at once, the
    returned future completes at the server's PubAck); at most ``max_in_flight`` unacked publishes,
    beyond which ``send`` waits (back-pressure);
  - consumer: a durable *push* consumer named after the subscription, delivering to a queue group
    of the same name (consumers of one subscription share it), ack policy explicit, at most
    ``max_ack_pending`` unacked; ``receive`` acks each message it returns (a buffered publish, no
    round trip). Measured with nats-py 2.16, 100 B: push with per-message acks ~120k msg/s, pull
    ``fetch(1000)`` with AckAll ~25k msg/s (nats-py's fetch waits on each message in turn);
  - durability: ``reliable=True`` uses file storage. nats-server acks a publish once the message
    is written to the OS (page cache); it does not fsync before the ack. 2.9 has no
    ``sync_interval`` option (it arrived in 2.10, default 2 min, and ``always`` fsyncs each write),
    so no fsync-before-ack variant can be run with the packaged server. ``reliable=False`` uses
    memory storage.

JetStream with a subject per topic (``nats-js-subjects``): one stream for every topic, a durable
consumer per topic and subscription filtered on its subjects, one connection per client process:
the layout a NATS user would pick for thousands of topics (see the class's docstring); used by the
topic-count sweeps next to ``nats-jetstream`` (a stream and a connection per topic).

Core NATS (``nats-core``): plain publish/subscribe, nothing stored. ``send`` hands the message to
the client's write buffer and returns an already completed future (there is no broker ack); ``flush``
is a PING/PONG round trip, after which the server has processed everything sent before. A consumer
is a subscription with a queue group named after the subscription, so consumers of one
subscription share its messages. A slow consumer loses messages (the server and the client drop
them): at most once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
from pathlib import Path
from typing import Any, cast

from bench.drivers._proc import free_port, port_open, stop_process_group
from bench.drivers.base import ConsumerHandle, Driver, DriverUnavailable, ProducerHandle, take_batch

try:
    import nats
    from nats.aio.client import Client as NatsClient
    from nats.js import JetStreamContext
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType

    _IMPORT_ERROR: ImportError | None = None
except ImportError as exc:  # the harness reports DriverUnavailable
    _IMPORT_ERROR = exc

HOST = "127.0.0.1"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 10.0
DEFAULT_MAX_IN_FLIGHT = 4096  # unacked JetStream publishes per producer
DEFAULT_MAX_ACK_PENDING = 20_000  # delivered, unacked messages per JetStream consumer
ACK_WAIT_S = 30.0
CONSUMER_QUEUE_MAX_MSGS = 100_000  # core NATS: messages buffered in a consumer handle


# ---- names


def _name_parts(topic: str) -> list[str]:
    """``/default/orders`` -> ``["default", "orders"]``, each part reduced to [A-Za-z0-9_-]."""
    parts = [re.sub(r"[^A-Za-z0-9_-]", "_", p) for p in topic.strip("/").split("/") if p]
    if not parts:
        raise ValueError(f"invalid topic name {topic!r}: expected /namespace/name")
    return parts


def stream_name(topic: str) -> str:
    return "_".join(_name_parts(topic))


def subject_prefix(topic: str) -> str:
    return "bench." + ".".join(_name_parts(topic))


def partition_subjects(topic: str, partitions: int) -> list[str]:
    prefix = subject_prefix(topic)
    return [f"{prefix}.{i}" for i in range(max(1, partitions))]


def durable_name(subscription: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", subscription)
    if not name:
        raise ValueError("subscription name must not be empty")
    return name


# ---- the server process


class NatsServer:
    """One ``nats-server`` child process on loopback; JetStream enabled when ``jetstream``."""

    def __init__(self, *, jetstream: bool) -> None:
        self.jetstream = jetstream
        self.port = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    async def start(self, workdir: Path) -> None:
        if self.proc is not None:
            return
        exe = shutil.which("nats-server")
        if exe is None:
            raise DriverUnavailable("nats-server not installed: run scripts/setup_bench.sh")
        if _IMPORT_ERROR is not None:
            raise DriverUnavailable(f"nats-py not installed ({_IMPORT_ERROR}): run scripts/setup_bench.sh")
        workdir = Path(workdir) / "nats"
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = workdir / f"nats-server-{self.port}.log"
        args = [exe, "-a", HOST, "-p", str(self.port), "-l", str(self.log_path)]
        if self.jetstream:
            args += ["-js", "-sd", str(workdir / "jetstream")]
        self.proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while loop.time() < deadline:
            if self.proc.returncode is not None:
                rc = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"nats-server exited with {rc} at start; see {self.log_path}")
            if await port_open(HOST, self.port):
                return
            await asyncio.sleep(0.02)
        await self.stop()
        raise RuntimeError(
            f"nats-server did not listen on {self.url} in {START_TIMEOUT_S}s; see {self.log_path}"
        )

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            await stop_process_group(proc, timeout_s=STOP_TIMEOUT_S)

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None and self.proc.returncode is None else []


async def _connect(url: str) -> NatsClient:
    # Loopback only; no reconnect loop: a benchmark whose server died should fail, not wait.
    return await nats.connect(
        url, allow_reconnect=False, connect_timeout=REQUEST_TIMEOUT_S, max_outstanding_pings=10
    )


class _NatsDriverBase(Driver):
    """Server life cycle and the client connections every handle gets (one connection per handle,
    as separate producer and consumer processes would have). An attached driver (``attach``) has
    the server's URL and the topics' partition counts only: no server, no admin connection."""

    def __init__(self, *, jetstream: bool) -> None:
        self._server = NatsServer(jetstream=jetstream)
        self._clients: list[NatsClient] = []
        self._admin: NatsClient | None = None
        self._url: str | None = None  # where handles connect: set by start() or attach()
        self._partitions: dict[str, int] = {}

    async def start(self, workdir: Path) -> None:
        if self._admin is not None:
            return
        await self._server.start(workdir)
        try:
            self._admin = await _connect(self._server.url)
        except BaseException:
            await self._server.stop()
            raise
        self._url = self._server.url

    def client_spec(self) -> dict[str, Any]:
        if self._url is None:
            raise RuntimeError(f"{self.name}: start() the driver first")
        return {"url": self._url, "partitions": dict(self._partitions)}

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> Driver:
        driver = cls()  # type: ignore[call-arg]  # the concrete drivers' constructors take no required argument
        driver._url = str(spec["url"])
        driver._partitions = {str(t): int(n) for t, n in spec["partitions"].items()}
        return driver

    async def stop(self) -> None:
        clients, self._clients = self._clients, []
        if self._admin is not None:
            clients.append(self._admin)
            self._admin = None
        for nc in clients:
            if not nc.is_closed:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(nc.close(), STOP_TIMEOUT_S)
        await self._server.stop()  # attached: never started, nothing to stop

    def server_pids(self) -> list[int]:
        return self._server.pids()

    async def _client(self) -> NatsClient:
        if self._url is None:
            raise RuntimeError(f"{self.name}: start() or attach() the driver first")
        nc = await _connect(self._url)
        self._clients.append(nc)
        return nc

    async def _release(self, nc: NatsClient) -> None:
        if nc in self._clients:
            self._clients.remove(nc)
        if not nc.is_closed:
            await nc.close()


# ---- JetStream


class NatsJetStreamDriver(_NatsDriverBase):
    name = "nats-jetstream"
    durability = (
        "reliable: JetStream file storage, acked once written to the OS page cache, no fsync before "
        "ack (nats-server 2.9 has no sync_interval option); non-reliable: JetStream memory storage"
    )

    def __init__(
        self, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, max_ack_pending: int = DEFAULT_MAX_ACK_PENDING
    ) -> None:
        super().__init__(jetstream=True)
        self.max_in_flight = max_in_flight
        self.max_ack_pending = max_ack_pending

    def client_spec(self) -> dict[str, Any]:
        return super().client_spec() | {
            "max_in_flight": self.max_in_flight,
            "max_ack_pending": self.max_ack_pending,
        }

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> Driver:
        driver = await super().attach(spec)
        assert isinstance(driver, NatsJetStreamDriver)
        driver.max_in_flight = int(spec["max_in_flight"])
        driver.max_ack_pending = int(spec["max_ack_pending"])
        return driver

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        assert self._admin is not None, "start() the driver first"
        js = self._admin.jetstream(timeout=REQUEST_TIMEOUT_S)
        await js.add_stream(
            name=stream_name(topic),
            subjects=[subject_prefix(topic) + ".*"],
            storage=StorageType.FILE if reliable else StorageType.MEMORY,
        )
        self._partitions[topic] = max(1, partitions)

    async def producer(self, topic: str) -> ProducerHandle:
        nc = await self._client()
        js = nc.jetstream(timeout=REQUEST_TIMEOUT_S, publish_async_max_pending=self.max_in_flight)
        subjects = partition_subjects(topic, self._partitions.get(topic, 1))
        return _JetStreamProducer(self, nc, js, subjects)

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        nc = await self._client()
        js = nc.jetstream(timeout=REQUEST_TIMEOUT_S)
        # The server stops delivering at max_ack_pending unacked messages, so the queue never fills.
        queue: asyncio.Queue[Any] = asyncio.Queue(self.max_ack_pending)
        name = self._durable_of(topic, subscription)
        await js.subscribe(
            subject_prefix(topic) + ".*",
            queue=name,
            durable=name,
            stream=self._stream_of(topic),
            cb=queue.put,
            manual_ack=True,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT, max_ack_pending=self.max_ack_pending, ack_wait=ACK_WAIT_S
            ),
        )
        await nc.flush(timeout=REQUEST_TIMEOUT_S)  # the consumer and its subscription exist: attached
        return _JetStreamConsumer(self, nc, queue)

    def _stream_of(self, topic: str) -> str:
        return stream_name(topic)

    def _durable_of(self, topic: str, subscription: str) -> str:
        return durable_name(subscription)


class NatsJetStreamSubjectsDriver(NatsJetStreamDriver):
    """JetStream the way a NATS user would lay out thousands of topics: ONE stream (``BENCH``, subjects
    ``bench.>``) in which a topic is a subject (``bench.default.<topic>.<partition>``), a durable
    consumer per topic and subscription filtered on the topic's subjects, and one connection per
    client process shared by all its handles (nats-py multiplexes subscriptions and publishes over it),
    instead of a stream and a connection per topic: 10,000 topics would be 10,000 streams (each with
    its own store files) and 20,000 connections. Everything else (acks, windows, storage) as
    ``nats-jetstream``."""

    name = "nats-js-subjects"
    STREAM = "BENCH"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._stream_made = False
        self._shared: NatsClient | None = None
        self._lock = asyncio.Lock()

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        assert self._admin is not None, "start() the driver first"
        async with self._lock:
            if not self._stream_made:
                js = self._admin.jetstream(timeout=REQUEST_TIMEOUT_S)
                await js.add_stream(
                    name=self.STREAM,
                    subjects=["bench.>"],
                    storage=StorageType.FILE if reliable else StorageType.MEMORY,
                )
                self._stream_made = True
        self._partitions[topic] = max(1, partitions)

    def _stream_of(self, topic: str) -> str:
        return self.STREAM

    def _durable_of(self, topic: str, subscription: str) -> str:
        return f"{stream_name(topic)}_{durable_name(subscription)}"

    async def _client(self) -> NatsClient:
        async with self._lock:
            if self._shared is None or self._shared.is_closed:
                self._shared = await super()._client()  # in self._clients: closed by stop()
            return self._shared

    async def _release(self, nc: NatsClient) -> None:
        """Shared: the connection is closed once, by ``stop``."""


class _JetStreamProducer(ProducerHandle):
    def __init__(
        self, driver: _NatsDriverBase, nc: NatsClient, js: JetStreamContext, subjects: list[str]
    ) -> None:
        self._driver = driver
        self._nc = nc
        self._js = js
        self._subjects = subjects
        self._next = 0

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        subject = self._subjects[self._next]
        self._next = (self._next + 1) % len(self._subjects)
        # Waits when max_in_flight publishes are unacked; the future's result is the PubAck.
        fut = await self._js.publish_async(subject, payload)
        return cast("asyncio.Future[None]", fut)

    async def flush(self) -> None:
        await self._nc.flush(timeout=REQUEST_TIMEOUT_S)
        await self._js.publish_async_completed()

    async def close(self) -> None:
        if not self._nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.flush(), STOP_TIMEOUT_S)
        await self._driver._release(self._nc)


class _JetStreamConsumer(ConsumerHandle):
    def __init__(self, driver: _NatsDriverBase, nc: NatsClient, queue: asyncio.Queue[Any]) -> None:
        self._driver = driver
        self._nc = nc
        self._queue = queue

    async def receive(self) -> list[bytes]:
        msgs = await take_batch(self._queue)
        for msg in msgs:
            await msg.ack()  # a publish to the ack subject, buffered: no round trip
        return [m.data for m in msgs]

    async def close(self) -> None:
        await self._driver._release(self._nc)


# ---- core NATS


class NatsCoreDriver(_NatsDriverBase):
    name = "nats-core"
    durability = "in memory, at most once (core NATS: nothing stored; no broker ack; slow consumers drop)"
    supports_reliable = False

    def __init__(self) -> None:
        super().__init__(jetstream=False)

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        if reliable:
            raise ValueError("nats-core stores nothing: it supports only non-reliable topics")
        self._partitions[topic] = max(1, partitions)  # subjects need no creation

    async def producer(self, topic: str) -> ProducerHandle:
        nc = await self._client()
        return _CoreProducer(self, nc, partition_subjects(topic, self._partitions.get(topic, 1)))

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        nc = await self._client()
        queue: asyncio.Queue[bytes] = asyncio.Queue(CONSUMER_QUEUE_MAX_MSGS)

        async def on_msg(msg: Any) -> None:
            # A full queue holds the client's delivery task; its own pending limit then drops
            # messages (slow consumer), as core NATS does.
            await queue.put(msg.data)

        sub = await nc.subscribe(subject_prefix(topic) + ".*", queue=durable_name(subscription), cb=on_msg)
        await nc.flush(timeout=REQUEST_TIMEOUT_S)  # the server has the subscription: attached
        return _CoreConsumer(self, nc, sub, queue)


class _CoreProducer(ProducerHandle):
    def __init__(self, driver: _NatsDriverBase, nc: NatsClient, subjects: list[str]) -> None:
        self._driver = driver
        self._nc = nc
        self._subjects = subjects
        self._next = 0

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        subject = self._subjects[self._next]
        self._next = (self._next + 1) % len(self._subjects)
        await self._nc.publish(subject, payload)  # waits only when the client's buffer is full
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def flush(self) -> None:
        await self._nc.flush(timeout=REQUEST_TIMEOUT_S)

    async def close(self) -> None:
        if not self._nc.is_closed:
            with contextlib.suppress(Exception):
                await self.flush()
        await self._driver._release(self._nc)


class _CoreConsumer(ConsumerHandle):
    def __init__(
        self, driver: _NatsDriverBase, nc: NatsClient, sub: Any, queue: asyncio.Queue[bytes]
    ) -> None:
        self._driver = driver
        self._nc = nc
        self._sub = sub
        self._queue = queue

    async def receive(self) -> list[bytes]:
        return await take_batch(self._queue)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()
        await self._driver._release(self._nc)
