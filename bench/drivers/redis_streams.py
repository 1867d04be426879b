"""Redis Streams peers for the benchmarks (``redis-streams``, ``redis-streams-everysec``), with the
``redis`` package's asyncio client (``redis.asyncio``, hiredis reply parser when installed).

Servers: the driver starts private ``redis-server`` processes (Debian package ``redis-server``, 7.0
on bookworm), each a child in its own session, bound to 127.0.0.1 on a free port, with its own
directory under the workdir, and only command-line settings (the system's /etc/redis/redis.conf
and service are never used); stop terminates each process group. Two servers, because persistence
is a server-wide setting: reliable topics live on one with the append-only file (AOF) on and RDB
snapshots off; non-reliable topics on one with no persistence at all (memory only). Install with
``scripts/setup_bench.sh``.

Topic mapping: ``/default/orders`` with N partitions is N streams ``bench:default:orders:<i>``
(created by the first XADD or XGROUP CREATE ... MKSTREAM); a producer handle appends round-robin
over them. A subscription ``s`` is a consumer group ``s`` on each of the topic's streams, created at
``$`` (new entries only) when the first consumer of ``s`` attaches; each consumer handle is a
consumer of that group with its own name, so consumers of one subscription share the entries.

Producer: ``send`` queues ``XADD <stream> * d <payload>``; one sender task per handle writes what
is queued as one pipeline (up to ``PIPELINE_MAX_CMDS`` commands, one round trip) and completes each
send's future at its XADD reply; at most ``max_in_flight`` sends are unacknowledged, beyond which
``send`` waits. One pipeline is in flight per handle (a connection carries one pipeline at a
time in redis-py), so under load the batches grow to what queued during the previous round trip.

Consumer: ``XREADGROUP GROUP <s> <consumer> COUNT <c> BLOCK <ms> STREAMS <all partitions> >`` (one
call reads every partition). Reliable topics: the entries a ``receive`` returns are acknowledged
with one ``XACK`` per stream, sent in the same pipeline as the next XREADGROUP (or by ``close``),
so acking costs no extra round trip; until then they sit in the group's pending entries list and
would be redelivered by XCLAIM/XAUTOCLAIM (at least once). Non-reliable topics: XREADGROUP with
``NOACK`` (nothing pending, at most once, as an auto-ack).

What a producer's ack (the XADD reply) means:
  - ``redis-streams``, reliable: ``appendonly yes``, ``appendfsync always``. Redis writes the AOF
    buffer and fsyncs it in the event loop's before-sleep step, before it sends the replies of
    that loop iteration: **fsync before the reply**, grouped over every command of the iteration
    (the same contract as our WAL's group commit);
  - ``redis-streams-everysec``, reliable: ``appendfsync everysec``: written to the OS (page cache)
    before the reply, fsynced by a background thread about once a second: a crash of the machine
    loses up to ~1-2 s of acknowledged entries (compare with ``danube-none`` / JetStream);
  - non-reliable (both): no AOF, no RDB: the reply means the entry is in the server's memory.
Redis is one node here (no replica): nothing is replicated before the reply, as for every system
in these runs. The AOF is rewritten in a forked child when it doubles past 64 MB (Redis's default).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import re
import shutil
from pathlib import Path
from typing import Any

from bench.drivers._proc import free_port, port_open, stop_process_group
from bench.drivers.base import (
    RECEIVE_BATCH_MAX_MSGS,
    ConsumerHandle,
    Driver,
    DriverUnavailable,
    ProducerHandle,
)

try:
    import redis.asyncio as aioredis
    from redis.exceptions import ResponseError

    _IMPORT_ERROR: ImportError | None = None
except ImportError as exc:  # the harness reports DriverUnavailable
    _IMPORT_ERROR = exc

HOST = "127.0.0.1"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
DEFAULT_MAX_IN_FLIGHT = 4096  # unacknowledged XADDs per producer
PIPELINE_MAX_CMDS = 1000  # XADDs written as one pipeline
READ_BLOCK_MS = 500  # XREADGROUP BLOCK: receive() loops until something arrives
FIELD = b"d"  # each stream entry has one field: the payload


# ---- names


def _name_parts(name: str) -> list[str]:
    parts = [re.sub(r"[^A-Za-z0-9_-]", "_", p) for p in name.strip("/").split("/") if p]
    if not parts:
        raise ValueError(f"invalid name {name!r}")
    return parts


def stream_keys(topic: str, partitions: int) -> list[str]:
    """``/default/orders``, 2 -> ``["bench:default:orders:0", "bench:default:orders:1"]``."""
    base = "bench:" + ":".join(_name_parts(topic))
    return [f"{base}:{i}" for i in range(max(1, partitions))]


def group_name(subscription: str) -> str:
    return "_".join(_name_parts(subscription))


def read_count(partitions: int) -> int:
    """XREADGROUP's COUNT (per stream) so that one read returns at most RECEIVE_BATCH_MAX_MSGS."""
    return max(1, RECEIVE_BATCH_MAX_MSGS // max(1, partitions))


def server_args(exe: str, port: int, data_dir: Path, *, appendfsync: str | None) -> list[str]:
    """The command line of a private server; ``appendfsync`` None = no persistence (memory only)."""
    args = [exe, "--port", str(port), "--bind", HOST, "--dir", str(data_dir), "--daemonize", "no"]
    args += ["--logfile", str(data_dir / "redis-server.log"), "--save", ""]  # --save "": no RDB
    if appendfsync is None:
        return [*args, "--appendonly", "no"]
    return [*args, "--appendonly", "yes", "--appendfsync", appendfsync]


# ---- the server processes


class RedisServer:
    """One ``redis-server`` child process on loopback, in ``workdir/redis/<label>-<port>``."""

    def __init__(self, label: str, *, appendfsync: str | None) -> None:
        self.label = label
        self.appendfsync = appendfsync
        self.port = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.dir: Path | None = None

    async def start(self, workdir: Path) -> None:
        if self.proc is not None:
            return
        exe = shutil.which("redis-server")
        if exe is None:
            raise DriverUnavailable("redis-server not installed: run scripts/setup_bench.sh")
        if _IMPORT_ERROR is not None:
            raise DriverUnavailable(
                f"redis (PyPI) not installed ({_IMPORT_ERROR}): run scripts/setup_bench.sh"
            )
        self.dir = self._prepare(workdir)
        self.proc = await asyncio.create_subprocess_exec(
            *server_args(exe, self.port, self.dir, appendfsync=self.appendfsync),
            cwd=self.dir,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise

    def _prepare(self, workdir: Path) -> Path:
        """Pick the port; make and return the server's directory."""
        self.port = free_port()
        data_dir = Path(workdir).resolve() / "redis" / f"{self.label}-{self.port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        return data_dir

    async def _wait_ready(self) -> None:
        assert self.proc is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while loop.time() < deadline:
            if self.proc.returncode is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.proc.returncode} at start; see {self.dir}"
                )
            if await port_open(HOST, self.port):
                client = aioredis.Redis(host=HOST, port=self.port)
                try:
                    if await client.ping():
                        return
                except Exception:  # loading the AOF: not ready yet
                    pass
                finally:
                    await client.aclose()
            await asyncio.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on {HOST}:{self.port} in {START_TIMEOUT_S}s")

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            await stop_process_group(proc, timeout_s=STOP_TIMEOUT_S)

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None and self.proc.returncode is None else []


