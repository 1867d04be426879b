"""The client side of a run: producer and consumer loops over a driver's handles, and their meter.

``ClientSet`` holds the handles one process runs and the loops that drive them. It is used as it is
by the harness process (``--client-procs 0``: every producer and consumer in the harness) and inside
every client worker process (bench/harness/workers.py, which maps the harness's commands onto these
methods), so sending, receiving, timestamping and counting have one implementation in both modes.
The phases (warm-up, window, backlog, drain) are bench/harness/runner.py's, written against
``ClientGroup``: a ``ClientSet`` or a ``WorkerPool``.

- Each payload starts with its send time (``time.time_ns()``, 8 bytes little-endian). At a fixed
  rate the send time written is the **intended** one (start + i / rate), and publish latency is also
  measured from it (coordinated-omission free). At max rate (rate 0) it is the actual send time.
- Every producer keeps at most ``max_outstanding`` sends awaiting their ack.
- Only while ``recording`` (the measurement window) are acks and receipts counted and sampled.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import time
from array import array
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from bench.drivers.base import ConsumerHandle, Driver, ProducerHandle
from bench.harness.stats import new_samples

CLOSE_TIMEOUT_S = 10.0
FLUSH_TIMEOUT_S = 30.0
BACKLOG_FLUSH_TIMEOUT_S = CLOSE_TIMEOUT_S * 6
#: Handles attached at once per process (subscribe / create producer: a lookup and a stream each).
#: Bounded so that 10,000 topics do not open 20,000 streams in one burst: with 64 at a time the
#: broker of a 10,000-topic run lost its registration lease during the attach.
ATTACH_CONCURRENCY = 16

T = TypeVar("T")

COUNTERS = ("published", "consumed", "errors", "sent_total", "acked_total", "received_total")


class _Meter:
    """Counters and samples shared by every producer and consumer loop of one process (or, merged,
    of one run)."""

    def __init__(self) -> None:
        self.recording = False
        self.published = 0  # acked in the window
        self.consumed = 0  # received in the window
        self.errors = 0
        self.pub_us: array[int] = new_samples()
        self.e2e_us: array[int] = new_samples()
        self.sent_total = 0
        self.acked_total = 0
        self.received_total = 0
        self.progressed = asyncio.Event()  # set on every receipt: wait_received wakes on it

    def counts(self) -> dict[str, int]:
        return {k: int(getattr(self, k)) for k in COUNTERS}

    def merge(self, counts: dict[str, Any], pub_us: bytes, e2e_us: bytes) -> None:
        """Add another process's counters and samples (``array('q')`` bytes) to these."""
        for k in COUNTERS:
            setattr(self, k, getattr(self, k) + int(counts[k]))
        self.pub_us.frombytes(pub_us)
        self.e2e_us.frombytes(e2e_us)


async def bounded_gather(
    makers: list[Callable[[], Awaitable[T]]], *, limit: int = ATTACH_CONCURRENCY
) -> list[T]:
    """Run ``makers`` with at most ``limit`` awaiting at once; results in the makers' order. On the
    first failure the rest are not started, the running ones are awaited, and the failure raised."""
    results: list[T | None] = [None] * len(makers)
    sem = asyncio.Semaphore(limit)
    failed: list[BaseException] = []

    async def one(i: int) -> None:
        async with sem:
            if failed:
                return
            try:
                results[i] = await makers[i]()
            except BaseException as exc:
                failed.append(exc)

    async with asyncio.TaskGroup() as tg:
        for i in range(len(makers)):
            tg.create_task(one(i))
    if failed:
        raise failed[0]
    return results  # type: ignore[return-value]


def _stamp(ts_ns: int, pad: bytes) -> bytes:
    return ts_ns.to_bytes(8, "little") + pad


