"""The interceptor end to end over loopback: plaintext, TLS and mTLS, unary and streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from danube_common.errors import error_from_rpc
from danube_common.grpc_util import new_server
from danube_common.keys import Keys
from danube_common.metadata.memory import MemoryStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.security.config import AuthConfig, JwtConfig
from danube_common.security.interceptor import AuthInterceptor, current_principal
from danube_common.security.rbac import Binding, Resource
from danube_common.security.rules import RULES, Handle, HandleInfo
from danube_common.security.security_store import SecurityStore
from danube_common.security.security_view import SecurityView
from danube_common.security.tls import TlsConfig, bind_server, channel_credentials
from danube_common.security.tokens import issue_token
from tests.support.certs import issue, make_ca

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

SECRET = "k" * 40
ISSUER = "danube-test"
KEYS = Keys("c1")


class Producer(pb_grpc.ProducerServiceServicer):
    async def CreateProducer(self, request: Any, context: Any) -> pb.ProducerResponse:
        p = current_principal()
        return pb.ProducerResponse(request_id=request.request_id, producer_id=7, producer_name=str(p))

    async def PublishBatches(self, request_iterator: Any, context: Any) -> AsyncIterator[pb.PublishAck]:
        async for batch in request_iterator:
            yield pb.PublishAck(batch_seq=batch.batch_seq, count=len(batch.messages))


class Consumer(pb_grpc.ConsumerServiceServicer):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[int] = asyncio.Queue()

    async def ReceiveMessages(self, request: Any, context: Any) -> AsyncIterator[pb.StreamMessage]:
        while True:
            n = await self.queue.get()
            yield pb.StreamMessage(request_id=n)


class Stats(apb_grpc.BrokerStatsServiceServicer):
    async def GetBrokerStats(self, request: Any, context: Any) -> apb.BrokerStats:
        return apb.BrokerStats(broker_id=str(current_principal()))


def _resolve(handle: Handle) -> HandleInfo | None:
    return {
        ("producer", 7): HandleInfo(Resource.topic("/orders/new"), "user:alice"),
        ("consumer", 9): HandleInfo(Resource.topic("/orders/new"), "user:alice"),
        ("producer", 11): HandleInfo(Resource.topic("/orders/new"), None),  # the broker's own
    }.get((handle.kind, handle.id))


class Cluster:
    """A server with the interceptor, backed by an in-memory store and a security view."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.store = MemoryStore()
        self.sec = SecurityStore(self.store, KEYS)
        self.view = SecurityView(self.store, KEYS)
        self.consumer = Consumer()
        self.server: grpc.aio.Server | None = None
        self.port = 0
        #: The status of every refusal, as the interceptor reports them (its on_denied hook).
        self.denied: list[grpc.StatusCode] = []
        (tmp / "secret").write_text(SECRET)

    async def start(self, tls: TlsConfig | None = None, **auth: Any) -> None:
        await self.view.start()
        cfg = AuthConfig(
            enabled=True,
            jwt=JwtConfig(issuer=ISSUER, secret_file=str(self.tmp / "secret")),
            super_admins=["root"],
            stream_recheck_interval_s=0.0,
            **auth,
        )
        icp = AuthInterceptor.from_config(cfg, self.view, resolve_handle=_resolve)
        icp.on_denied = self.denied.append
        self.server = new_server([icp])
        pb_grpc.add_ProducerServiceServicer_to_server(Producer(), self.server)
        pb_grpc.add_ConsumerServiceServicer_to_server(self.consumer, self.server)
        apb_grpc.add_BrokerStatsServiceServicer_to_server(Stats(), self.server)
        self.port = bind_server(self.server, "127.0.0.1:0", tls)
        await self.server.start()

    async def grant(self, principal: str, role: str, scope: str, resource: str = "", name: str = "b1") -> int:
        rev = await self.sec.create_binding(Binding.create(name, principal, role, scope, resource))
        assert await self.view.wait_revision(rev)
        return rev

    async def aclose(self) -> None:
        if self.server is not None:
            await self.server.stop(None)
        await self.view.aclose()
        await self.store.aclose()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    await c.aclose()


def _token(name: str = "alice", *, ttl_s: float = 600, key: str = SECRET, **kw: Any) -> str:
    return issue_token(name, "user", name, ttl_s, key, ISSUER, **kw)


