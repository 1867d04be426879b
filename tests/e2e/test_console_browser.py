"""The web console in a real headless browser (Debian's Chromium, driven by Playwright) against a
real cluster: etcd, 2 brokers, a leader service, a load manager and the lookup as processes,
with topics and traffic.

The pages load and show what the admin API answers (brokers with their state and topic count,
the leaders and their terms, the topic list, a topic's owner, its backlog per subscription and
its offsets); actions work end to end behind their confirmation (a topic moved through the UI
is then owned by the chosen broker; a plan requested through the UI is pending for the
planner; a broker drained and activated again); and a lookup with TLS and auth (in this
process, on the same etcd) refuses the console without a token, shows a refused token's
PERMISSION_DENIED, and works with a token that may.

One cluster and one browser per test; the browser test skips (saying why) only where no
Chromium can be had: ./test.sh installs it (scripts/setup.sh with DANUBE_SETUP_BROWSER=1).
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc.aio
import pytest

from danube_common.config import EtcdConfig
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.security import issue_token
from danube_local.cluster import LocalCluster
from danube_local.secure import write_secure_files
from danube_lookup.app import running as lookup_running
from danube_lookup.config import LookupConfig
from danube_sdk import DanubeClient, DispatchStrategy, SubType
from tests.e2e.control_plane import ENV, start_flow, stop_flow
from tests.support import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]

#: The control-plane tests' settings but the broker's default registration TTL: these tests stop no
#: broker, and a 3 s TTL made both brokers give up their registration (and stop) when etcd's fsync
#: stalled for 3.4 s on a busy CI disk.
CLUSTER_ENV = {k: v for k, v in ENV.items() if k != "DANUBE_BROKER_REGISTRATION_TTL_S"}

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
BACKLOG = 25
ISSUER = "danube-console-test"


def browser_or_skip() -> None:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("the playwright package is missing: run ./test.sh (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists():
        found = shutil.which("chromium")
        pytest.skip(
            f"no Chromium at {CHROMIUM}{f' (one at {found})' if found else ''}: ./test.sh installs it "
            "(scripts/setup.sh with DANUBE_SETUP_BROWSER=1, apt-get install chromium)"
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    browser_or_skip()
    c = LocalCluster(
        brokers=2,
        leaders=1,
        load_managers=1,
        workdir=tmp_path_factory.mktemp("console"),
        extra_env=CLUSTER_ENV,
    )
    c.start(timeout_s=90)
    try:
        yield c
    finally:
        c.stop()


@contextlib.asynccontextmanager
async def browser(*, ignore_https_errors: bool = False) -> AsyncIterator[Any]:
    """A page of a fresh headless Chromium."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await chromium.new_context(
                viewport={"width": 1280, "height": 900}, ignore_https_errors=ignore_https_errors
            )
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page
            assert not errors, f"the app threw: {errors}"
        finally:
            await chromium.close()


class Admin:
    def __init__(self, channel: grpc.aio.Channel, token: str | None = None) -> None:
        self.md = (("authorization", f"Bearer {token}"),) if token else ()
        self.brokers = apb_grpc.BrokerAdminStub(channel)
        self.cluster = apb_grpc.ClusterAdminStub(channel)
        self.topics = apb_grpc.TopicAdminStub(channel)

    async def list_brokers(self) -> list[apb.BrokerInfo]:
        return list(
            (await self.brokers.ListBrokers(apb.ListBrokersRequest(), timeout=5, metadata=self.md)).brokers
        )

    async def describe(self, name: str) -> apb.TopicInfo:
        return await self.topics.DescribeTopic(
            apb.DescribeTopicRequest(name=name), timeout=5, metadata=self.md
        )

    async def stats(self, name: str) -> apb.TopicStats:
        return await self.topics.GetTopicStats(apb.TopicStatsRequest(name=name), timeout=5, metadata=self.md)


def shown(n: int) -> str:
    """A whole number as the console writes it."""
    return f"{n:,}"


