"""Drive one Driver through one workload at one producer rate and measure it.

Phases: write back the machine's dirty pages (``sync``) -> create topics -> attach consumers (before producers, so non-reliable topics deliver
everything) -> create producers -> warm-up (everything runs, nothing recorded) -> measurement
window -> stop producers, flush, give consumers a short grace to drain -> close.

Where the clients run (``client_procs``): 0 = every producer and consumer in this process (a
``ClientSet``); N >= 1 = producers spread over up to N producer worker processes and consumers over up
to N consumer worker processes (a ``WorkerPool``, bench/harness/workers.py), while the driver, its
servers and the topics stay here. The phases below are the same code for both; so are the producer
and consumer loops (bench/harness/clients.py), which run wherever the handles are.

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
- CPU: server processes' CPU seconds (psutil) + the client worker processes' (psutil) + this
  process's + the driver's client helpers', over the window, divided by the messages published in it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.drivers.base import Driver
from bench.harness.clients import ClientGroup, ClientSet, _Meter, bounded_gather
from bench.harness.cpu import all_alive, cpu_seconds, own_cpu_seconds, rss_bytes
from bench.harness.profile import Profiler
from bench.harness.stats import summarize_us
from bench.harness.sweep import memory_per_topic_bytes, progress_points
from bench.harness.workers import WorkerPool
from bench.harness.workload import Workload

DRAIN_GRACE_S = 5.0
DEFAULT_CLIENT_PROCS = 1
#: Topics created at once (each one an admin call that places the topic through etcd).
CREATE_CONCURRENCY = 32
#: Print creation progress only from this many topics up.
PROGRESS_MIN_TOPICS = 200


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
    client_procs: int = 0  # 0: clients in the harness process; N: up to N producer + N consumer workers
    round: int = 1  # which of bench/run.py's --rounds this run belongs to (1 when run once)
    topics: int = 1
    partitions_per_topic: int = 1
    sweep: dict[str, Any] | None = None  # {"dimension": "topics", "value": 1000} for a sweep point
    create_topics_s: float | None = None  # creating every topic (concurrently, CREATE_CONCURRENCY)
    attach_s: float | None = None  # attaching every consumer, then every producer
    broker_rss_before_bytes: int | None = None  # the broker processes before the topics were made
    broker_rss_after_bytes: int | None = None  # ... with the topics, producers and consumers attached
    broker_mem_per_topic_bytes: float | None = None  # (after - before) / (topics x partitions)
    #: CPU% (100 = one core) over the window: the broker processes summed, and the busiest client
    #: worker (near 100: the clients, not the broker, may be what limits the run).
    broker_cpu_pct: float | None = None
    client_cpu_pct_max: float | None = None
    #: With ``idle_s``: broker CPU% while idle, with the topics made and no client, then with every
    #: client attached and nothing sent; and the clients' CPU% (all workers summed) in the latter.
    idle_broker_cpu_pct_no_clients: float | None = None
    idle_broker_cpu_pct_clients: float | None = None
    idle_clients_cpu_pct: float | None = None
    broker_rss_topics_only_bytes: int | None = None  # the brokers with the topics, before any client

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _clients(driver: Driver, client_procs: int) -> ClientGroup:
    if client_procs < 0:
        raise ValueError(f"client_procs must be >= 0, got {client_procs}")
    return ClientSet(driver) if client_procs == 0 else WorkerPool(driver, client_procs)


async def run_workload(
    driver: Driver,
    wl: Workload,
    rate: int,
    *,
    client_procs: int = DEFAULT_CLIENT_PROCS,
    log: Any = print,
    profiler: Profiler | None = None,
    idle_s: float = 0.0,
) -> RunResult:
    """One run; the driver must be started. Topics are fresh (a random run id in their names).
    ``idle_s`` > 0: before the clients attach and again before they start, sit idle that long and
    record the broker's (and the clients') CPU%."""
    run_id = uuid.uuid4().hex[:6]
    topics = [f"{wl.key.split('-')[0]}-{driver.name}-{run_id}-t{i}" for i in range(wl.topics)]
    # Write back every dirty page first, so no run pays for an earlier one's: with all servers
    # up (--rounds), a peer that does not fsync (JetStream) leaves hundreds of MB dirty, which
    # a later run that flushes its file system (syncfs, or a journal commit) would write back.
    await asyncio.to_thread(os.sync)
    broker_pids = driver.broker_pids()
    rss_before = rss_bytes(broker_pids)
    create_s = await create_topics(driver, topics, wl.partitions_per_topic, reliable=wl.reliable, log=log)
    idle: dict[str, Any] = {}
    if idle_s > 0:
        idle["broker_rss_topics_only_bytes"] = rss_bytes(broker_pids)
        idle["idle_broker_cpu_pct_no_clients"], _ = await idle_cpu_pct(broker_pids, [], idle_s)
        log(
            f"   idle, no clients: broker {idle['idle_broker_cpu_pct_no_clients']:.1f}% CPU over {idle_s:g} s"
        )
    notes: list[str] = []
    consuming = wl.consumes and driver.supports_consume
    if wl.consumes and not driver.supports_consume:
        notes.append("publish only: this driver does not consume")
    if getattr(driver, "external_publisher", False):
        return await _run_external(driver, wl, rate, topics[0], notes)
    consumers = (
        [
            (t, f"sub-{s}")
            for t in topics
            for s in range(wl.subscriptions_per_topic)
            for _ in range(wl.consumers_per_subscription)
        ]
        if consuming
        else []
    )
    producers = [t for t in topics for _ in range(wl.producers_per_topic)]
    clients = _clients(driver, client_procs)
    setup: dict[str, Any] = {"create_topics_s": create_s, **idle}
    try:
        t_attach = time.perf_counter()
        await clients.attach(consumers, producers)  # consumers first, then producers
        setup["attach_s"] = time.perf_counter() - t_attach
        if len(consumers) + len(producers) >= PROGRESS_MIN_TOPICS:
            log(
                f"   attached {len(consumers)} consumers and {len(producers)} producers in {setup['attach_s']:.1f} s"
            )
        rss_after = rss_bytes(broker_pids)
        setup |= {
            "broker_rss_before_bytes": rss_before,
            "broker_rss_after_bytes": rss_after,
            # per topic-partition: a partition is a topic to the broker (its own log and dispatch)
            "broker_mem_per_topic_bytes": memory_per_topic_bytes(
                rss_before, rss_after, len(topics) * wl.partitions_per_topic
            ),
        }
        if idle_s > 0:
            b, c = await idle_cpu_pct(broker_pids, clients.pids(), idle_s)
            setup |= {"idle_broker_cpu_pct_clients": b, "idle_clients_cpu_pct": c}
            rss = rss_bytes(broker_pids)
            log(
                f"   idle, clients attached: broker {b:.1f}% CPU, clients {c:.1f}% CPU over {idle_s:g} s; "
                f"broker RSS {rss / 2**20 if rss is not None else float('nan'):.0f} MiB"
            )
        per_producer_rate = rate / len(producers) if rate else 0.0
        pids = driver.server_pids()
        client_pids = driver.client_pids() + clients.pids()

        def cpu_now() -> float:
            return cpu_seconds(pids) + cpu_seconds(client_pids) + own_cpu_seconds()

        if wl.backlog_messages:
            pub_window, cons_window, cpu = await _run_backlog(
                wl, clients, len(producers), consuming, cpu_now, notes
            )
        else:
            if consuming:
                await clients.start_consumers()
            await clients.start_producers(
                rate=per_producer_rate,
                size=wl.message_size_bytes,
                max_outstanding=wl.max_outstanding_per_producer,
                limit=None,
            )
            await clients.watch(wl.warmup_duration_s)
            cpu0 = cpu_now()
            roles0 = _role_cpu(broker_pids, clients.pids())
            if profiler is not None:
                named = {f"broker-{i}": pid for i, pid in enumerate(broker_pids)} | clients.pid_names()
                await profiler.start(f"{wl.key}-{driver.name}", named, wl.test_duration_s)
            t0 = time.perf_counter()
            await clients.set_recording(True)
            await clients.watch(wl.test_duration_s)
            t1 = time.perf_counter()
            await clients.set_recording(False)
            pub_window = cons_window = t1 - t0
            cpu = cpu_now() - cpu0
            setup |= _role_cpu_pct(roles0, _role_cpu(broker_pids, clients.pids()), t1 - t0)
            if profiler is not None:
                for path in await profiler.finish():
                    log(f"   profile: {path}")
            await clients.stop_producers(notes)
            if consuming:  # a short grace for what is in flight (non-reliable: or was dropped)
                expected = (await clients.totals())["acked_total"] * wl.subscriptions_per_topic
                await clients.wait_received(expected, DRAIN_GRACE_S)
        meter = await clients.collect()
    finally:
        await clients.close()
    res = _result(driver, wl, rate, meter, pub_window, cons_window, cpu, notes, client_procs)
    return dataclasses.replace(res, **setup)


async def create_topics(
    driver: Driver, topics: list[str], partitions: int, *, reliable: bool, log: Any = print
) -> float:
    """Create ``topics`` at most ``CREATE_CONCURRENCY`` at a time; print progress for many topics.
    Returns the seconds it took."""
    points = progress_points(len(topics)) if len(topics) >= PROGRESS_MIN_TOPICS else set()
    done = 0
    t0 = time.perf_counter()

    async def one(topic: str) -> None:
        nonlocal done
        await driver.create_topic(topic, partitions, reliable=reliable)
        done += 1
        if done in points:
            el = time.perf_counter() - t0
            log(f"   created {done:,}/{len(topics):,} topics in {el:.1f} s ({done / el:,.0f}/s)")

    await bounded_gather([functools.partial(one, t) for t in topics], limit=CREATE_CONCURRENCY)
    return time.perf_counter() - t0


async def idle_cpu_pct(broker_pids: list[int], client_pids: list[int], seconds: float) -> tuple[float, float]:
    """(broker CPU%, clients' CPU% summed) over ``seconds`` of doing nothing (100 = one core)."""
    b0, c0, t0 = cpu_seconds(broker_pids), cpu_seconds(client_pids), time.perf_counter()
    await asyncio.sleep(seconds)  # the measurement: an idle interval of a set length
    b1, c1, t1 = cpu_seconds(broker_pids), cpu_seconds(client_pids), time.perf_counter()
    if not all_alive(broker_pids):  # a vanished process reads as 0 CPU seconds: not "idle"
        raise RuntimeError(f"a broker process ({broker_pids}) exited during the idle measurement")
    return 100 * (b1 - b0) / (t1 - t0), 100 * (c1 - c0) / (t1 - t0)


def _role_cpu(broker_pids: list[int], client_pids: list[int]) -> dict[str, Any]:
    return {"broker": cpu_seconds(broker_pids), "clients": {p: cpu_seconds([p]) for p in client_pids}}


def _role_cpu_pct(before: dict[str, Any], after: dict[str, Any], window_s: float) -> dict[str, Any]:
    """Broker CPU% and the busiest client worker's CPU% between two ``_role_cpu`` readings."""
    if window_s <= 0:
        return {}
    clients = [after["clients"][p] - before["clients"].get(p, 0.0) for p in after["clients"]]
    return {
        "broker_cpu_pct": 100 * (after["broker"] - before["broker"]) / window_s,
        "client_cpu_pct_max": 100 * max(clients) / window_s if clients else None,
    }


def _result(
    driver: Driver,
    wl: Workload,
    rate: int,
    meter: _Meter,
    pub_window: float,
    cons_window: float,
    cpu: float,
    notes: list[str],
    client_procs: int,
) -> RunResult:
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
        client_procs=client_procs,
        topics=wl.topics,
        partitions_per_topic=wl.partitions_per_topic,
    )