def _client(port: int) -> Any:
    """One connection's worth of client; XREADGROUP replies are left raw (nested lists), which
    saves redis-py's per-entry dict building."""
    client = aioredis.Redis(host=HOST, port=port, max_connections=2)
    client.set_response_callback("XREADGROUP", lambda response, **_: response)
    return client


# ---- the drivers


class RedisStreamsDriver(Driver):
    name = "redis-streams"
    APPENDFSYNC = "always"
    durability = (
        "reliable: AOF with appendfsync always (fsync before the XADD reply, grouped per event-loop "
        "iteration), no RDB; consumers XACK each batch; non-reliable: no AOF/RDB (memory only), NOACK reads"
    )

    def __init__(self, *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.max_in_flight = max_in_flight
        self._servers = {
            True: RedisServer(f"aof-{self.APPENDFSYNC}", appendfsync=self.APPENDFSYNC),
            False: RedisServer("memory", appendfsync=None),
        }
        self._ports: dict[bool, int] = {}  # reliable -> port: set by start() or attach()
        self._topics: dict[str, tuple[int, bool]] = {}  # topic -> (partitions, reliable)
        self._clients: list[Any] = []
        self._consumer_ids = itertools.count()

    def durability_of(self, *, reliable: bool) -> str:
        if reliable:
            return f"AOF appendfsync {self.APPENDFSYNC}, no RDB; XACK per batch"
        return "memory only (no AOF, no RDB); NOACK reads"

    async def start(self, workdir: Path) -> None:
        if self._ports:
            return
        try:
            for reliable, server in self._servers.items():
                await server.start(workdir)
                self._ports[reliable] = server.port
        except BaseException:
            await self.stop()
            raise

    def client_spec(self) -> dict[str, Any]:
        if not self._ports:
            raise RuntimeError(f"{self.name}: start() the driver first")
        return {
            "ports": {"reliable": self._ports[True], "memory": self._ports[False]},
            "topics": {t: list(v) for t, v in self._topics.items()},
            "max_in_flight": self.max_in_flight,
        }

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> Driver:
        """Client side only: no servers; stop() closes the handles' connections."""
        if _IMPORT_ERROR is not None:
            raise DriverUnavailable(
                f"redis (PyPI) not installed ({_IMPORT_ERROR}): run scripts/setup_bench.sh"
            )
        driver = cls(max_in_flight=int(spec["max_in_flight"]))
        driver._ports = {True: int(spec["ports"]["reliable"]), False: int(spec["ports"]["memory"])}
        driver._topics = {str(t): (int(p), bool(r)) for t, (p, r) in spec["topics"].items()}
        return driver

    async def stop(self) -> None:
        clients, self._clients = self._clients, []
        for client in clients:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), STOP_TIMEOUT_S)
        for server in self._servers.values():
            await server.stop()  # attached: never started, nothing to stop
        self._ports = {}

    def server_pids(self) -> list[int]:
        return [pid for server in self._servers.values() for pid in server.pids()]

    def _topic(self, topic: str) -> tuple[int, bool]:
        try:
            return self._topics[topic]
        except KeyError:
            raise ValueError(f"{self.name}: topic {topic!r} was not created (create_topic first)") from None

    def _connect(self, reliable: bool) -> Any:
        if not self._ports:
            raise RuntimeError(f"{self.name}: start() or attach() the driver first")
        client = _client(self._ports[reliable])
        self._clients.append(client)
        return client

    async def _release(self, client: Any) -> None:
        if client in self._clients:
            self._clients.remove(client)
        await client.aclose()

    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None:
        # Streams appear with their first XADD or consumer group; nothing to create on the server.
        if not self._ports:
            raise RuntimeError(f"{self.name}: start() the driver first")
        self._topics[topic] = (max(1, partitions), reliable)

    async def producer(self, topic: str) -> ProducerHandle:
        partitions, reliable = self._topic(topic)
        return _RedisProducer(self, self._connect(reliable), stream_keys(topic, partitions))

    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        partitions, reliable = self._topic(topic)
        client = self._connect(reliable)
        group = group_name(subscription)
        keys = stream_keys(topic, partitions)
        try:
            for key in keys:
                try:
                    await client.xgroup_create(key, group, id="$", mkstream=True)
                except ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):  # made by another consumer of the subscription
                        raise
        except BaseException:
            await self._release(client)
            raise
        name = f"c{os.getpid()}-{next(self._consumer_ids)}"
        return _RedisConsumer(self, client, keys, group, name, ack=reliable)


