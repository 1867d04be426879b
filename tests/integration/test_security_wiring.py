"""Services with TLS and auth enabled in their config: the lookup and a broker in-process, on
real etcd, with throwaway certificates made by ``danube_local.secure`` and HS256 tokens.

Checks the wiring, not the rules (the rules have their own table tests): a plaintext client is
refused, a TLS client without a token gets UNAUTHENTICATED, a token without a binding
PERMISSION_DENIED, a super admin passes, a binding written to etcd takes effect and its
deletion stops the next call within a second, a broker resolves producer ids to their topics,
a config whose certificate is missing refuses to start (exit 2 from ``service_main``), and a
broker dead-letters to a topic on another broker through that broker's internal listener
(mTLS) while both client ports take clients without certificates.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from danube_broker.app import running as broker_running
from danube_broker.config import BrokerConfig
from danube_common.errors import MD_ERROR_CODE, ConfigError
from danube_common.etcd_server import EtcdProcess
from danube_common.keys import Keys
from danube_common.metadata.etcd import EtcdStore
from danube_common.pb import DanubeAdmin_pb2 as apb
from danube_common.pb import DanubeAdmin_pb2_grpc as apb_grpc
from danube_common.pb import DanubeApi_pb2 as pb
from danube_common.pb import DanubeApi_pb2_grpc as pb_grpc
from danube_common.records import BrokerRecord
from danube_common.resources import Resources
from danube_common.security import Binding, Scope, SecurityStore, issue_token
from danube_common.service import ServiceReady, service_main
from danube_common.topic_name import TopicName
from danube_local.secure import SecureFiles, write_secure_files
from danube_lookup.app import run as lookup_run
from danube_lookup.app import running as lookup_running
from danube_lookup.config import LookupConfig
from tests.support import unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ISSUER = "danube-test"
ADMIN_SUBJECT = "root"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SecureFiles:
    return write_secure_files(tmp_path_factory.mktemp("secure"), ["lookup", "broker-1", "broker-2", "admin"])


@dataclass
class Secured:
    files: SecureFiles

    @property
    def secret(self) -> str:
        assert self.files.jwt_secret is not None
        return self.files.jwt_secret.read_text().strip()

    def token(self, subject: str, *, name: str | None = None) -> str:
        return issue_token(subject, "user", name or subject, 300, self.secret, ISSUER)

    def fields(self, identity: str) -> dict[str, Any]:
        """The ``tls`` and ``auth`` config sections of a service named ``identity``."""
        cert, key = self.files.certs[identity]
        return {
            "tls": {"cert_file": str(cert), "key_file": str(key), "ca_file": str(self.files.ca_cert)},
            "auth": {
                "enabled": True,
                "jwt": {"issuer": ISSUER, "secret_file": str(self.files.jwt_secret)},
                "super_admins": [ADMIN_SUBJECT],
                "internal_identities": ["lookup", "broker-*"],
            },
        }

    def channel(self, port: int) -> grpc.aio.Channel:
        creds = grpc.ssl_channel_credentials(root_certificates=self.files.ca_cert.read_bytes())
        return grpc.aio.secure_channel(f"localhost:{port}", creds)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def error_code(err: grpc.aio.AioRpcError) -> str | None:
    for key, value in err.trailing_metadata() or ():
        if key == MD_ERROR_CODE:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


async def refused(awaitable: Any, status: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await awaitable
    assert err.value.code() == status, err.value
    return err.value


@pytest.fixture
def secured(files: SecureFiles) -> Secured:
    return Secured(files)


def lookup_config(secured: Secured, etcd: EtcdProcess, cluster: str, **overrides: Any) -> LookupConfig:
    fields: dict[str, Any] = {
        "listen_addr": "127.0.0.1:0",
        "admin_listen_addr": "127.0.0.1:0",
        "etcd": {"endpoints": [etcd.endpoint], "cluster": cluster},
        **secured.fields("lookup"),
    }
    fields.update(overrides)
    return LookupConfig.model_validate(fields)


@pytest.fixture
async def secure_lookup(
    secured: Secured, etcd_server: EtcdProcess, cluster_name: str
) -> AsyncIterator[ServiceReady]:
    async with lookup_running(lookup_config(secured, etcd_server, cluster_name)) as info:
        yield info


def port_of(addr: str) -> int:
    return int(addr.rpartition(":")[2])


async def test_lookup_with_tls_and_auth(
    secured: Secured, secure_lookup: ServiceReady, etcd_store: EtcdStore, keys: Keys
) -> None:
    # A broker registered in etcd, so TopicLookup has somewhere to send a topic.
    lease = await etcd_store.grant_lease(30)
    rec = BrokerRecord("b1", "127.0.0.1:7001", "http://127.0.0.1:7001", "active", 1)
    await etcd_store.put(keys.broker("b1"), rec.to_json(), lease=lease)
    topic = f"/default/{unique('sec')}"
    lookup = pb.TopicLookupRequest(request_id=1, topic=topic)
    port, admin_port = port_of(secure_lookup.addr), port_of(secure_lookup.admin_addr)

    async with grpc.aio.insecure_channel(secure_lookup.addr) as plain:
        await refused(
            pb_grpc.DiscoveryStub(plain).TopicLookup(lookup, timeout=5), grpc.StatusCode.UNAVAILABLE
        )

    async with secured.channel(port) as channel, secured.channel(admin_port) as admin_channel:
        discovery = pb_grpc.DiscoveryStub(channel)
        namespaces = apb_grpc.NamespaceAdminStub(admin_channel)

        err = await refused(discovery.TopicLookup(lookup, timeout=5), grpc.StatusCode.UNAUTHENTICATED)
        assert "missing" in (err.details() or "").lower()
        assert error_code(err) is not None

        bob = bearer(secured.token("bob"))
        err = await refused(
            discovery.TopicLookup(lookup, timeout=5, metadata=bob), grpc.StatusCode.PERMISSION_DENIED
        )
        assert "user:bob" in (err.details() or "") and error_code(err) is not None
        await refused(
            namespaces.ListNamespaces(apb.ListNamespacesRequest(), timeout=5, metadata=bob),
            grpc.StatusCode.PERMISSION_DENIED,
        )

        root = bearer(secured.token(ADMIN_SUBJECT))

        async def root_lookup() -> pb.TopicLookupResponse | None:
            try:
                return await discovery.TopicLookup(lookup, timeout=5, metadata=root)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:  # no broker seen yet
                    raise
                return None

        resp = await wait_until(root_lookup, what="the super admin's TopicLookup")
        assert resp.response_type == pb.TopicLookupResponse.Redirect
        assert resp.broker_url == "http://127.0.0.1:7001"
        listed = await namespaces.ListNamespaces(apb.ListNamespacesRequest(), timeout=5, metadata=root)
        assert "default" in listed.namespaces

        # A binding in etcd lets bob look topics up; deleting it stops his next call.
        rbac = SecurityStore(etcd_store, keys)
        await rbac.create_binding(Binding("bob-reads", "user:bob", "consumer", Scope.NAMESPACE, "default"))

        async def bob_allowed() -> bool:
            try:
                await discovery.TopicLookup(lookup, timeout=5, metadata=bob)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.PERMISSION_DENIED:
                    raise
                return False
            return True

        await wait_until(bob_allowed, timeout_s=5, what="bob's binding takes effect")
        await rbac.delete_binding("bob-reads")
        await wait_until(lambda: _not(bob_allowed), timeout_s=1.0, what="bob's revoked binding stops him")


async def _not(pred: Any) -> bool:
    return not await pred()


async def test_missing_certificate_refuses_to_start(
    secured: Secured,
    etcd_server: EtcdProcess,
    cluster_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    missing = tmp_path / "nowhere" / "lookup.pem"
    _, key = secured.files.certs["lookup"]
    tls = {"cert_file": str(missing), "key_file": str(key), "ca_file": str(secured.files.ca_cert)}
    cfg = lookup_config(secured, etcd_server, cluster_name, tls=tls)

    with pytest.raises(ConfigError) as err:
        async with lookup_running(cfg):
            pass
    assert str(missing) in err.value.message and "does not exist" in err.value.message

    # The process path: the config is refused before anything runs, exit status 2.
    code = await asyncio.to_thread(
        service_main, lambda: cfg, lookup_run, name=lambda c: "lookup", service="danube-lookup"
    )
    assert code == 2
    assert f"tls.cert_file {str(missing)!r} does not exist" in capsys.readouterr().err


@pytest.fixture
async def secure_broker(
    secured: Secured, etcd_server: EtcdProcess, cluster_name: str, tmp_path: Path
) -> AsyncIterator[ServiceReady]:
    cfg = BrokerConfig.model_validate(
        {
            "data_dir": str(tmp_path / "wal"),
            "broker_id": unique("b"),
            "listen_addr": "127.0.0.1:0",
            "etcd": {"endpoints": [etcd_server.endpoint], "cluster": cluster_name},
            "shutdown_grace_s": 2.0,
            **secured.fields("broker-1"),
        }
    )
    async with broker_running(cfg) as info:
        yield info


async def test_broker_admits_a_permitted_producer_only(
    secured: Secured, secure_broker: ServiceReady, etcd_store: EtcdStore, keys: Keys
) -> None:
    topic = f"/default/{unique('prod')}"
    rbac = SecurityStore(etcd_store, keys)
    revision = await rbac.create_binding(
        Binding("alice-writes", "user:alice", "producer", Scope.TOPIC, topic)
    )
    alice, mallory = bearer(secured.token("alice")), bearer(secured.token("mallory"))
    request = pb.ProducerRequest(request_id=1, producer_name="p", topic_name=topic)

    async with secured.channel(port_of(secure_broker.addr)) as channel:
        producers = pb_grpc.ProducerServiceStub(channel)
        err = await refused(
            producers.CreateProducer(request, timeout=10, metadata=mallory), grpc.StatusCode.PERMISSION_DENIED
        )
        assert "user:mallory" in (err.details() or "")
        await refused(producers.CreateProducer(request, timeout=10), grpc.StatusCode.UNAUTHENTICATED)

        async def created() -> pb.ProducerResponse | None:
            try:
                return await producers.CreateProducer(request, timeout=10, metadata=alice)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.PERMISSION_DENIED:
                    raise
                return None  # the broker's RBAC view has not seen the binding yet

        assert revision > 0
        resp = await wait_until(created, timeout_s=5, what="alice may produce")
        # An id-only call: the broker maps the producer id to its topic, where alice is bound.
        msg = pb.StreamMessage(
            request_id=2,
            msg_id=pb.MsgID(producer_id=resp.producer_id, topic_name=topic),
            payload=b"hello",
            producer_name="p",
        )
        await producers.SendMessage(msg, timeout=10, metadata=alice)
        await refused(
            producers.SendMessage(msg, timeout=10, metadata=mallory), grpc.StatusCode.PERMISSION_DENIED
        )


async def test_dead_letter_to_another_broker_over_its_internal_listener(
    secured: Secured,
    etcd_server: EtcdProcess,
    cluster_name: str,
    tmp_path: Path,
    etcd_store: EtcdStore,
    keys: Keys,
) -> None:
    """Auth on; each broker's client port serves TLS without client certificates (clients send
    a token) and its internal listener requires them. A poison message on broker 1 is copied to
    the dead-letter topic owned by broker 2: broker 1 dials broker 2's registered internal
    address, where its certificate makes it a cluster member; the copy's producer there is
    recorded as created by that member."""

    def broker_cfg(identity: str) -> BrokerConfig:
        return BrokerConfig.model_validate(
            {
                "broker_id": identity,
                "data_dir": str(tmp_path / identity),
                "listen_addr": "127.0.0.1:0",
                "internal_listen_addr": "127.0.0.1:0",
                "etcd": {"endpoints": [etcd_server.endpoint], "cluster": cluster_name},
                "lame_duck_timeout_s": 0,
                "shutdown_grace_s": 1.0,
                **secured.fields(identity),
            }
        )

    root = bearer(secured.token(ADMIN_SUBJECT))
    dlq, topic = f"/default/{unique('dlq')}", f"/default/{unique('src')}"
    async with (
        broker_running(broker_cfg("broker-1")) as one,
        broker_running(broker_cfg("broker-2")) as two,
        secured.channel(port_of(one.addr)) as ch1,
        secured.channel(port_of(two.addr)) as ch2,
    ):
        assert not broker_cfg("broker-1").tls.require_client_cert  # clients need no certificate
        records = {r.broker_id: r for r in await Resources(etcd_store, keys).list_brokers()}
        assert records["broker-2"].internal_addr == two.extra["internal_addr"] != two.addr

        async def attach(channel: grpc.aio.Channel, topic_name: str, sub: str) -> tuple[int, Any]:
            producers, consumers = pb_grpc.ProducerServiceStub(channel), pb_grpc.ConsumerServiceStub(channel)
            p = await producers.CreateProducer(
                pb.ProducerRequest(producer_name="p", topic_name=topic_name, dispatch_strategy=pb.Reliable),
                timeout=10,
                metadata=root,
            )
            c = await consumers.Subscribe(
                pb.ConsumerRequest(
                    topic_name=topic_name,
                    consumer_name="c",
                    subscription=sub,
                    subscription_type=pb.ConsumerRequest.Shared,
                ),
                timeout=10,
                metadata=root,
            )
            stream = consumers.ReceiveMessages(pb.ReceiveRequest(consumer_id=c.consumer_id), metadata=root)
            return int(p.producer_id), stream

        _, dead_letters = await attach(ch2, dlq, "ops")  # the dead-letter topic lives on broker 2
        pid, stream = await attach(ch1, topic, "s")
        policy = {
            "max_redeliveries": 1,
            "redelivery_backoff_base_ms": 0,
            "poison_policy": "dead_letter",
            "dead_letter_topic": dlq,
        }
        await etcd_store.put(keys.subscription_policy(TopicName.parse(topic), "s"), json.dumps(policy))
        engine = one.live.topics[topic].subscriptions["s"].engine
        await wait_until(lambda: engine.policy.max_redeliveries == 1, what="policy applied")
        await wait_until(
            lambda: all(c.connected for c in one.live.consumers.values()), what="consumer stream open"
        )
        producers, consumers = pb_grpc.ProducerServiceStub(ch1), pb_grpc.ConsumerServiceStub(ch1)
        await producers.SendMessage(
            pb.StreamMessage(
                msg_id=pb.MsgID(producer_id=pid, topic_name=topic), payload=b"bad", producer_name="p"
            ),
            timeout=10,
            metadata=root,
        )
        for _ in range(2):
            m = await asyncio.wait_for(stream.read(), 10)
            await consumers.Nack(
                pb.NackRequest(msg_id=m.msg_id, subscription_name="s", delay_ms=0), timeout=10, metadata=root
            )
        copy = await asyncio.wait_for(dead_letters.read(), 10)
        assert copy.payload == b"bad" and copy.msg_id.topic_name == dlq
        assert copy.attributes["x-original-topic"] == topic and dlq not in one.live.topics
        await wait_until(lambda: engine.cursor == 0, what="original acked after the remote copy")
        [member] = [p for p in two.live.producers.values() if p.name == "dead-letter-broker-1"]
        assert member.creator == "broker_internal:broker-1 (certificate)"
        stream.cancel()
        dead_letters.cancel()
