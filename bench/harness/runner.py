"""Drive one Driver through one workload at one producer rate and measure it.

Phases: create topics -> attach consumers (before producers, so non-reliable topics deliver
everything) -> create producers -> warm-up (everything runs, nothing recorded) -> measurement
window -> stop producers, flush, give consumers a short grace to drain -> close.

- Each payload starts with its send time (``time.time_ns()``, 8 bytes little-endian). At a fixed
  rate the send time written is the **intended** one (start + i / rate), and publish latency is also
  measured from it: a stall delays the measurements of every message scheduled behind it, so the
  figures are free of coordinated omission. At max rate (rate 0) it is the actual send time.
- Every producer keeps at most ``max_outstanding_per_producer`` sends awaiting their ack.
- Counted in the window: acks received (publish rate, publish latency) and payloads received
  (consume rate, end-to-end latency = receive time - the payload's send time).
- Backlog workloads: consumers attach but do not read while the producers publish
  ``backlog_messages`` as fast as they can; then the consumers drain. Publish rate = backlog / build
  time; consume rate = payloads received / drain time.
- CPU: server processes' CPU seconds (psutil) + this process's + the driver's client helpers', over
  the window, divided by the messages published in it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import uuid
from array import array
from typing import Any

from bench.drivers.base import ConsumerHandle, Driver, ProducerHandle
from bench.harness.cpu import cpu_seconds, own_cpu_seconds
from bench.harness.stats import new_samples, summarize_us
from bench.harness.workload import Workload

CLOSE_TIMEOUT_S = 10.0
DRAIN_GRACE_S = 5.0
FLUSH_TIMEOUT_S = 30.0


@dataclasses.dataclass
class RunResult:
    workload: str
    driver: str
    durability: str
    reliable: bool
    target_rate: int  # msg/s; 0 = max
    message_size_bytes: int
    window_s: float
    published: int
    consumed: int
    publish_errors: int
    publish_rate: float
    consume_rate: float
    publish_mb_s: float
    consume_mb_s: float
    publish_latency: dict[str, float] | None
    e2e_latency: dict[str, float] | None
    cpu_s_per_million: float
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Meter:
    """Counters and samples shared by every producer and consumer loop of one run."""

    def __init__(self) -> None:
        self.recording = False
        self.published = 0
        self.consumed = 0
        self.errors = 0
        self.pub_us: array[int] = new_samples()
        self.e2e_us: array[int] = new_samples()
        self.sent_total = 0
        self.acked_total = 0
        self.received_total = 0


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
) -> None:
    """Send until ``stop`` (or ``limit`` messages). ``rate`` msg/s for this producer; 0 = max."""
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
    start_ns = time.time_ns()
    while not stop.is_set() and (limit is None or sent < limit):
        due = int((time.time_ns() - start_ns) / interval_ns) + 1  # messages whose time has come
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
    while True:
        payloads = await handle.receive()
        now = time.time_ns()
        meter.received_total += len(payloads)
        if meter.recording:
            meter.consumed += len(payloads)
            for p in payloads:
                e2e_us.append((now - int.from_bytes(p[:8], "little")) // 1000)


async def _wait_for(pred: Any, timeout_s: float, poll_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(poll_s)
    return True


async def run_workload(driver: Driver, wl: Workload, rate: int, *, log: Any = print) -> RunResult:
    """One run; the driver must be started. Topics are fresh (a random run id in their names)."""
    run_id = uuid.uuid4().hex[:6]
    topics = [f"{wl.key.split('-')[0]}-{driver.name}-{run_id}-t{i}" for i in range(wl.topics)]
    for t in topics:
        await driver.create_topic(t, wl.partitions_per_topic, reliable=wl.reliable)
    meter = _Meter()
    consumers: list[ConsumerHandle] = []
    producers: list[ProducerHandle] = []
    notes: list[str] = []
    consuming = wl.consumes and driver.supports_consume
    if wl.consumes and not driver.supports_consume:
        notes.append("publish only: this driver does not consume")
    if getattr(driver, "external_publisher", False):
        return await _run_external(driver, wl, rate, topics[0], notes)
    stop = asyncio.Event()
    consumer_tasks: list[asyncio.Task[None]] = []
    producer_tasks: list[asyncio.Task[None]] = []
    try:
        if consuming:
            for t in topics:
                for s in range(wl.subscriptions_per_topic):
                    for _ in range(wl.consumers_per_subscription):
                        consumers.append(await driver.consumer(t, f"sub-{s}"))
        for t in topics:
            for _ in range(wl.producers_per_topic):
                producers.append(await driver.producer(t))
        n_prod = len(producers)
        per_producer_rate = rate / n_prod if rate else 0.0
        pids = driver.server_pids()
        client_pids = driver.client_pids()

        def cpu_now() -> float:
            return cpu_seconds(pids) + cpu_seconds(client_pids) + own_cpu_seconds()

        def start_consumers() -> None:
            consumer_tasks.extend(asyncio.create_task(_consume(c, meter)) for c in consumers)

        if wl.backlog_messages:
            result = await _run_backlog(
                wl, meter, producers, consumers, start_consumers, consumer_tasks, cpu_now, notes, stop
            )
        else:
            if consuming:
                start_consumers()
            producer_tasks = [
                asyncio.create_task(
                    _produce(
                        p,
                        meter,
                        rate=per_producer_rate,
                        size=wl.message_size_bytes,
                        max_outstanding=wl.max_outstanding_per_producer,
                        limit=None,
                        stop=stop,
                    )
                )
                for p in producers
            ]
            await _sleep_watching(wl.warmup_duration_s, producer_tasks + consumer_tasks)
            cpu0 = cpu_now()
            t0 = time.perf_counter()
            meter.recording = True
            await _sleep_watching(wl.test_duration_s, producer_tasks + consumer_tasks)
            meter.recording = False
            window = time.perf_counter() - t0
            cpu1 = cpu_now()
            stop.set()
            await asyncio.gather(*producer_tasks)
            await _flush_all(producers, meter, notes)
            if consuming:  # a short grace for what is in flight (non-reliable: or was dropped)
                expected = meter.acked_total * wl.subscriptions_per_topic
                await _wait_for(lambda: meter.received_total >= expected, DRAIN_GRACE_S)
            result = (window, window, cpu1 - cpu0)
        pub_window, cons_window, cpu = result
    finally:
        stop.set()
        for task in producer_tasks + consumer_tasks:
            task.cancel()
        await asyncio.gather(*producer_tasks, *consumer_tasks, return_exceptions=True)
        await asyncio.gather(
            *(asyncio.wait_for(h.close(), CLOSE_TIMEOUT_S) for h in [*producers, *consumers]),
            return_exceptions=True,
        )
    if meter.errors:
        notes.append(f"{meter.errors} sends failed")
    size = wl.message_size_bytes
    pub_rate = meter.published / pub_window if pub_window else 0.0
    cons_rate = meter.consumed / cons_window if cons_window else 0.0
    return RunResult(
        workload=wl.key,
        driver=driver.name,
        durability=driver.durability_of(reliable=wl.reliable),
        reliable=wl.reliable,
        target_rate=rate,
        message_size_bytes=size,
        window_s=round(pub_window, 3),
        published=meter.published,
        consumed=meter.consumed,
        publish_errors=meter.errors,
        publish_rate=pub_rate,
        consume_rate=cons_rate,
        publish_mb_s=pub_rate * size / 1e6,
        consume_mb_s=cons_rate * size / 1e6,
        publish_latency=summarize_us(meter.pub_us),
        e2e_latency=summarize_us(meter.e2e_us),
        cpu_s_per_million=cpu / max(meter.published, meter.consumed, 1) * 1e6,
        notes=notes,
    )


async def _flush_all(producers: list[ProducerHandle], meter: _Meter, notes: list[str]) -> None:
    """After the window: wait for outstanding acks, but a system far behind its schedule does not
    fail the run (its figures are already taken); say how many sends were still unacknowledged."""
    try:
        await asyncio.wait_for(asyncio.gather(*(p.flush() for p in producers)), FLUSH_TIMEOUT_S)
    except TimeoutError:
        notes.append(
            f"flush timed out after {FLUSH_TIMEOUT_S:.0f} s: {meter.sent_total - meter.acked_total} unacked"
        )


async def _sleep_watching(seconds: float, tasks: list[asyncio.Task[None]]) -> None:
    """Sleep, but raise at once if a producer or consumer loop failed."""
    if not tasks:
        await asyncio.sleep(seconds)
        return
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for t in done:
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]


async def _run_backlog(
    wl: Workload,
    meter: _Meter,
    producers: list[ProducerHandle],
    consumers: list[ConsumerHandle],
    start_consumers: Any,
    consumer_tasks: list[asyncio.Task[None]],
    cpu_now: Any,
    notes: list[str],
    stop: asyncio.Event,
) -> tuple[float, float, float]:
    per = -(-wl.backlog_messages // len(producers))
    cpu0 = cpu_now()
    meter.recording = True
    t0 = time.perf_counter()
    await asyncio.gather(
        *(
            _produce(
                p,
                meter,
                rate=0,
                size=wl.message_size_bytes,
                max_outstanding=wl.max_outstanding_per_producer,
                limit=per,
                stop=stop,
            )
            for p in producers
        )
    )
    for p in producers:
        await asyncio.wait_for(p.flush(), CLOSE_TIMEOUT_S * 6)
    build_s = time.perf_counter() - t0
    expected = meter.acked_total * wl.subscriptions_per_topic
    notes.append(f"backlog {meter.acked_total} msgs built in {build_s:.2f} s")
    if not consumers:
        return build_s, build_s, cpu_now() - cpu0
    t1 = time.perf_counter()
    start_consumers()
    timeout = max(60.0, wl.test_duration_s * 6)
    drained = await _wait_for(lambda: meter.received_total >= expected, timeout)
    drain_s = time.perf_counter() - t1
    meter.recording = False
    if not drained:
        notes.append(f"drain incomplete after {timeout:.0f} s: {meter.received_total}/{expected}")
    return build_s, drain_s, cpu_now() - cpu0


async def _run_external(driver: Driver, wl: Workload, rate: int, topic: str, notes: list[str]) -> RunResult:
    """A driver that publishes from its own process (danube-client): one producer on the first topic."""
    if wl.topics > 1 or wl.producers_per_topic > 1 or wl.backlog_messages:
        notes.append("external publisher: 1 producer on 1 topic only")
    pids = driver.server_pids()
    cpu0 = cpu_seconds(pids) + own_cpu_seconds()
    res = await driver.run_external(  # type: ignore[attr-defined]
        topic,
        size=wl.message_size_bytes,
        rate=rate,
        warmup_s=wl.warmup_duration_s,
        duration_s=wl.test_duration_s,
        reliable=wl.reliable,
    )
    cpu = cpu_seconds(pids) + own_cpu_seconds() - cpu0  # warm-up included; scaled to the window below
    published, window = int(res["published"]), float(res["window_s"])
    if res.get("errors"):
        notes.append(f"{res['errors']} sends failed")
    pub_rate = published / window if window else 0.0
    size = wl.message_size_bytes
    return RunResult(
        workload=wl.key,
        driver=driver.name,
        durability=driver.durability_of(reliable=wl.reliable),
        reliable=wl.reliable,
        target_rate=rate,
        message_size_bytes=size,
        window_s=round(window, 3),
        published=published,
        consumed=0,
        publish_errors=int(res.get("errors", 0)),
        publish_rate=pub_rate,
        consume_rate=0.0,
        publish_mb_s=pub_rate * size / 1e6,
        consume_mb_s=0.0,
        publish_latency=summarize_us(res["lat_us"]),
        e2e_latency=None,
        cpu_s_per_million=cpu / max(published, 1) * 1e6 * window / (window + wl.warmup_duration_s),
        notes=notes,
    )