async def _produce(
    handle: ProducerHandle,
    meter: _Meter,
    *,
    rate: float,
    size: int,
    max_outstanding: int,
    limit: int | None,
    stop: asyncio.Event,
    phase: float = 0.0,
) -> None:
    """Send until ``stop`` (or ``limit`` messages). ``rate`` msg/s for this producer; 0 = max.
    ``phase`` (0 <= phase < 1): this producer's schedule starts that fraction of its interval
    late, so the producers of a process send evenly spread in time (as OMB's rate limiter shared
    by a worker's producers does) instead of all at the same instants."""
    pad = os.urandom(size - 8)
    window = asyncio.Semaphore(max_outstanding)
    pub_us = meter.pub_us

    def on_ack(fut: asyncio.Future[None], sent_ns: int) -> None:
        window.release()
        meter.acked_total += 1
        if fut.cancelled() or fut.exception() is not None:
            meter.errors += 1
            return
        if meter.recording:
            meter.published += 1
            pub_us.append((time.time_ns() - sent_ns) // 1000)

    async def send_one(ts_ns: int) -> None:
        await window.acquire()
        fut = await handle.send(_stamp(ts_ns, pad))
        meter.sent_total += 1
        fut.add_done_callback(lambda f, t=ts_ns: on_ack(f, t))

    sent = 0
    if rate <= 0:
        while not stop.is_set() and (limit is None or sent < limit):
            await send_one(time.time_ns())
            sent += 1
            if sent % 256 == 0:
                await asyncio.sleep(0)  # let acks and consumers run even if send never blocks
        return
    interval_ns = 1e9 / rate
    start_ns = time.time_ns() + int(phase * interval_ns)
    while not stop.is_set() and (limit is None or sent < limit):
        due = math.floor((time.time_ns() - start_ns) / interval_ns) + 1  # messages whose time has come
        while sent < due and not stop.is_set():
            await send_one(start_ns + int(sent * interval_ns))
            sent += 1
        next_ns = start_ns + sent * interval_ns
        delay_s = (next_ns - time.time_ns()) / 1e9
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        else:
            await asyncio.sleep(0)


async def _consume(handle: ConsumerHandle, meter: _Meter) -> None:
    e2e_us = meter.e2e_us
    progressed = meter.progressed
    while True:
        payloads = await handle.receive()
        now = time.time_ns()
        meter.received_total += len(payloads)
        if meter.recording:
            meter.consumed += len(payloads)
            for p in payloads:
                e2e_us.append((now - int.from_bytes(p[:8], "little")) // 1000)
        progressed.set()


async def _sleep_watching(seconds: float, tasks: list[asyncio.Task[None]]) -> None:
    """Sleep, but raise at once if a producer or consumer loop failed."""
    if not tasks:
        await asyncio.sleep(seconds)
        return
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for t in done:
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]


class ClientGroup(Protocol):
    """What runner.py drives: the producers and consumers of one run, wherever they live."""

    def pid_names(self) -> dict[str, int]:
        """{"producer-0": pid, ...}: the processes the clients run in, by name (for profiles)."""
        ...

    def pids(self) -> list[int]:
        """Client processes other than the harness (their CPU counts in CPU s/M)."""
        ...

    async def attach(self, consumers: list[tuple[str, str]], producers: list[str]) -> None:
        """Consumers (topic, subscription) first, attached (ready) when it returns; then producers."""
        ...

    async def start_consumers(self) -> None: ...

    async def start_producers(
        self, *, rate: float, size: int, max_outstanding: int, limit: int | None
    ) -> None: ...

    async def set_recording(self, on: bool) -> None: ...

    async def watch(self, seconds: float) -> None:
        """Sleep ``seconds``, but raise at once if a producer or consumer failed."""
        ...

    async def stop_producers(self, notes: list[str]) -> None:
        """Stop sending, then wait for outstanding acks (a flush timeout becomes a note)."""
        ...

    async def producers_done(self) -> None:
        """Wait until every producer has sent its ``limit`` and every send is acked (backlog)."""
        ...

    async def totals(self) -> dict[str, int]: ...

    async def wait_received(self, target: int, timeout_s: float) -> bool:
        """Until ``received_total`` >= ``target`` (True) or ``timeout_s`` has passed (False)."""
        ...

    async def collect(self) -> _Meter:
        """Every counter and sample, merged."""
        ...

    async def close(self) -> None:
        """Cancel the loops, close every handle; worker processes end. Never raises."""
        ...


class ClientSet:
    """The handles of one process and their loops (a ClientGroup of the harness itself)."""

    def __init__(self, driver: Driver, *, on_error: Callable[[BaseException], None] | None = None) -> None:
        self.driver = driver
        self.meter = _Meter()
        self.producers: list[ProducerHandle] = []
        self.consumers: list[ConsumerHandle] = []
        self._stop = asyncio.Event()
        self._producer_tasks: list[asyncio.Task[None]] = []
        self._consumer_tasks: list[asyncio.Task[None]] = []
        self._on_error = on_error

    def pids(self) -> list[int]:
        return []  # this process: the harness counts its own CPU

    def pid_names(self) -> dict[str, int]:
        return {"harness": os.getpid()}

    def _task(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        if self._on_error is not None:
            task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None and self._on_error is not None:
            self._on_error(exc)

    async def attach(self, consumers: list[tuple[str, str]], producers: list[str]) -> None:
        """Every consumer (attached, i.e. ready), then every producer; up to ``ATTACH_CONCURRENCY``
        at a time. A failure fails the attach; the handles made so far are kept for ``close``."""

        async def consumer(topic: str, subscription: str) -> None:
            self.consumers.append(await self.driver.consumer(topic, subscription))

        async def producer(topic: str) -> None:
            self.producers.append(await self.driver.producer(topic))

        await bounded_gather([functools.partial(consumer, t, s) for t, s in consumers])
        await bounded_gather([functools.partial(producer, t) for t in producers])

    async def start_consumers(self) -> None:
        self._consumer_tasks.extend(self._task(_consume(c, self.meter)) for c in self.consumers)

    async def start_producers(
        self, *, rate: float, size: int, max_outstanding: int, limit: int | None
    ) -> None:
        self._producer_tasks.extend(
            self._task(
                _produce(
                    p,
                    self.meter,
                    rate=rate,
                    size=size,
                    max_outstanding=max_outstanding,
                    limit=limit,
                    stop=self._stop,
                    phase=i / len(self.producers),
                )
            )
            for i, p in enumerate(self.producers)
        )

    async def set_recording(self, on: bool) -> None:
        self.meter.recording = on

    async def watch(self, seconds: float) -> None:
        await _sleep_watching(seconds, self._producer_tasks + self._consumer_tasks)

    async def stop_producers(self, notes: list[str]) -> None:
        self._stop.set()
        await asyncio.gather(*self._producer_tasks)
        await self._flush_all(notes)

    async def _flush_all(self, notes: list[str]) -> None:
        """After the window: wait for outstanding acks, but a system far behind its schedule does not
        fail the run (its figures are already taken); say how many sends were still unacknowledged."""
        try:
            await asyncio.wait_for(asyncio.gather(*(p.flush() for p in self.producers)), FLUSH_TIMEOUT_S)
        except TimeoutError:
            notes.append(
                f"flush timed out after {FLUSH_TIMEOUT_S:.0f} s: "
                f"{self.meter.sent_total - self.meter.acked_total} unacked"
            )

    async def producers_done(self) -> None:
        await asyncio.gather(*self._producer_tasks)
        for p in self.producers:
            await asyncio.wait_for(p.flush(), BACKLOG_FLUSH_TIMEOUT_S)

    async def totals(self) -> dict[str, int]:
        return self.meter.counts()

    async def wait_received(self, target: int, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        meter = self.meter
        while meter.received_total < target:
            meter.progressed.clear()
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(meter.progressed.wait(), left)
            except TimeoutError:
                pass
        return True

    async def collect(self) -> _Meter:
        return self.meter

    async def close(self) -> None:
        self._stop.set()
        tasks = self._producer_tasks + self._consumer_tasks
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        handles: list[ProducerHandle | ConsumerHandle] = [*self.producers, *self.consumers]
        await asyncio.gather(
            *(asyncio.wait_for(h.close(), CLOSE_TIMEOUT_S) for h in handles), return_exceptions=True
        )