class RedisStreamsEverysecDriver(RedisStreamsDriver):
    name = "redis-streams-everysec"
    APPENDFSYNC = "everysec"
    durability = (
        "reliable: AOF with appendfsync everysec (written to the OS before the XADD reply, fsynced about "
        "once a second: no fsync before the reply), no RDB; non-reliable: memory only"
    )


class _RedisProducer(ProducerHandle):
    def __init__(self, driver: RedisStreamsDriver, client: Any, keys: list[str]) -> None:
        self._driver = driver
        self._client = client
        self._keys = keys
        self._next = 0
        self._slots = asyncio.Semaphore(driver.max_in_flight)
        self._queued: collections.deque[tuple[str, bytes, asyncio.Future[None]]] = collections.deque()
        self._pending: set[asyncio.Future[None]] = set()  # queued or in the pipeline in flight
        self._wake = asyncio.Event()
        self._sender = asyncio.create_task(self._send_loop())  # owned; cancelled by close()

    async def send(self, payload: bytes) -> asyncio.Future[None]:
        if self._sender.done():
            raise RuntimeError("redis producer is closed")
        await self._slots.acquire()
        key = self._keys[self._next]
        self._next = (self._next + 1) % len(self._keys)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.add(fut)
        self._queued.append((key, payload, fut))
        self._wake.set()
        return fut

    async def _send_loop(self) -> None:
        while True:
            if not self._queued:
                self._wake.clear()
                await self._wake.wait()
                continue
            n = min(len(self._queued), PIPELINE_MAX_CMDS)
            batch = [self._queued.popleft() for _ in range(n)]
            pipe = self._client.pipeline(transaction=False)
            for key, payload, _ in batch:
                pipe.execute_command("XADD", key, "*", FIELD, payload)
            try:
                replies: list[Any] = await pipe.execute(raise_on_error=False)
            except Exception as exc:  # the connection failed: every send of the batch fails
                replies = [exc] * n
            except BaseException:  # cancelled by close(): the batch's sends are cancelled
                for _, _, fut in batch:
                    fut.cancel()
                self._finish(batch, [None] * n)
                raise
            self._finish(batch, replies)

    def _finish(self, batch: list[tuple[str, bytes, asyncio.Future[None]]], replies: list[Any]) -> None:
        for (_, _, fut), reply in zip(batch, replies, strict=True):
            if not fut.done():
                if isinstance(reply, BaseException):
                    fut.set_exception(reply)
                else:
                    fut.set_result(None)
            self._pending.discard(fut)
            self._slots.release()

    async def flush(self) -> None:
        if self._pending:
            await asyncio.wait(list(self._pending))

    async def close(self) -> None:
        if not self._sender.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.flush(), STOP_TIMEOUT_S)
            self._sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sender
        queued, self._queued = list(self._queued), collections.deque()
        self._finish(queued, [RuntimeError("redis producer closed")] * len(queued))
        await self._driver._release(self._client)


