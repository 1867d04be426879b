"""RabbitMQ peer for the benchmarks (``rabbitmq``), with the ``aiormq`` client.

The driver starts a private RabbitMQ node (Debian package ``rabbitmq-server``, 3.10 on bookworm) and
its own ``epmd``, each a child process in its own session, everything under the workdir and bound
to 127.0.0.1: node ``bench-<port>@localhost``, AMQP on a free port, Erlang distribution on another,
epmd on a third (so a system epmd, if any, is neither used nor disturbed), no plugins, HOME (and so
the Erlang cookie) in the workdir. The server is run from /usr/lib/rabbitmq/bin directly: the
/usr/sbin wrappers switch to the ``rabbitmq`` user when run as root. Stop is ``rabbitmqctl stop``,
then SIGTERM/SIGKILL of the server's and epmd's process groups. Start takes a few seconds.

Topic mapping: ``/default/orders`` with N partitions becomes a direct exchange
``bench.default.orders``; a producer handle publishes round-robin over the routing keys ``0..N-1``.
A subscription ``s`` is N queues ``bench.default.orders.s.<i>``, queue i bound with key i, declared
when the first consumer of ``s`` attaches (so, as in a message broker with subscriptions, messages
published before any subscription exists are not kept). Consumers of one subscription share its
queues (RabbitMQ round-robins between them).

Producer: publisher confirms on; each ``send`` publishes at once and its future completes at the
broker's confirm; at most ``max_in_flight`` unconfirmed publishes per producer, beyond which
``send`` waits. Consumer: ``basic_consume`` with prefetch ``prefetch_count`` (per consumer), manual
acks, one ``multiple=True`` ack for each batch ``receive`` returns.

Durability, reliable topics: publisher confirms, persistent messages (delivery_mode 2) on durable
classic queues; RabbitMQ confirms a persistent message once it is written to the queue's message
store and fsynced, and batches those fsyncs across messages (its confirm latency includes them).
Quorum queues (Raft, replicated, fsync before confirm) are not run here: on one node they would
measure the Raft log write path, not replication. Non-reliable topics: transient messages
(delivery_mode 1) on a non-durable classic queue, confirms still on (they only say the broker has
the message, in memory), consumers with automatic ack (at most once).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
from pathlib import Path
from typing import Any

from bench.drivers._proc import free_port, port_open, stop_process_group
from bench.drivers.base import ConsumerHandle, Driver, DriverUnavailable, ProducerHandle, take_batch

try:
    import aiormq
    from pamqp.commands import Basic

    _IMPORT_ERROR: ImportError | None = None
except ImportError as exc:  # the harness reports DriverUnavailable
    _IMPORT_ERROR = exc

HOST = "127.0.0.1"
RABBIT_BIN_DIR = Path("/usr/lib/rabbitmq/bin")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0
DEFAULT_MAX_IN_FLIGHT = 4096  # unconfirmed publishes per producer
DEFAULT_PREFETCH = 1000  # unacked deliveries per consumer
LOOPBACK_DIST_ARGS = "-kernel inet_dist_use_interface {127,0,0,1}"


# ---- names


def _name_parts(name: str) -> list[str]:
    parts = [re.sub(r"[^A-Za-z0-9_-]", "_", p) for p in name.strip("/").split("/") if p]
    if not parts:
        raise ValueError(f"invalid name {name!r}")
    return parts


def exchange_name(topic: str) -> str:
    """``/default/orders`` -> ``bench.default.orders``."""
    return "bench." + ".".join(_name_parts(topic))


def queue_names(topic: str, subscription: str, partitions: int) -> list[str]:
    base = f"{exchange_name(topic)}.{'_'.join(_name_parts(subscription))}"
    return [f"{base}.{i}" for i in range(max(1, partitions))]


# ---- processes


def _open_log(path: Path) -> Any:
    return open(path, "ab")  # closed by _spawn once the child has it


async def _spawn(args: list[str], env: dict[str, str], log_path: Path) -> asyncio.subprocess.Process:
    with _open_log(log_path) as log:
        return await asyncio.create_subprocess_exec(
            *args,
            env=env,
            cwd=env["HOME"],
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )


class RabbitNode:
    """A private RabbitMQ node plus its own epmd, on loopback, under ``workdir/rabbitmq``."""

    def __init__(self) -> None:
        self.amqp_port = 0
        self.nodename = ""
        self.env: dict[str, str] = {}
        self.server: asyncio.subprocess.Process | None = None
        self.epmd: asyncio.subprocess.Process | None = None
        self.dir: Path | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{HOST}:{self.amqp_port}/"

    def _prepare(self, workdir: Path) -> Path:
        """Make the node's directories and files; set ``dir`` and ``env``."""
        base = Path(workdir).resolve() / "rabbitmq"
        (base / "log").mkdir(parents=True, exist_ok=True)
        self.dir = base
        self.env = self._environment(base)
        return base

    def _environment(self, base: Path) -> dict[str, str]:
        self.amqp_port = free_port()
        dist_port, epmd_port = free_port(), free_port()
        self.nodename = f"bench-{self.amqp_port}@localhost"
        config = base / "rabbitmq.conf"
        config.write_text("log.console = false\nlog.file.level = warning\n")
        plugins = base / "enabled_plugins"
        plugins.write_text("[].\n")
        env_file = base / "rabbitmq-env.conf"  # instead of /etc/rabbitmq/rabbitmq-env.conf
        env_file.write_text("")
        keep = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TMPDIR") if k in os.environ}
        return keep | {
            "HOME": str(base),
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),  # absent: none
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
            "RABBITMQ_CONF_ENV_FILE": str(env_file),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins-expand"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": LOOPBACK_DIST_ARGS,
            "RABBITMQ_CTL_ERL_ARGS": LOOPBACK_DIST_ARGS,
            "ERL_EPMD_ADDRESS": HOST,
            "ERL_EPMD_PORT": str(epmd_port),
        }

    async def start(self, workdir: Path) -> None:
        if self.server is not None:
            return
        server_exe = RABBIT_BIN_DIR / "rabbitmq-server"
        epmd_exe = shutil.which("epmd")
        if not server_exe.exists() or epmd_exe is None:
            raise DriverUnavailable("rabbitmq-server not installed: run scripts/setup_bench.sh")
        if _IMPORT_ERROR is not None:
            raise DriverUnavailable(f"aiormq not installed ({_IMPORT_ERROR}): run scripts/setup_bench.sh")
        base = self._prepare(workdir)
        epmd_port = int(self.env["ERL_EPMD_PORT"])
        try:
            # Our own epmd in the foreground (not -daemon, which would leave our process group).
            self.epmd = await _spawn([epmd_exe, "-port", str(epmd_port)], self.env, base / "epmd.log")
            await self._wait_port(epmd_port, self.epmd, "epmd")
            self.server = await _spawn([str(server_exe)], self.env, base / "rabbitmq-server.log")
            await self._wait_port(self.amqp_port, self.server, "rabbitmq-server")
            await self._wait_channel()
        except BaseException:
            await self.stop()
            raise

    async def _wait_port(self, port: int, proc: asyncio.subprocess.Process, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while loop.time() < deadline:
            if proc.returncode is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode} at start; see {self.dir}")
            if await port_open(HOST, port):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{what} did not listen on {HOST}:{port} in {START_TIMEOUT_S}s; see {self.dir}")

    async def _wait_channel(self) -> None:
        """The AMQP port opens before the node accepts logins; poll until a channel opens."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        last: Exception | None = None
        while loop.time() < deadline:
            try:
                conn = await asyncio.wait_for(aiormq.connect(self.url), REQUEST_TIMEOUT_S)
                try:
                    await conn.channel()
                    return
                finally:
                    await conn.close()
            except Exception as exc:  # not ready yet
                last = exc
            await asyncio.sleep(0.1)
        raise RuntimeError(f"rabbitmq-server did not open a channel in {START_TIMEOUT_S}s: {last!r}")

    async def stop(self) -> None:
        server, self.server = self.server, None
        epmd, self.epmd = self.epmd, None
        if server is not None:
            if server.returncode is None:
                with contextlib.suppress(OSError, TimeoutError):
                    ctl = await _spawn(
                        [str(RABBIT_BIN_DIR / "rabbitmqctl"), "-n", self.nodename, "stop"],
                        self.env,
                        (self.dir or Path(self.env["HOME"])) / "rabbitmqctl.log",
                    )
                    try:
                        await asyncio.wait_for(ctl.wait(), STOP_TIMEOUT_S)
                    finally:
                        await stop_process_group(ctl, timeout_s=1.0)
            await stop_process_group(server, timeout_s=STOP_TIMEOUT_S)
        if epmd is not None:
            await stop_process_group(epmd, timeout_s=STOP_TIMEOUT_S)

    def pids(self) -> list[int]:
        return [p.pid for p in (self.server, self.epmd) if p is not None and p.returncode is None]


# ---- the driver


class RabbitMqDriver(Driver):
    name = "rabbitmq"
    durability = (
        "reliable: publisher confirms, persistent messages on a durable classic queue (fsync batched "
        "by RabbitMQ before the confirm); non-reliable: transient messages, non-durable queue, auto-ack"
    )

    def __init__(
        self, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, prefetch_count: int = DEFAULT_PREFETCH
    ) -> None:
        self.max_in_flight = max_in_flight
        self.prefetch_count = prefetch_count
        self._node = RabbitNode()
        self._admin: Any = None  # aiormq.Connection
        self._connections: list[Any] = []
        self._topics: dict[str, tuple[int, bool]] = {}  # topic -> (partitions, reliable)
        self._url: str | None = None  # where handles connect: set by start() or attach()

    async def start(self, workdir: Path) -> None:
        if self._admin is not None:
            return
        await self._node.start(workdir)
        try:
            self._admin = await aiormq.connect(self._node.url)
        except BaseException:
            await self._node.stop()
            raise
        self._url = self._node.url

    def client_spec(self) -> dict[str, Any]:
        if self._url is None:
            raise RuntimeError("rabbitmq: start() the driver first")
        return {
            "url": self._url,
            "topics": {t: list(v) for t, v in self._topics.items()},
            "max_in_flight": self.max_in_flight,
            "prefetch_count": self.prefetch_count,
        }

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> RabbitMqDriver:
        """Client side only: no node, no admin connection; stop() closes the handles' connections."""
        if _IMPORT_ERROR is not None:
            raise DriverUnavailable(f"aiormq not installed ({_IMPORT_ERROR}): run scripts/setup_bench.sh")
        driver = cls(max_in_flight=int(spec["max_in_flight"]), prefetch_count=int(spec["prefetch_count"]))
        driver._url = str(spec["url"])
        driver._topics = {str(t): (int(p), bool(r)) for t, (p, r) in spec["topics"].items()}
        return driver

    async def stop(self) -> None:
        conns, self._connections = self._connections, []
        if self._admin is not None:
            conns.append(self._admin)
            self._admin = None
        for conn in conns:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), STOP_TIMEOUT_S)
        await self._node.stop()  # attached: never started, nothing to stop

    def server_pids(self) -> list[int]:
        # beam.smp is the process exec'd by the rabbitmq-server script (same pid); add its children.
        return self._node.pids()

    async def _connect(self) -> Any:
        if self._url is None:
            raise RuntimeError("rabbitmq: start() or attach() the driver first")
        conn = await aiormq.connect(self._url)
        self._connections.append(conn)
        return conn

    async def _release(self, conn: Any) -> None:
        if conn in self._connections:
            self._connections.remove(conn)
        if not conn.is_closed:
            await conn.close()

    def _topic(self, topic: str) -> tuple[int, bool]:
        try:
            return self._topics[topic]
        except KeyError:
            raise ValueError(f"rabbitmq: topic {topic!r} was not created (create_topic first)") from None

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        assert self._admin is not None, "start() the driver first"
        channel = await self._admin.channel()
        try:
            await channel.exchange_declare(exchange_name(topic), exchange_type="direct", durable=reliable)
        finally:
            await channel.close()
        self._topics[topic] = (max(1, partitions), reliable)

    async def producer(self, topic: str) -> ProducerHandle:
        partitions, reliable = self._topic(topic)
        conn = await self._connect()
        channel = await conn.channel(publisher_confirms=True)
        return _RabbitProducer(self, conn, channel, exchange_name(topic), partitions, reliable=reliable)

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        partitions, reliable = self._topic(topic)
        conn = await self._connect()
        channel = await conn.channel(publisher_confirms=False)
        await channel.basic_qos(prefetch_count=self.prefetch_count)
        # prefetch bounds the deliveries in flight, so this queue never fills.
        queue: asyncio.Queue[Any] = asyncio.Queue(self.prefetch_count * partitions)
        exchange = exchange_name(topic)
        for key, qname in enumerate(queue_names(topic, subscription, partitions)):
            await channel.queue_declare(qname, durable=reliable)
            await channel.queue_bind(qname, exchange, routing_key=str(key))
            await channel.basic_consume(qname, queue.put, no_ack=not reliable)
        return _RabbitConsumer(self, conn, channel, queue, manual_ack=reliable)