def _md(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token is not None else ()


async def _status(call: Any) -> tuple[grpc.StatusCode, str, str]:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        err = error_from_rpc(exc)
        return exc.code(), exc.details() or "", err.code
    return grpc.StatusCode.OK, "", ""


async def test_unary_table_plaintext(cluster: Cluster) -> None:
    await cluster.start()
    await cluster.grant("user:alice", "producer", "namespace", "orders")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.port}") as ch:
        stub = pb_grpc.ProducerServiceStub(ch)
        req = pb.ProducerRequest(topic_name="/orders/new")
        cases = [
            (None, grpc.StatusCode.UNAUTHENTICATED, "missing"),
            ("garbage", grpc.StatusCode.UNAUTHENTICATED, "malformed"),
            (_token(ttl_s=1, now=0), grpc.StatusCode.UNAUTHENTICATED, "expired"),
            (_token(key="x" * 40), grpc.StatusCode.UNAUTHENTICATED, "bad_signature"),
            (
                _token("bob"),
                grpc.StatusCode.PERMISSION_DENIED,
                "user:bob may not produce on topic /orders/new",
            ),
            (_token(), grpc.StatusCode.OK, ""),
            (_token("root"), grpc.StatusCode.OK, ""),  # super admin
        ]
        for token, code, text in cases:
            got, details, _ = await _status(stub.CreateProducer(req, metadata=_md(token), timeout=10))
            assert (got, text in details) == (code, True), (token, got, details)
        resp = await stub.CreateProducer(req, metadata=_md(_token()), timeout=10)
        assert resp.producer_name == "user:alice"  # the servicer sees the principal
        _, _, code = await _status(stub.CreateProducer(req, metadata=_md(_token(ttl_s=1, now=0)), timeout=10))
        assert code == "TOKEN_EXPIRED"
        _, details, _ = await _status(
            stub.CreateProducer(pb.ProducerRequest(topic_name="/other/t"), metadata=_md(_token()), timeout=10)
        )
        assert "produce" in details and "/other/t" in details


async def test_refusals_are_reported_to_on_denied(cluster: Cluster) -> None:
    await cluster.start()
    await cluster.grant("user:alice", "producer", "namespace", "orders")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.port}") as ch:
        stub = pb_grpc.ProducerServiceStub(ch)
        req = pb.ProducerRequest(topic_name="/orders/new")
        for token in (None, _token("bob"), _token(), _token("root")):
            await _status(stub.CreateProducer(req, metadata=_md(token), timeout=10))
        # A stream refused at its first message, and an unserved method refused like a served one.
        batches = [pb.PublishBatch(producer_id=7, batch_seq=1)]
        await _status(_drain(stub.PublishBatches(iter(batches), metadata=_md(_token("bob")), timeout=10)))
        admin = apb_grpc.TopicAdminStub(ch)
        await _status(admin.ListTopics(apb.ListTopicsRequest(), metadata=_md(None), timeout=10))
    assert cluster.denied == [
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    ]


async def _drain(call: Any) -> None:
    async for _ in call:
        pass


async def test_client_stream_checks_every_target(cluster: Cluster) -> None:
    await cluster.start()
    await cluster.grant("user:alice", "producer", "topic", "/orders/new")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.port}") as ch:
        stub = pb_grpc.ProducerServiceStub(ch)
        call = stub.PublishBatches(metadata=_md(_token()), timeout=10)
        await call.write(pb.PublishBatch(producer_id=7, batch_seq=1))
        assert (await call.read()).batch_seq == 1
        await call.write(pb.PublishBatch(producer_id=8, batch_seq=2))  # unknown here: passes to the servicer
        assert (await call.read()).batch_seq == 2
        await call.done_writing()
        assert await call.read() == grpc.aio.EOF
        # bob may not publish with producer 7 (attached to /orders/new)
        call = stub.PublishBatches(metadata=_md(_token("bob")), timeout=10)
        await call.write(pb.PublishBatch(producer_id=7, batch_seq=1))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_id_only_calls_are_for_the_handles_creator(cluster: Cluster) -> None:
    """Producer 7 was created by user:alice: carol, who may produce on its topic too, may not
    publish with it; a manage_topic holder and a super admin may. A handle with no recorded
    creator (the broker's own) is for those two only."""
    await cluster.start()
    await cluster.grant("user:alice", "producer", "topic", "/orders/new", name="alice")
    await cluster.grant("user:carol", "producer", "topic", "/orders/new", name="carol")
    await cluster.grant("user:carol", "consumer", "topic", "/orders/new", name="carol-consumes")
    await cluster.grant("user:dave", "producer", "topic", "/orders/new", name="dave")
    await cluster.grant("user:dave", "admin", "namespace", "orders", name="dave-admin")

    async def publish(token: str, producer_id: int) -> tuple[grpc.StatusCode, str]:
        call = pb_grpc.ProducerServiceStub(ch).PublishBatches(metadata=_md(token), timeout=10)
        await call.write(pb.PublishBatch(producer_id=producer_id, batch_seq=1))
        await call.done_writing()
        try:
            await call.read()
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
        return grpc.StatusCode.OK, ""

    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.port}") as ch:
        assert await publish(_token("alice"), 7) == (grpc.StatusCode.OK, "")
        code, details = await publish(_token("carol"), 7)
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "user:carol may not use producer 7 on topic /orders/new" in details
        assert "belongs to the principal that created it" in details and "manage_topic" in details
        assert await publish(_token("dave"), 7) == (grpc.StatusCode.OK, "")
        assert await publish(_token("root"), 7) == (grpc.StatusCode.OK, "")
        # The permission on the topic is still needed, and is checked first.
        code, details = await publish(_token("bob"), 7)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "user:bob may not produce" in details
        # No recorded creator: not even alice.
        code, details = await publish(_token("alice"), 11)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "may not use producer 11" in details
        assert await publish(_token("dave"), 11) == (grpc.StatusCode.OK, "")

        # A server stream by id: the same rule.
        consumers = pb_grpc.ConsumerServiceStub(ch)
        call = consumers.ReceiveMessages(pb.ReceiveRequest(consumer_id=9), metadata=_md(_token("carol")))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "may not use consumer 9" in (info.value.details() or "")