class _RedisConsumer(ConsumerHandle):
    def __init__(
        self, driver: RedisStreamsDriver, client: Any, keys: list[str], group: str, name: str, *, ack: bool
    ) -> None:
        self._driver = driver
        self._client = client
        self._keys = keys
        self._group = group
        self._name = name
        self._ack = ack
        self._unacked: dict[bytes, list[bytes]] = {}  # stream -> ids returned, acked with the next read
        read = ["XREADGROUP", "GROUP", group, name, "COUNT", read_count(len(keys)), "BLOCK", READ_BLOCK_MS]
        if not ack:
            read.append("NOACK")
        self._read_args = [*read, "STREAMS", *keys, *([">"] * len(keys))]

    def _queue_acks(self, pipe: Any) -> None:
        unacked, self._unacked = self._unacked, {}
        for key, ids in unacked.items():
            pipe.execute_command("XACK", key, self._group, *ids)

    async def receive(self) -> list[bytes]:
        while True:
            pipe = self._client.pipeline(transaction=False)
            self._queue_acks(pipe)
            pipe.execute_command(*self._read_args)
            replies = await pipe.execute()  # raises on an error reply (e.g. a failed XACK)
            payloads = self._take(replies[-1])
            if payloads:
                return payloads

    def _take(self, reply: Any) -> list[bytes]:
        """Payloads of a raw XREADGROUP reply: {stream: [[id, [field, value]], ...]} (RESP3, redis-py
        8's default) or [[stream, entries], ...] (RESP2), None at the BLOCK timeout; notes the ids
        to acknowledge."""
        payloads: list[bytes] = []
        streams = reply.items() if isinstance(reply, dict) else reply or ()
        for key, entries in streams:
            if self._ack and entries:
                self._unacked[key] = [entry_id for entry_id, _ in entries]
            payloads += [fields[1] for _, fields in entries]
        return payloads

    async def close(self) -> None:
        if self._unacked:
            pipe = self._client.pipeline(transaction=False)
            self._queue_acks(pipe)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pipe.execute(), STOP_TIMEOUT_S)
        await self._driver._release(self._client)
