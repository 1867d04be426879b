"""The SDK's security options: a bearer token on every RPC kind, the token supplier, TLS
options, and how refused calls surface (against the fake cluster, served over TLS)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from danube_common.errors import ConfigError, error_from_status
from danube_sdk import DanubeClient, PermissionDenied, TlsOptions, Unauthenticated
from danube_sdk.auth import ChannelSecurity
from danube_sdk.errors import PERMISSION_DENIED_HINT, UNAUTHENTICATED_HINT, with_auth_hint
from danube_sdk.schema_registry import SchemaRegistryClient
from tests.support import wait_until
from tests.unit.sdk.fake_broker import FakeCluster
from tests.unit.sdk.tls_support import Recorder, make_certs, server_creds

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TOKEN = "header.payload.signature"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def tls_cluster(certs: Path, recorder: Recorder) -> AsyncIterator[FakeCluster]:
    fake = await FakeCluster(
        brokers=2, server_credentials=server_creds(certs), interceptors=[recorder]
    ).start()
    try:
        yield fake
    finally:
        await fake.stop()


def tls(certs: Path) -> TlsOptions:
    return TlsOptions(ca_file=certs / "ca.pem")


@contextlib.asynccontextmanager
async def secured_client(cluster: FakeCluster, certs: Path, **kw: object) -> AsyncIterator[DanubeClient]:
    client = DanubeClient(
        cluster.service_url,
        rpc_timeout_s=5.0,
        operation_timeout_s=5.0,
        tls=tls(certs),
        **kw,  # type: ignore[arg-type]
    )
    try:
        yield client
    finally:
        await client.close()


async def exercise(client: DanubeClient, cluster: FakeCluster, recorder: Recorder) -> None:
    """Every kind of RPC the SDK makes: discovery, producer (unary + bidi stream), consumer
    (unary + server stream), health check, schema registry, close."""
    cluster.create_topic("/default/t", owner=1)  # on the second broker: a redirect
    consumer = await client.subscribe("/default/t", subscription="s")
    producer = await client.create_producer("/default/t")
    await producer.send(b"hello")
    msg = await consumer.receive(timeout_s=5)
    await consumer.ack(msg)
    await client.schemas().register("orders", "json_schema", '{"type": "object"}')
    await wait_until(lambda: "HealthCheck" in recorder.methods(), timeout_s=5, what="a health check")
    await producer.close()
    await consumer.close()


async def test_token_is_sent_on_every_rpc_kind(
    tls_cluster: FakeCluster, certs: Path, recorder: Recorder
) -> None:
    async with secured_client(tls_cluster, certs, token=TOKEN, health_check_interval_s=0.05) as client:
        await exercise(client, tls_cluster, recorder)
    kinds = {
        "TopicPartitions",
        "TopicLookup",
        "CreateProducer",
        "PublishBatches",
        "Subscribe",
        "ReceiveBatches",
        "AckBatch",
        "HealthCheck",
        "RegisterSchema",
        "CloseProducer",
        "CloseConsumer",
    }
    assert kinds <= recorder.methods()
    assert set(recorder.headers()) == {f"Bearer {TOKEN}"}
    assert tls_cluster.urls[1].startswith("https://")  # the redirect target was reached over TLS too


async def test_no_token_sends_no_authorization(
    tls_cluster: FakeCluster, certs: Path, recorder: Recorder
) -> None:
    async with secured_client(tls_cluster, certs) as client:
        assert await client.topic_partitions("/default/none") == []
    assert recorder.calls and set(recorder.headers()) == {None}


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_token_supplier_is_called_per_rpc(
    tls_cluster: FakeCluster, certs: Path, recorder: Recorder, kind: str
) -> None:
    counter = itertools.count(1)

    def sync_supplier() -> str:
        return f"tok-{next(counter)}"

    async def async_supplier() -> str:
        return f"tok-{next(counter)}"

    supplier = sync_supplier if kind == "sync" else async_supplier
    async with secured_client(
        tls_cluster, certs, token_supplier=supplier, health_check_interval_s=0.05
    ) as client:
        await exercise(client, tls_cluster, recorder)
    headers = recorder.headers()
    assert len(headers) == len(set(headers)) == next(counter) - 1  # one fresh token per RPC
    assert all(h is not None and h.startswith("Bearer tok-") for h in headers)


async def test_failing_supplier_is_unauthenticated(tls_cluster: FakeCluster, certs: Path) -> None:
    def broken() -> str:
        raise RuntimeError("token service down")

    async with secured_client(tls_cluster, certs, token_supplier=broken) as client:
        with pytest.raises(Unauthenticated, match=r"token supplier failed.*token service down"):
            await client.topic_partitions("/default/t")


@pytest.mark.parametrize(
    ("status", "cls", "hint"),
    [
        (grpc.StatusCode.UNAUTHENTICATED, Unauthenticated, UNAUTHENTICATED_HINT),
        (grpc.StatusCode.PERMISSION_DENIED, PermissionDenied, PERMISSION_DENIED_HINT),
    ],
)
async def test_refused_calls_raise_sdk_errors_with_what_to_do(
    tls_cluster: FakeCluster,
    certs: Path,
    recorder: Recorder,
    status: grpc.StatusCode,
    cls: type[Exception],
    hint: str,
) -> None:
    recorder.deny["/TopicPartitions"] = (status, "Invalid token")
    recorder.deny["/GetLatestSchema"] = (status, "no")
    async with secured_client(tls_cluster, certs, token=TOKEN) as client:
        with pytest.raises(cls) as info:
            await client.create_producer("/default/t")
        assert "Invalid token" in str(info.value) and hint in str(info.value)
        with pytest.raises(cls):  # the schema registry maps the same way
            await client.schemas().latest("orders")
    assert len([m for m, _ in recorder.calls if m.endswith("/TopicPartitions")]) == 1  # not retried


async def test_registry_connect_carries_the_token(
    tls_cluster: FakeCluster, certs: Path, recorder: Recorder
) -> None:
    async with SchemaRegistryClient.connect(tls_cluster.service_url, tls=tls(certs), token=TOKEN) as registry:
        await registry.register("orders", "json_schema", '{"type": "object"}')
    assert recorder.headers() == [f"Bearer {TOKEN}"]


async def test_mtls_client_certificate_is_presented(certs: Path, recorder: Recorder) -> None:
    creds = grpc.ssl_server_credentials(
        [((certs / "broker-1.key").read_bytes(), (certs / "broker-1.pem").read_bytes())],
        root_certificates=(certs / "ca.pem").read_bytes(),
        require_client_auth=True,
    )
    cluster = await FakeCluster(server_credentials=creds, interceptors=[recorder]).start()
    try:
        mtls = TlsOptions(
            ca_file=certs / "ca.pem", cert_file=certs / "admin.pem", key_file=certs / "admin.key"
        )
        async with DanubeClient(cluster.service_url, tls=mtls, operation_timeout_s=5) as client:
            assert await client.topic_partitions("/default/x") == []
    finally:
        await cluster.stop()


# ---------------------------------------------------------------------------- options, no network


def test_token_needs_tls() -> None:
    with pytest.raises(ConfigError, match=r"only sent over TLS.*http://127\.0\.0\.1:6650.*--tls-ca"):
        DanubeClient("http://127.0.0.1:6650", token=TOKEN)
    with pytest.raises(ConfigError, match="only sent over TLS"):
        DanubeClient("127.0.0.1:6650", token_supplier=lambda: TOKEN)
    # An https:// URL is checked against the default roots; tls= makes any scheme TLS.
    assert ChannelSecurity("https://broker:6650", token=TOKEN).always_tls
    assert ChannelSecurity("http://broker:6650", tls=TlsOptions(), token=TOKEN).always_tls
    assert not ChannelSecurity("http://broker:6650").always_tls


def test_token_and_supplier_are_exclusive() -> None:
    with pytest.raises(ValueError, match="not both"):
        DanubeClient("https://h:1", token=TOKEN, token_supplier=lambda: TOKEN)


@pytest.mark.parametrize(
    ("token", "reason"),
    [("", "empty"), ("Bearer abc", "Bearer"), ("abc def", "whitespace"), ("abc\n", "line break")],
)
def test_malformed_tokens_are_refused(token: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        DanubeClient("https://h:1", token=token)


def test_tls_files_are_checked_when_the_client_is_made(certs: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the TLS CA certificate file .*missing\.pem"):
        DanubeClient("https://h:1", tls=TlsOptions(ca_file=tmp_path / "missing.pem"))
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(ConfigError, match="is not PEM"):
        DanubeClient("https://h:1", tls=TlsOptions(ca_file=tmp_path / "junk.pem"))
    with pytest.raises(ConfigError, match="give both cert_file and key_file"):
        DanubeClient("https://h:1", tls=TlsOptions(ca_file=certs / "ca.pem", cert_file=certs / "admin.pem"))


def test_auth_hint_is_added_once() -> None:
    err = with_auth_hint(error_from_status(grpc.StatusCode.UNAUTHENTICATED, "Invalid token"))
    assert isinstance(err, Unauthenticated) and err.message == f"Invalid token ({UNAUTHENTICATED_HINT})"
    assert with_auth_hint(err) is err
    denied = with_auth_hint(error_from_status(grpc.StatusCode.PERMISSION_DENIED, "no produce on /default/t"))
    assert isinstance(denied, PermissionDenied) and PERMISSION_DENIED_HINT in denied.message
    other = error_from_status(grpc.StatusCode.NOT_FOUND, "gone")
    assert with_auth_hint(other) is other