async def test_revoked_binding_ends_a_running_stream(cluster: Cluster) -> None:
    await cluster.start()
    await cluster.grant("user:alice", "consumer", "namespace", "orders")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.port}") as ch:
        stub = pb_grpc.ConsumerServiceStub(ch)
        call = stub.ReceiveMessages(pb.ReceiveRequest(consumer_id=9), metadata=_md(_token()), timeout=20)
        cluster.consumer.queue.put_nowait(1)
        assert (await call.read()).request_id == 1
        rev = await cluster.sec.delete_binding("b1")
        assert await cluster.view.wait_revision(rev)
        cluster.consumer.queue.put_nowait(2)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_method_without_rule_is_denied(cluster: Cluster) -> None:
    await cluster.view.start()
    rules = {k: v for k, v in RULES.items() if not k.endswith("/CreateProducer")}
    cfg = AuthConfig(
        enabled=True,
        jwt=JwtConfig(issuer=ISSUER, secret_file=str(cluster.tmp / "secret")),
        super_admins=["root"],
    )
    server = new_server([AuthInterceptor.from_config(cfg, cluster.view, rules=rules)])
    pb_grpc.add_ProducerServiceServicer_to_server(Producer(), server)
    port = bind_server(server, "127.0.0.1:0", None)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.ProducerServiceStub(ch)
            code, details, _ = await _status(
                stub.CreateProducer(
                    pb.ProducerRequest(topic_name="/a/b"), metadata=_md(_token("root")), timeout=10
                )
            )
        assert code == grpc.StatusCode.PERMISSION_DENIED and "default deny" in details
    finally:
        await server.stop(None)


async def test_auth_disabled_lets_everyone_through(tmp_path: Path) -> None:
    server = new_server([AuthInterceptor.from_config(AuthConfig(), StaticPolicyStub())])
    pb_grpc.add_ProducerServiceServicer_to_server(Producer(), server)
    port = bind_server(server, "127.0.0.1:0", None)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            resp = await pb_grpc.ProducerServiceStub(ch).CreateProducer(
                pb.ProducerRequest(topic_name="/a/b"), timeout=10
            )
        assert resp.producer_id == 7
    finally:
        await server.stop(None)


class StaticPolicyStub:
    def role(self, name: str) -> None:
        return None

    def bindings_for(self, principal: str) -> tuple[()]:
        return ()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca()
    (d / "ca.crt").write_bytes(ca.cert_pem)
    out = {"ca": str(d / "ca.crt")}
    for name, server in (("server", True), ("broker-1", False), ("alice", False)):
        out[f"{name}.crt"], out[f"{name}.key"] = issue(ca, name, server=server).write(d, name)
    stranger = make_ca("stranger-ca")
    out["stranger.crt"], out["stranger.key"] = issue(stranger, "broker-2").write(d, "stranger")
    return out