async def _run_backlog(
    wl: Workload,
    clients: ClientGroup,
    n_producers: int,
    consuming: bool,
    cpu_now: Callable[[], float],
    notes: list[str],
) -> tuple[float, float, float]:
    """Build the backlog with the consumers attached but idle, then drain it. Recorded throughout."""
    per = -(-wl.backlog_messages // n_producers)
    cpu0 = cpu_now()
    await clients.set_recording(True)
    t0 = time.perf_counter()
    await clients.start_producers(
        rate=0, size=wl.message_size_bytes, max_outstanding=wl.max_outstanding_per_producer, limit=per
    )
    await clients.producers_done()
    build_s = time.perf_counter() - t0
    acked = (await clients.totals())["acked_total"]
    expected = acked * wl.subscriptions_per_topic
    notes.append(f"backlog {acked} msgs built in {build_s:.2f} s")
    if not consuming:
        return build_s, build_s, cpu_now() - cpu0
    t1 = time.perf_counter()
    await clients.start_consumers()
    timeout = max(60.0, wl.test_duration_s * 6)
    drained = await clients.wait_received(expected, timeout)
    drain_s = time.perf_counter() - t1
    await clients.set_recording(False)
    if not drained:
        received = (await clients.totals())["received_total"]
        notes.append(f"drain incomplete after {timeout:.0f} s: {received}/{expected}")
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