class _RabbitProducer(ProducerHandle):
    def __init__(
        self,
        driver: RabbitMqDriver,
        conn: Any,
        channel: Any,
        exchange: str,
        partitions: int,
        *,
        reliable: bool,
    ) -> None:
        self._driver = driver
        self._conn = conn
        self._channel = channel
        self._exchange = exchange
        self._keys = [str(i) for i in range(partitions)]
        self._next = 0
        self._slots = asyncio.Semaphore(driver.max_in_flight)
        self._pending: set[asyncio.Task[Any]] = set()  # owned here; close() waits for them
        self._ids = itertools.count()
        self._delivery_mode = 2 if reliable else 1

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        await self._slots.acquire()
        key = self._keys[self._next]
        self._next = (self._next + 1) % len(self._keys)
        # basic_publish returns at the confirm; a task per message keeps many in flight. The
        # channel's lock is FIFO, so messages go out in send order.
        props = Basic.Properties(delivery_mode=self._delivery_mode, message_id=str(next(self._ids)))
        task = asyncio.create_task(
            self._channel.basic_publish(
                payload, exchange=self._exchange, routing_key=key, properties=props, wait=False
            )
        )
        self._pending.add(task)
        task.add_done_callback(self._done)
        return task  # type: ignore[return-value]  # completes at the confirm; its result is unused

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        self._slots.release()

    async def flush(self) -> None:
        if self._pending:
            await asyncio.wait(list(self._pending))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), STOP_TIMEOUT_S)
        for task in list(self._pending):
            task.cancel()
        await self._driver._release(self._conn)


class _RabbitConsumer(ConsumerHandle):
    def __init__(
        self, driver: RabbitMqDriver, conn: Any, channel: Any, queue: asyncio.Queue[Any], *, manual_ack: bool
    ) -> None:
        self._driver = driver
        self._conn = conn
        self._channel = channel
        self._queue = queue
        self._manual_ack = manual_ack

    async def receive(self) -> list[bytes]:
        msgs = await take_batch(self._queue)
        if self._manual_ack:
            # Delivery tags grow per channel: acking the highest with multiple=True acks them all.
            tag = max(m.delivery.delivery_tag for m in msgs)
            await self._channel.basic_ack(tag, multiple=True, wait=False)
        return [m.body for m in msgs]

    async def close(self) -> None:
        await self._driver._release(self._conn)
