"""The web console over real HTTP against a lookup in this event loop (real etcd): the app's
files, the JSON API answering what the admin API answers, errors as HTTP statuses with JSON,
actions only as JSON POSTs; and a lookup with TLS and auth, where the console forwards the
browser's token over TLS (trusting the CA, no client certificate) and the admin API decides.

The browser test (tests/e2e/test_console_browser.py) drives the app itself."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc.aio
import pytest

from danube_common.config import EtcdConfig
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.security import issue_token
from danube_common.service import ServiceReady
from danube_local.secure import SecureFiles, write_secure_files
from danube_lookup.app import running
from danube_lookup.config import LookupConfig
from tests.unit.lookup.fake_stats import register as register_stats
from tests.unit.lookup.fake_stats import stats_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ISSUER = "danube-test"


def config(etcd: EtcdProcess, cluster: str, **fields: Any) -> LookupConfig:
    return LookupConfig.model_validate(
        {
            "listen_addr": "127.0.0.1:0",
            "admin_listen_addr": "127.0.0.1:0",
            "http_listen_addr": "127.0.0.1:0",
            "etcd": EtcdConfig(endpoints=[etcd.endpoint], cluster=cluster),
            **fields,
        }
    )


@pytest.fixture
async def console(etcd_server: EtcdProcess, cluster_name: str) -> AsyncIterator[ServiceReady]:
    async with running(config(etcd_server, cluster_name)) as info:
        yield info


async def fetch(session: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, Any, Any]:
    async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=10), **kw) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.read()
        return resp.status, body, resp.headers


async def test_the_app_is_served_with_a_strict_policy(console: ServiceReady) -> None:
    async with aiohttp.ClientSession() as s:
        status, body, headers = await fetch(s, "GET", f"{console.http_url}/")
        assert status == 200 and b'src="/assets/app.js"' in body
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert headers["X-Frame-Options"] == "DENY"
        status, body, headers = await fetch(s, "GET", f"{console.http_url}/assets/js/chart.js")
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")
        status, _, _ = await fetch(
            s, "GET", f"{console.http_url}/assets/js/chart.js", headers={"If-None-Match": headers["ETag"]}
        )
        assert status == 304
        status, _, _ = await fetch(s, "GET", f"{console.http_url}/assets/../config.py")
        assert status == 404
        # /metrics and /healthz are still the endpoint's own.
        status, _, _ = await fetch(s, "GET", f"{console.http_url}/healthz")
        assert status == 200


async def test_the_api_answers_what_the_admin_api_answers(
    console: ServiceReady, etcd_store: EtcdStore, keys: Keys
) -> None:
    url = console.http_url
    async with (
        stats_broker("b1") as b1,
        aiohttp.ClientSession() as s,
        grpc.aio.insecure_channel(console.admin_addr) as channel,
    ):
        await register_stats(etcd_store, keys, "b1", b1.addr)
        topics = apb_grpc.TopicAdminStub(channel)
        await topics.CreateTopic(
            apb.CreateTopicRequest(name="/default/metered", dispatch_strategy="reliable"), timeout=5
        )
        expected = b1.sample("/default/metered")

        status, body, _ = await fetch(s, "GET", f"{url}/api/info")
        assert (status, body) == (200, {"auth": False})
        brokers = await apb_grpc.BrokerAdminStub(channel).ListBrokers(apb.ListBrokersRequest(), timeout=5)
        status, body, headers = await fetch(s, "GET", f"{url}/api/brokers")
        assert status == 200 and headers["Cache-Control"] == "no-store"
        assert (
            [(b["broker_id"], b["state"], b["topic_count"]) for b in body["brokers"]]
            == [(b.broker_id, b.state, b.topic_count) for b in brokers.brokers]
            == [("b1", "active", 1)]
        )
        status, body, _ = await fetch(s, "GET", f"{url}/api/topics?namespace=default")
        assert [t["name"] for t in body["topics"]] == ["/default/metered"]
        status, body, _ = await fetch(s, "GET", f"{url}/api/topics/default/metered")
        assert (status, body["broker_id"], body["dispatch_strategy"]) == (200, "b1", "reliable")
        status, body, _ = await fetch(s, "GET", f"{url}/api/topics/default/metered/stats")
        assert status == 200
        assert [(x["name"], x["backlog"]) for x in body["subscriptions"]] == [
            (x.name, x.backlog) for x in expected.subscriptions
        ]
        assert (body["first_offset"], body["next_offset"]) == (expected.first_offset, expected.next_offset)

        # Errors: the admin API's code and message, with the matching HTTP status.
        status, body, _ = await fetch(s, "GET", f"{url}/api/topics/default/nope")
        assert status == 404 and body["error"]["code"] == "TOPIC_NOT_FOUND", body
        status, body, _ = await fetch(s, "GET", f"{url}/api/load-report")
        assert status == 404 and "danube-planner" in body["error"]["message"]
        status, body, _ = await fetch(s, "POST", f"{url}/api/plans/nope/apply", json={})
        assert status == 404 and body["error"]["code"] == "NOT_FOUND"
        status, body, _ = await fetch(s, "GET", f"{url}/api/plans?limit=0")
        assert status == 400 and "limit must be" in body["error"]["message"]
        status, body, _ = await fetch(s, "GET", f"{url}/api/nothing/here")
        assert status == 404 and body["error"]["message"] == "no console API route GET /api/nothing/here"

        # Actions: JSON bodies only (a cross-site form cannot send one), checked before calling.
        state_url = f"{url}/api/brokers/b1/state"
        status, body, _ = await fetch(s, "POST", state_url, data={"state": "draining"})
        assert status == 400 and "Content-Type: application/json" in body["error"]["message"]
        status, body, _ = await fetch(s, "POST", state_url, json={"state": "gone"})
        assert status == 400 and "state must be one of draining, active" in body["error"]["message"]
        status, body, _ = await fetch(s, "POST", f"{url}/api/plans/nope/apply", data="x")
        assert status == 400
        status, body, _ = await fetch(s, "POST", state_url, json={"state": "draining"})
        assert (status, body["broker_id"], body["admin_state"]) == (200, "b1", "draining")
        status, body, _ = await fetch(s, "POST", f"{url}/api/rebalance", json={"dry_run": True})
        assert status == 200 and body["request_id"]
        plans = await apb_grpc.ClusterAdminStub(channel).ListPlans(apb.ListPlansRequest(), timeout=5)
        assert body["request_id"] in plans.pending_requests


async def test_the_console_can_be_turned_off(etcd_server: EtcdProcess, cluster_name: str) -> None:
    async with (
        running(config(etcd_server, cluster_name, console={"enabled": False})) as info,
        aiohttp.ClientSession() as s,
    ):
        assert (await fetch(s, "GET", f"{info.http_url}/"))[0] == 404
        assert (await fetch(s, "GET", f"{info.http_url}/api/brokers"))[0] == 404
        assert (await fetch(s, "GET", f"{info.http_url}/metrics"))[0] == 200


# ---------------------------------------------------------------- TLS and auth
@pytest.fixture(scope="module")
def secure_files(tmp_path_factory: pytest.TempPathFactory) -> SecureFiles:
    # The certificate names only "localhost": the console dials 127.0.0.1 and must check the
    # name clients use (advertised_host).
    return write_secure_files(tmp_path_factory.mktemp("secure"), ["lookup"], hosts=("localhost",))


def secured(files: SecureFiles) -> dict[str, Any]:
    cert, key = files.certs["lookup"]
    return {
        "tls": {"cert_file": str(cert), "key_file": str(key), "ca_file": str(files.ca_cert)},
        "auth": {
            "enabled": True,
            "jwt": {"issuer": ISSUER, "secret_file": str(files.jwt_secret)},
            "super_admins": ["root"],
            "internal_identities": ["lookup"],
        },
    }


def token(files: SecureFiles, subject: str) -> str:
    assert files.jwt_secret is not None
    return issue_token(subject, "user", subject, 300, files.jwt_secret.read_text().strip(), ISSUER)


async def test_with_auth_the_admin_api_decides_on_the_browsers_token(
    etcd_server: EtcdProcess, cluster_name: str, secure_files: SecureFiles
) -> None:
    cfg = config(etcd_server, cluster_name, advertised_host="localhost", **secured(secure_files))
    ctx = ssl.create_default_context(cafile=str(secure_files.ca_cert))
    async with running(cfg) as info, aiohttp.ClientSession() as s:
        url = info.http_url
        assert url.startswith("https://localhost:")
        status, body, _ = await fetch(s, "GET", f"{url}/api/info", ssl=ctx)
        assert body == {"auth": True}
        status, body, headers = await fetch(s, "GET", f"{url}/api/brokers", ssl=ctx)
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        assert body["error"]["code"] == "UNAUTHENTICATED", body
        bob = {"Authorization": f"Bearer {token(secure_files, 'bob')}"}
        status, body, _ = await fetch(s, "GET", f"{url}/api/brokers", ssl=ctx, headers=bob)
        assert (
            status == 403
            and body["error"]["code"] == "PERMISSION_DENIED"
            and "bob" in body["error"]["message"]
        )
        status, body, _ = await fetch(s, "POST", f"{url}/api/rebalance", ssl=ctx, headers=bob, json={})
        assert status == 403
        root = {"Authorization": f"Bearer {token(secure_files, 'root')}"}
        status, body, _ = await fetch(s, "GET", f"{url}/api/brokers", ssl=ctx, headers=root)
        assert (status, body) == (200, {"brokers": []})
        # The app itself needs no token (it asks for one).
        status, _, _ = await fetch(s, "GET", f"{url}/", ssl=ctx)
        assert status == 200