async def broker_rows(page: Any) -> dict[str, dict[str, str]]:
    return dict(
        await page.eval_on_selector_all(
            "[data-test=brokers] tr[data-broker]",
            """rows => rows.map(r => [r.dataset.broker, Object.fromEntries(
                [...r.querySelectorAll('[data-field]')].map(td => [td.dataset.field, td.textContent.trim()]))])""",
        )
    )


async def text(page: Any, selector: str) -> str:
    loc = page.locator(selector)
    return (await loc.inner_text()).strip() if await loc.count() else ""


async def confirm(page: Any) -> None:
    dialog = page.locator("#confirm-dialog")
    await dialog.wait_for(state="visible", timeout=10_000)
    await dialog.locator("[data-test=confirm-ok]").click()
    await dialog.wait_for(state="hidden", timeout=10_000)


async def test_pages_show_the_admin_apis_numbers_and_actions_work(cluster: LocalCluster) -> None:
    async with (
        grpc.aio.insecure_channel(cluster.lookup.admin_addr) as channel,
        DanubeClient(cluster.service_url) as client,
    ):
        admin = Admin(channel)
        # A reliable topic whose subscription "held" has a backlog of BACKLOG messages, a topic to
        # move, and traffic on a third.
        held = "/default/console-held"
        await admin.topics.CreateTopic(
            apb.CreateTopicRequest(name=held, dispatch_strategy="reliable"), timeout=10
        )
        consumer = await client.subscribe(held, subscription="held", sub_type=SubType.EXCLUSIVE)
        await consumer.close()
        producer = await client.create_producer(held, dispatch_strategy=DispatchStrategy.RELIABLE)
        for i in range(BACKLOG):
            await producer.send(f"m{i}".encode())
        await producer.close()
        moving = "/default/console-move"
        await admin.topics.CreateTopic(apb.CreateTopicRequest(name=moving), timeout=10)
        await admin.topics.CreateTopic(
            apb.CreateTopicRequest(name="/default/console-parts", partitions=2), timeout=10
        )
        flow = await start_flow(client, "/default/console-live", reliable=False, rate_per_s=100)
        base = cluster.lookup.http_url
        try:
            async with browser() as page:
                # ---- overview: brokers (state, topics), leaders, topic count, a live plot
                await page.goto(f"{base}/#/")

                async def brokers_agree() -> bool:
                    api = {b.broker_id: (b.state, shown(b.topic_count)) for b in await admin.list_brokers()}
                    ui = {k: (v["state"], v["topic_count"]) for k, v in (await broker_rows(page)).items()}
                    return len(api) == 2 and ui == api

                await wait_until(brokers_agree, timeout_s=20, what="the overview's brokers = ListBrokers")
                assert await text(page, "[data-stat=brokers] [data-field=value]") == "2"
                leaders = (await admin.cluster.ListLeaders(apb.ListLeadersRequest(), timeout=5)).leaders
                lm = next(li for li in leaders if li.role == "load-manager")
                row = "[data-test=leaders] tr[data-role=load-manager]"
                assert await text(page, f"{row} [data-field=candidate_id]") == lm.candidate_id
                assert await text(page, f"{row} [data-field=term]") == shown(lm.term)
                listed = (await admin.topics.ListTopics(apb.ListTopicsRequest(), timeout=5)).topics
                assert await text(page, "[data-stat=topics] [data-field=value]") == shown(len(listed))
                # The live plot draws the cluster's rate once the brokers report the traffic.
                await wait_until(
                    lambda: page.locator("[data-test=chart] path.line").count(),
                    timeout_s=20,
                    what="the throughput plot",
                )
                await wait_until(
                    lambda: text(page, "[data-stat=msg_rate_in] [data-field=value]"),
                    timeout_s=20,
                    what="a message rate",
                )

                # ---- topics list: every topic and partition the admin API lists
                await page.click("[data-nav=topics]")
                want = {t.name for t in listed} | {p.name for t in listed for p in t.partition_topics}

                async def topics_agree() -> bool:
                    names = await page.eval_on_selector_all(
                        "[data-test=topics] tr[data-topic]", "rows => rows.map(r => r.dataset.topic)"
                    )
                    return set(names) == want

                await wait_until(
                    topics_agree, timeout_s=15, what=f"the topics list = ListTopics {sorted(want)}"
                )

                # ---- a topic page: owner, backlog per subscription, offsets
                await page.click(f"[data-topic-link='{held}']")
                info, stats = await admin.describe(held), await admin.stats(held)
                sub = next(s for s in stats.subscriptions if s.name == "held")
                assert sub.backlog == BACKLOG and stats.next_offset == BACKLOG
                await wait_until(
                    lambda: text(
                        page, "[data-test=subscriptions] tr[data-subscription=held] [data-field=backlog]"
                    ),
                    timeout_s=15,
                    what="the topic page's subscriptions",
                )
                assert await text(page, "[data-stat=owner] [data-field=value]") == info.broker_id
                held_row = "[data-test=subscriptions] tr[data-subscription=held]"
                assert await text(page, f"{held_row} [data-field=backlog]") == shown(sub.backlog)
                assert await text(page, "[data-stat=backlog] [data-field=value]") == shown(BACKLOG)
                assert await text(page, "[data-test=log] [data-field=next_offset]") == shown(
                    stats.next_offset
                )
                here = await text(page, "[data-test=log] [data-field=object_storage]")
                if stats.has_uploaded:  # reads back and retention deletions (GetTopicStats' own)
                    assert here.startswith(f"{shown(stats.remote_entries)} message(s) read back"), here
                    assert f"retention deleted {shown(stats.retention_deleted_segments)} segment(s)" in here
                else:
                    assert here == "\u2013", here
                compacted = await text(page, "[data-test=log] [data-field=compaction]")
                if stats.has_compaction:  # the compacted view (GetTopicStats' own)
                    want_view = f"below offset {shown(stats.compaction.horizon)}: {shown(stats.compaction.keys)} key(s)"
                    assert compacted.startswith(want_view), compacted
                else:
                    assert compacted == "never compacted", compacted

                # ---- move a topic through the UI, behind its confirmation
                origin = (await admin.describe(moving)).broker_id
                target = next(b.broker_id for b in await admin.list_brokers() if b.broker_id != origin)
                await page.goto(f"{base}/#/topic{moving}")
                await page.locator("[data-stat=owner] [data-field=value]").filter(has_text=origin).wait_for()
                await page.click("[data-action=move]")
                await page.select_option("[data-test=move-target]", target)
                await confirm(page)
                notice = page.locator("[data-test=notice-ok]").filter(has_text=f"Move of {moving} requested")
                await notice.wait_for(timeout=10_000)

                async def moved() -> bool:
                    return (await admin.describe(moving)).broker_id == target

                await wait_until(moved, timeout_s=30, what=f"{moving} owned by broker {target}")
                await (
                    page.locator("[data-stat=owner] [data-field=value]")
                    .filter(has_text=target)
                    .wait_for(timeout=10_000)
                )

                # ---- the planner page: no planner runs, so the admin API's NOT_FOUND is shown;
                # a plan requested through the UI waits for the planner.
                await page.click("[data-nav=planner]")
                with pytest.raises(grpc.aio.AioRpcError) as missing:
                    await admin.cluster.GetLoadReport(apb.GetLoadReportRequest(), timeout=5)
                panel = page.locator("[data-test=error-panel]").first
                await panel.wait_for(timeout=10_000)
                assert (await panel.locator("[data-field=error-message]").inner_text()).strip() == (
                    (missing.value.details() or "").removesuffix(" [NOT_FOUND]")
                )
                await page.click("[data-action=request-plan]")
                await confirm(page)
                await page.locator("[data-test=pending-requests]").wait_for(timeout=10_000)
                pending = (await admin.cluster.ListPlans(apb.ListPlansRequest(), timeout=5)).pending_requests
                assert len(pending) == 1 and pending[0] in await text(page, "[data-test=pending-requests]")

                # ---- drain a broker and activate it again
                await page.click("[data-nav=overview]")
                drained = origin
                await page.click(f"[data-test=brokers] tr[data-broker='{drained}'] [data-action=drain]")
                await confirm(page)

                async def admin_state_in(*states: str) -> bool:
                    brokers = {b.broker_id: b.admin_state for b in await admin.list_brokers()}
                    return brokers[drained] in states

                # The load manager marks it drained once its topics are gone.
                await wait_until(lambda: admin_state_in("draining", "drained"), timeout_s=10, what="draining")
                activate = f"[data-test=brokers] tr[data-broker='{drained}'] [data-action=activate]"
                await page.locator(activate).wait_for(timeout=10_000)
                await page.click(activate)
                await confirm(page)
                await wait_until(lambda: admin_state_in("active"), timeout_s=10, what="active again")
        finally:
            await stop_flow(flow, drain_s=5)