async def test_tls_with_token(cluster: Cluster, pki: dict[str, str]) -> None:
    await cluster.start(TlsConfig(cert_file=pki["server.crt"], key_file=pki["server.key"]))
    await cluster.grant("user:alice", "producer", "cluster")
    creds = channel_credentials(TlsConfig(ca_file=pki["ca"]))
    async with grpc.aio.secure_channel(f"127.0.0.1:{cluster.port}", creds) as ch:
        stub = pb_grpc.ProducerServiceStub(ch)
        req = pb.ProducerRequest(topic_name="/orders/new")
        assert (await _status(stub.CreateProducer(req, metadata=_md(_token()), timeout=10)))[
            0
        ] == grpc.StatusCode.OK
        assert (await _status(stub.CreateProducer(req, timeout=10)))[0] == grpc.StatusCode.UNAUTHENTICATED
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.port}") as ch:  # plaintext client: refused
        code, _, _ = await _status(
            pb_grpc.ProducerServiceStub(ch).CreateProducer(pb.ProducerRequest(topic_name="/a/b"), timeout=5)
        )
        assert code == grpc.StatusCode.UNAVAILABLE


async def test_mtls_identities(cluster: Cluster, pki: dict[str, str]) -> None:
    tls = TlsConfig(
        cert_file=pki["server.crt"], key_file=pki["server.key"], ca_file=pki["ca"], require_client_cert=True
    )
    await cluster.start(tls, internal_identities=["broker-*"])

    def creds(name: str | None) -> grpc.ChannelCredentials:
        if name is None:
            return channel_credentials(TlsConfig(ca_file=pki["ca"]))
        return channel_credentials(
            TlsConfig(cert_file=pki[f"{name}.crt"], key_file=pki[f"{name}.key"], ca_file=pki["ca"])
        )

    target = f"127.0.0.1:{cluster.port}"
    async with grpc.aio.secure_channel(target, creds("broker-1")) as ch:  # a cluster member, no token
        stats = await apb_grpc.BrokerStatsServiceStub(ch).GetBrokerStats(apb.BrokerStatsRequest(), timeout=10)
        assert stats.broker_id == "broker_internal:broker-1"
    async with grpc.aio.secure_channel(target, creds("alice")) as ch:  # a user certificate
        stub = apb_grpc.BrokerStatsServiceStub(ch)
        code, details, _ = await _status(stub.GetBrokerStats(apb.BrokerStatsRequest(), timeout=10))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "user:alice" in details
        await cluster.grant("user:alice", "producer", "cluster")
        resp = await pb_grpc.ProducerServiceStub(ch).CreateProducer(
            pb.ProducerRequest(topic_name="/a/b"), timeout=10
        )
        assert resp.producer_name == "user:alice"
    for name in (None, "stranger"):  # no certificate, or one from another CA: the handshake fails
        async with grpc.aio.secure_channel(target, creds(name)) as ch:
            code, _, _ = await _status(
                apb_grpc.BrokerStatsServiceStub(ch).GetBrokerStats(apb.BrokerStatsRequest(), timeout=5)
            )
            assert code == grpc.StatusCode.UNAVAILABLE


async def test_an_unserved_method_is_refused_as_a_serving_server_would(cluster: Cluster) -> None:
    """danube-client falls back to the service URL when a lookup is refused and sends
    CreateProducer there: the caller must learn why it was refused, not "not implemented"."""
    await cluster.start()
    await cluster.grant("user:alice", "producer", "namespace", "orders")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cluster.port}") as ch:
        lookup = pb_grpc.DiscoveryStub(ch)  # this server serves no Discovery
        req = pb.TopicLookupRequest(request_id=1, topic="/orders/new")
        cases = [
            (None, grpc.StatusCode.UNAUTHENTICATED, "missing"),
            (_token("bob"), grpc.StatusCode.PERMISSION_DENIED, "user:bob may not lookup"),
            (_token(), grpc.StatusCode.UNIMPLEMENTED, "is not served here"),
        ]
        for token, code, text in cases:
            got, details, _ = await _status(lookup.TopicLookup(req, metadata=_md(token), timeout=10))
            assert (got, text in details) == (code, True), (token, got, details)
        # A method no rule names is not invented here: gRPC's own UNIMPLEMENTED.
        unknown = ch.unary_unary(
            "/danube.Nope/Nothing", request_serializer=bytes, response_deserializer=bytes
        )
        got, _, _ = await _status(unknown(b"", metadata=_md(_token()), timeout=10))
        assert got == grpc.StatusCode.UNIMPLEMENTED
