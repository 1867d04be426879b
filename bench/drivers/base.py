"""The interface every benchmarked system implements: start servers, make topics, produce, consume.

The harness (bench/harness) drives a ``Driver`` through one workload; it never knows which system it
talks to. A driver starts its own servers on loopback ports it picks (free ports), reports their pids
so the harness can read their CPU time, and states its ``durability`` in words that are printed next
to every figure it produces.

Payloads carry their send time: the harness writes ``time.time_ns()`` as the first 8 bytes
(little-endian) of each payload, so a consumer handle only returns payloads and the harness computes
end-to-end latency itself (one machine, one clock).

Topic and subscription names the harness passes are plain ``[a-z0-9-]+`` (e.g. ``w1-danube-3f2a-t0``,
``sub-0``); a driver maps them onto its system (Danube: ``/default/<topic>``; NATS: a subject/stream
name). A driver is registered by being a ``Driver`` subclass with a distinct ``name`` in any module of
bench/drivers (bench/drivers/__init__.py finds it).

Client worker processes (bench/harness/workers.py): the driver object the harness made starts and
stops the servers and creates the topics; producers and consumers may run in other processes. There,
``type(driver).attach(driver.client_spec())`` rebuilds the client side only: a driver connected to
the running servers, which starts none, knows the topics created so far (``client_spec`` is taken
after ``create_topic``), and whose ``stop`` closes its own client connections only.
"""

from __future__ import annotations

import abc
import asyncio
from pathlib import Path
from typing import Any, TypeVar

#: Most payloads a consumer handle returns from one ``receive``.
RECEIVE_BATCH_MAX_MSGS = 1000

T = TypeVar("T")


async def take_batch(queue: asyncio.Queue[T], max_items: int = RECEIVE_BATCH_MAX_MSGS) -> list[T]:
    """Wait for one item, then take whatever else is queued, up to ``max_items``."""
    out = [await queue.get()]
    while len(out) < max_items:
        try:
            out.append(queue.get_nowait())
        except asyncio.QueueEmpty:
            break
    return out


class DriverUnavailable(RuntimeError):
    """The system's servers or client library are not installed; the message says how to fix it
    (e.g. "nats-server not installed: run scripts/setup_bench.sh"). The harness prints it and skips."""


class ProducerHandle(abc.ABC):
    @abc.abstractmethod
    async def send(self, payload: bytes) -> asyncio.Future[None]:
        """Enqueue one payload (may wait for back-pressure); the future completes at the broker's ack."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Return once everything sent so far is acknowledged (or failed)."""

    @abc.abstractmethod
    async def close(self) -> None: ...


class ConsumerHandle(abc.ABC):
    @abc.abstractmethod
    async def receive(self) -> list[bytes]:
        """The next payloads available (at least one), acked as the system requires."""

    @abc.abstractmethod
    async def close(self) -> None: ...


class Driver(abc.ABC):
    name: str  # "danube", "danube-client", "nats-jetstream", "nats-core", "rabbitmq", "raw-grpc"
    durability: str  # e.g. "fsync before ack", "page cache, no fsync before ack", "in memory"

    @abc.abstractmethod
    async def start(self, workdir: Path) -> None:
        """Start servers (loopback, free ports). Idempotent. Raise DriverUnavailable if not installed."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop everything it started; never leave a process behind. Idempotent."""

    @abc.abstractmethod
    def server_pids(self) -> list[int]:
        """Pids of the server processes, for CPU seconds (psutil)."""

    @abc.abstractmethod
    async def create_topic(self, topic: str, partitions: int, *, reliable: bool) -> None: ...

    @abc.abstractmethod
    async def producer(self, topic: str) -> ProducerHandle: ...

    @abc.abstractmethod
    async def consumer(self, topic: str, subscription: str) -> ConsumerHandle:
        """Attached (ready to receive) when it returns."""

    # Optional capabilities; the harness checks them before running a workload.
    supports_consume: bool = True  # False: publish-only (e.g. danube-client: one unary call per message)
    supports_reliable: bool = True  # False: workloads with reliable: true are skipped (e.g. nats-core)
    supports_non_reliable: bool = True

    def durability_of(self, *, reliable: bool) -> str:
        """What an ack means for a topic of this kind; default: ``durability``."""
        return self.durability

    def broker_pids(self) -> list[int]:
        """Pids of the broker processes only (not etcd, lookup ...): their RSS is the broker memory a
        topic costs. Default: every server process."""
        return self.server_pids()

    def client_pids(self) -> list[int]:
        """Helper client processes it runs (their CPU counts with the harness's own); default none."""
        return []

    def client_spec(self) -> dict[str, Any]:
        """What ``attach`` needs in another process to reach the running servers: JSON-serialisable
        (addresses, per-topic settings of the topics created so far, client options). Started only."""
        raise NotImplementedError(
            f"{self.name} cannot run its clients in worker processes (no client_spec): use --client-procs 0"
        )

    @classmethod
    async def attach(cls, spec: dict[str, Any]) -> Driver:
        """A driver of this class on the client side only, built from ``client_spec()`` (normally in
        a client worker process): connected to servers started elsewhere, it starts none; ``producer``
        and ``consumer`` work, ``stop`` closes its client connections and nothing else."""
        raise NotImplementedError(f"{cls.__name__} has no attach(spec): use --client-procs 0")