async def test_with_auth_the_console_needs_a_token_that_may(cluster: LocalCluster, tmp_path: Path) -> None:
    """A lookup with TLS and auth on the cluster's etcd: no token, a token without rights, and
    a super admin's token."""
    files = write_secure_files(tmp_path / "secure", ["lookup"])
    assert files.jwt_secret is not None
    secret = files.jwt_secret.read_text().strip()
    cert, key = files.certs["lookup"]
    cfg = LookupConfig.model_validate(
        {
            "listen_addr": "127.0.0.1:0",
            "admin_listen_addr": "127.0.0.1:0",
            "http_listen_addr": "127.0.0.1:0",
            "etcd": EtcdConfig(endpoints=[cluster.etcd_endpoint], cluster=cluster.cluster),
            "tls": {"cert_file": str(cert), "key_file": str(key), "ca_file": str(files.ca_cert)},
            "auth": {
                "enabled": True,
                "jwt": {"issuer": ISSUER, "secret_file": str(files.jwt_secret)},
                "super_admins": ["root"],
                "internal_identities": ["lookup"],
            },
            "bootstrap_namespaces": [],
        }
    )
    root = issue_token("root", "user", "root", 300, secret, ISSUER)
    nobody = issue_token("nobody", "user", "nobody", 300, secret, ISSUER)
    async with lookup_running(cfg) as info, browser(ignore_https_errors=True) as page:
        creds = grpc.ssl_channel_credentials(root_certificates=files.ca_cert.read_bytes())
        async with grpc.aio.secure_channel(info.admin_addr, creds) as channel:
            expected = {b.broker_id: b.state for b in await Admin(channel, root).list_brokers()}
        assert len(expected) == 2

        await page.goto(f"{info.http_url}/#/")
        signin = page.locator("#signin-dialog")
        await signin.wait_for(state="visible", timeout=15_000)
        assert "UNAUTHENTICATED" in await signin.locator("[data-slot=reason]").inner_text()
        assert not await broker_rows(page)

        await page.fill("#token-input", nobody)
        await signin.locator("[data-test=signin-ok]").click()
        refused = page.locator("[data-test=error-panel]").filter(has_text="PERMISSION_DENIED").first
        await refused.wait_for(timeout=15_000)
        assert "nobody" in await refused.inner_text()
        assert not await broker_rows(page)

        await page.click("#signout-button")
        await signin.wait_for(state="visible", timeout=15_000)
        await page.fill("#token-input", f"Bearer {root}")
        await signin.locator("[data-test=signin-ok]").click()

        async def brokers_shown() -> bool:
            return {k: v["state"] for k, v in (await broker_rows(page)).items()} == expected

        await wait_until(brokers_shown, timeout_s=15, what="the brokers, once signed in")
