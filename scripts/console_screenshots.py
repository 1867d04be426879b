"""Screenshots of the web console's main pages, for docs/console.md.

    .venv/bin/python scripts/console_screenshots.py                 # docs/img/console-*.png
    .venv/bin/python scripts/console_screenshots.py --out /tmp/shots --warmup-s 30

Starts a local cluster (danube_local: 3 brokers, WAL uploaders, a leader, a load manager and
the planner with its plain-Python engine) in a temporary directory, creates a few topics in two
namespaces, runs producers and consumers against them (one subscription without a consumer,
so it has a backlog), skews the cluster and lets the planner propose a plan, applies it, skews
again for a second proposal, then opens the console in Debian's Chromium (headless, driven by
Playwright) and saves the overview, a topic page and the planner page once their live plots
have filled for ``--warmup-s`` seconds. Everything it started is stopped at the end.

Not part of the test suite (it takes a few minutes); run it after changing the pages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc.aio

from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_local.cluster import LocalCluster
from danube_sdk import DanubeClient, DispatchStrategy, SubType

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ENV = {
    "DANUBE_BROKER_LOAD_REPORT_INTERVAL_S": "1",
    "DANUBE_BROKER_LOAD_HISTORY_FLUSH_INTERVAL_S": "5",
    "DANUBE_BROKER_WAL__SEGMENT_MAX_AGE_S": "10",
    "DANUBE_LOAD_MANAGER_RECONCILE_INTERVAL_S": "0.5",
    "DANUBE_LOAD_MANAGER_MOVE_COOLDOWN_S": "1",
    "DANUBE_PLANNER_INTERVAL_S": "600",  # cycles only when asked: the plans are the requested ones
    "DANUBE_PLANNER_MIN_TOPIC_AGE_S": "0",
    "DANUBE_PLANNER_MOVE_COOLDOWN_S": "0",
    "DANUBE_PLANNER_HISTORY_WINDOW_S": "120",
    "DANUBE_PLANNER_TARGET_CV": "0.05",
}

#: (topic, reliable, partitions, msg/s, subscriptions consumed, subscriptions left with a backlog)
WORKLOAD: list[tuple[str, bool, int, float, list[str], list[str]]] = [
    ("/default/orders", True, 3, 120.0, ["fulfilment"], []),
    ("/default/payments", True, 0, 60.0, ["billing"], ["audit"]),
    ("/default/clicks", False, 0, 150.0, ["analytics"], []),
    ("/default/inventory", True, 0, 25.0, ["sync"], []),
    ("/analytics/events", True, 0, 40.0, ["etl"], []),
]
SKEWED = ["/default/payments", "/default/clicks", "/default/inventory", "/analytics/events"]


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(grpc.aio.AioRpcError):
            value = await check()
            if value:
                return value
        if time.monotonic() > deadline:
            raise SystemExit(f"console_screenshots: gave up waiting for {what} after {timeout_s:.0f}s")
        await asyncio.sleep(0.5)


class Admin:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.topics = apb_grpc.TopicAdminStub(channel)
        self.cluster = apb_grpc.ClusterAdminStub(channel)
        self.namespaces = apb_grpc.NamespaceAdminStub(channel)

    async def owner(self, name: str) -> str:
        return (await self.topics.DescribeTopic(apb.DescribeTopicRequest(name=name), timeout=5)).broker_id

    async def move(self, name: str, to: str) -> None:
        if await self.owner(name) != to:
            await self.topics.MoveTopic(apb.MoveTopicRequest(name=name, to_broker=to), timeout=5)
            await until(lambda: self._owned(name, to), f"{name} on broker {to}")

    async def _owned(self, name: str, to: str) -> bool:
        return await self.owner(name) == to

    async def propose(self) -> str:
        """A dry-run plan: its id once the planner has written it."""
        req = await self.cluster.RequestRebalance(apb.RequestRebalanceRequest(dry_run=True), timeout=5)

        async def answered() -> str | None:
            plans = await self.cluster.ListPlans(apb.ListPlansRequest(limit=5), timeout=5)
            for doc in plans.plans:
                if req.request_id in doc.json:
                    return doc.key.rpartition("/")[2]
            return None

        return str(await until(answered, f"the planner's answer to {req.request_id}", timeout_s=180))


async def traffic(client: DanubeClient, stop: asyncio.Event) -> list[asyncio.Task[None]]:
    tasks: list[asyncio.Task[None]] = []
    for topic, reliable, _, rate, consumed, _ in WORKLOAD:
        strategy = DispatchStrategy.RELIABLE if reliable else DispatchStrategy.NON_RELIABLE
        producer = await client.create_producer(
            topic, producer_name=f"shots-{topic.rpartition('/')[2]}", dispatch_strategy=strategy
        )
        for sub in consumed:
            consumer = await client.subscribe(topic, subscription=sub, sub_type=SubType.SHARED)
            tasks.append(asyncio.create_task(consume(consumer, stop, ack=reliable)))
        tasks.append(asyncio.create_task(produce(producer, rate, stop)))
    return tasks


async def produce(producer: Any, rate: float, stop: asyncio.Event) -> None:
    i = 0
    start = time.monotonic()
    while not stop.is_set():
        await producer.send_async(f"event-{i}".encode())
        i += 1
        ahead = start + i / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)


async def consume(consumer: Any, stop: asyncio.Event, *, ack: bool) -> None:
    while not stop.is_set():
        try:
            msgs = await consumer.receive_many(200, timeout_s=0.5)
        except TimeoutError:
            continue
        if ack:
            for msg in msgs:
                await consumer.ack(msg)


@contextlib.asynccontextmanager
async def browser_pages(base: str, paths: list[str]) -> AsyncIterator[list[Any]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1440, "height": 900}, device_scale_factor=1)
        pages = []
        for path in paths:
            page = await context.new_page()
            await page.goto(f"{base}/{path}")
            pages.append(page)
        try:
            yield pages
        finally:
            await browser.close()


async def main_async(args: argparse.Namespace) -> None:
    out: Path = args.out
    with tempfile.TemporaryDirectory(prefix="danube-shots-") as tmp:
        cluster = LocalCluster(
            brokers=3,
            leaders=1,
            load_managers=1,
            uploaders=True,
            planner="python",
            workdir=Path(tmp),
            extra_env=ENV,
            progress=say,
        )
        say("starting the cluster")
        cluster.start(timeout_s=120)
        stop = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []
        try:
            async with grpc.aio.insecure_channel(cluster.lookup.admin_addr) as channel:
                admin = Admin(channel)
                await admin.namespaces.CreateNamespace(apb.NamespaceRequest(name="analytics"), timeout=5)
                for topic, reliable, partitions, *_ in WORKLOAD:
                    await admin.topics.CreateTopic(
                        apb.CreateTopicRequest(
                            name=topic,
                            partitions=partitions,
                            dispatch_strategy="reliable" if reliable else "non_reliable",
                            retention_time_s=3600 if reliable else 0,
                        ),
                        timeout=10,
                    )
                client = DanubeClient(cluster.service_url)
                for topic, _, _, _, _, backlog in WORKLOAD:
                    for sub in backlog:  # subscribed once, then left alone: its backlog grows
                        await (
                            await client.subscribe(topic, subscription=sub, sub_type=SubType.SHARED)
                        ).close()
                tasks = await traffic(client, stop)
                say("traffic running; skewing the cluster onto broker 1")
                for topic in SKEWED:
                    await admin.move(topic, "1")
                await asyncio.sleep(25)  # load reports and history reflect the skew
                first = await admin.propose()
                say(f"plan {first} proposed; applying it")
                await admin.cluster.ApplyPlan(apb.ApplyPlanRequest(plan_id=first), timeout=5)

                async def settled() -> bool:
                    plans = await admin.cluster.ListPlans(apb.ListPlansRequest(limit=5), timeout=5)
                    return any(first in d.key and '"status": "done"' in d.json for d in plans.plans)

                await until(settled, f"plan {first} carried out", timeout_s=180)
                for topic in SKEWED[:2]:
                    await admin.move(topic, "2")
                await asyncio.sleep(20)
                second = await admin.propose()
                say(f"plan {second} proposed (left for the screenshot)")

                base = cluster.lookup.http_url
                say(f"console at {base}; warming the live plots for {args.warmup_s:.0f}s")
                async with browser_pages(
                    base, ["#/", "#/topic/default/payments", "#/planner", "#/topics"]
                ) as pages:
                    await asyncio.sleep(args.warmup_s)
                    planner = pages[2]
                    for summary in await planner.locator("details.plan summary .plan-id").all():
                        await summary.click()  # unfold each plan: its moves and their outcomes
                    for page, name in zip(pages, ["overview", "topic", "planner", "topics"], strict=True):
                        await page.evaluate("window.scrollTo(0, 0)")
                        path = out / f"console-{name}.png"
                        await page.screenshot(path=str(path), full_page=True)
                        say(f"wrote {path}")
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                await client.close()
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "img", help="directory for the PNGs (default docs/img)"
    )
    p.add_argument(
        "--warmup-s", type=float, default=90.0, help="seconds the pages poll before the screenshots"
    )
    args = p.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"console_screenshots: {CHROMIUM} is missing: apt-get install chromium", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
