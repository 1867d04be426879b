"""TLS from the services to etcd and to S3, against real servers.

etcd 3.4 (Debian's etcd-server) serves its client port with a certificate of a throwaway CA
made by ``danube_local.secure`` and ``--client-cert-auth``: the store works with that CA and a
client certificate (reads, writes, a transaction, a lease, a watch), and a missing client
certificate, an untrusted CA, a certificate the server does not trust, a wrong name and a
plaintext client each fail quickly with a message that says what to check. A service runs on
it in-process; a config naming a missing file refuses to start (exit 2).

moto_server serves S3 over https with a certificate of the same CA (``moto_server -c/-k``):
``s3.ca_file`` verifies it; without it (the default CA bundle) or with another CA the store
refuses with a message naming s3.ca_file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from danube_common.config import EtcdConfig
from danube_common.errors import MetadataUnavailable
from danube_common.etcd_server import EtcdProcess, EtcdServerTls
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdKeepalive, EtcdStore
from danube_common.metadata.store import Compare, Op, WatchEvent
from danube_common.objstore import ObjectStoreUnavailable, S3Config
from danube_common.objstore.s3 import S3ObjectStore
from danube_common.service import service_main
from danube_local.secure import SecureFiles, write_secure_files
from danube_lookup.app import run as lookup_run
from danube_lookup.app import running as lookup_running
from danube_lookup.config import LookupConfig
from danube_planner.__main__ import main as planner_main
from tests.support import unique
from tests.support.moto import MOTO_ACCESS_KEY_ID, MOTO_REGION, MOTO_SECRET_ACCESS_KEY, MotoServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

#: A refused connection must be reported within this long (not hang until a distant deadline).
REFUSAL_BOUND_S = 3.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> SecureFiles:
    """The cluster's CA, etcd's and moto's server certificates, a service's client certificate."""
    return write_secure_files(tmp_path_factory.mktemp("pki"), ["etcd", "moto", "lookup"])


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> SecureFiles:
    """Another CA, and a certificate it signed (same name as ours: only the CA differs)."""
    return write_secure_files(tmp_path_factory.mktemp("stranger"), ["lookup"])


@pytest.fixture(scope="module")
def tls_etcd(pki: SecureFiles) -> Iterator[EtcdProcess]:
    cert, key = pki.certs["etcd"]
    server = EtcdProcess(tls=EtcdServerTls(cert, key, pki.ca_cert, client_cert_auth=True))
    with server:
        yield server


@pytest.fixture(scope="module")
def tls_moto(pki: SecureFiles) -> Iterator[MotoServer]:
    cert, key = pki.certs["moto"]
    with MotoServer(tls=(cert, key, pki.ca_cert), backend="local") as server:
        yield server


def etcd_cfg(server: EtcdProcess, files: SecureFiles | None, **over: Any) -> EtcdConfig:
    """An ``etcd:`` section for ``server`` with the CA and the lookup's client certificate of
    ``files`` (None: plaintext); ``over`` replaces fields."""
    fields: dict[str, Any] = {
        "endpoints": [server.endpoint],
        "cluster": unique("tls"),
        "request_timeout_s": 2.0,
    }
    if files is not None:
        cert, key = files.certs["lookup"]
        fields |= {"ca_file": str(files.ca_cert), "cert_file": str(cert), "key_file": str(key)}
    return EtcdConfig.model_validate(fields | over)


@pytest.fixture
async def store(tls_etcd: EtcdProcess, pki: SecureFiles) -> AsyncIterator[EtcdStore]:
    s = EtcdStore.from_config(etcd_cfg(tls_etcd, pki))
    await s.wait_ready(5.0)
    yield s
    await s.aclose()


async def test_etcd_with_the_ca_and_a_client_certificate(store: EtcdStore) -> None:
    assert store.tls
    prefix = f"/{unique('p')}/"
    events: list[WatchEvent] = []

    async def watch(from_rev: int) -> None:
        async for ev in store.watch_prefix(prefix, start_revision=from_rev):
            events.append(ev)
            if len(events) == 2:
                return

    async with asyncio.timeout(5):
        _, now = await store.get_prefix(prefix)
        watcher = asyncio.create_task(watch(now + 1))
        rev = await store.put(prefix + "a", b"1")
        got = await store.get(prefix + "a")
        assert got is not None and got.value == b"1" and got.mod_revision == rev
        done = await store.txn([Compare.mod_revision_is(prefix + "a", rev)], [Op.get(prefix + "a")])
        assert done.succeeded and done.gets[0] is not None and done.gets[0].value == b"1"
        lease = await store.grant_lease(10)
        assert await store.keepalive(lease) > 0
        await store.put(prefix + "leased", b"x", lease=lease)
        await watcher
        await store.revoke_lease(lease)
        assert await store.get(prefix + "leased") is None
    assert [(e.kind, e.key) for e in events] == [("put", prefix + "a"), ("put", prefix + "leased")]


async def test_https_endpoints_and_several_members_with_a_server_name(
    tls_etcd: EtcdProcess, pki: SecureFiles
) -> None:
    # An https:// endpoint is the same TLS; two endpoints (the one member, twice) need the one
    # name every certificate carries, because gRPC checks one name for all of them.
    for cfg in (
        etcd_cfg(tls_etcd, pki, endpoints=[f"https://{tls_etcd.endpoint}"]),
        etcd_cfg(tls_etcd, pki, endpoints=[tls_etcd.endpoint] * 2, server_name="localhost"),
    ):
        s = EtcdStore.from_config(cfg)
        try:
            async with asyncio.timeout(5):
                await s.wait_ready(3.0)
                await s.put(f"/{cfg.cluster}/k", b"v")
        finally:
            await s.aclose()


@pytest.mark.parametrize(
    ("case", "hint"),
    [
        ("no-client-cert", "requires a client certificate"),
        ("client-cert-of-another-ca", "requires a client certificate"),
        ("untrusted-ca", "not signed by a CA in etcd.ca_file"),
        ("wrong-name", "set etcd.server_name"),
        ("plaintext", "set etcd.ca_file"),
    ],
)
async def test_etcd_refusals_are_quick_and_say_what_to_check(
    tls_etcd: EtcdProcess, pki: SecureFiles, stranger: SecureFiles, case: str, hint: str
) -> None:
    their_cert, their_key = stranger.certs["lookup"]
    cfg = {
        "no-client-cert": lambda: etcd_cfg(tls_etcd, None, ca_file=str(pki.ca_cert)),
        "client-cert-of-another-ca": lambda: etcd_cfg(
            tls_etcd, pki, cert_file=str(their_cert), key_file=str(their_key)
        ),
        "untrusted-ca": lambda: etcd_cfg(tls_etcd, pki, ca_file=str(stranger.ca_cert)),
        "wrong-name": lambda: etcd_cfg(tls_etcd, pki, server_name="etcd.example.org"),
        "plaintext": lambda: etcd_cfg(tls_etcd, None),
    }[case]()
    s = EtcdStore.from_config(cfg)
    started = time.monotonic()
    try:
        async with asyncio.timeout(REFUSAL_BOUND_S + 2):
            with pytest.raises(MetadataUnavailable) as err:
                await s.get("/k")
            with pytest.raises(MetadataUnavailable, match=r"not reachable after 0\.3s") as waited:
                await s.wait_ready(0.3)
    finally:
        await s.aclose()
    assert time.monotonic() - started < REFUSAL_BOUND_S
    assert hint in err.value.message, err.value.message
    assert hint in waited.value.message


async def test_the_renewal_threads_blocking_client_over_tls(
    tls_etcd: EtcdProcess, pki: SecureFiles, store: EtcdStore
) -> None:
    """``EtcdKeepalive`` (the broker's registration renewals) uses the same TLS: it renews a lease,
    reads a revoked one as gone, and without the client certificate it is refused with the hint."""
    lease = await store.grant_lease(10)
    ka = EtcdKeepalive.from_config(etcd_cfg(tls_etcd, pki))
    try:
        assert 0 < await ka.keepalive(lease) <= 10
        await store.revoke_lease(lease)
        assert await ka.keepalive(lease) == 0
    finally:
        await ka.aclose()
    bare = EtcdKeepalive.from_config(etcd_cfg(tls_etcd, None, ca_file=str(pki.ca_cert)))
    try:
        with pytest.raises(MetadataUnavailable) as err:
            await bare.keepalive(lease)
    finally:
        await bare.aclose()
    assert "client certificate" in err.value.message, err.value.message


async def test_a_service_runs_on_tls_etcd(tls_etcd: EtcdProcess, pki: SecureFiles, store: EtcdStore) -> None:
    etcd = etcd_cfg(tls_etcd, pki)
    cfg = LookupConfig(listen_addr="127.0.0.1:0", admin_listen_addr="127.0.0.1:0", etcd=etcd)
    async with asyncio.timeout(10), lookup_running(cfg) as info:
        assert info.addr
        # It bootstrapped the default namespace through its TLS connection.
        assert await store.get(Keys(etcd.cluster).namespace("default")) is not None


async def test_missing_etcd_files_refuse_to_start(
    tls_etcd: EtcdProcess, pki: SecureFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    etcd = etcd_cfg(tls_etcd, pki, ca_file=str(missing))
    cfg = LookupConfig(listen_addr="127.0.0.1:0", admin_listen_addr="127.0.0.1:0", etcd=etcd)
    code = await asyncio.to_thread(
        service_main, lambda: cfg, lookup_run, name=lambda c: "lookup", service="danube-lookup"
    )
    assert code == 2
    assert f"etcd.ca_file {str(missing)!r} does not exist" in capsys.readouterr().err

    # The planner (its own main, not service_main): an unreadable S3 CA, exit 2 before anything runs.
    config = tmp_path / "planner.yaml"
    store = {
        "backend": "s3",
        "s3": {"bucket": "history", "endpoint_url": "https://s3.example", "ca_file": str(missing)},
    }
    config.write_text(yaml.safe_dump({"object_store": store}))
    assert (
        planner_main(["--config", str(config), "--once", "--engine", "python", "--leader-endpoints", ""]) == 2
    )
    assert f"object_store.s3.ca_file {str(missing)!r} does not exist" in capsys.readouterr().err


def s3_cfg(moto: MotoServer, **over: Any) -> S3Config:
    return S3Config.model_validate(
        {
            "endpoint_url": moto.endpoint_url,
            "bucket": unique("tls").lower(),
            "region": MOTO_REGION,
            "access_key_id": MOTO_ACCESS_KEY_ID,
            "secret_access_key": MOTO_SECRET_ACCESS_KEY,
            "path_style": True,
            "create_bucket": True,
            "connect_timeout_s": 2.0,
            "request_timeout_s": 5.0,
            "max_attempts": 1,
        }
        | over
    )


async def test_s3_over_https_verified_with_the_private_ca(tls_moto: MotoServer, pki: SecureFiles) -> None:
    assert tls_moto.endpoint_url.startswith("https://")
    async with asyncio.timeout(10):
        objects = await S3ObjectStore.open(s3_cfg(tls_moto, ca_file=str(pki.ca_cert)))
        try:
            await objects.put("a/b", b"payload")
            assert await objects.get("a/b") == b"payload"
        finally:
            await objects.aclose()


@pytest.mark.parametrize("trust", ["default-bundle", "another-ca"])
async def test_s3_refuses_a_certificate_it_cannot_verify(
    tls_moto: MotoServer, stranger: SecureFiles, trust: str
) -> None:
    ca_file = None if trust == "default-bundle" else str(stranger.ca_cert)
    started = time.monotonic()
    async with asyncio.timeout(REFUSAL_BOUND_S + 2):
        with pytest.raises(ObjectStoreUnavailable) as err:
            await S3ObjectStore.open(s3_cfg(tls_moto, ca_file=ca_file))
    assert time.monotonic() - started < REFUSAL_BOUND_S
    assert "TLS with" in err.value.message and "s3.ca_file" in err.value.message, err.value.message
    assert ("default CA bundle" in err.value.message) == (ca_file is None)
    assert "CERTIFICATE_VERIFY_FAILED" in err.value.message
